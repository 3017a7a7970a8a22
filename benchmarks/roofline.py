"""A stated roofline model of one training step on an H100, fed by counted costs (no timings).

The emulated GPUs count what a step does (kernel launches, bytes moved by array operations and
by the fused optimizer kernels, host synchronisations, host<->device copies, NCCL calls and
bytes, see ``benchmarks/bench_gpu_model.py``). This module turns those counts into seconds with
the constants below, each named with where its value comes from. It is a model: the figures it
gives are estimates for an H100 SXM, not GPU timings.

Per GPU and per phase (forward, backward, optimizer step), the GPU's own work is

* GEMMs: ``flops / (GEMM_PEAK_FLOPS * GEMM_EFFICIENCY)``, FLOPs from the layer shapes;
* memory-bound work: ``bytes / (HBM_BYTES_PER_S * HBM_EFFICIENCY)``, bytes counted by the
  emulation (array operations other than GEMMs, plus each fused optimizer kernel's traffic);
* launches: ``launches * KERNEL_LAUNCH_S`` (added, not overlapped: a conservative roofline);

and the *serialisation* around it:

* each host synchronisation drains the GPU's queue: ``HOST_SYNC_S``;
* host<->device copies over PCIe: ``bytes / PCIE_BYTES_PER_S`` (blocking, on the critical path);
* NCCL collectives, α-β: the cheaper of ring and tree (:func:`allreduce_s`, :func:`allgather_s`)
  over NVLink inside one node. Collectives issued during backward overlap with it (only the part
  longer than backward is exposed); those issued in the optimizer step are exposed.

``roofline_s`` is the sum of the GPU's own work; ``modelled_s`` adds the serialisation. On one
GPU without host round trips the two agree: nothing hides in between.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CONSTANTS", "GEMM_OPS", "KERNEL_TRAFFIC", "PhaseCounts", "allgather_s", "allreduce_s", "constants_table",
           "dense_flops", "conv_flops", "kernel_traffic", "minimum_bytes_per_element", "phase_seconds",
           "step_seconds"]

# -- constants (H100 SXM5 80 GB) ------------------------------------------------------------------------
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
HOST_SYNC_S = 5e-6 + KERNEL_LAUNCH_S
# NVLink inside an H100 node: the scaling model's effective figures (docs/scaling.md): 5 us per
# NCCL step, 150 GB/s per GPU (NVLink 4 is 450 GB/s per direction; NCCL reaches less on mid-sized
# buffers, so this is deliberately conservative).
NVLINK_ALPHA_S = 5e-6
NVLINK_BYTES_PER_S = 150e9

CONSTANTS: dict[str, tuple[float, str, str]] = {
    "HBM_BYTES_PER_S": (HBM_BYTES_PER_S, "B/s", "H100 SXM datasheet, 3.35 TB/s"),
    "HBM_EFFICIENCY": (HBM_EFFICIENCY, "", "assumption: streaming kernels reach 80-90% of peak"),
    "GEMM_PEAK_FLOPS": (GEMM_PEAK_FLOPS, "FLOP/s", "H100 SXM datasheet, FP32 67 TFLOPS (no TF32)"),
    "GEMM_EFFICIENCY": (GEMM_EFFICIENCY, "", "assumption: cuBLAS SGEMM ~70% of peak"),
    "KERNEL_LAUNCH_S": (KERNEL_LAUNCH_S, "s", "NVIDIA 'Getting Started with CUDA Graphs': ~3.8 us per kernel"),
    "PCIE_BYTES_PER_S": (PCIE_BYTES_PER_S, "B/s", "PCIe 5.0 x16 63 GB/s (PCI-SIG) x 0.8 reached"),
    "HOST_SYNC_S": (HOST_SYNC_S, "s", "assumption: 5 us to notice completion + one launch to refill"),
    "NVLINK_ALPHA_S": (NVLINK_ALPHA_S, "s", "docs/scaling.md: one NCCL step inside a node"),
    "NVLINK_BYTES_PER_S": (NVLINK_BYTES_PER_S, "B/s", "docs/scaling.md: effective NCCL bandwidth per GPU"),
}

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
# launcher passes them (mxlite/optimizer/_fused_rules.py): weight first, then the gradient
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
        "sgd_update", "nag_update", "adam_update", "adamw_update", "rmsprop_update", "adagrad_update",
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
    rule = KERNEL_TRAFFIC[kernel.split("<", 1)[0]]
    bufs = list(buffers)
    weight, master = bufs[0], bufs[-1]
    grad = bufs[1] if rule.grad else None
    states = bufs[2:-1] if rule.grad else bufs[1:-1]
    w_item, m_item = _itemsize(weight), _itemsize(master)
    if rule.weight == "rw":
        per = (m_item + m_item + w_item) if master is not None else 2 * w_item
    else:
        per = m_item if master is not None else w_item
    per += _itemsize(grad)
    per += sum(_itemsize(s) * (2 if rule.states == "rw" else 1) for s in states)
    return per * int(elements), _TABLE_BYTES_PER_CHUNK * chunks + _TABLE_BYTES_PER_SEGMENT * segments


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
    """What one GPU did in one phase of a step (per step), as counted by the emulation.

    Attributes:
        gemm_flops: GEMM FLOPs (from the layer shapes).
        launches: kernels launched (array operations that touched data, and RawKernel launches).
        memory_bytes: bytes moved by non-GEMM array operations and by the fused kernels.
        host_syncs: host synchronisations.
        h2d_bytes, d2h_bytes: host<->device copies.
        p2p_bytes: peer copies onto this GPU (NVLink).
        nccl_call_bytes: bytes sent by NCCL collective name; nccl_calls: calls by name.
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


def phase_seconds(c: PhaseCounts, gpus: int) -> dict[str, float]:
    """The parts of one phase, seconds: ``gemm``, ``memory``, ``launch`` (the GPU's own work) and
    ``sync``, ``pcie``, ``comm`` (serialisation and communication over ``gpus`` GPUs)."""
    comm = 0.0
    calls, sent = c.nccl_calls or {}, c.nccl_call_bytes or {}
    for name, count in calls.items():
        if not count:
            continue
        per_call = sent.get(name, 0.0) / count
        one = allgather_s(per_call, gpus) if name == "allGather" else allreduce_s(per_call, gpus)
        comm += count * one
    return {
        "gemm": c.gemm_flops / (GEMM_PEAK_FLOPS * GEMM_EFFICIENCY),
        "memory": c.memory_bytes / (HBM_BYTES_PER_S * HBM_EFFICIENCY),
        "launch": c.launches * KERNEL_LAUNCH_S,
        "sync": c.host_syncs * HOST_SYNC_S,
        "pcie": (c.h2d_bytes + c.d2h_bytes) / PCIE_BYTES_PER_S + c.p2p_bytes / NVLINK_BYTES_PER_S,
        "comm": comm,
    }


def step_seconds(phases: Mapping[str, PhaseCounts], gpus: int) -> dict[str, Any]:
    """Model one step from its phases ``forward``, ``backward``, ``step`` (missing ones count as empty).

    Returns ``roofline_s`` (the sum of every phase's GEMM, memory and launch time), ``modelled_s``
    (plus host syncs, PCIe copies, collectives issued in the step, and the part of those issued
    during backward that backward does not hide), and the parts per phase.
    """
    parts = {name: phase_seconds(phases.get(name, PhaseCounts()), gpus) for name in ("forward", "backward", "step")}
    own = {name: p["gemm"] + p["memory"] + p["launch"] for name, p in parts.items()}
    serial = {name: p["sync"] + p["pcie"] for name, p in parts.items()}
    backward = max(own["backward"], parts["backward"]["comm"])  # bucket all-reduces overlap backward
    modelled = (own["forward"] + serial["forward"] + backward + serial["backward"]
                + own["step"] + serial["step"] + parts["step"]["comm"])
    return {"roofline_s": sum(own.values()), "modelled_s": modelled, "parts": parts}


def constants_table() -> str:
    """The constants as a Markdown table (name, value, unit, source)."""
    rows = ["| constant | value | unit | source |", "|---|---:|---|---|"]
    rows += [f"| `{k}` | {v:.4g} | {u} | {s} |" for k, (v, u, s) in CONSTANTS.items()]
    return "\n".join(rows)
