"""One launch per arena: the plan, the kernel launcher and the NumPy twins of the fused updates.

Buffer flow: the arena's data buffer holds every weight in registration order, its gradient
buffer every gradient in reverse order, and each optimizer state is one more float32 buffer
with the data buffer's layout. An :class:`ArenaPlan` lists the segments (parameters) to update
and cuts them into chunks of at most :data:`CHUNK` elements that never straddle two
parameters; on a GPU one kernel launch (``kernels/optimizers.cu``) updates every chunk, reading
the per-parameter values (learning rate, weight decay, ...) from a small table, ``HP`` floats
per parameter, that the host refreshes before each launch (:class:`Launcher`).

On a CPU device the same kernels run compiled for the host (the serial build of
:mod:`mxlite.device._hostcuda`: one thread per block, the block loop vectorised by g++) when
:func:`mxlite._kernels.cpu_kernels_enabled` says they can. Otherwise, and always with
``MXLITE_CPU_KERNELS=numpy``, the NumPy twins do the same math: the reference the kernels are
tested against. The twin of most kernels is the rule's own
``step`` (``mxlite/optimizer/<rule>.py``) applied to views of the arena, segment by segment
(:func:`step_segments`): one NumPy text of each rule, which the rule tests check against
float64 references. SGD and Adam, the hot rules, also have hand-tuned twins
(:func:`sgd_twin`, :func:`adam_twin`) that reuse scratch buffers instead of allocating; NAG,
AdamW, RMSProp (plain), AdaGrad, AdaDelta, Signum and FTRL have hand-tuned chunk twins that
:func:`step_segments` runs in place of their ``step`` (:func:`_chunk_twins`): the same float32
operations in the same order, into reused scratch buffers (``tests/test_fused_chunks.py`` checks
them against ``step`` bit for bit).

Every twin walks each segment in chunks of :data:`TWIN_CHUNK` elements, the CPU's counterpart of
a kernel's block: a NumPy expression makes one pass over memory per operation, so on a whole
multi-megabyte parameter each of an update's ten-odd operations would stream the arena from DRAM;
on a chunk the operands and temporaries stay in cache and the arena is read and written from
memory about once. Every element goes through the same operations in the same order as without
chunks, so results are bit-identical. Only rules known to be elementwise are chunked: LAMB's and
LARS's ``step`` take norms over the whole parameter, so their generic twin (and that of any rule not
on the list) keeps whole segments.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from ..device import Device
from ..device.kernels import cpu_kernels_enabled, get_kernel

__all__ = ["CHUNK", "GRAD_TYPES", "HP", "KERNELS", "TWIN_CHUNK", "ArenaPlan", "Launcher", "Segment", "adam_twin",
           "one_minus", "sgd_twin", "step_segments"]

# Elements per block: on a GPU 256 threads x 256 elements, amortising the table reads; in the host
# build (one thread per block) a chunk is one vectorised loop. Measured there with
# benchmarks/bench_optimizer.py over 8 parameters of 2.5M: chunks of 4K, 16K and 64K elements
# are within noise of each other (64K marginally ahead), so both use one size.
CHUNK = 65536
# Elements per CPU twin chunk: 1 MiB per float32 operand, so an update's operands and temporaries
# (~7 MiB for Adam) stay in the last-level cache while each NumPy call (~1-2 us of Python) covers
# enough elements. Measured with benchmarks/bench_optimizer.py --chunks on a 2-core EPYC (1 MiB L2
# per core, 32 MiB L3): Adam over 8 tensors of 2.5M: 57 ms at 16K elements (L2-sized; the calls'
# overhead dominates), 43 ms at 64K, 37 ms at 256K, 52 ms unchunked; on 300 tensors of at most a
# few 100K elements (already cache-sized) 256K matches the unchunked twin.
TWIN_CHUNK = 1 << 18
THREADS = 256  # threads per block; a multiple of the warp size with good occupancy on sm_80+
HP = 4  # floats per parameter in the per-launch table (kernels/optimizers.cu: seg_hp)

_KERNEL_FILE = "optimizers.cu"
_TYPE_NAMES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}
KERNELS = ("sgd_update", "nag_update", "adam_update", "adamw_update", "rmsprop_update", "adagrad_update",
           "adadelta_update", "signum_update", "ftrl_update", "lamb_phase1", "lamb_phase2", "lars_norms",
           "lars_update", "nadam_update", "adabelief_update")
# Gradient types a kernel reads besides its storage type: the narrow wires' sums (mxlite/comm/narrow.py), one
# pair per `INSTANTIATE(T, G)` line of kernels/optimizers.cu. lamb_phase2 reads no gradient.
GRAD_TYPES = {"float32": ("float16", "bfloat16"), "float16": ("bfloat16",), "bfloat16": ("float16",)}
_NO_GRAD = ("lamb_phase2",)
_ALL_NAMES = (*(f"{k}<{t}>" for k in KERNELS for t in _TYPE_NAMES.values()),
              *(f"{k}<{_TYPE_NAMES[w]}, {_TYPE_NAMES[g]}>" for k in KERNELS if k not in _NO_GRAD
                for w, gs in GRAD_TYPES.items() for g in gs))


def one_minus(x: float) -> np.float32:
    """``1 - x`` computed in float64, rounded once to float32: a kernel's derived constant.

    The kernels take ``1 - beta1``, ``1 - rho``, ... as arguments instead of computing
    ``1.0f - x`` from the already rounded ``x``. This is the value NumPy uses when a twin
    multiplies a float32 array by the Python float ``1.0 - x`` (a Python float is cast to the
    array's dtype), so kernel and twin multiply by the same float32 number.
    """
    return np.float32(1.0 - x)


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


@cache  # np.dtype(...).name costs microseconds, a noticeable part of a small model's update
def _dtype_name(dtype: Any) -> str:
    """The name of a dtype, or the name itself ('bfloat16' comes as a name: NumPy and CuPy have no such dtype)."""
    return dtype if isinstance(dtype, str) else np.dtype(dtype).name


class Launcher:
    """Launches kernels of ``optimizers.cu`` over one plan with one per-parameter table (GPU, or a
    CPU device through the host build).

    Made once per fused update: it copies ``hp`` (shape ``(segments, HP)``, float32) to the
    device, then each call launches one kernel over every chunk of the plan.

    ``grad_dtype`` (default: the weights' dtype) is the type of the gradient buffer the kernels
    read; 'float16' or 'bfloat16' for a gradient summed on a narrow wire (bfloat16 arrays hold
    uint16 bit patterns). Such a buffer holds the sum pre-scaled by ``1/grad_scale``: rules pass
    their ``rescale_grad`` through :meth:`rescale`, which multiplies it by ``grad_scale``, so the
    kernel reads the half-precision gradient once and needs no float32 copy of it.

    Raises:
        TypeError: weights of a dtype without kernels (float32, float16, bfloat16 have them), or a
            gradient dtype without kernels for those weights (see :data:`GRAD_TYPES`).
    """

    def __init__(self, device: Device, plan: ArenaPlan, weight_dtype: Any, hp: np.ndarray, grad_dtype: Any = None,
                 grad_scale: float = 1.0) -> None:
        self.device, self.plan = device, plan
        # 'bfloat16' may come as a name: NumPy and CuPy have no bfloat16 dtype of their own.
        name = _dtype_name(weight_dtype)
        self.type_name = _TYPE_NAMES.get(name)
        if self.type_name is None:
            raise TypeError(f"no fused optimizer kernel for weights of dtype {name} "
                            f"(there are kernels for {', '.join(_TYPE_NAMES)})")
        grad_name = name if grad_dtype is None else _dtype_name(grad_dtype)
        if grad_name != name and grad_name not in GRAD_TYPES.get(name, ()):
            raise TypeError(f"no fused optimizer kernel for {name} weights reading a {grad_name} gradient "
                            f"(gradient types: {name}, {', '.join(GRAD_TYPES.get(name, ()))})")
        self.grad_type_name = _TYPE_NAMES[grad_name]
        self.grad_scale = float(grad_scale)
        with device.use():
            self._tables = (*plan.tables(device), device.xp.asarray(hp, dtype=np.float32))

    def rescale(self, rescale_grad: float) -> np.float32:
        """The ``rescale`` argument of a kernel: ``rescale_grad * grad_scale`` (float64 product, one rounding)."""
        return np.float32(float(rescale_grad) * self.grad_scale)

    def sums(self) -> Any:
        """A zeroed ``(segments, 2)`` float64 device array for the per-parameter norm sums."""
        with self.device.use():
            return self.device.xp.zeros((len(self.plan.segments), 2), np.float64)

    def __call__(self, kernel: str, buffers: Sequence[Any], scalars: Sequence[float], sums: Any = None) -> None:
        """Launch ``kernel<T>(*buffers, *chunk tables, seg_hp, [sums], *scalars)``; None buffers pass null."""
        types = self.type_name if kernel in _NO_GRAD or self.grad_type_name == self.type_name else (
            f"{self.type_name}, {self.grad_type_name}")
        function = get_kernel(_KERNEL_FILE, f"{kernel}<{types}>", self.device, _ALL_NAMES)
        null = np.uint64(0)  # an 8-byte zero is a null pointer argument (e.g. no master weights)
        args = [b if b is not None else null for b in buffers]
        args += self._tables
        if sums is not None:
            args.append(sums)
        args += [np.float32(x) for x in scalars]
        if len(self.plan.chunk_seg) == 0:  # only empty parameters: a grid of 0 blocks is a CUDA error
            return
        block = THREADS if self.device.is_gpu else 1  # the host build runs one thread per block
        with self.device.use():
            function((len(self.plan.chunk_seg),), (block,), tuple(args))


def compiled_on_cpu() -> bool:
    """Whether CPU devices run the fused updates as compiled kernels (:func:`mxlite._kernels.cpu_kernels_enabled`)."""
    return cpu_kernels_enabled(_KERNEL_FILE, _ALL_NAMES)


def _elementwise_rules() -> tuple[type, ...]:
    """Rules whose ``step`` is elementwise, so it may run chunk by chunk; any other (LAMB's and LARS's
    norms, a rule added later) keeps whole segments, which is always correct."""
    from .adabelief import AdaBelief  # noqa: PLC0415 - the rule modules import the optimizer base, not this one
    from .adadelta import AdaDelta  # noqa: PLC0415
    from .adagrad import AdaGrad  # noqa: PLC0415
    from .adam import Adam  # noqa: PLC0415
    from .adamw import AdamW  # noqa: PLC0415
    from .ftrl import Ftrl  # noqa: PLC0415
    from .nadam import Nadam  # noqa: PLC0415 - elementwise; its schedule S_t is cached per (parameter, count)
    from .nag import NAG  # noqa: PLC0415
    from .rmsprop import RMSProp  # noqa: PLC0415
    from .sgd import SGD  # noqa: PLC0415
    from .signum import Signum  # noqa: PLC0415

    return (AdaBelief, AdaDelta, AdaGrad, Adam, AdamW, Ftrl, NAG, Nadam, RMSProp, SGD, Signum)


def _chunks(size: int) -> range:
    """Starts of the :data:`TWIN_CHUNK`-element chunks of a segment of ``size`` elements."""
    return range(0, size, TWIN_CHUNK)


def step_segments(optimizer: Any, plan: ArenaPlan, indices: Sequence[Any], counts: Sequence[int], weight: Any,
                  grad: Any, state_names: Sequence[str], states: dict[str, Any], master: Any) -> None:
    """The generic twin: ``optimizer.step`` on each segment's views of the arena buffers, in float32.

    ``state_names`` lists the state buffers in the order of the rule's state tuple (one name:
    the state is that array; none: None). Half-precision weights are updated through
    ``master`` when given, else through a float32 copy written back rounded, so the math is
    float32 as in the kernels. Elementwise rules run chunk by chunk (see the module docstring), those
    with a hand-tuned chunk twin (:func:`_chunk_twins`: the same operations into reused scratch
    buffers) through it.
    """
    f32 = np.float32
    whole = type(optimizer) not in _elementwise_rules()
    params_of, chunk_twin, n_bufs = _chunk_twins().get(type(optimizer), (None, None, 0))
    bufs = _scratch(plan, n_bufs) if chunk_twin is not None else []
    for s, (index, count) in enumerate(zip(indices, counts)):
        seg = plan.segments[s]
        p = params_of(optimizer, index, count) if chunk_twin is not None else None
        for lo in (0,) if whole else _chunks(seg.size):
            hi = seg.size if whole else min(lo + TWIN_CHUNK, seg.size)
            window = slice(seg.offset + lo, seg.offset + hi)
            views = [states[name][window] for name in state_names]
            state = None if not views else views[0] if len(views) == 1 else tuple(views)
            g = grad[seg.grad_offset + lo: seg.grad_offset + hi]
            w_store = weight[window]
            if master is not None:
                w = master[window]
            else:
                w = w_store if w_store.dtype == f32 else w_store.astype(f32)
            g = g if g.dtype == f32 else g.astype(f32)
            if p is not None:
                chunk_twin(optimizer, p, w, g, state, [b[:hi - lo] for b in bufs])
            else:
                optimizer.step(index, w, g, state, count)
            if w is not w_store:
                w_store[...] = w


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
    """``count`` float32 work buffers of one chunk (or the longest segment, if shorter), made once per plan."""
    length = min(TWIN_CHUNK, max((s.size for s in plan.segments), default=0))
    if len(plan._scratch) < count or (plan._scratch and len(plan._scratch[0]) != length):
        plan._scratch = [np.empty(length, np.float32) for _ in range(count)]
    return plan._scratch[:count]


def _weights32(w_store: np.ndarray, master: np.ndarray | None, tmp: np.ndarray) -> np.ndarray:
    if master is not None:
        return master
    if w_store.dtype == np.float32:
        return w_store
    tmp[...] = w_store
    return tmp


def _views(plan: ArenaPlan, buffers: Sequence[Any], grad: Any) -> Any:
    """Per chunk of every segment: ``(segment index, *views of buffers (None stays None), grad view)``."""
    for s, seg in enumerate(plan.segments):
        for lo in _chunks(seg.size):
            hi = min(lo + TWIN_CHUNK, seg.size)
            out = [b[seg.offset + lo: seg.offset + hi] if b is not None else None for b in buffers]
            yield (s, *out, grad[seg.grad_offset + lo: seg.grad_offset + hi])


def sgd_twin(plan: ArenaPlan, weight: Any, grad: Any, mom: Any, master: Any, hp: np.ndarray, momentum: float,
             rescale: float, clip: float | None) -> None:
    """Twin of ``sgd_update``: ``G = clip(rescale*g) + wd*w``; ``mom = mu*mom - lr*G``; ``w += mom``
    (``w -= lr*G`` when ``mom`` is None). ``hp[s]`` = (lr, wd, ...) of segment ``s``; ``master``
    (float32, or None) holds master weights for half-precision ``weight``.
    """
    G_buf, tmp_buf, w_buf = _scratch(plan, 3)
    for s, w_store, m, w32, g in _views(plan, (weight, mom, master), grad):
        n = g.size
        G, tmp = G_buf[:n], tmp_buf[:n]
        w = _weights32(w_store, w32, w_buf[:n])
        G = _effective_grad(g, w, hp[s, 1], rescale, clip, G, tmp)       # G = clip(rescale*g) + wd*w
        np.multiply(G, np.float32(hp[s, 0]), out=tmp)                    # lr*G
        if m is not None:
            m *= np.float32(momentum)                                    # mom = mu*mom - lr*G
            m -= tmp
            w += m                                                       # w += mom
        else:
            w -= tmp                                                     # w -= lr*G
        if w is not w_store:
            w_store[...] = w


def adam_twin(plan: ArenaPlan, weight: Any, grad: Any, mean: Any, var: Any, master: Any, hp: np.ndarray,
              beta1: float, beta2: float, epsilon: float, rescale: float, clip: float | None) -> None:
    """Twin of ``adam_update``: ``m = b1*m + (1-b1)*G``; ``v = b2*v + (1-b2)*G^2``;
    ``w -= lr_t * m / (sqrt(v) + eps)`` with ``hp[s]`` = (lr_t, wd, ...), ``lr_t`` carrying the
    bias correction.
    """
    f = np.float32
    G_buf, tmp_buf, w_buf = _scratch(plan, 3)
    for s, w_store, m, v, w32, g in _views(plan, (weight, mean, var, master), grad):
        n = g.size
        G, tmp = G_buf[:n], tmp_buf[:n]
        w = _weights32(w_store, w32, w_buf[:n])
        G = _effective_grad(g, w, hp[s, 1], rescale, clip, G, tmp)       # G = clip(rescale*g) + wd*w
        m *= f(beta1)                                                    # m = b1*m + (1-b1)*G
        np.multiply(G, one_minus(beta1), out=tmp)
        m += tmp
        v *= f(beta2)                                                    # v = b2*v + (1-b2)*G^2
        np.multiply(G, one_minus(beta2), out=tmp)                        #   ((1-b2)*G)*G, the kernel's order
        tmp *= G
        v += tmp
        step = G_buf[:n]                                                 # G is no longer read
        np.multiply(m, f(hp[s, 0]), out=step)                            # w -= (lr_t*m)/(sqrt(v)+eps)
        np.sqrt(v, out=tmp)
        tmp += f(epsilon)
        step /= tmp
        w -= step
        if w is not w_store:
            w_store[...] = w


# -- hand-tuned chunk twins of the generic rules ---------------------------------------------------
# Each ``_<rule>_chunk(opt, p, w, g, state, bufs)`` does exactly the float32 operations of the rule's
# ``step`` (mxlite/optimizer/<rule>.py), in the same order, on one chunk, writing every intermediate
# into the chunk-sized scratch buffers ``bufs`` (made once per plan) instead of new arrays: NumPy's
# binary operators round a Python float to float32 first, so ``np.float32(x)`` below is the number
# ``step`` uses. ``p`` holds the segment's scalars from ``_<rule>_params``, or is None when a value
# would make ``step`` compute otherwise (a NumPy scalar promotes to float64; a clip <= 0, which ``step``
# applies and the kernels ignore); such segments keep the generic path. Rearrangements used, all exact in IEEE float32:
# ``a*b == b*a``, ``a+b == b+a``, and a value computed twice from the same operands is computed once.
_f = np.float32


def _plain(*values: Any) -> bool:
    """True when every value is a Python int or float (not a NumPy scalar, which could promote)."""
    return all(type(v) in (int, float) for v in values)


def _grad_ok(opt: Any) -> bool:
    clip = opt.clip_gradient
    return _plain(opt.rescale_grad) and (clip is None or (_plain(clip) and clip > 0))


def _grad(opt: Any, g: np.ndarray, w: np.ndarray, wd: float, bufs: Sequence[np.ndarray]) -> np.ndarray:
    """``G = clip(rescale*g) + wd*w`` into ``bufs[0]`` (``bufs[1]`` is spare), or ``g`` itself when that is G."""
    return _effective_grad(g, w, wd, opt.rescale_grad, opt.clip_gradient, bufs[0], bufs[1])


def _lr_wd_params(opt: Any, index: Any, *extra: Any) -> tuple[Any, ...] | None:
    values = (opt._get_lr(index), opt._get_wd(index), *extra)
    return values if _grad_ok(opt) and _plain(*values) else None


def _nag_chunk(opt: Any, p: tuple, w: np.ndarray, g: np.ndarray, mom: Any, bufs: Sequence[np.ndarray]) -> None:
    lr, wd, mu = p
    G = _grad(opt, g, w, wd, bufs)                                       # G = clip(rescale*g) + wd*w
    step, tmp = bufs[2], bufs[1]
    np.multiply(G, _f(lr), out=step)                                     # lr*G
    if mom is None:
        w -= step                                                        # w -= lr*G
        return
    mom *= _f(mu)                                                        # mom = mu*mom - lr*G
    mom -= step
    np.multiply(mom, _f(mu), out=tmp)                                    # w += mu*mom - lr*G
    tmp -= step
    w += tmp


def _decay_add_square(acc: np.ndarray, x: np.ndarray, rho: float, tmp: np.ndarray) -> None:
    """``acc = rho*acc + ((1-rho)*x)*x`` in place (RMSProp's and AdaDelta's running squares), ``tmp`` scratch."""
    acc *= _f(rho)
    np.multiply(x, _f(1.0 - rho), out=tmp)
    tmp *= x
    acc += tmp


def _descend_by_root(w: np.ndarray, G: np.ndarray, acc: np.ndarray, lr: float, eps: float, tmp: np.ndarray,
                     step: np.ndarray) -> None:
    """``w -= (lr*G)/(sqrt(acc) + eps)`` in the kernels' operation order, through the scratch ``tmp``, ``step``."""
    np.multiply(G, _f(lr), out=step)
    np.sqrt(acc, out=tmp)
    tmp += _f(eps)
    step /= tmp
    w -= step


def _adagrad_chunk(opt: Any, p: tuple, w: np.ndarray, g: np.ndarray, h: np.ndarray,
                   bufs: Sequence[np.ndarray]) -> None:
    lr, wd, eps = p
    G = _grad(opt, g, w, wd, bufs)                                       # G = clip(rescale*g) + wd*w
    tmp, step = bufs[1], bufs[2]
    np.multiply(G, G, out=tmp)                                           # h = h + G^2
    h += tmp
    _descend_by_root(w, G, h, lr, eps, tmp, step)                        # w -= (lr*G)/(sqrt(h) + eps)


def _rmsprop_chunk(opt: Any, p: tuple, w: np.ndarray, g: np.ndarray, n: np.ndarray,
                   bufs: Sequence[np.ndarray]) -> None:
    lr, wd, rho, eps, clip_w = p
    G = _grad(opt, g, w, wd, bufs)                                       # G = clip(rescale*g) + wd*w
    tmp, step = bufs[1], bufs[2]
    _decay_add_square(n, G, rho, tmp)                                    # n = rho*n + ((1-rho)*G)*G
    _descend_by_root(w, G, n, lr, eps, tmp, step)                        # w -= (lr*G)/(sqrt(n) + eps)
    if clip_w is not None:
        np.clip(w, -_f(clip_w), _f(clip_w), out=w)                       # w = clip(w, +-c_w)


def _adadelta_chunk(opt: Any, p: tuple, w: np.ndarray, g: np.ndarray, state: Any,
                    bufs: Sequence[np.ndarray]) -> None:
    lr, wd, rho, eps = p
    acc_g, acc_delta = state
    G = _grad(opt, g, w, wd, bufs)                                       # G = clip(rescale*g) + wd*w
    tmp, d = bufs[1], bufs[2]
    _decay_add_square(acc_g, G, rho, tmp)                                # Eg = rho*Eg + ((1-rho)*G)*G
    np.add(acc_delta, _f(eps), out=d)                                    # d = (sqrt(Ed + eps)/sqrt(Eg + eps))*G
    np.sqrt(d, out=d)
    np.add(acc_g, _f(eps), out=tmp)
    np.sqrt(tmp, out=tmp)
    d /= tmp
    d *= G
    _decay_add_square(acc_delta, d, rho, tmp)                            # Ed = rho*Ed + ((1-rho)*d)*d
    d *= _f(lr)                                                          # w -= lr*d
    w -= d


def _adamw_chunk(opt: Any, p: tuple, w: np.ndarray, g: np.ndarray, state: Any, bufs: Sequence[np.ndarray]) -> None:
    eta, wd, b1, b2, eps = p
    m, v = state
    G = _grad(opt, g, w, 0.0, bufs)                                      # G = clip(rescale*g)
    tmp, step = bufs[1], bufs[2]
    m *= _f(b1)                                                          # m = b1*m + (1-b1)*G
    np.multiply(G, _f(1.0 - b1), out=tmp)
    m += tmp
    v *= _f(b2)                                                          # v = b2*v + ((1-b2)*G)*G
    np.multiply(G, _f(1.0 - b2), out=tmp)
    tmp *= G
    v += tmp
    np.sqrt(v, out=tmp)                                                  # w -= eta*(m/(sqrt(v) + eps) + wd*w)
    tmp += _f(eps)
    np.divide(m, tmp, out=step)
    np.multiply(w, _f(wd), out=tmp)                                      #   (wd*w even for wd = 0, as step)
    step += tmp
    step *= _f(eta)
    w -= step


def _signum_chunk(opt: Any, p: tuple, w: np.ndarray, g: np.ndarray, mom: Any, bufs: Sequence[np.ndarray]) -> None:
    lr, wd, mu, decay = p
    tmp = bufs[1]
    if mom is None:
        w *= _f(decay)                                                   # w = (1 - lr*(wd + wd_lh))*w - lr*sign(g)
        np.sign(g, out=tmp)
        tmp *= _f(lr)
        w -= tmp
        return
    G = _grad(opt, g, w, wd, bufs)                                       # G = clip(rescale*g) + wd*w
    mom *= _f(mu)                                                        # mom = mu*mom - (1-mu)*G
    np.multiply(G, _f(1.0 - mu), out=tmp)
    mom -= tmp
    if decay != 1.0:                                                     # (w*1 is w: skipped)
        w *= _f(decay)                                                   # w = (1 - lr*wd_lh)*w + lr*sign(mom)
    np.sign(mom, out=tmp)
    tmp *= _f(lr)
    w += tmp


def _ftrl_chunk(opt: Any, p: tuple, w: np.ndarray, g: np.ndarray, state: Any, bufs: Sequence[np.ndarray]) -> None:
    lr, wd, lamda1, beta = p
    z, n = state
    G = _grad(opt, g, w, 0.0, bufs)                                      # g = clip(rescale*g)
    g2, sig, root = bufs[1], bufs[2], bufs[3]
    np.multiply(G, G, out=g2)                                            # g^2 (step computes it twice: once here)
    np.sqrt(n, out=sig)                                                  # sqrt(n), old n
    n += g2                                                              # n = n + g^2
    np.sqrt(n, out=root)                                                 # sqrt(n + g^2) = sqrt(new n), kept
    np.subtract(root, sig, out=sig)                                      # sigma = (sqrt(n + g^2) - sqrt(n))/lr
    sig /= _f(lr)
    sig *= w                                                             # z = z + (g - sigma*w)
    np.subtract(G, sig, out=sig)
    z += sig
    np.abs(z, out=sig)                                                   # shrunk = sign(z)*max(|z| - l1, 0)
    sig -= _f(lamda1)
    np.maximum(sig, _zeros(sig.size), out=sig)                           #   (a zero array: 3x a scalar 0's speed)
    np.sign(z, out=g2)
    g2 *= sig
    # w = -shrunk/((beta + sqrt(n))/lr + wd), as shrunk/(((-beta) - sqrt(n))/lr - wd): negating an
    # operand negates a sum, quotient or difference exactly (beta >= 0, sqrt(n) >= 0: no 0 sign flips)
    np.subtract(_f(-beta), root, out=root)                               # -(beta + sqrt(n))
    root /= _f(lr)                                                       # -((beta + sqrt(n))/lr)
    root -= _f(wd)                                                       # -((beta + sqrt(n))/lr + wd)
    np.divide(g2, root, out=w)


@cache
def _zeros_of(length: int) -> np.ndarray:
    """A read-only float32 zero array (``np.zeros``: untouched pages that all map the zero page, so cheap to read)."""
    zeros = np.zeros(length, np.float32)
    zeros.setflags(write=False)
    return zeros


def _zeros(n: int) -> np.ndarray:
    """``n`` float32 zeros, a view of one array per :data:`TWIN_CHUNK` (NumPy's ``maximum(x, 0)`` with a
    scalar 0 takes a slow broadcast loop; the same ufunc over two arrays gives the same bits, faster)."""
    return _zeros_of(max(n, TWIN_CHUNK))[:n]


def _nag_params(opt: Any, index: Any, count: int) -> tuple | None:
    return _lr_wd_params(opt, index, opt.momentum)


def _adagrad_params(opt: Any, index: Any, count: int) -> tuple | None:
    return _lr_wd_params(opt, index, opt.epsilon)


def _rmsprop_params(opt: Any, index: Any, count: int) -> tuple | None:
    clip_w = opt.clip_weights
    if opt.centered or not (clip_w is None or _plain(clip_w)):
        return None  # the centred form keeps the generic path
    values = _lr_wd_params(opt, index, opt.rho, opt.epsilon)
    return None if values is None else (*values, clip_w)


def _adadelta_params(opt: Any, index: Any, count: int) -> tuple | None:
    return _lr_wd_params(opt, index, opt.rho, opt.epsilon)


def _adamw_params(opt: Any, index: Any, count: int) -> tuple | None:
    eta = opt._get_lr(index)
    if opt.correct_bias:
        eta *= math.sqrt(1.0 - opt.beta2**count) / (1.0 - opt.beta1**count)  # as AdamW.step
    values = (eta, opt._get_wd(index), opt.beta1, opt.beta2, opt.epsilon)
    return values if _grad_ok(opt) and _plain(*values) else None


def _signum_params(opt: Any, index: Any, count: int) -> tuple | None:
    lr, wd = opt._get_lr(index), opt._get_wd(index)
    decay = 1.0 - lr * opt.wd_lh if opt.momentum else 1.0 - lr * (wd + opt.wd_lh)
    values = (lr, wd, opt.momentum, decay)
    return values if _grad_ok(opt) and _plain(*values) else None


def _ftrl_params(opt: Any, index: Any, count: int) -> tuple | None:
    values = (opt._positive_lr(index), opt._get_wd(index), opt.lamda1, opt.beta)
    return values if _grad_ok(opt) and _plain(*values) and values[3] >= 0 else None


@cache
def _chunk_twins() -> dict[type, tuple[Any, Any, int]]:
    """Rule class -> (params function, chunk function, scratch buffers it needs)."""
    from .adadelta import AdaDelta  # noqa: PLC0415 - the rule modules import the optimizer base, not this one
    from .adagrad import AdaGrad  # noqa: PLC0415
    from .adamw import AdamW  # noqa: PLC0415
    from .ftrl import Ftrl  # noqa: PLC0415
    from .nag import NAG  # noqa: PLC0415
    from .rmsprop import RMSProp  # noqa: PLC0415
    from .signum import Signum  # noqa: PLC0415

    return {NAG: (_nag_params, _nag_chunk, 3), AdaGrad: (_adagrad_params, _adagrad_chunk, 3),
            RMSProp: (_rmsprop_params, _rmsprop_chunk, 3), AdaDelta: (_adadelta_params, _adadelta_chunk, 3),
            AdamW: (_adamw_params, _adamw_chunk, 3), Signum: (_signum_params, _signum_chunk, 2),
            Ftrl: (_ftrl_params, _ftrl_chunk, 4)}
