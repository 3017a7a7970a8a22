"""Reading mxlite's settings from ``MXLITE_*`` environment variables, one way for all of them.

Every variable is read the same way: surrounding spaces are ignored, an unset or empty variable
means the default, and a value the variable does not understand raises :class:`ValueError`
naming the variable, the value received and what it accepts. Nothing is silently ignored.

The variables, what each accepts and its default are :data:`SETTINGS`, the one list of them: every
``MXLITE_*`` variable mxlite reads is there (the readers refuse a name that is not), and the "Settings"
table of docs/reliability.md shows the same rows (``tests/test_env_table.py`` checks both).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["SETTINGS", "Setting", "flag", "seconds", "integer", "choice", "text", "raw"]


class Setting(NamedTuple):
    """One ``MXLITE_*`` variable: its ``name``, the ``reader`` of this module that reads it, what it ``accepts``
    and its ``default`` (what unset or empty means), as docs/reliability.md's "Settings" table shows them;
    ``choices``: the values a :func:`choice` variable accepts (empty for the others)."""

    name: str
    reader: str
    accepts: str
    default: str
    choices: tuple[str, ...] = ()


SETTINGS: tuple[Setting, ...] = (
    Setting("MXLITE_DEBUG_COLLECTIVES", "flag", "1/true/yes/on, 0/false/no/off (any case)", "off"),
    Setting("MXLITE_COLLECTIVE_TIMEOUT", "seconds", "a number of seconds > 0; inf means no limit", "no limit"),
    Setting("MXLITE_EMULATE_GPUS", "integer", "an integer from 0 (off) to 16", "0"),
    Setting("MXLITE_CPU_KERNELS", "choice", "auto, compiled, numpy (any case)", "auto",
            ("auto", "compiled", "numpy")),
    Setting("MXLITE_CUDNN", "choice", "auto (cuDNN for convolution and batch norm where available), off (any case)",
            "auto", ("auto", "off")),
    Setting("MXLITE_HOST_BLAS", "choice", "auto (Intel MKL for large CPU products when the mkl extra is installed), "
            "numpy (NumPy's BLAS for every product), any case", "auto", ("auto", "numpy")),
    Setting("MXLITE_HOSTCUDA_CACHE", "text", "a folder (one that cannot be made or written is named when a build "
            "needs it)", "~/.cache/mxlite/hostcuda"),
    Setting("MXLITE_HOSTCUDA_CXX", "text", "a C++ compiler on PATH, or its path (one that is not there is named "
            "when a build needs it)", "g++"),
    Setting("MXLITE_HOSTCUDA_SEED", "integer", "an integer (Python literals: 0x5eed), from -2^63 to 2^64-1",
            "0x5eed"),
)

_SETTINGS_BY_NAME = {setting.name: setting for setting in SETTINGS}

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def raw(name: str) -> str:
    """The variable's value without surrounding spaces ("" when unset).

    Raises:
        KeyError: ``name`` is not in :data:`SETTINGS` (a variable mxlite reads must be listed there).
    """
    _setting(name)
    return os.environ.get(name, "").strip()


def _setting(name: str) -> Setting:
    try:
        return _SETTINGS_BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} is not in mxlite.device.env.SETTINGS: list it there (and in docs/reliability.md, "
                       "Settings) before reading it") from None


def flag(name: str) -> bool:
    """A switch: 1/true/yes/on turn it on, 0/false/no/off (or unset, or empty) leave it off; any case.

    Raises:
        ValueError: any other value, e.g. "MXLITE_DEBUG_COLLECTIVES must be 1/true/yes/on or
            0/false/no/off, got '2'".
    """
    text = raw(name)
    if text.lower() in _TRUE:
        return True
    if not text or text.lower() in _FALSE:
        return False
    raise ValueError(f"{name} must be {'/'.join(_TRUE)} or {'/'.join(_FALSE)}, got {text!r}")


def seconds(name: str) -> float | None:
    """A duration: a number of seconds > 0; unset, empty or ``inf`` mean no limit (None).

    Raises:
        ValueError: anything else (0, negative, NaN, text), e.g. "MXLITE_COLLECTIVE_TIMEOUT must be a
            positive number of seconds (inf: no limit), got '0'".
    """
    text = raw(name)
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds (inf: no limit), got {text!r}")
    return None if math.isinf(value) else value


def integer(name: str, low: int, high: int, default: int, meaning: str = "", base: int = 10) -> int:
    """An integer from ``low`` to ``high`` (``default`` when unset or empty); ``meaning`` ends the error message.

    ``base`` is :func:`int`'s: 10, or 0 for Python's literals (``0x5eed``, ``0o17``, ``0b101``, ``1_000``).

    Raises:
        ValueError: not an integer in range, e.g. "MXLITE_EMULATE_GPUS must be an integer from 0 (off) to 16
            emulated GPUs, got 'x'".
    """
    text = raw(name)
    if not text:
        return default
    try:
        value = int(text, base)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise ValueError(f"{name} must be an integer from {low} to {high}{meaning}, got {text!r}")
    return value


def choice(name: str, choices: Sequence[str] | None = None, default: str | None = None) -> str:
    """One of ``choices`` in any case (``default`` when unset or empty), returned in lower case; left out,
    ``choices`` and ``default`` are the variable's in :data:`SETTINGS`.

    Raises:
        ValueError: another value, e.g. "MXLITE_CPU_KERNELS must be one of auto, compiled, numpy, got 'fast'".
    """
    setting = _setting(name)
    choices = setting.choices if choices is None else choices
    default = setting.default if default is None else default
    text = raw(name)
    if not text:
        return default
    if text.lower() not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {text!r}")
    return text.lower()


def text(name: str, default: str) -> str:
    """A free value (a folder, a program): the value without surrounding spaces, ``default`` when unset or empty.

    What the value names is checked where it is used (a compiler not on PATH, a folder that cannot
    be written), with an error naming the variable.
    """
    return raw(name) or default
