"""Parsing Gluon's ``compression_params`` into a codec (:func:`create`)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from .codecs import Codec, _HalfWire, _Threshold, _TopK, _TwoBit

__all__ = ["create", "TYPES"]

TYPES = ("none", "2bit", "topk", "threshold", "fp16", "bf16")
_DEFAULT_2BIT_THRESHOLD = 0.5  # MXNet's GradientCompression default


def create(params: Mapping[str, Any] | None) -> Codec | None:
    """The codec described by Gluon's ``compression_params``, or None for no compression.

    Accepted (numbers may also be numeric strings, as MXNet passes them):

    * ``None`` or ``{'type': 'none'}``: no compression;
    * ``{'type': '2bit', 'threshold': t}``: t > 0, default 0.5;
    * ``{'type': 'topk', 'ratio': r}``: 0 < r <= 1, required;
    * ``{'type': 'threshold', 'threshold': t}``: t > 0, required;
    * ``{'type': 'fp16'}`` / ``{'type': 'bf16'}``, optionally ``'clip': c`` (c > 0).

    Raises:
        TypeError: ``params`` is not a mapping.
        ValueError: an unknown type or key, or a missing or invalid value (the message names
            the key and the value).
    """
    if params is None:
        return None
    if not isinstance(params, Mapping):
        raise TypeError(f"compression_params must be a dict such as {{'type': '2bit', 'threshold': 0.5}}, "
                        f"got {type(params).__name__}: {params!r}")
    if "type" not in params:
        raise ValueError(f"compression_params['type'] is required (one of {', '.join(TYPES)}), got {dict(params)!r}")
    kind = params["type"]
    if not isinstance(kind, str) or kind.lower() not in TYPES:
        raise ValueError(f"compression_params['type'] must be one of {', '.join(TYPES)}, got {kind!r}")
    kind = kind.lower()
    allowed = _KEYS[kind]
    for key in params:
        if key != "type" and key not in allowed:
            known = ", ".join(repr(k) for k in allowed) or "none"
            raise ValueError(f"compression_params[{key!r}] is not a parameter of type {kind!r} "
                             f"(its parameters: {known}), got {params[key]!r}")
    if kind == "none":
        return None
    if kind == "2bit":
        threshold = _number(params, "threshold", _DEFAULT_2BIT_THRESHOLD)
        _require(threshold > 0, "threshold", params.get("threshold"), "must be > 0")
        return _TwoBit({"type": kind, "threshold": threshold})
    if kind == "topk":
        ratio = _number(params, "ratio", None, kind)
        _require(0 < ratio <= 1, "ratio", params["ratio"], "must be in (0, 1]")
        return _TopK({"type": kind, "ratio": ratio})
    if kind == "threshold":
        threshold = _number(params, "threshold", None, kind)
        _require(threshold > 0, "threshold", params["threshold"], "must be > 0")
        return _Threshold({"type": kind, "threshold": threshold})
    normalised: dict[str, Any] = {"type": kind}
    if "clip" in params:
        clip = _number(params, "clip", None, kind)
        _require(clip > 0, "clip", params["clip"], "must be > 0")
        normalised["clip"] = clip
    return _HalfWire(normalised)


_KEYS = {"none": (), "2bit": ("threshold",), "topk": ("ratio",), "threshold": ("threshold",), "fp16": ("clip",),
         "bf16": ("clip",)}


def _number(params: Mapping[str, Any], key: str, default: float | None, kind: str = "") -> float:
    """``params[key]`` as a finite float (``default`` when absent; required when ``default`` is None)."""
    if key not in params:
        if default is None:
            raise ValueError(f"compression_params[{key!r}] is required for type {kind!r}, got {dict(params)!r}")
        return float(default)
    value = params[key]
    try:
        if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
            raise TypeError
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"compression_params[{key!r}] must be a number, got {value!r}") from None
    _require(math.isfinite(number), key, value, "must be finite")
    return number


def _require(ok: bool, key: str, value: Any, what: str) -> None:
    if not ok:
        raise ValueError(f"compression_params[{key!r}] {what}, got {value!r}")

