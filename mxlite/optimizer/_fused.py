"""One launch per arena: fused SGD and Adam updates over a flat parameter arena.

Buffer flow: the arena's data buffer holds every weight in registration order, its gradient
buffer every gradient in reverse order, and each optimizer state is one more buffer with the
data buffer's layout. An :class:`ArenaPlan` lists the segments (parameters) to update and cuts
them into chunks of at most :data:`CHUNK` elements that never straddle two parameters; on a
GPU one kernel launch (``kernels/optimizers.cu``) updates every chunk, reading the
per-parameter learning rate and weight decay from a small table refreshed before each launch.
On a CPU device the NumPy twins below do the same math, segment by segment, in float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._kernels import get_kernel
from ..device import Device

__all__ = ["CHUNK", "ArenaPlan", "Segment", "sgd_arena", "adam_arena"]

CHUNK = 65536  # elements per block: 256 threads x 256 elements, amortising the table reads
THREADS = 256  # threads per block; a multiple of the warp size with good occupancy on sm_80+

_KERNEL_FILE = "optimizers.cu"
_DTYPE_NAMES = {np.dtype(np.float32): "float", np.dtype(np.float16): "__half"}
_ALL_NAMES = tuple(f"{rule}<{t}>" for rule in ("sgd_update", "adam_update")
                   for t in ("float", "__half", "__nv_bfloat16"))


@dataclass(frozen=True)
class Segment:
    """One parameter in an arena: its data offset, gradient offset and size (elements)."""

    offset: int
    grad_offset: int
    size: int


@dataclass
class ArenaPlan:
    """The chunk table of a set of segments; device copies are made once per device."""

    segments: Sequence[Segment]
    chunk_seg: np.ndarray = field(init=False)
    chunk_start: np.ndarray = field(init=False)
    chunk_end: np.ndarray = field(init=False)
    _on_device: dict[Device, tuple[Any, ...]] = field(default_factory=dict, init=False, repr=False)
    _scratch: list[np.ndarray] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        seg, start, end = [], [], []
        for s, segment in enumerate(self.segments):
            for first in range(segment.offset, segment.offset + segment.size, CHUNK):
                seg.append(s)
                start.append(first)
                end.append(min(first + CHUNK, segment.offset + segment.size))
        self.chunk_seg = np.asarray(seg, dtype=np.int32)
        self.chunk_start = np.asarray(start, dtype=np.int64)
        self.chunk_end = np.asarray(end, dtype=np.int64)

    def grad_shift(self) -> np.ndarray:
        """Per segment, ``grad_offset - offset``: where a weight's gradient sits."""
        return np.asarray([s.grad_offset - s.offset for s in self.segments], dtype=np.int64)

    def tables(self, device: Device) -> tuple[Any, ...]:
        """(chunk_seg, chunk_start, chunk_end, grad_shift) on ``device``, copied once."""
        found = self._on_device.get(device)
        if found is None:
            with device.use():
                xp = device.xp
                found = tuple(xp.asarray(a) for a in (self.chunk_seg, self.chunk_start, self.chunk_end,
                                                       self.grad_shift()))
            self._on_device[device] = found
        return found


def _views(plan: ArenaPlan, buffers: Sequence[Any], s: int, grad: Any) -> tuple[Any, ...]:
    seg = plan.segments[s]
    out = [b[seg.offset: seg.offset + seg.size] if b is not None else None for b in buffers]
    return (*out, grad[seg.grad_offset: seg.grad_offset + seg.size])


def _effective_grad(g: np.ndarray, w: np.ndarray, wd: float, rescale: float, clip: float | None,
                    out: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """``clip(rescale * g, ±clip) + wd * w`` in float32 (``g`` itself when that is the identity)."""
    plain = rescale == 1 and not (clip is not None and clip > 0) and not wd
    if plain and g.dtype == np.float32:
        return g  # read-only use below: the gradient buffer is never modified
    np.multiply(g, np.float32(rescale), out=out, casting="unsafe")   # rescale*g
    if clip is not None and clip > 0:
        np.clip(out, -np.float32(clip), np.float32(clip), out=out)    # clip(.)
    if wd:
        np.multiply(w, np.float32(wd), out=tmp)                       # + wd*w
        out += tmp
    return out


def _scratch(plan: ArenaPlan, count: int) -> list[np.ndarray]:
    """``count`` float32 work buffers as long as the longest segment, made once per plan (CPU twins)."""
    if len(plan._scratch) < count:
        longest = max((s.size for s in plan.segments), default=0)
        plan._scratch = [np.empty(longest, np.float32) for _ in range(count)]
    return plan._scratch[:count]


def _weights32(w_store: np.ndarray, master: np.ndarray | None, tmp: np.ndarray) -> np.ndarray:
    if master is not None:
        return master
    if w_store.dtype == np.float32:
        return w_store
    tmp[...] = w_store
    return tmp


def sgd_arena(plan: ArenaPlan, device: Device, weight: Any, grad: Any, mom: Any, master: Any,
              lr: np.ndarray, wd: np.ndarray, momentum: float, rescale: float, clip: float | None) -> None:
    """SGD over every segment of ``plan``: ``G = clip(rescale*g) + wd*w``; ``mom = mu*mom - lr*G``;
    ``w += mom`` (``w -= lr*G`` when ``mom`` is None). ``lr``/``wd`` hold one value per segment.
    ``master`` (float32, or None) holds master weights for half-precision ``weight``.
    """
    if device.is_gpu:
        _launch(device, "sgd_update", weight, plan, (weight, grad, mom, master), lr, wd,
                (momentum, rescale, clip or 0.0))
        return
    G_buf, tmp_buf, w_buf = _scratch(plan, 3)
    for s in range(len(plan.segments)):
        w_store, m, w32, g = _views(plan, (weight, mom, master), s, grad)
        n = g.size
        G, tmp = G_buf[:n], tmp_buf[:n]
        w = _weights32(w_store, w32, w_buf[:n])
        G = _effective_grad(g, w, wd[s], rescale, clip, G, tmp)          # G = clip(rescale*g) + wd*w
        np.multiply(G, np.float32(lr[s]), out=tmp)                       # lr*G
        if m is not None:
            m *= np.float32(momentum)                                    # mom = mu*mom - lr*G
            m -= tmp
            w += m                                                       # w += mom
        else:
            w -= tmp                                                     # w -= lr*G
        if w is not w_store:
            w_store[...] = w


def adam_arena(plan: ArenaPlan, device: Device, weight: Any, grad: Any, mean: Any, var: Any, master: Any,
               lr_t: np.ndarray, wd: np.ndarray, beta1: float, beta2: float, epsilon: float, rescale: float,
               clip: float | None) -> None:
    """Adam over every segment: ``m = b1*m + (1-b1)*G``; ``v = b2*v + (1-b2)*G^2``;
    ``w -= lr_t * m / (sqrt(v) + eps)``; ``lr_t`` per segment carries the bias correction.
    """
    if device.is_gpu:
        _launch(device, "adam_update", weight, plan, (weight, grad, mean, var, master), lr_t, wd,
                (beta1, beta2, epsilon, rescale, clip or 0.0))
        return
    f = np.float32
    G_buf, tmp_buf, w_buf = _scratch(plan, 3)
    for s in range(len(plan.segments)):
        w_store, m, v, w32, g = _views(plan, (weight, mean, var, master), s, grad)
        n = g.size
        G, tmp = G_buf[:n], tmp_buf[:n]
        w = _weights32(w_store, w32, w_buf[:n])
        G = _effective_grad(g, w, wd[s], rescale, clip, G, tmp)          # G = clip(rescale*g) + wd*w
        m *= f(beta1)                                                    # m = b1*m + (1-b1)*G
        np.multiply(G, f(1) - f(beta1), out=tmp)
        m += tmp
        v *= f(beta2)                                                    # v = b2*v + (1-b2)*G^2
        np.multiply(G, G, out=tmp)
        tmp *= f(1) - f(beta2)
        v += tmp
        np.sqrt(v, out=tmp)                                              # w -= lr_t*m/(sqrt(v)+eps)
        tmp += f(epsilon)
        np.divide(m, tmp, out=tmp)
        tmp *= f(lr_t[s])
        w -= tmp
        if w is not w_store:
            w_store[...] = w


def _launch(device: Device, rule: str, weight: Any, plan: ArenaPlan, arrays: tuple[Any, ...], lr: np.ndarray,
            wd: np.ndarray, scalars: tuple[float, ...]) -> None:
    """One launch of ``rule<T>`` over every chunk of ``plan`` (T from the weight dtype)."""
    type_name = _DTYPE_NAMES.get(weight.dtype) or ("__nv_bfloat16" if weight.dtype.name == "bfloat16" else None)
    if type_name is None:
        raise TypeError(f"{rule}: no fused kernel for weights of dtype {weight.dtype}")
    kernel = get_kernel(_KERNEL_FILE, f"{rule}<{type_name}>", device, _ALL_NAMES)
    chunk_seg, chunk_start, chunk_end, shift = plan.tables(device)
    null = np.uint64(0)  # an 8-byte zero is a null pointer argument (e.g. no master weights)
    with device.use():
        xp = device.xp
        args = [a if a is not None else null for a in arrays]
        args += [chunk_seg, chunk_start, chunk_end, shift, xp.asarray(lr, dtype=np.float32),
                 xp.asarray(wd, dtype=np.float32)]
        args += [np.float32(x) for x in scalars]
        kernel((len(plan.chunk_seg),), (THREADS,), tuple(args))
