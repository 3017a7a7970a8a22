"""Reading mxlite's settings from ``MXLITE_*`` environment variables, one way for all of them.

Every variable is read the same way: surrounding spaces are ignored, an unset or empty variable
means the default, and a value the variable does not understand raises :class:`ValueError`
naming the variable, the value received and what it accepts. Nothing is silently ignored.

The variables (see docs/reliability.md, "Settings"):

========================== =========================== ==================================================
variable                   reader                      accepts
========================== =========================== ==================================================
MXLITE_DEBUG_COLLECTIVES   :func:`flag`                1/true/yes/on, 0/false/no/off (any case)
MXLITE_COLLECTIVE_TIMEOUT  :func:`seconds`             a number of seconds > 0; ``inf``: no limit
MXLITE_EMULATE_GPUS        :func:`integer`             0 (off) to 16
MXLITE_CPU_KERNELS         :func:`choice`              auto, compiled, numpy (any case)
MXLITE_CUDNN               :func:`choice`              auto (cuDNN where available), off (any case)
MXLITE_HOSTCUDA_CACHE      :func:`text`                a folder (default ``~/.cache/mxlite/hostcuda``)
MXLITE_HOSTCUDA_CXX        :func:`text`                a C++ compiler on PATH, or its path (default g++)
MXLITE_HOSTCUDA_SEED       :func:`integer` (base 0)    an integer from -2^63 to 2^64-1 (``0x5eed``: hex)
========================== =========================== ==================================================
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

__all__ = ["flag", "seconds", "integer", "choice", "text", "raw"]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def raw(name: str) -> str:
    """The variable's value without surrounding spaces ("" when unset)."""
    return os.environ.get(name, "").strip()


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


def choice(name: str, choices: Sequence[str], default: str) -> str:
    """One of ``choices`` in any case (``default`` when unset or empty), returned in lower case.

    Raises:
        ValueError: another value, e.g. "MXLITE_CPU_KERNELS must be one of auto, compiled, numpy, got 'fast'".
    """
    text = raw(name).lower()
    if not text:
        return default
    if text not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {text!r}")
    return text


def text(name: str, default: str) -> str:
    """A free value (a folder, a program): the value without surrounding spaces, ``default`` when unset or empty.

    What the value names is checked where it is used (a compiler not on PATH, a folder that cannot
    be written), with an error naming the variable.
    """
    return raw(name) or default
