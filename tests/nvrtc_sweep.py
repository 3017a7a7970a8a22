"""Compile mxlite's GPU kernels with the real NVRTC, as CuPy would on a GPU, without a GPU (for
tests/test_real_nvrtc.py; also a script).

Usage: ``python tests/nvrtc_sweep.py [--arch 90] [--jobs N] [--only FILE[,FILE]] [--sample] [--json PATH]``

``--sample``: the first registered variant of each kernel (``adam_update<float>``, not its six other types), the
module a first step of each kind compiles: 43 modules instead of 165.

Each registered variant (:func:`mxlite.device.kernels.kernel_names`) is compiled as its own module, exactly as
mxlite's GPU path hands it to ``cupy.RawModule``: the text of ``kernel_source(file)``, ``NVRTC_OPTIONS`` and one
name expression, through CuPy's own steps: :func:`cupy._core.core.assemble_cupy_compiler_options` adds CuPy's and
CUDA's include folders, ``_compile_with_cache_cuda`` appends ``-ftz=true``, and
:func:`cupy.cuda.compiler.compile_using_nvrtc` adds the architecture, ``--device-as-default-execution-space``
(and ``--pch`` where CuPy enables it). The only step replaced is the one that asks the GPU which architecture
to name (memoized per device, so it needs one): here it names ``-arch=sm_<arch>`` (a cubin), as CuPy does for
any architecture NVRTC supports.

The variants are spread over ``--jobs`` worker processes (the CPU count by default) of this interpreter, which
must import the real CuPy: run it without ``MXLITE_EMULATE_GPUS``. Each module's seconds are the worker's wall
time and its CPU time (NVRTC compiles on the calling thread, so the CPU seconds are what the module costs
whatever else runs on the machine); a warm-up compile in every worker keeps NVRTC's own loading out of them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

ARCH = "90"  # H100 and H200: the GPUs mxlite runs on

_arch = ARCH


def nvrtc_options() -> tuple[str, ...]:
    """The options CuPy hands NVRTC for mxlite's kernels, before the architecture and the flags
    ``compile_using_nvrtc`` adds itself."""
    from cupy._core.core import assemble_cupy_compiler_options  # noqa: PLC0415

    from mxlite.device.kernels import NVRTC_OPTIONS  # noqa: PLC0415

    return tuple(assemble_cupy_compiler_options(NVRTC_OPTIONS)) + ("-ftz=true",)


def _init_worker(arch: str) -> None:
    global _arch
    _arch = arch
    from cupy.cuda import compiler  # noqa: PLC0415

    # CuPy's choice for an architecture within NVRTC's maximum, without asking a GPU.
    compiler._get_arch_for_options_for_nvrtc = lambda arch=None: (f"-arch=sm_{arch}", "cubin")
    compiler.compile_using_nvrtc('extern "C" __global__ void warm_up() {}', options=nvrtc_options(), arch=arch,
                                 cache_in_memory=True)


def compile_module(filename: str, names: tuple[str, ...], source: str | None = None) -> dict[str, Any]:
    """Compile ``names`` of ``kernels/<filename>`` (``source``: another text than ``kernel_source(filename)``) as
    one module in this worker; its seconds (wall, CPU), the name-to-symbol mapping and the cubin's size, or the
    compiler's error."""
    from cupy.cuda import compiler  # noqa: PLC0415

    from mxlite.device.kernels import kernel_source  # noqa: PLC0415

    text = kernel_source(filename) if source is None else source
    wall, cpu = time.perf_counter(), time.process_time()
    record: dict[str, Any] = {"file": filename, "names": list(names), "pid": os.getpid()}
    try:
        cubin, mapping = compiler.compile_using_nvrtc(text, options=nvrtc_options(), arch=_arch,
                                                      name_expressions=names, cache_in_memory=True)
    except Exception as exc:  # noqa: BLE001 - reported per module: NVRTC's log
        record.update(error=f"{type(exc).__name__}: {exc}"[-3000:])
        cubin, mapping = b"", {}
    record.update(seconds=time.perf_counter() - wall, cpu_seconds=time.process_time() - cpu,
                  mapping=dict(mapping or {}), cubin_bytes=len(cubin), cubin=bytes(cubin))
    return record


def sweep(modules: list[tuple[str, tuple[str, ...], str | None]], jobs: int | None = None,
          arch: str = ARCH) -> list[dict[str, Any]]:
    """Compile each ``(file, names, source or None)`` of ``modules`` as one module, over ``jobs`` worker processes
    (the CPU count by default); their records (:func:`compile_module`), in the order given."""
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(modules)))
    # spawn: fresh interpreters, whatever the caller has imported
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker,
                             initargs=(arch,)) as pool:
        futures = [pool.submit(compile_module, f, names, source) for f, names, source in modules]
        return [future.result() for future in futures]


def mark_foreign_variants(records: list[dict[str, Any]]) -> None:
    """Set each record's ``foreign_variants``: the other records' name expressions whose kernels (mangled names)
    its cubin holds. A template's instantiations are there only when named (or instantiated explicitly in the
    source); a plain ``__global__`` function is compiled into every module of its file."""
    owner = {symbol: name for r in records for name, symbol in r["mapping"].items()}
    for r in records:
        own = set(r["mapping"].values())
        r["foreign_variants"] = sorted(owner[s] for s in owner if s not in own and s.encode() + b"\0" in r["cubin"])


def nvrtc_version() -> str:
    """NVRTC's version as CuPy reports it (``13.5``)."""
    from cupy.cuda import compiler  # noqa: PLC0415

    return ".".join(map(str, compiler._get_nvrtc_version()))


def sample(names: tuple[str, ...]) -> tuple[str, ...]:
    """The first of ``names`` for each kernel (the text before ``<``), in order."""
    return tuple({n.split("<")[0]: n for n in reversed(names)}[k] for k in dict.fromkeys(n.split("<")[0]
                                                                                       for n in names))


def table(records: list[dict[str, Any]], title: str) -> str:
    """The modules slowest first (CPU seconds), then the per-file totals."""
    lines = [title, f"{'module':60s} {'cpu s':>7s} {'wall s':>7s} {'cubin KiB':>9s}"]
    for r in sorted(records, key=lambda r: -r["cpu_seconds"]):
        label = r["names"][0] if len(r["names"]) == 1 else f"{r['file']} ({len(r['names'])} names)"
        lines.append(f"{label:60s} {r['cpu_seconds']:7.2f} {r['seconds']:7.2f} {r['cubin_bytes'] / 1024:9.1f}")
    lines.append(f"{'file':24s} {'modules':>7s} {'cpu s':>8s} {'slowest s':>9s}")
    files: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        files.setdefault(r["file"], []).append(r)
    for filename, rs in sorted(files.items(), key=lambda kv: -sum(r["cpu_seconds"] for r in kv[1])):
        lines.append(f"{filename:24s} {len(rs):7d} {sum(r['cpu_seconds'] for r in rs):8.2f} "
                     f"{max(r['cpu_seconds'] for r in rs):9.2f}")
    lines.append(f"{'total':24s} {len(records):7d} {sum(r['cpu_seconds'] for r in records):8.2f}")
    return "\n".join(lines)


def write_json(path: str, records: list[dict[str, Any]], **meta: Any) -> None:
    """``records`` without their cubins, with ``meta``, as JSON at ``path``."""
    slim = [{k: v for k, v in r.items() if k != "cubin"} for r in records]
    with open(path, "w") as f:
        json.dump({"meta": meta, "modules": slim}, f, indent=1)


def main(argv: list[str] | None = None) -> int:
    """Compile every registered variant as its own module; print the table; 1 if any failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default=ARCH)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--only", help="comma-separated kernel files")
    parser.add_argument("--json", help="write the per-module seconds here")
    parser.add_argument("--sample", action="store_true", help="the first variant of each kernel only")
    args = parser.parse_args(argv)
    from mxlite.cli.compile_kernels import registered_kernels  # noqa: PLC0415 - after ROOT is on sys.path

    names = registered_kernels()
    wanted = set(args.only.split(",")) if args.only else set(names)
    if args.sample:
        names = {f: sample(ns) for f, ns in names.items()}
    modules = [(f, (n,), None) for f, ns in names.items() if f in wanted for n in ns]
    start = time.perf_counter()
    records = sweep(modules, args.jobs, args.arch)
    wall = time.perf_counter() - start
    mark_foreign_variants(records)
    print(table(records, f"NVRTC {nvrtc_version()}, sm_{args.arch}: {len(records)} modules in {wall:.1f} s wall"))
    if args.json:
        write_json(args.json, records, nvrtc=nvrtc_version(), arch=args.arch, wall_seconds=wall)
    failed = [r for r in records if "error" in r]
    for r in failed:
        print(f"FAILED {r['names']}: {r['error']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
