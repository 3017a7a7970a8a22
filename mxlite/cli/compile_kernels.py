"""``mxlite compile-kernels``: compile every GPU kernel variant mxlite may launch into CuPy's kernel cache, ahead
of the first training step.

On a GPU mxlite compiles each kernel variant (``'adam_update<float>'`` of ``kernels/optimizers.cu``) as a module of
its own the first time it is launched (:mod:`mxlite.device.kernels`), and CuPy keeps the result in its on-disk
kernel cache (``CUPY_CACHE_DIR``, else ``~/.cupy/kernel_cache``), where every later process finds it. This command
does those compilations now, for every registered variant (:func:`mxlite.device.kernels.kernel_names`) and every
visible GPU (or ``--device N``), spread over ``--jobs`` worker processes: each worker does what
:func:`mxlite.device.kernels.get_kernel` does at a launch (``cupy.RawModule(code=kernel_source(file),
options=NVRTC_OPTIONS, name_expressions=(name,)).get_function(name)`` under ``cupy.cuda.Device(i)``), so the cache
entries are the ones a training process looks up. A variant already in the cache is only loaded. GPUs of one
architecture share their entries: the first compiles, the others load.

On the emulated GPUs (``MXLITE_EMULATE_GPUS``) the same calls fill the host-build cache of the emulation instead
(one library per kernel file, shared by its variants).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing
import os
import signal
import sys
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from ..device import EMULATE_GPUS_ENV, _hostcuda, cuda_status, env, gpu
from ..device.kernels import get_kernel, kernel_names, kernel_source

__all__ = ["CompileResult", "NoGPUError", "add_arguments", "compile_kernels", "default_jobs", "registered_kernels",
           "run"]


class NoGPUError(RuntimeError):
    """No GPU is visible to compile for (the message says why)."""


@dataclass
class CompileResult:
    """One kernel variant compiled (or loaded from the cache) on one GPU.

    Attributes:
        device: the GPU's index.
        file: the kernel file (``'optimizers.cu'``).
        name: the name expression (``'adam_update<float>'``).
        seconds: the worker's time for it: compiling and loading, or loading alone when it was cached.
        error: why it failed (the compiler's log), or None.
    """

    device: int
    file: str
    name: str
    seconds: float
    error: str | None = None


def registered_kernels() -> dict[str, tuple[str, ...]]:
    """Every kernel variant mxlite may launch, per kernel file: every driver is imported first (``import mxlite``
    imports all but compression's)."""
    import mxlite.comm.compression  # noqa: F401, PLC0415 - compression.cu's names: imported only when asked for

    return kernel_names()


def default_jobs() -> int:
    """The CPUs this process may run on (its affinity where the platform has one, else the CPU count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _init_worker() -> None:
    """Set a worker up as a training process would be: GPUs probed (the double installed on the emulated GPUs;
    its notice is the parent's to print), and every kernel name registered."""
    # Ctrl-C (or `timeout -s INT`) reaches the whole process group: a worker stops at once, whatever it compiles
    # (CuPy writes a cache entry whole or not at all), instead of finishing the calls already queued to it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    with contextlib.redirect_stderr(io.StringIO()):
        cuda_status()
    registered_kernels()


def _compile_one(device: int, filename: str, name: str) -> CompileResult:
    """Compile (or load from the cache) ``name`` of ``filename`` on ``gpu(device)``, through ``get_kernel``."""
    start = time.perf_counter()
    try:
        get_kernel(filename, name, gpu(device), kernel_names()[filename])
    except Exception as exc:  # noqa: BLE001 - CuPy's CompileException with NVRTC's log, a host-build error, ...
        return CompileResult(device, filename, name, time.perf_counter() - start, f"{type(exc).__name__}: {exc}")
    return CompileResult(device, filename, name, time.perf_counter() - start)


def _device_name(cupy: Any, device: int) -> str:
    try:
        props = cupy.cuda.runtime.getDeviceProperties(device)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        return f"{name}, sm_{props['major']}{props['minor']}"
    except Exception:  # noqa: BLE001 - a name for the table only
        return "?"


def _device_names(results: list[CompileResult]) -> dict[str, str]:
    cupy = cuda_status()[0]
    return {f"gpu({d})": _device_name(cupy, d) for d in sorted({r.device for r in results})}


def _cache_description() -> str:
    if env.integer(EMULATE_GPUS_ENV, 0, 16, 0):  # checked already by cuda_status()
        return f"the emulated GPUs' host-build cache {_hostcuda.cache_dir()}"
    folder = os.environ.get("CUPY_CACHE_DIR", os.path.join("~", ".cupy", "kernel_cache"))
    note = ("; CUPY_CACHE_IN_MEMORY is set, so CuPy writes no cache to disk and later processes compile again"
            if os.environ.get("CUPY_CACHE_IN_MEMORY", "0") not in ("", "0") else "")
    return f"CuPy's kernel cache {folder}{note}"


def compile_kernels(devices: list[int] | None = None, jobs: int | None = None, only: list[str] | None = None,
                    out: TextIO | None = None) -> list[CompileResult]:
    """Compile every registered kernel variant for each GPU of ``devices`` (default: every visible one), in ``jobs``
    worker processes (default :func:`default_jobs`), ``only`` those of the kernel files named; print a per-file
    table per GPU to ``out`` (default stdout).

    The GPUs are done one after another (those of one architecture share cache entries, so the second only
    loads them); each GPU's variants are spread over the workers, the variants of the largest files first.

    Returns:
        One :class:`CompileResult` per (GPU, variant); a failed compilation has its ``error`` set.

    Raises:
        NoGPUError: no GPU is visible.
        ValueError: ``only`` names a file that has no registered kernels, ``devices`` a GPU that is not visible,
            or ``jobs`` < 1.
    """
    out = sys.stdout if out is None else out
    cupy, count, reason = cuda_status()
    if count == 0:
        raise NoGPUError(f"no GPU visible: {reason}")
    if devices is None:
        devices = list(range(count))
    for device in devices:
        if not 0 <= device < count:
            raise ValueError(f"--device {device}: {count} GPU(s) visible (0..{count - 1})")
    if jobs is not None and jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {jobs}")
    names = registered_kernels()
    if only:
        unknown = [f for f in only if f not in names]
        if unknown:
            raise ValueError(f"--only: no registered kernels in {', '.join(unknown)} "
                             f"(kernel files: {', '.join(names)})")
        names = {f: names[f] for f in only}
    # the largest sources first: their variants tend to cost the most, and should not start last
    files = sorted(names, key=lambda f: -len(kernel_source(f)))
    variants = [(f, n) for f in files for n in names[f]]
    jobs = max(1, min(jobs or default_jobs(), len(variants)))
    print(f"compile-kernels: {len(variants)} kernel variants of {len(files)} files for {len(devices)} GPU(s), "
          f"{jobs} jobs, into {_cache_description()}", file=out, flush=True)
    results: list[CompileResult] = []
    # spawn: a forked child cannot use the CUDA the parent has initialised
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker) as pool:
        for device in devices:
            start = time.perf_counter()
            futures: list[Future[CompileResult]] = [pool.submit(_compile_one, device, f, n) for f, n in variants]
            try:
                done = [future.result() for future in futures]
            except KeyboardInterrupt:
                pool.shutdown(wait=False, cancel_futures=True)
                finished = sum(1 for future in futures if future.done() and not future.cancelled())
                print(f"compile-kernels: interrupted on gpu({device}) after {finished} of {len(variants)} variants "
                      "(those are cached)", file=out, flush=True)
                raise
            results += done
            _print_table(out, device, _device_name(cupy, device), done, time.perf_counter() - start, jobs)
    return results


def _print_table(out: TextIO, device: int, device_name: str, results: list[CompileResult], wall: float,
                 jobs: int) -> None:
    files: dict[str, list[CompileResult]] = {}
    for r in results:
        files.setdefault(r.file, []).append(r)
    print(f"gpu({device}) ({device_name}):", file=out)
    print(f"  {'file':16s} {'variants':>8s} {'seconds':>8s}  slowest", file=out)
    for filename, rs in files.items():
        slowest = max(rs, key=lambda r: r.seconds)
        failed = sum(1 for r in rs if r.error)
        print(f"  {filename:16s} {len(rs):8d} {sum(r.seconds for r in rs):8.1f}  {slowest.name} {slowest.seconds:.1f} s"
              + (f"  ({failed} FAILED)" if failed else ""), file=out)
    print(f"  {'total':16s} {len(results):8d} {sum(r.seconds for r in results):8.1f}  in {wall:.1f} s with {jobs} "
          "jobs", file=out, flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``mxlite compile-kernels``."""
    parser.add_argument("--device", type=int, default=None, help="only this GPU (default: every visible one)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="worker processes that compile in parallel (default: the CPU count)")
    parser.add_argument("--only", default=None, metavar="FILE[,FILE]",
                        help="only the variants of these kernel files, e.g. optimizers.cu,conv.cu")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write every variant's seconds here")


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``mxlite compile-kernels`` with parsed ``args``: 0 when every variant compiled, 1 when one failed, a
    worker died or no GPU is visible (a line on stderr says which), 130 when interrupted.

    Raises:
        ValueError: a bad ``--device``, ``--jobs`` or ``--only`` (the CLI prints it as a usage error).
    """
    only = [f.strip() for f in args.only.split(",") if f.strip()] if args.only else None
    devices = None if args.device is None else [args.device]
    start = time.perf_counter()
    try:
        results = compile_kernels(devices, args.jobs, only, out)
    except NoGPUError as exc:
        print(f"mxlite compile-kernels: error: {exc}", file=sys.stderr)
        return 1
    except BrokenProcessPool as exc:  # a worker killed (the OOM killer, a crash in the driver)
        print(f"mxlite compile-kernels: error: a worker process died ({exc}); what it compiled before is cached",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    wall = time.perf_counter() - start
    failed = [r for r in results if r.error]
    for r in failed:
        print(f"mxlite compile-kernels: {r.name} of {r.file} failed on gpu({r.device}): {r.error}", file=sys.stderr)
    print(f"compile-kernels: {len(results) - len(failed)} of {len(results)} variants ready in {wall:.1f} s"
          + (f", {len(failed)} FAILED" if failed else ""), file=sys.stdout if out is None else out, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": {"wall_seconds": wall, "failed": len(failed), "devices": _device_names(results)},
                       "variants": [asdict(r) for r in results]}, f, indent=1)
    return 1 if failed else 0
