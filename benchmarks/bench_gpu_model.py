"""Counted costs of a training step on emulated GPUs, turned into H100 or H200 time by a stated model.

Usage::

    PYTHONPATH=. python3 benchmarks/bench_gpu_model.py --json gpu_model.json
    PYTHONPATH=. python3 benchmarks/bench_gpu_model.py --measured --only-measured --gpus 1 --warmup 1 --steps 1
    PYTHONPATH=. python3 benchmarks/bench_gpu_model.py --models cnn,cnn_bn --gpus 1 --kvstores none --codecs none \
        --image 32 --cnn-batches 16,256 --optimizer sgd --gpu h200 --no-rules --json cnn_batches.json

For the benchmark MLP and CNN (the models of ``benchmarks/bench_train.py``, built by it; ``cnn_bn``
on request) on 1, 2 and 4 emulated GPUs (``MXLITE_EMULATE_GPUS``, set to the largest count asked
for unless already set), with no store, kvstore 'device' and 'nccl', and every codec (none, fp16,
bf16, 2bit, topk, threshold), it trains ``--warmup`` steps, then counts ``--steps`` steady-state
steps per emulated GPU and reports per step (the largest value over the GPUs):

* ``cupy_calls``: CuPy array-API calls (views included), what the host spends most of a small step on;
* ``mxlite_ops``: mxlite ops dispatched (tensors made by ops, counted at mxlite's Tensor constructor);
* ``launches``: kernels launched (array operations that touched data, and RawKernel launches:
  ``raw_launches``); ``gemm_calls`` and ``gemm_flops``: the GEMMs, each with its FLOPs from its operands;
* ``host_syncs``, ``h2d_copies``/``h2d_bytes``, ``d2h_copies``/``d2h_bytes``: host synchronisations
  (blocking reads included) and host<->device copies;
* ``nccl_calls``, ``nccl_bytes``: NCCL collectives and the bytes each GPU sent;
* ``kernel_bytes``: what the fused optimizer kernels must move, from their arguments and each
  kernel's per-element traffic (``roofline.KERNEL_TRAFFIC``), counted at every launch; other
  RawKernel launches (im2col, col2im, pooling, compression) count the bytes of their arrays;
* ``peak_bytes``: peak device memory during the step;
* ``host_ms``, ``gpu_ms``, ``modelled_ms`` (and ``roofline_ms``, the GPU's own work): the estimate of
  ``benchmarks/roofline.py`` for ``--gpu h100|h200`` (every constant names its source): the host and
  GPU sides, overlapped, with the serialisation points; ``dominant``: what the model says bounds it.

Counts are split by phase (forward, backward, optimizer step) in the JSON (``counts``), and the
optimizer-step counts alone are reported as ``step_*`` (what ``Trainer.step`` costs). Each
configuration the Trainer rejects (compression with kvstore 'nccl' or without a store, as in MXNet)
gets a record with ``skipped`` saying why. A second table gives, for every fused rule, the bytes
per element its kernels move and the ratio to the least its update must move (``--rules``).

``--measured [FILE]`` (default ``benchmarks/measured_h200.json``: steps measured by bench_train.py
on an H200, with the device and library versions) counts each measured step at its own sizes on
one emulated GPU and prints measured against modelled, with what dominates; ``--counts-out``
writes those counts (``benchmarks/measured_h200_counts.json``, which tests/test_roofline.py
checks the model against). The measured sizes are emulated as they are, the 67 M-parameter MLP
at batch 1024 included (about a minute on two cores): counts need no scaling. NumPy has no float16
BLAS, so float16 GEMMs are computed in float32 and rounded (as cuBLAS accumulates them); what is
counted does not change. ``--dtype float16`` counts float16 weights (float32 master weights in the
optimizer); ``--dtype bfloat16`` only reports that mxlite has no bfloat16 weights (bf16 is a gradient
wire format) and counts nothing.

``--graphs`` adds, for each model on one GPU without a store, the step eagerly and with the network
hybridized as CUDA graphs (``hybridize(static_alloc=True, static_shape=True)``, docs/graphs.md), side by
side: CuPy calls and launches per phase, graph launches and the nodes they replay, host syncs, and the
modelled host time (a graph launch counts as one launch from the host). The GEMMs are cuBLAS calls through
nvmath (``mxlite.device.blas``), counted with the CuPy calls as the host's calls into CUDA libraries.

``--cnn-batches 16,256`` counts the CNN models at each of these per-GPU batches (instead of
``--cnn-batch``) and prints, per configuration, the per-step counts side by side with whether they
depend on the batch (``batch_invariance`` in the JSON): on GPUs a convolution, pooling or batch-norm
layer makes the same CuPy calls and launches at any batch (tests/test_gpu_conv_counts.py).

``--shard`` also counts every configuration with a store over several GPUs with sharded optimizer
states (``Trainer(shard_optimizer_states=True)``, ZeRO-1; ``shard`` in each record) and prints them
side by side with the unsharded ones: ``state_bytes``, the optimizer-state bytes per GPU (the
fused updaters' state and master-weight buffers, largest GPU: 1/N of the unsharded, within
alignment padding), ``peak_bytes``, ``nccl_ring_bytes`` (what NCCL's ring algorithms send per step
and GPU: the same, the all-gather's padding to N equal chunks aside) and the host synchronisations
per step (still 0).

These are counts on emulated GPUs turned into time by a model, not GPU timings. The per-GPU batch
is the same whatever the number of GPUs (weak scaling, as in ``scaling_model.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import platform
import shlex
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import roofline  # noqa: E402 - benchmarks/ is not a package

MODELS = ("mlp", "cnn")  # the sweep's default
MODELS_ALL = ("mlp", "cnn", "cnn_bn", "lstm_lm", "gru_lm")  # bench_train.py's models
KVSTORES = ("none", "device", "nccl")
CODECS: dict[str, dict[str, Any] | None] = {
    "none": None, "fp16": {"type": "fp16"}, "bf16": {"type": "bf16"}, "2bit": {"type": "2bit", "threshold": 0.5},
    "topk": {"type": "topk", "ratio": 0.01}, "threshold": {"type": "threshold", "threshold": 0.01}}
CLASSES = 10
RULES = ("sgd", "nag", "adam", "adamw", "rmsprop", "adagrad", "adadelta", "signum", "ftrl", "lamb", "lars", "nadam",
         "adabelief")
# Optimizer states each rule keeps per element (float32), for the minimum traffic; SGD, NAG,
# Signum and LARS keep a momentum (with momentum > 0, as run here), RMSProp 'centered' keeps three.
RULE_STATES = {"sgd": 1, "nag": 1, "adam": 2, "adamw": 2, "rmsprop": 1, "adagrad": 1, "adadelta": 2, "signum": 1,
               "ftrl": 2, "lamb": 2, "lars": 1, "nadam": 2, "adabelief": 2}
RULE_PARAMS: dict[str, dict[str, Any]] = {"sgd": {"momentum": 0.9}, "nag": {"momentum": 0.9},
                                          "signum": {"momentum": 0.9}, "lars": {"momentum": 0.9}}


# -- counting ------------------------------------------------------------------------------------------
class BenchCounts:
    """Per emulated GPU, what the emulation's own counters do not hold, counted by hooks while inside
    :func:`counting`: the fused optimizer kernels' bytes (element traffic and tables, and by kernel),
    the GEMMs with their FLOPs, the bytes of the other RawKernel launches, and the mxlite ops."""

    def __init__(self) -> None:
        self.element: Counter[int] = Counter()
        self.table: Counter[int] = Counter()
        self.elements: Counter[int] = Counter()
        self.by_kernel: dict[int, Counter[str]] = {}
        self.gemms: dict[int, Counter[tuple[str, float]]] = {}
        self.raw_bytes: Counter[int] = Counter()
        self.mxlite_ops: Counter[int] = Counter()

    def reset(self) -> None:
        """Forget every count."""
        self.__init__()


COUNTS = BenchCounts()


def gemm_call_flops(name: str, a_shape: Sequence[int], b_shape: Sequence[int], out_size: int) -> float:
    """FLOPs of one GEMM call ``name(a, b)`` giving ``out_size`` elements: ``2 · out_size · K``.

    K is ``a``'s last axis for matmul/dot/inner (batched matmuls included); for tensordot, einsum
    and vdot, a single contraction is assumed: ``K = sqrt(|a|·|b| / out_size)``.
    """
    a_size, b_size = math.prod(a_shape), math.prod(b_shape)
    if name in ("tensordot", "einsum", "vdot") or not a_shape:
        k = math.sqrt(a_size * b_size / max(1, out_size))
    else:
        k = a_shape[-1]
    return 2.0 * max(1, out_size) * k


def _half_gemm_in_float32(func: Any) -> Any:
    """``func`` (a NumPy GEMM) computing float16 operands in float32 and rounding the result to float16.

    NumPy has no float16 BLAS: a 1024x4096x4096 float16 matmul would take minutes. cuBLAS also
    accumulates float16 GEMMs in float32; the counts (calls, bytes, FLOPs) do not change.
    """
    def gemm(*args: Any, **kwargs: Any) -> Any:
        if not any(isinstance(a, np.ndarray) and a.dtype == np.float16 for a in args):
            return func(*args, **kwargs)
        out = kwargs.pop("out", None)
        wide = [a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == np.float16 else a for a in args]
        result = np.asarray(func(*wide, **kwargs)).astype(np.float16)
        if out is None:
            return result
        out[...] = result
        return out

    return gemm


@contextlib.contextmanager
def counting() -> Iterator[BenchCounts]:
    """Count :data:`COUNTS` while inside, through hooks on mxlite's fused-optimizer Launcher, the
    emulation's array-operation dispatcher and RawKernel launch, and mxlite's Tensor constructor."""
    from mxlite._emulation.fakecupy import _core, _rawmodule, _state  # noqa: PLC0415
    from mxlite._emulation.fakenvmath.bindings import cublas as _cublas  # noqa: PLC0415
    from mxlite.autograd import tensor as _tensor  # noqa: PLC0415
    from mxlite.optimizer import _fused  # noqa: PLC0415

    originals = (_fused.Launcher.__call__, _core.apply, _rawmodule._Function.__call__, _tensor.Tensor.__init__,
                 _cublas._gemm)
    launcher, apply, launch, tensor_init, cublas_gemm = originals

    def counted_launcher(self: Any, kernel: str, buffers: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        plan = self.plan
        elements = int(np.sum(plan.chunk_end - plan.chunk_start))
        element, table = roofline.kernel_traffic(kernel, buffers, elements, len(plan.chunk_seg), len(plan.segments))
        gpu = self.device.device_id
        COUNTS.element[gpu] += element
        COUNTS.table[gpu] += table
        COUNTS.elements[gpu] += elements
        COUNTS.by_kernel.setdefault(gpu, Counter())[kernel] += element + table
        return launcher(self, kernel, buffers, *args, **kwargs)

    def counted_apply(name: str, func: Any, args: tuple, kwargs: dict[str, Any], **options: Any) -> Any:
        if name in roofline.GEMM_OPS:
            func = _half_gemm_in_float32(func)
        result = apply(name, func, args, kwargs, **options)
        if name in roofline.GEMM_OPS and len(args) >= 2 and hasattr(result, "dtype"):
            # .shape, not np.shape(): that would dispatch to the emulated cupy.shape and count as a CuPy call
            flops = gemm_call_flops(name, getattr(args[0], "shape", ()), getattr(args[1], "shape", ()),
                                    int(result.size))
            COUNTS.gemms.setdefault(_state.current_device_id(), Counter())[(result.dtype.name, flops)] += 1
        return result

    def counted_cublas(name: str, handle: Any, transa: Any, transb: Any, m: int, n: int, k: int, *args: Any) -> Any:
        # mxlite's GEMMs (mxlite.device.blas): cuBLAS through nvmath; args[-3] is the batch count, args[11] C's type
        result = cublas_gemm(name, handle, transa, transb, m, n, k, *args)
        if not _state_capturing():
            dtype = {0: "float32", 1: "float64", 2: "float16", 14: "bfloat16"}.get(int(args[11]), "float32")
            flops = 2.0 * m * n * k * int(args[-3])  # a batched call counts once, as a batched matmul did
            COUNTS.gemms.setdefault(_state.current_device_id(), Counter())[(dtype, flops)] += 1
        return result

    def counted_launch(self: Any, grid: Any, block: Any, args: Any, *rest: Any, **kwargs: Any) -> Any:
        if self.name.split("<", 1)[0] not in roofline.KERNEL_TRAFFIC:  # the fused kernels count above
            COUNTS.raw_bytes[_state.current_device_id()] += sum(
                int(a.nbytes) for a in (args if isinstance(args, tuple) else ()) if hasattr(a, "data"))
        return launch(self, grid, block, args, *rest, **kwargs)

    def counted_init(self: Any, data: Any, device: Any = None) -> None:
        tensor_init(self, data, device)
        if self._device.is_gpu:
            COUNTS.mxlite_ops[self._device.device_id] += 1

    _fused.Launcher.__call__ = counted_launcher
    _core.apply = counted_apply
    _rawmodule._Function.__call__ = counted_launch
    _tensor.Tensor.__init__ = counted_init
    _cublas._gemm = counted_cublas
    try:
        yield COUNTS
    finally:
        (_fused.Launcher.__call__, _core.apply, _rawmodule._Function.__call__, _tensor.Tensor.__init__,
         _cublas._gemm) = originals


def _state_capturing() -> bool:
    """Whether an emulated stream is capturing (captured GEMMs count when a graph launch replays them)."""
    from mxlite._emulation.fakecupy import _streams  # noqa: PLC0415

    return bool(_streams.active_captures)


def _emulation() -> Any:
    from mxlite._emulation import install  # noqa: PLC0415

    if install.emulated_gpu_count() == 0:
        raise RuntimeError("bench_gpu_model counts costs on emulated GPUs: set MXLITE_EMULATE_GPUS (it is set "
                           "for you unless a value, such as 0, is given)")
    return install


def _zero_phase() -> dict[str, Any]:
    return {"launches": 0, "kernel_launches": Counter(), "op_bytes": 0, "gemm_op_bytes": 0, "host_syncs": 0,
            "h2d_copies": 0, "h2d_bytes": 0, "d2h_copies": 0, "d2h_bytes": 0, "p2p_bytes": 0, "nccl_calls": Counter(),
            "nccl_call_bytes": Counter(), "nccl_bytes": Counter(), "nccl_ring_bytes": 0.0, "kernel_bytes": 0,
            "kernel_elements": 0,
            "peak_bytes": 0, "cupy_calls": 0, "mxlite_ops": 0, "raw_launches": 0, "raw_bytes": 0,
            "gemms": Counter(), "graph_launches": 0, "graph_nodes": 0}


def _add_counts(total: dict[int, dict[str, Any]], gpus: int) -> None:
    """Add the emulation's counters (and :data:`COUNTS`) of GPUs 0..gpus-1 into ``total``, then reset them."""
    install = _emulation()
    snap = install.counters()
    for g in range(gpus):
        c, t = snap[g], total.setdefault(g, _zero_phase())
        op_launches = c.get("op_launches", {})
        t["launches"] += sum(op_launches.values()) + sum(c["kernel_launches"].values())
        # cuBLAS calls through nvmath (mxlite.device.blas) are GEMMs issued by a Python call into a CUDA library,
        # as cupy.matmul was: counted with the CuPy calls, not as RawKernel launches
        cublas = sum(n for k, n in c["kernel_launches"].items() if k.startswith("cublas."))
        t["raw_launches"] += sum(c["kernel_launches"].values()) - cublas
        t["cupy_calls"] += sum(c["ops"].values()) + cublas
        # A CUDA graph launch (hybridize(static_alloc=True, static_shape=True)) is one call from the host, as a
        # RawKernel launch is; the work it replays is not in the per-operation counters.
        t["launches"] += c["graph_launches"]
        t["raw_launches"] += c["graph_launches"]
        t["graph_launches"] += c["graph_launches"]
        t["graph_nodes"] += c["graph_nodes"]
        t["kernel_launches"].update(c["kernel_launches"])
        op_bytes = c.get("op_bytes", {})
        t["gemm_op_bytes"] += sum(v for k, v in op_bytes.items() if k in roofline.GEMM_OPS)
        t["op_bytes"] += sum(v for k, v in op_bytes.items() if k not in roofline.GEMM_OPS)
        for key in ("host_syncs", "h2d_copies", "h2d_bytes", "d2h_copies", "d2h_bytes", "p2p_bytes"):
            t[key] += c[key]
        t["nccl_calls"].update(c["nccl_calls"])
        t["nccl_bytes"].update(c["nccl_bytes"])
        t["nccl_call_bytes"].update(c.get("nccl_call_bytes", {}))
        t["nccl_ring_bytes"] += sum(c.get("nccl_ring_bytes", {}).values())
        t["kernel_bytes"] += COUNTS.element[g] + COUNTS.table[g]
        t["kernel_elements"] += COUNTS.elements[g]
        t["raw_bytes"] += COUNTS.raw_bytes[g]
        t["mxlite_ops"] += COUNTS.mxlite_ops[g]
        t["gemms"].update(COUNTS.gemms.get(g, {}))
        t["peak_bytes"] = max(t["peak_bytes"], c["peak_bytes"])
    install.reset_counters()
    COUNTS.reset()


# -- the models ----------------------------------------------------------------------------------------
def _bench_train() -> ModuleType:
    """``benchmarks/bench_train.py`` (its models and batches), loaded on first use: it imports mxlite,
    which must see MXLITE_EMULATE_GPUS first."""
    import bench_train  # noqa: PLC0415 - benchmarks/ is on sys.path

    return bench_train


def gemm_flops(net: Any, x: Any) -> tuple[float, float, list[tuple[str, int, float]]]:
    """(forward, backward) GEMM FLOPs of ``net`` (a Sequential) on input ``x``, from its layer shapes, and
    the gradient tensors in forward order as (name, elements, backward FLOPs up to and including them).

    Dense and Conv2D layers count (:func:`roofline.dense_flops`, :func:`roofline.conv_flops`); the
    first layer computes no input gradient.
    """
    forward = backward = 0.0
    tensors: list[tuple[str, int, float]] = []
    first = True
    for layer in net:
        y = layer(x)
        params = [p for p in layer.collect_params().values() if p.grad_req != "null"]
        weight = next((p for p in params if len(p.shape) >= 2), None)
        f = b = 0.0
        if weight is not None and len(weight.shape) == 4:
            f, b = roofline.conv_flops(x.shape[0], weight.shape[1], weight.shape[0], weight.shape[2:], y.shape[2:],
                                       input_grad=not first)
        elif weight is not None:
            f, b = roofline.dense_flops(x.shape[0], weight.shape[1], weight.shape[0], input_grad=not first)
        forward, backward = forward + f, backward + b
        for p in params:  # bias first in backward order: weight carries the layer's GEMMs
            tensors.append((p.name, int(np.prod(p.shape)), b if p is weight else 0.0))
        first = first and not params
        x = y
    return forward, backward, tensors


# -- one configuration ---------------------------------------------------------------------------------
def phase_counts(phase: dict[str, Any], steps: int) -> roofline.PhaseCounts:
    """One GPU's counts of one phase over ``steps`` steps (a :func:`_add_counts` total), per step."""
    return roofline.PhaseCounts(
        gemm_flops=sum(f * n for (_, f), n in phase["gemms"].items()) / steps,
        gemms={k: n / steps for k, n in phase["gemms"].items()},
        launches=phase["launches"] / steps, memory_bytes=(phase["op_bytes"] + phase["raw_bytes"]) / steps,
        fused_bytes=phase["kernel_bytes"] / steps, host_syncs=phase["host_syncs"] / steps,
        h2d_bytes=phase["h2d_bytes"] / steps, d2h_bytes=phase["d2h_bytes"] / steps,
        h2d_copies=phase["h2d_copies"] / steps, d2h_copies=phase["d2h_copies"] / steps,
        p2p_bytes=phase["p2p_bytes"] / steps, cupy_calls=phase["cupy_calls"] / steps,
        mxlite_ops=phase["mxlite_ops"] / steps, raw_launches=phase["raw_launches"] / steps,
        nccl_calls={k: v / steps for k, v in phase["nccl_calls"].items()},
        nccl_call_bytes={k: v / steps for k, v in phase["nccl_call_bytes"].items()})


def run_config(model: str, gpus: int, kvstore: str, codec: str, args: argparse.Namespace,
               shard: bool = False, hybridize: bool = False) -> dict[str, Any]:
    """Train ``--warmup`` steps, then count ``--steps`` steps of one configuration; one JSON record.

    ``shard``: with sharded optimizer states (``shard_optimizer_states=True``).
    ``hybridize``: the network runs as CUDA graphs (``hybridize(static_alloc=True, static_shape=True)``); at
    least two warm-up steps then run (the first eagerly, the second captures).
    """
    import mxlite as mx  # noqa: PLC0415

    install = _emulation()
    bt = _bench_train()
    gc.collect()  # the previous configuration's arrays leave the emulated GPUs
    # What earlier configurations still hold (communicators, cached tables) is not this one's: peak_bytes
    # counts from the bytes in use before this configuration builds anything.
    baseline = {g: c["bytes_in_use"] for g, c in install.counters().items()}
    devices = [mx.gpu(i) for i in range(gpus)]
    record: dict[str, Any] = {"model": model, "gpus": gpus, "kvstore": kvstore, "codec": codec,
                              "optimizer": args.optimizer, "dtype": args.dtype, "gpu": args.gpu, "shard": shard,
                              "mode": "captured" if hybridize else "eager"}
    if shard and (kvstore == "none" or gpus == 1):
        record["skipped"] = "sharded states need a store summing over several GPUs"
        return record
    if kvstore == "none" and codec != "none":
        record["skipped"] = "no store: the Trainer compresses nothing (compression belongs to a store)"
        return record
    mx.random.seed(0)
    net = bt.mxlite_model(model, args)
    if args.dtype != "float32":
        net.cast(args.dtype)
    net.initialize(mx.init.Xavier(), device=devices)
    if hybridize:
        net.hybridize(static_alloc=True, static_shape=True)
    x, y = bt.make_batch(model, args)
    xs = [mx.array(x, device=d) for d in devices]
    ys = [mx.array(y, device=d) for d in devices]
    opt_params = {"learning_rate": bt.LEARNING_RATES.get(args.optimizer, 1e-3), **RULE_PARAMS.get(args.optimizer, {})}
    if args.dtype == "float16":
        opt_params["multi_precision"] = True  # float32 master weights: 12 bytes of Adam state per parameter
    try:
        trainer = mx.Trainer(net.collect_params(), args.optimizer, opt_params,
                             kvstore=None if kvstore == "none" else kvstore, compression_params=CODECS[codec],
                             shard_optimizer_states=shard)
    except ValueError as exc:
        record["skipped"] = str(exc)
        return record
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    per_gpu_batch = x.shape[0]

    def forward() -> list[Any]:
        with mx.autograd.record():
            return [loss_fn(net(a), b) for a, b in zip(xs, ys)]

    for _ in range(max(args.warmup, 2) if hybridize else args.warmup):
        losses = forward()
        mx.autograd.backward(losses)
        trainer.step(per_gpu_batch * gpus)
    if codec != "none" and trainer._codec is None:
        record["codec_used"] = False  # the Trainer built no compressing sync (no store, or one GPU)
    with devices[0]:
        flops_fwd, flops_bwd, tensors = gemm_flops(net, xs[0])
    install.reset_counters()
    COUNTS.reset()
    phases: dict[str, dict[int, dict[str, Any]]] = {"forward": {}, "backward": {}, "step": {}}
    for _ in range(args.steps):
        losses = forward()
        _add_counts(phases["forward"], gpus)
        mx.autograd.backward(losses)
        _add_counts(phases["backward"], gpus)
        trainer.step(per_gpu_batch * gpus)
        _add_counts(phases["step"], gpus)
    steps = args.steps
    spec = roofline.GPUS[args.gpu]
    # Per GPU and per step; the largest GPU figure is what paces a synchronous step.
    per_gpu = []
    for g in range(gpus):
        counts = {name: phase_counts(phase[g], steps) for name, phase in phases.items()}
        per_gpu.append((counts, roofline.step_seconds(counts, gpus, spec)))
    slowest = max(range(gpus), key=lambda g: per_gpu[g][1]["modelled_s"])
    record["counts"] = {name: roofline.counts_to_json(c) for name, c in per_gpu[slowest][0].items()}

    def total(key: str, g: int, only: str | None = None) -> float:
        return sum(phases[p][g][key] for p in phases if only is None or p == only) / steps

    def worst(key: str, only: str | None = None) -> float:
        return max(total(key, g, only) for g in range(gpus))

    def counter_total(key: str, g: int, only: str | None = None) -> dict[str, float]:
        out: Counter[str] = Counter()
        for p in phases:
            if only is None or p == only:
                out.update(phases[p][g][key])
        return {k: v / steps for k, v in sorted(out.items())}

    model_s = per_gpu[slowest][1]
    params = sum(int(np.prod(p.shape)) for p in net.collect_params().values() if p.grad_req != "null")
    tensors_count = sum(1 for p in net.collect_params().values() if p.grad_req != "null")
    gemm_calls: Counter[tuple[str, float]] = Counter()
    for p in phases.values():
        gemm_calls.update(p[slowest]["gemms"])
    record.update({
        "params": params, "param_tensors": tensors_count, "per_gpu_batch": per_gpu_batch,
        "launches": worst("launches"), "host_syncs": worst("host_syncs"), "h2d_bytes": worst("h2d_bytes"),
        "d2h_bytes": worst("d2h_bytes"), "h2d_copies": worst("h2d_copies"), "d2h_copies": worst("d2h_copies"),
        "p2p_bytes": worst("p2p_bytes"), "cupy_calls": worst("cupy_calls"), "mxlite_ops": worst("mxlite_ops"),
        "raw_launches": worst("raw_launches"), "graph_launches": worst("graph_launches"),
        "graph_nodes": worst("graph_nodes"),
        "phase_cupy_calls": {p: worst("cupy_calls", p) for p in phases},
        "phase_launches": {p: worst("launches", p) for p in phases},
        "nccl_calls": max(sum(counter_total("nccl_calls", g).values()) for g in range(gpus)),
        "nccl_bytes": max(sum(counter_total("nccl_bytes", g).values()) for g in range(gpus)),
        "nccl_calls_by_name": counter_total("nccl_calls", slowest),
        "nccl_bytes_by_dtype": counter_total("nccl_bytes", slowest),
        "nccl_ring_bytes": worst("nccl_ring_bytes"), "state_bytes": _state_bytes(trainer, gpus),
        "kernel_bytes": worst("kernel_bytes"),
        "kernel_bytes_per_element": (worst("kernel_bytes") / worst("kernel_elements")
                                     if worst("kernel_elements") else 0.0),
        "peak_bytes": max(phases[p][g]["peak_bytes"] - baseline.get(g, 0) for p in phases for g in range(gpus)),
        "memory_bytes": worst("op_bytes") + worst("raw_bytes") + worst("kernel_bytes"),
        "gemm_flops": sum(f * n for (_, f), n in gemm_calls.items()) / steps,
        "layer_gemm_flops": flops_fwd + flops_bwd,
        "gemm_calls": sum(gemm_calls.values()) / steps,
        "kernel_launches": counter_total("kernel_launches", slowest),
        "step_launches": worst("launches", "step"), "step_host_syncs": worst("host_syncs", "step"),
        "step_h2d_bytes": worst("h2d_bytes", "step"), "step_d2h_bytes": worst("d2h_bytes", "step"),
        "step_nccl_calls": max(sum(counter_total("nccl_calls", g, "step").values()) for g in range(gpus)),
        "backward_nccl_calls": max(sum(counter_total("nccl_calls", g, "backward").values()) for g in range(gpus)),
        "modelled_ms": model_s["modelled_s"] * 1e3, "roofline_ms": model_s["roofline_s"] * 1e3,
        "host_ms": model_s["host_s"] * 1e3, "gpu_ms": model_s["gpu_s"] * 1e3,
        "dominant": roofline.dominant(model_s),
        "parts_ms": {ph: {k: v * 1e3 for k, v in parts.items()} for ph, parts in model_s["parts"].items()},
        "host_parts_ms": {ph: {k: v * 1e3 for k, v in parts.items()} for ph, parts in model_s["host_parts"].items()},
        "buckets": _bucket_count(trainer),
    })
    # The gradient tensors in backward order with their modelled backward time: a scaling_model profile.
    bwd = model_s["parts"]["backward"]
    bwd_s = bwd["gemm"] + bwd["memory"] + bwd["launch"]
    fwd = model_s["parts"]["forward"]
    stp = model_s["parts"]["step"]
    total_flops = sum(f for _, _, f in tensors) or 1.0
    itemsize = np.dtype(args.dtype).itemsize
    record["profile"] = {
        "name": f"{model}-counted", "forward_s": fwd["gemm"] + fwd["memory"] + fwd["launch"],
        "optimizer_s": stp["gemm"] + stp["memory"] + stp["launch"],
        "notes": f"{model} at per-GPU batch {per_gpu_batch}: roofline times of counts on emulated GPUs "
                 "(benchmarks/bench_gpu_model.py)",
        "layers": [{"name": n, "bytes": e * itemsize,
                    "backward_s": bwd_s * (f / total_flops if total_flops else 0.0)}
                   for n, e, f in reversed(tensors)],
    }
    return record


def _state_bytes(trainer: Any, gpus: int) -> int:
    """Optimizer-state bytes on the GPU holding the most: the fused updaters' state and master-weight buffers."""
    per_gpu = Counter({g: 0 for g in range(gpus)})
    for updater in trainer._arena_updaters.values():
        per_gpu[updater.arena.device.device_id] += updater.state_nbytes
    return max(per_gpu.values())


def _bucket_count(trainer: Any) -> int:
    return sum(len(sync.buckets) for _, sync in trainer._syncs.values() if sync is not None)


# -- the per-rule kernel traffic -----------------------------------------------------------------------
def rule_traffic(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Bytes per element each fused rule's kernels move on one emulated GPU, and the ratio to the minimum.

    Float32 weights, and float16 weights with float32 master weights (``multi_precision``).
    """
    import mxlite as mx  # noqa: PLC0415

    rows = []
    for dtype in ("float32", "float16"):
        for rule in RULES:
            mx.random.seed(0)
            net = mx.nn.Sequential(mx.nn.Dense(64, in_units=32), mx.nn.Dense(CLASSES, in_units=64))
            net.initialize(mx.init.Xavier(), device=mx.gpu(0))
            if dtype == "float16":
                net.cast("float16")
            params = {"learning_rate": 1e-3, **RULE_PARAMS.get(rule, {})}
            if dtype == "float16":
                params["multi_precision"] = True
            trainer = mx.Trainer(net.collect_params(), rule, params, kvstore=None)
            x = mx.array(np.random.default_rng(0).normal(size=(8, 32)).astype(dtype), device=mx.gpu(0))
            for step in range(2):
                with mx.autograd.record():
                    loss = (net(x) * net(x)).sum()
                loss.backward()
                if step == 1:
                    COUNTS.reset()
                trainer.step(8)
            element, elements = COUNTS.element[0], COUNTS.elements[0]
            launches = sum(COUNTS.by_kernel.get(0, {}).values()) and len(COUNTS.by_kernel.get(0, {}))
            params_n = sum(int(np.prod(p.shape)) for p in net.collect_params().values())
            per = element / params_n if params_n else 0.0
            grad_bytes = 2 if dtype == "float16" else 4
            minimum = roofline.minimum_bytes_per_element(RULE_STATES[rule], 2 if dtype == "float16" else 4,
                                                         grad_bytes, master=dtype == "float16")
            rows.append({"rule": rule, "weights": dtype, "kernels": sorted(COUNTS.by_kernel.get(0, {})),
                         "launches": launches, "bytes_per_element": per, "minimum_bytes_per_element": minimum,
                         "ratio": per / minimum, "elements_launched": elements})
    return rows


# -- measured steps ------------------------------------------------------------------------------------
MEASURED_DEFAULT = os.path.join(HERE, "measured_h200.json")
_SIZE_KEYS = ("hidden", "layers", "input", "batch", "image", "cnn_batch", "optimizer", "dtype")


def load_measured(path: str) -> dict[str, Any]:
    """A measured-steps file (``measured_h200.json``): ``gpu`` (a key of :data:`roofline.GPUS`), ``device``,
    ``versions`` and ``steps``, each step with ``name``, ``model``, its sizes and ``mxlite_ms``.

    Raises:
        ValueError: a missing key or an unknown GPU or model, naming the file and the entry.
    """
    with open(path) as f:
        data = json.load(f)
    for key in ("gpu", "device", "versions", "steps"):
        if key not in data:
            raise ValueError(f"{path}: no {key!r} (a measured-steps file has gpu, device, versions and steps)")
    if data["gpu"] not in roofline.GPUS:
        raise ValueError(f"{path}: gpu {data['gpu']!r} is not one of {', '.join(roofline.GPUS)}")
    for i, step in enumerate(data["steps"]):
        missing = [k for k in ("name", "model", "mxlite_ms") if k not in step]
        if missing or step["model"] not in MODELS_ALL:
            raise ValueError(f"{path}: step {i} ({step.get('name')!r}) lacks {missing} or has an unknown model "
                             f"{step.get('model')!r} (one of {', '.join(MODELS_ALL)})")
    return data


def run_measured(data: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each measured step counted at its own sizes (one emulated GPU, no store, no codec) and modelled on
    the file's GPU: a record with ``name``, ``measured_ms``, ``torch_ms`` and ``error`` (modelled over
    measured, less one) added."""
    rows = []
    for step in data["steps"]:
        sized = argparse.Namespace(**{**vars(args), **{k: step[k] for k in _SIZE_KEYS if k in step},
                                      "gpu": data["gpu"]})
        print(f"counting {step['name']} ...", file=sys.stderr, flush=True)
        record = run_config(step["model"], 1, "none", "none", sized)
        record.update(name=step["name"], measured_ms=step["mxlite_ms"], torch_ms=step.get("torch_ms"),
                      error=record["modelled_ms"] / step["mxlite_ms"] - 1)
        rows.append(record)
    return rows


def print_measured(rows: list[dict[str, Any]], data: dict[str, Any]) -> None:
    """Measured against modelled, side by side, with what the model says dominates."""
    versions = ", ".join(f"{k} {v}" for k, v in data["versions"].items())
    print(f"Measured on {data['device']} ({versions}) against modelled ({roofline.GPUS[data['gpu']].name}):")
    print(f"{'step':16s} {'params':>10s} {'calls':>6s} {'launch':>6s} {'GFLOP':>7s} {'measured':>8s} "
          f"{'modelled':>8s} {'error':>6s} {'host ms':>7s} {'GPU ms':>7s} {'torch':>6s}  dominated by")
    for r in rows:
        d = r["dominant"]
        torch_ms = "" if r.get("torch_ms") is None else f"{r['torch_ms']:6.2f}"
        print(f"{r['name']:16s} {r['params']:10d} {r['cupy_calls']:6.0f} {r['launches']:6.0f} "
              f"{r['gemm_flops'] / 1e9:7.1f} {r['measured_ms']:8.2f} {r['modelled_ms']:8.2f} {100 * r['error']:+5.0f}% "
              f"{r['host_ms']:7.2f} {r['gpu_ms']:7.2f} {torch_ms:>6s}  {d['side']}: {d['part']} "
              f"({100 * d['share']:.0f}%)")
    print("calls: CuPy calls per step; launch: kernels; error: modelled / measured - 1 (the small MLP calibrates "
          "MXLITE_PYTHON_PER_CALL_S; the others are predictions)")


def save_counts(path: str, rows: list[dict[str, Any]], data: dict[str, Any], argv: list[str] | None) -> None:
    """The measured steps' counts per phase (:func:`roofline.counts_to_json`), with the measured ms, as JSON."""
    import mxlite as mx  # noqa: PLC0415

    out = {"note": "counts per step on one emulated GPU of the steps in measured_h200.json (bench_gpu_model.py "
                   "--measured --counts-out); regenerate when mxlite's step changes",
           "command": shlex.join(["python3", "benchmarks/bench_gpu_model.py", *(argv or sys.argv[1:])]),
           "date": datetime.date.today().isoformat(), "mxlite": mx.__version__, "gpu": data["gpu"],
           "steps": [{"name": r["name"], "model": r["model"], "measured_ms": r["measured_ms"], "counts": r["counts"]}
                     for r in rows]}
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


# -- output --------------------------------------------------------------------------------------------
def _mib(n: float) -> str:
    return f"{n / 2**20:.2f}"


def print_table(records: list[dict[str, Any]]) -> None:
    """The per-configuration table (skipped configurations listed apart)."""
    head = (f"{'model':6s} {'gpus':>4s} {'kvstore':7s} {'codec':9s} {'calls':>5s} {'launch':>6s} {'syncs':>5s} "
            f"{'h2d B':>8s} {'d2h B':>7s} {'nccl':>5s} {'nccl MiB':>8s} {'kern MiB':>8s} {'B/elem':>6s} "
            f"{'peak MiB':>8s} {'step: syncs/h2d/d2h':>20s} {'roofl ms':>8s} {'host ms':>8s} {'model ms':>8s}")
    print(head)
    for r in records:
        if "skipped" in r or "error" in r:
            continue
        step = f"{r['step_host_syncs']:.0f}/{r['step_h2d_bytes']:.0f}/{r['step_d2h_bytes']:.0f}"
        codec = r["codec"] + ("+shard" if r.get("shard") else "")  # sharded optimizer states (--shard)
        print(f"{r['model']:6s} {r['gpus']:4d} {r['kvstore']:7s} {codec:9s} {r['cupy_calls']:5.0f} "
              f"{r['launches']:6.0f} {r['host_syncs']:5.0f} {r['h2d_bytes']:8.0f} {r['d2h_bytes']:7.0f} "
              f"{r['nccl_calls']:5.0f} {_mib(r['nccl_bytes']):>8s} {_mib(r['kernel_bytes']):>8s} "
              f"{r['kernel_bytes_per_element']:6.1f} {_mib(r['peak_bytes']):>8s} {step:>20s} "
              f"{r['roofline_ms']:8.3f} {r['host_ms']:8.3f} {r['modelled_ms']:8.3f}")
    skipped = sorted({(r["kvstore"], r["codec"], r["skipped"]) for r in records if "skipped" in r})
    for kv, codec, why in skipped:
        print(f"skipped kvstore={kv} codec={codec}: {why}")


def graph_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each model on one GPU without a store, eagerly and as CUDA graphs (``--graphs``): two records each."""
    rows = []
    for model in args.models.split(","):
        sized = argparse.Namespace(**{**vars(args), "cnn_batch": args.cnn_batch})
        for hybridize in (False, True):
            rows.append(run_config(model, 1, "none", "none", sized, hybridize=hybridize))
    return rows


def print_graphs(rows: list[dict[str, Any]]) -> None:
    """Eager against captured, per step: the host's calls and launches per phase, launches per step in all (a
    graph launch counts as one), graph launches and the nodes they replay.

    The captured step's GPU work is the eager step's (the same kernels, replayed): its replayed operations are not
    counted one by one, so its modelled time is the larger of its own host time and the eager step's GPU time.
    """
    print(f"{'model':6s} {'mode':8s} {'calls fwd/bwd/step':>18s} {'launches fwd/bwd/step':>21s} "
          f"{'launches/step':>13s} {'graphs':>6s} {'nodes':>5s} {'syncs':>5s} {'host ms':>8s} {'gpu ms':>7s} "
          f"{'model ms':>8s}")
    eager_gpu: dict[str, float] = {}
    for r in rows:
        if "skipped" in r or "error" in r:
            continue
        if r["mode"] == "eager":
            eager_gpu[r["model"]] = r["gpu_ms"]
        gpu = eager_gpu.get(r["model"], r["gpu_ms"])
        calls = "/".join(f"{r['phase_cupy_calls'][p]:.0f}" for p in ("forward", "backward", "step"))
        launches = "/".join(f"{r['phase_launches'][p]:.0f}" for p in ("forward", "backward", "step"))
        print(f"{r['model']:6s} {r['mode']:8s} {calls:>18s} {launches:>21s} {r['launches']:13.0f} "
              f"{r['graph_launches']:6.0f} "
              f"{r['graph_nodes']:5.0f} {r['host_syncs']:5.0f} {r['host_ms']:8.3f} {gpu:7.3f} "
              f"{max(r['host_ms'], gpu):8.3f}")


def shard_pairs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration counted both ways: the unsharded and the sharded optimizer-state bytes, peak memory,
    NCCL ring bytes and host synchronisations per step (largest GPU)."""
    by = {(r["model"], r["gpus"], r["kvstore"], r["codec"], r.get("per_gpu_batch"), r["shard"]): r for r in records
          if "skipped" not in r and "error" not in r and "shard" in r}
    rows = []
    for (model, gpus, kv, codec, batch, shard), sharded in by.items():
        plain = by.get((model, gpus, kv, codec, batch, False))
        if not shard or plain is None:
            continue
        rows.append({"model": model, "gpus": gpus, "kvstore": kv, "codec": codec,
                     **{f"{k}_{w}": r[k] for w, r in (("plain", plain), ("sharded", sharded))
                        for k in ("state_bytes", "peak_bytes", "nccl_ring_bytes", "host_syncs", "step_host_syncs",
                                  "modelled_ms")},
                     "state_ratio": plain["state_bytes"] / sharded["state_bytes"] if sharded["state_bytes"] else 0.0})
    return rows


def print_shard_pairs(rows: list[dict[str, Any]]) -> None:
    """The sharded against the unsharded optimizer states, side by side."""
    print(f"{'model':6s} {'gpus':>4s} {'kvstore':7s} {'codec':6s} {'states MiB':>17s} {'ratio':>5s} "
          f"{'peak MiB':>17s} {'NCCL ring KiB/step':>21s} {'syncs/step':>10s}")
    for r in rows:
        print(f"{r['model']:6s} {r['gpus']:4d} {r['kvstore']:7s} {r['codec']:6s} "
              f"{_mib(r['state_bytes_plain']):>8s} {_mib(r['state_bytes_sharded']):>8s} {r['state_ratio']:5.2f} "
              f"{_mib(r['peak_bytes_plain']):>8s} {_mib(r['peak_bytes_sharded']):>8s} "
              f"{r['nccl_ring_bytes_plain'] / 1024:10.1f} {r['nccl_ring_bytes_sharded'] / 1024:10.1f} "
              f"{r['host_syncs_plain']:4.0f} {r['host_syncs_sharded']:5.0f}")
    print("states: optimizer-state bytes per GPU (largest), unsharded then sharded; peak: device memory during a "
          "step; NCCL ring: what NCCL's rings send per GPU and step")


def print_rules(rows: list[dict[str, Any]]) -> None:
    """The per-rule traffic table."""
    print(f"{'rule':9s} {'weights':8s} {'launches':>8s} {'B/elem':>7s} {'minimum':>7s} {'ratio':>6s}  kernels")
    for r in rows:
        print(f"{r['rule']:9s} {r['weights']:8s} {r['launches']:8d} {r['bytes_per_element']:7.2f} "
              f"{r['minimum_bytes_per_element']:7d} {r['ratio']:6.3f}  {', '.join(r['kernels'])}")


INVARIANT_KEYS = ("cupy_calls", "launches", "raw_launches", "gemm_calls", "h2d_copies", "h2d_bytes", "host_syncs",
                  "d2h_copies")


def batch_invariance(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, gpus, kvstore, codec) counted at several per-GPU batches: each batch's per-step counts
    (:data:`INVARIANT_KEYS`) and modelled ms, and ``same``: whether the counts are equal at every batch."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in records:
        if "skipped" not in r and "error" not in r:
            groups.setdefault((r["model"], r["gpus"], r["kvstore"], r["codec"]), []).append(r)
    rows = []
    for (model, gpus, kv, codec), rs in groups.items():
        if len({r["per_gpu_batch"] for r in rs}) < 2:
            continue
        counts = {r["per_gpu_batch"]: {k: r[k] for k in INVARIANT_KEYS} for r in rs}
        rows.append({"model": model, "gpus": gpus, "kvstore": kv, "codec": codec, "counts": counts,
                     "modelled_ms": {r["per_gpu_batch"]: r["modelled_ms"] for r in rs},
                     "same": all(c == next(iter(counts.values())) for c in counts.values())})
    return rows


def print_batch_invariance(rows: list[dict[str, Any]]) -> None:
    """The counts per step at each batch, and whether any depends on the batch."""
    print(f"{'model':6s} {'gpus':>4s} {'kvstore':7s} {'codec':9s} {'batch':>5s} {'calls':>5s} {'launch':>6s} "
          f"{'raw':>4s} {'GEMMs':>5s} {'h2d':>4s} {'h2d B':>6s} {'syncs':>5s} {'model ms':>8s}  same counts")
    for row in rows:
        for batch, c in sorted(row["counts"].items()):
            print(f"{row['model']:6s} {row['gpus']:4d} {row['kvstore']:7s} {row['codec']:9s} {batch:5d} "
                  f"{c['cupy_calls']:5.0f} {c['launches']:6.0f} {c['raw_launches']:4.0f} {c['gemm_calls']:5.0f} "
                  f"{c['h2d_copies']:4.0f} {c['h2d_bytes']:6.0f} {c['host_syncs']:5.0f} "
                  f"{row['modelled_ms'][batch]:8.3f}  {'yes' if row['same'] else 'NO'}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"from {', '.join(MODELS_ALL)}")
    p.add_argument("--gpus", default="1,2,4", help="emulated GPU counts")
    p.add_argument("--kvstores", default=",".join(KVSTORES))
    p.add_argument("--codecs", default=",".join(CODECS))
    p.add_argument("--optimizer", default="adam", choices=RULES)
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"],
                   help="weights and inputs (bfloat16: reported as unsupported by mxlite, nothing counted)")
    p.add_argument("--gpu", default="h100", choices=sorted(roofline.GPUS), help="the GPU the model describes")
    p.add_argument("--hidden", type=int, default=512, help="MLP hidden width (bench_train's default is 4096)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--input", type=int, default=512, help="MLP input features")
    p.add_argument("--batch", type=int, default=64, help="MLP batch per GPU")
    p.add_argument("--image", type=int, default=16, help="CNN image side (a multiple of 4)")
    p.add_argument("--cnn-batch", type=int, default=16, help="CNN batch per GPU")
    p.add_argument("--cnn-batches", help="comma-separated CNN batches per GPU, each counted (replaces --cnn-batch); "
                                         "the table then says whether any count depends on the batch")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=2, help="counted steps (counts are per step)")
    p.add_argument("--no-rules", dest="rules", action="store_false", help="skip the per-rule traffic table")
    p.add_argument("--graphs", action="store_true",
                   help="also count each model on one GPU (no store) eagerly and with the network hybridized as "
                        "CUDA graphs (hybridize(static_alloc=True, static_shape=True)), side by side")
    p.add_argument("--shard", action="store_true",
                   help="also count sharded optimizer states (shard_optimizer_states=True) where a store sums over "
                        "several GPUs, and compare them with the unsharded ones")
    p.add_argument("--measured", nargs="?", const=MEASURED_DEFAULT,
                   help="count the steps of a measured-steps file (default benchmarks/measured_h200.json) at "
                        "their sizes, on their GPU, and print measured against modelled")
    p.add_argument("--only-measured", action="store_true", help="with --measured: skip the configuration sweep")
    p.add_argument("--counts-out", help="with --measured: write each measured step's counts per phase here (what "
                                        "tests/test_roofline.py checks the model against: measured_h200_counts.json)")
    p.add_argument("--json", help="write every record here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    gpu_counts = [int(g) for g in args.gpus.split(",")]
    os.environ.setdefault("MXLITE_EMULATE_GPUS", str(max(gpu_counts)))
    import mxlite as mx  # noqa: PLC0415

    measured = load_measured(args.measured) if args.measured else None
    if mx.num_gpus() < max(gpu_counts):
        raise SystemExit(f"asked for {max(gpu_counts)} GPUs, {mx.num_gpus()} are emulated (MXLITE_EMULATE_GPUS)")
    _emulation()
    if args.dtype == "bfloat16":
        why = _bench_train().bf16_unsupported()
        if why:  # mxlite's arrays hold no bfloat16: nothing to count
            print(f"bfloat16 skipped: {why}")
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"date": datetime.date.today().isoformat(), "args": vars(args), "records": [],
                               "skipped": f"bfloat16 skipped: {why}"}, f, indent=1)
            return 0
    records: list[dict[str, Any]] = []
    compared: list[dict[str, Any]] = []
    with counting():
        cnn_batches = [int(b) for b in args.cnn_batches.split(",")] if args.cnn_batches else [args.cnn_batch]
        for model in ([] if args.only_measured else args.models.split(",")):
            for batch in (cnn_batches if model != "mlp" else [args.cnn_batch]):
                sized = argparse.Namespace(**{**vars(args), "cnn_batch": batch})
                for gpus in gpu_counts:
                    for kv in args.kvstores.split(","):
                        for codec in args.codecs.split(","):
                            for shard in (False, True) if args.shard else (False,):
                                if shard and (kv == "none" or gpus == 1):
                                    continue  # nothing to shard over
                                try:
                                    records.append(run_config(model, gpus, kv, codec, sized, shard))
                                except Exception as exc:  # noqa: BLE001 - one broken configuration must not hide the rest
                                    records.append({"model": model, "gpus": gpus, "kvstore": kv, "codec": codec,
                                                    "shard": shard, "error": f"{type(exc).__name__}: {exc}"})
                                    print(f"error: {model} gpus={gpus} kvstore={kv} codec={codec} shard={shard}: "
                                          f"{records[-1]['error']}", file=sys.stderr)
        rules = rule_traffic(args) if args.rules and not args.only_measured else []
        graphs = graph_rows(args) if args.graphs else []
        if measured is not None:
            compared = run_measured(measured, args)
    if records:
        print(f"Counts per step on emulated GPUs (largest GPU), modelled {roofline.GPUS[args.gpu].name} time "
              "(benchmarks/roofline.py):")
        print_table(records)
    sharding = shard_pairs(records) if args.shard else []
    if sharding:
        print("\nSharded optimizer states (ZeRO-1) against unsharded, per GPU and step (largest GPU):")
        print_shard_pairs(sharding)
    invariance = batch_invariance(records)
    if invariance:
        print("\nCounts per step at each per-GPU batch (largest GPU); 'same': no count depends on the batch")
        print_batch_invariance(invariance)
    if graphs:
        print("\nEager against CUDA graphs (one GPU, no store; counts per step; the captured step's GPU work is "
              "the eager one's):")
        print_graphs(graphs)
    if rules:
        print("\nFused optimizer kernels: bytes per element moved, and the ratio to the least the update must move")
        print_rules(rules)
    if compared:
        print()
        print_measured(compared, measured)
    print("\nroofline constants:")
    print(roofline.constants_table())
    if args.counts_out and compared:
        save_counts(args.counts_out, compared, measured, argv)
    if args.json:
        out = {"date": datetime.date.today().isoformat(), "command": shlex.join([sys.argv[0], *(argv or sys.argv[1:])]),
               "python": platform.python_version(), "numpy": np.__version__, "mxlite": mx.__version__,
               "emulated_gpus": mx.num_gpus(), "args": vars(args),
               "constants": {k: {"value": v, "unit": u, "source": s} for k, (v, u, s) in roofline.CONSTANTS.items()},
               "records": records, "rules": rules, "batch_invariance": invariance, "graphs": graphs,
               "sharding": sharding}
        if measured is not None:
            out["measured"] = {"device": measured["device"], "gpu": measured["gpu"], "versions": measured["versions"],
                               "steps": compared}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
