"""What the benchmarks say about sharded optimizer states (ZeRO-1).

* benchmarks/scaling_model.py: bytes per parameter and the largest model that fits an 80 GB GPU,
  unsharded and sharded, hand-computed; the all-gather is half the all-reduce; ``main`` prints and
  writes the table;
* benchmarks/bench_gpu_model.py ``--shard`` on the emulated GPUs: the optimizer-state bytes per GPU
  fall to 1/N, peak memory falls by as much, NCCL's ring bytes per step are the unsharded step's,
  and a step still makes no host synchronisation.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

import mxlite as mx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(name):
    path = os.path.join(ROOT, "benchmarks", f"{name}.py")
    if os.path.join(ROOT, "benchmarks") not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_the_largest_model_per_gpu_with_and_without_sharding():
    sm = _load("scaling_model")
    fp32, fp16 = sm.PRECISIONS
    assert sm.bytes_per_parameter(fp32, 8, False) == 16.0 and sm.bytes_per_parameter(fp32, 8, True) == 9.0
    assert sm.bytes_per_parameter(fp16, 8, False) == 16.0 and sm.bytes_per_parameter(fp16, 8, True) == 5.5
    assert sm.bytes_per_parameter(fp16, 64, True) == 4 + 12 / 64
    # (80 - 16) GB over 16 B per parameter: 4 billion; sharded over 8 GPUs in float16: 64e9 / 5.5
    assert sm.largest_model(fp32, 8, False) == pytest.approx(4e9)
    assert sm.largest_model(fp16, 8, True) == pytest.approx(64e9 / 5.5)
    assert sm.largest_model(fp16, 64, True, gpu_bytes=40e9, activation_bytes=8e9) == pytest.approx(32e9 / (4 + 12 / 64))
    with pytest.raises(ValueError, match="no memory left for parameters"):
        sm.largest_model(fp32, 8, True, gpu_bytes=10e9, activation_bytes=10e9)
    link = sm.Link("l", 1e-6, 1e9)
    assert sm.allgather_time(1e6, 4, link, link) == pytest.approx(sm.ring_allreduce_time(1e6, 4, link) / 2)
    rows = sm.memory_table((8, 64))
    assert [(r["gpus"], r["precision"]) for r in rows] == [(8, fp32.name), (8, fp16.name), (64, fp32.name),
                                                           (64, fp16.name)]
    assert all(r["gain"] > 1 and r["params_sharded"] == pytest.approx(r["params"] * r["gain"]) for r in rows)
    assert rows[3]["gain"] == pytest.approx(16 / (4 + 12 / 64))


def test_scaling_model_prints_and_writes_the_memory_table(tmp_path, capsys):
    sm = _load("scaling_model")
    out = tmp_path / "s.json"
    assert sm.main(["--no-plot", "--ranks", "2,8", "--memory-gpus", "8", "--activation-gb", "20",
                    "--json", str(out)]) == 0
    assert "Largest model per 80 GB GPU (20 GB kept" in capsys.readouterr().out
    memory = json.loads(out.read_text())["memory"]
    assert memory["activation_bytes"] == 20e9 and len(memory["rows"]) == 2
    assert memory["rows"][0]["params"] == pytest.approx(60e9 / 16)


@pytest.mark.gpu
def test_bench_gpu_model_counts_sharded_states(tmp_path, capsys):
    if mx.device.devices._emulated_gpus() < 2:
        pytest.skip("counts come from the GPU emulation (MXLITE_EMULATE_GPUS >= 2)")
    bench = _load("bench_gpu_model")
    out = tmp_path / "gpu_model.json"
    assert bench.main(["--shard", "--models", "mlp", "--gpus", "1,2", "--kvstores", "none,nccl", "--codecs", "none",
                       "--hidden", "64", "--input", "32", "--layers", "2", "--batch", "8", "--warmup", "1",
                       "--steps", "1", "--no-rules", "--json", str(out)]) == 0
    assert "Sharded optimizer states (ZeRO-1) against unsharded" in capsys.readouterr().out
    data = json.loads(out.read_text())
    shards = {(r["gpus"], r["kvstore"]): r for r in data["records"] if r.get("shard")}
    assert list(shards) == [(2, "nccl")]  # nothing to shard over without a store or with one GPU
    (pair,) = data["sharding"]
    assert pair["state_ratio"] == pytest.approx(2.0, rel=0.01)  # 1/N of Adam's 8 bytes per parameter
    saved = pair["state_bytes_plain"] - pair["state_bytes_sharded"]
    assert pair["peak_bytes_plain"] - pair["peak_bytes_sharded"] == pytest.approx(saved, rel=0.05)
    # the same ring bytes: the reduce of each bucket onto its owners, then the all-gather of the slices
    assert pair["nccl_ring_bytes_sharded"] == pytest.approx(pair["nccl_ring_bytes_plain"], rel=0.01)
    assert pair["host_syncs_plain"] == pair["host_syncs_sharded"] == 0
