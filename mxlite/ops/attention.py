"""Attention ops: masked softmax, MXNet's interleaved attention products, and scaled dot-product attention.

* :func:`masked_softmax` / :func:`masked_log_softmax`: MXNet 2.x's ``npx.masked_softmax`` and
  ``npx.masked_log_softmax``: a softmax over the entries a boolean mask keeps; masked entries get
  probability 0 (log-probability -inf) and no gradient, and a row whose entries are all masked is all 0
  (all -inf).
* ``interleaved_matmul_*``: MXNet's ``contrib`` products of a Transformer's projections laid out
  ``(seq, batch, heads * 3 * head_dim)`` (queries, keys and values interleaved per head), or
  ``(seq, batch, heads * 2 * head_dim)`` (keys and values) for encoder-decoder attention; the score products
  are scaled by ``1 / sqrt(head_dim)``. Composed of differentiable ops (reshape, transpose, matmul), so
  second derivatives work through them.
* :func:`scaled_dot_product_attention`: ``softmax(q kᵀ * scale, masked) v`` with dropout on the weights,
  without the ``(B, H, Tq, Tk)`` matrix: ``kernels/attention.cu`` (:mod:`._attention_kernels`) on GPUs and,
  through the host build, on CPU devices; elsewhere (float64, head dimensions above 256, CPU devices without
  the host build) a blockwise path of array operations that keeps one block of keys' scores at a time. Both
  keep the per-row log-sum-exp and recompute the scores in the backward, so memory grows with T, not T².

Every function takes and returns :class:`Tensor` objects and names itself and its inputs in its errors.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..autograd import is_training
from ..autograd.tensor import Tensor, op_result
from ..device import Device, blas, device_of
from ..device.copy import copy_between
from . import _attention_kernels as _ak
from . import _philox, core
from . import random as _random
from .core import _check_float, _op

__all__ = ["interleaved_matmul_encdec_qk", "interleaved_matmul_encdec_valatt", "interleaved_matmul_selfatt_qk",
           "interleaved_matmul_selfatt_valatt", "masked_log_softmax", "masked_softmax",
           "scaled_dot_product_attention"]

_BLOCK = 256  # keys per block of the blockwise path (its memory: one (B, H, Tq, _BLOCK) block of scores)


# -- helpers ----------------------------------------------------------------------------------------------------
def _on_device(values: Any, device: Device, what: str = "mask") -> Any:
    """``values`` (a Tensor on ``device``, a NumPy or CuPy array, a list, a number) as an array on ``device``.

    Raises:
        ValueError: a Tensor on another device (names ``what`` and both devices), as for any op's operands.
    """
    if isinstance(values, Tensor):
        if values.device != device:
            raise ValueError(f"{what} lives on {values.device} but the data on {device}; move it with "
                             ".to(device) first (inputs on different devices)")
        return values._data
    if hasattr(values, "__cuda_array_interface__"):
        return copy_between(values, device_of(values), device, copy=False)
    return copy_between(np.asarray(values), Device("cpu", 0), device, copy=False)


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for a {ndim}-D input")
    return axis % ndim


def _broadcast_mask(mask: Any, shape: tuple[int, ...], device: Device, what: str) -> Any:
    """``mask != 0`` as a bool array on ``device`` broadcast (a view) to ``shape``.

    Raises:
        ValueError: the mask does not broadcast to ``shape`` (names ``what`` and both shapes).
    """
    m = _on_device(mask, device)
    if not _broadcasts_to(tuple(m.shape), tuple(shape)):
        raise ValueError(f"the mask of shape {tuple(m.shape)} does not broadcast to {what} {tuple(shape)}")
    if np.issubdtype(m.dtype, np.floating) and bool(((m != 0) & (m != 1)).any()):  # one read; a bool mask skips it
        raise ValueError("the mask holds values other than 0 and 1: it is a boolean mask (nonzero where a query "
                         "attends), not an additive one (0 / -inf); pass mask == 0 for an additive mask")
    keep = m if m.dtype == np.bool_ else m != 0
    return device.xp.broadcast_to(keep, shape)


def _broadcasts_to(small: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether an array of shape ``small`` broadcasts to exactly ``shape``."""
    if len(small) > len(shape):
        return False
    return all(a in (1, b) for a, b in zip(small[::-1], shape[::-1]))


# -- masked softmax ---------------------------------------------------------------------------------------------
@_op("masked_softmax")
def masked_softmax(data: Tensor, mask: Any, axis: int = -1, temperature: float = 1.0, normalize: bool = True) -> Tensor:
    """Softmax of ``data / temperature`` along ``axis`` over the entries ``mask`` keeps (MXNet 2.x's
    ``npx.masked_softmax``).

    Args:
        data: floating-point tensor.
        mask: nonzero (or True) where an entry takes part; any shape that broadcasts to ``data``'s (a Tensor
            on ``data``'s device, or a NumPy array or list); a float mask must hold 0 and 1 only. It gets no
            gradient.
        axis: the axis normalised to sum to 1.
        temperature: divides ``data - max`` (a nonzero finite number; 1 skips the division).
        normalize: subtract the row's maximum over the kept entries first (MXNet's default); False
            exponentiates ``data / temperature`` as it is, which can overflow.

    Returns:
        ``data``'s shape and dtype: 0 at masked entries, and 0 in every entry of a row that keeps none (MXNet's
        result). The gradient is the softmax's, 0 at masked entries. float16 is computed in float32.

    Raises:
        TypeError: integer ``data``. ValueError: ``axis`` out of range, a ``mask`` that does not broadcast to
        ``data`` or holds floats other than 0 and 1, or a zero or non-finite ``temperature``.
    """
    return _masked_softmax("masked_softmax", data, mask, axis, temperature, normalize, log=False)


@_op("masked_log_softmax")
def masked_log_softmax(data: Tensor, mask: Any, axis: int = -1, temperature: float = 1.0,
                       normalize: bool = True) -> Tensor:
    """Log of :func:`masked_softmax` (MXNet 2.x's ``npx.masked_log_softmax``): ``-inf`` at masked entries
    and in every entry of a row that keeps none; the gradient is 0 there. Arguments and errors as
    :func:`masked_softmax`."""
    return _masked_softmax("masked_log_softmax", data, mask, axis, temperature, normalize, log=True)


def _masked_softmax(name: str, data: Tensor, mask: Any, axis: int, temperature: float, normalize: bool,
                    log: bool) -> Tensor:
    _check_float(name, data)
    temperature = float(temperature)
    if temperature == 0 or not math.isfinite(temperature):
        raise ValueError(f"temperature must be a nonzero finite number, got {temperature}")
    xp = data.device.xp
    axis = _axis(axis, data.ndim)
    keep = _broadcast_mask(mask, data.shape, data.device, "data's shape")
    acc = np.promote_types(data.dtype, np.float32)
    x = data._data.astype(acc, copy=False)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        z = x
        if normalize:
            top = xp.where(keep, x, -np.inf).max(axis=axis, keepdims=True)
            z = x - xp.where(top == -np.inf, 0, top)  # a row without kept entries: nothing to subtract
        if temperature != 1.0:
            z = z / temperature
        e = xp.where(keep, xp.exp(z), 0)
        total = e.sum(axis=axis, keepdims=True)
        probs = e / xp.where(total == 0, 1, total)
        out = xp.where(keep, z - xp.log(total), -np.inf) if log else probs

    def backward(g: Any) -> tuple[Any]:
        gm = xp.where(keep, g.astype(acc, copy=False), 0)
        if log:
            gx = gm - probs * gm.sum(axis=axis, keepdims=True)
        else:
            gx = probs * (gm - (gm * probs).sum(axis=axis, keepdims=True))
        if temperature != 1.0:
            gx = gx / temperature
        return (xp.where(keep, gx, 0).astype(data.dtype, copy=False),)

    return op_result(name, out.astype(data.dtype, copy=False), data.device, (data,), backward)


# -- MXNet's interleaved attention products ---------------------------------------------------------------------
def _heads_arg(name: str, heads: Any) -> int:
    if isinstance(heads, bool) or not isinstance(heads, (int, np.integer)) or heads < 1:
        raise ValueError(f"{name}: heads must be a positive integer, got {heads!r}")
    return int(heads)


def _check_3d(name: str, what: str, x: Tensor, layout: str) -> None:
    if x.ndim != 3:
        raise ValueError(f"{name}: {what} must be 3-D {layout}, got shape {x.shape}")


def _split_interleaved(name: str, x: Tensor, heads: int, parts: int, what: str) -> tuple[Tensor, int]:
    """``x`` (seq, batch, heads * parts * head_dim) as (seq, batch, heads, parts, head_dim), and head_dim.

    Raises:
        ValueError: the last axis is not a multiple of ``heads * parts``.
    """
    seq, batch, width = x.shape
    if width % (heads * parts) or width == 0:
        raise ValueError(f"{name}: the last axis of {what} ({width}) must be a positive multiple of "
                         f"heads * {parts} = {heads * parts} (shape {x.shape})")
    head_dim = width // (heads * parts)
    return core.reshape(x, (seq, batch, heads, parts, head_dim)), head_dim


def _heads_first(part: Tensor) -> Tensor:
    """(seq, batch, heads, head_dim) -> (batch * heads, seq, head_dim)."""
    seq, batch, heads, head_dim = part.shape
    return core.reshape(core.transpose(part, (1, 2, 0, 3)), (batch * heads, seq, head_dim))


def _seq_first(x: Tensor, batch: int, heads: int) -> Tensor:
    """(batch * heads, seq, head_dim) -> (seq, batch, heads * head_dim)."""
    _, seq, head_dim = x.shape
    return core.reshape(core.transpose(core.reshape(x, (batch, heads, seq, head_dim)), (2, 0, 1, 3)),
                        (seq, batch, heads * head_dim))


def _check_attention(name: str, attention: Tensor, expected: tuple[int, int, int]) -> None:
    if attention.shape != expected:
        raise ValueError(f"{name}: attention must have shape (batch * heads, queries, keys) = {expected}, "
                         f"got {attention.shape}")


def interleaved_matmul_selfatt_qk(queries_keys_values: Tensor, heads: int) -> Tensor:
    """MXNet's ``contrib.interleaved_matmul_selfatt_qk``: the scaled scores ``q kᵀ / sqrt(head_dim)`` of
    self-attention from projections laid out (seq, batch, heads * 3 * head_dim), each head's query, key and
    value side by side.

    Returns:
        (batch * heads, seq, seq), row ``b * heads + h`` for sequence b and head h.

    Raises:
        ValueError: not 3-D, a last axis that is not a multiple of ``3 * heads``, or ``heads`` < 1.
    """
    name = "interleaved_matmul_selfatt_qk"
    heads = _heads_arg(name, heads)
    _check_3d(name, "queries_keys_values", queries_keys_values, "(seq, batch, heads * 3 * head_dim)")
    qkv, head_dim = _split_interleaved(name, queries_keys_values, heads, 3, "queries_keys_values")
    q, k = (_heads_first(core.getitem(qkv, (slice(None), slice(None), slice(None), i))) for i in (0, 1))
    return core.multiply(core.matmul(q, core.swapaxes(k, 1, 2)), 1.0 / math.sqrt(head_dim))


def interleaved_matmul_selfatt_valatt(queries_keys_values: Tensor, attention: Tensor, heads: int) -> Tensor:
    """MXNet's ``contrib.interleaved_matmul_selfatt_valatt``: the attention weights (batch * heads, seq, seq)
    applied to the values of the interleaved projections (seq, batch, heads * 3 * head_dim).

    Returns:
        (seq, batch, heads * head_dim), the heads side by side.

    Raises:
        ValueError: shapes that do not fit (names both).
    """
    name = "interleaved_matmul_selfatt_valatt"
    heads = _heads_arg(name, heads)
    _check_3d(name, "queries_keys_values", queries_keys_values, "(seq, batch, heads * 3 * head_dim)")
    qkv, _ = _split_interleaved(name, queries_keys_values, heads, 3, "queries_keys_values")
    seq, batch = queries_keys_values.shape[:2]
    _check_attention(name, attention, (batch * heads, seq, seq))
    v = _heads_first(core.getitem(qkv, (slice(None), slice(None), slice(None), 2)))
    return _seq_first(core.matmul(attention, v), batch, heads)


def interleaved_matmul_encdec_qk(queries: Tensor, keys_values: Tensor, heads: int) -> Tensor:
    """MXNet's ``contrib.interleaved_matmul_encdec_qk``: the scaled scores ``q kᵀ / sqrt(head_dim)`` of
    encoder-decoder attention, queries (q_seq, batch, heads * head_dim) against keys interleaved with values in
    (kv_seq, batch, heads * 2 * head_dim).

    Returns:
        (batch * heads, q_seq, kv_seq).

    Raises:
        ValueError: shapes that do not fit (keys_values' last axis must be twice queries', batches equal).
    """
    name = "interleaved_matmul_encdec_qk"
    heads = _heads_arg(name, heads)
    _check_3d(name, "queries", queries, "(q_seq, batch, heads * head_dim)")
    _check_3d(name, "keys_values", keys_values, "(kv_seq, batch, heads * 2 * head_dim)")
    if keys_values.shape[2] != 2 * queries.shape[2] or keys_values.shape[1] != queries.shape[1]:
        raise ValueError(f"{name}: keys_values must be (kv_seq, batch, 2 * {queries.shape[2]}) with the batch of "
                         f"queries {queries.shape}, got {keys_values.shape}")
    q_seq, batch, width = queries.shape
    if width % heads or width == 0:
        raise ValueError(f"{name}: the last axis of queries ({width}) must be a positive multiple of heads = {heads}")
    head_dim = width // heads
    kv, _ = _split_interleaved(name, keys_values, heads, 2, "keys_values")
    q = _heads_first(core.reshape(queries, (q_seq, batch, heads, head_dim)))
    k = _heads_first(core.getitem(kv, (slice(None), slice(None), slice(None), 0)))
    return core.multiply(core.matmul(q, core.swapaxes(k, 1, 2)), 1.0 / math.sqrt(head_dim))


def interleaved_matmul_encdec_valatt(keys_values: Tensor, attention: Tensor, heads: int) -> Tensor:
    """MXNet's ``contrib.interleaved_matmul_encdec_valatt``: the attention weights (batch * heads, q_seq, kv_seq)
    applied to the values interleaved in (kv_seq, batch, heads * 2 * head_dim).

    Returns:
        (q_seq, batch, heads * head_dim).

    Raises:
        ValueError: shapes that do not fit (names both).
    """
    name = "interleaved_matmul_encdec_valatt"
    heads = _heads_arg(name, heads)
    _check_3d(name, "keys_values", keys_values, "(kv_seq, batch, heads * 2 * head_dim)")
    kv, _ = _split_interleaved(name, keys_values, heads, 2, "keys_values")
    kv_seq, batch = keys_values.shape[:2]
    if attention.ndim != 3 or attention.shape[0] != batch * heads or attention.shape[2] != kv_seq:
        raise ValueError(f"{name}: attention must have shape (batch * heads, q_seq, kv_seq) = "
                         f"({batch * heads}, q_seq, {kv_seq}), got {attention.shape}")
    v = _heads_first(core.getitem(kv, (slice(None), slice(None), slice(None), 1)))
    return _seq_first(core.matmul(attention, v), batch, heads)


# -- scaled dot-product attention -------------------------------------------------------------------------------
@_op("scaled_dot_product_attention")
def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, mask: Any = None, causal: bool = False,
                                 valid_length: Any = None, dropout: float = 0.0, scale: float | None = None,
                                 training: bool | None = None) -> Tensor:
    """``softmax(query · keyᵀ · scale) · value`` over the keys each query keeps, with dropout on the weights,
    never holding the (batch, heads, Tq, Tk) scores (module docstring).

    Args:
        query: (batch, heads, Tq, Dk); key: (batch, heads, Tk, Dk); value: (batch, heads, Tk, Dv); one
            floating dtype (float16, float32, float64, or a bfloat16 dtype).
        mask: nonzero (True) where query i may attend to key j: (Tq, Tk) or (batch or 1, heads or 1, Tq, Tk);
            a Tensor on the inputs' device, a NumPy array or a list. A float mask must hold 0 and 1 only (it is
            checked, one read of the device; a bool mask is not): it is not an additive mask. No gradient.
        causal: query i attends to keys j <= i only (PyTorch's ``is_causal``: aligned at the top left, also when
            Tq != Tk).
        valid_length: (batch,) number of keys each sequence has (keys from it on are masked), integer or float.
        dropout: probability of dropping each attention weight while training (inverted: survivors are scaled by
            1 / (1 - dropout)); drawn from mxlite's random stream of the device, so ``mx.random.seed`` repeats it.
        scale: multiplies the scores; default ``1 / sqrt(Dk)``.
        training: apply dropout; None follows ``autograd.is_training()`` (true inside ``record()``).

    Returns:
        (batch, heads, Tq, Dv) in the inputs' dtype. A query that keeps no key gets 0 (and passes no gradient).
        Gradients flow to query, key and value.

    Raises:
        TypeError: integer inputs or inputs of different dtypes.
        ValueError: shapes that do not fit (the message names the argument and the shapes), a 3-D mask (give
            (batch, 1, Tq, Tk) for a per-sequence mask), a float mask with values other than 0 and 1, ``dropout``
            outside [0, 1], or a non-finite ``scale``.
    """
    geometry = _check_inputs(query, key, value)
    if not 0.0 <= dropout <= 1.0:
        raise ValueError(f"dropout must lie in [0, 1], got {dropout}")
    device = query.device
    masking = _masking(mask, causal, valid_length, geometry, device)
    if training is None:
        training = is_training()
    scale = 1.0 / math.sqrt(geometry.dk) if scale is None else float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number, got {scale}")
    rate = float(dropout) if training else 0.0
    state = _ak.dropout_state(device, _random._generator(device), geometry) if rate > 0 else None
    drop = _ak.Dropout(state, rate)
    if _ak.supported(query.dtype, geometry.dk, geometry.dv) and _ak.compiled(device):
        return _kernel_attention(query, key, value, geometry, masking, drop, scale)
    return _blockwise_attention(query, key, value, geometry, masking, drop, scale)


def _check_inputs(query: Tensor, key: Tensor, value: Tensor) -> _ak.Geometry:
    """The call's geometry.

    Raises:
        TypeError: integer inputs or dtypes that differ. ValueError: shapes that do not fit.
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        _check_float("scaled_dot_product_attention", t)
        if t.ndim != 4:
            raise ValueError(f"{name} must be 4-D (batch, heads, seq, head_dim), got shape {t.shape}")
    if not query.dtype == key.dtype == value.dtype:
        raise TypeError(f"query, key and value must have one dtype, got {query.dtype}, {key.dtype}, {value.dtype}")
    batch, heads, tq, dk = query.shape
    if key.shape[:2] != (batch, heads) or key.shape[3] != dk:
        raise ValueError(f"key must be (batch, heads, Tk, Dk) = ({batch}, {heads}, Tk, {dk}) to match query "
                         f"{query.shape}, got {key.shape}")
    if value.shape[:3] != key.shape[:3]:
        raise ValueError(f"value must be (batch, heads, Tk, Dv) with key's first three axes {key.shape[:3]}, "
                         f"got {value.shape}")
    return _ak.Geometry(batch, heads, tq, key.shape[2], dk, value.shape[3])


def _masking(mask: Any, causal: bool, valid_length: Any, geometry: _ak.Geometry, device: Device) -> _ak.Masking:
    """The keys each query keeps, as device arrays.

    Raises:
        ValueError: a mask that is not 2-D or 4-D or does not broadcast; valid_length not of shape (batch,).
    """
    g = geometry
    full = (g.batch, g.heads, g.tq, g.tk)
    keep = None
    if mask is not None:
        ndim = len(np.shape(mask)) if not isinstance(mask, Tensor) else mask.ndim
        if ndim not in (2, 4):
            raise ValueError(f"mask must be (Tq, Tk) or (batch or 1, heads or 1, Tq, Tk) = {full}, got shape "
                             f"{tuple(np.shape(mask) if not isinstance(mask, Tensor) else mask.shape)}; give a "
                             "per-sequence (batch, Tq, Tk) mask an axis for the heads: mask[:, None]")
        keep = _broadcast_mask(mask, full, device, "(batch, heads, Tq, Tk)")
    lengths = None
    if valid_length is not None:
        lengths = _on_device(valid_length, device, "valid_length")
        if tuple(lengths.shape) != (g.batch,):
            raise ValueError(f"valid_length must have shape (batch,) = ({g.batch},), got {tuple(lengths.shape)}")
        lengths = device.xp.ascontiguousarray(lengths.astype(np.int64, copy=False))
    return _ak.Masking(keep, lengths, bool(causal))


def _flat(xp: Any, x: Any, rows: int, cols: int) -> Any:
    """(batch, heads, rows, cols) -> C-contiguous (batch * heads, rows, cols), a view where it can be."""
    return xp.ascontiguousarray(x).reshape(-1, rows, cols)


def _kernel_attention(query: Tensor, key: Tensor, value: Tensor, g: _ak.Geometry, masking: _ak.Masking,
                      drop: _ak.Dropout, scale: float) -> Tensor:
    xp = query.device.xp
    q, k, v = (_flat(xp, t._data, n, d) for t, n, d in ((query, g.tq, g.dk), (key, g.tk, g.dk), (value, g.tk, g.dv)))
    out, lse = _ak.forward(xp, q, k, v, g, masking, drop, scale)

    def backward(grad: Any) -> tuple[Any, Any, Any]:
        dout = _flat(xp, grad.astype(q.dtype, copy=False), g.tq, g.dv)
        dq, dk, dv = _ak.backward(xp, q, k, v, out, dout, lse, g, masking, drop, scale)
        return dq.reshape(query.shape), dk.reshape(key.shape), dv.reshape(value.shape)

    return op_result("scaled_dot_product_attention", out.reshape(g.batch, g.heads, g.tq, g.dv), query.device,
                     (query, key, value), backward)


# -- the blockwise path: array operations, one block of keys' scores at a time ------------------------------------
def _block_keep(xp: Any, masking: _ak.Masking, g: _ak.Geometry, j0: int, j1: int) -> Any:
    """(batch * heads, Tq, j1 - j0) bool: which of keys j0..j1 each query keeps."""
    keep = xp.ones((g.batch, g.heads, g.tq, j1 - j0), dtype=bool)
    cols = xp.arange(j0, j1)
    if masking.causal:
        keep &= cols[None, :] <= xp.arange(g.tq)[:, None]
    if masking.valid_length is not None:
        keep &= cols[None, None, None, :] < masking.valid_length.reshape(g.batch, 1, 1, 1)
    if masking.mask is not None:
        keep &= masking.mask[:, :, :, j0:j1]
    return keep.reshape(g.batch_heads, g.tq, j1 - j0)


def _block_survivors(xp: Any, drop: _ak.Dropout, key_offset: tuple[int, int], g: _ak.Geometry, j0: int,
                     j1: int) -> Any:
    """(batch * heads, Tq, j1 - j0) bool: which weights of keys j0..j1 survive dropout (the kernels' draws)."""
    rows = np.arange(g.batch_heads * g.tq, dtype=np.uint64)[:, None] * np.uint64(g.tk)
    n = rows + np.arange(j0, j1, dtype=np.uint64)[None, :]
    key, offset = key_offset
    words = _philox.philox4x32(np.uint64(offset) + n.reshape(-1) // np.uint64(4), key)
    word = words[np.arange(n.size), (n.reshape(-1) % np.uint64(4)).astype(np.int64)]
    u = (word >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)
    return xp.asarray((u >= np.float32(drop.rate)).reshape(g.batch_heads, g.tq, j1 - j0))


def _key_blocks(masking: _ak.Masking, g: _ak.Geometry) -> range:
    """Starts of the key blocks that some query may keep (causal: none past the last query)."""
    end = min(g.tk, g.tq) if masking.causal else g.tk
    return range(0, end, _BLOCK)


def _blockwise_attention(query: Tensor, key: Tensor, value: Tensor, g: _ak.Geometry, masking: _ak.Masking,
                         drop: _ak.Dropout, scale: float) -> Tensor:
    xp = query.device.xp
    acc = np.promote_types(query.dtype, np.float32)
    q, k, v = (_flat(xp, t._data, n, d).astype(acc, copy=False)
               for t, n, d in ((query, g.tq, g.dk), (key, g.tk, g.dk), (value, g.tk, g.dv)))
    key_offset = None
    if drop.state is not None:
        key_offset = tuple(int(x) for x in (drop.state if xp is np else drop.state.get()))  # one small read
    drop_scale = acc.type(drop.scale)
    top = xp.full((g.batch_heads, g.tq), -np.inf, dtype=acc)
    total = xp.zeros((g.batch_heads, g.tq), dtype=acc)
    out = xp.zeros((g.batch_heads, g.tq, g.dv), dtype=acc)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for j0 in _key_blocks(masking, g):
            j1 = min(j0 + _BLOCK, g.tk)
            keep = _block_keep(xp, masking, g, j0, j1)
            s = xp.where(keep, blas.matmul(q, xp.swapaxes(k[:, j0:j1], 1, 2)) * acc.type(scale), -np.inf)
            new_top = xp.maximum(top, s.max(axis=2))
            shift = xp.where(new_top == -np.inf, 0, new_top)  # rows without a kept key so far stay at 0
            alpha = xp.exp(top - shift)
            p = xp.exp(s - shift[..., None])
            total = total * alpha + p.sum(axis=2)
            if key_offset is not None:
                p = p * _block_survivors(xp, drop, key_offset, g, j0, j1) * drop_scale
            out = out * alpha[..., None] + blas.matmul(p, v[:, j0:j1])
            top = new_top
        lse = xp.where(total == 0, -np.inf, top + xp.log(total))
        out = xp.where(total[..., None] == 0, 0, out / xp.where(total == 0, 1, total)[..., None])
    stored = out.astype(query.dtype, copy=False)

    def backward(grad: Any) -> tuple[Any, Any, Any]:
        dout = _flat(xp, grad, g.tq, g.dv).astype(acc, copy=False)
        dq, dk, dv = _blockwise_backward(xp, q, k, v, stored.astype(acc, copy=False), dout, lse, g, masking, drop,
                                         key_offset, scale)
        return (dq.reshape(query.shape).astype(query.dtype, copy=False),
                dk.reshape(key.shape).astype(query.dtype, copy=False),
                dv.reshape(value.shape).astype(query.dtype, copy=False))

    return op_result("scaled_dot_product_attention", stored.reshape(g.batch, g.heads, g.tq, g.dv), query.device,
                     (query, key, value), backward)


def _blockwise_backward(xp: Any, q: Any, k: Any, v: Any, out: Any, dout: Any, lse: Any, g: _ak.Geometry,
                        masking: _ak.Masking, drop: _ak.Dropout, key_offset: tuple[int, int] | None,
                        scale: float) -> tuple[Any, Any, Any]:
    """The gradients of the blockwise forward, recomputing each block's weights from the log-sum-exp."""
    acc = q.dtype.type
    delta = (dout * out).sum(axis=2)
    dq = xp.zeros(q.shape, dtype=q.dtype)
    dk = xp.zeros(k.shape, dtype=q.dtype)
    dv = xp.zeros(v.shape, dtype=q.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        for j0 in _key_blocks(masking, g):
            j1 = min(j0 + _BLOCK, g.tk)
            keep = _block_keep(xp, masking, g, j0, j1)
            s = blas.matmul(q, xp.swapaxes(k[:, j0:j1], 1, 2)) * acc(scale)
            p = xp.where(keep, xp.exp(s - lse[..., None]), 0)
            dp = blas.matmul(dout, xp.swapaxes(v[:, j0:j1], 1, 2))
            weight = p
            if key_offset is not None:
                kept = _block_survivors(xp, drop, key_offset, g, j0, j1) * acc(drop.scale)
                dp, weight = dp * kept, p * kept
            ds = p * (dp - delta[..., None])
            dq += blas.matmul(ds, k[:, j0:j1])
            dk[:, j0:j1] = blas.matmul(xp.swapaxes(ds, 1, 2), q) * acc(scale)
            dv[:, j0:j1] = blas.matmul(xp.swapaxes(weight, 1, 2), dout)
    return dq * acc(scale), dk, dv
