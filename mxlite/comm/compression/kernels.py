"""Low-level compression operations: each a NumPy twin (NumPy arrays) and a CUDA path (CuPy arrays)
running ``kernels/compression.cu``, chosen by the array type; both give the same bits.

Purpose: the codecs (:mod:`.codecs`) compose these; tests compare every kernel with its twin.
Every function checks its arrays (1-D, contiguous, dtypes, one device) and raises ValueError
naming the argument.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from ...device import Device, device_of
from ...device.kernels import C_TYPES, KernelFile, instantiations

__all__ = ["quantize_2bit", "dequantize_2bit", "topk_count", "topk_select", "threshold_select", "to_wire",
           "from_wire", "scatter_add_message", "threshold_select_on_device"]

_KERNEL_FILE = "compression.cu"
_DTYPES = ("float32", "float16")  # the residuals' and gradients' dtypes
_WIRE_NAMES = {"float16": "f16_wire", "bfloat16": "bf16_wire"}
_C_TYPES = tuple(C_TYPES[d] for d in _DTYPES)
KERNELS = KernelFile(_KERNEL_FILE, _DTYPES, names=(
    *instantiations(("quantize_2bit",), _C_TYPES),
    "dequantize_2bit",
    *instantiations(("residual_accumulate",), _C_TYPES),
    "take_and_zero",
    "scatter_add",
    "compact_take",
    "scatter_add_message",
    *(f"to_wire<{t}, {w}>" for t in _C_TYPES for w in _WIRE_NAMES.values()),
    *instantiations(("from_wire",), tuple(_WIRE_NAMES.values())),
))
_MAX_BLOCKS = 65535  # enough blocks to fill any current GPU; the kernels loop grid-stride past it
_MAX_INDEX = 2**31 - 1  # sparse messages carry int32 indices
_MAX_FLOAT = np.float32(np.finfo(np.float32).max)  # |r| above it (inf) or unordered (NaN): not finite
_QUIET_NAN = np.uint32(0x7FC00000).view(np.float32)  # what 2-bit code 01 decodes to (the kernel's kQuietNaN)


# -- low-level codecs: NumPy twin or CUDA kernel, chosen by the array type ---------------------------
def quantize_2bit(grad: Any, residual: Any, threshold: float) -> Any:
    """MXNet's 2-bit quantisation of ``residual + grad``; returns the packed uint32 words.

    Per element, in float32: ``r += g``; ``r`` not finite (NaN, inf): code 01 (NaN) and ``r = 0``;
    ``r >= threshold``: code 11 (+threshold), ``r -= threshold``; ``r <= -threshold``: code 10
    (-threshold), ``r += threshold``; else code 00 (0). A non-finite gradient is thus sent (as NaN,
    so the summed gradient shows it to check_finite and AMP) instead of staying in the residual
    for ever. MXNet never writes code 01 (its decoder maps it to 0). Value j of
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
    bad = ~(np.abs(residual) <= _MAX_FLOAT)              # NaN or inf: sent as NaN
    pos = (residual >= th) & ~bad
    neg = (residual <= -th) & ~bad
    np.subtract(residual, th, out=residual, where=pos)   # sent +th: r -= th
    np.add(residual, th, out=residual, where=neg)        # sent -th: r += th
    residual[bad] = 0                                    # sent NaN: r = 0
    codes = np.zeros(16 * words, np.uint8)
    codes[:n][pos] = 3
    codes[:n][neg] = 2
    codes[:n][bad] = 1
    c = codes.reshape(-1, 4)
    packed_bytes = ((c[:, 0] << 6) | (c[:, 1] << 4) | (c[:, 2] << 2) | c[:, 3]).astype(np.uint8)
    return packed_bytes.view("<u4")


def dequantize_2bit(packed: Any, size: int, threshold: float, out: Any = None, accumulate: bool = False) -> Any:
    """Decode :func:`quantize_2bit`'s words: 11 -> +threshold, 10 -> -threshold, 01 -> NaN, 00 -> 0 (float32).

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
    values = np.array([0, _QUIET_NAN, -th, th], np.float32)[codes]   # 00 -> 0; 01 -> NaN; 10 -> -th; 11 -> +th
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
    """The k indices of largest ``|r|`` (ties: lowest first), ascending; same ops on NumPy and CuPy.

    Each element gets one unique 64-bit key, ``~bits(|r|)`` above its index, so ascending key
    order is descending ``|r|`` then ascending index, and the k smallest keys are the selection
    whatever order a partition leaves equal values in. No step needs a count on the host (a
    boolean mask's ``nonzero`` would): on a GPU the selection runs without a host synchronisation.
    """
    n = r.size
    if k == 0:
        return xp.zeros(0, np.int32)
    if k == n:
        return xp.arange(n, dtype=np.int32)
    # ~(bits of |r|): ascending order of this key is descending |r|. Every NaN gets one key, just
    # above inf: the GPU's arithmetic makes canonical NaNs where the host keeps payloads.
    key = ~xp.minimum(r.view(np.uint32) & np.uint32(0x7FFFFFFF), np.uint32(0x7F800001))
    unique = (key.astype(np.uint64) << np.uint64(32)) | xp.arange(n, dtype=np.uint64)
    chosen = xp.partition(unique, k - 1)[:k] & np.uint64(0xFFFFFFFF)
    return xp.sort(chosen).astype(np.int32)


def threshold_select(grad: Any, residual: Any, threshold: float) -> tuple[Any, Any]:
    """Threshold sparsification with local accumulation: ``r += g``; send every ``|r| >= threshold``; zero it.

    NaN and inf are always sent (the test is ``not |r| < threshold``), so a non-finite gradient
    reaches the summed gradient instead of staying in the residual for ever.

    Returns:
        ``(indices, values)``: int32 indices in ascending order and the float32 values ``r`` had
        there, on grad's device. On a GPU this is :func:`threshold_select_on_device` (prefix count
        and ``compact_take``, in the twin's order) followed by one read of the count.

    Raises:
        ValueError: bad threshold, more than 2**31-1 elements, or bad arrays.
    """
    t = _positive(threshold, "threshold")
    n = _check_pair(grad, residual)
    _check_indexable(n)
    if not isinstance(grad, np.ndarray):
        indices, values, count = threshold_select_on_device(grad, residual, t)
        with device_of(grad).use():
            m = int(count.get()[0])  # the host exchange needs the message size
        return indices[:m], values[:m]
    residual += grad                                             # r += g
    indices = np.flatnonzero(~(np.abs(residual) < t)).astype(np.int32)   # |r| >= t, NaN too
    values = residual[indices]                                   # send r[idx]
    residual[indices] = 0                                        # r[idx] = 0
    return indices, values


def _scatter_add(indices: Any, values: Any, out: Any) -> None:
    """``out[indices] += values`` (indices unique), kernel ``scatter_add`` on a GPU."""
    if isinstance(out, np.ndarray):
        out[indices] += values
        return
    _launch("scatter_add", device_of(out), indices.size, (indices, values, np.int64(indices.size), out))


def threshold_select_on_device(grad: Any, residual: Any, threshold: float) -> tuple[Any, Any, Any]:
    """:func:`threshold_select` with the count left on the device (CuPy arrays; no host synchronisation).

    ``r += g`` (kernel ``residual_accumulate``); the mask ``not |r| < threshold`` and its inclusive
    prefix count ``pos`` (CuPy ops); kernel ``compact_take`` writes every selected element to slot
    ``pos[i] - 1`` and zeroes it in ``r``. The same elements, in the same (ascending) order, as
    :func:`threshold_select`.

    Returns:
        ``(indices, values, count)``: int32 and float32 arrays of room ``n`` (their first
        ``count`` entries are the message; the rest is undefined) and ``count``, a 1-element
        int32 array, all on grad's device.

    Raises:
        ValueError: bad threshold, more than 2**31-1 elements, bad arrays, or NumPy arrays.
    """
    t = _positive(threshold, "threshold")
    n = _check_pair(grad, residual)
    _check_indexable(n)
    if isinstance(grad, np.ndarray):
        raise ValueError("threshold_select_on_device takes CuPy arrays; use threshold_select on the host")
    device = device_of(grad)
    xp = device.xp
    _launch(f"residual_accumulate<{_type_name(grad)}>", device, n, (grad, residual, np.int64(n)))   # r += g
    with device.use():
        pos = xp.cumsum(~(xp.abs(residual) < t), dtype=np.int32)                 # selected before and at i
        indices, values = xp.empty(max(n, 1), np.int32), xp.empty(max(n, 1), np.float32)
        count = pos[-1:] if n else xp.zeros(1, np.int32)
    _launch("compact_take", device, n, (pos, np.int64(n), residual, indices, values))        # send r[i]; r[i] = 0
    return indices, values, count


def compact_take_twin(pos: np.ndarray, residual: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Twin of kernel ``compact_take``: ``(indices, values)`` where ``pos`` steps; zeroes them in ``residual``."""
    taken = np.diff(pos, prepend=np.int32(0)) != 0
    indices = np.flatnonzero(taken).astype(np.int32)
    values = residual[indices]
    residual[indices] = 0
    return indices, values


def sparse_message(indices: Any, values: Any, count: Any, capacity: int) -> Any:
    """One sparse message, int32 ``[count, indices[:capacity], bits of values[:capacity]]``, on their device.

    ``count`` is a 1-element int32 array (it may exceed ``capacity`` only if the caller's capacity
    is wrong: :func:`scatter_add_message` reads ``min(count, capacity)`` entries).
    """
    device = device_of(indices)
    with device.use():
        return device.xp.concatenate([count.astype(np.int32, copy=False), indices[:capacity],
                               values[:capacity].view(np.int32)])


def scatter_add_message(message: Any, capacity: int, out: Any) -> Any:
    """``out[idx[j]] += values[j]`` for the first ``min(count, capacity)`` entries of a :func:`sparse_message`.

    Kernel ``scatter_add_message`` on a GPU (the count is read on the device); returns ``out``.

    Raises:
        ValueError: a message shorter than ``1 + 2*capacity`` int32 values, or mismatched arrays.
    """
    _check_vector(message, "message", (np.int32,))
    capacity = int(capacity)
    if message.size < 1 + 2 * capacity:
        raise ValueError(f"message has {message.size} int32 values; capacity {capacity} needs {1 + 2 * capacity}")
    _check_out(out, out.size, message, "message")
    if not isinstance(message, np.ndarray):
        _launch("scatter_add_message", device_of(out), capacity, (message, np.int64(capacity), out))
        return out
    count = min(int(message[0]), capacity)
    indices = message[1:1 + count]
    values = message[1 + capacity:1 + capacity + count].view(np.float32)
    out[indices] += values
    return out


def to_wire(x: Any, wire_dtype: str, scale: float, clip: float | None = None, out: Any = None) -> Any:
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
        out: (CuPy only) the wire array to write, of x's size on x's device: float16 for
            'float16', uint16 for 'bfloat16'; default a new one. Returned.

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
        wire_type = np.float16 if wire_dtype == "float16" else np.uint16
        if out is None:
            with device.use():
                out = device.xp.empty(n, wire_type)
        _check_vector(out, "out", (wire_type,))
        if out.size != n or device_of(out) != device:
            raise ValueError(f"out must be a {wire_type.__name__} array of {n} elements on {device}, got "
                             f"{out.size} on {_where(out)}")
        wire = out
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
    return KERNELS.type_name(array.dtype)


def _launch(name: str, device: Device, items: int, args: tuple[Any, ...]) -> None:
    """Launch kernel ``name`` of compression.cu on ``device`` over ``items`` work items (none: no launch)."""
    if items <= 0:
        return
    function = KERNELS.function(name, device)
    blocks = min(_MAX_BLOCKS, -(-items // KERNELS.block_threads))
    with device.use():
        function((blocks,), (KERNELS.block_threads,), args)


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

