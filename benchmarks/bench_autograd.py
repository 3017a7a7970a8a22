"""The autograd engine's own cost, and what a gradient penalty costs on top of a plain step.

Two measurements on CPU device 0 (NumPy), each the median of ``--repeat`` timed runs:

* ``engine``: a chain of ``--ops`` tiny elementwise ops (tanh, multiply, add on 16 float32 numbers)
  recorded and back-propagated: microseconds per op in the recorded forward and in ``backward``.
  The arrays are so small that the figure is the engine's Python overhead per node, the part of
  every training step that grows with the number of ops rather than their size.
* ``penalty``: a small MLP critic (Dense-tanh-Dense-tanh-Dense) on a ``--batch`` batch: the plain
  step (forward, backward) against a WGAN-GP step (forward, ``autograd.grad(..., create_graph=True)``
  w.r.t. the input, the penalty ``(||grad||_2 - 1)^2`` and ``backward`` through both). Skipped when
  the installed mxlite has no ``autograd.grad``.

Usage: ``python benchmarks/bench_autograd.py [--ops 300] [--repeat 15] [--json out.json]``.
Prints a table and writes JSON (one record per measurement).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import numpy as np

import mxlite as mx


def _median_seconds(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_engine(n_ops: int, repeat: int) -> dict:
    """Recorded forward and backward of a chain of ``n_ops`` tiny ops: seconds per op."""
    x = mx.array(np.linspace(-1.0, 1.0, 16, dtype=np.float32))
    x.attach_grad()
    c = mx.array(np.full(16, 0.5, dtype=np.float32))
    box: dict = {}

    def forward() -> None:
        y = x
        with mx.autograd.record():
            for _ in range(n_ops // 3):
                y = mx.nd.tanh(y) * c + x
            box["loss"] = y.sum()

    def backward_seconds() -> float:  # the backward alone, timed after an untimed forward
        forward()
        t0 = time.perf_counter()
        box["loss"].backward()
        return time.perf_counter() - t0

    fwd = _median_seconds(forward, repeat)
    backward_seconds()  # warm-up
    back = statistics.median(backward_seconds() for _ in range(repeat))
    ops = 3 * (n_ops // 3) + 1
    return {"name": "engine", "ops": ops, "forward_us_per_op": 1e6 * fwd / ops,
            "backward_us_per_op": 1e6 * back / ops}


def bench_penalty(batch: int, hidden: int, repeat: int) -> dict | None:
    """A plain MLP-critic step against a WGAN-GP step on the same critic: seconds per step."""
    if not hasattr(mx.autograd, "grad"):
        return None
    mx.random.seed(0)
    net = mx.gluon.nn.Sequential()
    net.add(mx.gluon.nn.Dense(hidden, activation="tanh"), mx.gluon.nn.Dense(hidden, activation="tanh"),
            mx.gluon.nn.Dense(1))
    net.initialize(mx.init.Xavier())
    rng = np.random.default_rng(0)
    x = mx.array(rng.normal(size=(batch, hidden)).astype(np.float32))

    def plain() -> None:
        with mx.autograd.record():
            loss = net(x).mean()
        loss.backward()

    def penalty() -> None:
        xi = x.copy()
        xi.attach_grad()
        with mx.autograd.record():
            score = net(xi)
            g = mx.autograd.grad(score, [xi], head_grads=[mx.nd.ones_like(score)], create_graph=True)[0]
            norm = mx.nd.sqrt((g * g).sum(axis=1) + 1e-12)
            loss = score.mean() + 10.0 * ((norm - 1.0) ** 2).mean()
        loss.backward()

    t_plain = _median_seconds(plain, repeat)
    t_gp = _median_seconds(penalty, repeat)
    return {"name": "penalty", "batch": batch, "hidden": hidden, "plain_ms": 1e3 * t_plain,
            "penalty_ms": 1e3 * t_gp, "ratio": t_gp / t_plain}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=300, help="ops in the engine's chain")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=15, help="timed runs; the median is reported")
    parser.add_argument("--json", help="write the records here")
    args = parser.parse_args(argv)
    records = [bench_engine(args.ops, args.repeat)]
    gp = bench_penalty(args.batch, args.hidden, args.repeat)
    e = records[0]
    print(f"engine: {e['ops']} tiny ops, {e['forward_us_per_op']:.2f} us/op recorded forward, "
          f"{e['backward_us_per_op']:.2f} us/op backward")
    if gp is None:
        print("penalty: skipped (this mxlite has no autograd.grad)")
    else:
        records.append(gp)
        print(f"penalty: MLP critic batch {gp['batch']} hidden {gp['hidden']}: plain step {gp['plain_ms']:.2f} ms, "
              f"gradient-penalty step {gp['penalty_ms']:.2f} ms ({gp['ratio']:.2f}x)")
    if args.json:
        meta = {"python": platform.python_version(), "numpy": np.__version__, "mxlite": mx.__version__,
                "machine": platform.machine(), "argv": sys.argv}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "records": records}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
