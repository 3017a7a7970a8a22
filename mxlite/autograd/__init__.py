"""Define-by-run automatic differentiation (MXNet's ``mx.autograd``).

Usage::

    x = mx.array([1.0, 2.0]); x.attach_grad()
    with mx.autograd.record():
        y = (x * x).sum()
    y.backward()            # x.grad == [2, 4]

    with mx.autograd.record():
        y = (x ** 3).sum()
    dx, = mx.autograd.grad(y, [x], create_graph=True)   # 3 x^2, itself differentiable
    dx.sum().backward()     # x.grad == 6 x

This package is the engine (Tensor, the recording flags, ``backward``, ``grad``, ``Function``); the ops it
records are the op library's (:mod:`mxlite.ops`), which stands above it and completes Tensor at import.
"""

from ._state import (
    is_recording,
    is_training,
    pause,
    predict_mode,
    record,
    set_recording,
    set_training,
    train_mode,
)
from .function import Function, get_symbol, mark_variables
from .higher_order import grad
from .tensor import Tensor, backward

NDArray = Tensor  # mx.autograd.NDArray, as MXNet's autograd module exposes its array type

__all__ = [
    "Function",
    "NDArray",
    "Tensor",
    "backward",
    "get_symbol",
    "grad",
    "is_recording",
    "is_training",
    "mark_variables",
    "pause",
    "predict_mode",
    "record",
    "set_recording",
    "set_training",
    "train_mode",
]
