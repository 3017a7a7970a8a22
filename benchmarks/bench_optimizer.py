"""Optimizer step throughput: the fused arena update against per-tensor loops and PyTorch.

Parameters: ~300 float32 tensors of mixed sizes (a few large matrices, many small vectors),
``--params`` elements in all (default 100M on a GPU, 10M on CPU). For each rule (``--rules``;
default: every rule with a fused update) it times one optimizer step of

* ``fused``: mxlite's arena update, :class:`~mxlite.optimizer._arena.ArenaUpdater` as the
  Trainer drives it (one kernel launch, two for LAMB and LARS: on a GPU, and on a CPU the same
  kernels compiled for the host); on CPU also ``fused numpy-twin``, the same update by the NumPy
  twins (``MXLITE_CPU_KERNELS=numpy``);
* ``per-tensor``: the optimizer's own rule applied tensor by tensor (``Optimizer.update`` on
  CuPy or NumPy arrays: a launch per array operation per tensor);
* ``torch-fused`` / ``torch-foreach``: ``torch.optim.Adam/SGD(fused=True | foreach=True)`` on the
  same device, when PyTorch is installed (CPU mode: foreach only; torch.optim has no LAMB).

and reports milliseconds per step, effective GB/s (the bytes the rule must move,
:data:`BYTES_PER_PARAM`: every operand read once and every result written once) and that
bandwidth as a percentage of a measured device-to-device copy of the parameters (``np.copyto`` /
CuPy's copy: read + write), plus fused Adam's speed relative to torch's foreach Adam.
Implementations are interleaved, ``--repeat`` rounds of each (the copy too), and the median round
is reported, so a machine shared with other work slows all of them alike. ``--chunks 4096,16384``
also times the fused CPU twins at other chunk sizes (``mxlite.optimizer._fused.TWIN_CHUNK``).
Prints a table; ``--json`` writes the records with the device name and versions.

It also prints (and writes under ``modelled``) each rule's bandwidth on an H200 as the roofline model
gives it (``benchmarks/roofline.py: fused_fraction``, from each kernel's counted bytes and registers and
the block schedule over these tensors) for the 16-byte kernels and for the element-at-a-time ones
measured before: a model, not a timing. ``--model-only`` prints just that.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import mxlite as mx
from mxlite.device.kernels import CPU_KERNELS_ENV
from mxlite.optimizer import _fused
from mxlite.optimizer._arena import ArenaUpdater
from mxlite.store import ParameterStore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import roofline  # noqa: E402 - a sibling script

# Bytes per float32 parameter every implementation must move: read w, g and each state, write w
# and each state (4 B each). Adam, AdamW, AdaDelta, FTRL, LAMB: 2 states; SGD, NAG, Signum,
# RMSProp (not centred), AdaGrad, LARS (with momentum): 1 state. (LAMB's and LARS's norms take
# a second read of some operands, not counted.)
BYTES_PER_PARAM = {"adam": 28, "adamw": 28, "sgd": 20, "nag": 20, "rmsprop": 20, "adagrad": 20, "adadelta": 28,
                   "signum": 20, "ftrl": 28, "lamb": 28, "lars": 20}
# LAMB and LARS need every parameter's norms before any of its elements can be updated, so on a
# parameter larger than the caches they must read some operands twice: LARS reads w and g for the
# norms, then w, g, mom and writes w, mom (28 B); LAMB's first pass reads w, g, m, v and writes m, v,
# its second reads w, m, v and writes w (40 B; recomputing m and v instead would read g twice: 44 B).
# Reported as a second percentage.
TWO_PASS_BYTES = {"lamb": 40, "lars": 28}


def modelled(rules: list[str], sizes: list[int]) -> list[dict[str, Any]]:
    """Per rule, the roofline model's % of the device copy on an H200 (float32 weights, no master), for the
    16-byte kernels (``vector``) and the element-at-a-time ones (``scalar``): the rule's kernels' bytes
    (:func:`roofline.kernel_traffic`) over their modelled bandwidths (:func:`roofline.fused_fraction`), on
    the rule's minimal bytes (:data:`BYTES_PER_PARAM`) and, for LAMB and LARS, their two-pass bytes."""
    total = sum(sizes)
    f32 = np.zeros(0, np.float32)
    out = []
    for rule in rules:
        name, kwargs = RULES[rule]
        opt = mx.optimizer.create(name, **kwargs)
        fused = _fused.fused_rule(opt, np.float32)
        states = [f32] * len(fused.states(opt))
        row: dict[str, Any] = {"rule": rule, "kernels": list(fused.kernels), "gpu": "h200"}
        for geometry, key in ((roofline.FUSED_VECTOR, "vector"), (roofline.FUSED_SCALAR, "scalar")):
            seconds = 0.0
            for kernel in fused.kernels:
                traffic = roofline.KERNEL_TRAFFIC[kernel]
                buffers = [f32, *([f32] if traffic.grad else []), *(states if traffic.states else []), None]
                if kernel == "lars_norms":  # reads the weight and the gradient only
                    buffers = [f32, f32, None]
                element, _ = roofline.kernel_traffic(kernel, buffers, total)
                fraction = roofline.fused_fraction(kernel, roofline.read_bytes_per_element(kernel, buffers), sizes,
                                                   geometry)
                seconds += element / (roofline.H200_COPY_BYTES_PER_S * fraction)
            row[f"{key}_ms"] = 1e3 * seconds
            row[f"{key}_pct_of_copy"] = 100 * BYTES_PER_PARAM[rule] * total / seconds / roofline.H200_COPY_BYTES_PER_S
            if rule in TWO_PASS_BYTES:
                row[f"{key}_pct_of_copy_two_pass"] = row[f"{key}_pct_of_copy"] * TWO_PASS_BYTES[rule] / \
                    BYTES_PER_PARAM[rule]
        out.append(row)
    return out


def print_modelled(rows: list[dict[str, Any]], total: int, tensors: int) -> None:
    print(f"modelled on an H200 (benchmarks/roofline.py; not a timing), {total:,} float32 parameters in {tensors} "
          f"tensors, % of the device copy ({roofline.H200_COPY_BYTES_PER_S / 1e9:,.0f} GB/s):")
    print(f"{'rule':<8} {'16-byte ms':>10} {'% copy':>7} {'2-pass':>7} {'scalar ms':>10} {'% copy':>7} {'2-pass':>7}")
    for r in rows:
        two = [f"{r[k]:>6.1f}%" if k in r else " " * 7 for k in ("vector_pct_of_copy_two_pass",
                                                                  "scalar_pct_of_copy_two_pass")]
        print(f"{r['rule']:<8} {r['vector_ms']:>10.2f} {r['vector_pct_of_copy']:>6.1f}% {two[0]} "
              f"{r['scalar_ms']:>10.2f} {r['scalar_pct_of_copy']:>6.1f}% {two[1]}")


def tensor_sizes(total: int, count: int = 300, seed: int = 0) -> list[int]:
    """~``count`` sizes summing to ``total``: 10% of tensors hold ~90% of the elements."""
    rng = np.random.default_rng(seed)
    big = count // 10
    weights = np.concatenate([rng.uniform(0.5, 1.5, big) * 9.0 * (count - big) / big,
                              rng.uniform(0.5, 1.5, count - big)])
    sizes = np.maximum(1, (weights / weights.sum() * total).astype(np.int64))
    return [int(s) for s in rng.permutation(sizes)]


RULES = {  # rule -> (optimizer name, keyword arguments): the forms with a fused update
    "adam": ("adam", {"learning_rate": 1e-3}),
    "sgd": ("sgd", {"learning_rate": 1e-3, "momentum": 0.9}),
    "lamb": ("lamb", {"learning_rate": 1e-3, "wd": 1e-2}),
    "adamw": ("adamw", {"learning_rate": 1e-3, "wd": 1e-2}),
    "nag": ("nag", {"learning_rate": 1e-3, "momentum": 0.9}),
    "rmsprop": ("rmsprop", {"learning_rate": 1e-3}),
    "adagrad": ("adagrad", {"learning_rate": 1e-2}),
    "adadelta": ("adadelta", {"learning_rate": 1.0}),
    "signum": ("signum", {"learning_rate": 1e-3, "momentum": 0.9}),
    "ftrl": ("ftrl", {"learning_rate": 1e-2}),
    "lars": ("lars", {"learning_rate": 1e-2, "momentum": 0.9}),
}


class Case:
    """One implementation to time: ``fn`` runs one optimizer step; ``sync`` waits for the device."""

    def __init__(self, rule: str, impl: str, fn: Callable[[], None], sync: Callable[[], None],
                 setup: Callable[[], None] | None = None) -> None:
        self.rule, self.impl, self.fn, self.sync, self.setup = rule, impl, fn, sync, setup
        self.times: list[float] = []

    def run(self) -> None:
        if self.setup is not None:
            self.setup()
        t0 = time.perf_counter()
        self.fn()
        self.sync()
        self.times.append(time.perf_counter() - t0)


def _setter(mode: str = "auto", twin_chunk: int | None = None) -> Callable[[], None]:
    """Before each run: the CPU update's mode (compiled kernels or NumPy twins) and the twins' chunk size."""
    def setup() -> None:
        os.environ[CPU_KERNELS_ENV] = mode
        if twin_chunk is not None:
            _fused.TWIN_CHUNK = twin_chunk
    return setup


def mxlite_cases(device: mx.Device, sizes: list[int], rules: list[str], chunks: list[int]) -> list[Case]:
    """The fused arena update (on CPU: compiled and NumPy twin, at each chunk size) and the same rule
    applied tensor by tensor."""
    xp = device.xp
    arena = ParameterStore().arena(device, np.float32)
    slots = [arena.add(i, (n,)) for i, n in enumerate(sizes)]
    with device.use():
        arena.data_buf[...] = xp.asarray(np.random.default_rng(1).normal(size=arena.data_buf.shape), np.float32)
        arena.grad_buf[...] = xp.asarray(np.random.default_rng(2).normal(size=arena.grad_buf.shape), np.float32)
    sync = (lambda: xp.cuda.get_current_stream().synchronize()) if device.is_gpu else (lambda: None)
    entries = list(enumerate(slots))
    default = getattr(_fused, "TWIN_CHUNK", None)  # None: a version of mxlite without chunked twins
    compiled_cpu = hasattr(_fused, "compiled_on_cpu")  # False: a version without the compiled CPU update
    out: list[Case] = []
    for rule in rules:
        name, kwargs = RULES[rule]

        def updater(name=name, kwargs=kwargs) -> ArenaUpdater:  # one per case: plans keep their chunk size
            return ArenaUpdater(mx.optimizer.create(name, **kwargs), arena, 0)

        fused = updater()
        per_tensor = mx.optimizer.create(name, **kwargs)
        with device.use():
            states = [per_tensor.create_state(i, s.data._data) for i, s in entries]

        def loop(opt=per_tensor, states=states) -> None:
            with device.use():
                for (i, s), st in zip(entries, states):
                    opt.update(i, s.data._data, s.grad._data, st)

        def stepper(upd: ArenaUpdater) -> Callable[[], None]:
            def step() -> None:
                with device.use():
                    upd.step(entries)
            return step

        out.append(Case(rule, "mxlite-fused", stepper(fused), sync, _setter("auto", default)))
        if not device.is_gpu and compiled_cpu:
            out.append(Case(rule, "mxlite-fused numpy-twin", stepper(updater()), sync, _setter("numpy", default)))
        if not device.is_gpu and default is not None:
            out += [Case(rule, f"mxlite-fused numpy chunk={c}", stepper(updater()), sync, _setter("numpy", c))
                    for c in chunks if c != default]
        out.append(Case(rule, "mxlite-per-tensor", loop, sync, _setter("auto", default)))
    return out


def torch_cases(device: mx.Device, sizes: list[int], rules: list[str]) -> list[Case]:
    """``torch.optim`` Adam/SGD with fused=True (GPU) and foreach=True on the same device."""
    try:
        import torch  # noqa: PLC0415 - optional
    except ImportError:
        return []
    dev = f"cuda:{device.device_id}" if device.is_gpu else "cpu"
    params = [torch.nn.Parameter(torch.randn(n, device=dev)) for n in sizes]
    for p in params:
        p.grad = torch.randn_like(p)
    sync = torch.cuda.synchronize if device.is_gpu else (lambda: None)
    modes = ["fused", "foreach"] if device.is_gpu else ["foreach"]
    out = []
    for rule, make in (("adam", lambda **kw: torch.optim.Adam(params, lr=1e-3, **kw)),
                       ("sgd", lambda **kw: torch.optim.SGD(params, lr=1e-3, momentum=0.9, **kw))):
        if rule in rules:
            out += [Case(rule, f"torch-{mode}", make(**{mode: True}).step, sync) for mode in modes]
    return out


def copy_case(device: mx.Device, total: int) -> Case:
    """A device-to-device copy of ``total`` float32 (read + write): the bandwidth the rules are compared with."""
    xp = device.xp
    with device.use():
        a = xp.ones(total, np.float32)
        b = xp.empty_like(a)
    sync = (lambda: xp.cuda.get_current_stream().synchronize()) if device.is_gpu else (lambda: None)

    def copy() -> None:
        with device.use():
            xp.copyto(b, a)

    return Case("copy", "copy", copy, sync)


def measure(cases: list[Case], repeat: int) -> None:
    """One warm-up call of each case, then ``repeat`` interleaved rounds (every case once per round)."""
    for c in cases:
        c.run()
        c.times.clear()
    for _ in range(repeat):
        for c in cases:
            c.run()


def _record(rule: str, impl: str, seconds: float, total: int, tensors: int) -> dict[str, Any]:
    return {"rule": rule, "impl": impl, "ms": 1e3 * seconds, "params": total, "tensors": tensors,
            "gb_per_s": BYTES_PER_PARAM[rule] * total / seconds / 1e9}


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto")
    parser.add_argument("--params", type=int, default=None, help="total elements (default 100M GPU, 10M CPU)")
    parser.add_argument("--tensors", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5, help="interleaved rounds (the median is reported)")
    parser.add_argument("--rules", default=",".join(RULES), help=f"comma-separated, from: {', '.join(RULES)}")
    parser.add_argument("--chunks", type=_ints, default=[], help="also time the CPU twins at these chunk sizes")
    parser.add_argument("--json", help="write the records here")
    parser.add_argument("--model-only", action="store_true", help="print the modelled H200 table only (no timing)")
    args = parser.parse_args(argv)
    rules = [r.strip() for r in args.rules.split(",") if r.strip()]
    unknown = sorted(set(rules) - set(RULES))
    if unknown:
        parser.error(f"unknown rules {unknown}; known: {', '.join(RULES)}")
    use_gpu = args.device == "gpu" or (args.device == "auto" and mx.num_gpus() > 0)
    device = mx.gpu(0) if use_gpu else mx.cpu(0)
    total = args.params or (100_000_000 if use_gpu or args.model_only else 10_000_000)
    sizes = tensor_sizes(total, args.tensors)
    model = modelled(rules, sizes)
    if args.model_only:
        print_modelled(model, sum(sizes), len(sizes))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"meta": {"argv": sys.argv}, "modelled": model}, f, indent=2)
        return 0
    default_chunk = getattr(_fused, "TWIN_CHUNK", None)
    mode = os.environ.get(CPU_KERNELS_ENV)
    cases = mxlite_cases(device, sizes, rules, args.chunks) + torch_cases(device, sizes, rules)
    copy_run = copy_case(device, sum(sizes))
    try:
        measure([copy_run, *cases], args.repeat)
    finally:
        if default_chunk is not None:
            _fused.TWIN_CHUNK = default_chunk
        if mode is None:
            os.environ.pop(CPU_KERNELS_ENV, None)
        else:
            os.environ[CPU_KERNELS_ENV] = mode
    copy = 2 * 4 * sum(sizes) / statistics.median(copy_run.times) / 1e9
    records = [_record(c.rule, c.impl, statistics.median(c.times), sum(sizes), len(sizes)) for c in cases]
    for r in records:
        r["pct_of_copy"] = 100 * r["gb_per_s"] / copy
        if r["rule"] in TWO_PASS_BYTES:
            r["pct_of_copy_two_pass"] = r["pct_of_copy"] * TWO_PASS_BYTES[r["rule"]] / BYTES_PER_PARAM[r["rule"]]
    ms = {(r["rule"], r["impl"]): r["ms"] for r in records}
    vs_torch = {rule: ms[(rule, "torch-foreach")] / ms[(rule, "mxlite-fused")] for rule in ("adam", "sgd")
                if (rule, "torch-foreach") in ms and (rule, "mxlite-fused") in ms}
    print(f"device {device}, {sum(sizes):,} float32 parameters in {len(sizes)} tensors; "
          f"device copy {copy:.1f} GB/s; medians of {args.repeat} interleaved rounds")
    print(f"{'rule':<8} {'implementation':<32} {'ms/step':>9} {'GB/s':>8} {'% copy':>7} {'2-pass':>7}")
    for r in records:
        two = f"{r['pct_of_copy_two_pass']:>6.1f}%" if "pct_of_copy_two_pass" in r else ""
        print(f"{r['rule']:<8} {r['impl']:<32} {r['ms']:>9.2f} {r['gb_per_s']:>8.1f} {r['pct_of_copy']:>6.1f}% {two}")
    for rule, ratio in vs_torch.items():
        print(f"{rule}: mxlite fused is {ratio:.2f}x the speed of torch foreach")
    print_modelled(model, sum(sizes), len(sizes))
    if args.json:
        meta = {"device": _device_name(device), "python": platform.python_version(), "numpy": np.__version__,
                "mxlite": mx.__version__, "copy_gb_per_s": copy, "twin_chunk": default_chunk,
                "cpu_update": "compiled" if not use_gpu and _fused.compiled_on_cpu() else "numpy twin",
                "fused_vs_torch_foreach": vs_torch, "argv": sys.argv}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "records": records, "modelled": model}, f, indent=2)
    return 0


def _device_name(device: mx.Device) -> str:
    if not device.is_gpu:
        return f"cpu: {platform.processor() or platform.machine()}"
    props = device.xp.cuda.runtime.getDeviceProperties(device.device_id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


if __name__ == "__main__":
    sys.exit(main())
