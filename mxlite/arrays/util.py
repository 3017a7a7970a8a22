"""MXNet's ``mx.util``: the NumPy-semantics switches, scopes and decorators.

mxlite always has NumPy's shape and array semantics (MXNet 2.x's default), so every switch here is
accepted and changes nothing, and the queries say so. They exist so that scripts written for MXNet
(``with mx.util.np_shape(True):``, ``@mx.util.use_np``, ``mx.util.set_np()``) run unchanged.
"""

from __future__ import annotations

from typing import Any, TypeVar

from .np import np_shape
from .npx import is_np_array, is_np_shape, reset_np, set_np

__all__ = ["is_np_array", "is_np_shape", "np_array", "np_shape", "reset_np", "set_np", "set_np_shape", "use_np",
           "use_np_array", "use_np_shape"]

T = TypeVar("T")


def set_np_shape(active: bool) -> bool:
    """MXNet's global switch of NumPy shape semantics: they are always on, so this returns True (the previous state)."""
    return True


def np_array(active: bool = True) -> Any:
    """MXNet's ``np_array(active)`` scope (NumPy array semantics): a scope that changes nothing, also a decorator."""
    return np_shape(active)


def use_np_shape(func: T) -> T:
    """MXNet's decorator turning on NumPy shape semantics for a function or class: returns it unchanged."""
    return func


def use_np_array(func: T) -> T:
    """MXNet's decorator turning on NumPy array semantics for a function or class: returns it unchanged."""
    return func


def use_np(func: T) -> T:
    """MXNet's ``use_np`` (both semantics) for a function or a Block class: returns it unchanged."""
    return func
