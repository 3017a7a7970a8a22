"""The benchmark scripts run end to end at toy sizes and write the JSON they promise (no timings asserted)."""

import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmarks", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_optimizer_reports_every_rule_and_implementation(tmp_path, capsys):
    bench = _load("bench_optimizer")
    out = tmp_path / "opt.json"
    assert bench.main(["--device", "cpu", "--params", "20000", "--tensors", "30", "--repeat", "1",
                       "--json", str(out)]) == 0
    records = json.loads(out.read_text())["records"]
    impls = {(r["rule"], r["impl"]) for r in records}
    for rule in ("adam", "sgd", "lamb"):
        assert {(rule, "mxlite-fused"), (rule, "mxlite-per-tensor")} <= impls
    assert all(r["ms"] > 0 and r["gb_per_s"] > 0 and r["pct_of_copy"] > 0 for r in records)
    assert "lamb" in capsys.readouterr().out


def test_bench_optimizer_sizes_are_mixed_and_sum_to_the_total():
    sizes = _load("bench_optimizer").tensor_sizes(1_000_000, 300)
    assert len(sizes) == 300 and abs(sum(sizes) - 1_000_000) < 1000
    assert max(sizes) > 50 * sorted(sizes)[150]  # a few large tensors among many small ones


@pytest.mark.parametrize("devices", ["cpu"])
def test_bench_step_runs(tmp_path, devices):
    out = tmp_path / "step.json"
    assert _load("bench_step").main(["--devices", devices, "--hidden", "16", "--batch", "8", "--steps", "2",
                                     "--json", str(out)]) == 0
    records = json.loads(out.read_text())["records"]
    assert [len(r["devices"]) for r in records] == [1, 2, 4]
