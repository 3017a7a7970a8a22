"""benchmarks/roofline.py: the step-time model with its host side, against the steps measured on an H200.

* every constant names its source; the H200's measured figures say they were measured on an H200;
* calibration: the counted steps of benchmarks/measured_h200_counts.json, modelled on the H200,
  come within 30% of the steps measured there (benchmarks/measured_h200.json), and the model says
  what bounds each (host dispatch for the small MLP and the CNN, GEMMs for the fp32 MLP);
* the stored counts are today's: the small MLP recounted on the emulated GPU gives them again;
* the overlap timeline: hand-computed cases (max of host and GPU without syncs, a sync exposing
  the GPU's backlog), and the model only grows with each count, on both GPUs.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks")


def _load(name):
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)  # bench_gpu_model imports roofline and bench_train by name
    spec = importlib.util.spec_from_file_location(name, os.path.join(BENCH, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


rl = _load("roofline")
MEASURED = json.loads(open(os.path.join(BENCH, "measured_h200.json")).read())
COUNTED = json.loads(open(os.path.join(BENCH, "measured_h200_counts.json")).read())


def _modelled(step):
    phases = {name: rl.counts_from_json(c) for name, c in step["counts"].items()}
    return rl.step_seconds(phases, 1, rl.GPUS[COUNTED["gpu"]])


# -- constants ----------------------------------------------------------------------------------------
def test_every_constant_names_its_source():
    for name, (value, unit, source) in rl.CONSTANTS.items():
        assert value > 0 and isinstance(unit, str) and len(source) > 10, name
        assert getattr(rl, name) == value, name  # the table shows the values the model uses
    measured = {k for k, (_, _, s) in rl.CONSTANTS.items() if s.startswith("measured")}
    assert {"H200_COPY_BYTES_PER_S", "GEMM_MIN_S", "CUPY_CALL_S", "MXLITE_OP_S", "H200_FP16_EFFICIENCY"} <= measured
    assert all("H200" in rl.CONSTANTS[k][2] for k in measured)
    assert rl.CONSTANTS["MXLITE_PYTHON_PER_CALL_S"][2].startswith("calibrated")
    for gpu in rl.GPUS.values():
        fields = {f.name for f in dataclasses.fields(gpu)} - {"name", "sources"}
        assert fields == set(gpu.sources), gpu.name  # every figure of a GPU has its source
    assert rl.H200.sources["memory_bytes_per_s"].startswith("measured on an H200")
    assert rl.H200.hbm_bytes_per_s == 4.8e12 and rl.H200.memory_bytes_per_s == 2897e9
    assert "4.8 TB/s" in rl.H200.sources["hbm_bytes_per_s"]


def test_the_measured_file_names_device_versions_and_sizes():
    assert MEASURED["gpu"] == "h200" and "H200" in MEASURED["device"]
    assert {"cupy", "cuda", "torch"} <= set(MEASURED["versions"])
    names = [s["name"] for s in MEASURED["steps"]]
    assert names == [s["name"] for s in COUNTED["steps"]]  # the counts are of these steps
    small = next(s for s in MEASURED["steps"] if s["name"] == "small-mlp-adam")
    assert (small["hidden"], small["layers"], small["input"], small["batch"]) == (512, 4, 512, 64)


# -- calibration --------------------------------------------------------------------------------------
@pytest.mark.parametrize("step", COUNTED["steps"], ids=lambda s: s["name"])
def test_the_model_reproduces_the_h200_steps_within_30_percent(step):
    got = _modelled(step)["modelled_s"] * 1e3
    assert got == pytest.approx(step["measured_ms"], rel=0.30), (step["name"], got)


def test_the_small_mlp_calibrates_the_host_and_the_others_are_predictions():
    small = next(s for s in COUNTED["steps"] if s["name"] == "small-mlp-adam")
    assert _modelled(small)["modelled_s"] * 1e3 == pytest.approx(2.20, rel=0.01)  # what was fitted
    c = small["counts"]
    assert sum(p["cupy_calls"] for p in c.values()) == 82 and sum(p["mxlite_ops"] for p in c.values()) == 11
    # the H200's profile saw 61 launches, before the fused softmax cross-entropy and ReLU kernels
    assert sum(p["launches"] for p in c.values()) == 41


def test_what_bounds_each_step():
    bound = {s["name"]: rl.dominant(_modelled(s)) for s in COUNTED["steps"]}
    for name in ("small-mlp-adam", "cnn-sgd", "cnn_bn-sgd", "mlp-fp16-sgd"):
        assert (bound[name]["side"], bound[name]["part"]) == ("host", "host dispatch"), name
    for name in ("mlp-sgd", "mlp-adam"):
        assert (bound[name]["side"], bound[name]["part"]) == ("GPU", "GEMM"), name
        assert bound[name]["share"] > 0.75


def test_the_cnn_counts_show_its_per_block_backward():
    cnn = next(s for s in COUNTED["steps"] if s["name"] == "cnn-sgd")["counts"]
    assert cnn["backward"]["raw_launches"] == 88 and cnn["backward"]["h2d_copies"] == 88  # col2im + geometry
    gemms = sum(n for p in cnn.values() for _, _, n in p["gemms"])
    assert gemms == 97  # 93 cupy.matmul calls, as the H200's profile saw, and 4 `@`


@pytest.mark.gpu
def test_the_stored_counts_are_todays(tmp_path, capsys):
    """The small MLP counted now on an emulated GPU gives the stored counts (else regenerate them:
    bench_gpu_model.py --measured --only-measured --gpus 1 --counts-out ...)."""
    import mxlite as mx  # noqa: PLC0415

    if mx.device.devices._emulated_gpus() < 1:
        pytest.skip("counts come from the GPU emulation (MXLITE_EMULATE_GPUS >= 1)")
    bench = _load("bench_gpu_model")
    small = next(s for s in MEASURED["steps"] if s["name"] == "small-mlp-adam")
    path = tmp_path / "small.json"
    path.write_text(json.dumps({**MEASURED, "steps": [small]}))
    out = tmp_path / "counts.json"
    assert bench.main(["--measured", str(path), "--only-measured", "--gpus", "1", "--warmup", "1", "--steps", "1",
                       "--counts-out", str(out)]) == 0
    now = json.loads(out.read_text())["steps"][0]["counts"]
    stored = next(s for s in COUNTED["steps"] if s["name"] == "small-mlp-adam")["counts"]
    assert now == stored
    table = capsys.readouterr().out
    assert "Measured on NVIDIA H200" in table and "small-mlp-adam" in table and "host: host dispatch" in table


# -- the timeline -------------------------------------------------------------------------------------
def test_without_syncs_a_step_is_the_slower_side():
    # host-bound: 1 ms of host, 0.2 ms of GPU in 10 launches
    assert rl.timeline_s([(1e-3, 0.2e-3, 10, 0)], 4e-6) == pytest.approx(1e-3, rel=1e-9)
    # GPU-bound: the host runs ahead, the GPU sets the pace
    assert rl.timeline_s([(0.2e-3, 1e-3, 10, 0)], 4e-6) == pytest.approx(1e-3, rel=1e-9)
    # phases overlap: forward GPU-heavy, backward host-heavy, no sync between them
    phases = [(0.1e-3, 1e-3, 5, 0), (1e-3, 0.1e-3, 5, 0)]
    assert rl.timeline_s(phases, 0.0) == pytest.approx(1.1e-3, rel=1e-9)


def test_a_sync_exposes_the_gpus_backlog():
    # GPU-heavy then host-heavy, one sync in the GPU-heavy phase (after its first half), no launch latency.
    phases = [(0.1e-3, 1e-3, 100, 1), (1e-3, 0.1e-3, 100, 0)]
    # Until the sync the host waits for the first half of the GPU work (0.5 ms, its 0.05 ms of host hidden);
    # after it, 1.05 ms of host against 0.6 ms of GPU overlap: 0.5 + 1.05 ms, and 1 us for the last kernel
    # of the previous step, which the GPU runs after the host queued it.
    assert rl.timeline_s(phases, 0.0) == pytest.approx(1.551e-3, rel=1e-9)
    assert rl.timeline_s([(0.1e-3, 1e-3, 100, 0), (1e-3, 0.1e-3, 100, 0)], 0.0) == pytest.approx(1.1e-3, rel=1e-2)
    with pytest.raises(ValueError, match="must be >= 0"):
        rl.timeline_s([(-1.0, 0.0, 0, 0)])


def _base():
    return rl.PhaseCounts(gemms={("float32", 2e9): 4.0}, launches=50, memory_bytes=1e8, fused_bytes=1e8,
                          cupy_calls=80, mxlite_ops=12, raw_launches=2, h2d_copies=1, host_syncs=0)


@pytest.mark.parametrize("gpu", sorted(rl.GPUS))
@pytest.mark.parametrize("field, more", [
    ("cupy_calls", 500), ("mxlite_ops", 500), ("raw_launches", 100), ("h2d_copies", 100), ("host_syncs", 5),
    ("launches", 2000), ("memory_bytes", 1e10), ("fused_bytes", 1e10), ("h2d_bytes", 1e9)])
def test_the_model_only_grows_with_each_count(gpu, field, more):
    spec = rl.GPUS[gpu]
    base = _base()
    before = rl.step_seconds({"forward": base, "backward": base}, 1, spec)
    bigger = dataclasses.replace(base, **{field: getattr(base, field) + more})
    after = rl.step_seconds({"forward": base, "backward": bigger}, 1, spec)
    assert after["modelled_s"] > before["modelled_s"], field  # a large increase binds
    assert after["modelled_s"] >= max(after["host_s"], after["gpu_s"]) - 1e-12
    slightly = dataclasses.replace(base, **{field: getattr(base, field) + 1})
    grown = rl.step_seconds({"forward": base, "backward": slightly}, 1, spec)["modelled_s"]
    assert grown >= before["modelled_s"] - 1e-12  # to rounding


@pytest.mark.parametrize("gpu", sorted(rl.GPUS))
def test_more_flops_take_longer_and_small_gemms_take_the_floor(gpu):
    spec = rl.GPUS[gpu]
    one = rl.gpu_parts(rl.PhaseCounts(gemms={("float32", 1e3): 10.0}), 1, spec)["gemm"]
    assert one == pytest.approx(10 * (spec.gemm_min_s - spec.kernel_s))  # tiny GEMMs cost the floor
    big = rl.gpu_parts(rl.PhaseCounts(gemms={("float32", 1e12): 1.0}), 1, spec)["gemm"]
    bigger = rl.gpu_parts(rl.PhaseCounts(gemms={("float32", 2e12): 1.0}), 1, spec)["gemm"]
    half = rl.gpu_parts(rl.PhaseCounts(gemms={("float16", 2e12): 1.0}), 1, spec)["gemm"]
    assert bigger == pytest.approx(2 * big) and half < bigger / 10  # tensor cores


def test_each_gpu_moves_memory_at_its_own_figures():
    c = rl.PhaseCounts(memory_bytes=1e10, fused_bytes=2e10)
    for gpu in rl.GPUS.values():
        expected = 1e10 / gpu.memory_bytes_per_s + 2e10 / gpu.fused_bytes_per_s
        assert rl.gpu_parts(c, 1, gpu)["memory"] == pytest.approx(expected, rel=1e-12)
    # measured on the H200: the element-at-a-time fused kernels reached 55% of the copy (Adam 57%, SGD-momentum
    # 52%); the step model uses the 16-byte kernels' modelled figure (test_fused_kernels_model_* below)
    assert rl.H200_FUSED_FRACTION_OF_COPY == pytest.approx(0.547, rel=0.01)
    assert rl.H200.fused_bytes_per_s == pytest.approx(2897e9 * rl.H200_FUSED_MODELLED_FRACTION, rel=1e-12)
    assert rl.H100.memory_bytes_per_s == rl.HBM_BYTES_PER_S * rl.HBM_EFFICIENCY  # scaling_model's figure


def test_dominant_names_the_largest_part_of_the_slower_side():
    host_bound = {"parts": {"forward": {"gemm": 1.0, "memory": 0.5}},
                  "host_parts": {"forward": {"cupy": 2.0, "python": 1.0, "launch": 0.1}}}
    assert rl.dominant(host_bound) == {"side": "host", "part": "host dispatch", "share": pytest.approx(3.0 / 3.1)}
    gpu_bound = {"parts": {"forward": {"gemm": 1.0, "memory": 5.0}}, "host_parts": {"forward": {"cupy": 1.0}}}
    assert rl.dominant(gpu_bound)["part"] == "memory"


# -- the fused kernels' bandwidth model --------------------------------------------------------------------
def test_resident_blocks_follow_the_sm90_occupancy_rules():
    assert [rl.resident_blocks(r) for r in (24, 32, 40, 47, 48, 54, 64, 75, 255)] == [8, 8, 6, 5, 5, 4, 4, 3, 1]
    assert rl.resident_blocks(32, threads=64) == 32  # the blocks-per-SM limit


def test_schedule_efficiency_counts_the_idle_end_of_a_launch():
    assert rl.fused_schedule_efficiency([100] * 8, 4) == 1.0  # two full waves
    assert rl.fused_schedule_efficiency([100] * 5, 4) == pytest.approx(500 / 800)  # one block alone at the end
    assert rl.fused_schedule_efficiency([400] + [100] * 12, 4) == 1.0  # the long one first, the rest beside it
    assert rl.fused_schedule_efficiency([100] * 12 + [400], 4) == pytest.approx(1600 / 2800)  # the long one last
    assert rl.chunk_lengths([5, 8, 0], 4) == [4, 1, 4, 4]


def _fit_latency(kernel, reads, measured, sizes):
    lo, hi = 1e-9, 1e-5
    for _ in range(80):
        mid = (lo + hi) / 2
        if rl.fused_fraction(kernel, reads, sizes, rl.FUSED_SCALAR, latency_s=mid) > measured:
            lo = mid
        else:
            hi = mid
    return lo


def test_fused_kernels_model_reproduces_the_measured_kernels_and_states_the_new_ones():
    """The latency is fitted to the two measured kernels (each alone within 10% of the constant, and the model
    then within 3 points of each measurement); the 16-byte kernels' figure follows from the same model."""
    sizes = _load("bench_optimizer").tensor_sizes(100_000_000, 300)
    for kernel, reads, measured in (("adam_update", 16, rl.H200_ADAM_SCALAR_FRACTION),
                                    ("sgd_update", 12, rl.H200_SGD_SCALAR_FRACTION)):
        assert _fit_latency(kernel, reads, measured, sizes) == pytest.approx(rl.FUSED_LATENCY_S, rel=0.1)
        assert rl.fused_fraction(kernel, reads, sizes, rl.FUSED_SCALAR) == pytest.approx(measured, abs=0.03)
    vector = [rl.fused_fraction(k, r, sizes, rl.FUSED_VECTOR) for k, r in (("adam_update", 16), ("sgd_update", 12))]
    assert sum(vector) / 2 == pytest.approx(rl.H200_FUSED_MODELLED_FRACTION, abs=0.005)
    # 8x the bytes in flight per thread, at somewhat lower occupancy, and ~12,000 blocks instead of ~1,700
    assert rl.resident_blocks(rl.FUSED_VECTOR.registers["adam_update"]) == 5
    assert len(rl.chunk_lengths(sizes, rl.FUSED_VECTOR.chunk)) > 7 * len(rl.chunk_lengths(sizes, rl.FUSED_SCALAR.chunk))


def test_bench_optimizer_models_every_rule_at_memory_speed(capsys):
    """The modelled H200 table: every elementwise rule >= 85% of the copy, LAMB and LARS >= 85% of their
    two-pass bytes; the element-at-a-time kernels as measured (50-60%)."""
    bench = _load("bench_optimizer")
    assert bench.main(["--model-only"]) == 0
    rows = bench.modelled(list(bench.RULES), bench.tensor_sizes(100_000_000, 300))
    for r in rows:
        key = "vector_pct_of_copy_two_pass" if r["rule"] in bench.TWO_PASS_BYTES else "vector_pct_of_copy"
        assert r[key] >= 85.0, r
        assert r["vector_ms"] < r["scalar_ms"]
    by_rule = {r["rule"]: r for r in rows}
    assert 50 <= by_rule["sgd"]["scalar_pct_of_copy"] <= by_rule["adam"]["scalar_pct_of_copy"] <= 60
    assert "modelled on an H200" in capsys.readouterr().out
