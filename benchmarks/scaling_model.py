"""An α-β model of data-parallel scaling: ring all-reduce of gradient buckets overlapped with backward.

Usage: ``PYTHONPATH=. python3 benchmarks/scaling_model.py [--json out.json] [--out DIR] [--validate]``.

Predicts the scaling efficiency of synchronous data-parallel training — the time of one step on
1 GPU over the time of one step on P GPUs at the same per-GPU batch — for P = 2 ... 512, for two
built-in gradient profiles (:func:`mlp_profile`, :func:`resnet50_profile`) or profiles measured on
a GPU (``--profile-json``), over three networks:

* ``nvlink``: one node, a ring over P <= 8 GPUs on NVLink (:data:`NVLINK`);
* ``hierarchical``: nodes of 8 GPUs; reduce-scatter on NVLink inside each node, an all-reduce of
  each GPU's shard between the nodes over the network (:data:`NETWORK_100G`), all-gather on NVLink
  (:func:`hierarchical_allreduce_time`); the same as ``nvlink`` for P <= 8;
* ``flat``: one ring through all P GPUs, every step paced by the 100 Gb/s network (as one ring
  through 8-GPU nodes with one NIC each, or one GPU per node).

Model (docs/scaling.md states every assumption):

* a ring all-reduce of n bytes over p ranks costs ``2(p-1)·α + 2(p-1)/p·n·β (+ (p-1)/p·n·γ)``
  (:func:`ring_allreduce_time`; γ, the reduction cost per byte, is 0 by default);
* gradients are cut into buckets by mxlite's own rule (SINGA's threshold, the same 25 MiB bound:
  :func:`plan_bucket_indices` matches :func:`mxlite.comm.buckets.plan_buckets`); a bucket is
  ready when backward has produced its last gradient; buckets are reduced in order on one
  communication stream while backward goes on (:func:`simulate_step`, an event simulation);
* step time = forward + max(backward, end of the last all-reduce) + optimizer; compute does not
  depend on P (same per-GPU batch) and is not slowed by communication.

``--validate`` checks the α-β part on what this machine can measure: one ``mpiexec -n 2`` job
on the CPU times ``MpiCommunicator.allreduce`` of flat float32 buffers (4 KB ... 16 MB, in cache
and from memory) and runs ``benchmarks/bench_allreduce.py``'s CPU part (200 small + 4 large
tensors, per tensor and bucketed), alternately for a few rounds; α and β are fitted per round
and regime, and the benchmark's figures are predicted and compared (relative error per round;
``--bench-json`` compares with a report run apart instead).

Memory (:func:`memory_table`): the largest model whose training state fits in one GPU's memory
(``--gpu-gb``, default 80) with and without sharded optimizer states (ZeRO-1,
``Trainer(shard_optimizer_states=True)``), for ``--memory-gpus`` (default 8 and 64) GPUs, Adam, in
float32 and in float16 with float32 master weights. Per parameter and GPU: the weight and its
gradient (each in the training dtype), plus the optimizer state (Adam's two float32 moments, and
the float32 master weight for float16), all of it unsharded, 1/N of it sharded. What else a GPU
holds is one figure, ``--activation-gb`` (default 16 GB: activations of the per-GPU batch, the
CUDA context, cuBLAS workspaces, NCCL buffers and the memory pool's slack), independent of the
model's size and of N; arenas are taken as exactly full (no spare capacity). Each sharded model's
all-gather of its weights, on the critical path before the next forward unless overlapped, is
timed as the all-gather half of the hierarchical all-reduce of the weights (the all-reduce of the
gradients costs what it did).

Prints a table; ``--json`` writes the table, the assumptions and the validation; the plot
(efficiency vs P, log2 axis) goes to ``DIR/scaling_model.png`` (default: next to this script).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mxlite.comm.buckets import DEFAULT_BUCKET_BYTES
from mxlite.store import ALIGN

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
RANKS = (2, 4, 8, 16, 32, 64, 128, 256, 512)
GPUS_PER_NODE = 8  # an HGX/DGX H100 node
FLOAT32 = 4  # bytes per gradient element of the built-in profiles (float32 training)
BN_BACKWARD_FLOPS_PER_ELEMENT = 10  # normalise, scale and the two reductions, forward values recomputed


# -- links and all-reduce costs ----------------------------------------------------------------------
@dataclass(frozen=True)
class Link:
    """α-β(-γ) parameters of one kind of link.

    Args:
        name: what the link is, for tables.
        alpha_s: latency per message (per ring step), seconds.
        bytes_per_s: effective bandwidth a rank sends at to its ring neighbour over this link
            (per GPU for NVLink, per NIC for a network), bytes/s; β = 1 / bytes_per_s.
        gamma_s_per_byte: reduction cost per byte summed (0: free, as on a GPU whose memory is
            far faster than the link).
    """

    name: str
    alpha_s: float
    bytes_per_s: float
    gamma_s_per_byte: float = 0.0

    def __post_init__(self) -> None:
        if not (self.alpha_s >= 0 and self.bytes_per_s > 0 and self.gamma_s_per_byte >= 0):
            raise ValueError(f"link {self.name!r}: need alpha_s >= 0, bytes_per_s > 0, gamma_s_per_byte >= 0; got "
                             f"{self.alpha_s}, {self.bytes_per_s}, {self.gamma_s_per_byte}")

    @property
    def beta_s_per_byte(self) -> float:
        """β: seconds per byte sent."""
        return 1.0 / self.bytes_per_s


# NVLink 4 on H100 SXM is 450 GB/s per direction per GPU; NCCL's measured all-reduce bus bandwidth
# on 8 GPUs is far below that on small and mid-sized buckets. 150 GB/s is a deliberately
# conservative effective figure; 5 µs is the order of one NCCL ring step inside a node.
NVLINK = Link("NVLink (one node, effective per GPU)", 5e-6, 150e9)
# 100 Gb/s = 12.5 GB/s raw; ~11 GB/s is what NCCL's all-reduce reaches over one 100 Gb/s
# InfiniBand/RoCE NIC; 15 µs per step is the middle of the 10-20 µs one hop costs with NCCL.
NETWORK_100G = Link("100 Gb/s network (effective)", 15e-6, 11e9)


def ring_allreduce_time(nbytes: float, p: int, link: Link) -> float:
    """Seconds a ring all-reduce of ``nbytes`` over ``p`` ranks takes on ``link``.

    ``2(p-1)·α + 2(p-1)/p·n·β + (p-1)/p·n·γ``: a reduce-scatter then an all-gather, each of p-1
    steps moving n/p bytes per rank; the reduce-scatter sums (p-1)/p·n bytes per rank. 0 for p = 1.

    Raises:
        ValueError: ``p`` < 1 or ``nbytes`` < 0.
    """
    if p < 1:
        raise ValueError(f"ring all-reduce needs p >= 1 ranks, got p={p}")
    if nbytes < 0:
        raise ValueError(f"ring all-reduce of a negative size: nbytes={nbytes}")
    if p == 1:
        return 0.0
    share = (p - 1) / p * nbytes
    return 2 * (p - 1) * link.alpha_s + 2 * share * link.beta_s_per_byte + share * link.gamma_s_per_byte


def hierarchical_allreduce_time(nbytes: float, p: int, intra: Link = NVLINK, inter: Link = NETWORK_100G,
                                gpus_per_node: int = GPUS_PER_NODE, nics_per_node: int = 1) -> float:
    """Seconds a two-level all-reduce of ``nbytes`` over ``p`` GPUs takes (nodes of ``gpus_per_node``).

    1. reduce-scatter inside each node over ``intra``: ``(g-1)·α + (g-1)/g·n·(β + γ)``;
    2. each GPU all-reduces its n/g shard with the same GPU of every other node (N = p/g nodes),
       the g rings running at once and sharing the node's ``nics_per_node`` NICs, each of
       ``inter``'s bandwidth: ``2(N-1)·α + 2(N-1)/N·(n/k)·β + (N-1)/N·(n/g)·γ`` with
       k = min(nics_per_node, g) (all of n crosses the network once per direction and ring step);
    3. all-gather inside each node over ``intra``: ``(g-1)·α + (g-1)/g·n·β``.

    For p <= ``gpus_per_node`` it is a ring inside one node.

    Raises:
        ValueError: p > gpus_per_node and not a multiple of it, or a non-positive count.
    """
    if gpus_per_node < 1 or nics_per_node < 1:
        raise ValueError(f"gpus_per_node and nics_per_node must be >= 1, got {gpus_per_node}, {nics_per_node}")
    if p <= gpus_per_node:
        return ring_allreduce_time(nbytes, p, intra)
    if p % gpus_per_node:
        raise ValueError(f"hierarchical all-reduce over p={p} GPUs needs whole nodes of {gpus_per_node} GPUs")
    g, nodes = gpus_per_node, p // gpus_per_node
    local = (g - 1) / g * nbytes
    intra_s = 2 * (g - 1) * intra.alpha_s + 2 * local * intra.beta_s_per_byte + local * intra.gamma_s_per_byte
    shard = (nodes - 1) / nodes * nbytes
    inter_s = (2 * (nodes - 1) * inter.alpha_s + 2 * shard / min(nics_per_node, g) * inter.beta_s_per_byte
               + shard / g * inter.gamma_s_per_byte)
    return intra_s + inter_s


def allreduce_cost(network: str, p: int, intra: Link = NVLINK, inter: Link = NETWORK_100G,
                   gpus_per_node: int = GPUS_PER_NODE, nics_per_node: int = 1) -> Callable[[float], float]:
    """The all-reduce cost function (bytes -> seconds) of ``network`` at ``p`` GPUs.

    ``network``: ``'nvlink'`` (a ring in one node; p <= gpus_per_node), ``'hierarchical'`` or
    ``'flat'`` (one ring paced by ``inter``).

    Raises:
        ValueError: an unknown network, or ``'nvlink'`` beyond one node.
    """
    if network == "nvlink":
        if p > gpus_per_node:
            raise ValueError(f"network 'nvlink' spans one node: p={p} > gpus_per_node={gpus_per_node}")
        return lambda n: ring_allreduce_time(n, p, intra)
    if network == "hierarchical":
        return lambda n: hierarchical_allreduce_time(n, p, intra, inter, gpus_per_node, nics_per_node)
    if network == "flat":
        return lambda n: ring_allreduce_time(n, p, inter)
    raise ValueError(f"unknown network {network!r}: use 'nvlink', 'hierarchical' or 'flat'")


# -- memory: the largest model that fits, with and without sharded optimizer states -------------------
GPU_MEMORY_BYTES = 80e9  # an H100 SXM or A100 80GB: 80 GB of HBM per GPU
# Assumption: what a GPU holds besides the parameters, their gradients and the optimizer states (activations of
# a per-GPU batch, CUDA context ~0.5 GB, cuBLAS workspaces, NCCL buffers, the pool's slack); one figure for every
# model size and N. 16 GB is an activation budget of the order of a transformer layer stack at a moderate
# micro-batch with activation checkpointing; change it with --activation-gb.
ACTIVATION_BYTES = 16e9
MEMORY_GPUS = (8, 64)


@dataclass(frozen=True)
class Precision:
    """Bytes per parameter of one way of training.

    Args:
        name: for tables.
        weight_bytes: the weight, in the training dtype.
        grad_bytes: its gradient (the same dtype; the arenas keep one of each per device).
        state_bytes: the optimizer state: Adam's two float32 moments (8), plus a float32 master weight (4) when
            the weights are float16 (``multi_precision``).
    """

    name: str
    weight_bytes: int
    grad_bytes: int
    state_bytes: int


PRECISIONS = (Precision("float32, Adam", 4, 4, 8), Precision("float16 + float32 master, Adam", 2, 2, 12))


def bytes_per_parameter(precision: Precision, gpus: int, sharded: bool) -> float:
    """Bytes one parameter costs each GPU: weight + gradient + the optimizer state (1/``gpus`` of it, sharded)."""
    if gpus < 1:
        raise ValueError(f"gpus must be >= 1, got {gpus}")
    return precision.weight_bytes + precision.grad_bytes + precision.state_bytes / (gpus if sharded else 1)


def largest_model(precision: Precision, gpus: int, sharded: bool, gpu_bytes: float = GPU_MEMORY_BYTES,
                  activation_bytes: float = ACTIVATION_BYTES) -> float:
    """Parameters of the largest model whose training state fits beside ``activation_bytes`` in ``gpu_bytes``.

    Raises:
        ValueError: nothing is left for the parameters.
    """
    free = gpu_bytes - activation_bytes
    if free <= 0:
        raise ValueError(f"no memory left for parameters: {gpu_bytes:g} B per GPU, {activation_bytes:g} B of "
                         "activations")
    return free / bytes_per_parameter(precision, gpus, sharded)


def allgather_time(nbytes: float, p: int, intra: Link = NVLINK, inter: Link = NETWORK_100G,
                   gpus_per_node: int = GPUS_PER_NODE, nics_per_node: int = 1) -> float:
    """Seconds to all-gather ``nbytes`` of weights over ``p`` GPUs: half the hierarchical all-reduce of them (a
    ring all-reduce is a reduce-scatter and an all-gather of equal cost; γ, the summing, is 0 here)."""
    return hierarchical_allreduce_time(nbytes, p, intra, inter, gpus_per_node, nics_per_node) / 2


def memory_table(gpus: Sequence[int] = MEMORY_GPUS, gpu_bytes: float = GPU_MEMORY_BYTES,
                 activation_bytes: float = ACTIVATION_BYTES, intra: Link = NVLINK, inter: Link = NETWORK_100G,
                 gpus_per_node: int = GPUS_PER_NODE, nics_per_node: int = 1) -> list[dict[str, Any]]:
    """Per GPU count and precision: the largest model unsharded and sharded (parameters), and the sharded one's
    weight all-gather time (seconds per step, on the critical path unless overlapped)."""
    rows = []
    for p in gpus:
        for precision in PRECISIONS:
            plain = largest_model(precision, p, False, gpu_bytes, activation_bytes)
            sharded = largest_model(precision, p, True, gpu_bytes, activation_bytes)
            rows.append({"gpus": p, "precision": precision.name,
                         "bytes_per_param": bytes_per_parameter(precision, p, False),
                         "bytes_per_param_sharded": bytes_per_parameter(precision, p, True),
                         "params": plain, "params_sharded": sharded, "gain": sharded / plain,
                         "allgather_s": allgather_time(sharded * precision.weight_bytes, p, intra, inter,
                                                       gpus_per_node, nics_per_node)})
    return rows


def print_memory_table(rows: list[dict[str, Any]], gpu_bytes: float, activation_bytes: float) -> None:
    """The largest models, unsharded and sharded, as a text table."""
    print(f"\nLargest model per {gpu_bytes / 1e9:g} GB GPU ({activation_bytes / 1e9:g} GB kept for activations and "
          "the rest), Adam, data parallel:")
    print(f"{'GPUs':>4} {'precision':31s} {'B/param':>7} {'sharded':>7} {'params':>8} {'sharded':>8} {'gain':>5} "
          f"{'all-gather s':>12}")
    for r in rows:
        print(f"{r['gpus']:>4} {r['precision']:31s} {r['bytes_per_param']:7.2f} {r['bytes_per_param_sharded']:7.2f} "
              f"{r['params'] / 1e9:7.2f}B {r['params_sharded'] / 1e9:7.2f}B {r['gain']:5.2f} {r['allgather_s']:12.3f}")
    print("params: the largest model unsharded / with shard_optimizer_states; all-gather: the sharded model's "
          "weights gathered after each update (hierarchical network), before the next forward")


# -- gradient profiles -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Layer:
    """One gradient tensor, in backward order.

    Args:
        name: the tensor's name.
        nbytes: its gradient's size in bytes.
        backward_s: backward time spent since the previous tensor's gradient was ready until this
            one's is (seconds); 0 for a tensor produced by the same op as the previous one.
    """

    name: str
    nbytes: int
    backward_s: float


@dataclass(frozen=True)
class Profile:
    """A model's step on one GPU: gradient tensors in backward order, forward and optimizer time.

    Args:
        name: the profile's name.
        layers: the gradient tensors, in the order backward produces them.
        forward_s: forward time, seconds.
        optimizer_s: optimizer update time, seconds (after the last all-reduce).
        notes: where the figures come from.
    """

    name: str
    layers: tuple[Layer, ...]
    forward_s: float
    optimizer_s: float
    notes: str = ""

    def __post_init__(self) -> None:
        if not self.layers:
            raise ValueError(f"profile {self.name!r} has no layers")
        if self.forward_s < 0 or self.optimizer_s < 0:
            raise ValueError(f"profile {self.name!r}: forward_s={self.forward_s} and optimizer_s={self.optimizer_s} "
                             "must be >= 0")
        for layer in self.layers:
            if layer.nbytes <= 0 or layer.backward_s < 0:
                raise ValueError(f"profile {self.name!r}, layer {layer.name!r}: need nbytes > 0 and backward_s >= 0, "
                                 f"got nbytes={layer.nbytes}, backward_s={layer.backward_s}")

    @property
    def backward_s(self) -> float:
        """Total backward time, seconds."""
        return sum(layer.backward_s for layer in self.layers)

    @property
    def compute_s(self) -> float:
        """Step time on one GPU: forward + backward + optimizer, seconds."""
        return self.forward_s + self.backward_s + self.optimizer_s

    @property
    def nbytes(self) -> int:
        """Gradient bytes all-reduced per step."""
        return sum(layer.nbytes for layer in self.layers)

    def to_json(self) -> dict[str, Any]:
        """The ``--profile-json`` layout: ``{name, layers: [{name, bytes, backward_s}], forward_s, optimizer_s}``."""
        return {"name": self.name, "notes": self.notes, "forward_s": self.forward_s, "optimizer_s": self.optimizer_s,
                "layers": [{"name": x.name, "bytes": x.nbytes, "backward_s": x.backward_s} for x in self.layers]}


def load_profile(path: str) -> Profile:
    """A profile from a JSON file ``{name?, layers: [{name, bytes, backward_s}], forward_s, optimizer_s}``.

    Layers are in backward order; ``name`` defaults to the file's stem.

    Raises:
        ValueError: a missing or ill-typed key (named, with the file).
    """
    with open(path) as f:
        data = json.load(f)
    try:
        layers = tuple(Layer(str(x["name"]), int(x["bytes"]), float(x["backward_s"])) for x in data["layers"])
        return Profile(str(data.get("name", os.path.splitext(os.path.basename(path))[0])), layers,
                       float(data["forward_s"]), float(data["optimizer_s"]), str(data.get("notes", path)))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: a profile needs forward_s, optimizer_s and layers [{{name, bytes, backward_s}}] "
                         f"in backward order; missing or wrong: {exc}") from exc


def _profile_from_tensors(name: str, tensors: Sequence[tuple[str, int, float]], forward_s: float, backward_s: float,
                          optimizer_s: float, notes: str) -> Profile:
    """Tensors in forward order, each (name, elements, backward FLOPs) -> a profile in backward order.

    A tensor's FLOPs are the backward work done, after the previous tensor in backward order
    was ready, until its gradient is (0 for a tensor ready together with the previous one);
    ``backward_s`` is shared among them in proportion.
    """
    total = sum(flops for _, _, flops in tensors)
    layers = tuple(Layer(tensor, elements * FLOAT32, backward_s * flops / total)
                   for tensor, elements, flops in reversed(tensors))
    return Profile(name, layers, forward_s, optimizer_s, notes)


# -- compute times from counted costs (benchmarks/roofline.py, benchmarks/bench_gpu_model.py) -----------
def _roofline() -> Any:
    """``benchmarks/roofline.py`` (imported on first use: benchmarks/ is not a package)."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import roofline  # noqa: PLC0415

    return roofline


@dataclass(frozen=True)
class Counted:
    """Per-step costs counted on emulated GPUs for one model kind (a ``bench_gpu_model.py`` record).

    Args:
        launches_per_tensor: kernels launched in forward and in backward, per gradient tensor.
        optimizer_bytes_per_element: bytes the fused optimizer kernels moved per parameter element.
        optimizer_launches: optimizer kernel launches per step.
        source: where the figures come from.
    """

    launches_per_tensor: tuple[float, float] = (0.0, 0.0)
    optimizer_bytes_per_element: float = 28.0  # Adam on float32: roofline.minimum_bytes_per_element(2)
    optimizer_launches: float = 1.0
    source: str = "no counts: GEMM FLOPs and Adam's minimum optimizer traffic only"

    @classmethod
    def from_record(cls, record: dict[str, Any], source: str) -> Counted:
        """The per-tensor figures of one ``bench_gpu_model.py`` record (1 GPU, no store, no codec)."""
        launch = _roofline().KERNEL_LAUNCH_S
        parts, tensors = record["parts_ms"], max(1, record["param_tensors"])
        return cls((parts["forward"]["launch"] * 1e-3 / launch / tensors,
                    parts["backward"]["launch"] * 1e-3 / launch / tensors),
                   float(record["kernel_bytes_per_element"]) or 28.0, float(record["step_launches"]), source)


def roofline_times(forward_flops: float, backward_flops: float, params: int, tensors: int,
                   counted: Counted | None = None) -> tuple[float, float, float]:
    """(forward, backward, optimizer) seconds on one H100 from ``benchmarks/roofline.py``'s constants.

    GEMM FLOPs at ``GEMM_PEAK_FLOPS × GEMM_EFFICIENCY``, plus ``KERNEL_LAUNCH_S`` per launch
    (launches per gradient tensor as counted); the optimizer moves ``params`` × the counted bytes
    per element at ``HBM_BYTES_PER_S × HBM_EFFICIENCY``. Memory-bound activation work (ReLU, BN,
    pooling) is not in these built-in profiles; a counted profile (``--counts``) has it.
    """
    rl = _roofline()
    c = counted or Counted()
    gemm = rl.GEMM_PEAK_FLOPS * rl.GEMM_EFFICIENCY
    hbm = rl.HBM_BYTES_PER_S * rl.HBM_EFFICIENCY
    forward = forward_flops / gemm + c.launches_per_tensor[0] * tensors * rl.KERNEL_LAUNCH_S
    backward = backward_flops / gemm + c.launches_per_tensor[1] * tensors * rl.KERNEL_LAUNCH_S
    optimizer = params * c.optimizer_bytes_per_element / hbm + c.optimizer_launches * rl.KERNEL_LAUNCH_S
    return forward, backward, optimizer


def load_counts(path: str) -> tuple[dict[str, Counted], list[Profile]]:
    """From a ``bench_gpu_model.py --json`` file: per model kind ('mlp', 'cnn') the counted figures, and
    the counted profiles of its 1-GPU, no-store, no-codec records (their roofline times per layer).

    Raises:
        ValueError: the file has no usable record.
    """
    with open(path) as f:
        data = json.load(f)
    counted, profiles = {}, []
    for r in data.get("records", []):
        if (r.get("gpus") == 1 and r.get("kvstore") == "none" and r.get("codec") == "none" and "error" not in r
                and "skipped" not in r and "profile" in r):
            counted[r["model"]] = Counted.from_record(r, f"{path}: {r['model']}")
            p = r["profile"]
            layers = tuple(Layer(x["name"], int(x["bytes"]), float(x["backward_s"])) for x in p["layers"])
            profiles.append(Profile(p["name"], layers, float(p["forward_s"]), float(p["optimizer_s"]), p["notes"]))
    if not counted:
        raise ValueError(f"{path}: no record with gpus=1, kvstore 'none', codec 'none' (bench_gpu_model.py --json)")
    return counted, profiles


def mlp_profile(in_units: int = 4096, hidden: int = 4096, layers: int = 4, classes: int = 10,
                forward_s: float | None = None, backward_s: float | None = None, optimizer_s: float | None = None,
                batch: int = 1024, counted: Counted | None = None) -> Profile:
    """The benchmarks' MLP (``bench_train.py``): ``layers`` hidden Dense of ``hidden`` (ReLU), ``classes`` outputs.

    Defaults: input 4096, 4 × 4096, 10 outputs = 67.2 M float32 parameters (10 tensors), batch
    1024. Times not given come from :func:`roofline_times`: the GEMM FLOPs of the layer shapes
    (forward 137 GFLOP), the launches and optimizer bytes per element counted on emulated GPUs
    (``counted``; else Adam's minimum, 28 bytes). Backward time is shared by FLOPs: a layer's bias
    gradient (a sum over the batch) is ready first, its weight gradient after the two matmuls dW
    and dX (the first layer has no dX).
    """
    widths = [in_units] + [hidden] * layers + [classes]
    tensors = []
    for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
        matmuls = 1 if i == 0 else 2  # dW, and dX except for the first layer
        tensors += [(f"dense{i}.weight", fan_in * fan_out, 2.0 * matmuls * fan_in * fan_out),
                    (f"dense{i}.bias", fan_out, float(fan_out))]
    fwd_flops = sum(2.0 * batch * a * b for a, b in zip(widths[:-1], widths[1:]))
    bwd_flops = sum(batch * f for _, _, f in tensors)
    params = sum(n for _, n, _ in tensors)
    rf, rb, ro = roofline_times(fwd_flops, bwd_flops, params, len(tensors), counted)
    forward_s = rf if forward_s is None else forward_s
    backward_s = rb if backward_s is None else backward_s
    optimizer_s = ro if optimizer_s is None else optimizer_s
    notes = (f"MLP {in_units}-{'-'.join([str(hidden)] * layers)}-{classes}, float32, batch {batch}; H100 roofline "
             f"(benchmarks/roofline.py): forward {forward_s * 1e3:.2f} ms, backward {backward_s * 1e3:.2f} ms, "
             f"optimizer {optimizer_s * 1e3:.2f} ms; {(counted or Counted()).source}")
    return _profile_from_tensors("mlp", tensors, forward_s, backward_s, optimizer_s, notes)


def _resnet50_tensors(image: int = 224, classes: int = 1000) -> list[tuple[str, int, float]]:
    """ResNet-50 v1.5 (stride on the 3×3 conv) gradient tensors in forward order: (name, elements, backward FLOPs).

    FLOPs per image; a BN's γ and β are ready together, after its backward.
    """
    tensors: list[tuple[str, int, float]] = []

    def conv(name: str, cin: int, cout: int, k: int, out_hw: int, needs_dx: bool = True) -> None:
        macs = out_hw * out_hw * cin * cout * k * k
        tensors.append((f"{name}.weight", cout * cin * k * k, 2.0 * macs * (2 if needs_dx else 1)))

    def bn(name: str, channels: int, hw: int) -> None:
        tensors.append((f"{name}.gamma", channels, 0.0))
        tensors.append((f"{name}.beta", channels, float(BN_BACKWARD_FLOPS_PER_ELEMENT * channels * hw * hw)))

    hw = image // 2
    conv("conv1", 3, 64, 7, hw, needs_dx=False)  # the image needs no gradient
    bn("bn1", 64, hw)
    hw //= 2  # 3×3 max-pool, stride 2
    cin = 64
    for stage, (blocks, width, stride) in enumerate(((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)), 1):
        for b in range(blocks):
            out_hw = hw // (stride if b == 0 else 1)
            name = f"layer{stage}.{b}"
            conv(f"{name}.conv1", cin, width, 1, hw)
            bn(f"{name}.bn1", width, hw)
            conv(f"{name}.conv2", width, width, 3, out_hw)
            bn(f"{name}.bn2", width, out_hw)
            conv(f"{name}.conv3", width, 4 * width, 1, out_hw)
            bn(f"{name}.bn3", 4 * width, out_hw)
            if b == 0:
                conv(f"{name}.downsample.conv", cin, 4 * width, 1, out_hw)
                bn(f"{name}.downsample.bn", 4 * width, out_hw)
            cin, hw = 4 * width, out_hw
    tensors += [("fc.weight", cin * classes, 4.0 * cin * classes), ("fc.bias", classes, float(classes))]
    return tensors


def resnet50_profile(forward_s: float | None = None, backward_s: float | None = None,
                     optimizer_s: float | None = None, batch: int = 256, counted: Counted | None = None) -> Profile:
    """ResNet-50 (v1.5, 224×224, 1000 classes): 161 gradient tensors, 25,557,032 float32 parameters.

    Built from the architecture: conv1 7×7 and BN; 16 bottlenecks (1×1, 3×3, 1×1 convs, each
    with BN γ and β; a 1×1 projection and BN in each stage's first block); FC weight and bias.
    Backward time is shared by backward FLOPs (convs: dX + dW = twice the forward FLOPs; BN:
    ``BN_BACKWARD_FLOPS_PER_ELEMENT`` per output element; FC as a matmul). Times not given come
    from :func:`roofline_times` at ``batch`` (convolution FLOPs as GEMMs; launches per tensor and
    optimizer bytes per element as counted for the benchmark CNN when ``counted`` is given).
    """
    tensors = _resnet50_tensors()
    bwd_flops = batch * sum(f for _, _, f in tensors)
    fwd_flops = bwd_flops / 2  # every conv and the FC: dX + dW = twice forward (conv1's dX, absent, is small)
    params = sum(n for _, n, _ in tensors)
    rf, rb, ro = roofline_times(fwd_flops, bwd_flops, params, len(tensors), counted)
    forward_s = rf if forward_s is None else forward_s
    backward_s = rb if backward_s is None else backward_s
    optimizer_s = ro if optimizer_s is None else optimizer_s
    notes = (f"ResNet-50 v1.5, float32, batch {batch}; H100 roofline (benchmarks/roofline.py): forward "
             f"{forward_s * 1e3:.1f} ms, backward {backward_s * 1e3:.1f} ms, optimizer {optimizer_s * 1e3:.2f} ms; "
             f"{(counted or Counted()).source}")
    return _profile_from_tensors("resnet50", tensors, forward_s, backward_s, optimizer_s, notes)


# -- buckets and the step ----------------------------------------------------------------------------
def plan_bucket_indices(sizes: Sequence[int], bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> list[list[int]]:
    """Cut tensors of ``sizes`` bytes (backward order) into buckets: lists of indices, in order.

    mxlite's rule (:func:`mxlite.comm.buckets.plan_buckets`, SINGA's threshold): a tensor joins
    the open bucket while the bucket stays within ``bucket_bytes`` (a total equal to the bound
    still fits); otherwise it opens a new bucket, so a tensor larger than the bound travels alone.

    Raises:
        ValueError: ``bucket_bytes`` < 1.
    """
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
    buckets: list[list[int]] = []
    open_bytes = 0
    for i, size in enumerate(sizes):
        if not buckets or open_bytes + size > bucket_bytes:
            buckets.append([])
            open_bytes = 0
        buckets[-1].append(i)
        open_bytes += size
    return buckets


@dataclass(frozen=True)
class StepSchedule:
    """The simulated timeline of one step on P GPUs (seconds; bucket times from backward's start).

    Attributes:
        step_s: forward + max(backward, comm_end_s) + optimizer.
        compute_s: forward + backward + optimizer (the step on one GPU).
        backward_s: backward's duration.
        comm_end_s: when the last all-reduce ends (0 with no communication).
        comm_s: the sum of the all-reduce times (the stream's busy time).
        buckets: per bucket in launch order, (bytes, ready, start, end).
    """

    step_s: float
    compute_s: float
    backward_s: float
    comm_end_s: float
    comm_s: float
    buckets: tuple[tuple[int, float, float, float], ...]

    @property
    def efficiency(self) -> float:
        """compute_s / step_s: the step on one GPU over the step on P GPUs at the same per-GPU batch."""
        return self.compute_s / self.step_s if self.step_s > 0 else 1.0


def simulate_step(profile: Profile, allreduce: Callable[[float], float], bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                  overlap: bool = True) -> StepSchedule:
    """Event simulation of one step: backward produces gradients, full buckets queue on one stream.

    Events, in time order: each tensor's gradient is ready when backward has run up to it
    (backward runs its layers back to back from t = 0); a bucket is ready with its last tensor
    (``overlap=False``: every bucket is ready when backward ends, as without ready-hooks); the
    communication stream takes ready buckets in order, one all-reduce at a time, each lasting
    ``allreduce(bucket bytes)``; the optimizer starts when backward and the last all-reduce
    have both ended.
    """
    ready_at, clock = [], 0.0
    for layer in profile.layers:
        clock += layer.backward_s
        ready_at.append(clock)
    backward_end = clock
    free_at, busy, timeline = 0.0, 0.0, []
    for bucket in plan_bucket_indices([x.nbytes for x in profile.layers], bucket_bytes):
        ready = ready_at[bucket[-1]] if overlap else backward_end
        nbytes = sum(profile.layers[i].nbytes for i in bucket)
        start = max(ready, free_at)  # the stream is in order: a ready bucket waits for the one before
        duration = allreduce(nbytes)
        free_at = start + duration
        busy += duration
        timeline.append((nbytes, ready, start, free_at))
    comm_end = free_at if busy > 0 else 0.0
    step = profile.forward_s + max(backward_end, comm_end) + profile.optimizer_s
    return StepSchedule(step, profile.compute_s, backward_end, comm_end, busy, tuple(timeline))


NETWORKS = ("nvlink", "hierarchical", "flat")


def scaling_table(profile: Profile, ranks: Sequence[int] = RANKS, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                  intra: Link = NVLINK, inter: Link = NETWORK_100G, gpus_per_node: int = GPUS_PER_NODE,
                  nics_per_node: int = 1) -> list[dict[str, Any]]:
    """Per P, per network: efficiency (with and without overlap), step, communication and exposed time.

    Rows: ``{"p": P, network: {"efficiency", "efficiency_no_overlap", "step_s", "comm_s",
    "exposed_comm_s", "buckets"} or None}``; ``nvlink`` is None beyond one node.
    """
    rows = []
    for p in ranks:
        row: dict[str, Any] = {"p": p}
        for network in NETWORKS:
            if network == "nvlink" and p > gpus_per_node:
                row[network] = None
                continue
            cost = allreduce_cost(network, p, intra, inter, gpus_per_node, nics_per_node)
            overlapped = simulate_step(profile, cost, bucket_bytes)
            serial = simulate_step(profile, cost, bucket_bytes, overlap=False)
            row[network] = {"efficiency": overlapped.efficiency, "efficiency_no_overlap": serial.efficiency,
                            "step_s": overlapped.step_s, "comm_s": overlapped.comm_s,
                            "exposed_comm_s": overlapped.step_s - overlapped.compute_s,
                            "buckets": len(overlapped.buckets)}
        rows.append(row)
    return rows


# -- output ------------------------------------------------------------------------------------------
def print_table(profile: Profile, rows: list[dict[str, Any]], bucket_bytes: int) -> None:
    """One profile's efficiencies as a text table."""
    buckets = len(plan_bucket_indices([x.nbytes for x in profile.layers], bucket_bytes))
    print(f"\n{profile.name}: {len(profile.layers)} tensors, {profile.nbytes / 4e6:.1f} M float32 parameters "
          f"({profile.nbytes / 1e6:.1f} MB), {buckets} buckets of <= {bucket_bytes / 2**20:g} MiB; forward "
          f"{1e3 * profile.forward_s:.1f} + backward {1e3 * profile.backward_s:.1f} + optimizer "
          f"{1e3 * profile.optimizer_s:.2f} ms")
    print(f"{'P':>5} {'NVLink':>8} {'hierarchical':>13} {'100Gb/s flat':>13} {'hier. step ms':>14} "
          f"{'flat step ms':>13}")
    for row in rows:
        cells = [f"{100 * row[n]['efficiency']:.1f}%" if row[n] else "-" for n in NETWORKS]
        print(f"{row['p']:>5} {cells[0]:>8} {cells[1]:>13} {cells[2]:>13} "
              f"{1e3 * row['hierarchical']['step_s']:>14.2f} {1e3 * row['flat']['step_s']:>13.2f}")


def plot(tables: dict[str, list[dict[str, Any]]], path: str, title: str) -> None:
    """Efficiency vs P (log2 axis): one colour per profile, solid hierarchical, dashed flat."""
    import matplotlib  # noqa: PLC0415 - optional (the 'train' and 'test' extras)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    ps: list[int] = []
    for i, (name, rows) in enumerate(tables.items()):
        colour = plt.get_cmap("tab10")(i % 10)
        ps = [r["p"] for r in rows]
        ax.plot(ps, [r["hierarchical"]["efficiency"] for r in rows], "-o", color=colour, ms=4,
                label=f"{name}: NVLink in node + 100 Gb/s between nodes")
        ax.plot(ps, [r["flat"]["efficiency"] for r in rows], "--s", color=colour, ms=3.5,
                label=f"{name}: flat ring over 100 Gb/s")
    ax.axvline(GPUS_PER_NODE, color="grey", lw=0.8, ls=":")
    ax.text(GPUS_PER_NODE * 0.94, 0.5, "one node | several nodes", color="grey", fontsize=8, ha="center",
            rotation=90, va="center")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ps, [str(p) for p in ps])
    ax.set_xlabel("GPUs P (same per-GPU batch)")
    ax.set_ylabel("scaling efficiency  T(1) / T(P)")
    ax.set_ylim(0, 1.05)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title, fontsize=8.5)
    ax.legend(fontsize=7.5, loc="center right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# -- validation against 2 MPI ranks on this CPU -----------------------------------------------------------
FIT_BYTES = tuple(4096 * 4**i for i in range(7))  # 4 KB ... 16 MB: latency- to bandwidth-bound
# On a CPU a buffer reduced again and again stays in cache, and one read from memory is slower
# (16 MiB: 3.7 ms against 5.3 ms in one run here), so α and β are fitted twice: one buffer reused
# ("in cache", like bench_allreduce's 1.75 MiB small set) and buffers taken in turn from a pool
# of FIT_POOL_BYTES ("from memory", like slices of a large arena: its 64 MiB large set).
FIT_POOL_BYTES = 64 * 2**20
FIT_BURST = 8  # back-to-back calls per timed run, as buckets or per-tensor calls follow each other
# This machine's timings drift by tens of % from one minute to the next (a shared host), so the
# fit and bench_allreduce's measurement alternate in one MPI job, round after round.
FIT_ROUNDS = 3
REGIMES = ("in cache", "from memory")
# bench_allreduce.py's options that decide what it measures, with its defaults
_BENCH_OPTIONS = {"--small": 200, "--small-min": 1, "--small-max": 16384, "--large": 4,
                  "--large-elements": 4 * 2**20, "--bucket-bytes": DEFAULT_BUCKET_BYTES, "--warmup": 3, "--repeat": 20}


def _bench_module() -> Any:
    spec = importlib.util.spec_from_file_location("bench_allreduce", os.path.join(HERE, "bench_allreduce.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bench_namespace(bench_args: Sequence[str]) -> argparse.Namespace:
    """bench_allreduce's settings for its command-line arguments (its defaults for the others)."""
    parser = argparse.ArgumentParser(add_help=False)
    for option, default in _BENCH_OPTIONS.items():
        parser.add_argument(option, type=int, default=default)
    args, _ = parser.parse_known_args(list(bench_args))
    return args


def _time_allreduce(comm: Any, nbytes: int, pool_bytes: int, warmup: int, repeat: int, burst: int) -> float:
    """Median seconds per ``comm.allreduce`` of ``nbytes`` (float32) over buffers cycled from a pool.

    Each run: a barrier, then ``burst`` calls, each on the next buffer of the pool (about
    ``pool_bytes`` of buffers, at most 1024; one buffer for ``pool_bytes`` <= ``nbytes``); its
    time / ``burst``, taken on the slowest rank.
    """
    count = max(1, min(1024, pool_bytes // nbytes))
    pool = [np.ones(nbytes // FLOAT32, np.float32) for _ in range(count)]
    times = np.zeros(repeat)
    k = 0
    for i in range(warmup + repeat):
        comm.barrier()
        t0 = time.perf_counter()
        for _ in range(burst):
            comm.allreduce([pool[k % count]])
            k += 1
        if i >= warmup:
            times[i - warmup] = (time.perf_counter() - t0) / burst
    comm.comm.Allreduce(comm._mpi.IN_PLACE, times, op=comm._mpi.MAX)  # a run lasts as long as its slowest rank
    return float(np.median(times))


def _measure_worker(out: str, sizes: Sequence[int], warmup: int, repeat: int, pool_bytes: int, burst: int,
                    rounds: int, bench_args: Sequence[str] | None) -> int:
    """Under MPI: ``rounds`` × (both fit regimes over ``sizes``, then bench_allreduce's CPU part unless None)."""
    import mxlite as mx  # noqa: PLC0415
    from mxlite.comm import MpiCommunicator  # noqa: PLC0415

    comm = MpiCommunicator([mx.cpu(0)])
    bench = _bench_module() if bench_args is not None else None
    results = []
    for _ in range(rounds):
        regimes = {regime: {"pool_bytes": pool,
                            "seconds": [_time_allreduce(comm, n, pool, warmup, repeat, burst) for n in sizes]}
                   for regime, pool in zip(REGIMES, (0, pool_bytes))}
        records = bench.bench_cpu_ranks(_bench_namespace(bench_args)) if bench is not None else []
        results.append({"regimes": regimes, "records": records})
    if comm.rank == 0:
        with open(out, "w") as f:
            json.dump({"ranks": comm.size, "bytes": list(sizes), "burst": burst, "bench_args": bench_args,
                       "rounds": results}, f)
    return 0


def measure(sizes: Sequence[int] = FIT_BYTES, bench_args: Sequence[str] | None = (), rounds: int = FIT_ROUNDS,
            warmup: int = 3, repeat: int = 20, pool_bytes: int = FIT_POOL_BYTES, burst: int = FIT_BURST,
            ranks: int = 2) -> dict[str, Any]:
    """Time ``MpiCommunicator.allreduce`` on ``mpiexec -n ranks``, alternating with bench_allreduce's CPU part.

    Each of ``rounds`` rounds times flat float32 buffers of ``sizes`` bytes in both regimes
    (:data:`REGIMES`: one buffer reused; buffers cycled from a ``pool_bytes`` pool), ``burst``
    calls per timed run, then runs ``bench_allreduce.bench_cpu_ranks`` with ``bench_args``
    (skipped for None). Returns ``{"ranks", "bytes", "burst", "bench_args", "rounds":
    [{"regimes": {regime: {"pool_bytes", "seconds"}}, "records": [...]}]}``.

    Raises:
        RuntimeError: the MPI run failed (its output is in the message).
    """
    from mxlite.cli.launch import find_mpiexec, mpi_flavour, root_options  # noqa: PLC0415

    mpiexec = find_mpiexec()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "measured.json")
        command = [mpiexec, *root_options(mpi_flavour(mpiexec)), "-n", str(ranks), sys.executable,
                   os.path.abspath(__file__), "--measure-worker", out,
                   "--fit-bytes", ",".join(map(str, sizes)), "--fit-rounds", str(rounds), "--fit-warmup", str(warmup),
                   "--fit-repeat", str(repeat), "--fit-pool-mib", str(pool_bytes / 2**20), "--fit-burst", str(burst)]
        if bench_args is not None:
            command += ["--bench-args", shlex.join(bench_args)]
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
        if result.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
        with open(out) as f:
            return json.load(f)


def fit_alpha_beta(sizes: Sequence[float], seconds: Sequence[float], p: int = 2) -> tuple[float, float]:
    """(α, β) of the ring formula fitted to all-reduce timings over ``p`` ranks, by relative least squares.

    Minimises Σ((2(p-1)α + 2(p-1)/p·n·β − t)/t)², so small and large messages weigh alike; a
    negative α (noise) is clipped to 0 and β refitted. γ is not separated: β absorbs it.

    Raises:
        ValueError: fewer than two sizes, or lengths differ.
    """
    n, t = np.asarray(sizes, float), np.asarray(seconds, float)
    if n.size < 2 or n.shape != t.shape:
        raise ValueError(f"fit needs at least two (size, time) pairs of equal length, got {n.size} and {t.size}")
    a, b = 2 * (p - 1) / t, 2 * (p - 1) / p * n / t
    (alpha, beta), *_ = np.linalg.lstsq(np.stack([a, b], axis=1), np.ones_like(t), rcond=None)
    if alpha < 0:
        alpha, beta = 0.0, float(b @ np.ones_like(t) / (b @ b))
    return float(alpha), float(beta)


def _messages(record: dict[str, Any], sets: dict[str, list[int]], bucket_bytes: int, bench_args: Sequence[str]
              ) -> list[int]:
    """Bytes of each collective of a bench_allreduce CPU record (per tensor, or per bucket: padded arena slices)."""
    sizes = sets.get(record["set"])
    if sizes is None or len(sizes) != record["tensors"] or FLOAT32 * sum(sizes) != record["bytes"]:
        raise ValueError(f"bench_allreduce record {record['set']!r} ({record['tensors']} tensors, {record['bytes']} "
                         f"bytes) does not match the sets of --bench-args {shlex.join(bench_args)!r}; pass the "
                         "arguments the benchmark ran with")
    if record["path"] == "per-tensor":
        return [FLOAT32 * n for n in sizes]
    spans = [FLOAT32 * (-(-n // ALIGN) * ALIGN) for n in sizes]
    return [sum(spans[i] for i in b) for b in plan_bucket_indices(spans, bucket_bytes)]


def validate(measured: dict[str, Any], bench_args: Sequence[str] = (), bench: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    """Per round of ``measured`` (:func:`measure`): fit α, β per regime; predict bench_allreduce's CPU records.

    The records compared are the round's own, or ``bench``'s (a bench_allreduce JSON report)
    when given. A record's predicted time is Σ over its collectives of the ring cost of the bytes
    each moves. Returns ``{"ranks", "rounds": [{"fits", "comparisons"}], "summary"}``; the summary
    gives per (set, path) the median measured time and, per regime, the median, lowest and
    highest relative error over the rounds.

    Raises:
        ValueError: records whose sets differ from those ``bench_args`` give (pass the same arguments).
    """
    p = int(measured["ranks"])
    settings = _bench_namespace(bench_args)
    sets = _bench_module().gradient_sets(settings)
    rounds = []
    for measured_round in measured["rounds"]:
        fits, links = {}, {}
        for regime, timing in measured_round["regimes"].items():
            alpha, beta = fit_alpha_beta(measured["bytes"], timing["seconds"], p)
            links[regime] = Link(f"fitted {regime}", alpha, 1 / beta)
            fits[regime] = timing | {
                "alpha_s": alpha, "beta_s_per_byte": beta, "bandwidth_gb_per_s": 1e-9 / beta,
                "relative_residuals": [(ring_allreduce_time(n, p, links[regime]) - t) / t
                                       for n, t in zip(measured["bytes"], timing["seconds"])]}
        comparisons = []
        for record in (bench["records"] if bench is not None else measured_round["records"]):
            if record.get("part") != "cpu":
                continue
            messages = _messages(record, sets, settings.bucket_bytes, bench_args)
            seconds = record["ms"] / 1e3
            predicted = {r: sum(ring_allreduce_time(m, p, link) for m in messages) for r, link in links.items()}
            comparisons.append({"set": record["set"], "path": record["path"], "collectives": len(messages),
                                "measured_collectives": record["collectives"], "bytes": record["bytes"],
                                "measured_ms": 1e3 * seconds,
                                "predicted_ms": {r: 1e3 * t for r, t in predicted.items()},
                                "relative_error": {r: (t - seconds) / seconds for r, t in predicted.items()}})
        rounds.append({"fits": fits, "comparisons": comparisons})
    summary = []
    for first in rounds[0]["comparisons"] if rounds else []:
        same = [c for r in rounds for c in r["comparisons"] if (c["set"], c["path"]) == (first["set"], first["path"])]
        row = {k: first[k] for k in ("set", "path", "collectives", "bytes")}
        row["measured_ms"] = statistics.median(c["measured_ms"] for c in same)
        for regime in first["predicted_ms"]:
            errors = [c["relative_error"][regime] for c in same]
            row[regime] = {"predicted_ms": statistics.median(c["predicted_ms"][regime] for c in same),
                           "error_median": statistics.median(errors), "error_min": min(errors),
                           "error_max": max(errors)}
        summary.append(row)
    return {"ranks": p, "rounds": rounds, "summary": summary}


def print_validation(report: dict[str, Any]) -> None:
    """Per round the fitted α, β per regime; then predicted vs measured all-reduce times over the rounds."""
    print(f"\nvalidation on {report['ranks']} MPI ranks (CPU), {len(report['rounds'])} rounds")
    for i, r in enumerate(report["rounds"]):
        print(f"  round {i}: " + "; ".join(f"{regime}: α = {1e6 * f['alpha_s']:.2f} µs, β = 1/"
                                          f"({f['bandwidth_gb_per_s']:.2f} GB/s), fit residuals <= "
                                          f"{100 * max(abs(x) for x in f['relative_residuals']):.0f}%"
                                          for regime, f in r["fits"].items()))
    regimes = [k for k in (report["summary"][0] if report["summary"] else {}) if k in REGIMES]
    print(f"{'set':<6} {'path':<11} {'colls':>5} {'MiB':>7} {'measured ms':>12}"
          + "".join(f" {r + ' pred. ms':>20} {'error [min, max]':>22}" for r in regimes))
    for row in report["summary"]:
        cells = "".join(f" {row[r]['predicted_ms']:>20.3f} "
                        + f"{100 * row[r]['error_median']:+.1f}% [{100 * row[r]['error_min']:+.0f}, "
                          f"{100 * row[r]['error_max']:+.0f}]".rjust(22) for r in regimes)
        print(f"{row['set']:<6} {row['path']:<11} {row['collectives']:>5} {row['bytes'] / 2**20:>7.2f} "
              f"{row['measured_ms']:>12.3f}{cells}")


# -- command line ------------------------------------------------------------------------------------
def _links(args: argparse.Namespace) -> tuple[Link, Link]:
    return (Link(NVLINK.name, args.nvlink_alpha_us * 1e-6, args.nvlink_gb_per_s * 1e9),
            Link(NETWORK_100G.name, args.net_alpha_us * 1e-6, args.net_gb_per_s * 1e9))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile-json", action="append", default=[], metavar="PATH",
                        help="a measured profile {name, layers: [{name, bytes, backward_s}] in backward order, "
                             "forward_s, optimizer_s}; repeatable; replaces the built-in profiles")
    parser.add_argument("--counts", metavar="PATH",
                        help="a bench_gpu_model.py --json file: launches and optimizer bytes counted on emulated GPUs "
                             "set the built-in profiles' roofline times, and its 1-GPU records become profiles too")
    parser.add_argument("--dump-profiles", metavar="DIR", help="write the built-in profiles as JSON templates there")
    parser.add_argument("--ranks", default=",".join(map(str, RANKS)), help="P values (default 2,4,...,512)")
    parser.add_argument("--bucket-mib", type=float, default=DEFAULT_BUCKET_BYTES / 2**20,
                        help="bucket bound in MiB (default mxlite's 25)")
    parser.add_argument("--gpus-per-node", type=int, default=GPUS_PER_NODE)
    parser.add_argument("--nics-per-node", type=int, default=1, help="100 Gb/s NICs per node (default 1)")
    parser.add_argument("--nvlink-alpha-us", type=float, default=NVLINK.alpha_s * 1e6)
    parser.add_argument("--nvlink-gb-per-s", type=float, default=NVLINK.bytes_per_s / 1e9)
    parser.add_argument("--net-alpha-us", type=float, default=NETWORK_100G.alpha_s * 1e6)
    parser.add_argument("--net-gb-per-s", type=float, default=NETWORK_100G.bytes_per_s / 1e9)
    parser.add_argument("--gpu-gb", type=float, default=GPU_MEMORY_BYTES / 1e9, help="memory per GPU (default 80)")
    parser.add_argument("--activation-gb", type=float, default=ACTIVATION_BYTES / 1e9,
                        help="memory per GPU kept for activations, workspaces and the rest (default 16)")
    parser.add_argument("--memory-gpus", default=",".join(map(str, MEMORY_GPUS)),
                        help="GPU counts of the largest-model table (default 8,64)")
    parser.add_argument("--json", metavar="PATH", help="write the tables, assumptions and validation here")
    parser.add_argument("--out", default=HERE, metavar="DIR", help="folder of scaling_model.png (default benchmarks/)")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--validate", action="store_true",
                        help="fit α, β on 2 MPI ranks here and predict bench_allreduce.py's CPU figures, measured in "
                             "the same MPI job")
    parser.add_argument("--fit-json", metavar="PATH",
                        help="--validate: reuse the measurements of a JSON written by --json --validate (no MPI run)")
    parser.add_argument("--bench-json", metavar="PATH",
                        help="--validate: compare with this bench_allreduce.py --json report instead (run apart)")
    parser.add_argument("--bench-args", help="--validate: bench_allreduce.py's arguments, one string (default: none)")
    parser.add_argument("--fit-bytes", default=",".join(map(str, FIT_BYTES)), help="--validate: message sizes")
    parser.add_argument("--fit-rounds", type=int, default=FIT_ROUNDS,
                        help="--validate: rounds of (fit timings, bench_allreduce's CPU part) in one MPI job (3)")
    parser.add_argument("--fit-warmup", type=int, default=3)
    parser.add_argument("--fit-repeat", type=int, default=20)
    parser.add_argument("--fit-pool-mib", type=float, default=FIT_POOL_BYTES / 2**20,
                        help="--validate: the 'from memory' fit cycles through this many MiB of buffers (default 64)")
    parser.add_argument("--fit-burst", type=int, default=FIT_BURST,
                        help="--validate: back-to-back calls per timed run (default 8; 1: one call after a barrier)")
    parser.add_argument("--measure-worker", help=argparse.SUPPRESS)  # set by measure() under mpiexec
    return parser


def main(argv: list[str] | None = None) -> int:
    """Print the efficiency tables (and ``--validate``'s check), write ``--json`` and the plot; 0 on success."""
    args = _parser().parse_args(argv)
    fit_sizes = [int(s) for s in args.fit_bytes.split(",")]
    if args.measure_worker:
        return _measure_worker(args.measure_worker, fit_sizes, args.fit_warmup, args.fit_repeat,
                               int(args.fit_pool_mib * 2**20), args.fit_burst, args.fit_rounds,
                               shlex.split(args.bench_args) if args.bench_args is not None else None)
    ranks = [int(p) for p in args.ranks.split(",")]
    bucket_bytes = int(args.bucket_mib * 2**20)
    intra, inter = _links(args)
    counted: dict[str, Counted] = {}
    counted_profiles: list[Profile] = []
    if args.counts:
        counted, counted_profiles = load_counts(args.counts)
    profiles = [load_profile(path) for path in args.profile_json] or [
        mlp_profile(counted=counted.get("mlp")), resnet50_profile(counted=counted.get("cnn")), *counted_profiles]
    if args.dump_profiles:
        os.makedirs(args.dump_profiles, exist_ok=True)
        for profile in profiles:
            with open(os.path.join(args.dump_profiles, f"{profile.name}.json"), "w") as f:
                json.dump(profile.to_json(), f, indent=1)

    tables = {}
    for profile in profiles:
        tables[profile.name] = scaling_table(profile, ranks, bucket_bytes, intra, inter, args.gpus_per_node,
                                             args.nics_per_node)
        print_table(profile, tables[profile.name], bucket_bytes)

    gpu_bytes, activation_bytes = args.gpu_gb * 1e9, args.activation_gb * 1e9
    memory = memory_table([int(p) for p in args.memory_gpus.split(",")], gpu_bytes, activation_bytes, intra, inter,
                          args.gpus_per_node, args.nics_per_node)
    print_memory_table(memory, gpu_bytes, activation_bytes)

    report: dict[str, Any] = {
        "meta": {"python": platform.python_version(), "numpy": np.__version__, "date": time.strftime("%Y-%m-%d"),
                 "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
                 "argv": sys.argv if argv is None else ["benchmarks/scaling_model.py", *argv]},
        "assumptions": {"nvlink": vars(intra) | {"beta_s_per_byte": intra.beta_s_per_byte},
                        "network": vars(inter) | {"beta_s_per_byte": inter.beta_s_per_byte},
                        "gpus_per_node": args.gpus_per_node, "nics_per_node": args.nics_per_node,
                        "bucket_bytes": bucket_bytes},
        "profiles": {p.name: {"notes": p.notes, "tensors": len(p.layers), "bytes": p.nbytes,
                              "forward_s": p.forward_s, "backward_s": p.backward_s, "optimizer_s": p.optimizer_s,
                              "buckets": len(plan_bucket_indices([x.nbytes for x in p.layers], bucket_bytes))}
                     for p in profiles},
        "tables": tables,
        "memory": {"gpu_bytes": gpu_bytes, "activation_bytes": activation_bytes,
                   "precisions": [vars(p) for p in PRECISIONS], "rows": memory}}

    if args.validate:
        bench_args = shlex.split(args.bench_args or "")
        bench = None
        if args.bench_json:
            with open(args.bench_json) as f:
                bench = json.load(f)
        if args.fit_json:
            with open(args.fit_json) as f:
                measured = json.load(f)["validation"]["measured"]
        else:
            measured = measure(fit_sizes, None if bench is not None else bench_args, args.fit_rounds, args.fit_warmup,
                               args.fit_repeat, int(args.fit_pool_mib * 2**20), args.fit_burst)
        report["validation"] = validate(measured, bench_args, bench) | {"measured": measured}
        print_validation(report["validation"])

    if not args.no_plot:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "scaling_model.png")
        plot(tables, path, f"α-β model, ring all-reduce, {bucket_bytes / 2**20:g} MiB buckets overlapped with "
                           f"backward\nNVLink {intra.bytes_per_s / 1e9:g} GB/s α {intra.alpha_s * 1e6:g} µs, network "
                           f"{inter.bytes_per_s / 1e9:g} GB/s α {inter.alpha_s * 1e6:g} µs")
        report["plot"] = path
        print(f"\nplot: {path}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
