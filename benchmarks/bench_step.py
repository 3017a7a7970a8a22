"""Training-step throughput of the first Trainer: samples/s and the share of the step spent in
``trainer.step`` (gradient sum + update), for an MLP on 1, 2 and 4 devices.

Usage: ``python benchmarks/bench_step.py [--devices cpu|gpu] [--json out.json]``. CPU devices are
virtual (one process, NumPy), so more devices means the same work cut into more slices: the
figure shows the per-device overhead of the data-parallel machinery, not a speed-up.
Prints a table and writes JSON (one record per configuration).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import numpy as np

import mxlite as mx


def bench(devices: list[mx.Device], hidden: int, batch: int, steps: int, warmup: int = 3) -> dict:
    """Time ``steps`` training steps of a 3-layer MLP; returns figures in seconds and samples/s."""
    mx.random.seed(0)
    net = mx.nn.Sequential(mx.nn.Dense(hidden, activation="relu"), mx.nn.Dense(hidden, activation="relu"),
                           mx.nn.Dense(10))
    net.initialize(mx.init.Xavier(), device=devices)
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 1e-3})
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, hidden)).astype(np.float32)
    y = rng.integers(0, 10, size=batch)
    xs, ys = mx.split_and_load(x, devices), mx.split_and_load(y, devices)
    step_time = total = 0.0
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        with mx.autograd.record():
            losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
        mx.autograd.backward(losses)
        t1 = time.perf_counter()
        trainer.step(batch)
        for d in devices:
            net.collect_params()["0.weight"].data(d).wait_to_read()
        t2 = time.perf_counter()
        if i >= warmup:
            step_time += t2 - t1
            total += t2 - t0
    n_params = sum(int(np.prod(p.shape)) for p in net.collect_params().values())
    return {"devices": [str(d) for d in devices], "hidden": hidden, "batch": batch, "params": n_params,
            "steps": steps, "seconds_per_step": total / steps, "trainer_step_seconds": step_time / steps,
            "samples_per_s": batch * steps / total, "trainer_step_share": step_time / total}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", help="write the records here")
    args = parser.parse_args(argv)
    make = mx.cpu if args.devices == "cpu" else mx.gpu
    counts = [1, 2, 4] if args.devices == "cpu" else [n for n in (1, 2, 4, 8) if n <= mx.num_gpus()]
    records = [bench([make(i) for i in range(n)], args.hidden, args.batch, args.steps) for n in counts]
    print(f"{'devices':>8} {'params':>9} {'batch':>6} {'ms/step':>9} {'step() ms':>10} {'step share':>11} "
          f"{'samples/s':>10}")
    for r in records:
        print(f"{len(r['devices']):>8} {r['params']:>9} {r['batch']:>6} {1e3 * r['seconds_per_step']:>9.2f} "
              f"{1e3 * r['trainer_step_seconds']:>10.2f} {100 * r['trainer_step_share']:>10.1f}% "
              f"{r['samples_per_s']:>10.0f}")
    if args.json:
        meta = {"python": platform.python_version(), "numpy": np.__version__, "mxlite": mx.__version__,
                "machine": platform.machine(), "argv": sys.argv}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "records": records}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
