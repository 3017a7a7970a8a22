"""Scaled dot-product attention without the T x T matrix: ``kernels/attention.cu`` and its NumPy twin.

Purpose: attention composed of ``batch_dot``, a mask and ``softmax`` writes the ``(B, H, Tq, Tk)`` scores,
then the probabilities, passes over them several times and keeps them for the backward: memory and traffic
grow with T². The kernels keep per query row a running maximum and sum (flash attention's online softmax),
store only its log-sum-exp, and the backward recomputes the scores block by block: memory grows with T.
On GPUs they run through CuPy; on CPU devices through the serial host build when
:func:`mxlite.device.kernels.cpu_kernels_enabled` allows (:func:`compiled`), else the caller takes its
blockwise path (:mod:`mxlite.ops.attention`).

Twin: :func:`forward_twin` and :func:`backward_twin` perform the kernels' float32 operations in the kernels'
order (dot products in eight lanes, keys in blocks of :data:`KEY_BLOCK` for the online softmax, sums over
keys or queries in order, exp and log from IEEE arithmetic), so the host build, the emulated GPUs and the twin
agree bit for bit at any block size (tests/test_attention_kernels.py). The twin materialises the scores: it
is a reference, not a path.

Layout: ``q`` (BH, Tq, Dk), ``k`` (BH, Tk, Dk), ``v`` (BH, Tk, Dv), C-contiguous, float32, float16 or
bfloat16 (bfloat16 given as uint16 bit patterns, or a dtype named bfloat16); ``bh = b * heads + h``.
:class:`Masking` says which keys each query row keeps, :class:`Dropout` which weights survive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..device import Device, device_of
from ..device.kernels import KernelFile
from . import _philox
from ._loss_kernels import log_ge1
from .rnn_ops import _exp_parts

__all__ = ["KERNELS", "KERNEL_FILE", "KEY_BLOCK", "LANES", "MAX_HEAD", "Dropout", "Geometry", "Masking", "backward",
           "backward_twin", "bf16_to_float32", "compiled", "dropout_state", "float32_to_bf16", "forward",
           "forward_twin", "keep_matrix", "lane_dot", "supported", "survivors", "type_name"]

KERNEL_FILE = "attention.cu"
KEY_BLOCK = 64  # kernels/attention.cu: kKeys, the keys per block of the online softmax
LANES = 8  # kernels/attention.cu: kLanes
MAX_HEAD = 256  # kernels/attention.cu: kMaxHead
_ROWS = 16  # kernels/attention.cu: kRows, rows per thread block
KERNELS = KernelFile(KERNEL_FILE, ("float32", "float16", "bfloat16"),
                     ("attention_forward", "attention_backward_dq", "attention_backward_dkv"), block_threads=128)
_MAX_BLOCKS = 65535  # blocks loop over tiles past it
_NULL = np.uint64(0)  # an 8-byte zero is a null pointer argument


@dataclass(frozen=True)
class Geometry:
    """The sizes of one attention call: ``batch_heads = batch * heads`` rows of ``(tq, dk)`` queries, ``(tk, dk)``
    keys and ``(tk, dv)`` values."""

    batch: int
    heads: int
    tq: int
    tk: int
    dk: int
    dv: int

    @property
    def batch_heads(self) -> int:
        """``batch * heads``."""
        return self.batch * self.heads


@dataclass(frozen=True)
class Masking:
    """Which keys a query row keeps: not ``j > i`` when ``causal``, not ``j >= valid_length[b]`` (``valid_length``:
    an int64 (batch,) array on the device, or None), and ``mask[b, h, i, j]`` (a bool array broadcast to
    ``(batch, heads, tq, tk)``, strides 0 on broadcast axes, or None)."""

    mask: Any = None
    valid_length: Any = None
    causal: bool = False


@dataclass(frozen=True)
class Dropout:
    """Dropout of the attention weights: ``state`` is a uint64 (key, offset) array on the device (or None: no
    dropout); a weight survives when its Philox uniform is >= ``rate`` (float32) and is then multiplied by
    ``scale`` = 1 / (1 - rate) in float32."""

    state: Any = None
    rate: float = 0.0

    @property
    def scale(self) -> np.float32:
        """``1 / (1 - rate)`` computed in float64, rounded to float32 (0 for rate 1)."""
        return np.float32(0.0 if self.rate >= 1.0 else 1.0 / (1.0 - self.rate))


def type_name(dtype: Any) -> str | None:
    """The kernels' storage type for ``dtype`` ('float', '__half', '__nv_bfloat16'; uint16 arrays are taken as
    bfloat16 bit patterns), or None when they have none."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name == "uint16":
        name = "bfloat16"
    return KERNELS.type_name(name) if KERNELS.supports(name) else None


def supported(dtype: Any, dk: int, dv: int) -> bool:
    """Whether the kernels take ``dtype`` (float32, float16, bfloat16) with head dimensions ``dk``, ``dv`` (<= 256)."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    return KERNELS.supports(name) and 0 < dk <= MAX_HEAD and 0 < dv <= MAX_HEAD


def compiled(device: Device) -> bool:
    """Whether the kernels run on ``device``: every GPU; a CPU device when the host build is enabled and built."""
    return KERNELS.compiled_on(device)


# -- the twin -------------------------------------------------------------------------------------------------
def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) as float32 values (exact)."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def float32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to nearest even bfloat16 (CUDA's ``__float2bfloat16_rn``), as uint16 bit patterns;
    every NaN becomes 0x7FFF, as CUDA's conversion gives."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)  # NaNs: below
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    return np.where(nan, np.uint32(0x7FFF), rounded).astype(np.uint16)


def _widen(a: np.ndarray) -> np.ndarray:
    """Storage values as float32 (bfloat16 from its bit patterns)."""
    if a.dtype == np.uint16 or a.dtype.name == "bfloat16":
        return bf16_to_float32(a.view(np.uint16))
    return a.astype(np.float32)


def _narrow(x: np.ndarray, like: np.ndarray) -> np.ndarray:
    """float32 values stored as ``like``'s dtype, rounded to nearest even (bfloat16 as bit patterns)."""
    if like.dtype == np.uint16 or like.dtype.name == "bfloat16":
        return float32_to_bf16(x).view(like.dtype)
    return x.astype(like.dtype)


def _exp_le0(y: np.ndarray) -> np.ndarray:
    s, q = _exp_parts(y)
    return s + s * q


def _max_keep_nan(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where((b > a) | (b != b), b, a)


def _fold_lanes(lanes: np.ndarray) -> np.ndarray:
    """(..., 8) partial sums added pairwise, lane[l] += lane[l + s] for s = 4, 2, 1: (...)."""
    s = LANES // 2
    while s:
        lanes = lanes[..., :s] + lanes[..., s:2 * s]
        s //= 2
    return lanes[..., 0]


def _padded(a: np.ndarray) -> np.ndarray:
    """float32 ``a`` with its last axis padded with zeros to a multiple of 8 (adding 0 * 0 changes no lane)."""
    pad = -a.shape[-1] % LANES
    return np.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, pad)]) if pad else a


def lane_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 ``a`` (n, ..., rows, d) against ``b`` (n, ..., cols, d): every row with every column, (n, ..., rows,
    cols), each dot product in kernels/attention.cu's lane order."""
    a, b = _padded(a), _padded(b)
    lanes = np.zeros(a.shape[:-1] + (b.shape[-2], LANES), np.float32)
    for g in range(a.shape[-1] // LANES):
        part = slice(g * LANES, (g + 1) * LANES)
        lanes += a[..., :, None, part] * b[..., None, :, part]
    return _fold_lanes(lanes)


def _row_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row by row dot products of float32 ``a``, ``b`` (..., d) -> (...), in the kernels' lane order."""
    a, b = _padded(a), _padded(b)
    lanes = np.zeros(a.shape[:-1] + (LANES,), np.float32)
    for g in range(a.shape[-1] // LANES):
        part = slice(g * LANES, (g + 1) * LANES)
        lanes += a[..., part] * b[..., part]
    return _fold_lanes(lanes)


def keep_matrix(masking: Masking, geometry: Geometry) -> np.ndarray:
    """(batch_heads, tq, tk) bool: which keys each query row keeps (``masking``'s arrays as NumPy arrays)."""
    g = geometry
    keep = np.ones((g.batch, g.heads, g.tq, g.tk), bool)
    if masking.causal:
        keep &= np.arange(g.tk)[None, :] <= np.arange(g.tq)[:, None]
    if masking.valid_length is not None:
        keep &= np.arange(g.tk)[None, None, None, :] < np.asarray(masking.valid_length).reshape(g.batch, 1, 1, 1)
    if masking.mask is not None:
        keep &= np.asarray(masking.mask) != 0
    return keep.reshape(g.batch_heads, g.tq, g.tk)


def survivors(key: int, offset: int, geometry: Geometry, rate: float) -> np.ndarray:
    """(batch_heads, tq, tk) bool: which attention weights survive dropout drawn at (key, offset)."""
    g = geometry
    u = _philox.uniforms(key, offset, g.batch_heads * g.tq * g.tk)
    return (u >= np.float32(rate)).reshape(g.batch_heads, g.tq, g.tk)


def forward_twin(q: np.ndarray, k: np.ndarray, v: np.ndarray, keep: np.ndarray, scale: float,
                 survive: np.ndarray | None = None, drop_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """``attention_forward``: ``(out (BH, Tq, Dv) in q's dtype, lse (BH, Tq) float32)``; ``keep`` from
    :func:`keep_matrix`, ``survive`` from :func:`survivors` (None: no dropout)."""
    qf, kf, vf = _widen(q), _widen(k), _widen(v)
    bh, tq, tk = keep.shape
    with np.errstate(all="ignore"):  # NaN and inf flow through as in the kernels, silently
        scores = lane_dot(qf, kf) * np.float32(scale)
        m = np.full((bh, tq), -np.inf, np.float32)
        total = np.zeros((bh, tq), np.float32)
        acc = np.zeros((bh, tq, vf.shape[-1]), np.float32)
        for j0 in range(0, tk, KEY_BLOCK):
            m, total, acc = _online_block(scores, keep, vf, survive, np.float32(drop_scale), j0, m, total, acc)
        out = np.where(total[..., None] == 0, np.float32(0), acc / total[..., None])
        lse = np.where(total == 0, np.float32(-np.inf), m + log_ge1(np.where(total == 0, np.float32(1), total)))
    return _narrow(out, q), lse.astype(np.float32)


def _online_block(scores: np.ndarray, keep: np.ndarray, v: np.ndarray, survive: np.ndarray | None,
                  drop_scale: np.float32, j0: int, m: np.ndarray, total: np.ndarray,
                  acc: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One block of keys of the online softmax (the kernel's phases for keys ``j0 .. j0 + KEY_BLOCK``)."""
    cols = range(j0, min(j0 + KEY_BLOCK, keep.shape[2]))
    m_blk = np.full(m.shape, -np.inf, np.float32)
    for j in cols:
        m_blk = np.where(keep[:, :, j], _max_keep_nan(m_blk, scores[:, :, j]), m_blk)
    live = keep[:, :, j0:cols.stop].any(axis=2)
    m_new = _max_keep_nan(m, m_blk)
    alpha = _exp_le0(m - m_new)
    new_total = total * alpha
    new_acc = acc * alpha[..., None]
    for j in cols:
        p = _exp_le0(scores[:, :, j] - m_new)
        new_total = np.where(keep[:, :, j], new_total + p, new_total)
        weight, adds = p, keep[:, :, j]
        if survive is not None:
            weight, adds = p * drop_scale, adds & survive[:, :, j]
        new_acc = np.where(adds[..., None], new_acc + weight[..., None] * v[:, None, j, :], new_acc)
    return (np.where(live, m_new, m), np.where(live, new_total, total), np.where(live[..., None], new_acc, acc))


def backward_twin(q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray, dout: np.ndarray, lse: np.ndarray,
                  keep: np.ndarray, scale: float, survive: np.ndarray | None = None,
                  drop_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``attention_backward_dq`` then ``attention_backward_dkv``: ``(dq, dk, dv)`` in q's dtype."""
    qf, kf, vf, of, df = (_widen(a) for a in (q, k, v, out, dout))
    scale, drop_scale = np.float32(scale), np.float32(drop_scale)
    with np.errstate(all="ignore"):
        delta = _row_dot(df, of)
        p = _exp_le0(lane_dot(qf, kf) * scale - lse[..., None])
        dpd = lane_dot(df, vf)
        dp = dpd if survive is None else np.where(survive, dpd * drop_scale, np.float32(0))
        ds = p * (dp - delta[..., None])
        weight, adds = (p, keep) if survive is None else (p * drop_scale, keep & survive)
        dq = np.zeros(qf.shape, np.float32)
        for j in range(keep.shape[2]):
            dq = np.where(keep[:, :, j, None], dq + ds[:, :, j, None] * kf[:, None, j, :], dq)
        dk = np.zeros(kf.shape, np.float32)
        dv = np.zeros(vf.shape, np.float32)
        for i in range(keep.shape[1]):
            dk = np.where(keep[:, i, :, None], dk + ds[:, i, :, None] * qf[:, None, i, :], dk)
            dv = np.where(adds[:, i, :, None], dv + weight[:, i, :, None] * df[:, None, i, :], dv)
    return _narrow(dq * scale, q), _narrow(dk * scale, q), _narrow(dv, q)


# -- the kernels ----------------------------------------------------------------------------------------------
def _mask_args(masking: Masking) -> tuple[Any, Any, np.int32]:
    """The kernels' mask pointer and element strides (b, h, i, j), the valid lengths and the causal flag."""
    mask = masking.mask
    if mask is None:
        mask_args: tuple[Any, ...] = (_NULL, np.int64(0), np.int64(0), np.int64(0), np.int64(0))
    else:
        mask_args = (mask, *(np.int64(s // mask.itemsize) for s in mask.strides))
    valid = _NULL if masking.valid_length is None else masking.valid_length
    return mask_args, valid, np.int32(1 if masking.causal else 0)


def _launch(name: str, device: Device, dtype: Any, tiles: int, threads: int | None, args: tuple[Any, ...]) -> None:
    if tiles == 0:
        return  # a grid of 0 blocks is a CUDA error
    function = KERNELS.function(f"{name}<{type_name(dtype)}>", device)
    if threads is None:
        threads = KERNELS.block_for(device)
    with device.use():
        function((min(tiles, _MAX_BLOCKS),), (threads,), args)


def _common_args(masking: Masking, dropout: Dropout, scale: float, geometry: Geometry) -> tuple[Any, ...]:
    g = geometry
    mask_args, valid, causal = _mask_args(masking)
    state = _NULL if dropout.state is None else dropout.state
    return (*mask_args, valid, state, np.float32(dropout.rate), dropout.scale, np.float32(scale),
            np.int64(g.batch_heads), np.int64(g.heads), np.int64(g.tq), np.int64(g.tk), np.int64(g.dk),
            np.int64(g.dv), causal)


def forward(xp: Any, q: Any, k: Any, v: Any, geometry: Geometry, masking: Masking, dropout: Dropout, scale: float,
            threads: int | None = None) -> tuple[Any, Any]:
    """Kernel ``attention_forward``: ``(out (BH, Tq, Dv), lse (BH, Tq) float32)`` on q's device. ``threads``: block
    size (tests; default 1 on a CPU device, 128 on a GPU). The arrays must be C-contiguous (the module docstring)."""
    g = geometry
    device = device_of(q)
    with device.use():
        out = xp.empty((g.batch_heads, g.tq, g.dv), dtype=q.dtype)
        lse = xp.empty((g.batch_heads, g.tq), dtype=np.float32)
    tiles = g.batch_heads * -(-g.tq // _ROWS)
    _launch("attention_forward", device, q.dtype, tiles, threads,
            (q, k, v, out, lse, *_common_args(masking, dropout, scale, g)))
    return out, lse


def backward(xp: Any, q: Any, k: Any, v: Any, out: Any, dout: Any, lse: Any, geometry: Geometry, masking: Masking,
             dropout: Dropout, scale: float, threads: int | None = None) -> tuple[Any, Any, Any]:
    """Kernels ``attention_backward_dq`` then ``attention_backward_dkv``: ``(dq, dk, dv)`` in q's dtype, from the
    forward's ``out`` and ``lse`` and the output gradient ``dout`` (C-contiguous, q's dtype)."""
    g = geometry
    device = device_of(q)
    with device.use():
        dq = xp.empty(q.shape, dtype=q.dtype)
        dk = xp.empty(k.shape, dtype=q.dtype)
        dv = xp.empty(v.shape, dtype=q.dtype)
        delta = xp.empty((g.batch_heads, g.tq), dtype=np.float32)
    common = _common_args(masking, dropout, scale, g)
    _launch("attention_backward_dq", device, q.dtype, g.batch_heads * -(-g.tq // _ROWS), threads,
            (q, k, v, out, dout, lse, dq, delta, *common))
    if g.tq == 0:
        with device.use():
            dk.fill(0)
            dv.fill(0)
        return dq, dk, dv
    _launch("attention_backward_dkv", device, q.dtype, g.batch_heads * -(-g.tk // _ROWS), threads,
            (q, k, v, dout, lse, delta, dk, dv, *common))
    return dq, dk, dv


def dropout_state(device: Device, rng: Any, geometry: Geometry) -> Any:
    """The (key, offset) state a dropout of ``geometry``'s weights reads on ``device``, taken from mxlite's random
    stream: on a GPU a copy of its Philox state (``mxlite.ops._philox``), whose offset is then moved past
    the counters used, with no host synchronisation; on a CPU device a fresh key drawn from the device's
    generator ``rng`` and offset 0."""
    g = geometry
    if not device.is_gpu:
        return np.array([rng.integers(0, np.iinfo(np.uint64).max, dtype=np.uint64, endpoint=True), 0], np.uint64)
    state = _philox.state(device)
    with device.use():
        saved = state.copy()
        used = _philox.counters(g.batch_heads * g.tq * g.tk)
        if used:
            _philox.KERNELS.function("philox_advance", device)(
                (1,), (1,), (state, np.uint64(used)))
    return saved
