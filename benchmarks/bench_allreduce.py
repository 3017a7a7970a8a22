"""Gradient all-reduce: one collective per tensor against mxlite's buckets (CPU over MPI; GPU over NCCL).

Usage: ``python benchmarks/bench_allreduce.py [--json out.json]``. Without an MPI launcher around
it, the script re-launches its CPU part as ``mpiexec -n 2`` (``--ranks``) of itself and runs the
GPU part in this process; ``mxlite launch -n 2 benchmarks/bench_allreduce.py`` runs the CPU part
only (rank 0 prints).

Gradients: two sets of float32 Parameters on ``mx.cpu(0)``, each set in its own arena —
``--small`` (200) tensors of log-uniform sizes in [``--small-min``, ``--small-max``] = [1, 16384]
elements (biases, norms and small layers: latency-bound) and ``--large`` (4) tensors of
``--large-elements`` (4 Mi) elements (bandwidth-bound). For each set it times, as the median over
``--repeat`` runs after ``--warmup`` runs (each run: the slowest rank's time):

* ``per-tensor``: one ``MpiCommunicator.allreduce`` per tensor;
* ``bucketed``: :class:`~mxlite.comm.buckets.GradientSync` (``overlap=False``), as the Trainer
  drives it: zero-copy slices of the arena's gradient buffer, cut at ``--bucket-bytes``
  (default 25 MiB, :data:`~mxlite.comm.buckets.DEFAULT_BUCKET_BYTES`), one collective per bucket.

Before timing, both paths reduce the same values and must give the same bits.

GPU part (CuPy, NCCL and a GPU needed; otherwise skipped with a note): the same sets on one GPU
(world size 1) and on every GPU in one process, per-tensor and bucketed through
:class:`~mxlite.comm.NcclCommunicator` against one bare NCCL all-reduce of a flat buffer of the
same size (the bucket path's overhead); and the throughput (GB/s of float32 gradient read) of
the compression functions of :mod:`mxlite.comm.compression` that exist (``quantize_2bit``,
``topk_select``, ``to_wire``).

Prints a table; ``--json`` writes every record, the notes and the versions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import mxlite as mx
from mxlite.comm import launched_by_mpi
from mxlite.comm.buckets import DEFAULT_BUCKET_BYTES, GradientSync
from mxlite.gluon.parameter import Parameter
from mxlite.store import ParameterStore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPK_RATIO = 0.01  # top-k keeps 1% of the elements (DGC's and SINGA's examples use 0.1-1%)


def small_sizes(count: int, low: int, high: int, seed: int = 0) -> list[int]:
    """``count`` sizes drawn log-uniformly in [low, high] (as many tiny tensors as mid-sized ones)."""
    rng = np.random.default_rng(seed)
    return [int(s) for s in np.exp(rng.uniform(np.log(low), np.log(high + 1), count)).astype(np.int64).clip(low, high)]


def gradient_sets(args: argparse.Namespace) -> dict[str, list[int]]:
    """Set name -> tensor sizes in elements (empty sets left out)."""
    sets = {"small": small_sizes(args.small, args.small_min, args.small_max),
            "large": [args.large_elements] * args.large}
    return {name: sizes for name, sizes in sets.items() if sizes}


def make_params(sizes: list[int], devices: list[mx.Device], prefix: str) -> list[Parameter]:
    """float32 Parameters of the given sizes, mirrored on ``devices``, in one fresh store (one arena per device)."""
    store = ParameterStore()
    params = []
    for i, n in enumerate(sizes):
        p = Parameter(f"{prefix}{i}", shape=(n,))
        p.initialize(mx.init.Zero(), device=devices, store=store)
        params.append(p)
    return params


def _grads(params: list[Parameter]) -> list[list[Any]]:
    """Per parameter, every mirror's raw gradient array."""
    return [[g._data for g in p.list_grad()] for p in params]


def _median_time(run: Callable[[], None], before: Callable[[], None], after: Callable[[], None], warmup: int,
                 repeat: int) -> list[float]:
    """Seconds of each of ``repeat`` runs of ``run`` after ``warmup`` runs (``before``/``after`` untimed/timed)."""
    for _ in range(warmup):
        run()
        after()
    times = []
    for _ in range(repeat):
        before()
        t0 = time.perf_counter()
        run()
        after()
        times.append(time.perf_counter() - t0)
    return times


def _record(part: str, config: str, set_name: str, path: str, sizes: list[int], collectives: int,
            seconds: float) -> dict[str, Any]:
    nbytes = 4 * sum(sizes)
    return {"part": part, "config": config, "set": set_name, "path": path, "tensors": len(sizes), "bytes": nbytes,
            "collectives": collectives, "ms": 1e3 * seconds, "gb_per_s": nbytes / seconds / 1e9}


def _speedups(records: list[dict[str, Any]]) -> None:
    """Add ``speedup`` (per-tensor ms / this ms) and ``vs_bare`` (this ms / bare ms) where they apply."""
    for r in records:
        same = {q["path"]: q["ms"] for q in records if (q["part"], q["config"], q["set"]) ==
                (r["part"], r["config"], r["set"])}
        if r["path"] != "per-tensor" and "per-tensor" in same:
            r["speedup"] = same["per-tensor"] / r["ms"]
        if r["path"] != "bare-nccl" and "bare-nccl" in same:
            r["vs_bare"] = r["ms"] / same["bare-nccl"]


# -- CPU: every rank runs this under MPI --------------------------------------------------------------
def bench_cpu_ranks(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per-tensor vs bucketed MpiCommunicator all-reduce of every set; the records (same on every rank)."""
    from mpi4py import MPI  # noqa: PLC0415 - optional dependency

    from mxlite.comm import MpiCommunicator  # noqa: PLC0415

    comm = MpiCommunicator([mx.cpu(0)])
    config = f"{comm.size} ranks, cpu"
    records = []
    for set_name, sizes in gradient_sets(args).items():
        params = make_params(sizes, [mx.cpu(0)], set_name)
        grads = [g[0] for g in _grads(params)]
        sync = GradientSync(comm, params, args.bucket_bytes, overlap=False)

        def per_tensor(grads=grads) -> None:
            for g in grads:
                comm.allreduce([g])

        _check_same_result(comm, grads, per_tensor, sync.allreduce_grads, set_name)
        for path, run, collectives in (("per-tensor", per_tensor, len(grads)),
                                       ("bucketed", sync.allreduce_grads, len(sync.buckets))):
            times = np.asarray(_median_time(run, comm.barrier, lambda: None, args.warmup, args.repeat))
            comm.comm.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)  # a run lasts as long as its slowest rank
            records.append(_record("cpu", config, set_name, path, sizes, collectives, statistics.median(times)))
    _speedups(records)
    return records


def _check_same_result(comm: Any, grads: list[np.ndarray], per_tensor: Callable[[], None],
                       bucketed: Callable[[], None], set_name: str) -> None:
    """Both paths must turn rank-dependent values into the same sums, bit for bit."""
    def fill() -> None:
        for i, g in enumerate(grads):
            g[...] = (comm.rank + 1) * (np.arange(g.size, dtype=np.float32) % 7 + i % 5) / 8

    fill()
    per_tensor()
    want = [g.copy() for g in grads]
    fill()
    bucketed()
    factor = comm.size * (comm.size + 1) / 2  # sum over ranks of (rank + 1)
    for i, (g, w) in enumerate(zip(grads, want)):
        if not np.array_equal(g, w) or not np.allclose(w, factor * (np.arange(g.size) % 7 + i % 5) / 8):
            raise RuntimeError(f"{set_name} tensor {i}: the bucketed sum differs from the per-tensor sum")
        g[...] = 0


# -- GPU: one process ------------------------------------------------------------------------------
def bench_gpu(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[str]]:
    """Per-tensor, bucketed and bare NCCL all-reduce on 1 GPU and on every GPU; records and notes."""
    if mx.num_gpus() == 0:
        return [], ["GPU part skipped: no GPU (or no CuPy) in this process"]
    from mxlite.comm import NcclCommunicator  # noqa: PLC0415
    from mxlite.comm.nccl import nccl_available  # noqa: PLC0415

    if not nccl_available():
        return [], ["GPU all-reduce skipped: CuPy has no NCCL (pip install 'mxlite[cuda12]' or '[cuda13]')"]
    import cupy  # noqa: PLC0415
    from cupy.cuda import nccl  # noqa: PLC0415

    count = mx.num_gpus()
    configs = [("1 GPU", [mx.gpu(0)])]
    if count > 1:
        configs.append((f"{count} GPUs, one process", [mx.gpu(i) for i in range(count)]))
    records: list[dict[str, Any]] = []
    for config, devices in configs:
        def synchronize(devices=devices) -> None:
            for d in devices:
                with d.use():
                    cupy.cuda.Device().synchronize()

        comm = NcclCommunicator(devices)
        bare_comms = nccl.NcclCommunicator.initAll([d.device_id for d in devices])
        for set_name, sizes in gradient_sets(args).items():
            params = make_params(sizes, devices, set_name)
            grads = _grads(params)
            sync = GradientSync(comm, params, args.bucket_bytes, overlap=False)
            flats = []
            for d in devices:
                with d.use():
                    flats.append(cupy.zeros(sum(sizes), np.float32))

            def per_tensor(grads=grads, comm=comm) -> None:
                works = [comm.allreduce(mirrors) for mirrors in grads]
                for w in works:
                    w.wait()

            def bare(flats=flats, devices=devices, bare_comms=bare_comms) -> None:
                nccl.groupStart()
                for d, c, f in zip(devices, bare_comms, flats):
                    with d.use():
                        c.allReduce(f.data.ptr, f.data.ptr, f.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM,
                                    cupy.cuda.get_current_stream().ptr)
                nccl.groupEnd()

            for path, run, collectives in (("per-tensor", per_tensor, len(sizes)),
                                           ("bucketed", sync.allreduce_grads, len(sync.buckets)),
                                           ("bare-nccl", bare, 1)):
                times = _median_time(run, synchronize, synchronize, args.warmup, args.repeat)
                records.append(_record("gpu", config, set_name, path, sizes, collectives, statistics.median(times)))
    _speedups(records)
    compression, notes = bench_compression(mx.gpu(0), args.compress_elements, args.warmup, args.repeat)
    return records + compression, notes


def bench_compression(device: mx.Device, n: int, warmup: int = 2, repeat: int = 5
                      ) -> tuple[list[dict[str, Any]], list[str]]:
    """GB/s (float32 gradient bytes read / s) of each compression function present; notes for the missing.

    Runs the CUDA kernels on a GPU device and the NumPy twins on a CPU device.
    """
    try:
        from mxlite.comm import compression  # noqa: PLC0415 - written alongside this benchmark
    except ImportError as exc:
        return [], [f"compression skipped: mxlite.comm.compression cannot be imported ({exc})"]
    xp = device.xp
    with device.use():
        grad = xp.asarray(np.random.default_rng(0).normal(size=n).astype(np.float32))
        residual = xp.zeros(n, np.float32)
    k = max(1, int(TOPK_RATIO * n))
    cases = {"quantize_2bit": ("quantize_2bit", lambda f: f(grad, residual, 0.5)),
             f"topk_select (k = {TOPK_RATIO:g} n)": ("topk_select", lambda f: f(grad, residual, k)),
             "to_wire float16": ("to_wire", lambda f: f(grad, "float16", 0.5)),
             "to_wire bfloat16": ("to_wire", lambda f: f(grad, "bfloat16", 0.5))}
    if device.is_gpu:
        def synchronize() -> None:
            with device.use():
                xp.cuda.get_current_stream().synchronize()
    else:
        def synchronize() -> None:
            pass
    records, notes = [], []
    for label, (name, call) in cases.items():
        function = getattr(compression, name, None)
        if function is None:
            notes.append(f"compression: {name} is missing from mxlite.comm.compression, not timed")
            continue
        try:
            with device.use():
                times = _median_time(lambda f=function, c=call: c(f), synchronize, synchronize, warmup, repeat)
        except (TypeError, ValueError) as exc:  # the module is young: a changed signature is a note, not a crash
            notes.append(f"compression: {label} failed ({type(exc).__name__}: {exc}), not timed")
            continue
        seconds = statistics.median(times)
        records.append({"part": "compression", "config": str(device), "function": label, "elements": n,
                        "ms": 1e3 * seconds, "gb_per_s": 4 * n / seconds / 1e9})
    return records, notes


# -- running, printing ----------------------------------------------------------------------------
def _cpu_via_mpiexec(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[str], int]:
    """Run the CPU part as ``mpiexec -n ranks`` of this script; (records, notes, exit status)."""
    try:
        import mpi4py  # noqa: F401, PLC0415

        from mxlite.cli.launch import find_mpiexec, mpi_flavour, root_options  # noqa: PLC0415

        mpiexec = find_mpiexec()
        as_root = root_options(mpi_flavour(mpiexec))  # Open MPI refuses root without --allow-run-as-root
    except (ImportError, FileNotFoundError) as exc:
        return [], [f"CPU part skipped: needs mpi4py and mpiexec, pip install 'mxlite[mpi]' ({exc})"], 0
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "records.json")
        command = [mpiexec, *as_root, "-n", str(args.ranks), sys.executable, os.path.abspath(__file__),
                   *_cpu_argv(args), "--records", out]
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        result = subprocess.run(command, capture_output=True, text=True, env=env)
        if result.returncode != 0 or not os.path.exists(out):
            sys.stderr.write(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
            return [], [], result.returncode or 1
        with open(out) as f:
            return json.load(f), [], 0


def _cpu_argv(args: argparse.Namespace) -> list[str]:
    names = ("small", "small_min", "small_max", "large", "large_elements", "bucket_bytes", "warmup", "repeat")
    return [item for name in names for item in (f"--{name.replace('_', '-')}", str(getattr(args, name)))]


def print_table(records: list[dict[str, Any]], notes: list[str]) -> None:
    """The records as a text table, then the notes."""
    rows = [r for r in records if r["part"] != "compression"]
    if rows:
        print(f"{'config':<22} {'set':<6} {'tensors':>7} {'MiB':>7} {'path':<11} {'colls':>5} {'ms':>9} {'GB/s':>7} "
              f"{'speed-up':>9} {'x bare':>7}")
        for r in rows:
            speedup = f"{r['speedup']:.1f}x" if "speedup" in r else ""
            bare = f"{r['vs_bare']:.2f}" if "vs_bare" in r else ""
            print(f"{r['config']:<22} {r['set']:<6} {r['tensors']:>7} {r['bytes'] / 2**20:>7.2f} {r['path']:<11} "
                  f"{r['collectives']:>5} {r['ms']:>9.3f} {r['gb_per_s']:>7.2f} {speedup:>9} {bare:>7}")
    rows = [r for r in records if r["part"] == "compression"]
    if rows:
        print(f"\n{'compression on':<15} {'function':<26} {'elements':>11} {'ms':>9} {'GB/s':>8}")
        for r in rows:
            print(f"{r['config']:<15} {r['function']:<26} {r['elements']:>11,} {r['ms']:>9.3f} {r['gb_per_s']:>8.1f}")
    for note in notes:
        print(f"note: {note}")


def _meta(ranks: int | None) -> dict[str, Any]:
    meta = {"python": platform.python_version(), "numpy": np.__version__, "mxlite": mx.__version__,
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores", "ranks": ranks,
            "argv": sys.argv}
    try:
        from mpi4py import MPI  # noqa: PLC0415

        meta["mpi"] = MPI.Get_library_version().splitlines()[0].strip()
    except ImportError:
        pass
    if mx.num_gpus():
        import cupy  # noqa: PLC0415

        meta["cupy"] = cupy.__version__
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        meta["gpu"] = name.decode() if isinstance(name, bytes) else str(name)
    return meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2, help="MPI ranks of the CPU part (default 2)")
    parser.add_argument("--small", type=int, default=200, help="small tensors (default 200)")
    parser.add_argument("--small-min", type=int, default=1, help="smallest small tensor, elements (default 1)")
    parser.add_argument("--small-max", type=int, default=16384, help="largest small tensor, elements (default 16384)")
    parser.add_argument("--large", type=int, default=4, help="large tensors (default 4)")
    parser.add_argument("--large-elements", type=int, default=4 * 2**20, help="elements per large tensor (4 Mi)")
    parser.add_argument("--bucket-bytes", type=int, default=DEFAULT_BUCKET_BYTES, help="bucket size bound (25 MiB)")
    parser.add_argument("--compress-elements", type=int, default=64 * 2**20,
                        help="gradient elements for the compression throughput (GPU; default 64 Mi)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--no-gpu", action="store_true", help="skip the GPU part")
    parser.add_argument("--json", help="write the records here")
    parser.add_argument("--records", help=argparse.SUPPRESS)  # set by the re-launch: rank 0 writes its records here
    args = parser.parse_args(argv)

    if launched_by_mpi():
        records = bench_cpu_ranks(args)
        from mpi4py import MPI  # noqa: PLC0415

        if MPI.COMM_WORLD.Get_rank() != 0:
            return 0
        if args.records:
            with open(args.records, "w") as f:
                json.dump(records, f)
            return 0
        notes = ["GPU part not run: it runs when the script is started without mpiexec"]
        ranks = MPI.COMM_WORLD.Get_size()
    else:
        records, notes, status = _cpu_via_mpiexec(args)
        if status:
            return status
        if not args.no_gpu:
            gpu_records, gpu_notes = bench_gpu(args)
            records, notes = records + gpu_records, notes + gpu_notes
        ranks = args.ranks
    print_table(records, notes)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": _meta(ranks), "records": records, "notes": notes}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
