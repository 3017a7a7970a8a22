"""The main job (`mxlite train`) end to end on two virtual CPU devices, and on two GPUs (emulated in CI)."""

import json
import os

import pytest

import mxlite as mx
from mxlite import cli, train_job


def test_main_job_reaches_95_percent_and_writes_outputs(tmp_path, capsys):
    out = tmp_path / "run"
    code = cli.main(["train", "--devices", "cpu:2", "--epochs", "8", "--quiet", "--out", str(out)])
    assert code == 0
    history = json.loads((out / "history.json").read_text())
    assert history["test_acc"][-1] >= 0.95
    assert history["train_loss"][-1] < history["train_loss"][0]
    assert (out / "model.npz").stat().st_size > 0
    png = (out / "training.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert "held-out accuracy" in capsys.readouterr().out


@pytest.mark.gpu
@pytest.mark.skipif(mx.num_gpus() < 2, reason="needs two GPUs (real, or MXLITE_EMULATE_GPUS=2)")
def test_main_job_on_two_gpus_reaches_the_cpu_accuracy(tmp_path):
    """`mxlite train --devices gpu:0,1`: the fused kernels, peer copies and the 'device' store on GPUs give
    the accuracy of the two-CPU run (the same data order and seed: within a point)."""
    cpu_run = train_job.run(_args(tmp_path / "cpu", devices="cpu:2", epochs=8))
    gpu_run = train_job.run(_args(tmp_path / "gpu", devices="gpu:0,1", epochs=8))
    assert gpu_run.test_acc[-1] >= 0.95
    assert abs(gpu_run.test_acc[-1] - cpu_run.test_acc[-1]) <= 0.01


def test_cnn_model_trains(tmp_path):
    history = train_job.run(_args(tmp_path, model="cnn", epochs=2))
    assert history.test_acc[-1] > 0.8


def test_checkpoint_loads_back(tmp_path):
    train_job.run(_args(tmp_path, epochs=1))
    net = train_job.build_model("mlp")
    net.load_parameters(os.path.join(tmp_path, "model.npz"))
    assert net.collect_params()["0.weight"].shape == (128, 64)


@pytest.mark.parametrize("spec,expected", [("cpu:3", 3), ("cpu:0,2", 2)])
def test_parse_devices(spec, expected):
    assert len(train_job.parse_devices(spec)) == expected


def test_parse_devices_rejects_garbage():
    with pytest.raises(ValueError, match="--devices"):
        train_job.parse_devices("tpu:1")


def _args(tmp_path, **overrides):
    import argparse

    parser = argparse.ArgumentParser()
    train_job.add_arguments(parser)
    args = parser.parse_args(["--devices", "cpu:2", "--quiet", "--out", str(tmp_path)])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args
