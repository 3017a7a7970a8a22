"""Counted GPU costs of a training step on emulated GPUs, turned into H100 time by a stated roofline model.

Usage::

    PYTHONPATH=. python3 benchmarks/bench_gpu_model.py --json gpu_model.json

For the benchmark MLP and CNN (the models of ``benchmarks/bench_train.py``) on 1, 2 and 4 emulated
GPUs (``MXLITE_EMULATE_GPUS``, set to the largest count asked for unless already set), with no
store, kvstore 'device' and 'nccl', and every codec (none, fp16, bf16, 2bit, topk, threshold),
it trains ``--warmup`` steps, then counts ``--steps`` steady-state steps per emulated GPU and
reports per step (the largest value over the GPUs):

* ``launches``: kernels launched (array operations that touched data, and RawKernel launches);
* ``host_syncs``, ``h2d_bytes``, ``d2h_bytes``: host synchronisations and host<->device copies;
* ``nccl_calls``, ``nccl_bytes``: NCCL collectives and the bytes each GPU sent;
* ``kernel_bytes``: what the fused optimizer kernels must move, from their arguments and each
  kernel's per-element traffic (``roofline.KERNEL_TRAFFIC``), counted at every launch;
* ``peak_bytes``: peak device memory during the step;
* ``modelled_ms`` and ``roofline_ms``: the H100 estimate of ``benchmarks/roofline.py`` (whose
  constants name their sources) and the sum of its GPU-work parts; GEMM FLOPs come from the layer
  shapes.

Counts are split by phase (forward, backward, optimizer step) in the JSON, and the optimizer-step
counts alone are reported as ``step_*`` (what ``Trainer.step`` costs). Each configuration the
Trainer rejects (compression with kvstore 'nccl' or without a store, as in MXNet) gets a record
with ``skipped`` saying why. A second table gives, for every fused rule, the bytes per element
its kernels move and the ratio to the least its update must move (``--rules``).

These are counts on emulated GPUs turned into time by a model, not GPU timings. The per-GPU batch
is the same whatever the number of GPUs (weak scaling, as in ``scaling_model.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import os
import platform
import shlex
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import roofline  # noqa: E402 - benchmarks/ is not a package

MODELS = ("mlp", "cnn")
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
class KernelBytes:
    """Per emulated GPU: bytes the fused optimizer kernels moved (element traffic and tables) and by kernel."""

    def __init__(self) -> None:
        self.element: Counter[int] = Counter()
        self.table: Counter[int] = Counter()
        self.elements: Counter[int] = Counter()
        self.by_kernel: dict[int, Counter[str]] = {}

    def reset(self) -> None:
        """Forget every count."""
        self.__init__()


KERNEL_BYTES = KernelBytes()


@contextlib.contextmanager
def counting_kernel_bytes() -> Iterator[KernelBytes]:
    """Count :data:`KERNEL_BYTES` at every launch of mxlite's fused-optimizer Launcher, while inside."""
    from mxlite.optimizer import _fused  # noqa: PLC0415

    original = _fused.Launcher.__call__

    def counted(self: Any, kernel: str, buffers: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        plan = self.plan
        elements = int(np.sum(plan.chunk_end - plan.chunk_start))
        element, table = roofline.kernel_traffic(kernel, buffers, elements, len(plan.chunk_seg), len(plan.segments))
        gpu = self.device.device_id
        KERNEL_BYTES.element[gpu] += element
        KERNEL_BYTES.table[gpu] += table
        KERNEL_BYTES.elements[gpu] += elements
        KERNEL_BYTES.by_kernel.setdefault(gpu, Counter())[kernel] += element + table
        return original(self, kernel, buffers, *args, **kwargs)

    _fused.Launcher.__call__ = counted
    try:
        yield KERNEL_BYTES
    finally:
        _fused.Launcher.__call__ = original


def _emulation() -> Any:
    from mxlite._emulation import install  # noqa: PLC0415

    if install.emulated_gpu_count() == 0:
        raise RuntimeError("bench_gpu_model counts costs on emulated GPUs: set MXLITE_EMULATE_GPUS (it is set "
                           "for you unless a value, such as 0, is given)")
    return install


def _zero_phase() -> dict[str, Any]:
    return {"launches": 0, "kernel_launches": Counter(), "op_bytes": 0, "gemm_op_bytes": 0, "host_syncs": 0,
            "h2d_copies": 0, "h2d_bytes": 0, "d2h_copies": 0, "d2h_bytes": 0, "p2p_bytes": 0, "nccl_calls": Counter(),
            "nccl_call_bytes": Counter(), "nccl_bytes": Counter(), "kernel_bytes": 0, "kernel_elements": 0,
            "peak_bytes": 0}


def _add_counts(total: dict[int, dict[str, Any]], gpus: int) -> None:
    """Add the emulation's counters (and the kernel bytes) of GPUs 0..gpus-1 into ``total``, then reset them."""
    install = _emulation()
    snap = install.counters()
    for g in range(gpus):
        c, t = snap[g], total.setdefault(g, _zero_phase())
        op_launches = c.get("op_launches", {})
        t["launches"] += sum(op_launches.values()) + sum(c["kernel_launches"].values())
        t["kernel_launches"].update(c["kernel_launches"])
        op_bytes = c.get("op_bytes", {})
        t["gemm_op_bytes"] += sum(v for k, v in op_bytes.items() if k in roofline.GEMM_OPS)
        t["op_bytes"] += sum(v for k, v in op_bytes.items() if k not in roofline.GEMM_OPS)
        for key in ("host_syncs", "h2d_copies", "h2d_bytes", "d2h_copies", "d2h_bytes", "p2p_bytes"):
            t[key] += c[key]
        t["nccl_calls"].update(c["nccl_calls"])
        t["nccl_bytes"].update(c["nccl_bytes"])
        t["nccl_call_bytes"].update(c.get("nccl_call_bytes", {}))
        t["kernel_bytes"] += KERNEL_BYTES.element[g] + KERNEL_BYTES.table[g]
        t["kernel_elements"] += KERNEL_BYTES.elements[g]
        t["peak_bytes"] = max(t["peak_bytes"], c["peak_bytes"])
    install.reset_counters()
    KERNEL_BYTES.reset()


# -- the models ----------------------------------------------------------------------------------------
def build_model(model: str, args: argparse.Namespace) -> Any:
    """The bench_train model ``model`` at the sizes of ``args`` (not initialised)."""
    import mxlite as mx  # noqa: PLC0415

    if model == "mlp":
        net = mx.nn.Sequential(*[mx.nn.Dense(args.hidden, activation="relu") for _ in range(args.layers)])
        net.add(mx.nn.Dense(CLASSES))
        return net
    return mx.nn.Sequential(
        mx.nn.Conv2D(32, 3, padding=1, activation="relu"), mx.nn.MaxPool2D(2),
        mx.nn.Conv2D(64, 3, padding=1, activation="relu"), mx.nn.MaxPool2D(2),
        mx.nn.Dense(128, activation="relu"), mx.nn.Dense(CLASSES))


def batch_for(model: str, args: argparse.Namespace, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One per-GPU batch: float32 inputs and labels in [0, 10)."""
    rng = np.random.default_rng(seed)
    shape = (args.batch, args.input) if model == "mlp" else (args.cnn_batch, 3, args.image, args.image)
    return rng.normal(size=shape).astype(np.float32), rng.integers(0, CLASSES, size=shape[0]).astype(np.float32)


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
def run_config(model: str, gpus: int, kvstore: str, codec: str, args: argparse.Namespace) -> dict[str, Any]:
    """Train ``--warmup`` steps, then count ``--steps`` steps of one configuration; one JSON record."""
    import mxlite as mx  # noqa: PLC0415

    install = _emulation()
    gc.collect()  # the previous configuration's arrays leave the emulated GPUs
    # What earlier configurations still hold (communicators, cached tables) is not this one's: peak_bytes
    # counts from the bytes in use before this configuration builds anything.
    baseline = {g: c["bytes_in_use"] for g, c in install.counters().items()}
    devices = [mx.gpu(i) for i in range(gpus)]
    record: dict[str, Any] = {"model": model, "gpus": gpus, "kvstore": kvstore, "codec": codec,
                              "optimizer": args.optimizer}
    if kvstore == "none" and codec != "none":
        record["skipped"] = "no store: the Trainer compresses nothing (compression belongs to a store)"
        return record
    mx.random.seed(0)
    net = build_model(model, args)
    net.initialize(mx.init.Xavier(), device=devices)
    x, y = batch_for(model, args)
    xs = [mx.array(x, device=d) for d in devices]
    ys = [mx.array(y, device=d) for d in devices]
    lr = {"sgd": 0.01}.get(args.optimizer, 1e-3)
    opt_params = {"learning_rate": lr, **RULE_PARAMS.get(args.optimizer, {})}
    try:
        trainer = mx.Trainer(net.collect_params(), args.optimizer, opt_params,
                             kvstore=None if kvstore == "none" else kvstore, compression_params=CODECS[codec])
    except ValueError as exc:
        record["skipped"] = str(exc)
        return record
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    per_gpu_batch = x.shape[0]

    def forward() -> list[Any]:
        with mx.autograd.record():
            return [loss_fn(net(a), b) for a, b in zip(xs, ys)]

    for _ in range(args.warmup):
        losses = forward()
        mx.autograd.backward(losses)
        trainer.step(per_gpu_batch * gpus)
    if codec != "none" and trainer._codec is None:
        record["codec_used"] = False  # the Trainer built no compressing sync (no store, or one GPU)
    with devices[0]:
        flops_fwd, flops_bwd, tensors = gemm_flops(net, xs[0])
    install.reset_counters()
    KERNEL_BYTES.reset()
    phases: dict[str, dict[int, dict[str, Any]]] = {"forward": {}, "backward": {}, "step": {}}
    for _ in range(args.steps):
        losses = forward()
        _add_counts(phases["forward"], gpus)
        mx.autograd.backward(losses)
        _add_counts(phases["backward"], gpus)
        trainer.step(per_gpu_batch * gpus)
        _add_counts(phases["step"], gpus)
    steps = args.steps
    # Per GPU and per step; the largest GPU figure is what paces a synchronous step.
    per_gpu = []
    for g in range(gpus):
        counts = {}
        for name, phase in phases.items():
            counts[name] = roofline.PhaseCounts(
                gemm_flops=flops_fwd if name == "forward" else flops_bwd if name == "backward" else 0.0,
                launches=phase[g]["launches"] / steps,
                memory_bytes=(phase[g]["op_bytes"] + phase[g]["kernel_bytes"]) / steps,
                host_syncs=phase[g]["host_syncs"] / steps, h2d_bytes=phase[g]["h2d_bytes"] / steps,
                d2h_bytes=phase[g]["d2h_bytes"] / steps, p2p_bytes=phase[g]["p2p_bytes"] / steps,
                nccl_calls={k: v / steps for k, v in phase[g]["nccl_calls"].items()},
                nccl_call_bytes={k: v / steps for k, v in phase[g]["nccl_call_bytes"].items()})
        per_gpu.append((counts, roofline.step_seconds(counts, gpus)))
    slowest = max(range(gpus), key=lambda g: per_gpu[g][1]["modelled_s"])

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
    record.update({
        "params": params, "param_tensors": tensors_count, "per_gpu_batch": per_gpu_batch,
        "launches": worst("launches"), "host_syncs": worst("host_syncs"), "h2d_bytes": worst("h2d_bytes"),
        "d2h_bytes": worst("d2h_bytes"), "h2d_copies": worst("h2d_copies"), "d2h_copies": worst("d2h_copies"),
        "p2p_bytes": worst("p2p_bytes"),
        "nccl_calls": max(sum(counter_total("nccl_calls", g).values()) for g in range(gpus)),
        "nccl_bytes": max(sum(counter_total("nccl_bytes", g).values()) for g in range(gpus)),
        "nccl_calls_by_name": counter_total("nccl_calls", slowest),
        "nccl_bytes_by_dtype": counter_total("nccl_bytes", slowest),
        "kernel_bytes": worst("kernel_bytes"),
        "kernel_bytes_per_element": (worst("kernel_bytes") / worst("kernel_elements")
                                     if worst("kernel_elements") else 0.0),
        "peak_bytes": max(phases[p][g]["peak_bytes"] - baseline.get(g, 0) for p in phases for g in range(gpus)),
        "memory_bytes": worst("op_bytes") + worst("kernel_bytes"),
        "gemm_flops": flops_fwd + flops_bwd,
        "kernel_launches": counter_total("kernel_launches", slowest),
        "step_launches": worst("launches", "step"), "step_host_syncs": worst("host_syncs", "step"),
        "step_h2d_bytes": worst("h2d_bytes", "step"), "step_d2h_bytes": worst("d2h_bytes", "step"),
        "step_nccl_calls": max(sum(counter_total("nccl_calls", g, "step").values()) for g in range(gpus)),
        "backward_nccl_calls": max(sum(counter_total("nccl_calls", g, "backward").values()) for g in range(gpus)),
        "modelled_ms": model_s["modelled_s"] * 1e3, "roofline_ms": model_s["roofline_s"] * 1e3,
        "parts_ms": {ph: {k: v * 1e3 for k, v in parts.items()} for ph, parts in model_s["parts"].items()},
        "buckets": _bucket_count(trainer),
    })
    # The gradient tensors in backward order with their modelled backward time: a scaling_model profile.
    bwd = model_s["parts"]["backward"]
    bwd_s = bwd["gemm"] + bwd["memory"] + bwd["launch"]
    fwd = model_s["parts"]["forward"]
    stp = model_s["parts"]["step"]
    total_flops = sum(f for _, _, f in tensors) or 1.0
    itemsize = 4
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
                    KERNEL_BYTES.reset()
                trainer.step(8)
            element, elements = KERNEL_BYTES.element[0], KERNEL_BYTES.elements[0]
            launches = sum(KERNEL_BYTES.by_kernel.get(0, {}).values()) and len(KERNEL_BYTES.by_kernel.get(0, {}))
            params_n = sum(int(np.prod(p.shape)) for p in net.collect_params().values())
            per = element / params_n if params_n else 0.0
            grad_bytes = 2 if dtype == "float16" else 4
            minimum = roofline.minimum_bytes_per_element(RULE_STATES[rule], 2 if dtype == "float16" else 4,
                                                         grad_bytes, master=dtype == "float16")
            rows.append({"rule": rule, "weights": dtype, "kernels": sorted(KERNEL_BYTES.by_kernel.get(0, {})),
                         "launches": launches, "bytes_per_element": per, "minimum_bytes_per_element": minimum,
                         "ratio": per / minimum, "elements_launched": elements})
    return rows


# -- output --------------------------------------------------------------------------------------------
def _mib(n: float) -> str:
    return f"{n / 2**20:.2f}"


def print_table(records: list[dict[str, Any]]) -> None:
    """The per-configuration table (skipped configurations listed apart)."""
    head = (f"{'model':5s} {'gpus':>4s} {'kvstore':7s} {'codec':9s} {'launch':>6s} {'syncs':>5s} {'h2d B':>8s} "
            f"{'d2h B':>7s} {'nccl':>5s} {'nccl MiB':>8s} {'kern MiB':>8s} {'B/elem':>6s} {'peak MiB':>8s} "
            f"{'step: syncs/h2d/d2h':>20s} {'roofl ms':>8s} {'model ms':>8s}")
    print(head)
    for r in records:
        if "skipped" in r or "error" in r:
            continue
        step = f"{r['step_host_syncs']:.0f}/{r['step_h2d_bytes']:.0f}/{r['step_d2h_bytes']:.0f}"
        print(f"{r['model']:5s} {r['gpus']:4d} {r['kvstore']:7s} {r['codec']:9s} {r['launches']:6.0f} "
              f"{r['host_syncs']:5.0f} {r['h2d_bytes']:8.0f} {r['d2h_bytes']:7.0f} {r['nccl_calls']:5.0f} "
              f"{_mib(r['nccl_bytes']):>8s} {_mib(r['kernel_bytes']):>8s} {r['kernel_bytes_per_element']:6.1f} "
              f"{_mib(r['peak_bytes']):>8s} {step:>20s} {r['roofline_ms']:8.3f} {r['modelled_ms']:8.3f}")
    skipped = sorted({(r["kvstore"], r["codec"], r["skipped"]) for r in records if "skipped" in r})
    for kv, codec, why in skipped:
        print(f"skipped kvstore={kv} codec={codec}: {why}")


def print_rules(rows: list[dict[str, Any]]) -> None:
    """The per-rule traffic table."""
    print(f"{'rule':9s} {'weights':8s} {'launches':>8s} {'B/elem':>7s} {'minimum':>7s} {'ratio':>6s}  kernels")
    for r in rows:
        print(f"{r['rule']:9s} {r['weights']:8s} {r['launches']:8d} {r['bytes_per_element']:7.2f} "
              f"{r['minimum_bytes_per_element']:7d} {r['ratio']:6.3f}  {', '.join(r['kernels'])}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--gpus", default="1,2,4", help="emulated GPU counts")
    p.add_argument("--kvstores", default=",".join(KVSTORES))
    p.add_argument("--codecs", default=",".join(CODECS))
    p.add_argument("--optimizer", default="adam", choices=RULES)
    p.add_argument("--hidden", type=int, default=512, help="MLP hidden width (bench_train's default is 4096)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--input", type=int, default=512, help="MLP input features")
    p.add_argument("--batch", type=int, default=64, help="MLP batch per GPU")
    p.add_argument("--image", type=int, default=16, help="CNN image side")
    p.add_argument("--cnn-batch", type=int, default=16, help="CNN batch per GPU")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=2, help="counted steps (counts are per step)")
    p.add_argument("--no-rules", dest="rules", action="store_false", help="skip the per-rule traffic table")
    p.add_argument("--json", help="write every record here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    gpu_counts = [int(g) for g in args.gpus.split(",")]
    os.environ.setdefault("MXLITE_EMULATE_GPUS", str(max(gpu_counts)))
    import mxlite as mx  # noqa: PLC0415

    if mx.num_gpus() < max(gpu_counts):
        raise SystemExit(f"asked for {max(gpu_counts)} GPUs, {mx.num_gpus()} are emulated (MXLITE_EMULATE_GPUS)")
    _emulation()
    records = []
    with counting_kernel_bytes():
        for model in args.models.split(","):
            for gpus in gpu_counts:
                for kv in args.kvstores.split(","):
                    for codec in args.codecs.split(","):
                        try:
                            records.append(run_config(model, gpus, kv, codec, args))
                        except Exception as exc:  # noqa: BLE001 - one broken configuration must not hide the rest
                            records.append({"model": model, "gpus": gpus, "kvstore": kv, "codec": codec,
                                            "error": f"{type(exc).__name__}: {exc}"})
                            print(f"error: {model} gpus={gpus} kvstore={kv} codec={codec}: {records[-1]['error']}",
                                  file=sys.stderr)
        rules = rule_traffic(args) if args.rules else []
    print("Counts per step on emulated GPUs (largest GPU), modelled H100 time (benchmarks/roofline.py):")
    print_table(records)
    if rules:
        print("\nFused optimizer kernels: bytes per element moved, and the ratio to the least the update must move")
        print_rules(rules)
    print("\nroofline constants:")
    print(roofline.constants_table())
    if args.json:
        out = {"date": datetime.date.today().isoformat(), "command": shlex.join([sys.argv[0], *(argv or sys.argv[1:])]),
               "python": platform.python_version(), "numpy": np.__version__, "mxlite": mx.__version__,
               "emulated_gpus": mx.num_gpus(), "args": vars(args),
               "constants": {k: {"value": v, "unit": u, "source": s} for k, (v, u, s) in roofline.CONSTANTS.items()},
               "records": records, "rules": rules}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
