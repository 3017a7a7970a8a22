"""benchmarks/scaling_model.py: the α-β formulas, the bucket rule, the overlap simulation, profiles, outputs.

* ring and hierarchical all-reduce costs equal hand-computed values;
* the step simulation: free communication gives efficiency 1; communication far above compute
  gives compute / (compute + communication); a single bucket starts when backward ends; a
  hand-computed three-bucket timeline;
* the bucket rule cuts exactly where mxlite's ``plan_buckets`` does (same bound semantics);
* ResNet-50 has 161 gradient tensors and 25,557,032 parameters, the MLP 67,166,218;
* ``main`` writes the PNG and the JSON; profiles round-trip through ``--profile-json``;
* the α-β fit recovers known α, β; ``validate`` maps bench_allreduce's records to the right
  messages; ``--validate`` runs end to end over 2 MPI ranks at toy sizes (marked mpi).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

import mxlite as mx
from mxlite.comm.buckets import DEFAULT_BUCKET_BYTES, plan_buckets
from mxlite.gluon.parameter import Parameter
from mxlite.store import ParameterStore

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load():
    spec = importlib.util.spec_from_file_location("scaling_model", os.path.join(ROOT, "benchmarks", "scaling_model.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["scaling_model"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


sm = _load()


def _profile(layers, forward_s=1.0, optimizer_s=0.5):
    return sm.Profile("toy", tuple(sm.Layer(f"t{i}", n, b) for i, (n, b) in enumerate(layers)), forward_s,
                      optimizer_s)


# -- all-reduce costs ------------------------------------------------------------------------------
def test_ring_formula_hand_computed():
    link = sm.Link("l", 1e-6, 1e9)
    assert sm.ring_allreduce_time(1000, 1, link) == 0.0
    # p = 2: 2·1·1 µs + 2·(1/2)·1000 B·1 ns/B = 2 µs + 1 µs
    assert sm.ring_allreduce_time(1000, 2, link) == pytest.approx(3e-6, rel=1e-12)
    # p = 4, 4 MB, 5 µs, 100 GB/s: 6·5 µs + 2·(3/4)·4e6/1e11 s = 30 µs + 60 µs
    assert sm.ring_allreduce_time(4e6, 4, sm.Link("l", 5e-6, 100e9)) == pytest.approx(90e-6, rel=1e-12)
    # the reduction term: + (3/4)·4e6·1e-11 = 30 µs
    assert sm.ring_allreduce_time(4e6, 4, sm.Link("l", 5e-6, 100e9, 1e-11)) == pytest.approx(120e-6, rel=1e-12)
    with pytest.raises(ValueError, match="p=0"):
        sm.ring_allreduce_time(10, 0, link)
    with pytest.raises(ValueError, match="bytes_per_s"):
        sm.Link("bad", 1e-6, 0.0)


def test_hierarchical_formula_hand_computed():
    intra, inter = sm.Link("nv", 5e-6, 100e9), sm.Link("net", 10e-6, 10e9)
    # 2 nodes of 8, 8 MB: intra 2·7·5 µs + 2·(7/8)·8e6/1e11 = 70 + 140 µs;
    # inter 2·1·10 µs + 2·(1/2)·8e6/1e10 = 20 + 800 µs
    assert sm.hierarchical_allreduce_time(8e6, 16, intra, inter) == pytest.approx(1030e-6, rel=1e-12)
    # one NIC per GPU: the 8 shard rings each carry 1 MB: inter 20 + 100 µs
    assert sm.hierarchical_allreduce_time(8e6, 16, intra, inter, nics_per_node=8) == pytest.approx(330e-6, rel=1e-12)
    assert sm.hierarchical_allreduce_time(8e6, 8, intra, inter) == sm.ring_allreduce_time(8e6, 8, intra)
    with pytest.raises(ValueError, match="p=12"):
        sm.hierarchical_allreduce_time(8e6, 12, intra, inter)
    with pytest.raises(ValueError, match="p=16"):
        sm.allreduce_cost("nvlink", 16)
    with pytest.raises(ValueError, match="'torus'"):
        sm.allreduce_cost("torus", 16)
    assert sm.allreduce_cost("flat", 16, intra, inter)(8e6) == sm.ring_allreduce_time(8e6, 16, inter)


# -- the step simulation -----------------------------------------------------------------------------
def test_free_communication_gives_efficiency_one():
    schedule = sm.simulate_step(sm.resnet50_profile(), lambda n: 0.0)
    assert schedule.efficiency == 1.0 and schedule.step_s == schedule.compute_s


def test_communication_far_above_compute_gives_compute_over_compute_plus_comm():
    profile = _profile([(100, 1.0), (100, 2.0), (100, 3.0)])  # compute 1 + 6 + 0.5 = 7.5 s
    one = sm.simulate_step(profile, lambda n: 50.0, bucket_bytes=10**6)  # one bucket: nothing overlaps
    assert one.efficiency == pytest.approx(7.5 / (7.5 + 50.0), rel=1e-12)
    for comm in (1e3, 1e6):  # three buckets: the overlap becomes negligible
        three = sm.simulate_step(profile, lambda n, c=comm: c, bucket_bytes=100)
        assert len(three.buckets) == 3 and three.comm_s == 3 * comm
        assert three.efficiency / (7.5 / (7.5 + 3 * comm)) == pytest.approx(1.0, rel=10 / comm)


def test_a_single_bucket_cannot_start_before_backward_ends():
    profile = sm.mlp_profile()
    schedule = sm.simulate_step(profile, lambda n: 1e-9, bucket_bytes=profile.nbytes)
    (nbytes, ready, start, end), = schedule.buckets
    assert nbytes == profile.nbytes and ready == start == pytest.approx(profile.backward_s, rel=1e-12)
    assert schedule.step_s == pytest.approx(profile.compute_s + 1e-9, rel=1e-12)


def test_hand_computed_timeline_and_no_overlap():
    profile = _profile([(100, 1.0), (100, 1.0), (100, 1.0)])  # buckets ready at 1, 2, 3 s
    schedule = sm.simulate_step(profile, lambda n: 1.5, bucket_bytes=100)
    assert schedule.buckets == ((100, 1.0, 1.0, 2.5), (100, 2.0, 2.5, 4.0), (100, 3.0, 4.0, 5.5))
    assert schedule.step_s == 1.0 + 5.5 + 0.5 and schedule.comm_end_s == 5.5
    serial = sm.simulate_step(profile, lambda n: 1.5, bucket_bytes=100, overlap=False)
    assert serial.step_s == 1.0 + 3.0 + 4.5 + 0.5


def test_buckets_follow_mxlite_plan_buckets():
    threshold = 1024  # bytes: 256 float32 elements
    cases = [[16, 240, 16, 512, 64, 64, 128, 16],  # exactly at the bound, a tensor over it, then small ones
             [1, 17, 100, 255, 3, 300, 40, 200, 9]]  # unaligned: the arena pads each to 16 elements
    for sizes in cases:
        store = ParameterStore()
        params = []
        for i, n in enumerate(sizes):
            p = Parameter(f"p{i}", shape=(n,))
            p.initialize(mx.init.Zero(), device=[mx.cpu(0)], store=store)
            params.append(p)
        theirs = [[p.name for p in b.params] for b in plan_buckets(params, threshold)]
        backward = list(reversed(params))  # gradients lie in reverse registration order
        spans = [4 * (-(-p.shape[0] // 16) * 16) for p in backward]
        ours = [[backward[i].name for i in b] for b in sm.plan_bucket_indices(spans, threshold)]
        assert ours == theirs
        assert len(ours) > 2
    assert sm.plan_bucket_indices([512, 512, 1], 1024) == [[0, 1], [2]]  # a bucket may reach the bound exactly
    assert sm.plan_bucket_indices([2000, 10, 10], 1024) == [[0], [1, 2]]  # a larger tensor travels alone
    with pytest.raises(ValueError, match="bucket_bytes"):
        sm.plan_bucket_indices([1], 0)


# -- profiles ----------------------------------------------------------------------------------------
def test_resnet50_profile_follows_the_architecture():
    profile = sm.resnet50_profile()
    assert len(profile.layers) == 161
    assert profile.nbytes == 4 * 25_557_032
    assert [x.name for x in profile.layers[:2]] == ["fc.bias", "fc.weight"]
    assert profile.layers[0].backward_s < 1e-3 * profile.layers[1].backward_s  # a bias sum, then the matmuls
    assert profile.layers[-1].name == "conv1.weight" and profile.layers[-1].nbytes == 4 * 64 * 3 * 7 * 7
    # Roofline times (benchmarks/roofline.py): backward = backward FLOPs at batch 256 / achieved GEMM rate.
    rl = sm._roofline()
    flops = 256 * sum(f for _, _, f in sm._resnet50_tensors())
    assert profile.backward_s == pytest.approx(flops / (rl.GEMM_PEAK_FLOPS * rl.GEMM_EFFICIENCY), rel=1e-9)
    assert profile.forward_s == pytest.approx(profile.backward_s / 2, rel=1e-9)
    assert profile.optimizer_s == pytest.approx(25_557_032 * 28 / (rl.HBM_BYTES_PER_S * rl.HBM_EFFICIENCY)
                                                + rl.KERNEL_LAUNCH_S, rel=1e-9)
    assert sm.resnet50_profile(40e-3, 80e-3, 0.3e-3).compute_s == pytest.approx(120.3e-3)  # times may be given
    # a BN's β and γ are ready together, after its backward
    names = {x.name: x for x in profile.layers}
    assert names["bn1.beta"].backward_s > 0 and names["bn1.gamma"].backward_s == 0
    forward_macs = sum(f for _, _, f in sm._resnet50_tensors()) / 4  # conv/FC backward FLOPs = 4 × MACs (mostly)
    assert 3.8e9 < forward_macs < 4.2e9  # ResNet-50's well-known ~4.1 GMACs per 224×224 image


def test_mlp_profile():
    profile = sm.mlp_profile()
    assert profile.nbytes == 4 * (4 * 4096 * 4096 + 4 * 4096 + 4096 * 10 + 10)
    assert len(profile.layers) == 10 and profile.layers[0].name == "dense4.bias"
    rl = sm._roofline()
    forward_flops = 2.0 * 1024 * (4096 * 4096 * 4 + 4096 * 10)
    assert profile.forward_s == pytest.approx(forward_flops / (rl.GEMM_PEAK_FLOPS * rl.GEMM_EFFICIENCY), rel=1e-9)
    assert 2.5e-3 < profile.forward_s < 3.5e-3  # 137 GFLOP at ~47 TFLOP/s
    assert sm.mlp_profile(forward_s=3e-3, backward_s=6e-3, optimizer_s=0.5e-3).compute_s == pytest.approx(9.5e-3)
    # 64 MiB weights exceed the 25 MiB bound and travel alone; biases after them open their own buckets
    sizes = [x.nbytes for x in profile.layers]
    assert sm.plan_bucket_indices(sizes, DEFAULT_BUCKET_BYTES) == [[0, 1, 2], [3], [4], [5], [6], [7], [8], [9]]


def test_profile_json_round_trip_and_errors(tmp_path):
    assert sm.main(["--dump-profiles", str(tmp_path), "--no-plot", "--ranks", "2"]) == 0
    for profile in (sm.mlp_profile(), sm.resnet50_profile()):
        assert sm.load_profile(str(tmp_path / f"{profile.name}.json")) == profile
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"layers": [{"name": "w", "bytes": 4, "backward_s": 1e-3}], "optimizer_s": 0}))
    with pytest.raises(ValueError, match="forward_s"):
        sm.load_profile(str(bad))
    bad.write_text(json.dumps({"layers": [{"name": "w", "bytes": 0, "backward_s": 1e-3}], "forward_s": 0,
                               "optimizer_s": 0}))
    with pytest.raises(ValueError, match="'w'.*nbytes=0"):
        sm.load_profile(str(bad))


# -- outputs -----------------------------------------------------------------------------------------
def test_main_writes_the_table_the_json_and_the_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "model.json"
    assert sm.main(["--out", str(tmp_path), "--json", str(out), "--ranks", "2,8,16,64,512"]) == 0
    png = tmp_path / "scaling_model.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size < 300_000
    report = json.loads(out.read_text())
    assert set(report["tables"]) == {"mlp", "resnet50"}
    assert report["assumptions"]["bucket_bytes"] == DEFAULT_BUCKET_BYTES
    for rows in report["tables"].values():
        assert [r["p"] for r in rows] == [2, 8, 16, 64, 512]
        for r in rows:
            assert (r["nvlink"] is None) == (r["p"] > 8)
            if r["p"] <= 8:
                assert r["nvlink"] == r["hierarchical"]
            for net in ("hierarchical", "flat"):
                assert 0 < r[net]["efficiency_no_overlap"] <= r[net]["efficiency"] <= 1
        flat = [r["flat"]["efficiency"] for r in rows]
        assert flat == sorted(flat, reverse=True)
    # a 64 MiB weight takes ≥ 2·(1/2)·64 MiB / 11 GB/s ≈ 6 ms on the flat network, the MLP's compute is 9.5 ms
    mlp = report["tables"]["mlp"]
    assert mlp[0]["flat"]["efficiency"] < 0.5 < mlp[0]["hierarchical"]["efficiency"]
    assert "resnet50" in capsys.readouterr().out


# -- validation ----------------------------------------------------------------------------------------
def test_fit_recovers_alpha_and_beta():
    link = sm.Link("cpu", 8e-6, 3e9)
    sizes = list(sm.FIT_BYTES)
    alpha, beta = sm.fit_alpha_beta(sizes, [sm.ring_allreduce_time(n, 2, link) for n in sizes])
    assert alpha == pytest.approx(8e-6, rel=1e-9) and beta == pytest.approx(1 / 3e9, rel=1e-9)
    with pytest.raises(ValueError, match="two"):
        sm.fit_alpha_beta([4096], [1e-5])


def test_validate_maps_bench_records_to_their_messages():
    link = sm.Link("cpu", 8e-6, 3e9)
    slow = sm.Link("cpu", 8e-6, 2e9)  # a second regime: predictions 1.5x off on the bandwidth term
    regimes = {name: {"pool_bytes": pool, "seconds": [sm.ring_allreduce_time(n, 2, x) for n in sm.FIT_BYTES]}
               for name, pool, x in (("in cache", 0, link), ("from memory", 2**26, slow))}
    args = ["--small", "20", "--small-max", "100", "--large", "2", "--large-elements", "512", "--bucket-bytes", "4096"]
    settings = sm._bench_namespace(args)
    records = []
    for name, sizes in sm._bench_module().gradient_sets(settings).items():  # exactly the model: errors must be 0
        per_tensor = sum(sm.ring_allreduce_time(4 * n, 2, link) for n in sizes)
        spans = [4 * (-(-n // 16) * 16) for n in sizes]
        buckets = sm.plan_bucket_indices(spans, 4096)
        bucketed = sum(sm.ring_allreduce_time(sum(spans[i] for i in b), 2, link) for b in buckets)
        for path, seconds, count in (("per-tensor", per_tensor, len(sizes)), ("bucketed", bucketed, len(buckets))):
            records.append({"part": "cpu", "set": name, "path": path, "tensors": len(sizes), "bytes": 4 * sum(sizes),
                            "collectives": count, "ms": 1e3 * seconds})
    measured = {"ranks": 2, "bytes": list(sm.FIT_BYTES), "burst": 8,
                "rounds": [{"regimes": regimes, "records": records}] * 2}
    report = sm.validate(measured, args)
    fits = report["rounds"][1]["fits"]
    assert fits["in cache"]["alpha_s"] == pytest.approx(8e-6, rel=1e-9)
    assert fits["from memory"]["bandwidth_gb_per_s"] == pytest.approx(2.0, rel=1e-9)
    assert len(report["summary"]) == 4
    for row in report["summary"]:
        assert abs(row["in cache"]["error_median"]) < 1e-9 and row["from memory"]["error_min"] > 0
    for c in report["rounds"][0]["comparisons"]:
        assert c["collectives"] == c["measured_collectives"]
    large = [c["collectives"] for c in report["rounds"][0]["comparisons"] if c["set"] == "large"]
    assert large == [2, 1]  # 2 KiB each: both fit the 4 KiB bound exactly
    same = sm.validate(measured | {"rounds": [{"regimes": regimes, "records": []}]}, args, {"records": records})
    assert same["summary"] == report["summary"]  # records given apart (--bench-json) are compared alike
    with pytest.raises(ValueError, match="--bench-args"):
        sm.validate(measured, [])


@pytest.mark.mpi
def test_validate_runs_over_two_mpi_ranks(tmp_path, capsys):
    pytest.importorskip("mpi4py", reason="needs mpi4py and mpiexec (pip install 'mxlite[mpi]')")
    from mxlite.cli.launch import find_mpiexec

    try:
        find_mpiexec()
    except FileNotFoundError:
        pytest.skip("needs mpiexec (pip install 'mxlite[mpi]')")
    out = tmp_path / "v.json"
    bench_args = "--small 20 --small-max 512 --large 2 --large-elements 4096 --bucket-bytes 8192 --warmup 1 --repeat 2"
    assert sm.main(["--validate", "--no-plot", "--ranks", "2", "--fit-bytes", "4096,65536,1048576", "--fit-rounds",
                    "2", "--fit-warmup", "1", "--fit-repeat", "3", "--bench-args", bench_args, "--json", str(out)]) == 0
    report = json.loads(out.read_text())["validation"]
    assert report["ranks"] == 2 and len(report["rounds"]) == 2
    for r in report["rounds"]:
        assert set(r["fits"]) == {"in cache", "from memory"}
        assert all(f["alpha_s"] >= 0 and f["bandwidth_gb_per_s"] > 0 and len(f["seconds"]) == 3
                   for f in r["fits"].values())
    got = {(row["set"], row["path"]): row for row in report["summary"]}
    assert set(got) == {(s, p) for s in ("small", "large") for p in ("per-tensor", "bucketed")}
    assert got["small", "bucketed"]["collectives"] == 1 and got["large", "bucketed"]["collectives"] == 2
    assert all(row["measured_ms"] > 0 and row[regime]["predicted_ms"] > 0
               and row[regime]["error_min"] <= row[regime]["error_median"] <= row[regime]["error_max"]
               for row in got.values() for regime in ("in cache", "from memory"))
    assert "from memory pred. ms" in capsys.readouterr().out
    # the saved measurements are refitted without MPI, to the same figures
    again = tmp_path / "again.json"
    assert sm.main(["--validate", "--no-plot", "--ranks", "2", "--fit-json", str(out), "--bench-args", bench_args,
                    "--json", str(again)]) == 0
    assert json.loads(again.read_text())["validation"]["summary"] == report["summary"]


def test_resnet50_sized_gradients_scale_to_8_gpus_at_95_percent_or_more():
    table = sm.scaling_table(sm.resnet50_profile(), [8])
    assert table[0]["nvlink"]["efficiency"] >= 0.95 and table[0]["hierarchical"]["efficiency"] >= 0.95, table


def test_counted_profiles_come_from_bench_gpu_model_records(tmp_path):
    record = {"model": "mlp", "gpus": 1, "kvstore": "none", "codec": "none", "param_tensors": 4,
              "kernel_bytes_per_element": 28.0, "step_launches": 1.0,
              "parts_ms": {"forward": {"launch": 0.04}, "backward": {"launch": 0.08}},
              "profile": {"name": "mlp-counted", "forward_s": 1e-4, "optimizer_s": 1e-5, "notes": "toy",
                          "layers": [{"name": "b", "bytes": 64, "backward_s": 0.0},
                                     {"name": "w", "bytes": 4096, "backward_s": 2e-4}]}}
    path = tmp_path / "counts.json"
    path.write_text(json.dumps({"records": [record, dict(record, gpus=2)]}))
    counted, profiles = sm.load_counts(str(path))
    assert counted["mlp"].launches_per_tensor == pytest.approx((2.5, 5.0))  # 10 and 20 launches over 4 tensors
    assert [p.name for p in profiles] == ["mlp-counted"] and profiles[0].backward_s == 2e-4
    with_counts = sm.mlp_profile(counted=counted["mlp"])
    assert with_counts.forward_s == pytest.approx(sm.mlp_profile().forward_s + 2.5 * 10 * 4e-6, rel=1e-9)
    out = tmp_path / "out.json"
    assert sm.main(["--counts", str(path), "--no-plot", "--ranks", "2,8", "--json", str(out)]) == 0
    assert "mlp-counted" in json.loads(out.read_text())["profiles"]
    path.write_text(json.dumps({"records": [dict(record, gpus=2)]}))
    with pytest.raises(ValueError, match="no record"):
        sm.load_counts(str(path))
