"""NCCL's reductions on host buffers, with NCCL's numerics for half precision.

float16: contributions are added one at a time in rank order, each sum rounded to float16 (NCCL's kernels
add halves with ``__hadd``; its ring starts each chunk at another rank, so the last bit may differ from a
real run). bfloat16 (uint16 bit patterns): each addition is done in float32 and rounded to bfloat16, to
nearest even (as NCCL's bf16 kernels); NaN stays NaN. AVG on floating types multiplies every contribution
by 1/n first (NCCL's pre-multiplied sum), on integers sums then divides (truncating, as NCCL).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["DTYPES", "OPS", "reduce", "bf16_to_f32", "f32_to_bf16"]

# NCCL datatype -> (numpy storage dtype, name)
DTYPES: dict[int, tuple[np.dtype, str]] = {
    0: (np.dtype(np.int8), "int8"), 1: (np.dtype(np.uint8), "uint8"), 2: (np.dtype(np.int32), "int32"),
    3: (np.dtype(np.uint32), "uint32"), 4: (np.dtype(np.int64), "int64"), 5: (np.dtype(np.uint64), "uint64"),
    6: (np.dtype(np.float16), "float16"), 7: (np.dtype(np.float32), "float32"),
    8: (np.dtype(np.float64), "float64"), 9: (np.dtype(np.uint16), "bfloat16"),
}
OPS = {0: "sum", 1: "prod", 2: "max", 3: "min", 4: "avg"}


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) as float32 values."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to nearest even bfloat16, as uint16 bit patterns (NaN -> 0x7FC0)."""
    values = np.asarray(values, dtype=np.float32)
    x = values.view(np.uint32)
    rounded = ((x + (((x >> 16) & 1) + 0x7FFF)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


def reduce(buffers: Sequence[np.ndarray], nccl_dtype: int, op: int) -> np.ndarray:
    """The reduction of ``buffers`` (one per rank, rank order) with NCCL ``op``, in NCCL's numerics."""
    name = DTYPES[nccl_dtype][1]
    n = len(buffers)
    if name == "bfloat16":
        vals = [bf16_to_f32(b) for b in buffers]
        if op == 4:
            vals = [bf16_to_f32(f32_to_bf16(v * np.float32(1.0 / n))) for v in vals]
        acc = vals[0]
        for v in vals[1:]:
            acc = bf16_to_f32(f32_to_bf16(_combine(acc, v, op)))
        return f32_to_bf16(acc)
    floating = np.issubdtype(buffers[0].dtype, np.floating)
    if op == 4 and floating:
        scale = buffers[0].dtype.type(1.0 / n)
        buffers = [b * scale for b in buffers]
    acc = buffers[0].copy()
    for b in buffers[1:]:
        acc = _combine(acc, b, op).astype(acc.dtype, copy=False)
    if op == 4 and not floating:
        acc = (acc // n) if np.issubdtype(acc.dtype, np.unsignedinteger) else np.trunc(acc / n).astype(acc.dtype)
    return acc


def _combine(a: np.ndarray, b: np.ndarray, op: int) -> np.ndarray:
    if op in (0, 4):
        return a + b
    if op == 1:
        return a * b
    if op == 2:
        return np.maximum(a, b)
    if op == 3:
        return np.minimum(a, b)
    raise ValueError(f"unknown NCCL op {op}")
