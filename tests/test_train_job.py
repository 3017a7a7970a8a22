"""The main job (`mxlite train`) end to end on two virtual CPU devices, and on two GPUs (emulated in CI)."""

import json
import os
import subprocess
import sys
import time

import pytest

import mxlite as mx
from mxlite import cli
from mxlite.cli import train_job
from tests import deadlines


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
@pytest.mark.requires_gpus(2)
def test_main_job_on_two_gpus_reaches_the_cpu_accuracy(tmp_path):
    """`mxlite train --devices gpu:0,1`: the fused kernels, peer copies and the 'device' store on GPUs give
    the accuracy of the two-CPU run (the same data order and seed: within a point)."""
    cpu_run = train_job.run(_args(tmp_path / "cpu", devices="cpu:2", epochs=8))
    gpu_run = train_job.run(_args(tmp_path / "gpu", devices="gpu:0,1", epochs=8))
    assert gpu_run.test_acc[-1] >= 0.95
    assert abs(gpu_run.test_acc[-1] - cpu_run.test_acc[-1]) <= 0.01


def test_the_printed_loading_hint_runs_after_a_plain_import(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["train", "--devices", "cpu:2", "--epochs", "0", "--quiet", "--out", str(out)]) == 0
    hint = capsys.readouterr().out.split("load it with: ", 1)[1].strip()
    code = f"import mxlite\n{hint}\nprint(sorted(net.collect_params())[0])"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "0.bias"


def test_an_unwritable_out_stops_before_training(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    start = time.perf_counter()
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "--devices", "cpu:2", "--epochs", "50", "--out", str(blocker / "run")])
    assert exit_info.value.code == 2
    err = capsys.readouterr()
    assert err.err.startswith(f"mxlite train: error: --out {blocker / 'run'}: cannot write the results there")
    assert "epoch" not in err.out + err.err and time.perf_counter() - start < deadlines.scaled(30)


_BUILD_FIRST = """
import sys
from mxlite.device import kernels
from mxlite import cli
kernels.cpu_kernels_to_build = lambda files=None: ["activation.cu"]
sys.exit(cli.main(["train", "--devices", "cpu:2", "--epochs", "1", "--out", sys.argv[1]]))
"""


def test_the_cpu_kernel_build_is_announced_and_done_before_the_first_batch(tmp_path):
    """Files to build (here one, named by a stand-in for the cache lookup, which tests/test_hostcuda.py checks): the
    job says it builds the CPU kernels, builds them, says how long it took, and only then starts the first epoch's
    progress bar."""
    env = dict(os.environ, MXLITE_CPU_KERNELS="auto")
    proc = subprocess.run([sys.executable, "-c", _BUILD_FIRST, str(tmp_path / "run")], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    announce = out.index("building mxlite's CPU kernels: 1 file(s) with g++")
    built = out.index("built the CPU kernels in ")
    assert announce < built < out.index("epoch   1/1"), out[-3000:]


def test_build_kernels_builds_every_file_or_says_why_not(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mxlite", "build-kernels"], capture_output=True, text=True,
                          timeout=900, env=dict(os.environ, MXLITE_CPU_KERNELS="auto"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith(f"built {len(lines) - 2} of {len(lines) - 2} in ")
    assert {line.split()[0] for line in lines[1:-1]} >= {"optimizers.cu", "conv.cu", "rnn.cu", "compression.cu"}
    off = subprocess.run([sys.executable, "-m", "mxlite", "build-kernels"], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, MXLITE_CPU_KERNELS="numpy"))
    assert off.returncode == 1 and "nothing to build: CPU devices run NumPy twins" in off.stderr


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.strip() == f"mxlite {mx.__version__}"


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


def test_zero_epochs_saves_the_untrained_model(tmp_path, capsys):
    out = tmp_path / "zero"
    assert cli.main(["train", "--devices", "cpu:2", "--epochs", "0", "--quiet", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "no epochs run" in text and (out / "model.npz").exists()
    assert "MLP 64-128-64-10" in text  # which model it trains
    assert f"net.load_parameters('{out / 'model.npz'}')" in text  # how to load it
    net = train_job.build_model("mlp")
    net.load_parameters(str(out / "model.npz"))


@pytest.mark.parametrize("argv,needle", [
    (["--epochs", "-1"], "--epochs: expected an integer >= 0, got -1"),
    (["--batch-size", "0"], "--batch-size: expected an integer >= 1, got 0"),
    (["--lr", "nan"], "--lr: expected a finite number > 0"),
    (["--optimizer", "bogus"], "unknown optimizer 'bogus'"),
    (["--devices", "tpu:1"], "--devices must look like"),
    (["--devices", "cpu:x"], "--devices must look like"),
    (["--no-such-option"], "unrecognized arguments: --no-such-option"),
])
def test_user_mistakes_print_one_line(argv, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["train", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert needle in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_missing_gpu_is_one_line(capsys):
    spec = f"gpu:{mx.num_gpus() + 3}"  # one more than there are, real or emulated
    with pytest.raises(SystemExit):
        cli.main(["train", "--devices", spec])
    err = capsys.readouterr().err
    assert err.startswith(f"mxlite train: error: --devices {spec}: ") and err.count("\n") == 1


def test_help_shows_every_default(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for default in ("(default: auto)", "(default: 20)", "(default: 64)", "(default: mlp)", "(default: adam)",
                    "(default: None)", "(default: 0)", "(default: out)", "(default: False)"):
        assert default in text, default


def test_plot_axes_and_title(tmp_path, monkeypatch):
    import matplotlib.figure

    seen = {}
    original = matplotlib.figure.Figure.savefig

    def capture(fig, path, **kwargs):
        seen["title"] = fig._suptitle.get_text()
        ax_loss, ax_acc = fig.axes
        seen["ylim"] = ax_acc.get_ylim()
        seen["xticks"] = [t for t in ax_acc.get_xticks() if 1 <= t <= 3]
        return original(fig, path, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", capture)
    history = train_job.run(_args(tmp_path, epochs=3))
    assert seen["title"] == f"mlp on cpu(0), cpu(1): held-out accuracy {history.test_acc[-1]:.2%}"
    assert all(float(t).is_integer() for t in seen["xticks"])
    low, high = seen["ylim"]
    assert low > 0.3 and high <= 1.01  # the useful range, not 0..1
    assert low <= min(history.train_acc + history.test_acc)
    assert train_job.accuracy_limits([0.96, 0.99]) == pytest.approx((0.956, 1.0008))


def test_progress_bar_advances_batch_by_batch(tmp_path, capsys):
    """The bar counts each batch as it finishes (it showed 0/N for the whole epoch while only the loss and
    samples/s changed): every count 1..N appears, in order, each with the running loss."""
    import io
    import re

    out = io.StringIO()
    args = _args(tmp_path, quiet=False, epochs=1, batch_size=256)
    train_job.run(args, progress_file=out)
    text = out.getvalue()
    counts = [(int(a), int(b)) for a, b in re.findall(r"(\d+)/(\d+) \[", text)]
    total = counts[-1][1]
    assert total >= 5  # about 1,437 training samples in batches of 256
    advancing = [n for n, _ in counts if n > 0]
    assert advancing == sorted(advancing) and set(range(1, total + 1)) <= set(advancing)
    # each refresh after a batch carries the loss of the batches so far
    assert all(re.search(rf"{n}/{total} \[[^\r]*loss=", text) for n in range(1, total + 1))
