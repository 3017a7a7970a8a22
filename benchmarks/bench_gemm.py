"""Float32 GEMM speed on this CPU against the core's ceiling: mxlite's products, PyTorch's, a hand-written one.

The MLP of ``bench_train.py`` (4 x 2048 hidden, batch 256) spends most of its step in three products,
each 2 x 256 x 2048 x 2048 flops: the forward ``x @ W^T``, the input gradient ``dy @ W`` and the weight
gradient ``dy^T @ x``. How fast a framework trains it is how fast its BLAS runs those. This benchmark
times them (or ``--shapes``) with:

- ``mxlite``: ``mxlite.device.blas.matmul``, what its layers call: Intel MKL on its own threads when the
  ``mkl`` extra is installed (``mxlite.device.mkl``), else NumPy's BLAS in mxlite's pieces;
- ``mxlite-numpy``: the same with ``MXLITE_HOST_BLAS=numpy``: NumPy's BLAS (OpenBLAS in NumPy's wheels) on
  one thread per piece, one piece per thread on mxlite's own threads;
- ``torch``: ``torch.matmul`` (PyTorch's bundled BLAS), when PyTorch is installed;
- ``mkl-pieces``: MKL's sequential ``cblas_sgemm`` cut into pieces the way ``mxlite-numpy`` cuts NumPy's,
  when the ``mkl`` wheel is installed;
- ``blocked``: ``benchmarks/gemm_ceiling.cc``'s cache-blocked GEMM, written the way BLAS libraries are
  (packed panels, a 14 x 32 register tile); with several threads, one column range per thread;
- ``ceiling``: the multiply-add rate of that register tile on operands that stay in L1, on every thread
  at once: no GEMM on this machine runs faster. Each product's rate is also given as a share of it.

``blocked`` and ``ceiling`` need g++ and a CPU with AVX-512; without them the table says so.

Each library runs in child processes of its own (PyTorch's OpenMP threads spin-wait after a call and
would slow the others down), one per round and thread setting, alternating which library goes first;
a child times ``--calls`` calls of every product after one warm-up call and reports the fastest. The
figure reported is the median over ``--rounds`` rounds. Thread settings: ``--threads 1,0`` (0: each
library's default: ``mx.get_num_threads()``, PyTorch's OpenMP count).

Usage::

    PYTHONPATH=. python3 benchmarks/bench_gemm.py [--rounds 3] [--threads 1,0] [--json gemm.json]

Prints a table (ms and GFLOP/s per product, library and thread setting, with the share of the ceiling)
and, with ``--json``, writes the records with the machine and the command line.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import functools
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SOURCE = os.path.join(HERE, "gemm_ceiling.cc")
LIBRARIES = ("mxlite", "mxlite-numpy", "torch", "mkl-pieces", "blocked")
# (name, m, n, k, layout): C (m x n) = A (m x k) @ B (k x n); layout says which operand is a transposed view
MLP_PRODUCTS = (("forward x @ W^T", 256, 2048, 2048, "NT"), ("input grad dy @ W", 256, 2048, 2048, "NN"),
                ("weight grad dy^T @ x", 2048, 2048, 256, "TN"))
_TILE_COLUMNS = 32  # the hand-written GEMM's tile width: thread column ranges start at multiples of it


def _parse_shapes(text: str) -> list[tuple[str, int, int, int, str]]:
    """``"mlp"`` or ``"MxNxK[:LAYOUT],..."`` (LAYOUT: NN, NT, TN or TT; NN when left out)."""
    if text == "mlp":
        return list(MLP_PRODUCTS)
    shapes = []
    for item in text.split(","):
        dims, _, layout = item.partition(":")
        layout = layout or "NN"
        try:
            m, n, k = (int(v) for v in dims.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--shapes: {item!r} is not MxNxK[:LAYOUT]") from None
        if layout not in ("NN", "NT", "TN", "TT") or min(m, n, k) < 1:
            raise SystemExit(f"--shapes: {item!r} needs positive sizes and a layout of NN, NT, TN or TT")
        shapes.append((f"{m}x{n}x{k} {layout}", m, n, k, layout))
    return shapes


def _operands(m: int, n: int, k: int, layout: str) -> tuple[Any, Any]:
    """Random float32 A (m x k) and B (k x n), each a transposed view of a row-major array where ``layout``
    says T (the way a Dense layer's weight enters its forward product)."""
    import numpy as np  # noqa: PLC0415 - children import what they time

    rng = np.random.default_rng(0)

    def draw(rows: int, cols: int, transposed: bool) -> Any:
        return rng.standard_normal((cols, rows), dtype=np.float32).T if transposed else rng.standard_normal(
            (rows, cols), dtype=np.float32)

    a, b = draw(m, k, layout[0] == "T"), draw(k, n, layout[1] == "T")
    return a, b


# -- the hand-written GEMM and the ceiling ------------------------------------------------------------------
def build_ceiling() -> tuple[Any, str | None]:
    """(the compiled ``gemm_ceiling.cc`` as a ctypes library, None) or (None, why it is missing)."""
    flags = ["-O3", "-march=native", "-shared", "-fPIC"]
    try:
        probe = subprocess.run(["g++", "-march=native", "-dM", "-E", "-x", "c++", os.devnull], capture_output=True,
                               text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        return None, f"no g++ to build gemm_ceiling.cc ({exc})"
    if "__AVX512F__" not in probe:
        return None, "this CPU has no AVX-512 (gemm_ceiling.cc's register tile needs it)"
    with open(SOURCE, "rb") as f:
        key = hashlib.sha256(f.read() + probe.encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"mxlite-gemm-ceiling-{key}.so")
    if not os.path.exists(path):
        scratch = f"{path}.{os.getpid()}"
        done = subprocess.run(["g++", *flags, SOURCE, "-o", scratch], capture_output=True, text=True)
        if done.returncode != 0:
            return None, f"g++ failed on gemm_ceiling.cc: {done.stderr.strip()[:300]}"
        os.replace(scratch, path)
    library = ctypes.CDLL(path)
    library.fma_rate_work.restype = ctypes.c_double
    library.fma_rate_work.argtypes = [ctypes.c_long, ctypes.c_long]
    library.blocked_sgemm.restype = None
    library.blocked_sgemm.argtypes = [ctypes.c_long] * 3 + [ctypes.c_void_p, ctypes.c_long, ctypes.c_long] * 2 + [
        ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    library.blocked_scratch_floats.restype = ctypes.c_long
    library.blocked_scratch_floats.argtypes = [ctypes.c_int]
    return library, None


def _on_threads(count: int, work: Any) -> None:
    """``work(i)`` for i in ``range(count)``, each on a thread of its own (ctypes lets go of the GIL)."""
    if count == 1:
        work(0)
        return
    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def ceiling_gflops(library: Any, threads: int, seconds: float = 0.3) -> float:
    """GFLOP/s of the register tile on L1-resident operands, on ``threads`` threads at once."""
    depth = 256
    calls = max(1, int(seconds * 2e11 / (depth * 14 * 32 * 2)))  # about `seconds` at 200 GFLOP/s a thread
    done = [0.0] * threads
    library.fma_rate_work(depth, max(1, calls // 10))  # warm up the core's vector units

    def work(i: int) -> None:
        done[i] = library.fma_rate_work(depth, calls)

    start = time.perf_counter()
    _on_threads(threads, work)
    return 2 * sum(done) / (time.perf_counter() - start) / 1e9


_SCRATCH: dict[int, tuple[Any, Any]] = {}  # per worker: blocked_sgemm's two work areas, 64-byte aligned


def _scratch(library: Any, worker: int) -> tuple[int, int]:
    import numpy as np  # noqa: PLC0415

    if worker not in _SCRATCH:
        areas = []
        for which in (0, 1):
            raw = np.zeros(library.blocked_scratch_floats(which) + 16, dtype=np.float32)
            skip = (-raw.ctypes.data % 64) // 4
            areas.append(raw[skip:])
        _SCRATCH[worker] = (areas[0], areas[1])
    return _SCRATCH[worker][0].ctypes.data, _SCRATCH[worker][1].ctypes.data


def _column_spans(n: int, threads: int, align: int) -> list[tuple[int, int]]:
    """One column range per thread, starting at multiples of ``align``: the cut mxlite's pieces make."""
    from mxlite.device.blas import _spans  # noqa: PLC0415 - children import mxlite, the parent need not

    return _spans(n, threads, align)


def blocked_product(library: Any, a: Any, b: Any, out: Any, threads: int) -> None:
    """``out[...] = a @ b`` through ``blocked_sgemm``, the columns cut into one range per thread."""
    m, k = a.shape
    spans = _column_spans(b.shape[1], threads, _TILE_COLUMNS)
    ars, acs = (s // 4 for s in a.strides)
    brs, bcs = (s // 4 for s in b.strides)
    a_ptr, b_ptr, c_ptr = a.ctypes.data, b.ctypes.data, out.ctypes.data
    ldc = out.strides[0] // 4

    def work(i: int) -> None:
        j0, j1 = spans[i]
        library.blocked_sgemm(m, j1 - j0, k, a_ptr, ars, acs, b_ptr + 4 * j0 * bcs, brs, bcs, c_ptr + 4 * j0, ldc,
                              *_scratch(library, i))

    _on_threads(len(spans), work)


# -- one child: one library, one thread setting -------------------------------------------------------------
def load_mkl() -> tuple[Any, str | None]:
    """(MKL's ``cblas_sgemm``, None) from the ``mkl`` wheel's ``libmkl_rt`` (found as mxlite finds it), on
    MKL's sequential layer, or (None, why not)."""
    from mxlite.device.mkl import _library_path  # noqa: PLC0415

    path = _library_path()
    if path is None:
        return None, "the mkl wheel is not installed in this environment (pip install mkl)"
    library = ctypes.CDLL(path)
    library.MKL_Set_Threading_Layer(ctypes.c_int(1))  # MKL_THREADING_SEQUENTIAL: threads are the caller's
    gemm = library.cblas_sgemm
    gemm.restype = None
    gemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                          ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
    return gemm, None


def mkl_product(gemm: Any, a: Any, b: Any, out: Any, threads: int) -> None:
    """``out[...] = a @ b`` through MKL's ``cblas_sgemm`` (row-major; either operand a transposed view), the
    columns cut into one range per thread."""
    from mxlite.device.mkl import _layout  # noqa: PLC0415 - (CBLAS transpose flag, leading dimension)

    (ta, lda), (tb, ldb) = _layout(a), _layout(b)
    m, k = a.shape
    spans = _column_spans(b.shape[1], threads, 1)

    def work(i: int) -> None:
        j0, j1 = spans[i]
        gemm(101, ta, tb, m, j1 - j0, k, 1.0, a.ctypes.data, lda, b.ctypes.data + j0 * b.strides[1], ldb, 0.0,
             out.ctypes.data + 4 * j0, out.strides[0] // 4)

    _on_threads(len(spans), work)


def _child(library_name: str, threads: int, shapes: list[tuple[str, int, int, int, str]], calls: int) -> dict:
    """Times every product with one library; returns {'ms': {name: fastest ms}, 'threads': count, ...}."""
    import numpy as np  # noqa: PLC0415

    report: dict[str, Any] = {"ms": {}}
    if library_name == "torch":
        try:
            import torch  # noqa: PLC0415
        except ImportError:
            return {"skipped": "PyTorch is not installed"}
        if threads:
            torch.set_num_threads(threads)
        report["threads"] = torch.get_num_threads()
    else:
        if library_name != "mxlite":  # MKL set up by mxlite would not be the sequential MKL of mkl-pieces
            os.environ["MXLITE_HOST_BLAS"] = "numpy"
        import mxlite as mx  # noqa: PLC0415
        from mxlite.device import mkl as host_mkl  # noqa: PLC0415

        if threads:
            mx.set_num_threads(threads)
        report["threads"] = mx.get_num_threads()
        if library_name.startswith("mxlite"):
            report["blas"] = host_mkl.status()
    ceiling = mkl = None
    if library_name == "mkl-pieces":
        mkl, why = load_mkl()
        if mkl is None:
            return {"skipped": why}
    if library_name == "blocked":
        ceiling, why = build_ceiling()
        if ceiling is None:
            return {"skipped": why}
        report["ceiling_gflops"] = ceiling_gflops(ceiling, report["threads"])
    results = []  # the hand-written GEMM's products, checked once everything is timed
    for name, m, n, k, layout in shapes:
        a, b = _operands(m, n, k, layout)
        out = np.empty((m, n), dtype=np.float32)
        if library_name == "torch":
            call = functools.partial(torch.matmul, torch.from_numpy(a), torch.from_numpy(b), out=torch.from_numpy(out))
        elif library_name in ("mxlite", "mxlite-numpy"):
            from mxlite.device import blas  # noqa: PLC0415

            call = functools.partial(blas.matmul, a, b, out=out)
        elif library_name == "mkl-pieces":
            call = functools.partial(mkl_product, mkl, a, b, out, report["threads"])
        else:
            call = functools.partial(blocked_product, ceiling, a, b, out, report["threads"])
        call()
        best = float("inf")
        for _ in range(calls):
            start = time.perf_counter()
            call()
            best = min(best, time.perf_counter() - start)
        report["ms"][name] = best * 1e3
        if library_name in ("mkl-pieces", "blocked"):
            results.append((name, a, b, out))
    for name, a, b, out in results:  # after every timing: NumPy's BLAS threads spin-wait after these products
        exact = a.astype(np.float64) @ b.astype(np.float64)
        bound = (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)).max()
        report.setdefault("max_rel_error", {})[name] = float(np.abs(out - exact).max() / bound)
    return report


def _run_child(library_name: str, threads: int, shapes_text: str, calls: int) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--child", library_name, "--threads", str(threads),
               "--shapes", shapes_text, "--calls", str(calls)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the {library_name} child failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(shapes_text: str, thread_settings: list[int], rounds: int,
            calls: int) -> tuple[list[dict], dict, dict]:
    """Every (library, thread setting) over ``rounds`` rounds of children; returns (records, skipped, where
    mxlite's products ran)."""
    shapes = _parse_shapes(shapes_text)
    samples: dict[tuple[str, int], list[dict]] = {}
    skipped: dict[str, str] = {}
    backends: dict[str, str] = {}  # mxlite's children: where their products ran (mkl.status())
    for setting in thread_settings:
        for r in range(rounds):
            order = LIBRARIES if r % 2 == 0 else LIBRARIES[::-1]
            for name in order:
                if name in skipped:
                    continue
                report = _run_child(name, setting, shapes_text, calls)
                if "skipped" in report:
                    skipped[name] = report["skipped"]
                    continue
                samples.setdefault((name, setting), []).append(report)
                if "blas" in report:
                    backends[name] = report["blas"]
    records = []
    for (name, setting), reports in samples.items():
        ceilings = [r["ceiling_gflops"] for r in reports if "ceiling_gflops" in r]
        checked = all("max_rel_error" in r for r in reports)
        for label, m, n, k, layout in shapes:
            ms = statistics.median(r["ms"][label] for r in reports)
            record = {"library": name, "threads": reports[0]["threads"], "setting": setting, "product": label,
                      "m": m, "n": n, "k": k, "layout": layout, "ms": ms, "gflops": 2 * m * n * k / ms / 1e6,
                      "round_ms": [r["ms"][label] for r in reports]}
            if ceilings:
                record["ceiling_gflops"] = statistics.median(ceilings)
            if checked:
                record["max_rel_error"] = max(r["max_rel_error"][label] for r in reports)
            records.append(record)
    return records, skipped, backends


def print_table(records: list[dict], skipped: dict[str, str], backends: dict[str, str]) -> None:
    ceilings = {r["setting"]: r["ceiling_gflops"] for r in records if "ceiling_gflops" in r}
    print(f"{'product':<22} {'threads':>7} {'library':<12} {'ms':>8} {'GFLOP/s':>8} {'of ceiling':>10}")
    for r in sorted(records, key=lambda r: (r["setting"] != 1, r["product"], LIBRARIES.index(r["library"]))):
        ceiling = ceilings.get(r["setting"])
        share = f"{r['gflops'] / ceiling:.0%}" if ceiling else "-"
        print(f"{r['product']:<22} {r['threads']:>7} {r['library']:<12} {r['ms']:>8.2f} {r['gflops']:>8.0f} "
              f"{share:>10}")
    for setting, ceiling in sorted(ceilings.items(), key=lambda item: item[0] != 1):
        threads = next(r["threads"] for r in records if r["setting"] == setting)
        print(f"ceiling on {threads} thread(s): {ceiling:.0f} GFLOP/s (register tile, operands in L1)")
    for name, where in backends.items():
        print(f"{name}: products in {where}")
    for name, why in skipped.items():
        print(f"{name}: not run: {why}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="mlp", help='"mlp" (the MLP\'s three products) or "MxNxK[:LAYOUT],..."')
    p.add_argument("--threads", default="1,0", help="thread settings, comma-separated (0: the default)")
    p.add_argument("--rounds", type=int, default=3, help="children per library and thread setting")
    p.add_argument("--calls", type=int, default=5, help="timed calls per product in a child (the fastest counts)")
    p.add_argument("--json", help="write the records here")
    p.add_argument("--child", choices=LIBRARIES, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        settings = [int(v) for v in args.threads.split(",")]
    except ValueError:
        raise SystemExit(f"--threads: {args.threads!r} is not a comma-separated list of whole numbers") from None
    if args.rounds < 1 or args.calls < 1 or any(s < 0 for s in settings):
        raise SystemExit("--rounds and --calls must be >= 1 and --threads >= 0")
    if args.child:
        print(json.dumps(_child(args.child, settings[0], _parse_shapes(args.shapes), args.calls)))
        return 0
    records, skipped, backends = measure(args.shapes, settings, args.rounds, args.calls)
    print(f"cpu: {platform.processor() or platform.machine()} ({os.cpu_count()} logical cores); float32; "
          f"median of {args.rounds} rounds, fastest of {args.calls} calls each")
    print_table(records, skipped, backends)
    if args.json:
        meta = {"date": datetime.date.today().isoformat(), "cpu_count": os.cpu_count(), "skipped": skipped,
                "mxlite_products": backends,
                "command": "python3 benchmarks/bench_gemm.py " + " ".join(argv if argv is not None else sys.argv[1:])}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "records": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
