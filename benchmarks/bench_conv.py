"""Convolution and pooling primitives on CPU: mxlite's NumPy forms against PyTorch's CPU kernels.

Each case times forward + backward (input and weight gradients) of one primitive at a fixed
shape, float32, in mxlite (``mxlite.ops.nn_ops``) and, when installed, in PyTorch
(``torch.nn.functional``) with the same threads. Cases are interleaved, ``--repeat`` rounds of
each after one warm-up call, and the median round is reported with mxlite's speed relative to
PyTorch's (> 1: mxlite is faster). The default shapes are the layers of ``bench_train.py``'s CNN
at batch 128 plus 1-D, 3-D, transposed and overlapping-window cases.

Usage: ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python3 benchmarks/bench_conv.py
[--repeat 7] [--json out.json]``. Primitives missing from the mxlite being measured (an older
version without N-D convolution) are skipped.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import mxlite as mx
from mxlite.ops import nn_ops

# name -> (mxlite op name, torch function name, input shape, weight shape or None, keyword arguments)
CASES: dict[str, tuple[str, str, tuple[int, ...], tuple[int, ...] | None, dict[str, Any]]] = {
    "conv2d 3->32 3x3 p1 on 128x3x32x32": ("conv2d", "conv2d", (128, 3, 32, 32), (32, 3, 3, 3), {"padding": 1}),
    "conv2d 32->64 3x3 p1 on 128x32x16x16": ("conv2d", "conv2d", (128, 32, 16, 16), (64, 32, 3, 3), {"padding": 1}),
    "conv2d 64->64 3x3 s2 on 128x64x8x8": ("conv2d", "conv2d", (128, 64, 8, 8), (64, 64, 3, 3),
                                          {"padding": 1, "stride": 2}),
    "conv1d 64->64 k5 on 64x64x256": ("conv", "conv1d", (64, 64, 256), (64, 64, 5), {"padding": 2}),
    "conv3d 16->32 3x3x3 on 16x16x8x16x16": ("conv", "conv3d", (16, 16, 8, 16, 16), (32, 16, 3, 3, 3),
                                            {"padding": 1}),
    "conv_transpose2d 64->32 4x4 s2 on 64x64x8x8": ("conv_transpose", "conv_transpose2d", (64, 64, 8, 8),
                                                   (64, 32, 4, 4), {"stride": 2, "padding": 1}),
    "max_pool2d 2x2 on 128x32x32x32": ("max_pool2d", "max_pool2d", (128, 32, 32, 32), None, {}),
    "max_pool2d 3x3 s2 p1 (overlap) on 128x64x16x16": ("max_pool2d", "max_pool2d", (128, 64, 16, 16), None,
                                                       {"pool_size": 3, "strides": 2, "padding": 1}),
    "avg_pool2d 3x3 s1 p1 on 128x64x16x16": ("avg_pool2d", "avg_pool2d", (128, 64, 16, 16), None,
                                             {"pool_size": 3, "strides": 1, "padding": 1}),
}

_TORCH_KW = {"pool_size": "kernel_size", "strides": "stride"}


def _mx_case(op: str, x_shape: tuple[int, ...], w_shape: tuple[int, ...] | None,
             kwargs: dict[str, Any]) -> Callable[[], None] | None:
    fn = getattr(nn_ops, op, None)
    if fn is None:
        return None
    rng = np.random.default_rng(0)
    x = mx.array(rng.normal(size=x_shape).astype(np.float32))
    x.attach_grad()
    args = [x]
    if w_shape is not None:
        w = mx.array(rng.normal(size=w_shape).astype(np.float32) * 0.1)
        w.attach_grad()
        args.append(w)

    def run() -> None:
        with mx.autograd.record():
            y = fn(*args, **kwargs)
        y.backward()

    return run


def _torch_case(name: str, x_shape: tuple[int, ...], w_shape: tuple[int, ...] | None,
                kwargs: dict[str, Any]) -> Callable[[], None] | None:
    try:
        import torch  # noqa: PLC0415 - optional
    except ImportError:
        return None
    fn = getattr(torch.nn.functional, name)
    x = torch.randn(x_shape, requires_grad=True)
    args = [x]
    if w_shape is not None:
        args.append((0.1 * torch.randn(w_shape)).requires_grad_())
    kw = {_TORCH_KW.get(k, k): v for k, v in kwargs.items()}
    if name.endswith("pool2d") and "kernel_size" not in kw:
        kw["kernel_size"] = 2

    def run() -> None:
        y = fn(*args, **kw)
        y.backward(torch.ones_like(y))

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="interleaved rounds (the median is reported)")
    parser.add_argument("--cases", default="", help="comma-separated substrings selecting cases (default all)")
    parser.add_argument("--json", help="write the records here")
    args = parser.parse_args(argv)
    wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
    runs: list[tuple[str, str, Callable[[], None]]] = []
    for case, (op, torch_name, x_shape, w_shape, kwargs) in CASES.items():
        if wanted and not any(w in case for w in wanted):
            continue
        for framework, fn in (("mxlite", _mx_case(op, x_shape, w_shape, kwargs)),
                              ("torch", _torch_case(torch_name, x_shape, w_shape, kwargs))):
            if fn is not None:
                runs.append((case, framework, fn))
    times: dict[tuple[str, str], list[float]] = {(c, f): [] for c, f, _ in runs}
    for _, _, fn in runs:
        fn()
    for _ in range(args.repeat):
        for case, framework, fn in runs:
            t0 = time.perf_counter()
            fn()
            times[(case, framework)].append(time.perf_counter() - t0)
    records = []
    for case in dict.fromkeys(c for c, _, _ in runs):
        mx_ms = 1e3 * statistics.median(times[(case, "mxlite")]) if (case, "mxlite") in times else None
        th_ms = 1e3 * statistics.median(times[(case, "torch")]) if (case, "torch") in times else None
        records.append({"case": case, "mxlite_ms": mx_ms, "torch_ms": th_ms,
                        "mx_vs_torch": th_ms / mx_ms if mx_ms and th_ms else None})
    print(f"forward + backward, float32, medians of {args.repeat} interleaved rounds")
    print(f"{'case':<50} {'mxlite ms':>10} {'torch ms':>10} {'mx/torch':>9}")
    for r in records:
        cells = [f"{r[k]:.2f}" if r[k] is not None else "-" for k in ("mxlite_ms", "torch_ms", "mx_vs_torch")]
        print(f"{r['case']:<50} {cells[0]:>10} {cells[1]:>10} {cells[2]:>9}")
    if args.json:
        meta = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
                "numpy": np.__version__, "mxlite": mx.__version__, "argv": sys.argv}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "records": records}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
