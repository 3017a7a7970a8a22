"""Optimizer step throughput: the fused arena update against per-tensor loops and PyTorch.

Parameters: ~300 float32 tensors of mixed sizes (a few large matrices, many small vectors),
``--params`` elements in all (default 100M on a GPU, 10M on CPU). For each rule (Adam,
SGD with momentum, LAMB) it times one optimizer step of

* ``fused``: mxlite's arena update, :class:`~mxlite.optimizer._arena.ArenaUpdater` as the
  Trainer drives it (one kernel launch on a GPU, two for LAMB; the NumPy twin on CPU);
* ``per-tensor``: the optimizer's own rule applied tensor by tensor (``Optimizer.update`` on
  CuPy or NumPy arrays: a launch per array operation per tensor);
* ``torch-fused`` / ``torch-foreach``: ``torch.optim.Adam/SGD(fused=True | foreach=True)`` on the
  same device, when PyTorch is installed (CPU mode: foreach only; torch.optim has no LAMB).

and reports milliseconds per step, effective GB/s (the bytes every implementation must move,
:data:`BYTES_PER_PARAM`) and that bandwidth as a percentage of a measured device-to-device copy.
Prints a table; ``--json`` writes the records with the device name and versions.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import mxlite as mx
from mxlite.optimizer._arena import ArenaUpdater
from mxlite.store import ParameterStore

# Bytes per float32 parameter every implementation must move: Adam and LAMB read w, g, m, v and
# write w, m, v; SGD-momentum reads w, g, mom and writes w, mom. (LAMB's two passes move 40 B.)
BYTES_PER_PARAM = {"adam": 28, "sgd": 20, "lamb": 28}


def tensor_sizes(total: int, count: int = 300, seed: int = 0) -> list[int]:
    """~``count`` sizes summing to ``total``: 10% of tensors hold ~90% of the elements."""
    rng = np.random.default_rng(seed)
    big = count // 10
    weights = np.concatenate([rng.uniform(0.5, 1.5, big) * 9.0 * (count - big) / big,
                              rng.uniform(0.5, 1.5, count - big)])
    sizes = np.maximum(1, (weights / weights.sum() * total).astype(np.int64))
    return [int(s) for s in rng.permutation(sizes)]


def _timeit(fn: Callable[[], None], sync: Callable[[], None], repeat: int) -> float:
    fn()
    sync()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return best


RULES = {  # rule -> (optimizer name, keyword arguments)
    "adam": ("adam", {"learning_rate": 1e-3}),
    "sgd": ("sgd", {"learning_rate": 1e-3, "momentum": 0.9}),
    "lamb": ("lamb", {"learning_rate": 1e-3, "wd": 1e-2}),
}


def bench_mxlite(device: mx.Device, sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    """The fused arena update vs the same rule applied tensor by tensor, for every rule in RULES."""
    xp = device.xp
    arena = ParameterStore().arena(device, np.float32)
    slots = [arena.add(i, (n,)) for i, n in enumerate(sizes)]
    with device.use():
        arena._data_buf[...] = xp.asarray(np.random.default_rng(1).normal(size=arena._data_buf.shape), np.float32)
        arena._grad_buf[...] = xp.asarray(np.random.default_rng(2).normal(size=arena._grad_buf.shape), np.float32)
    sync = (lambda: xp.cuda.get_current_stream().synchronize()) if device.is_gpu else (lambda: None)
    entries = list(enumerate(slots))
    total, out = sum(sizes), []
    for rule, (name, kwargs) in RULES.items():
        fused = ArenaUpdater(mx.optimizer.create(name, **kwargs), arena, 0)
        per_tensor = mx.optimizer.create(name, **kwargs)
        with device.use():
            states = [per_tensor.create_state(i, s.data._data) for i, s in entries]

        def loop(opt=per_tensor, states=states) -> None:
            for (i, s), st in zip(entries, states):
                opt.update(i, s.data._data, s.grad._data, st)

        for impl, fn in (("fused", lambda upd=fused: upd.step(entries)), ("per-tensor", loop)):
            with device.use():
                seconds = _timeit(fn, sync, repeat)
            out.append(_record(rule, f"mxlite-{impl}", seconds, total, len(sizes)))
    return out


def bench_torch(device: mx.Device, sizes: list[int], repeat: int) -> list[dict[str, Any]]:
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
    total, out = sum(sizes), []
    modes = ["fused", "foreach"] if device.is_gpu else ["foreach"]
    for rule, make in (("adam", lambda **kw: torch.optim.Adam(params, lr=1e-3, **kw)),
                       ("sgd", lambda **kw: torch.optim.SGD(params, lr=1e-3, momentum=0.9, **kw))):
        for mode in modes:
            opt = make(**{mode: True})
            seconds = _timeit(opt.step, sync, repeat)
            out.append(_record(rule, f"torch-{mode}", seconds, total, len(sizes)))
    return out


def copy_bandwidth(device: mx.Device, total: int, repeat: int) -> float:
    """Measured device-to-device copy bandwidth in GB/s (read + write of ``total`` float32)."""
    xp = device.xp
    with device.use():
        a = xp.ones(total, np.float32)
        b = xp.empty_like(a)
        sync = (lambda: xp.cuda.get_current_stream().synchronize()) if device.is_gpu else (lambda: None)
        seconds = _timeit(lambda: b.__setitem__(Ellipsis, a), sync, repeat)
    return 2 * 4 * total / seconds / 1e9


def _record(rule: str, impl: str, seconds: float, total: int, tensors: int) -> dict[str, Any]:
    return {"rule": rule, "impl": impl, "ms": 1e3 * seconds, "params": total, "tensors": tensors,
            "gb_per_s": BYTES_PER_PARAM[rule] * total / seconds / 1e9}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto")
    parser.add_argument("--params", type=int, default=None, help="total elements (default 100M GPU, 10M CPU)")
    parser.add_argument("--tensors", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", help="write the records here")
    args = parser.parse_args(argv)
    use_gpu = args.device == "gpu" or (args.device == "auto" and mx.num_gpus() > 0)
    device = mx.gpu(0) if use_gpu else mx.cpu(0)
    total = args.params or (100_000_000 if use_gpu else 10_000_000)
    sizes = tensor_sizes(total, args.tensors)
    records = bench_mxlite(device, sizes, args.repeat) + bench_torch(device, sizes, args.repeat)
    copy = copy_bandwidth(device, sum(sizes), args.repeat)
    for r in records:
        r["pct_of_copy"] = 100 * r["gb_per_s"] / copy
    print(f"device {device}, {sum(sizes):,} float32 parameters in {len(sizes)} tensors; "
          f"device copy {copy:.1f} GB/s")
    print(f"{'rule':<5} {'implementation':<18} {'ms/step':>9} {'GB/s':>8} {'% copy':>7}")
    for r in records:
        print(f"{r['rule']:<5} {r['impl']:<18} {r['ms']:>9.2f} {r['gb_per_s']:>8.1f} {r['pct_of_copy']:>6.1f}%")
    if args.json:
        meta = {"device": _device_name(device), "python": platform.python_version(), "numpy": np.__version__,
                "mxlite": mx.__version__, "copy_gb_per_s": copy, "argv": sys.argv}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "records": records}, f, indent=2)
    return 0


def _device_name(device: mx.Device) -> str:
    if not device.is_gpu:
        return f"cpu: {platform.processor() or platform.machine()}"
    props = device.xp.cuda.runtime.getDeviceProperties(device.device_id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


if __name__ == "__main__":
    sys.exit(main())
