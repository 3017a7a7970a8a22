"""Run every benchmark with ``--json`` into one folder (``make bench``), on the GPU when there is one.

Usage: ``python benchmarks/run_all.py [--out DIR] [--device auto|cpu|gpu] [--quick]``

Each benchmark runs as its own process (a crash or a missing dependency in one does not stop
the others) and writes ``DIR/<name>.json``; its printed table goes to ``DIR/<name>.txt`` and
to the terminal. ``--quick`` shrinks every size (a smoke run: minutes on a 2-core CPU). ``bench_gpu_model`` counts
costs on emulated GPUs (whatever the machine) and ``scaling_model`` then takes its compute times
from those counts (``--counts``).
Ends with a summary of what ran, how long it took and what failed; the exit status is the
number of failures. Run from the checkout: ``PYTHONPATH=.`` is set for the children.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _has_gpu() -> bool:
    try:
        import cupy  # noqa: PLC0415

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device: all mean "no GPU"
        return False


def plan(device: str, quick: bool) -> list[tuple[str, list[str]]]:
    """(benchmark name, arguments) of every run, for ``device`` ('cpu' or 'gpu')."""
    dev = ["--device", device]
    small_train = ["--hidden", "512", "--input", "512", "--batch", "128", "--cnn-batch", "32", "--steps", "5",
                   "--warmup", "2", "--repeat", "3"]
    runs = [
        ("bench_optimizer", dev + (["--params", "2000000", "--repeat", "2"] if quick or device == "cpu" else [])),
        ("bench_step", ["--devices", device] + (["--steps", "5"] if quick else [])),
        ("bench_conv", ["--repeat", "2", "--cases", "conv2d 32->64,max_pool2d 2x2"] if quick else []),  # CPU only
        ("bench_allreduce", ["--repeat", "5", "--large-elements", "262144"] if quick else []),
        ("bench_train", dev + (small_train if quick or device == "cpu" else [])),
        ("profile_step", dev + (["--hidden", "512", "--input", "512", "--batch", "128", "--steps", "3"]
                                if quick or device == "cpu" else [])),
        # Counted costs on emulated GPUs (a real GPU is not needed, nor used): MXLITE_EMULATE_GPUS=4 unless set.
        ("bench_gpu_model", ["--models", "mlp", "--gpus", "1,2", "--codecs", "none,fp16", "--no-rules"]
         if quick else []),
        ("scaling_model", ["--no-plot"] if quick else []),
    ]
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "out", "bench"), help="folder for the JSON and tables")
    parser.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--only", help="comma-separated benchmark names to run (default: all)")
    args = parser.parse_args(argv)
    device = args.device if args.device != "auto" else ("gpu" if _has_gpu() else "cpu")
    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    wanted = set(args.only.split(",")) if args.only else None
    summary = []
    for name, extra in plan(device, args.quick):
        if wanted is not None and name not in wanted:
            continue
        json_path = os.path.join(args.out, f"{name}.json")
        extra = extra + (["--json", json_path] if name != "scaling_model" else
                         ["--json", json_path, "--out", args.out])
        counts = os.path.join(args.out, "bench_gpu_model.json")
        if name == "scaling_model" and os.path.exists(counts):
            extra += ["--counts", counts]  # compute times from the costs counted just before
        command = [sys.executable, os.path.join(HERE, f"{name}.py"), *extra]
        print(f"== {name}: {' '.join(command[1:])}", flush=True)
        start = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
        elapsed = time.perf_counter() - start
        with open(os.path.join(args.out, f"{name}.txt"), "w") as f:
            f.write(result.stdout + result.stderr)
        print(result.stdout, result.stderr[-4000:] if result.returncode else "", sep="", flush=True)
        summary.append((name, result.returncode, elapsed))
    print(f"device: {device}; results in {args.out}")
    for name, code, elapsed in summary:
        print(f"  {name:18s} {'ok' if code == 0 else f'FAILED ({code})':12s} {elapsed:7.1f} s")
    return sum(1 for _, code, _ in summary if code != 0)


if __name__ == "__main__":
    sys.exit(main())
