"""One recurrent layer-direction on CPU: the fused op against the step-by-step composition and PyTorch.

Each case times forward + backward of one LSTM or GRU layer in one direction over a sequence
(T=35 steps, batch 32, hidden 256, input 128 or 256 features: the word-language model's layer),
float32, with the gradient of every weight, the input and the begin states:

- ``fused``: ``mxlite.ops.rnn_ops.recurrence`` (one GEMM for the input projection, then per step
  one GEMM and one cell kernel of ``kernels/rnn.cu``, the serial host build on CPU devices);
- ``twins``: the same op with ``MXLITE_CPU_KERNELS=numpy`` (the kernels' NumPy twins);
- ``steps``: ``mxlite.gluon.rnn._steps.rnn_sequence(fused=False)`` (what ``gluon.rnn`` layers ran before
  the fused op: a dozen recorded ops per step);
- ``torch``: ``torch.nn.LSTM`` / ``GRU`` (one layer), when PyTorch is installed (else a note says so).

Every implementation gets the same output gradient and begin states. Cases and implementations are
interleaved, ``--repeat`` rounds after one warm-up call each; the median round is reported, with the
fused op's speed relative to each other (> 1: fused is faster). Threads: by default the script runs
itself in child processes, with one thread (``OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=1``,
``torch.set_num_threads(1)``) and with the libraries' default, since BLAS reads its thread count when
NumPy is imported. With one thread all four run interleaved in one child, so that a machine whose
load drifts affects them alike; with the default threads mxlite and PyTorch run in separate children,
since OpenBLAS's and OpenMP's thread pools both spin-wait after each call and, on a small machine, slow
each other down when they share a process. ``--threads N`` runs one setting in this process (0: the
default), ``--only`` one library.

Usage: ``PYTHONPATH=. python3 benchmarks/bench_rnn.py [--repeat 7] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

LENGTH, BATCH, HIDDEN = 35, 32, 256  # the word-language model's LSTM (35 steps, batch 32, hidden 256)
FEATURES = (128, 256)  # its embedding width, and a second layer's input
CELLS = ("lstm", "gru")
IMPLEMENTATIONS = ("fused", "twins", "steps", "torch")
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _problem(mode: str, length: int, batch: int, features: int, hidden: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    gates = {"lstm": 4, "gru": 3}[mode] * hidden
    scale = 1 / np.sqrt(hidden)
    arrays = {"x": rng.standard_normal((length, batch, features)), "head": rng.standard_normal((length, batch, hidden)),
              "i2h_weight": rng.uniform(-scale, scale, (gates, features)),
              "h2h_weight": rng.uniform(-scale, scale, (gates, hidden)),
              "i2h_bias": rng.uniform(-scale, scale, gates), "h2h_bias": rng.uniform(-scale, scale, gates)}
    for k in range(2 if mode == "lstm" else 1):
        arrays[f"state{k}"] = rng.standard_normal((batch, hidden)) * 0.1
    return {k: v.astype(np.float32) for k, v in arrays.items()}


def _mxlite_case(impl: str, mode: str, arrays: dict[str, np.ndarray]) -> Callable[[], None]:
    import mxlite as mx  # noqa: PLC0415 - after the thread variables are set
    from mxlite import ops  # noqa: PLC0415
    from mxlite.gluon.rnn import _steps  # noqa: PLC0415
    from mxlite.ops import rnn_ops  # noqa: PLC0415

    def leaf(name: str) -> mx.NDArray:
        t = mx.array(arrays[name])
        t.attach_grad()
        return t

    x = leaf("x")
    weights = tuple(leaf(n) for n in ("i2h_weight", "h2h_weight", "i2h_bias", "h2h_bias"))
    states = [leaf(n) for n in ("state0", "state1") if n in arrays]
    head = mx.array(arrays["head"])
    env = os.environ.get("MXLITE_CPU_KERNELS")

    def run() -> None:
        with mx.autograd.record():
            if impl == "steps":
                stacked = [ops.expand_dims(s, 0) for s in states]
                out, _ = _steps.rnn_sequence(mode, x, stacked, [weights], 1, False, fused=False)
            else:
                out, _ = rnn_ops.recurrence(mode, x, states, weights)
        mx.autograd.backward([out], [head])

    if impl != "twins":
        return run

    def run_twins() -> None:
        os.environ["MXLITE_CPU_KERNELS"] = "numpy"
        try:
            run()
        finally:
            if env is None:
                os.environ.pop("MXLITE_CPU_KERNELS", None)
            else:
                os.environ["MXLITE_CPU_KERNELS"] = env

    return run_twins


def _torch_case(mode: str, arrays: dict[str, np.ndarray]) -> Callable[[], None] | None:
    try:
        import torch  # noqa: PLC0415 - optional
    except ImportError:
        return None
    features, hidden = arrays["x"].shape[2], arrays["head"].shape[2]
    layer = (torch.nn.LSTM if mode == "lstm" else torch.nn.GRU)(features, hidden)
    with torch.no_grad():  # the same weights (PyTorch's gate order differs, which does not change the work)
        layer.weight_ih_l0.copy_(torch.from_numpy(arrays["i2h_weight"]))
        layer.weight_hh_l0.copy_(torch.from_numpy(arrays["h2h_weight"]))
        layer.bias_ih_l0.copy_(torch.from_numpy(arrays["i2h_bias"]))
        layer.bias_hh_l0.copy_(torch.from_numpy(arrays["h2h_bias"]))
    x = torch.from_numpy(arrays["x"]).requires_grad_()
    states = [torch.from_numpy(arrays[n][None]).requires_grad_() for n in ("state0", "state1") if n in arrays]
    head = torch.from_numpy(arrays["head"])

    def run() -> None:
        out, _ = layer(x, tuple(states) if mode == "lstm" else states[0])
        out.backward(head)

    return run


def measure(repeat: int, length: int, batch: int, hidden: int, features: tuple[int, ...], threads: int,
            cells: tuple[str, ...] = CELLS, implementations: tuple[str, ...] = IMPLEMENTATIONS
            ) -> tuple[list[dict], list[str]]:
    """Median milliseconds of forward + backward per (cell, features, implementation), in this process."""
    notes: list[str] = []
    runs: list[tuple[tuple[str, int], str, Callable[[], None]]] = []
    for mode in cells:
        for c in features:
            arrays = _problem(mode, length, batch, c, hidden)
            for impl in implementations:
                fn = _torch_case(mode, arrays) if impl == "torch" else _mxlite_case(impl, mode, arrays)
                if fn is None:
                    note = "PyTorch is not installed: no torch column (pip install torch)"
                    if note not in notes:
                        notes.append(note)
                    continue
                runs.append(((mode, c), impl, fn))
    if threads:
        try:
            import torch  # noqa: PLC0415 - optional

            torch.set_num_threads(threads)
        except ImportError:
            pass
    times: dict[tuple[tuple[str, int], str], list[float]] = {(case, impl): [] for case, impl, _ in runs}
    for _, _, fn in runs:
        fn()
    for _ in range(repeat):
        for case, impl, fn in runs:
            t0 = time.perf_counter()
            fn()
            times[(case, impl)].append(time.perf_counter() - t0)
    records = []
    for case in dict.fromkeys(c for c, _, _ in runs):
        ms = {impl: 1e3 * statistics.median(times[(case, impl)]) for impl in IMPLEMENTATIONS if (case, impl) in times}
        records.append({"cell": case[0], "features": case[1], "length": length, "batch": batch, "hidden": hidden,
                        "threads": threads or "default", **{f"{impl}_ms": ms.get(impl) for impl in IMPLEMENTATIONS}})
    return _with_ratios(records), notes


def _with_ratios(records: list[dict]) -> list[dict]:
    """Records of the same case merged (the non-None times of each), with fused's speed relative to each other."""
    merged: dict[tuple, dict] = {}
    for r in records:
        key = (r["threads"], r["cell"], r["features"], r["length"], r["batch"], r["hidden"])
        into = merged.setdefault(key, dict(r))
        into.update({k: v for k, v in r.items() if k.endswith("_ms") and v is not None})
    for r in merged.values():
        for impl in IMPLEMENTATIONS[1:]:
            other, fused = r.get(f"{impl}_ms"), r.get("fused_ms")
            r[f"fused_vs_{impl}"] = other / fused if other and fused else None
    return list(merged.values())


def _table(records: list[dict], notes: list[str], repeat: int) -> None:
    print(f"one layer-direction, forward + backward, float32, medians of {repeat} interleaved rounds")
    cols = [f"{i}_ms" for i in IMPLEMENTATIONS] + [f"fused_vs_{i}" for i in IMPLEMENTATIONS[1:]]
    print(f"{'threads':>8} {'cell':>5} {'T,N,C,H':>14} " + " ".join(f"{c:>15}" for c in cols))
    for r in records:
        shape = f"{r['length']},{r['batch']},{r['features']},{r['hidden']}"
        cells = [f"{r[c]:.2f}" if r[c] is not None else "-" for c in cols]
        print(f"{r['threads']!s:>8} {r['cell']:>5} {shape:>14} " + " ".join(f"{c:>15}" for c in cells))
    for note in notes:
        print(f"note: {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="interleaved rounds (the median is reported)")
    parser.add_argument("--threads", type=int, default=None,
                        help="run one thread setting in this process (0: the default); without it, 1 and the default "
                             "run in child processes")
    parser.add_argument("--length", type=int, default=LENGTH)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--hidden", type=int, default=HIDDEN)
    parser.add_argument("--features", default=",".join(map(str, FEATURES)), help="comma-separated input widths")
    parser.add_argument("--cells", default=",".join(CELLS), help="comma-separated: lstm, gru")
    parser.add_argument("--only", choices=("mxlite", "torch"), help="run one library's implementations")
    parser.add_argument("--json", help="write the records here")
    args = parser.parse_args(argv)
    features = tuple(int(v) for v in args.features.split(","))
    cells = tuple(c.strip() for c in args.cells.split(",") if c.strip())
    libraries = {"mxlite": IMPLEMENTATIONS[:3], "torch": IMPLEMENTATIONS[3:]}
    if args.threads is not None:
        implementations = libraries[args.only] if args.only else IMPLEMENTATIONS
        records, notes = measure(args.repeat, args.length, args.batch, args.hidden, features, args.threads, cells,
                                 implementations)
    else:
        records, notes = [], []
        for threads in (1, 0):
            env = dict(os.environ)
            for var in _THREAD_VARS:
                if threads:
                    env[var] = str(threads)
                else:
                    env.pop(var, None)
            for library in libraries if not threads else [None]:
                child = [sys.executable, os.path.abspath(__file__), "--threads", str(threads),
                         *(["--only", library] if library else []),
                         "--repeat", str(args.repeat), "--length", str(args.length), "--batch", str(args.batch),
                         "--hidden", str(args.hidden), "--features", args.features, "--cells", args.cells,
                         "--json", "/dev/stdout"]
                found = subprocess.run(child, env=env, capture_output=True, text=True, check=True).stdout
                part = json.loads(found[found.index("{\n"):])
                records += part["records"]
                notes += [n for n in part["meta"]["notes"] if n not in notes]
        records = _with_ratios(records)
    if args.json != "/dev/stdout":
        _table(records, notes, args.repeat)
    if args.json:
        import mxlite as mx  # noqa: PLC0415

        try:
            import torch  # noqa: PLC0415

            torch_version = torch.__version__
        except ImportError:
            torch_version = None
        meta = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                "python": platform.python_version(), "numpy": np.__version__, "mxlite": mx.__version__,
                "torch": torch_version, "argv": sys.argv, "notes": notes}
        text = json.dumps({"meta": meta, "records": records}, indent=2)
        if args.json == "/dev/stdout":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
