"""Where an mxlite training step's time goes: sections, hottest functions, per-op overhead, allocations.

Trains the model of ``bench_train.py`` (``--model mlp|cnn|cnn_bn``, same size options) on one device
with a Trainer over ``--kvstore`` and reports, after ``--warmup`` steps:

* **sections**: the median wall time of forward (with the loss), backward,
  ``trainer.allreduce_grads()`` and ``trainer.update()`` (together they are ``trainer.step``) over
  ``--steps`` steps, the device synchronised at the end of every section on a GPU;
* **profile**: ``cProfile`` over ``--steps`` more steps: the top ``--top`` functions by cumulative
  and by own time, and the primitive ops per step (calls of ``autograd.tensor.op_result``). Array
  arithmetic written as operators (``@``, ``+``) is invisible to cProfile and counts as the own
  time of the function using it; the profile's wall time is shown next to the unprofiled step;
* **op overhead**: microseconds mxlite adds per op (dispatch, recording, the backward engine),
  measured on 1-element inputs against the same NumPy/CuPy calls on raw arrays, and that
  overhead times the ops per step: the step's estimated framework overhead;
* **allocations**: on a GPU, CuPy's default memory pool (``used_bytes``/``total_bytes`` before
  and after the steps) and the number and bytes of allocations per section, counted through
  ``cupy.cuda.using_allocator``; on CPU, the ``tracemalloc`` peak and net growth of one step (NumPy
  reports its buffers to tracemalloc).

Usage: ``PYTHONPATH=. python3 benchmarks/profile_step.py [--device cpu|gpu] [--model mlp|cnn|cnn_bn]
[--json out.json]``; ``--device gpu`` at the default sizes is the run to make on a GPU machine.
On a 2-core CPU (about 10 s each; one thread per library, see ``bench_train.py``)::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python3 benchmarks/profile_step.py \
        --device cpu --model mlp --hidden 2048 --layers 4 --input 2048 --batch 256 --steps 5
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python3 benchmarks/profile_step.py \
        --device cpu --model cnn --cnn-batch 128 --steps 5
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import importlib.util
import json
import os
import pstats
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

import mxlite as mx

SECTIONS = ("forward", "backward", "allreduce_grads", "update")
_KVSTORES = {"none": None, "device": "device", "nccl": "nccl"}


def _bench_train() -> ModuleType:
    """``benchmarks/bench_train.py`` (models, batches, device name, versions), loaded by path."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_train.py")
    spec = importlib.util.spec_from_file_location("_bench_train_for_profile", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


class _Step:
    """An mxlite model, its batch and Trainer on one device, with the step cut into :data:`SECTIONS`."""

    def __init__(self, bt: ModuleType, args: argparse.Namespace, device: mx.Device) -> None:
        mx.random.seed(0)
        self.device = device
        self.net = bt.mxlite_model(args.model, args)
        if args.dtype != "float32":
            self.net.cast(args.dtype)
        self.net.initialize(mx.init.Xavier(), device=device)
        x, y = bt.make_batch(args.model, args)
        self.batch = x.shape[0]
        self.x, self.y = mx.array(x, device=device), mx.array(y, device=device)
        self.loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
        with mx.autograd.record():  # lays the arenas out before the Trainer looks at them
            self.loss_fn(self.net(self.x), self.y).backward()
        opt_params = {"learning_rate": bt.LEARNING_RATES[args.optimizer],
                      **({"momentum": 0.9} if args.optimizer == "sgd" else {})}
        self.trainer = mx.Trainer(self.net.collect_params(), args.optimizer, opt_params,
                                  kvstore=_KVSTORES[args.kvstore])
        self.loss: Any = None
        cuda = device.xp.cuda if device.is_gpu else None
        self.sync: Callable[[], None] = ((lambda: cuda.Device(device.device_id).synchronize()) if cuda
                                         else (lambda: None))

    def forward(self) -> None:
        with mx.autograd.record():
            self.loss = self.loss_fn(self.net(self.x), self.y)

    def backward(self) -> None:
        self.loss.backward()

    def allreduce_grads(self) -> None:
        self.trainer.allreduce_grads()

    def update(self) -> None:
        self.trainer.update(self.batch)

    def parts(self) -> list[Callable[[], None]]:
        """The four sections, in order; running them once is one ``trainer.step`` training step."""
        return [getattr(self, name) for name in SECTIONS]

    def run(self, steps: int) -> None:
        for _ in range(steps):
            for part in self.parts():
                part()
        self.sync()


# -- sections --------------------------------------------------------------------------------------
def time_sections(step: _Step, steps: int) -> tuple[list[dict[str, Any]], float]:
    """Median/mean ms of each section over ``steps`` steps (synchronised); also the median step in ms."""
    times: list[list[float]] = [[] for _ in SECTIONS]
    totals = []
    step.sync()
    for _ in range(steps):
        t_step = time.perf_counter()
        for i, part in enumerate(step.parts()):
            t0 = time.perf_counter()
            part()
            step.sync()
            times[i].append(time.perf_counter() - t0)
        totals.append(time.perf_counter() - t_step)
    medians = [statistics.median(t) for t in times]
    rows = [{"section": name, "ms": 1e3 * med, "mean_ms": 1e3 * statistics.fmean(t), "pct": 100 * med / sum(medians)}
            for name, med, t in zip(SECTIONS, medians, times)]
    return rows, 1e3 * statistics.median(totals)


# -- cProfile --------------------------------------------------------------------------------------
def _label(key: tuple[str, int, str]) -> str:
    """``path:line(function)`` with the path shortened to the repository or the installed package."""
    filename, line, func = key
    if filename == "~":
        return func  # a built-in or C function, e.g. <built-in method numpy.matmul>
    for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
            break
    else:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        if filename.startswith(root + os.sep):
            filename = os.path.relpath(filename, root)
    return f"{filename}:{line}({func})"


def profile_steps(step: _Step, steps: int, top: int) -> dict[str, Any]:
    """cProfile ``steps`` steps: top functions, ops per step and the own time of Python functions and of
    directly called native (built-in, NumPy/CuPy C) functions.

    cProfile sees no operator (``a @ b``, ``a + b``, ``a *= k``): the array work an operator does
    counts as the own time of the Python function that wrote it (``fully_connected`` holds its
    GEMMs), so ``python_ms_per_step`` is not interpreter overhead; :func:`op_overhead` measures that.
    """
    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.enable()
    step.run(steps)
    profiler.disable()
    wall = time.perf_counter() - t0
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = []
    python_s = native_s = 0.0
    ops = 0
    for key, (_, ncalls, tottime, cumtime, _) in stats.items():
        if key[0] == "~":
            native_s += tottime
        else:
            python_s += tottime
        if key[2] == "op_result" and key[0].endswith(os.path.join("autograd", "tensor.py")):
            ops += ncalls
        rows.append({"function": _label(key), "calls_per_step": ncalls / steps,
                     "cumulative_ms_per_step": 1e3 * cumtime / steps, "own_ms_per_step": 1e3 * tottime / steps})
    return {
        "steps": steps, "wall_ms_per_step": 1e3 * wall / steps, "ops_per_step": ops / steps,
        "python_ms_per_step": 1e3 * python_s / steps, "native_ms_per_step": 1e3 * native_s / steps,
        "top_cumulative": sorted(rows, key=lambda r: -r["cumulative_ms_per_step"])[:top],
        "top_own": sorted(rows, key=lambda r: -r["own_ms_per_step"])[:top],
    }


# -- per-op overhead -------------------------------------------------------------------------------
def op_overhead(device: mx.Device, chain: int = 20, repeat: int = 200) -> dict[str, float]:
    """Microseconds mxlite adds per op, on 1-element inputs (so the arithmetic costs next to nothing).

    * ``add_us``/``relu_us``: one recorded op (input needing a gradient) against ``raw_*_us``, the
      same NumPy/CuPy call on the raw arrays;
    * ``chain_us_per_op``: forward and backward of a chain of ``chain`` recorded ``relu`` ops,
      per op, against ``raw_chain_us_per_op``, the same forward and gradient written with raw
      arrays; their difference, ``overhead_us_per_op``, is what autograd and dispatch cost per op
      in a training step.
    """
    xp = device.xp
    with device.use():
        a = mx.array(np.ones(1, np.float32), device=device)
        b = mx.array(np.ones(1, np.float32), device=device)
        a.attach_grad()
        raw_a, raw_b, raw_grad = a._data, b._data, a.grad._data

    def per_call(fn: Callable[[], Any], n: int) -> float:
        fn()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if device.is_gpu:
            xp.cuda.Device(device.device_id).synchronize()
        return 1e6 * (time.perf_counter() - t0) / n

    def mx_chain() -> None:
        with mx.autograd.record():
            y = a
            for _ in range(chain):
                y = mx.ops.relu(y)
        y.backward()

    def raw_chain() -> None:
        y, masks = raw_a, []
        for _ in range(chain):
            masks.append(y > 0)
            y = xp.maximum(y, 0)
        g = xp.ones_like(y)
        for m in reversed(masks):
            g = g * m
        raw_grad[...] = g

    with device.use():
        raw_add = per_call(lambda: xp.add(raw_a, raw_b), 10 * repeat)
        raw_relu = per_call(lambda: xp.maximum(raw_a, 0), 10 * repeat)
        raw = per_call(raw_chain, repeat) / chain
    with mx.autograd.record():
        mx_add = per_call(lambda: mx.ops.add(a, b), 10 * repeat)
        mx_relu = per_call(lambda: mx.ops.relu(a), 10 * repeat)
    mine = per_call(mx_chain, repeat) / chain
    return {"add_us": mx_add, "raw_add_us": raw_add, "relu_us": mx_relu, "raw_relu_us": raw_relu,
            "chain_us_per_op": mine, "raw_chain_us_per_op": raw, "overhead_us_per_op": mine - raw}


# -- allocations -----------------------------------------------------------------------------------
class _CountingAllocator:
    """A CuPy allocator that counts the calls and bytes it forwards to the default memory pool."""

    def __init__(self, pool: Any) -> None:
        self.pool, self.calls, self.bytes = pool, 0, 0

    def __call__(self, size: int) -> Any:
        self.calls += 1
        self.bytes += size
        return self.pool.malloc(size)


def gpu_allocations(step: _Step, steps: int) -> dict[str, Any]:
    """CuPy pool bytes before/after ``steps`` steps, and allocations (count, MiB) per section per step."""
    import cupy  # noqa: PLC0415 - GPU only

    pool = cupy.get_default_memory_pool()
    step.sync()
    before = {"used_bytes": pool.used_bytes(), "total_bytes": pool.total_bytes()}
    per_section = {name: [0, 0] for name in SECTIONS}
    with step.device.use():
        for _ in range(steps):
            for name, part in zip(SECTIONS, step.parts()):
                counter = _CountingAllocator(pool)
                with cupy.cuda.using_allocator(counter):
                    part()
                per_section[name][0] += counter.calls
                per_section[name][1] += counter.bytes
    step.sync()
    after = {"used_bytes": pool.used_bytes(), "total_bytes": pool.total_bytes()}
    return {"pool_before": before, "pool_after": after, "n_free_blocks_after": pool.n_free_blocks(),
            "per_step": {name: {"allocations": calls / steps, "mib": nbytes / steps / 2**20}
                         for name, (calls, nbytes) in per_section.items()}}


def cpu_allocations(step: _Step) -> dict[str, Any]:
    """tracemalloc over one step: peak and net traced MiB (NumPy buffers and Python objects)."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    start, _ = tracemalloc.get_traced_memory()
    step.run(1)
    end, peak = tracemalloc.get_traced_memory()
    if not was_tracing:
        tracemalloc.stop()
    return {"tracemalloc_peak_mib_per_step": (peak - start) / 2**20,
            "tracemalloc_net_mib_per_step": (end - start) / 2**20}


# -- main ------------------------------------------------------------------------------------------
def _parser(bt: ModuleType) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto")
    parser.add_argument("--model", choices=list(bt.MODELS), default="mlp")
    parser.add_argument("--kvstore", choices=list(_KVSTORES), default="device")
    bt.add_model_arguments(parser)
    parser.add_argument("--steps", type=int, default=10, help="steps per measurement")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--top", type=int, default=15, help="functions listed per ranking")
    parser.add_argument("--json", help="write the report here")
    return parser


def _print_report(report: dict[str, Any]) -> None:
    meta, prof = report["meta"], report["profile"]
    print(f"device {meta['device']}; model {meta['args']['model']}, batch {report['batch']}, "
          f"{report['params']:,} parameters, kvstore={meta['args']['kvstore']}, {meta['args']['optimizer']}")
    print(f"{'section':<16} {'ms':>9} {'%':>6}")
    for row in report["sections"]:
        print(f"{row['section']:<16} {row['ms']:>9.2f} {row['pct']:>5.1f}%")
    print(f"{'step (synced)':<16} {report['step_ms']:>9.2f}")
    oh = report["op_overhead"]
    est = prof["estimated_overhead_ms_per_step"]
    print(f"profiled: {prof['wall_ms_per_step']:.2f} ms/step under cProfile; {prof['ops_per_step']:.0f} ops/step; "
          f"own time {prof['python_ms_per_step']:.2f} ms in Python functions (with the array operators they "
          f"use) and {prof['native_ms_per_step']:.2f} ms in directly called native functions")
    print(f"per-op overhead (1-element inputs): add {oh['add_us']:.1f} us vs raw {oh['raw_add_us']:.1f} us; "
          f"relu {oh['relu_us']:.1f} us vs raw {oh['raw_relu_us']:.1f} us; forward+backward chain "
          f"{oh['chain_us_per_op']:.1f} us/op vs raw {oh['raw_chain_us_per_op']:.1f} us/op -> "
          f"~{est:.3f} ms/step of framework overhead ({100 * est / report['step_ms']:.2f}% of the step)")
    for ranking, key in (("top_cumulative", "cumulative_ms_per_step"), ("top_own", "own_ms_per_step")):
        print(f"\n{ranking} (ms per step, calls per step)")
        for row in prof[ranking]:
            print(f"{row[key]:>9.3f} {row['calls_per_step']:>8.1f}  {row['function']}")
    print("\nallocations:", json.dumps(report["allocations"]))


def main(argv: list[str] | None = None) -> int:
    """Profile one model's training step; prints the report and writes it with ``--json``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    bt = _bench_train()
    parser = _parser(bt)
    args = parser.parse_args(argv)
    if args.image % 4 or args.image <= 0:
        parser.error(f"--image must be a positive multiple of 4 (two 2x2 poolings), got {args.image}")
    if min(args.steps, args.hidden, args.layers, args.input, args.batch, args.cnn_batch, args.top) <= 0:
        parser.error("--steps, --top and the model sizes must be positive")
    use_gpu = args.device == "gpu" or (args.device == "auto" and mx.num_gpus() > 0)
    device = mx.gpu(0) if use_gpu else mx.cpu(0)
    if args.kvstore == "nccl" and not use_gpu:
        parser.error("--kvstore nccl needs --device gpu")
    step = _Step(bt, args, device)
    step.run(args.warmup)
    sections, step_ms = time_sections(step, args.steps)
    allocations = gpu_allocations(step, args.steps) if use_gpu else cpu_allocations(step)
    profile = profile_steps(step, args.steps, args.top)
    overhead = op_overhead(device)
    profile["estimated_overhead_ms_per_step"] = profile["ops_per_step"] * overhead["overhead_us_per_op"] / 1e3
    report = {
        "meta": {"device": bt.device_name(device), "device_kind": "gpu" if use_gpu else "cpu", **bt.versions(),
                 "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "command": bt.command_line("profile_step.py", argv), "args": vars(args)},
        "batch": step.batch, "params": sum(int(np.prod(p.shape)) for p in step.net.collect_params().values()),
        "sections": sections, "step_ms": step_ms, "profile": profile, "op_overhead": overhead,
        "allocations": allocations,
    }
    _print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
