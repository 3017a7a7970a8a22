"""The fused update engine: one launch per arena, the plan, the kernel launcher, and the registry of rules.

It knows no rule. Each rule's module (``mxlite/optimizer/<rule>.py``) registers with
:func:`register_fused` what this engine needs to run it over an arena (a :class:`FusedRule`): the
names of its float32 state buffers, its row of the per-launch table, its kernel launches, its
hand-tuned NumPy twin (whole plan, or per chunk) and whether its ``step`` is elementwise.

Buffer flow: the arena's data buffer holds every weight in registration order, its gradient
buffer every gradient in reverse order, and each optimizer state is one more float32 buffer
with the data buffer's layout. An :class:`ArenaPlan` lists the segments (parameters) to update
and cuts them into chunks of at most :data:`CHUNK` elements that never straddle two
parameters; on a GPU one kernel launch (``kernels/optimizers.cu``) updates every chunk, reading
the per-parameter values (learning rate, weight decay, ...) from a small table, ``HP`` floats
per parameter, that the host writes into a persistent device buffer before each launch (:class:`Launcher`).

On a CPU device the same kernels run compiled for the host (the serial build of
:mod:`mxlite.device._hostcuda`: one thread per block, the block loop vectorised by g++) when
:func:`mxlite.device.kernels.cpu_kernels_enabled` says they can. Otherwise, and always with
``MXLITE_CPU_KERNELS=numpy``, the NumPy twins do the same math: the reference the kernels are
tested against. A rule's twin is its hand-tuned plan twin when it registers one (SGD, Adam), else
its own ``step`` applied to views of the arena, segment by segment (:func:`step_segments`), or its
hand-tuned chunk twin (the same float32 operations in the same order as ``step``, into reused
scratch buffers) where it registers one.

Every twin walks each segment in chunks of :data:`TWIN_CHUNK` elements, the CPU's counterpart of
a kernel's block: a NumPy expression makes one pass over memory per operation, so on a whole
multi-megabyte parameter each of an update's ten-odd operations would stream the arena from DRAM;
on a chunk the operands and temporaries stay in cache and the arena is read and written from
memory about once. Every element goes through the same operations in the same order as without
chunks, so results are bit-identical. Only rules registered as elementwise are chunked: LAMB's and
LARS's ``step`` take norms over the whole parameter and keep whole segments.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from ..device import Device
from ..device.kernels import KernelFile
from .optimizer import MultiPrecisionState, Optimizer, _xp

__all__ = ["CHUNK", "FUSED_DTYPES", "GPU_CHUNK", "GRAD_TYPES", "HP", "KERNELS", "TWIN_CHUNK", "ArenaPlan", "ChunkTwin",
           "FusedRule", "Launcher", "Segment", "all_kernel_names", "betas_eps", "chunk_for", "chunk_grad",
           "chunk_views", "clip_arg", "compiled_on_cpu", "decay_add_square", "descend_by_root", "effective_grad",
           "from_structure", "fused_rule", "grad_ok", "lr_wd_params", "lr_wd_row", "momentum_state", "one_kernel",
           "one_minus", "plain", "register_fused", "rescale_arg", "scratch", "serial_norm", "step_segments", "table",
           "to_structure", "weights32", "zeros_f32"]

# Elements per block in the host build (one thread per block: a chunk is one vectorised loop). Measured
# there with benchmarks/bench_optimizer.py over 8 parameters of 2.5M: chunks of 4K, 16K and 64K elements
# are within noise of each other (64K marginally ahead). It also fixes the order in which LAMB's and LARS's
# norms are summed on CPU devices (serial_norm).
CHUNK = 65536
# Elements per block on a GPU: 256 threads x 8 elements (one 16-byte group each) x 4 steps. Smaller blocks
# even out the end of a launch: the last blocks to finish leave SMs idle for at most one block's time.
# On 100M parameters in 300 tensors (bench_optimizer.py) 65536 gives ~1,700 blocks, 1.7 to 2.5 waves over
# 132 SMs, and a block schedule that keeps the SMs ~80% busy (benchmarks/roofline.py:
# fused_schedule_efficiency); 8192 gives ~12,000 blocks and ~97%. The tables cost 20 bytes per block
# (0.01% of Adam's bytes), so they stay: a block reads where its chunk lies instead of searching for it.
GPU_CHUNK = 8192
# Elements per CPU twin chunk: 1 MiB per float32 operand, so an update's operands and temporaries
# (~7 MiB for Adam) stay in the last-level cache while each NumPy call (~1-2 us of Python) covers
# enough elements. Measured with benchmarks/bench_optimizer.py --chunks on a 2-core EPYC (1 MiB L2
# per core, 32 MiB L3): Adam over 8 tensors of 2.5M: 57 ms at 16K elements (L2-sized; the calls'
# overhead dominates), 43 ms at 64K, 37 ms at 256K, 52 ms unchunked; on 300 tensors of at most a
# few 100K elements (already cache-sized) 256K matches the unchunked twin.
TWIN_CHUNK = 1 << 18
_LANES = 8  # partial sums per norm in a kernel's thread (kernels/optimizers.cu: kPartials)


def serial_norm(x: Any) -> Any:
    """The L2 norm of ``x`` summed in the order of the serial kernel build (R2: both CPU modes, the same bits).

    For a NumPy float32 array: per chunk of :data:`CHUNK` elements from the start, each square
    (float32) is added to one of 8 float32 lanes in turn (element ``i`` of the chunk into lane
    ``i % 8``, in order), the lanes are folded pairwise (``a[k] += a[k+4]``, ``a[k] += a[k+2]``,
    ``a[0] += a[1]``), each chunk's total is added in chunk order to a float64 sum starting at 0,
    and the result is ``float32(sqrt(sum))``: ``sum_over_chunk`` and ``block_sum_into`` of
    ``kernels/optimizers.cu`` with one thread per block, which is how CPU devices run LAMB and LARS.
    Any other array (float64, CuPy) gets ``xp.linalg.norm``: a GPU sums in thread order, and
    float64 runs are not bit-matched to the kernels.
    """
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        return _xp(x).linalg.norm(x)
    squares = np.multiply(x.reshape(-1), x.reshape(-1))
    total = 0.0
    for lo in range(0, squares.size, CHUNK):
        chunk = squares[lo:lo + CHUNK]
        whole = chunk.size - chunk.size % _LANES
        lanes = np.zeros(_LANES, np.float32)
        if whole:  # accumulate is sequential by definition (a sum may be pairwise)
            lanes += np.add.accumulate(chunk[:whole].reshape(-1, _LANES), axis=0)[-1]
        lanes[:chunk.size - whole] += chunk[whole:]
        for width in (4, 2, 1):
            lanes[:width] += lanes[width:2 * width]
        total += float(lanes[0])
    return np.float32(math.sqrt(total))


HP = 4  # floats per parameter in the per-launch table (kernels/optimizers.cu: seg_hp)

_KERNEL_FILE = "optimizers.cu"
# Its GPU blocks: the default 256 threads, 8 warps, 4-5 resident blocks per SM at the kernels' registers.
KERNELS = KernelFile(_KERNEL_FILE, ("float32", "float16", "bfloat16"), names=lambda: all_kernel_names())
_TYPE_NAMES = KERNELS.type_names
# Gradient types a kernel reads besides its storage type: the narrow wires' sums (mxlite/comm/narrow.py), one
# pair per `INSTANTIATE(T, G)` line of kernels/optimizers.cu.
GRAD_TYPES = {"float32": ("float16", "bfloat16"), "float16": ("bfloat16",), "bfloat16": ("float16",)}
FUSED_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))  # weights the kernels update

Row = tuple[float, ...]


# -- the registry ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChunkTwin:
    """A rule's hand-tuned chunk twin: ``params(opt, index, count)`` gives a segment's scalars (or None: that
    segment takes ``step``), ``run(opt, params, w, g, state, bufs)`` updates one chunk with ``buffers``
    chunk-sized float32 scratch arrays."""

    params: Callable[[Any, Any, int], tuple | None]
    run: Callable[..., None]
    buffers: int


@dataclass(frozen=True)
class FusedRule:
    """How one optimizer class runs as a fused arena update.

    Attributes:
        states: ``states(opt)``: the names of the float32 state buffers (arena layout), in the order of the
            state tuple the rule's ``step`` takes (one name: the state is that array; none: None).
        row: ``row(opt, index, count)``: the parameter's row of the per-launch table (``HP`` floats: the
            learning rate, the weight decay and up to two rule values), computed with the same optimizer
            methods ``step`` uses, after the update count has been incremented.
        launch: ``launch(run, opt, weight, grad, states, master)``: the kernel launches of one update (one, or
            two for rules with per-parameter norms, which complete their sums between them with ``yield
            from run.complete_sums(sums)`` in a generator that ``run.phases`` runs at once, or returns
            when the update is sharded); ``grad`` may be a narrow wire's half-precision sum, so every launch
            passes ``rescale_grad`` through :func:`rescale_arg`.
        kernels: the kernels of ``kernels/optimizers.cu`` the launches use.
        kernels_without_grad: those of them that read no gradient (compiled for the weights' type only).
        twin: a hand-tuned NumPy twin of the whole update, ``twin(opt, plan, weight, grad, states, master,
            hp)``, or None for :func:`step_segments`.
        chunk_twin: the hand-tuned twin :func:`step_segments` runs per chunk, or None (the rule's ``step``).
        elementwise: whether ``step`` is elementwise, so that the twin may run chunk by chunk.
        eligible: ``eligible(opt)``: whether the kernels implement this instance's form (e.g. not SGD's
            SINGA forms).
    """

    states: Callable[[Any], tuple[str, ...]]
    row: Callable[[Any, Any, int], Row]
    launch: Callable[..., None]
    kernels: tuple[str, ...]
    kernels_without_grad: tuple[str, ...] = ()
    twin: Callable[..., None] | None = None
    chunk_twin: ChunkTwin | None = None
    elementwise: bool = True
    eligible: Callable[[Any], bool] = lambda opt: True


_RULES: dict[type, FusedRule] = {}


def register_fused(cls: type, rule: FusedRule) -> None:
    """Register ``rule`` as the fused update of exactly ``cls`` (a subclass may change ``step``: not fused).

    Raises:
        ValueError: ``cls`` already has one.
    """
    if cls in _RULES:
        raise ValueError(f"{cls.__name__} already has a fused update")
    _RULES[cls] = rule
    all_kernel_names.cache_clear()


def fused_rule(optimizer: Optimizer, dtype: Any) -> FusedRule | None:
    """The :class:`FusedRule` of ``optimizer`` for weights of ``dtype``, or None (per-parameter path).

    Fused: the exact registered classes, in the forms their kernels implement, on float32 or
    float16 storage. float64 runs keep the per-parameter path's float64 arithmetic.
    """
    if np.dtype(dtype) not in FUSED_DTYPES:
        return None
    rule = _RULES.get(type(optimizer))
    if rule is None or not rule.eligible(optimizer):
        return None
    return rule


@cache
def all_kernel_names() -> tuple[str, ...]:
    """Every instantiation of every registered kernel (``name_expressions``), in registration order."""
    kernels = list(dict.fromkeys(k for rule in _RULES.values() for k in rule.kernels))
    no_grad = _kernels_without_grad()
    return (*(f"{k}<{t}>" for k in kernels for t in _TYPE_NAMES.values()),
            *(f"{k}<{_TYPE_NAMES[w]}, {_TYPE_NAMES[g]}>" for k in kernels if k not in no_grad
              for w, gs in GRAD_TYPES.items() for g in gs))




def _kernels_without_grad() -> frozenset[str]:
    return frozenset(k for rule in _RULES.values() for k in rule.kernels_without_grad)


def to_structure(names: tuple[str, ...], arrays: dict[str, Any], master: Any = None) -> Any:
    """The state as the rule's ``step`` (and ``create_state``) shapes it, from named arrays."""
    inner = [arrays[n] for n in names]
    state = None if not inner else inner[0] if len(inner) == 1 else tuple(inner)
    return state if master is None else MultiPrecisionState(master, state)


def from_structure(names: tuple[str, ...], state: Any) -> tuple[dict[str, Any], Any]:
    """Inverse of :func:`to_structure`: ``({name: array}, master or None)``.

    Raises:
        ValueError: the state does not have the structure ``names`` describes.
    """
    master = None
    if isinstance(state, MultiPrecisionState):
        master, state = state.master, state.state
    parts = [] if state is None else [state] if len(names) == 1 else state
    if not isinstance(parts, (list, tuple)) or len(parts) != len(names):
        raise ValueError(f"expected a state of {len(names)} arrays ({', '.join(names) or 'none'}), "
                         f"got {type(state).__name__}")
    return dict(zip(names, parts)), master


# -- plans and launches -----------------------------------------------------------------------------
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
    """The chunk table of a set of segments, cut into chunks of at most ``chunk`` elements (:data:`CHUNK` for
    CPU devices, :data:`GPU_CHUNK` on GPUs: :func:`chunk_for`); device copies are made once per device.

    ``owners`` (sharded optimizer states): per segment, the position of its parameter in a table of
    ``params`` whole parameters that every shard of the update shares; a segment is then the part of
    that parameter inside this shard (a parameter straddling two shards is updated in pieces by their
    owners), and rules with per-parameter norms complete their partial sums over the shards
    (:meth:`Launcher.complete_sums`). None: every segment is a whole parameter.
    """

    segments: Sequence[Segment]
    owners: Sequence[int] | None = None
    params: int = 0
    chunk: int = CHUNK
    chunk_seg: np.ndarray = field(init=False)
    chunk_start: np.ndarray = field(init=False)
    chunk_end: np.ndarray = field(init=False)
    _on_device: dict[Any, Any] = field(default_factory=dict, init=False, repr=False)
    _scratch: list[np.ndarray] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.chunk < 2 ** 31:  # the kernels index a chunk with an int
            raise ValueError(f"chunk must be between 1 and 2**31 - 1 elements, got {self.chunk}")
        seg, start, end = [], [], []
        for s, segment in enumerate(self.segments):
            for first in range(segment.offset, segment.offset + segment.size, self.chunk):
                seg.append(s)
                start.append(first)
                end.append(min(first + self.chunk, segment.offset + segment.size))
        self.chunk_seg = np.asarray(seg, dtype=np.int32)
        self.chunk_start = np.asarray(start, dtype=np.int64)
        self.chunk_end = np.asarray(end, dtype=np.int64)

    def grad_shift(self) -> np.ndarray:
        """Per segment, ``grad_offset - offset``: where a weight's gradient sits."""
        return np.asarray([s.grad_offset - s.offset for s in self.segments], dtype=np.int64)

    def owner_table(self, device: Device) -> Any:
        """:attr:`owners` as an int64 array on ``device``, copied once."""
        key = ("owners", device)
        found = self._on_device.get(key)
        if found is None:
            with device.use():
                found = self._on_device[key] = device.xp.asarray(np.asarray(self.owners, dtype=np.int64))
        return found

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


def chunk_for(device: Device) -> int:
    """The chunk size of plans run on ``device``: :data:`GPU_CHUNK` on a GPU, :data:`CHUNK` on a CPU device."""
    return GPU_CHUNK if device.is_gpu else CHUNK


@cache  # np.dtype(...).name costs microseconds, a noticeable part of a small model's update
def _dtype_name(dtype: Any) -> str:
    """The name of a dtype, or the name itself ('bfloat16' comes as a name: NumPy and CuPy have no such dtype)."""
    return dtype if isinstance(dtype, str) else np.dtype(dtype).name


class Launcher:
    """Launches kernels of ``optimizers.cu`` over one plan with one per-parameter table (GPU, or a
    CPU device through the host build).

    Made once per fused update: ``hp`` (shape ``(segments, HP)``, float32) is the per-parameter table, a
    host array (copied to the device here) or a device array used in place (the persistent table buffer
    :meth:`mxlite.optimizer._arena.ArenaUpdater.prepare` writes before each step, which a captured update
    reads at every replay); then each call launches one kernel over every chunk of the plan.

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
            # A device array is the caller's persistent table (ArenaUpdater.prepare wrote it): used as it is, so
            # a launch issues no copy from the host and can be captured in a CUDA graph.
            table = device.xp.asarray(hp, dtype=np.float32) if isinstance(hp, np.ndarray) else hp
            self._tables = (*plan.tables(device), table)

    def rescale(self, rescale_grad: float) -> np.float32:
        """The ``rescale`` argument of a kernel: ``rescale_grad * grad_scale`` (float64 product, one rounding)."""
        return np.float32(float(rescale_grad) * self.grad_scale)

    def sums(self) -> Any:
        """A zeroed ``(segments, 2)`` float64 device array for the per-parameter norm sums."""
        with self.device.use():
            return self.device.xp.zeros((len(self.plan.segments), 2), np.float64)

    def phases(self, launches: Iterator[Any]) -> Iterator[Any] | None:
        """Run a rule's launches that complete norm sums between them (a generator, see :meth:`complete_sums`).

        Unsharded they run now and None is returned, so a launch function is an ordinary call; for a
        sharded plan the generator is returned unstarted, for the caller to drive together with the
        other shards' (:meth:`mxlite.optimizer._arena.ArenaUpdater.steps`).
        """
        if self.plan.owners is not None:
            return launches
        for _ in launches:
            raise RuntimeError("an unsharded update has no partial sums to complete")
        return None

    def complete_sums(self, sums: Any) -> Iterator[Any]:
        """Complete per-parameter norm sums over the shards of a sharded update (a generator).

        Rules with per-parameter norms call ``yield from run.complete_sums(sums)`` between the launch
        that sums and the launch that reads the sums, inside a generator run by :meth:`phases`.
        Unsharded (the plan's segments are whole parameters) it yields nothing. Sharded
        (:attr:`ArenaPlan.owners`), this shard's partial sums are laid out in a zeroed ``(params, 2)``
        float64 table, by parameter; the table is yielded, and the caller (who drives every shard's
        update) sums the tables of all shards in place (one small all-reduce) before resuming; then
        every segment reads its whole parameter's sums.
        """
        plan = self.plan
        if plan.owners is None:
            return
        where = plan.owner_table(self.device)
        with self.device.use():
            table = self.device.xp.zeros((plan.params, 2), np.float64)
            table[where] = sums  # at most one segment of a parameter per shard: no index repeats
        yield table
        with self.device.use():
            sums[...] = table[where]

    def __call__(self, kernel: str, buffers: Sequence[Any], scalars: Sequence[float], sums: Any = None) -> None:
        """Launch ``kernel<T>(*buffers, *chunk tables, seg_hp, [sums], *scalars)``; None buffers pass null."""
        types = self.type_name if kernel in _kernels_without_grad() or self.grad_type_name == self.type_name else (
            f"{self.type_name}, {self.grad_type_name}")
        function = KERNELS.function(f"{kernel}<{types}>", self.device)
        null = np.uint64(0)  # an 8-byte zero is a null pointer argument (e.g. no master weights)
        args = [b if b is not None else null for b in buffers]
        args += self._tables
        if sums is not None:
            args.append(sums)
        args += [np.float32(x) for x in scalars]
        if len(self.plan.chunk_seg) == 0:  # only empty parameters: a grid of 0 blocks is a CUDA error
            return
        block = KERNELS.block_for(self.device)  # the host build runs one thread per block
        with self.device.use():
            function((len(self.plan.chunk_seg),), (block,), tuple(args))


def compiled_on_cpu() -> bool:
    """Whether CPU devices run the fused updates as compiled kernels (``mxlite.device.kernels.cpu_kernels_enabled``)."""
    return KERNELS.cpu_enabled()


# -- what rules launch with -----------------------------------------------------------------------

def clip_arg(opt: Optimizer) -> float:
    """``clip_gradient`` as the kernels take it: 0 for none (they read clip <= 0 as "no clipping")."""
    return opt.clip_gradient or 0.0  # the kernels read clip <= 0 as "no clipping"


def rescale_arg(run: Any, opt: Optimizer) -> float:
    """The kernels' ``rescale``: ``rescale_grad``, times N when they read a narrow wire's sum pre-scaled by 1/N.

    (See :meth:`mxlite.optimizer.Launcher.rescale`; a launcher without ``grad_scale`` reads
    the gradient buffer itself.)
    """
    scale = getattr(run, "grad_scale", 1.0)
    return opt.rescale_grad if scale == 1.0 else float(run.rescale(opt.rescale_grad))


def phases(run: Any, launches: Iterator[Any]) -> Iterator[Any] | None:
    """``run.phases(launches)`` (:meth:`Launcher.phases`); a launcher without it (a test's stand-in) runs them now."""
    method = getattr(run, "phases", None)
    if method is not None:
        return method(launches)
    for _ in launches:
        raise RuntimeError("an unsharded update has no partial sums to complete")
    return None


def complete_sums(run: Any, sums: Any) -> Iterator[Any]:
    """``yield from run.complete_sums(sums)`` (:meth:`Launcher.complete_sums`); nothing for a launcher without it."""
    method = getattr(run, "complete_sums", None)
    if method is not None:
        yield from method(sums)


def table(rule: FusedRule, opt: Optimizer, indices: Sequence[Any]) -> tuple[np.ndarray, list[int]]:
    """The per-launch table of one update of ``indices`` (a row per parameter, :data:`HP` floats) and their
    update counts, each count incremented before the parameter's row is read (MXNet's order)."""
    hp = np.zeros((len(indices), HP), np.float32)
    counts = []
    for k, index in enumerate(indices):
        counts.append(opt._update_count(index))
        row = rule.row(opt, index, counts[-1])
        hp[k, :len(row)] = row
    return hp, counts


def lr_wd_row(opt: Optimizer, index: Any, count: int) -> Row:
    """The table row ``(lr, wd)`` of a rule that needs nothing else per parameter."""
    return (opt._get_lr(index), opt._get_wd(index))


def one_kernel(kernel: str, state_args: tuple[str, ...], scalars: Callable[[Any], tuple[float, ...]]):
    """A launch of ``kernel(weight, grad, *states named state_args, master, ..., rescale, clip, *scalars)``."""
    def launch(run: Launcher, opt: Any, weight: Any, grad: Any, st: dict[str, Any], master: Any) -> None:
        run(kernel, (weight, grad, *(st.get(n) for n in state_args), master),
            (rescale_arg(run, opt), clip_arg(opt), *scalars(opt)))
    return launch


def momentum_state(opt: Any) -> tuple[str, ...]:
    """The state name ``mom`` when the rule keeps a momentum (``opt.momentum`` != 0), else no state."""
    return ("mom",) if opt.momentum else ()


def betas_eps(opt: Any) -> tuple[float, ...]:
    """Adam, AdamW, Nadam, AdaBelief and LAMB: ``beta1, 1 - beta1, beta2, 1 - beta2, epsilon``.

    (See :func:`one_minus`.)
    """
    return (opt.beta1, one_minus(opt.beta1), opt.beta2, one_minus(opt.beta2), opt.epsilon)


# -- the NumPy twins ------------------------------------------------------------------------------
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
    with a hand-tuned chunk twin (:attr:`FusedRule.chunk_twin`: the same operations into reused scratch
    buffers) through it.
    """
    f32 = np.float32
    rule = _RULES.get(type(optimizer))
    whole = rule is None or not rule.elementwise  # a rule this engine does not know keeps whole segments
    chunk_twin = rule.chunk_twin if rule is not None else None
    bufs = scratch(plan, chunk_twin.buffers) if chunk_twin is not None else []
    for s, (index, count) in enumerate(zip(indices, counts)):
        seg = plan.segments[s]
        p = chunk_twin.params(optimizer, index, count) if chunk_twin is not None else None
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
                chunk_twin.run(optimizer, p, w, g, state, [b[:hi - lo] for b in bufs])
            else:
                optimizer.step(index, w, g, state, count)
            if w is not w_store:
                w_store[...] = w


def effective_grad(g: np.ndarray, w: np.ndarray, wd: float, rescale: float, clip: float | None,
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


def scratch(plan: ArenaPlan, count: int) -> list[np.ndarray]:
    """``count`` float32 work buffers of one chunk (or the longest segment, if shorter), made once per plan."""
    length = min(TWIN_CHUNK, max((s.size for s in plan.segments), default=0))
    if len(plan._scratch) < count or (plan._scratch and len(plan._scratch[0]) != length):
        plan._scratch = [np.empty(length, np.float32) for _ in range(count)]
    return plan._scratch[:count]


def weights32(w_store: np.ndarray, master: np.ndarray | None, tmp: np.ndarray) -> np.ndarray:
    if master is not None:
        return master
    if w_store.dtype == np.float32:
        return w_store
    tmp[...] = w_store
    return tmp


def chunk_views(plan: ArenaPlan, buffers: Sequence[Any], grad: Any) -> Any:
    """Per chunk of every segment: ``(segment index, *views of buffers (None stays None), grad view)``."""
    for s, seg in enumerate(plan.segments):
        for lo in _chunks(seg.size):
            hi = min(lo + TWIN_CHUNK, seg.size)
            out = [b[seg.offset + lo: seg.offset + hi] if b is not None else None for b in buffers]
            yield (s, *out, grad[seg.grad_offset + lo: seg.grad_offset + hi])


# -- helpers of the hand-tuned chunk twins ------------------------------------------------------------
# A rule's chunk twin (:class:`ChunkTwin`, in the rule's module) does exactly the float32 operations of
# the rule's ``step``, in the same order, on one chunk, writing every intermediate into the chunk-sized
# scratch buffers ``bufs`` (made once per plan) instead of new arrays: NumPy's binary operators round a
# Python float to float32 first, so ``F32(x)`` is the number ``step`` uses. Its ``params`` returns the
# segment's scalars, or None when a value would make ``step`` compute otherwise (a NumPy scalar promotes to
# float64; a clip <= 0, which ``step`` applies and the kernels ignore); such segments keep the generic
# path. Rearrangements used, all exact in IEEE float32: ``a*b == b*a``, ``a+b == b+a``, and a value
# computed twice from the same operands is computed once.
F32 = np.float32


def plain(*values: Any) -> bool:
    """True when every value is a Python int or float (not a NumPy scalar, which could promote)."""
    return all(type(v) in (int, float) for v in values)


def grad_ok(opt: Any) -> bool:
    """Whether ``rescale_grad`` and ``clip_gradient`` are values a chunk twin computes with as ``step`` does."""
    clip = opt.clip_gradient
    return plain(opt.rescale_grad) and (clip is None or (plain(clip) and clip > 0))


def chunk_grad(opt: Any, g: np.ndarray, w: np.ndarray, wd: float, bufs: Sequence[np.ndarray]) -> np.ndarray:
    """``G = clip(rescale*g) + wd*w`` into ``bufs[0]`` (``bufs[1]`` is spare), or ``g`` itself when that is G."""
    return effective_grad(g, w, wd, opt.rescale_grad, opt.clip_gradient, bufs[0], bufs[1])


def lr_wd_params(opt: Any, index: Any, *extra: Any) -> tuple[Any, ...] | None:
    """A chunk twin's ``(lr, wd, *extra)`` for ``index``, or None when a value would make ``step`` differ."""
    values = (opt._get_lr(index), opt._get_wd(index), *extra)
    return values if grad_ok(opt) and plain(*values) else None


def decay_add_square(acc: np.ndarray, x: np.ndarray, rho: float, tmp: np.ndarray) -> None:
    """``acc = rho*acc + ((1-rho)*x)*x`` in place (RMSProp's and AdaDelta's running squares), ``tmp`` scratch."""
    acc *= F32(rho)
    np.multiply(x, F32(1.0 - rho), out=tmp)
    tmp *= x
    acc += tmp


def descend_by_root(w: np.ndarray, G: np.ndarray, acc: np.ndarray, lr: float, eps: float, tmp: np.ndarray,
                     step: np.ndarray) -> None:
    """``w -= (lr*G)/(sqrt(acc) + eps)`` in the kernels' operation order, through the scratch ``tmp``, ``step``."""
    np.multiply(G, F32(lr), out=step)
    np.sqrt(acc, out=tmp)
    tmp += F32(eps)
    step /= tmp
    w -= step



@cache
def _zeros_of(length: int) -> np.ndarray:
    """A read-only float32 zero array (``np.zeros``: untouched pages that all map the zero page, so cheap to read)."""
    zeros = np.zeros(length, np.float32)
    zeros.setflags(write=False)
    return zeros


def zeros_f32(n: int) -> np.ndarray:
    """``n`` float32 zeros, a view of one array per :data:`TWIN_CHUNK` (NumPy's ``maximum(x, 0)`` with a
    scalar 0 takes a slow broadcast loop; the same ufunc over two arrays gives the same bits, faster)."""
    return _zeros_of(max(n, TWIN_CHUNK))[:n]


