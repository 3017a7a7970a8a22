"""Run every benchmark with ``--json`` into one folder (``make bench``), on the GPU when there is one.

Usage: ``python benchmarks/run_all.py [--out DIR] [--device auto|cpu|gpu] [--quick]``

Each benchmark runs as its own process (a crash or a missing dependency in one does not stop
the others) and writes ``DIR/<name>.json``; its printed table goes to ``DIR/<name>.txt`` and
to the terminal. ``--quick`` shrinks every size (a smoke run: minutes on a 2-core CPU). ``bench_gpu_model`` counts
costs on emulated GPUs (whatever the machine) and ``scaling_model`` then takes its compute times
from those counts (``--counts``).
Ends with a summary of what ran, how long it took and what failed; the exit status is the
number of failures. Run from the checkout: ``PYTHONPATH=.`` is set for the children.

``--proof`` (``make gpu-proof``) runs instead what a lent GPU machine has minutes for, most
important first (:func:`proof_plan`): first the warm-up, ``mxlite compile-kernels`` (every kernel variant
compiled into CuPy's kernel cache in parallel, so that no benchmark's timing or budget pays NVRTC;
``--no-warmup`` skips it where the cache is already filled, as ``make gpu-proof`` does; skipped without
a GPU), then bench_train ``--graphs`` on the small MLP (Adam) and the CNN (mxlite hybridized as CUDA
graphs against PyTorch eager and PyTorch's CUDA graph), then bench_train
at the sizes of each step of ``measured_h200.json`` (mxlite with ``kvstore=None`` against PyTorch
eager; CNN, CNN-BN and the float32 MLP in one process, then the float16 MLP; 10 steps x 3 runs), the
fused Adam and SGD at 100M parameters (bench_optimizer), the Adam MLPs, profile_step's per-op overhead
on the MLP, and bench_allreduce; then ``proof_summary.py`` prints one table of the training steps
(mxlite, torch eager, torch graph, ratio, target, met?) and the fused optimizer table, measured
against modelled. ``--budget SECONDS``
bounds the whole run: each benchmark may take what is left, at most ``--run-limit SECONDS`` (it is
stopped when that runs out), and those that no longer fit are skipped; the summary is printed
whatever ran.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)  # proof_summary, beside this file
ROOT = os.path.dirname(HERE)
# --proof's first run: every GPU kernel variant into CuPy's kernel cache (``python -m mxlite compile-kernels``)
WARMUP = "compile-kernels"


def _has_gpu() -> bool:
    try:
        import cupy  # noqa: PLC0415

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device: all mean "no GPU"
        return False


def proof_plan(device: str, quick: bool) -> list[tuple[str, str, list[str]]]:
    """(output name, benchmark script, arguments) of ``--proof``'s runs, most important first.

    First the warm-up (script :data:`WARMUP`: ``python -m mxlite compile-kernels``, not a benchmark), then the
    training steps of ``proof_summary.proof_steps`` (CUDA graphs of the small MLP and the CNN, then the eager
    CNN, CNN-BN, MLP float32 and float16, ...), steps that can share a bench_train process run in one; the fused
    Adam and SGD at 100M parameters come after the float16 MLP; profile_step and bench_allreduce last.
    """
    import proof_summary  # noqa: PLC0415 - benchmarks/ is on sys.path

    with open(proof_summary.MEASURED) as f:
        measured = json.load(f)
    dev = ["--device", device]
    timing = ["--steps", "3", "--repeat", "2", "--warmup", "1"] if quick else ["--steps", "10", "--repeat", "3",
                                                                               "--warmup", "3"]
    small = ["--hidden", "256", "--input", "256", "--batch", "32", "--image", "8", "--cnn-batch", "8"]
    runs = [(proof_summary.train_output(group), "bench_train",
             dev + proof_summary.train_arguments(group) + (small if quick else []) + ["--kvstores", "none"] + timing)
            for group in proof_summary.train_groups(proof_summary.proof_steps(measured))]
    # the fused optimizer table right after the float16 MLP: the last of the figures the open targets need
    after = next((i + 1 for i, (name, _, _) in enumerate(runs) if "mlp-fp16" in name), len(runs))
    runs.insert(after, ("bench_optimizer", "bench_optimizer",
                        dev + ["--rules", "adam,sgd", "--tensors", "300"]
                        + (["--params", "2000000", "--repeat", "2"] if quick else ["--params", "100000000",
                                                                                    "--repeat", "5"])))
    runs.insert(0, (WARMUP, WARMUP, []))
    runs += [
        ("profile_step", "profile_step", dev + ["--steps", "3"] + (["--hidden", "256", "--input", "256", "--batch",
                                                                     "32"] if quick else [])),
        ("bench_allreduce", "bench_allreduce", ["--repeat", "5", "--large-elements", "262144", "--compress-elements",
                                                "1048576"] if quick else ["--repeat", "10"]),
    ]
    return runs


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
        ("bench_gemm", ["--shapes", "256x512x512:NT", "--rounds", "1"] if quick else []),  # CPU only
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
    parser.add_argument("--proof", action="store_true", help="make gpu-proof's runs, then proof_summary.py")
    parser.add_argument("--budget", type=float, help="seconds the whole run may take (default: no bound)")
    parser.add_argument("--run-limit", type=float,
                        help="seconds one benchmark may take (default: what is left of --budget)")
    parser.add_argument("--tests-log", help="with --proof: the GPU tests' log, whose outcome the summary shows")
    parser.add_argument("--no-warmup", action="store_true",
                        help=f"with --proof: skip the {WARMUP} warm-up (the kernel cache is already filled)")
    args = parser.parse_args(argv)
    device = args.device if args.device != "auto" else ("gpu" if _has_gpu() else "cpu")
    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    wanted = set(args.only.split(",")) if args.only else None
    deadline = None if args.budget is None else time.monotonic() + args.budget
    runs = proof_plan(device, args.quick) if args.proof else [(n, n, extra) for n, extra in plan(device, args.quick)]
    summary = []
    for name, script, extra in runs:
        if wanted is not None and name not in wanted and script != WARMUP:  # --only: the warm-up still comes first
            continue
        if script == WARMUP and (args.no_warmup or device != "gpu"):
            summary.append((name, "skipped (--no-warmup)" if args.no_warmup else "skipped (no GPU)", 0.0))
            continue
        left = None if deadline is None else deadline - time.monotonic()
        if args.run_limit is not None:
            left = args.run_limit if left is None else min(left, args.run_limit)
        if left is not None and left < 5:
            summary.append((name, "skipped (budget)", 0.0))
            continue
        json_path = os.path.join(args.out, f"{name}.json")
        extra = extra + (["--json", json_path] if script != "scaling_model" else
                         ["--json", json_path, "--out", args.out])
        counts = os.path.join(args.out, "bench_gpu_model.json")
        if script == "scaling_model" and os.path.exists(counts):
            extra += ["--counts", counts]  # compute times from the costs counted just before
        if script == WARMUP:
            command = [sys.executable, "-m", "mxlite", WARMUP, *extra]
        else:
            command = [sys.executable, os.path.join(HERE, f"{script}.py"), *extra]
        print(f"== {name}: {' '.join(command[1:])}", flush=True)
        start = time.perf_counter()
        # its own process group, so that a benchmark stopped by the budget takes its children (mpiexec) with it
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
                                 start_new_session=True)
        try:
            stdout, stderr = child.communicate(timeout=left)
            status = "ok" if child.returncode == 0 else f"FAILED ({child.returncode})"
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            stdout, stderr = child.communicate()
            stderr += f"\nstopped: the --budget or --run-limit ran out after {left:.0f} s"
            status = "FAILED (budget)"
        elapsed = time.perf_counter() - start
        with open(os.path.join(args.out, f"{name}.txt"), "w") as f:
            f.write(stdout + stderr)
        print(stdout, stderr[-4000:] if status != "ok" else "", sep="", flush=True)
        summary.append((name, status, elapsed))
    print(f"device: {device}; results in {args.out}")
    for name, status, elapsed in summary:
        print(f"  {name:32s} {status:16s} {elapsed:7.1f} s")
    if args.proof:
        import proof_summary  # noqa: PLC0415

        proof_summary.main(["--bench", args.out, "--json", os.path.join(args.out, "summary.json")]
                           + (["--tests", args.tests_log] if args.tests_log else []))
    return sum(1 for _, status, _ in summary if status.startswith("FAILED"))


if __name__ == "__main__":
    sys.exit(main())
