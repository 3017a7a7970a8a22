"""The end of ``make gpu-proof``: what the run measured, in two tables, from the JSON ``run_all.py --proof`` wrote.

Usage: ``python benchmarks/proof_summary.py --bench DIR [--tests gpu-tests.txt] [--json summary.json]``

1. **Training step, one row per step**, in :func:`proof_steps`' order (most important first): the
   CUDA-graph steps of :data:`GRAPH_STEPS` (bench_train ``--graphs``: mxlite hybridized, PyTorch eager
   and as one CUDA graph), then every step of ``measured_h200.json`` (mxlite eager over
   ``kvstore=None`` against PyTorch eager). Columns: mxlite ms, torch eager ms, torch graph ms, the
   ratio that the step's target (:data:`TARGETS`) bounds (else mxlite over torch eager; above 1:
   mxlite slower), the target and whether it is met (a graph step that captured nothing does not
   count: ``NOT CAPTURED``); then for eager steps the step modelled by ``roofline.py`` from the counts
   in ``measured_h200_counts.json`` on this GPU (H200 or H100 by its name), the model's error and the
   H200's reference figure. A step measured at other sizes than the counts (``--quick``) gets no
   modelled figure. A run of several steps at once (``bench_train_<name>+<name>.json``) counts for each.
2. **Fused optimizer**: per rule of ``DIR/bench_optimizer.json``, the fused update's ms, its measured
   share of a device copy's bandwidth beside the share the roofline model gives it (16-byte kernels),
   the per-tensor loop's ms and PyTorch's (fused, else foreach).
3. The GPU tests' outcome: the last line of ``--tests`` (pytest's summary).

Missing files leave their rows out with a line saying so; nothing here needs a GPU.
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


# The CUDA-graph steps (bench_train --graphs), measured before the eager ones: the 1M-parameter MLP with
# Adam and the CNN with SGD-momentum.
GRAPH_STEPS = [
    {"name": "graphs-small-mlp-adam", "model": "mlp", "optimizer": "adam", "dtype": "float32", "hidden": 512,
     "layers": 4, "input": 512, "batch": 64, "graphs": True},
    {"name": "graphs-cnn-sgd", "model": "cnn", "optimizer": "sgd", "dtype": "float32", "image": 32, "cnn_batch": 256,
     "graphs": True},
]
# The eager steps of measured_h200.json, most important first (others follow in the file's order).
EAGER_ORDER = ("cnn-sgd", "cnn_bn-sgd", "mlp-sgd", "mlp-fp16-sgd", "mlp-adam", "small-mlp-adam")
# step -> (the torch figure it is held against: 'torch_ms' (eager) or 'torch_graph_ms', the largest
# mxlite ms over that figure that meets it, the target in words).
TARGETS = {
    "graphs-small-mlp-adam": ("torch_graph_ms", 1.3, "<=1.3x torch graph"),
    "graphs-cnn-sgd": ("torch_ms", 1 / 1.3, ">=1.3x eager speed"),
}
BF16_NOTE = ("bf16: not measured: mxlite has no bfloat16 weights (NumPy has no bfloat16; bf16 is a gradient wire "
             "format only); float16 is the half-precision row")


def proof_steps(measured: dict[str, Any]) -> list[dict[str, Any]]:
    """Every step ``--proof`` measures, most important first: :data:`GRAPH_STEPS`, then the measured steps
    in :data:`EAGER_ORDER`."""
    order = {name: i for i, name in enumerate(EAGER_ORDER)}
    eager = sorted(measured["steps"], key=lambda s: order.get(s["name"], len(order)))
    return [*GRAPH_STEPS, *eager]


def train_output(steps: list[dict[str, Any]]) -> str:
    """The file name ``run_all.py --proof`` gives one bench_train run of ``steps`` (one or several)."""
    return "bench_train_" + "+".join(s["name"] for s in steps)


def train_arguments(steps: list[dict[str, Any]]) -> list[str]:
    """bench_train.py's options that run ``steps`` in one process (their models, sizes, optimizer, dtype):
    they must agree on every size they share (:func:`mergeable`)."""
    merged: dict[str, Any] = {}
    for step in steps:
        merged.update({k: v for k, v in step.items() if k in SIZE_KEYS})
    out = ["--models", ",".join(dict.fromkeys(s["model"] for s in steps))]
    for key in SIZE_KEYS:
        if key in merged:
            out += [f"--{key.replace('_', '-')}", str(merged[key])]
    return out + (["--graphs"] if steps[0].get("graphs") else [])


def mergeable(group: list[dict[str, Any]], step: dict[str, Any]) -> bool:
    """Whether ``step`` can join one bench_train run with ``group``: another model, the same graphs flag,
    and no size, optimizer or dtype that differs."""
    for other in group:
        if other["model"] == step["model"] or bool(other.get("graphs")) != bool(step.get("graphs")):
            return False
        if any(other[k] != step[k] for k in SIZE_KEYS if k in other and k in step):
            return False
        if other.get("optimizer", "sgd") != step.get("optimizer", "sgd") or \
                other.get("dtype", "float32") != step.get("dtype", "float32"):
            return False
    return True


def train_groups(steps: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``steps`` cut into bench_train runs: each step joins the run just before it when :func:`mergeable`
    (a process started is a few seconds of the budget), keeping the order."""
    groups: list[list[dict[str, Any]]] = []
    for step in steps:
        if groups and mergeable(groups[-1], step):
            groups[-1].append(step)
        else:
            groups.append([step])
    return groups


def _train_file(bench: str, step: dict[str, Any]) -> str | None:
    """The bench_train JSON in ``bench`` whose run covered ``step`` (None when none did)."""
    try:
        names = sorted(os.listdir(bench))
    except OSError:
        return None
    for name in names:
        if name.startswith("bench_train_") and name.endswith(".json") and \
                step["name"] in name[len("bench_train_"):-len(".json")].split("+"):
            return os.path.join(bench, name)
    return None


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
    """One row per step of :func:`proof_steps` that this run measured, and notes on those it did not."""
    counted = {s["name"]: s for s in (counts or {}).get("steps", [])}
    reference = {s["name"]: s for s in measured["steps"]}
    rows, notes = [], []
    for step in proof_steps(measured):
        path = _train_file(bench, step)
        data = _load(path) if path else None
        if data is None:
            notes.append(f"{step['name']}: not measured in this run (no bench_train_*.json covers it)")
            continue
        graphs = bool(step.get("graphs"))
        records = [r for r in data["records"] if r["model"] == step["model"]]
        mx_rec = next((r for r in records if r["framework"] == "mxlite" and r.get("kvstore") is None
                       and (r.get("mode") == "graph") == graphs), None)
        eager = next((r for r in records if r["framework"] == "torch" and r.get("mode", "eager") == "eager"), None)
        graph = next((r for r in records if r["framework"] == "torch" and r.get("mode") == "graph"), None)
        if mx_rec is None:
            notes.append(f"{step['name']}: no mxlite record ({'; '.join(data.get('notes', [])) or 'see its log'})")
            continue
        for note in data.get("notes", []):
            if "nvmath-python missing" in note or "no CUDA graph captured" in note or "failed" in note:
                notes.append(f"{step['name']}: {note}")
        args = data["meta"]["args"]
        ref = reference.get(step["name"], {})
        row: dict[str, Any] = {"name": step["name"], "device": data["meta"]["device"], "graphs": graphs,
                               "mxlite_ms": 1e3 * mx_rec["seconds_per_step"],
                               "torch_ms": 1e3 * eager["seconds_per_step"] if eager else None,
                               "torch_graph_ms": 1e3 * graph["seconds_per_step"] if graph else None,
                               "reference_ms": ref.get("mxlite_ms"), "reference_torch_ms": ref.get("torch_ms")}
        if graphs:
            row.update(captured=bool(mx_rec.get("captured")), gemm_backend=mx_rec.get("gemm_backend"))
        against, bound, words = TARGETS.get(step["name"], ("torch_ms", None, None))
        row["ratio"] = row["mxlite_ms"] / row[against] if row[against] else None
        row.update(ratio_against=against, target=words, target_ratio=bound)
        row["met"] = None if bound is None or row["ratio"] is None else row["ratio"] <= bound
        if graphs and not row["captured"] and row["met"]:
            row["met"] = False  # fast enough, but not as CUDA graphs: the target is about the captured step
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
    """Per rule: the fused update (its measured % of the device copy, and the roofline model's), the per-tensor
    loop and PyTorch (fused, else foreach), from bench_optimizer."""
    data = _load(os.path.join(bench, "bench_optimizer.json"))
    if data is None:
        return None
    by = {(r["rule"], r["impl"]): r for r in data["records"]}
    model = {r["rule"]: r for r in data.get("modelled", [])}
    rows = []
    for rule in dict.fromkeys(r["rule"] for r in data["records"]):
        fused = by.get((rule, "mxlite-fused"))
        if fused is None:
            continue
        torch_rec = by.get((rule, "torch-fused")) or by.get((rule, "torch-foreach"))
        loop = by.get((rule, "mxlite-per-tensor"))
        rows.append({"rule": rule, "fused_ms": fused["ms"], "pct_of_copy": fused["pct_of_copy"],
                     "modelled_pct_of_copy": model.get(rule, {}).get("vector_pct_of_copy"),
                     "params": fused.get("params"),
                     "per_tensor_ms": loop["ms"] if loop else None, "torch_ms": torch_rec["ms"] if torch_rec else None,
                     "torch_impl": torch_rec["impl"] if torch_rec else None,
                     "device": data["meta"].get("device"), "copy_gb_per_s": data["meta"].get("copy_gb_per_s")})
    return rows


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _met(r: dict[str, Any]) -> str:
    if r["graphs"] and not r.get("captured"):
        return "NOT CAPTURED"
    return "-" if r["met"] is None else ("yes" if r["met"] else "NO")


def print_summary(rows: list[dict[str, Any]], notes: list[str], opt: list[dict[str, Any]] | None,
                  tests: str | None) -> None:
    """The tables, after one heading."""
    device = rows[0]["device"] if rows else (opt[0]["device"] if opt else "?")
    print(f"\n==== gpu-proof summary: {device} ====")
    if tests:
        print(f"GPU tests: {tests}")
    print("\nTraining step, ms/step (mxlite kvstore=None; graphs-*: hybridized as CUDA graphs; torch: foreach "
          "optimizer, TF32 off):")
    print(f"{'model':22s} {'mxlite':>8s} {'torch':>8s} {'torch':>8s} {'ratio':>6s}  {'target':19s} {'met?':12s} "
          f"{'modelled':>8s} {'error':>6s} {'H200 ref':>8s}  model: bound by")
    print(f"{'':22s} {'':>8s} {'eager':>8s} {'graph':>8s}")
    for r in rows:
        bound = (f"{r['dominant']['side']}: {r['dominant']['part']}" if "dominant" in r
                 else f"(not modelled: {r['not_modelled']})")
        error = f"{100 * r['error']:+5.0f}%" if "error" in r else "-"
        target = r["target"] or "-"
        print(f"{r['name']:22s} {r['mxlite_ms']:8.2f} {_f(r['torch_ms'], '8.2f'):>8s} "
              f"{_f(r['torch_graph_ms'], '8.2f'):>8s} {_f(r['ratio'], '6.2f'):>6s}  {target:19s} {_met(r):12s} "
              f"{_f(r.get('modelled_ms'), '8.2f'):>8s} {error:>6s} {_f(r['reference_ms'], '8.2f'):>8s}  {bound}")
    print("ratio: mxlite's ms over the torch figure its target names (torch eager where there is no target; above "
          "1: mxlite slower): met when <= 1.3 against torch graph, <= 1/1.3 = 0.77 against torch eager for "
          "'>=1.3x eager speed'; NOT CAPTURED: mxlite ran no CUDA graph (see the notes); modelled: "
          "benchmarks/roofline.py on the stored counts (measured_h200_counts.json); H200 ref: measured_h200.json")
    print("note:", BF16_NOTE)
    for note in notes:
        print("note:", note)
    if opt is None:
        print("\nFused optimizer: bench_optimizer.json missing")
        return
    copy = opt[0]["copy_gb_per_s"] if opt else None
    params = opt[0].get("params") if opt else None
    print(f"\nFused optimizer step (bench_optimizer.py; {_f(params and params / 1e6, '.0f')}M float32 parameters; "
          f"device copy {_f(copy, '.0f')} GB/s), ms/step:")
    print(f"{'rule':9s} {'fused':>8s} {'% copy':>7s} {'modelled':>8s} {'per-tensor':>10s} {'torch':>8s} "
          f"{'torch/fused':>11s}  torch impl")
    for r in opt:
        speed = r["torch_ms"] / r["fused_ms"] if r["torch_ms"] else None
        modelled = r.get("modelled_pct_of_copy")
        print(f"{r['rule']:9s} {r['fused_ms']:8.3f} {r['pct_of_copy']:6.1f}% "
              f"{_f(modelled, '7.1f') + ('%' if modelled is not None else ''):>8s} "
              f"{_f(r['per_tensor_ms'], '10.3f'):>10s} {_f(r['torch_ms'], '8.3f'):>8s} {_f(speed, '11.2f'):>11s}  "
              f"{r['torch_impl'] or '-'}")
    print("% copy: measured share of the device copy's bandwidth; modelled: the roofline model's share "
          "(benchmarks/roofline.py, 16-byte kernels, H200 geometry); torch/fused: torch's ms over the fused "
          "update's (above 1: the fused update is faster)")


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
