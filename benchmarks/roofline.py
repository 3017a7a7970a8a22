"""A stated model of one training step on an H100 or H200, host side included, fed by counted costs (no timings).

The emulated GPUs count what a step does (CuPy calls, kernel launches, GEMMs with their FLOPs,
bytes moved by array operations and by the kernels, host synchronisations, host<->device copies,
NCCL calls and bytes, mxlite ops; see ``benchmarks/bench_gpu_model.py``). This module turns those
counts into seconds with the constants below, each named with where its value comes from
(:data:`CONSTANTS`). It is a model: its figures are estimates, checked against the steps measured
on an H200 (``benchmarks/measured_h200.json``, ``bench_gpu_model.py --measured``), not timings.

**The GPU's own work** (per GPU, per phase: forward, backward, optimizer step), :func:`gpu_parts`:

* ``gemm``: each counted GEMM takes ``max(flops / (peak(dtype) · efficiency), gemm_min_s −
  kernel_s)``: float32 GEMMs on the FP32 units (CuPy leaves TF32 off), float16/bfloat16 on the
  tensor cores; a small GEMM takes at least the measured 7.2 µs of a replayed SGEMM, of which
  ``kernel_s`` is its launch share (below). Without per-call GEMMs, ``gemm_flops`` at the FP32 rate;
* ``memory``: bytes of the non-GEMM array operations at the bandwidth a device copy reaches, and
  the fused optimizer kernels' bytes at the bandwidth they were measured to reach;
* ``launch``: ``kernel_s`` per kernel: the gap and ramp between back-to-back kernels;
* ``pcie``: host<->device bytes over PCIe, peer bytes over NVLink (on the stream, so GPU time);
* ``comm``: NCCL collectives, α-β: the cheaper of ring and tree (:func:`allreduce_s`,
  :func:`allgather_s`). Collectives issued during backward run beside it on their own stream (only
  the part longer than backward shows); those of the optimizer step run in line.

**The host's work** (the Python process driving the GPU), :func:`host_parts`:

* ``cupy``: every CuPy array-API call (views included) costs ``CUPY_CALL_S``, measured on the
  H200 host for a raw ``cupy.add`` of 1-element arrays;
* ``mxlite``: every mxlite op adds ``MXLITE_OP_OVERHEAD_S`` (its dispatch and autograd recording:
  the measured 14 µs of ``mx.ops.add`` less the 9 µs of the raw call);
* ``python``: the rest of mxlite's Python around each call it makes into CuPy (array calls,
  RawKernel launches, copies, NCCL calls): layers, the backward engine's closures, shape logic,
  kernel geometry, the Trainer: ``MXLITE_PYTHON_PER_CALL_S`` per call. This is the one
  *calibrated* constant: fitted so that the small-MLP step (1 M parameters, batch 64, Adam) gives
  the 2.20 ms measured on the H200; the other measured steps are predictions;
* ``launch``: a RawKernel launch from Python; ``copy``: each host->device copy call (CuPy stages
  it through its pinned pool: asynchronous, a host cost, not a wait) and device->host read;
  ``nccl``: each NCCL call; ``sync``: each host synchronisation's wake-up.

**Overlap** (:func:`timeline_s`): the GPU runs asynchronously: the host queues work and goes on,
so a stretch of work between two serialisation points takes about ``max(host, GPU)`` (plus the
latency of its first launch and, when the host is the slower, the last kernel it queued). A
*serialisation point* (a host synchronisation: a stream/device synchronize, or a blocking
device->host read such as ``float()`` or ``asnumpy``) makes the host wait until the GPU has run
everything queued; the GPU then idles until the host queues the next kernel. The counts are per
phase, not per stretch, so the model assumes a phase's host and GPU work spread evenly over its
``syncs + 1`` stretches. Queued work carries over from phase to phase and from step to step
(bench_train times 20 steps between synchronisations), so :func:`timeline_s` runs the phases of
:data:`STEADY_STEPS` steps and reports the last step's advance: ``max(host, GPU)`` for a step
without serialisation, more with it. ``modelled_s`` is that; ``roofline_s`` the sum of the GPU's
own work (GEMM, memory, launch), ``host_s`` and ``gpu_s`` the two sides' totals.

How well it fits (``bench_gpu_model.py --measured``; tests/test_roofline.py holds it within 30%):
modelled against measured on the H200, the 67 M-parameter MLP +12% (SGD) and +13% (Adam), both
bound by float32 GEMMs; the same MLP in float16 −4%, the CNN −12% and with batch norm −7%, all
three bound by host dispatch (the CNN's backward makes 637 CuPy calls, 88 col2im launches and 88
host->device copies of kernel geometry a step); the small MLP 0% (the calibration).

What the constants rest on: the H200 figures were measured on an H200 with CuPy 14.2, CUDA 13 and
PyTorch 2.11 (``measured_h200.json``); the H100 keeps its datasheet figures and stated assumptions
(the H200's measured copy reached 60% of its datasheet bandwidth, so the H100's 85% is probably
optimistic). The host constants were measured on the H200 machine's host: a slower or faster host
CPU scales them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CONSTANTS", "FUSED_SCALAR", "FUSED_VECTOR", "GEMM_OPS", "GPUS", "FusedGeometry", "GpuSpec", "HOST",
           "HostSpec", "KERNEL_TRAFFIC", "PhaseCounts", "allgather_s", "allreduce_s", "chunk_lengths",
           "constants_table", "conv_flops", "counts_from_json", "counts_to_json", "dense_flops", "dominant",
           "fused_fraction", "fused_latency_fraction", "fused_schedule_efficiency", "gpu_parts", "host_parts",
           "kernel_traffic", "minimum_bytes_per_element", "phase_seconds", "read_bytes_per_element",
           "resident_blocks", "step_seconds", "timeline_s"]

# -- GPU constants: H100 SXM5 80 GB (datasheet figures and stated assumptions) ---------------------------
HBM_BYTES_PER_S = 3.35e12  # NVIDIA H100 Tensor Core GPU datasheet: H100 SXM, HBM3, 3.35 TB/s
# Streaming kernels reach 80-90% of the HBM peak (STREAM/BabelStream-type copies on A100/H100);
# the middle of that range, an assumption.
HBM_EFFICIENCY = 0.85
GEMM_PEAK_FLOPS = 66.9e12  # datasheet: H100 SXM FP32 (non-tensor) 67 TFLOPS; float32 GEMMs without TF32
# cuBLAS SGEMM reaches ~70% of the FP32 peak at the sizes of these models (large square GEMMs get
# more, thin ones less): an assumption, the same ~45-50 TFLOP/s docs/scaling.md assumed before.
GEMM_EFFICIENCY = 0.70
# A kernel launch costs a few microseconds end to end: NVIDIA's "Getting Started with CUDA Graphs"
# (developer blog, 2019) measures ~3.8 us per short kernel launched back to back on a stream.
KERNEL_LAUNCH_S = 4e-6
# PCIe 5.0 x16: 32 GT/s x 16 lanes x 128/130 encoding = 63 GB/s per direction (PCI-SIG); pinned
# cudaMemcpy reaches ~80% of it (an assumption from bandwidthTest-type figures).
PCIE_BYTES_PER_S = 63e9 * 0.8
# A host synchronisation: the host waits for the queue to drain (~5 us to notice, an assumption)
# and the GPU then idles for one launch before it has work again.
SYNC_WAKE_S = 5e-6
HOST_SYNC_S = SYNC_WAKE_S + KERNEL_LAUNCH_S
# NVLink inside an H100 node: the scaling model's effective figures (docs/scaling.md): 5 us per
# NCCL step, 150 GB/s per GPU (NVLink 4 is 450 GB/s per direction; NCCL reaches less on mid-sized
# buffers, so this is deliberately conservative).
NVLINK_ALPHA_S = 5e-6
NVLINK_BYTES_PER_S = 150e9
# Dense FP16/BF16 tensor-core peak, H100 SXM and H200 alike: the datasheets' 1,979 TFLOPS are "with
# sparsity", dense is half.
FP16_PEAK_FLOPS = 989.5e12
FP64_PEAK_FLOPS = 66.9e12  # datasheets: FP64 Tensor Core 67 TFLOPS (H100 SXM, H200)

# -- GPU constants: H200 SXM 141 GB (measured on an H200, CuPy 14.2, CUDA 13; measured_h200.json) ------
H200_HBM_BYTES_PER_S = 4.8e12  # NVIDIA H200 datasheet: HBM3e, 4.8 TB/s
# bench_optimizer.py's device-to-device copy (cupy.copyto, read + write counted) on the H200: 2,897 GB/s.
H200_COPY_BYTES_PER_S = 2897e9
# Fused optimizer kernels on 100 M float32 parameters in 300 tensors (bench_optimizer.py, H200), as they were
# then (one element per thread and step, 65,536-element chunks: FUSED_SCALAR below):
# Adam 1.69 ms (28 B/element: 57% of the copy), SGD-momentum 1.32 ms (20 B/element: 52%); the mean.
H200_ADAM_SCALAR_FRACTION = 2.8e9 / 1.69e-3 / H200_COPY_BYTES_PER_S
H200_SGD_SCALAR_FRACTION = 2.0e9 / 1.32e-3 / H200_COPY_BYTES_PER_S
H200_FUSED_FRACTION_OF_COPY = (H200_ADAM_SCALAR_FRACTION + H200_SGD_SCALAR_FRACTION) / 2
# cupy.matmul on float16 8192^3 reached 759 TFLOP/s on the H200: 77% of the dense tensor-core peak.
H200_FP16_EFFICIENCY = 759e12 / FP16_PEAK_FLOPS
# A capturable SGEMM replayed from a CUDA graph took 7.2 us per GEMM on the H200: the least one
# (small) GEMM costs on the GPU, launch share included. The H100 is assumed the same (same SMs).
GEMM_MIN_S = 7.2e-6

# -- host constants (the H200 machine's host CPU; measured with profile_step.py's op overhead) ----------
CUPY_CALL_S = 9e-6  # a raw CuPy call (cupy.add of 1-element arrays), measured on the H200 host, CuPy 14.2
MXLITE_OP_S = 14e-6  # the same add as one recorded mxlite op (mx.ops.add), same host
MXLITE_OP_OVERHEAD_S = MXLITE_OP_S - CUPY_CALL_S
# A RawKernel launch goes through the same CuPy launch path (argument packing, cuLaunchKernel) as
# the kernel of a CuPy call: an assumption, no separate measurement.
RAW_LAUNCH_HOST_S = CUPY_CALL_S
# cupy.asarray of a host array: a CuPy call plus staging through CuPy's pinned pool (a host copy,
# cudaMemcpyAsync, an event to free the buffer): an assumption of twice a CuPy call.
H2D_CALL_S = 2 * CUPY_CALL_S
D2H_CALL_S = CUPY_CALL_S  # the call of a device->host read (the wait is the synchronisation): an assumption
NCCL_CALL_HOST_S = CUPY_CALL_S  # an NCCL call from Python (cupy.cuda.nccl): an assumption, as a CuPy call
# Calibrated: the small-MLP step measured on the H200 (2.20 ms) less its other host costs, per call into
# CuPy, with today's counts of that step on the emulation (82 CuPy array calls, 11 mxlite ops, 11
# RawKernel launches, 1 host->device copy). The H200 time was measured before the softmax cross-entropy
# and ReLU became kernels (98 CuPy calls, 13 ops, 1 launch then), so until it is measured again this
# constant is an upper bound.
MXLITE_PYTHON_PER_CALL_S = (2.20e-3 - 82 * CUPY_CALL_S - 11 * MXLITE_OP_OVERHEAD_S - 11 * RAW_LAUNCH_HOST_S
                            - H2D_CALL_S) / (82 + 11 + 1)

# Steps :func:`timeline_s` runs before reporting the last one (queued work carries over between steps).
STEADY_STEPS = 4


# -- the fused kernels' bandwidth: bytes in flight per SM, and the block schedule -------------------------
# A streaming kernel's bandwidth follows from Little's law: an SM with X bytes of loads in flight, each
# waiting the memory latency L0 plus its share of the transfer, moves B_sm * X / (X + B_sm * L0) per second,
# B_sm the bandwidth one SM gets of a device copy. X is the resident threads times the bytes each thread
# loads before it needs the first of them: one element's operands for the element-at-a-time kernels, a
# group of 8 elements' for the 16-byte kernels. Resident threads follow from each kernel's registers
# (ptxas) with the occupancy rules of sm_90. Then the launch's end: blocks run on SM_COUNT x (resident
# blocks) slots in launch order, and the SMs idle while the last ones finish (fused_schedule_efficiency).
# L0 is fitted to the two measured kernels; everything else is counted. A model, to be checked with
# bench_optimizer.py --device gpu: it knows nothing of DRAM page effects or of read/write turnarounds
# beyond what the device copy itself pays.
SM_COUNT = 132  # H100 SXM and H200 SXM (datasheets)
REGISTERS_PER_SM = 65536  # sm_90 (CUDA C++ Programming Guide, compute capability 9.0)
MAX_THREADS_PER_SM = 2048
MAX_BLOCKS_PER_SM = 32
REGISTER_UNIT = 256  # registers are allocated per warp in units of 256 (CUDA occupancy calculator, sm_90)


@dataclass(frozen=True)
class FusedGeometry:
    """How a generation of the fused kernels walks memory.

    Attributes:
        name: what the tables print.
        elements_per_step: elements whose loads a thread issues before it uses the first (1: one at a time).
        chunk: elements per block.
        threads: threads per block.
        registers: registers per thread of each kernel (``kernel<float, float>``), from ptxas.
        source: where the registers come from.
    """

    name: str
    elements_per_step: int
    chunk: int
    threads: int
    registers: Mapping[str, int]
    source: str


_PTXAS = "ptxas of nvcc 13.0, -arch=sm_90 --fmad=false --resource-usage, kernel<float, float>"
FUSED_SCALAR = FusedGeometry(
    "element at a time, 4-byte accesses, chunks of 65,536", 1, 65536, 256,
    {"sgd_update": 32, "adam_update": 40, "adamw_update": 39, "nadam_update": 34, "adabelief_update": 36,
     "rmsprop_update": 36, "adagrad_update": 35, "adadelta_update": 36, "signum_update": 32, "ftrl_update": 40,
     "lamb_phase1": 60, "lamb_phase2": 40, "lars_norms": 46, "lars_update": 32},
    _PTXAS + ", the kernels measured on the H200")
FUSED_VECTOR = FusedGeometry(
    "groups of 8, 16-byte accesses, chunks of 8,192", 8, 8192, 256,
    {"sgd_update": 54, "adam_update": 47, "adamw_update": 48, "nadam_update": 48, "adabelief_update": 48,
     "rmsprop_update": 55, "adagrad_update": 48, "adadelta_update": 51, "signum_update": 48, "ftrl_update": 49,
     "lamb_phase1": 75, "lamb_phase2": 48, "lars_norms": 34, "lars_update": 48},
    _PTXAS + ", kernels/optimizers.cu as it is")


def resident_blocks(registers: int, threads: int = 256) -> int:
    """Blocks of ``threads`` one SM holds at once for a kernel of ``registers`` per thread (sm_90 rules)."""
    warps = -(-threads // 32)
    per_warp = -(-registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
    by_registers = (REGISTERS_PER_SM // per_warp) // warps
    return max(0, min(by_registers, MAX_THREADS_PER_SM // threads, MAX_BLOCKS_PER_SM))


def fused_schedule_efficiency(chunk_lengths: Iterable[int], slots: int) -> float:
    """The fraction of ``slots`` x (launch time) spent on elements: blocks of ``chunk_lengths`` elements taken
    in launch order by whichever of ``slots`` (SMs x resident blocks) frees first, time per block proportional
    to its elements. 1 when every slot finishes together."""
    import heapq  # noqa: PLC0415

    lengths = [int(n) for n in chunk_lengths]
    if not lengths or slots < 1:
        return 1.0
    ends = [0] * min(slots, len(lengths))
    for n in lengths:
        heapq.heapreplace(ends, ends[0] + n)
    return sum(lengths) / (slots * max(ends))


def fused_latency_fraction(read_bytes_per_element: float, registers: int, geometry: FusedGeometry,
                           copy_bytes_per_s: float, latency_s: float) -> float:
    """Little's law: the fraction of the copy's bandwidth an SM reaches with the bytes a kernel keeps in flight."""
    in_flight = resident_blocks(registers, geometry.threads) * geometry.threads * geometry.elements_per_step \
        * read_bytes_per_element
    per_sm = copy_bytes_per_s / SM_COUNT
    return in_flight / (in_flight + per_sm * latency_s) if in_flight else 0.0


def chunk_lengths(sizes: Iterable[int], chunk: int) -> list[int]:
    """The blocks' lengths of a plan over parameters of ``sizes`` cut into chunks of ``chunk`` elements."""
    return [min(chunk, n - first) for n in sizes for first in range(0, n, chunk)]


def fused_fraction(kernel: str, read_bytes_per_element: float, sizes: Iterable[int], geometry: FusedGeometry,
                   copy_bytes_per_s: float = H200_COPY_BYTES_PER_S, latency_s: float | None = None) -> float:
    """Modelled fraction of the device copy's bandwidth one fused kernel reaches over parameters of ``sizes``.

    :func:`fused_latency_fraction` (registers from ``geometry``) times :func:`fused_schedule_efficiency`
    (its chunks on SM_COUNT x resident-blocks slots). ``latency_s`` defaults to :data:`FUSED_LATENCY_S`.
    """
    registers = geometry.registers[kernel.split("<", 1)[0]]
    slots = SM_COUNT * resident_blocks(registers, geometry.threads)
    latency = FUSED_LATENCY_S if latency_s is None else latency_s
    return (fused_latency_fraction(read_bytes_per_element, registers, geometry, copy_bytes_per_s, latency)
            * fused_schedule_efficiency(chunk_lengths(sizes, geometry.chunk), slots))


# The latency L0 that makes the model give the measured scalar Adam (16 bytes read per element, 6 blocks
# per SM) and SGD-momentum (12 bytes, 8 blocks per SM) on bench_optimizer.py's 100 M parameters in 300
# tensors: 0.49 us and 0.43 us fitted one by one; the mean, with which the model gives 58% and 51% for the
# measured 57% and 52% (tests/test_roofline.py). Of the order of an unloaded DRAM access.
FUSED_LATENCY_S = 0.46e-6
# The same model for the 16-byte kernels on that arena: Adam 92%, SGD-momentum 88%, the mean (re-derived
# in tests/test_roofline.py): what the step model uses for the fused kernels' bytes on the H200.
H200_FUSED_MODELLED_FRACTION = 0.90


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's constants for the model (see the module docstring for how each is used).

    Attributes:
        name: what the tables print.
        hbm_bytes_per_s: the datasheet memory bandwidth (B/s).
        memory_bytes_per_s: what CuPy's element-wise kernels reach (B/s): a device copy.
        fused_bytes_per_s: what the fused optimizer kernels reach (B/s).
        flops: GEMM peak FLOP/s by dtype name ('float32', 'float16', 'bfloat16', 'float64').
        efficiency: the fraction of ``flops`` cuBLAS reaches, by the same names.
        gemm_min_s: the least one GEMM costs on the GPU (s), launch share included.
        kernel_s: the fixed GPU cost of one kernel (s); also the latency of a launch to an idle GPU.
        pcie_bytes_per_s, nvlink_alpha_s, nvlink_bytes_per_s: transfers.
        sources: where each value comes from, by attribute name.
    """

    name: str
    hbm_bytes_per_s: float
    memory_bytes_per_s: float
    fused_bytes_per_s: float
    flops: Mapping[str, float]
    efficiency: Mapping[str, float]
    gemm_min_s: float = GEMM_MIN_S
    kernel_s: float = KERNEL_LAUNCH_S
    pcie_bytes_per_s: float = PCIE_BYTES_PER_S
    nvlink_alpha_s: float = NVLINK_ALPHA_S
    nvlink_bytes_per_s: float = NVLINK_BYTES_PER_S
    sources: Mapping[str, str] = field(default_factory=dict)

    def gemm_rate(self, dtype: str) -> float:
        """FLOP/s a GEMM of ``dtype`` reaches (float32's for a dtype without its own figure)."""
        key = dtype if dtype in self.flops else "float32"
        return self.flops[key] * self.efficiency[key]


_FP16_KEYS = ("float16", "bfloat16")
H100 = GpuSpec(
    "H100 SXM", HBM_BYTES_PER_S, HBM_BYTES_PER_S * HBM_EFFICIENCY, HBM_BYTES_PER_S * HBM_EFFICIENCY,
    {"float32": GEMM_PEAK_FLOPS, **dict.fromkeys(_FP16_KEYS, FP16_PEAK_FLOPS), "float64": FP64_PEAK_FLOPS},
    {"float32": GEMM_EFFICIENCY, **dict.fromkeys(_FP16_KEYS, H200_FP16_EFFICIENCY), "float64": GEMM_EFFICIENCY},
    sources={
        "hbm_bytes_per_s": "H100 SXM datasheet, 3.35 TB/s",
        "memory_bytes_per_s": "assumption: streaming kernels reach 85% of the datasheet (80-90%, STREAM-type)",
        "fused_bytes_per_s": "assumption: as a streaming kernel (85% of the datasheet)",
        "flops": "H100 SXM datasheet: FP32 67 TFLOPS, FP16 tensor 989 TFLOPS dense, FP64 tensor 67 TFLOPS",
        "efficiency": "assumption: SGEMM 70% of peak; FP16 77% as measured on an H200 (759 TFLOP/s, 8192^3)",
        "gemm_min_s": "measured on an H200 (same SMs assumed): a replayed capturable SGEMM, 7.2 us",
        "kernel_s": "NVIDIA 'Getting Started with CUDA Graphs': ~3.8 us per short kernel back to back",
        "pcie_bytes_per_s": "PCIe 5.0 x16 63 GB/s (PCI-SIG) x 0.8 reached (assumption)",
        "nvlink_alpha_s": "docs/scaling.md: one NCCL step inside a node",
        "nvlink_bytes_per_s": "docs/scaling.md: effective NCCL bandwidth per GPU"})
H200 = GpuSpec(
    "H200 SXM", H200_HBM_BYTES_PER_S, H200_COPY_BYTES_PER_S, H200_COPY_BYTES_PER_S * H200_FUSED_MODELLED_FRACTION,
    H100.flops, {**H100.efficiency, **dict.fromkeys(_FP16_KEYS, H200_FP16_EFFICIENCY)},
    sources={**H100.sources,
             "hbm_bytes_per_s": "H200 datasheet, HBM3e 4.8 TB/s",
             "memory_bytes_per_s": "measured on an H200, CuPy 14.2: device copy 2,897 GB/s (bench_optimizer.py)",
             "fused_bytes_per_s": "modelled (fused_fraction, 16-byte kernels) from the measured copy; the "
                                  "element-at-a-time kernels measured 57% (Adam) and 52% (SGD-momentum) of it",
             "flops": "H200 datasheet: FP32 67 TFLOPS, FP16 tensor 989 TFLOPS dense, FP64 tensor 67 TFLOPS",
             "efficiency": "SGEMM 70% of peak (assumption); FP16 measured on an H200: cupy.matmul 759 TFLOP/s "
                           "on 8192^3",
             "gemm_min_s": "measured on an H200, CuPy 14.2: a replayed capturable SGEMM, 7.2 us per GEMM"})
GPUS: dict[str, GpuSpec] = {"h100": H100, "h200": H200}


@dataclass(frozen=True)
class HostSpec:
    """The host CPU's costs, seconds per event (see the module docstring)."""

    cupy_call_s: float = CUPY_CALL_S
    mxlite_op_overhead_s: float = MXLITE_OP_OVERHEAD_S
    python_per_call_s: float = MXLITE_PYTHON_PER_CALL_S
    raw_launch_s: float = RAW_LAUNCH_HOST_S
    h2d_call_s: float = H2D_CALL_S
    d2h_call_s: float = D2H_CALL_S
    nccl_call_s: float = NCCL_CALL_HOST_S
    sync_wake_s: float = SYNC_WAKE_S


HOST = HostSpec()

# Every constant, its unit and where its value comes from (what the tables print).
_SOURCES: tuple[tuple[str, str, str], ...] = (
    ("HBM_BYTES_PER_S", "B/s", "H100 SXM datasheet, 3.35 TB/s"),
    ("HBM_EFFICIENCY", "", "assumption: streaming kernels reach 80-90% of peak (H100)"),
    ("GEMM_PEAK_FLOPS", "FLOP/s", "H100/H200 SXM datasheets, FP32 67 TFLOPS (no TF32)"),
    ("GEMM_EFFICIENCY", "", "assumption: cuBLAS SGEMM ~70% of peak"),
    ("FP16_PEAK_FLOPS", "FLOP/s", "H100/H200 SXM datasheets, FP16 tensor 1,979 TFLOPS sparse = 989 dense"),
    ("FP64_PEAK_FLOPS", "FLOP/s", "H100/H200 SXM datasheets, FP64 tensor 67 TFLOPS"),
    ("KERNEL_LAUNCH_S", "s", "NVIDIA 'Getting Started with CUDA Graphs': ~3.8 us per kernel"),
    ("PCIE_BYTES_PER_S", "B/s", "PCIe 5.0 x16 63 GB/s (PCI-SIG) x 0.8 reached"),
    ("SYNC_WAKE_S", "s", "assumption: 5 us for the host to notice completion"),
    ("HOST_SYNC_S", "s", "assumption: 5 us to notice completion + one launch to refill"),
    ("NVLINK_ALPHA_S", "s", "docs/scaling.md: one NCCL step inside a node"),
    ("NVLINK_BYTES_PER_S", "B/s", "docs/scaling.md: effective NCCL bandwidth per GPU"),
    ("H200_HBM_BYTES_PER_S", "B/s", "H200 datasheet, HBM3e 4.8 TB/s"),
    ("H200_COPY_BYTES_PER_S", "B/s", "measured on an H200, CuPy 14.2: cupy.copyto read + write (bench_optimizer.py)"),
    ("H200_FUSED_FRACTION_OF_COPY", "",
     "measured on an H200: fused Adam 1.69 ms and SGD-momentum 1.32 ms on 100 M params"),
    ("FUSED_LATENCY_S", "s", "fitted: the measured scalar Adam and SGD-momentum through fused_fraction"),
    ("H200_FUSED_MODELLED_FRACTION", "", "modelled: fused_fraction of the 16-byte Adam and SGD-momentum kernels"),
    ("H200_FP16_EFFICIENCY", "", "measured on an H200, CuPy 14.2: cupy.matmul float16 8192^3 at 759 TFLOP/s"),
    ("GEMM_MIN_S", "s", "measured on an H200, CuPy 14.2: replayed capturable SGEMM, 7.2 us"),
    ("CUPY_CALL_S", "s", "measured on the H200 host, CuPy 14.2: raw cupy.add, 1 element"),
    ("MXLITE_OP_S", "s", "measured on the H200 host: mx.ops.add recorded, 1 element"),
    ("MXLITE_OP_OVERHEAD_S", "s", "MXLITE_OP_S - CUPY_CALL_S"),
    ("RAW_LAUNCH_HOST_S", "s", "assumption: as a CuPy call (same launch path)"),
    ("H2D_CALL_S", "s", "assumption: a CuPy call + pinned staging = 2 x CUPY_CALL_S"),
    ("D2H_CALL_S", "s", "assumption: as a CuPy call (the wait is a sync)"),
    ("NCCL_CALL_HOST_S", "s", "assumption: as a CuPy call"),
    ("MXLITE_PYTHON_PER_CALL_S", "s",
     "calibrated: the small-MLP step measured on an H200 (2.20 ms) less its other host costs, per call into CuPy"),
)
CONSTANTS: dict[str, tuple[float, str, str]] = {name: (globals()[name], unit, source)
                                                for name, unit, source in _SOURCES}

# Array operations the emulation counts that are GEMMs (their time comes from FLOPs, not bytes).
GEMM_OPS = frozenset({"matmul", "__matmul__", "__rmatmul__", "dot", "tensordot", "einsum", "inner", "vdot"})


# -- NCCL: α-β costs ------------------------------------------------------------------------------------
def allreduce_s(nbytes: float, p: int, alpha_s: float = NVLINK_ALPHA_S,
                bytes_per_s: float = NVLINK_BYTES_PER_S) -> float:
    """Seconds of one all-reduce of ``nbytes`` over ``p`` GPUs: the cheaper of NCCL's ring and tree.

    Ring: ``2(p-1)·α + 2(p-1)/p·n·β``; double binary tree: ``2·ceil(log2 p)·α + 2·n·β`` (each of the
    reduce and broadcast halves moves the whole buffer through a rank). 0 for ``p`` = 1.

    Raises:
        ValueError: ``p`` < 1 or ``nbytes`` < 0.
    """
    if p < 1 or nbytes < 0:
        raise ValueError(f"all-reduce needs p >= 1 and nbytes >= 0, got p={p}, nbytes={nbytes}")
    if p == 1:
        return 0.0
    beta = 1.0 / bytes_per_s
    ring = 2 * (p - 1) * alpha_s + 2 * (p - 1) / p * nbytes * beta
    tree = 2 * math.ceil(math.log2(p)) * alpha_s + 2 * nbytes * beta
    return min(ring, tree)


def allgather_s(send_bytes: float, p: int, alpha_s: float = NVLINK_ALPHA_S,
                bytes_per_s: float = NVLINK_BYTES_PER_S) -> float:
    """Seconds of one ring all-gather where each of ``p`` GPUs contributes ``send_bytes``: ``(p-1)·(α + n·β)``."""
    if p < 1 or send_bytes < 0:
        raise ValueError(f"all-gather needs p >= 1 and send_bytes >= 0, got p={p}, send_bytes={send_bytes}")
    return (p - 1) * (alpha_s + send_bytes / bytes_per_s)


# -- FLOPs from layer shapes ----------------------------------------------------------------------------
def dense_flops(batch: int, in_units: int, units: int, input_grad: bool = True) -> tuple[float, float]:
    """(forward, backward) FLOPs of a Dense layer: ``2·B·in·out`` forward; dW (and dX if ``input_grad``)."""
    forward = 2.0 * batch * in_units * units
    return forward, forward * (2 if input_grad else 1)


def conv_flops(batch: int, in_channels: int, channels: int, kernel: tuple[int, int], out_hw: tuple[int, int],
               input_grad: bool = True) -> tuple[float, float]:
    """(forward, backward) FLOPs of a 2-D convolution: ``2·B·Cout·Ho·Wo·Cin·kh·kw`` forward; dW (and dX)."""
    forward = 2.0 * batch * channels * out_hw[0] * out_hw[1] * in_channels * kernel[0] * kernel[1]
    return forward, forward * (2 if input_grad else 1)


# -- the fused optimizer kernels' traffic ---------------------------------------------------------------
# Per kernel of kernels/optimizers.cu: how it touches its buffer arguments, in the order the
# launcher passes them (each rule's registration with mxlite/optimizer/_fused.py): weight first, then the gradient
# (absent from lamb_phase2), the rule's float32 states, and the float32 master weights last.
#   weight: "rw" read and written (through the master copy when there is one: read master, write
#           master and weight), "r" read only (norm passes);
#   grad:   True when the kernel reads it;
#   states: "rw" read-modify-write, "r" read only.
@dataclass(frozen=True)
class KernelTraffic:
    """How one fused kernel touches its buffers (see the table above)."""

    weight: str
    grad: bool
    states: str


KERNEL_TRAFFIC: dict[str, KernelTraffic] = {
    **{k: KernelTraffic("rw", True, "rw") for k in (
        "sgd_update", "adam_update", "adamw_update", "rmsprop_update", "adagrad_update",
        "adadelta_update", "signum_update", "ftrl_update", "lars_update", "nadam_update", "adabelief_update")},
    "lamb_phase1": KernelTraffic("r", True, "rw"),
    "lamb_phase2": KernelTraffic("rw", False, "r"),
    "lars_norms": KernelTraffic("r", True, "r"),
}
_TABLE_BYTES_PER_CHUNK = 4 + 8 + 8  # chunk_seg int32, chunk_start and chunk_end int64
_TABLE_BYTES_PER_SEGMENT = 8 + 16 + 16  # grad shift int64, 4 float32 table values, 2 float64 norm sums


def _itemsize(array: Any) -> int:
    return 0 if array is None else int(array.dtype.itemsize)


def kernel_traffic(kernel: str, buffers: Iterable[Any], elements: int, chunks: int = 0,
                   segments: int = 0) -> tuple[int, int]:
    """(element bytes, table bytes) one launch of ``kernel`` moves over ``elements`` updated elements.

    ``kernel`` may carry template arguments (``adam_update<float>``); ``buffers`` are the device
    arrays the launcher passes (None for an absent state or master). The element bytes follow
    :data:`KERNEL_TRAFFIC` with each buffer's own dtype (an fp16 gradient costs 2 bytes); the table
    bytes are the chunk and per-parameter tables read once.

    Raises:
        KeyError: a kernel that is not in :data:`KERNEL_TRAFFIC`.
    """
    reads, writes = _element_bytes(kernel, buffers)
    return (reads + writes) * int(elements), _TABLE_BYTES_PER_CHUNK * chunks + _TABLE_BYTES_PER_SEGMENT * segments


def read_bytes_per_element(kernel: str, buffers: Iterable[Any]) -> int:
    """Bytes one element of ``kernel`` loads (the weight or its master, the gradient, the states it reads)."""
    return _element_bytes(kernel, buffers)[0]


def _element_bytes(kernel: str, buffers: Iterable[Any]) -> tuple[int, int]:
    """(bytes read, bytes written) per element, following :data:`KERNEL_TRAFFIC`."""
    rule = KERNEL_TRAFFIC[kernel.split("<", 1)[0]]
    bufs = list(buffers)
    weight, master = bufs[0], bufs[-1]
    grad = bufs[1] if rule.grad else None
    states = bufs[2:-1] if rule.grad else bufs[1:-1]
    w_item, m_item = _itemsize(weight), _itemsize(master)
    reads = (m_item if master is not None else w_item) + _itemsize(grad) + sum(_itemsize(s) for s in states)
    writes = (m_item + w_item if master is not None else w_item) if rule.weight == "rw" else 0
    writes += sum(_itemsize(s) for s in states) if rule.states == "rw" else 0
    return reads, writes


def minimum_bytes_per_element(states: int, weight_bytes: int = 4, grad_bytes: int = 4, master: bool = False) -> int:
    """The least a rule's update can move per element: read and write the weight (master: read and
    write the float32 master, write the weight), read the gradient, read and write each float32 state.

    Adam on float32: 4 + 4 + 4 + 2·8 = 28 bytes; with an fp16 gradient 26.
    """
    weight = 4 + 4 + weight_bytes if master else 2 * weight_bytes
    return weight + grad_bytes + 8 * states


# -- a step ---------------------------------------------------------------------------------------------
@dataclass
class PhaseCounts:
    """What one GPU, and the host driving it, did in one phase of a step (per step), as counted by the emulation.

    Attributes:
        gemm_flops: GEMM FLOPs (used at the float32 rate when ``gemms`` is not given).
        gemms: GEMM calls as ``{(dtype name, FLOPs of one call): calls}``; each takes
            ``max(FLOPs / rate, gemm_min_s - kernel_s)`` on the GPU.
        launches: kernels launched (array operations that touched data, and RawKernel launches).
        memory_bytes: bytes moved by non-GEMM array operations and by kernels other than the fused ones.
        fused_bytes: bytes moved by the fused optimizer kernels.
        host_syncs: host synchronisations (blocking device->host reads included).
        h2d_bytes, d2h_bytes: host<->device copies; h2d_copies, d2h_copies: their calls.
        p2p_bytes: peer copies onto this GPU (NVLink).
        nccl_calls: NCCL collectives by name; nccl_call_bytes: bytes sent by collective name.
        cupy_calls: CuPy array-API calls (views and GEMMs included).
        mxlite_ops: mxlite ops dispatched (tensors made by ops).
        raw_launches: RawKernel launches from Python (also in ``launches``).
    """

    gemm_flops: float = 0.0
    launches: float = 0.0
    memory_bytes: float = 0.0
    host_syncs: float = 0.0
    h2d_bytes: float = 0.0
    d2h_bytes: float = 0.0
    p2p_bytes: float = 0.0
    nccl_calls: Mapping[str, float] | None = None
    nccl_call_bytes: Mapping[str, float] | None = None
    gemms: Mapping[tuple[str, float], float] | None = None
    fused_bytes: float = 0.0
    cupy_calls: float = 0.0
    mxlite_ops: float = 0.0
    raw_launches: float = 0.0
    h2d_copies: float = 0.0
    d2h_copies: float = 0.0


def counts_to_json(c: PhaseCounts) -> dict[str, Any]:
    """``c`` as JSON-ready values (``gemms`` as ``[[dtype, FLOPs, calls], ...]``); :func:`counts_from_json` reads it."""
    out = {k: v for k, v in vars(c).items() if k != "gemms"}
    out["gemms"] = None if c.gemms is None else [[d, f, n] for (d, f), n in sorted(c.gemms.items())]
    return out


def counts_from_json(data: Mapping[str, Any]) -> PhaseCounts:
    """The :class:`PhaseCounts` that :func:`counts_to_json` wrote.

    Raises:
        TypeError: a key that is not a PhaseCounts field.
    """
    fields = dict(data)
    gemms = fields.pop("gemms", None)
    return PhaseCounts(**fields, gemms=None if gemms is None else {(d, float(f)): n for d, f, n in gemms})


def _gemm_s(c: PhaseCounts, gpu: GpuSpec) -> float:
    if c.gemms is None:
        return c.gemm_flops / gpu.gemm_rate("float32")
    floor = max(0.0, gpu.gemm_min_s - gpu.kernel_s)
    return sum(n * max(flops / gpu.gemm_rate(dtype), floor) for (dtype, flops), n in c.gemms.items())


def gpu_parts(c: PhaseCounts, gpus: int, gpu: GpuSpec = H100) -> dict[str, float]:
    """The GPU's seconds in one phase: ``gemm``, ``memory``, ``launch`` (its own work), ``pcie`` (copies)
    and ``comm`` (NCCL over ``gpus`` GPUs)."""
    comm = 0.0
    calls, sent = c.nccl_calls or {}, c.nccl_call_bytes or {}
    for name, count in calls.items():
        if not count:
            continue
        per_call = sent.get(name, 0.0) / count
        if name == "allGather":
            one = allgather_s(per_call, gpus, gpu.nvlink_alpha_s, gpu.nvlink_bytes_per_s)
        else:
            one = allreduce_s(per_call, gpus, gpu.nvlink_alpha_s, gpu.nvlink_bytes_per_s)
        comm += count * one
    return {
        "gemm": _gemm_s(c, gpu),
        "memory": c.memory_bytes / gpu.memory_bytes_per_s + c.fused_bytes / gpu.fused_bytes_per_s,
        "launch": c.launches * gpu.kernel_s,
        "pcie": (c.h2d_bytes + c.d2h_bytes) / gpu.pcie_bytes_per_s + c.p2p_bytes / gpu.nvlink_bytes_per_s,
        "comm": comm,
    }


def host_parts(c: PhaseCounts, host: HostSpec = HOST) -> dict[str, float]:
    """The host's seconds in one phase: ``cupy`` (CuPy array calls), ``mxlite`` (op dispatch), ``python``
    (mxlite's Python around every call into CuPy, calibrated), ``launch`` (RawKernel launches), ``copy``,
    ``nccl`` and ``sync`` (wake-ups; the waits themselves are in :func:`timeline_s`)."""
    nccl = sum((c.nccl_calls or {}).values())
    calls = c.cupy_calls + c.raw_launches + c.h2d_copies + c.d2h_copies + nccl  # every call mxlite makes into CuPy
    return {
        "cupy": c.cupy_calls * host.cupy_call_s,
        "mxlite": c.mxlite_ops * host.mxlite_op_overhead_s,
        "python": calls * host.python_per_call_s,
        "launch": c.raw_launches * host.raw_launch_s,
        "copy": c.h2d_copies * host.h2d_call_s + c.d2h_copies * host.d2h_call_s,
        "nccl": nccl * host.nccl_call_s,
        "sync": c.host_syncs * host.sync_wake_s,
    }


def phase_seconds(c: PhaseCounts, gpus: int, gpu: GpuSpec = H100) -> dict[str, float]:
    """The GPU parts of one phase (:func:`gpu_parts`) and ``sync``: its host synchronisations at ``HOST_SYNC_S``."""
    return {**gpu_parts(c, gpus, gpu), "sync": c.host_syncs * (SYNC_WAKE_S + gpu.kernel_s)}


@dataclass(frozen=True)
class _Stretch:
    host_s: float
    gpu_s: float
    launches: float
    sync_after: bool


def timeline_s(phases: Iterable[tuple[float, float, float, float]], launch_latency_s: float = KERNEL_LAUNCH_S,
               steps: int = STEADY_STEPS) -> float:
    """Seconds of one steady-state step whose phases are ``(host s, GPU s, launches, host syncs)``, in order.

    Each phase is cut into ``syncs + 1`` equal stretches with a synchronisation after each but the
    last. Two clocks run: when the host is free, when the GPU has finished what was queued. A
    stretch queues its GPU work while the host spends its host time: the GPU starts it once it is
    free and the first launch has arrived (``launch_latency_s``), and cannot finish before the last
    kernel, queued at the stretch's end, has run. A synchronisation moves the host clock to the
    GPU's. The phases run ``steps`` times; the last step's advance of the later clock is returned
    (``max(host, GPU)`` per step when nothing serialises).

    Raises:
        ValueError: a negative time or count.
    """
    stretches: list[_Stretch] = []
    for host_s, gpu_s, launches, syncs in phases:
        if min(host_s, gpu_s, launches, syncs) < 0:
            raise ValueError(f"phase times and counts must be >= 0, got host {host_s} s, GPU {gpu_s} s, "
                             f"{launches} launches, {syncs} syncs")
        whole = int(math.ceil(syncs))
        n = whole + 1
        stretches += [_Stretch(host_s / n, gpu_s / n, launches / n, i < whole) for i in range(n)]
    host = gpu = 0.0
    last = 0.0
    for _ in range(max(1, steps)):
        start = max(host, gpu)
        for s in stretches:
            if s.gpu_s > 0:
                tail = s.gpu_s / max(1.0, s.launches)  # the last kernel, queued when the host is done
                gpu = max(max(gpu, host + launch_latency_s) + s.gpu_s, host + s.host_s + launch_latency_s + tail)
            host += s.host_s
            if s.sync_after:
                host = max(host, gpu)
        last = max(host, gpu) - start
    return last


def step_seconds(phases: Mapping[str, PhaseCounts], gpus: int, gpu: GpuSpec = H100,
                 host: HostSpec = HOST) -> dict[str, Any]:
    """Model one step from its phases ``forward``, ``backward``, ``step`` (missing ones count as empty).

    Returns:
        ``roofline_s``: the sum of every phase's GEMM, memory and launch time (the GPU's own work);
        ``gpu_s``: the GPU's stream time (own work, copies, exposed collectives); ``host_s``: the
        host's time; ``modelled_s``: the step by :func:`timeline_s` (overlap and serialisation);
        ``parts`` and ``host_parts``: the GPU and host seconds per phase.
    """
    names = ("forward", "backward", "step")
    counts = {name: phases.get(name, PhaseCounts()) for name in names}
    parts = {name: phase_seconds(counts[name], gpus, gpu) for name in names}
    hparts = {name: host_parts(counts[name], host) for name in names}
    own = {name: p["gemm"] + p["memory"] + p["launch"] for name, p in parts.items()}
    stream = {}
    for name, p in parts.items():
        if name == "backward":  # bucket all-reduces run beside backward on their own stream
            stream[name] = max(own[name] + p["pcie"], p["comm"])
        else:
            stream[name] = own[name] + p["pcie"] + p["comm"]
    host_s = {name: sum(h.values()) for name, h in hparts.items()}
    modelled = timeline_s([(host_s[n], stream[n], counts[n].launches, counts[n].host_syncs) for n in names],
                          gpu.kernel_s)
    return {"roofline_s": sum(own.values()), "gpu_s": sum(stream.values()), "host_s": sum(host_s.values()),
            "modelled_s": modelled, "parts": parts, "host_parts": hparts}


# What dominates, in the words of the report: host parts and GPU parts by group.
_HOST_GROUPS = {"host dispatch": ("cupy", "mxlite", "python"), "host launches": ("launch",),
                "host copies": ("copy",), "host NCCL calls": ("nccl",), "host syncs": ("sync",)}
_GPU_GROUPS = {"GEMM": ("gemm",), "memory": ("memory",), "GPU launches": ("launch",), "PCIe/NVLink": ("pcie",),
               "NCCL": ("comm",)}


def dominant(result: Mapping[str, Any]) -> dict[str, Any]:
    """What the model says bounds a step (a :func:`step_seconds` result).

    Returns ``side`` ('host' or 'GPU', whichever total is larger), ``part`` (that side's largest
    group: host dispatch, host launches, host copies, host NCCL calls, host syncs; GEMM, memory,
    GPU launches, PCIe/NVLink, NCCL) and ``share`` (that group's fraction of its side's total).
    """
    def groups(parts: Mapping[str, Mapping[str, float]], table: Mapping[str, tuple[str, ...]]) -> dict[str, float]:
        return {g: sum(p.get(k, 0.0) for p in parts.values() for k in keys) for g, keys in table.items()}

    host = groups(result["host_parts"], _HOST_GROUPS)
    gpu = groups(result["parts"], _GPU_GROUPS)
    side, table = ("host", host) if sum(host.values()) > sum(gpu.values()) else ("GPU", gpu)
    part = max(table, key=table.__getitem__)
    total = sum(table.values())
    return {"side": side, "part": part, "share": table[part] / total if total else 0.0}


def constants_table() -> str:
    """The constants as a Markdown table (name, value, unit, source)."""
    rows = ["| constant | value | unit | source |", "|---|---:|---|---|"]
    rows += [f"| `{k}` | {v:.4g} | {u} | {s} |" for k, (v, u, s) in CONSTANTS.items()]
    return "\n".join(rows)
