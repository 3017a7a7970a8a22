"""How much a training step slows down on a busy machine: mxlite against PyTorch on CPU, alone and beside a competitor.

For each model (``--models lstm_lm,cnn``: bench_train.py's word LM and small CNN, at ``--cnn-batch``
64 by default) and each framework (mxlite, PyTorch when installed), a child process trains one fixed
batch: ``--warmup`` steps, then ``--repeat`` runs of ``--steps`` steps, and reports each run's time per
step. In each of ``--rounds`` rounds every child runs twice: with the machine as it is ("alone"), and
again while a competitor keeps every core this process may use busy: one process per core, each
looping over NumPy elementwise arithmetic on one thread (``OPENBLAS_NUM_THREADS=1``), what a data-
loading or preprocessing neighbour does. The slowdown factor is the busy median over the alone median
(runs pooled over the rounds); the target is mxlite's factor no larger than PyTorch's. The alone and
busy runs of the two frameworks alternate (mxlite alone, PyTorch alone, then both busy, round after
round) so that drift of the machine's own load affects both alike: "alone" means no competitor of
ours, not an idle machine.

Threads: each library at its default (``--threads 0``: mxlite's ``mx.get_num_threads()``, PyTorch's
OpenMP count), the case that suffers when cores are shared; ``--threads N`` sets both to N.

Usage::

    PYTHONPATH=. python3 benchmarks/bench_busy.py [--models lstm_lm,cnn] [--repeat 5] [--json busy.json]

Prints a table (ms per step alone and busy, the spread of each, the slowdown factor) and, with
``--json``, writes the records with the machine, library versions and the command line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FRAMEWORKS = ("mxlite", "torch")
_COMPETITOR = """
import os, sys
import numpy as np
a = np.random.default_rng(int(sys.argv[1])).random(1 << 16)
b = np.empty_like(a)
while True:  # elementwise arithmetic on one core, until killed
    np.multiply(a, 1.000001, out=b)
    np.add(b, 0.5, out=a)
    np.sqrt(a, out=b)
"""


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Competitor:
    """One busy process per core (each a single-threaded NumPy loop), started and stopped with ``with``."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self.children: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Competitor:
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.children = [subprocess.Popen([sys.executable, "-c", _COMPETITOR, str(k)], env=env)
                         for k in range(self.processes)]
        time.sleep(1.0)  # every competitor running before the measurement starts
        return self

    def __exit__(self, *exc: Any) -> None:
        for child in self.children:
            child.kill()
        for child in self.children:
            child.wait()


def _child(framework: str, model: str, args: argparse.Namespace) -> dict[str, Any]:
    """In a child process: train ``model`` with ``framework``; per-step seconds of each run."""
    sys.path.insert(0, HERE)
    import bench_train as bt  # noqa: PLC0415 - benchmarks/ is not a package

    import mxlite as mx  # noqa: PLC0415

    train_args = bt._parser().parse_args(["--device", "cpu", "--cnn-batch", str(args.cnn_batch),
                                          *shlex.split(args.train_args)])
    bt.apply_threads(args.threads)
    device = mx.cpu(0)
    setup = bt.setup_mxlite(model, device, None, train_args) if framework == "mxlite" else bt.setup_torch(
        model, device, train_args)
    bt.warm_up(setup, args.warmup)
    runs = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            setup.step()
        runs.append((time.perf_counter() - t0) / args.steps)
    versions = bt.versions()
    threads = mx.get_num_threads() if framework == "mxlite" else versions["torch_threads"]
    return {"runs": runs, "threads": threads, "versions": versions}


def _run_child(framework: str, model: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, os.path.abspath(__file__), "--child", framework, "--models", model,
               "--warmup", str(args.warmup), "--steps", str(args.steps), "--repeat", str(args.repeat),
               "--threads", str(args.threads), "--cnn-batch", str(args.cnn_batch), "--train-args", args.train_args]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{framework} {model} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _summary(runs: list[float]) -> tuple[float, float]:
    """(median ms per step, spread %: (slowest - fastest) / median)."""
    median = statistics.median(runs)
    return 1e3 * median, 100 * (max(runs) - min(runs)) / median


def measure(args: argparse.Namespace, frameworks: list[str], models: list[str]) -> list[dict[str, Any]]:
    """Alone and busy runs of every (model, framework); one record each with the slowdown factor."""
    records = []
    for model in models:
        alone: dict[str, list[float]] = {f: [] for f in frameworks}
        busy: dict[str, list[float]] = {f: [] for f in frameworks}
        threads: dict[str, int] = {}
        for _ in range(args.rounds):  # alternate, so that drift of the machine's own load reaches both alike
            for f in frameworks:
                child = _run_child(f, model, args)
                alone[f] += child["runs"]
                threads[f] = child["threads"]
            with Competitor(args.competitors):
                for f in frameworks:
                    busy[f] += _run_child(f, model, args)["runs"]
        for f in frameworks:
            a_ms, a_spread = _summary(alone[f])
            b_ms, b_spread = _summary(busy[f])
            records.append({"model": model, "framework": f, "threads": threads[f],
                            "alone_ms": a_ms, "alone_spread_pct": a_spread, "busy_ms": b_ms,
                            "busy_spread_pct": b_spread, "slowdown": b_ms / a_ms,
                            "alone_runs_ms": [1e3 * t for t in alone[f]],
                            "busy_runs_ms": [1e3 * t for t in busy[f]]})
    return records


def _print(records: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"{args.competitors} competitor processes (one busy NumPy loop per core); {args.rounds} rounds of "
          f"{args.repeat} runs of {args.steps} steps after {args.warmup} warm-up steps; threads: "
          f"{'library defaults' if args.threads == 0 else args.threads}")
    print(f"{'model':<8} {'framework':<9} {'threads':>7} {'alone ms':>9} {'spread':>7} {'busy ms':>9} {'spread':>7} "
          f"{'slowdown':>8}")
    for r in records:
        print(f"{r['model']:<8} {r['framework']:<9} {r['threads']:>7} {r['alone_ms']:>9.1f} "
              f"{r['alone_spread_pct']:>6.0f}% {r['busy_ms']:>9.1f} {r['busy_spread_pct']:>6.0f}% "
              f"{r['slowdown']:>7.2f}x")
    by = {(r["model"], r["framework"]): r["slowdown"] for r in records}
    for model in dict.fromkeys(r["model"] for r in records):
        if (model, "torch") in by:
            verdict = "met" if by[(model, "mxlite")] <= by[(model, "torch")] else "NOT met"
            print(f"target {model}: mxlite slowdown {by[(model, 'mxlite')]:.2f}x <= PyTorch's "
                  f"{by[(model, 'torch')]:.2f}x: {verdict}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="lstm_lm,cnn", help="bench_train.py models, comma-separated")
    parser.add_argument("--steps", type=int, default=3, help="steps per timed run")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs (the median is reported)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2,
                        help="alone-then-busy rounds; the runs of all rounds are pooled")
    parser.add_argument("--cnn-batch", type=int, default=64, help="CNN batch")
    parser.add_argument("--threads", type=int, default=0, help="threads for both libraries; 0: their defaults")
    parser.add_argument("--competitors", type=int, default=_cores(), help="busy processes (default: one per core)")
    parser.add_argument("--no-torch", action="store_true", help="mxlite only")
    parser.add_argument("--train-args", default="", help="more bench_train.py size options, e.g. '--lm-hidden 512'")
    parser.add_argument("--json", help="write the records here")
    parser.add_argument("--child", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with the internal ``--child``, one measurement); 0 on success."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    args = parser.parse_args(argv)
    if min(args.steps, args.repeat, args.cnn_batch, args.rounds) <= 0 or args.warmup < 0 or args.threads < 0:
        parser.error("--steps, --repeat, --rounds and --cnn-batch must be positive; --warmup and --threads at least 0")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if args.child:
        print(json.dumps(_child(args.child, models[0], args)))
        return 0
    sys.path.insert(0, HERE)
    import bench_train as bt  # noqa: PLC0415

    unknown = [m for m in models if m not in bt.MODELS]
    if unknown or not models:
        parser.error(f"--models takes bench_train.py's models ({', '.join(bt.MODELS)}), got {args.models!r}")
    frameworks = ["mxlite"] + ([] if args.no_torch or bt.versions()["torch"] is None else ["torch"])
    records = measure(args, frameworks, models)
    _print(records, args)
    if args.json:
        meta = {"device": bt.device_name(bt.mx.cpu(0)), **bt.versions(), "competitors": args.competitors,
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "command": bt.command_line("bench_busy.py", argv), "args": vars(args)}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "records": records}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
