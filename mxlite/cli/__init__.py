"""The ``mxlite`` command: ``train`` (the main job), ``launch`` (multi-process runs), ``info``, ``build-kernels``
(the CPU devices' kernels, built with g++ ahead of the first step), ``compile-kernels`` (fills CuPy's kernel
cache ahead of the first GPU step) and ``im2rec`` (image lists and RecordIO files, as MXNet's tool)."""

from __future__ import annotations

import argparse
import importlib
import platform
import sys
import threading
import time

import mxlite

from .. import __version__
from ..device import DeviceUnavailableError, _hostcuda, blas, cuda_status, graphs, kernels, threads
from ..device.kernels import cpu_kernels_status
from ..device.mkl import status as mkl_status
from ..device.threads import threads_status
from . import compile_kernels, im2rec, launch, train_job
from .compile_kernels import registered_kernels


def _version(module: str) -> str:
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # ImportError, or a broken native library
        return f"not available ({type(exc).__name__})"
    return getattr(mod, "__version__", "installed")


def info() -> None:
    """Print versions and what this machine offers: devices, CUDA, NCCL, MPI."""
    print(f"mxlite {mxlite.__version__}  (python {platform.python_version()}, {platform.platform()})")
    print(f"numpy  {_version('numpy')}")
    cupy, count, reason = cuda_status()
    print(f"cupy   {_version('cupy') if cupy else 'not installed'}")
    if cupy is not None and count:
        rt = cupy.cuda.runtime
        print(f"CUDA   runtime {rt.runtimeGetVersion()}, driver {rt.driverGetVersion()}")
        for i in range(count):
            props = rt.getDeviceProperties(i)
            name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
            print(f"  gpu({i}): {name}, {props['totalGlobalMem'] / 2**30:.1f} GiB")
        try:
            from cupy.cuda import nccl  # noqa: PLC0415

            print(f"NCCL   {nccl.get_version()}")
        except Exception as exc:
            print(f"NCCL   not available ({type(exc).__name__}: {exc})")
        library, why = blas.backend()
        if library == "nvmath":
            print(f"GEMMs  cuBLAS through nvmath-python {_version('nvmath')}: CUDA graphs can capture them "
                  "(hybridize(static_alloc=True, static_shape=True))")
        else:
            print(f"GEMMs  cupy.matmul ({why}): hybridized blocks run eagerly; pip install 'nvmath-python[cu12]'")
        held = graphs.info()
        print(f"CUDA graphs held: {len(held)}, {sum(g['bytes'] for g in held) / 2**20:.1f} MiB")
    else:
        print(f"GPUs   none: {reason}")
    print(f"mpi4py {_version('mpi4py')}")
    print(f"CPU optimizer update: {cpu_kernels_status()}")
    print(f"CPU threads: {threads_status()}")
    print(f"CPU large products: {mkl_status()}")
    print(f"devices for the main job: {mxlite.gpu_devices() or [mxlite.cpu(0), mxlite.cpu(1)]}")


def _mxlite_version() -> str:
    return __version__


def build_kernels(jobs: int | None = None) -> int:
    """``mxlite build-kernels``: build every kernel file's host build for CPU devices, ``jobs`` g++ processes at a
    time, printing one line per file and the total. Returns the exit status: 0, or 1 when a file did not build
    (its NumPy twins then run) or no build is possible (no g++ or CUDA headers, ``MXLITE_CPU_KERNELS=numpy``)."""
    status = kernels.cpu_kernels_status()
    if not status.startswith("compiled kernels"):
        print(f"mxlite build-kernels: nothing to build: CPU devices run {status}", file=sys.stderr)
        return 1
    files = sorted(registered_kernels())
    jobs = jobs or threads.cores()
    print(f"building {len(files)} kernel files for CPU devices, {min(jobs, len(files))} g++ at a time, into "
          f"{_hostcuda.cache_dir()}", flush=True)
    start = time.perf_counter()

    lock = threading.Lock()  # the builds finish on several threads: one whole line at a time

    def done(filename: str, seconds: float, failure: Exception | None) -> None:
        text = "ok" if failure is None else f"FAILED: {str(failure).splitlines()[0] if str(failure) else failure!r}"
        with lock:
            sys.stdout.write(f"  {filename:16s} {seconds:6.1f} s  {text}\n")
            sys.stdout.flush()

    results = kernels.build_cpu_kernels(files, jobs, done=done)
    failed = [f for f, failure in results.items() if failure is not None]
    print(f"built {len(files) - len(failed)} of {len(files)} in {time.perf_counter() - start:.1f} s")
    return 1 if failed else 0


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (and exit status 2), no usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mxlite`` console script.

    User mistakes (a bad option, a device that does not exist) print one line starting with
    ``mxlite <command>: error:`` and exit with status 2; no traceback.
    """
    parser = _Parser(prog="mxlite", description=__doc__)
    parser.add_argument("--version", action="version", version=f"mxlite {_mxlite_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    train_parser = sub.add_parser("train", help="train on the embedded digits dataset (the main job)",
                                  formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    train_job.add_arguments(train_parser)
    sub.add_parser("info", help="versions, devices, CUDA, NCCL and MPI availability")
    launch_parser = sub.add_parser("launch", help="run a training script in N processes under MPI (mpiexec)",
                                   formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    launch_parser.add_argument("-n", "--processes", type=int, default=None,
                               help="number of processes (default: hosts x --ppn)")
    launch_parser.add_argument("--hosts", help="comma-separated node names (passed to mpiexec)")
    launch_parser.add_argument("--hostfile", help="a file of node names in the MPI launcher's format")
    launch_parser.add_argument("--ppn", type=int, help="processes per node (one per GPU)")
    launch_parser.add_argument("script", help="the training script (its Trainer uses kvstore='dist_sync')")
    launch_parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    compile_parser = sub.add_parser("compile-kernels", help="compile every GPU kernel variant into CuPy's kernel cache "
                                    "now, in parallel, instead of at each variant's first launch",
                                    description="Compile every GPU kernel variant mxlite may launch (one module "
                                    "per variant, as at its first launch) into CuPy's kernel cache, for every "
                                    "visible GPU, in parallel worker processes.")
    compile_kernels.add_arguments(compile_parser)
    build_parser = sub.add_parser("build-kernels", help="build the CPU devices' kernels with g++ now (once per "
                                  "machine), in parallel, instead of before the first CPU step",
                                  description="Build the host (g++) build of every kernel file CPU devices run, "
                                  "one g++ process per file, in parallel, into mxlite's build cache. GPUs compile "
                                  "their kernels with NVRTC: see mxlite compile-kernels.")
    build_parser.add_argument("--jobs", type=int, default=None, help="g++ processes at a time (default: the cores)")
    im2rec_parser = sub.add_parser("im2rec", help="make image lists (--list) and pack them into RecordIO files, "
                                   "as MXNet's tools/im2rec.py", description=im2rec.__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    im2rec.add_arguments(im2rec_parser)
    args = parser.parse_args(argv)
    if args.command == "im2rec":
        try:
            im2rec.check(args)
        except ValueError as exc:
            im2rec_parser.error(str(exc))
        return im2rec.run(args)
    if args.command == "info":
        info()
    elif args.command == "launch":
        try:
            if args.processes is None and not (args.hosts and args.ppn):
                parser.error("launch: -n is required unless --hosts and --ppn are given")
            return launch.launch(args.processes, args.script, args.script_args, hosts=args.hosts,
                                 hostfile=args.hostfile, ppn=args.ppn)
        except (ValueError, FileNotFoundError) as exc:
            parser.error(str(exc))
    elif args.command == "build-kernels":
        if args.jobs is not None and args.jobs < 1:
            build_parser.error(f"--jobs must be at least 1, got {args.jobs}")
        return build_kernels(args.jobs)
    elif args.command == "compile-kernels":
        try:
            return compile_kernels.run(args)
        except ValueError as exc:
            compile_parser.error(str(exc))
    elif args.command == "train":
        try:
            train_job.parse_devices(args.devices)
        except (ValueError, DeviceUnavailableError) as exc:
            message = str(exc)
            train_parser.error(message if message.startswith("--devices") else f"--devices {args.devices}: {message}")
        try:
            train_job.check_out(args.out)
        except ValueError as exc:
            train_parser.error(str(exc))
        train_job.run(args)
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
