"""Gradient compression: codecs that shrink what each contribution sends when gradients are summed.

Purpose: Gluon's ``compression_params`` (``Trainer(..., compression_params=...)`` or
``KVStore.set_gradient_compression``) choose a codec; :func:`create` parses the dict and returns
a :class:`Codec` (or None for no compression). ``codec.reduce(grads, residuals, out, comm)``
then replaces an all-reduce: every local gradient buffer (one per device, the *contributions*)
is compressed where it lives, the payloads of every process are exchanged, and every rank
decompresses all of them and sums them into ``out``.

Example::

    codec = create({'type': '2bit', 'threshold': 0.5})
    residuals = [np.zeros_like(g, dtype=np.float32) for g in grads]   # kept across steps
    codec.reduce(grads, residuals, out, comm)                         # out = sum of what was sent

Codecs (float32 math throughout):

* ``2bit`` (MXNet's 2-bit quantisation, bit for bit): ``r += g``; send +threshold where
  ``r >= threshold`` (then ``r -= threshold``), -threshold where ``r <= -threshold`` (then
  ``r += threshold``), else 0. Sixteen values per 32-bit word, in MXNet's layout
  (:func:`quantize_2bit`).
* ``topk`` (SINGA-style local accumulation): ``r += g``; send the ``k = max(1, ceil(ratio * n))``
  elements of largest ``|r|`` (ties: lowest index first; NaN counts as largest) as (indices,
  values) and zero them in ``r``.
* ``threshold``: ``r += g``; send every element with ``|r| >= threshold`` and zero it in ``r``.
* ``fp16`` / ``bf16``: each contribution sends ``half(clip(g, -clip, clip) * (1/N))``, N the
  number of contributions (local buffers times processes), and the receiver sums
  ``float32(wire) * N``: the 1/N pre-scale is fused into the cast, so a sum whose half would
  overflow still arrives. bfloat16 travels as uint16 bit patterns (NumPy and CuPy have no
  bfloat16 dtype), rounded to nearest even; NaN stays NaN (the wire's canonical quiet NaN).

The first three keep a per-element float32 *residual* on the sender (error feedback): what was
not sent is added to the next step's gradient, so nothing is lost, only delayed.

Buffer flow of ``reduce``: compress each ``grads[i]`` on its device (residual updated in place)
-> with several processes, copy every payload to the host, concatenate this rank's payloads into
one byte buffer and ``comm.allgather`` it -> on ``out``'s device, decompress every contribution
in rank order, then local order, adding each into a float32 sum that starts at zero -> write
the sum into ``out``. The order is fixed and every rank decodes the same bytes, so every rank
(and every mirror) gets identical bits.

Byte format of one contribution in the exchange (each a multiple of 4 bytes, so that every
array view is aligned): 2bit: ``ceil(n/16)`` uint32 words; topk/threshold: an int32 count m,
m int32 indices (ascending), m float32 values; fp16/bf16: n uint16 values and 2 zero bytes when
n is odd. A rank's buffer is the concatenation over its local contributions; for threshold,
whose size varies, buffers are zero-padded to the longest (an allgather of the sizes first) so
that carriers needing equal sizes (NCCL) can take them.

Each low-level function has a NumPy twin (NumPy arrays) and a CUDA path (CuPy arrays) running
``kernels/compression.cu``; both give the same bits (tests/test_compression.py).

Where mxlite differs from MXNet: MXNet compresses only the worker-to-server push and has no
top-k, threshold or half-precision wire codecs; mxlite compresses every contribution of a
reduction, and each rank decompresses all of them itself (no server).

Warnings:
    * Residuals are the caller's: pass the same arrays every step (one per local buffer).
    * Every rank must pass the same number of gradients of the same sizes, with the same codec.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from .._copy import as_host, copy_between
from .._kernels import get_kernel
from ..device import Device, device_of
from .base import Communicator

__all__ = ["Codec", "create", "quantize_2bit", "dequantize_2bit", "topk_count", "topk_select", "threshold_select",
           "to_wire", "from_wire", "TYPES"]

TYPES = ("none", "2bit", "topk", "threshold", "fp16", "bf16")
_DEFAULT_2BIT_THRESHOLD = 0.5  # MXNet's GradientCompression default

_KERNEL_FILE = "compression.cu"
_TYPE_NAMES = {"float32": "float", "float16": "__half"}
_WIRE_NAMES = {"float16": "f16_wire", "bfloat16": "bf16_wire"}
_ALL_NAMES = (
    *(f"quantize_2bit<{t}>" for t in _TYPE_NAMES.values()),
    "dequantize_2bit",
    *(f"residual_accumulate<{t}>" for t in _TYPE_NAMES.values()),
    *(f"threshold_compact<{t}>" for t in _TYPE_NAMES.values()),
    "take_and_zero",
    "scatter_add",
    *(f"to_wire<{t}, {w}>" for t in _TYPE_NAMES.values() for w in _WIRE_NAMES.values()),
    *(f"from_wire<{w}>" for w in _WIRE_NAMES.values()),
)
_THREADS = 256  # threads per block: a multiple of the warp size with good occupancy on sm_80+
_MAX_BLOCKS = 65535  # enough blocks to fill any current GPU; the kernels loop grid-stride past it
_MAX_INDEX = 2**31 - 1  # sparse messages carry int32 indices


# -- parsing compression_params ------------------------------------------------------------------
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


# -- codecs ------------------------------------------------------------------------------------------
class Codec:
    """A gradient compression scheme and its exchange; built by :func:`create`.

    Attributes:
        params: the normalised parameters (JSON-able), e.g. ``{'type': '2bit', 'threshold': 0.5}``.
        needs_residual: whether :meth:`reduce` needs one float32 residual per gradient
            (error feedback: 2bit, topk, threshold), or ignores ``residuals`` (fp16, bf16).
    """

    needs_residual = True
    _variable_size = False  # payload sizes may differ between ranks (padded for the exchange)

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params

    def __repr__(self) -> str:
        return f"Codec({self.params!r})"

    def reduce(self, grads: Sequence[Any], residuals: Sequence[Any | None], out: Any,
               comm: Communicator | None = None) -> None:
        """``out[...] =`` the sum of what every contribution sent (see the module docstring).

        Args:
            grads: 1-D float32 or float16 NumPy/CuPy arrays of equal size, on any devices
                (several may share one); read only, so ``out`` may be one of them.
            residuals: per gradient, a float32 array of its size on its device, updated in
                place; entries are ignored (may be None) when ``needs_residual`` is False.
            out: 1-D float32 or float16 array of the same size, on any device.
            comm: with ``comm.size > 1``, the sum also runs over every process of ``comm``
                (each passing the same number of gradients of the same sizes).

        Raises:
            ValueError: a size, dtype, shape or device mismatch (naming the index); a peer's
                payload that does not parse (naming the rank).
        """
        grads, residuals = list(grads), list(residuals)
        n = self._check(grads, residuals, out)
        ranks = comm.size if comm is not None and comm.size > 1 else 1
        contributions = len(grads) * ranks
        home = device_of(out)
        payloads = [self._encode(g, r, contributions) for g, r in zip(grads, residuals)]
        if ranks == 1:
            messages = [tuple(copy_between(a, device_of(a), home, copy=False) for a in p) for p in payloads]
        else:
            messages = self._exchange(payloads, n, comm, home)
        with home.use():
            contiguous = out.dtype == np.float32 and out.flags.c_contiguous
            total = out if contiguous else home.xp.empty(n, np.float32)
            total.fill(0)
            for payload in messages:
                self._decode(payload, n, total, contributions)
            if total is not out:
                out[...] = total

    # -- the exchange -----------------------------------------------------------------------------
    def _exchange(self, payloads: list[tuple[Any, ...]], n: int, comm: Communicator,
                  home: Device) -> list[tuple[Any, ...]]:
        """Every rank's payloads, in rank then local order, as arrays on ``home`` (views of one copy per rank)."""
        mine = np.concatenate([self._serialize(p) for p in payloads]) if payloads else np.zeros(0, np.uint8)
        if self._variable_size:
            longest = int(max(s[0] for s in comm.allgather(np.array([mine.size], np.int64))))
            mine = np.concatenate([mine, np.zeros(longest - mine.size, np.uint8)])
        messages = []
        for rank, host in enumerate(comm.allgather(mine)):
            host = np.ascontiguousarray(host).view(np.uint8)
            on_home = copy_between(host, Device("cpu", 0), home, copy=False)
            offset = 0
            for i in range(len(payloads)):
                try:
                    payload, offset = self._deserialize(host, on_home, offset, n)
                except (ValueError, IndexError) as exc:
                    raise ValueError(f"the payload of rank {rank}, contribution {i}, does not parse as a "
                                     f"{self.params['type']} message for {n} elements ({exc}); do all ranks pass "
                                     f"the same gradients with the same codec?") from None
                messages.append(payload)
        return messages

    # -- per codec --------------------------------------------------------------------------------
    def _encode(self, grad: Any, residual: Any, contributions: int) -> tuple[Any, ...]:
        """Compress one contribution on its device (updating ``residual``); its payload arrays."""
        raise NotImplementedError

    def _serialize(self, payload: tuple[Any, ...]) -> np.ndarray:
        """The payload as host bytes (uint8, a multiple of 4 long)."""
        raise NotImplementedError

    def _deserialize(self, host: np.ndarray, on_home: Any, offset: int, n: int) -> tuple[tuple[Any, ...], int]:
        """The payload at byte ``offset`` as views of ``on_home`` (sizes read from ``host``), and the next offset."""
        raise NotImplementedError

    def _decode(self, payload: tuple[Any, ...], n: int, total: Any, contributions: int) -> None:
        """``total += `` what the payload sent (``total`` float32 on the payload's device)."""
        raise NotImplementedError

    # -- validation --------------------------------------------------------------------------------
    def _check(self, grads: list[Any], residuals: list[Any], out: Any) -> int:
        if not grads:
            raise ValueError("reduce needs at least one gradient")
        if len(residuals) != len(grads):
            raise ValueError(f"reduce: {len(residuals)} residuals for {len(grads)} gradients")
        n = int(grads[0].size)
        for i, g in enumerate(grads):
            _check_vector(g, f"grads[{i}]", (np.float32, np.float16))
            if g.size != n:
                raise ValueError(f"grads[{i}] has {g.size} elements, grads[0] has {n}; they must match")
            if self.needs_residual:
                if residuals[i] is None:
                    raise ValueError(f"residuals[{i}] is None; {self.params['type']} compression needs a float32 "
                                     f"residual per gradient (zeros at the start, kept across steps)")
                _check_residual(residuals[i], g, f"residuals[{i}]", f"grads[{i}]")
        _check_vector(out, "out", (np.float32, np.float16))
        if out.size != n:
            raise ValueError(f"out has {out.size} elements, the gradients {n}; they must match")
        return n


def _sparse_bytes(payload: tuple[Any, ...]) -> np.ndarray:
    indices, values = (as_host(a) for a in payload)
    count = np.array([indices.size], np.int32)
    return np.concatenate([count.view(np.uint8), indices.astype(np.int32, copy=False).view(np.uint8),
                           values.astype(np.float32, copy=False).view(np.uint8)])


class _TwoBit(Codec):
    """MXNet's 2-bit quantisation with error feedback (:func:`quantize_2bit`)."""

    def _encode(self, grad: Any, residual: Any, contributions: int) -> tuple[Any, ...]:
        return (quantize_2bit(grad, residual, self.params["threshold"]),)

    def _serialize(self, payload: tuple[Any, ...]) -> np.ndarray:
        return as_host(payload[0]).view(np.uint8)

    def _deserialize(self, host: np.ndarray, on_home: Any, offset: int, n: int) -> tuple[tuple[Any, ...], int]:
        end = offset + 4 * _words(n)
        if end > host.size:
            raise ValueError(f"{host.size - offset} bytes left, {end - offset} needed")
        return (on_home[offset:end].view(np.uint32),), end

    def _decode(self, payload: tuple[Any, ...], n: int, total: Any, contributions: int) -> None:
        dequantize_2bit(payload[0], n, self.params["threshold"], out=total, accumulate=True)


class _Sparse(Codec):
    """A codec sending (indices, values) of part of the residual; the receiver scatter-adds them."""

    def _serialize(self, payload: tuple[Any, ...]) -> np.ndarray:
        return _sparse_bytes(payload)

    def _deserialize(self, host: np.ndarray, on_home: Any, offset: int, n: int) -> tuple[tuple[Any, ...], int]:
        m = int(host[offset:offset + 4].view(np.int32)[0])
        end = offset + 4 + 8 * m
        if not 0 <= m <= n or end > host.size:
            raise ValueError(f"count {m}")
        indices = on_home[offset + 4: offset + 4 + 4 * m].view(np.int32)
        values = on_home[offset + 4 + 4 * m: end].view(np.float32)
        return (indices, values), end

    def _decode(self, payload: tuple[Any, ...], n: int, total: Any, contributions: int) -> None:
        _scatter_add(payload[0], payload[1], total)


class _TopK(_Sparse):
    """Top-k sparsification with local accumulation (:func:`topk_select`), k per reduced buffer."""

    def _encode(self, grad: Any, residual: Any, contributions: int) -> tuple[Any, ...]:
        return topk_select(grad, residual, topk_count(self.params["ratio"], grad.size))


class _Threshold(_Sparse):
    """Threshold sparsification with local accumulation (:func:`threshold_select`)."""

    _variable_size = True

    def _encode(self, grad: Any, residual: Any, contributions: int) -> tuple[Any, ...]:
        return threshold_select(grad, residual, self.params["threshold"])


class _HalfWire(Codec):
    """float16 or bfloat16 on the wire, pre-scaled by 1/N in the cast (:func:`to_wire`, :func:`from_wire`)."""

    needs_residual = False

    @property
    def _wire(self) -> str:
        return "float16" if self.params["type"] == "fp16" else "bfloat16"

    def _encode(self, grad: Any, residual: Any, contributions: int) -> tuple[Any, ...]:
        return (to_wire(grad, self._wire, np.float32(1.0 / contributions), self.params.get("clip")),)

    def _serialize(self, payload: tuple[Any, ...]) -> np.ndarray:
        raw = as_host(payload[0]).view(np.uint8)
        return np.concatenate([raw, np.zeros(2, np.uint8)]) if raw.size % 4 else raw

    def _deserialize(self, host: np.ndarray, on_home: Any, offset: int, n: int) -> tuple[tuple[Any, ...], int]:
        end = offset + 2 * n
        if end > host.size:
            raise ValueError(f"{host.size - offset} bytes left, {end - offset} needed")
        wire = on_home[offset:end].view(np.float16 if self._wire == "float16" else np.uint16)
        return (wire,), end + (2 if n % 2 else 0)

    def _decode(self, payload: tuple[Any, ...], n: int, total: Any, contributions: int) -> None:
        from_wire(payload[0], self._wire, np.float32(contributions), total, accumulate=True)


# -- low-level codecs: NumPy twin or CUDA kernel, chosen by the array type ---------------------------
def quantize_2bit(grad: Any, residual: Any, threshold: float) -> Any:
    """MXNet's 2-bit quantisation of ``residual + grad``; returns the packed uint32 words.

    Per element, in float32: ``r += g``; ``r >= threshold``: code 11 (+threshold), ``r -= threshold``;
    ``r <= -threshold``: code 10 (-threshold), ``r += threshold``; else code 00 (0). Value j of
    word w (element ``16*w + j``) lives in byte ``j // 4`` of the word in memory order, in bits
    0xc0 / 0x30 / 0x0c / 0x03 for ``j % 4`` = 0..3. ``ceil(n/16)`` words; the unused codes of the
    last word are 00.

    Args:
        grad: 1-D float32 or float16 array (NumPy, or CuPy: kernel ``quantize_2bit``).
        residual: float32 array of grad's size on grad's device; updated in place.
        threshold: > 0.

    Raises:
        ValueError: bad threshold, shapes, dtypes or devices.
    """
    th = _positive(threshold, "threshold")
    n = _check_pair(grad, residual)
    words = _words(n)
    if not isinstance(grad, np.ndarray):
        device = device_of(grad)
        with device.use():
            packed = device.xp.empty(words, np.uint32)
        _launch(f"quantize_2bit<{_type_name(grad)}>", device, words,
                (grad, residual, packed, np.int64(n), th))
        return packed
    residual += grad                                     # r += g
    pos = residual >= th
    neg = residual <= -th
    np.subtract(residual, th, out=residual, where=pos)   # sent +th: r -= th
    np.add(residual, th, out=residual, where=neg)        # sent -th: r += th
    codes = np.zeros(16 * words, np.uint8)
    codes[:n][pos] = 3
    codes[:n][neg] = 2
    c = codes.reshape(-1, 4)
    packed_bytes = ((c[:, 0] << 6) | (c[:, 1] << 4) | (c[:, 2] << 2) | c[:, 3]).astype(np.uint8)
    return packed_bytes.view("<u4")


def dequantize_2bit(packed: Any, size: int, threshold: float, out: Any = None, accumulate: bool = False) -> Any:
    """Decode :func:`quantize_2bit`'s words: 11 -> +threshold, 10 -> -threshold, else 0 (float32).

    Args:
        packed: at least ``ceil(size/16)`` words, uint32 (or float32 words as MXNet stores them).
        size: number of values.
        threshold: > 0.
        out: float32 array of ``size`` on packed's device (default: a new one).
        accumulate: add the values to ``out`` instead of overwriting it.

    Returns:
        ``out``.

    Raises:
        ValueError: bad threshold, sizes, dtypes or devices.
    """
    th = _positive(threshold, "threshold")
    size = int(size)
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    _check_vector(packed, "packed", (np.uint32, np.float32))
    words = _words(size)
    if packed.size < words:
        raise ValueError(f"packed has {packed.size} words; {size} values need {words}")
    packed = packed.view(np.uint32)
    device = device_of(packed)
    if out is None:
        with device.use():
            out = device.xp.zeros(size, np.float32)
        accumulate = False
    _check_out(out, size, packed, "packed")
    if not isinstance(packed, np.ndarray):
        _launch("dequantize_2bit", device, size, (packed, out, np.int64(size), th, np.int32(bool(accumulate))))
        return out
    raw = np.ascontiguousarray(packed[:words]).view(np.uint8)
    codes = ((raw[:, None] >> np.array([6, 4, 2, 0], np.uint8)) & np.uint8(3)).reshape(-1)[:size]
    values = np.array([0, 0, -th, th], np.float32)[codes]   # 00, 01 -> 0; 10 -> -th; 11 -> +th
    if accumulate:
        out += values
    else:
        out[...] = values
    return out


def topk_count(ratio: float, n: int) -> int:
    """``k = max(1, ceil(ratio * n))`` for ``n > 0`` (0 for ``n == 0``).

    The product is exact, with ``ratio`` read as the decimal it prints as (``repr``): 0.3 * 10
    gives k = 3 and 0.4 * 5 gives k = 2, where floating point (3.0000000000000004) or the
    binary value of 0.4 (a hair above 2/5) would round up to one more.
    """
    if n <= 0:
        return 0
    return min(n, max(1, math.ceil(Fraction(repr(float(ratio))) * n)))


def topk_select(grad: Any, residual: Any, k: int) -> tuple[Any, Any]:
    """Top-k with local accumulation: ``r += g``; send the k elements of largest ``|r|``; zero them.

    Ties resolve to the lowest index first; NaN counts as larger than any number (all NaNs tie).
    The selection compares the bit patterns of ``|r|`` (monotonic for floats), so the NumPy and CuPy paths
    (``residual_accumulate`` and ``take_and_zero`` kernels around CuPy's partition) pick the
    same elements.

    Returns:
        ``(indices, values)``: int32 indices in ascending order and the float32 values ``r`` had
        there (before zeroing), on grad's device.

    Raises:
        ValueError: ``k`` outside ``[0, n]``, more than 2**31-1 elements, or bad arrays.
    """
    n = _check_pair(grad, residual)
    k = int(k)
    if not 0 <= k <= n:
        raise ValueError(f"k must be in [0, {n}] for {n} elements, got {k}")
    _check_indexable(n)
    if not isinstance(grad, np.ndarray):
        device = device_of(grad)
        _launch(f"residual_accumulate<{_type_name(grad)}>", device, n, (grad, residual, np.int64(n)))
        with device.use():
            indices = _topk_indices(device.xp, residual, k)
            values = device.xp.empty(k, np.float32)
        _launch("take_and_zero", device, k, (indices, np.int64(k), residual, values))
        return indices, values
    residual += grad                                 # r += g
    indices = _topk_indices(np, residual, k)
    values = residual[indices]                       # send r[idx]
    residual[indices] = 0                            # r[idx] = 0
    return indices, values


def _topk_indices(xp: Any, r: Any, k: int) -> Any:
    """The k indices of largest ``|r|`` (ties: lowest first), ascending; same ops on NumPy and CuPy."""
    n = r.size
    if k == 0:
        return xp.zeros(0, np.int32)
    if k == n:
        return xp.arange(n, dtype=np.int32)
    # ~(bits of |r|): ascending order of this key is descending |r|. Every NaN gets one key, just
    # above inf: the GPU's arithmetic makes canonical NaNs where the host keeps payloads.
    key = ~xp.minimum(r.view(np.uint32) & np.uint32(0x7FFFFFFF), np.uint32(0x7F800001))
    kth = xp.partition(key, k - 1)[k - 1]
    better = key < kth
    tied = key == kth
    room = k - xp.count_nonzero(better)
    take = better | (tied & (xp.cumsum(tied, dtype=np.int64) <= room))
    return xp.flatnonzero(take).astype(np.int32)


def threshold_select(grad: Any, residual: Any, threshold: float) -> tuple[Any, Any]:
    """Threshold sparsification with local accumulation: ``r += g``; send every ``|r| >= threshold``; zero it.

    Returns:
        ``(indices, values)``: int32 indices in ascending order and the float32 values ``r`` had
        there, on grad's device. On a GPU the kernel ``threshold_compact`` appends indices with
        an atomic counter and the host sorts them, so the order is the twin's.

    Raises:
        ValueError: bad threshold, more than 2**31-1 elements, or bad arrays.
    """
    t = _positive(threshold, "threshold")
    n = _check_pair(grad, residual)
    _check_indexable(n)
    if not isinstance(grad, np.ndarray):
        device = device_of(grad)
        xp = device.xp
        with device.use():
            slots, count = xp.empty(max(n, 1), np.int32), xp.zeros(1, np.int32)
        _launch(f"threshold_compact<{_type_name(grad)}>", device, n, (grad, residual, np.int64(n), t, slots, count))
        with device.use():
            m = int(count.get()[0])
            indices = xp.sort(slots[:m]) if m else xp.zeros(0, np.int32)
            values = xp.empty(m, np.float32)
        _launch("take_and_zero", device, m, (indices, np.int64(m), residual, values))
        return indices, values
    residual += grad                                             # r += g
    indices = np.flatnonzero(np.abs(residual) >= t).astype(np.int32)
    values = residual[indices]                                   # send r[idx]
    residual[indices] = 0                                        # r[idx] = 0
    return indices, values


def _scatter_add(indices: Any, values: Any, out: Any) -> None:
    """``out[indices] += values`` (indices unique), kernel ``scatter_add`` on a GPU."""
    if isinstance(out, np.ndarray):
        out[indices] += values
        return
    _launch("scatter_add", device_of(out), indices.size, (indices, values, np.int64(indices.size), out))


def to_wire(x: Any, wire_dtype: str, scale: float, clip: float | None = None) -> Any:
    """``wire = half(clip(x, -clip, clip) * scale)``: the cast to the wire format with a fused pre-scale.

    The clip and the product are float32 (no clip when ``clip`` is None); the product is then
    rounded to nearest even into the wire format. NaN becomes the wire's canonical quiet NaN
    (0x7e00 / 0x7fc0, sign dropped): GPU arithmetic does not keep NaN signs or payloads, so
    only canonical NaNs make the NumPy and CUDA paths agree bit for bit.

    Args:
        x: 1-D float32 or float16 array (NumPy, or CuPy: kernel ``to_wire``).
        wire_dtype: 'float16' (returns float16) or 'bfloat16' (returns uint16 bit patterns).
        scale: the pre-scale, e.g. 1/N for N contributions.
        clip: > 0, or None.

    Raises:
        ValueError: an unknown wire dtype, a bad clip, or a bad array.
    """
    wire_dtype = _wire_dtype(wire_dtype)
    _check_vector(x, "x", (np.float32, np.float16))
    c = None if clip is None else _positive(clip, "clip")
    s = np.float32(scale)
    n = x.size
    if not isinstance(x, np.ndarray):
        device = device_of(x)
        with device.use():
            wire = device.xp.empty(n, np.float16 if wire_dtype == "float16" else np.uint16)
        _launch(f"to_wire<{_type_name(x)}, {_WIRE_NAMES[wire_dtype]}>", device, n,
                (x, wire, np.int64(n), s, np.float32(0 if c is None else c)))
        return wire
    y = x.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN inputs are legitimate here
        if c is not None:
            np.clip(y, -c, c, out=y)                 # clip(x, -c, c); NaN stays NaN
        y *= s                                       # * scale
    bits = y.view(np.uint32)
    nan = np.isnan(y)
    if wire_dtype == "float16":
        with np.errstate(over="ignore", invalid="ignore"):
            wire = y.astype(np.float16)              # round to nearest even; overflow -> inf
        wire_bits = wire.view(np.uint16)
        quiet = np.uint16(0x7E00)
    else:
        # + 0x7fff + the lowest kept bit: round to nearest, ties to even (overflow carries to inf)
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
        wire = wire_bits = rounded.astype(np.uint16)
        quiet = np.uint16(0x7FC0)
    wire_bits[nan] = quiet
    return wire


def from_wire(wire: Any, wire_dtype: str, scale: float, out: Any, accumulate: bool = True) -> Any:
    """``out += float32(wire) * scale`` (``accumulate=False``: ``out =``), in float32; returns ``out``.

    Args:
        wire: :func:`to_wire`'s output: float16 (or its uint16 bits) for 'float16', uint16 bits
            for 'bfloat16'.
        wire_dtype: 'float16' or 'bfloat16'.
        scale: e.g. N, undoing the 1/N pre-scale.
        out: float32 array of wire's size on wire's device (CuPy: kernel ``from_wire``).

    Raises:
        ValueError: an unknown wire dtype, or mismatched arrays.
    """
    wire_dtype = _wire_dtype(wire_dtype)
    allowed = (np.float16, np.uint16) if wire_dtype == "float16" else (np.uint16,)
    _check_vector(wire, "wire", allowed)
    _check_out(out, wire.size, wire, "wire")
    s = np.float32(scale)
    if not isinstance(wire, np.ndarray):
        _launch(f"from_wire<{_WIRE_NAMES[wire_dtype]}>", device_of(wire), wire.size,
                (wire, out, np.int64(wire.size), s, np.int32(bool(accumulate))))
        return out
    if wire_dtype == "float16":
        values = wire.view(np.float16).astype(np.float32)
    else:
        values = (wire.astype(np.uint32) << np.uint32(16)).view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        values *= s                                   # float32(wire) * scale
        if accumulate:
            out += values
        else:
            out[...] = values
    return out


# -- helpers ------------------------------------------------------------------------------------------
def _words(n: int) -> int:
    return (n + 15) // 16


def _type_name(array: Any) -> str:
    return _TYPE_NAMES[np.dtype(array.dtype).name]


def _launch(name: str, device: Device, items: int, args: tuple[Any, ...]) -> None:
    """Launch kernel ``name`` of compression.cu on ``device`` over ``items`` work items (none: no launch)."""
    if items <= 0:
        return
    function = get_kernel(_KERNEL_FILE, name, device, _ALL_NAMES)
    blocks = min(_MAX_BLOCKS, -(-items // _THREADS))
    with device.use():
        function((blocks,), (_THREADS,), args)


def _positive(value: Any, name: str) -> np.float32:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return np.float32(number)


def _wire_dtype(name: Any) -> str:
    if name not in _WIRE_NAMES:
        raise ValueError(f"wire_dtype must be 'float16' or 'bfloat16', got {name!r}")
    return name


def _check_vector(array: Any, name: str, dtypes: tuple[Any, ...]) -> None:
    shape = getattr(array, "shape", None)
    if shape is None or len(shape) != 1:
        raise ValueError(f"{name} must be a 1-D NumPy or CuPy array, got {type(array).__name__} of shape {shape}")
    if array.dtype not in dtypes:
        raise ValueError(f"{name} must be {' or '.join(np.dtype(d).name for d in dtypes)}, got {array.dtype}")
    if not array.flags.c_contiguous:
        raise ValueError(f"{name} must be contiguous")


def _check_residual(residual: Any, grad: Any, name: str, grad_name: str) -> None:
    _check_vector(residual, name, (np.float32,))
    if residual.size != grad.size:
        raise ValueError(f"{name} has {residual.size} elements, {grad_name} has {grad.size}; they must match")
    if device_of(residual) != device_of(grad) or isinstance(residual, np.ndarray) != isinstance(grad, np.ndarray):
        raise ValueError(f"{name} is on {_where(residual)}, {grad_name} on {_where(grad)}; it must be on the "
                         f"gradient's device")


def _check_pair(grad: Any, residual: Any) -> int:
    _check_vector(grad, "grad", (np.float32, np.float16))
    _check_residual(residual, grad, "residual", "grad")
    return int(grad.size)


def _check_out(out: Any, size: int, source: Any, source_name: str) -> None:
    _check_vector(out, "out", (np.float32,))
    if out.size != size:
        raise ValueError(f"out has {out.size} elements, {size} needed")
    if device_of(out) != device_of(source) or isinstance(out, np.ndarray) != isinstance(source, np.ndarray):
        raise ValueError(f"out is on {_where(out)}, {source_name} on {_where(source)}; they must be on one device")


def _check_indexable(n: int) -> None:
    if n > _MAX_INDEX:
        raise ValueError(f"sparse messages carry int32 indices: at most {_MAX_INDEX} elements, got {n}")


def _where(array: Any) -> str:
    return "the host (NumPy)" if isinstance(array, np.ndarray) else str(device_of(array))
