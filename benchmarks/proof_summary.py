"""The end of ``make gpu-proof``: what the run measured, in three tables, from the JSON ``run_all.py --proof`` wrote.

Usage: ``python benchmarks/proof_summary.py --bench DIR [--tests gpu-tests.txt] [--json summary.json]``

1. **Training step, mxlite against PyTorch eager**: for every step of ``measured_h200.json`` that
   this run measured (``DIR/bench_train_<step>.json``, mxlite over ``kvstore=None``): ms/step of
   each and the ratio mxlite/torch (above 1: mxlite is slower); then the step modelled by
   ``roofline.py`` from the counts in ``measured_h200_counts.json`` on this GPU (H200 or H100 by
   its name), the model's error, what it says bounds the step, and the H200's reference figure.
   A step measured at other sizes than the counts (``--quick``) gets no modelled figure.
2. **Fused optimizer**: per rule of ``DIR/bench_optimizer.json``, the fused update's ms and share
   of a device copy's bandwidth, the per-tensor loop's ms and PyTorch's (fused, else foreach).
3. The GPU tests' outcome: the last line of ``--tests`` (pytest's summary).

Missing files leave their table out with a line saying so; nothing here needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import roofline  # noqa: E402 - benchmarks/ is not a package

MEASURED = os.path.join(HERE, "measured_h200.json")
COUNTS = os.path.join(HERE, "measured_h200_counts.json")
# The bench_train sizes a measured step fixes (absent ones: bench_train's defaults at measurement time).
SIZE_KEYS = ("hidden", "layers", "input", "batch", "image", "cnn_batch", "optimizer", "dtype")


def train_output(step: dict[str, Any]) -> str:
    """The file name ``run_all.py --proof`` gives the bench_train run of a measured step."""
    return f"bench_train_{step['name']}"


def train_arguments(step: dict[str, Any]) -> list[str]:
    """bench_train.py's options that reproduce a measured step (its model, sizes, optimizer, dtype)."""
    out = ["--models", step["model"]]
    for key in SIZE_KEYS:
        if key in step:
            out += [f"--{key.replace('_', '-')}", str(step[key])]
    return out


def gpu_key(device: str) -> str | None:
    """The :data:`roofline.GPUS` key of a device name ('NVIDIA H200' -> 'h200'), None when not modelled."""
    name = device.lower()
    return next((key for key in roofline.GPUS if key in name), None)


def _load(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def train_rows(bench: str, measured: dict[str, Any], counts: dict[str, Any] | None) -> tuple[list[dict[str, Any]],
                                                                                             list[str]]:
    """One row per measured step that this run measured, and notes on those it did not."""
    counted = {s["name"]: s for s in (counts or {}).get("steps", [])}
    rows, notes = [], []
    for step in measured["steps"]:
        data = _load(os.path.join(bench, f"{train_output(step)}.json"))
        if data is None:
            notes.append(f"{step['name']}: not measured in this run ({train_output(step)}.json missing)")
            continue
        records = [r for r in data["records"] if r["model"] == step["model"]]
        mx_rec = next((r for r in records if r["framework"] == "mxlite" and r.get("kvstore") is None), None)
        torch_rec = next((r for r in records if r["framework"] == "torch"), None)
        if mx_rec is None:
            notes.append(f"{step['name']}: no mxlite record ({'; '.join(data.get('notes', [])) or 'see its log'})")
            continue
        args = data["meta"]["args"]
        row: dict[str, Any] = {"name": step["name"], "device": data["meta"]["device"],
                               "mxlite_ms": 1e3 * mx_rec["seconds_per_step"],
                               "torch_ms": 1e3 * torch_rec["seconds_per_step"] if torch_rec else None,
                               "reference_ms": step["mxlite_ms"], "reference_torch_ms": step.get("torch_ms")}
        row["ratio"] = row["mxlite_ms"] / row["torch_ms"] if row["torch_ms"] else None
        same_sizes = all(args.get(k) == v for k, v in step.items() if k in SIZE_KEYS)
        gpu = gpu_key(row["device"])
        if step["name"] in counted and same_sizes and gpu is not None:
            phases = {p: roofline.counts_from_json(c) for p, c in counted[step["name"]]["counts"].items()}
            model = roofline.step_seconds(phases, 1, roofline.GPUS[gpu])
            row.update(modelled_ms=1e3 * model["modelled_s"], dominant=roofline.dominant(model), gpu=gpu)
            row["error"] = row["modelled_ms"] / row["mxlite_ms"] - 1
        else:
            row["not_modelled"] = ("other sizes than the counts" if not same_sizes else
                                   "no stored counts" if step["name"] not in counted else "not an H100/H200")
        rows.append(row)
    return rows, notes


def optimizer_rows(bench: str) -> list[dict[str, Any]] | None:
    """Per rule: the fused update, the per-tensor loop and PyTorch (fused, else foreach), from bench_optimizer."""
    data = _load(os.path.join(bench, "bench_optimizer.json"))
    if data is None:
        return None
    by = {(r["rule"], r["impl"]): r for r in data["records"]}
    rows = []
    for rule in dict.fromkeys(r["rule"] for r in data["records"]):
        fused = by.get((rule, "mxlite-fused"))
        if fused is None:
            continue
        torch_rec = by.get((rule, "torch-fused")) or by.get((rule, "torch-foreach"))
        loop = by.get((rule, "mxlite-per-tensor"))
        rows.append({"rule": rule, "fused_ms": fused["ms"], "pct_of_copy": fused["pct_of_copy"],
                     "per_tensor_ms": loop["ms"] if loop else None, "torch_ms": torch_rec["ms"] if torch_rec else None,
                     "torch_impl": torch_rec["impl"] if torch_rec else None,
                     "device": data["meta"].get("device"), "copy_gb_per_s": data["meta"].get("copy_gb_per_s")})
    return rows


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_summary(rows: list[dict[str, Any]], notes: list[str], opt: list[dict[str, Any]] | None,
                  tests: str | None) -> None:
    """The three tables, after one heading."""
    device = rows[0]["device"] if rows else (opt[0]["device"] if opt else "?")
    print(f"\n==== gpu-proof summary: {device} ====")
    if tests:
        print(f"GPU tests: {tests}")
    print("\nTraining step, mxlite (kvstore=None) against PyTorch eager (foreach optimizer, TF32 off), ms/step:")
    print(f"{'step':16s} {'mxlite':>8s} {'torch':>8s} {'mx/torch':>8s} {'modelled':>8s} {'error':>6s} "
          f"{'H200 ref':>8s}  model: bound by")
    for r in rows:
        bound = (f"{r['dominant']['side']}: {r['dominant']['part']}" if "dominant" in r
                 else f"(not modelled: {r['not_modelled']})")
        error = f"{100 * r['error']:+5.0f}%" if "error" in r else "-"
        print(f"{r['name']:16s} {r['mxlite_ms']:8.2f} {_f(r['torch_ms'], '8.2f'):>8s} {_f(r['ratio'], '8.2f'):>8s} "
              f"{_f(r.get('modelled_ms'), '8.2f'):>8s} {error:>6s} {r['reference_ms']:8.2f}  {bound}")
    print("mx/torch: mxlite's ms over torch's (above 1: mxlite slower); modelled: benchmarks/roofline.py on the "
          "stored counts (measured_h200_counts.json); H200 ref: measured_h200.json")
    for note in notes:
        print("note:", note)
    if opt is None:
        print("\nFused optimizer: bench_optimizer.json missing")
        return
    copy = opt[0]["copy_gb_per_s"] if opt else None
    print(f"\nFused optimizer step (bench_optimizer.py; device copy {_f(copy, '.0f')} GB/s), ms/step:")
    print(f"{'rule':9s} {'fused':>8s} {'% copy':>7s} {'per-tensor':>10s} {'torch':>8s} {'torch/fused':>11s}  "
          "torch impl")
    for r in opt:
        speed = r["torch_ms"] / r["fused_ms"] if r["torch_ms"] else None
        print(f"{r['rule']:9s} {r['fused_ms']:8.3f} {r['pct_of_copy']:6.1f}% {_f(r['per_tensor_ms'], '10.3f'):>10s} "
              f"{_f(r['torch_ms'], '8.3f'):>8s} {_f(speed, '11.2f'):>11s}  {r['torch_impl'] or '-'}")
    print("torch/fused: torch's ms over the fused update's (above 1: the fused update is faster)")


def tests_outcome(path: str | None) -> str | None:
    """The last non-empty line of a pytest log (its summary), or a line saying it is missing."""
    if not path:
        return None
    try:
        with open(path) as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return f"no log at {path}"
    return lines[-1] if lines else f"{path} is empty"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", required=True, help="the folder run_all.py --proof wrote")
    parser.add_argument("--measured", default=MEASURED, help="the reference steps (measured_h200.json)")
    parser.add_argument("--counts", default=COUNTS, help="their counts (measured_h200_counts.json)")
    parser.add_argument("--tests", help="the GPU tests' log (its last line is shown)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    measured = _load(args.measured)
    if measured is None:
        raise SystemExit(f"cannot read the measured steps {args.measured!r}")
    rows, notes = train_rows(args.bench, measured, _load(args.counts))
    opt = optimizer_rows(args.bench)
    print_summary(rows, notes, opt, tests_outcome(args.tests))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"train": rows, "notes": notes, "optimizer": opt}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
