"""mx.checkpoint: bit-exact resume (parameters, optimizer states, schedule, random streams, loss
scale, compression residuals), all-or-nothing loads, and crash safety of saves (a process killed
mid-save leaves the previous checkpoint loadable)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import mxlite as mx
from mxlite.optimizer.updater import unpack_states
from tests import deadlines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICES = [mx.cpu(0), mx.cpu(1)]


def _setup(seed=0, amp=False, compression=None):
    mx.random.seed(seed)
    net = mx.nn.Sequential(mx.nn.Dense(32, activation="relu", in_units=10), mx.nn.Dropout(0.3),
                           mx.nn.Dense(4, in_units=32))
    net.initialize(mx.init.Xavier(), device=DEVICES)
    schedule = mx.lr_scheduler.FactorScheduler(step=2, factor=0.7)
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01, "lr_scheduler": schedule},
                         compression_params=compression)
    if amp:
        mx.amp.init_trainer(trainer, mx.amp.LossScaler(init_scale=2.0**10, scale_window=2))
    return net, trainer


def _steps(net, trainer, first, last, amp=False):
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    for step in range(first, last):
        rng = np.random.default_rng(step)
        x = rng.standard_normal((8, 10)).astype(np.float32)
        y = rng.integers(0, 4, 8).astype(np.float32)
        xs, ys = mx.split_and_load(x, DEVICES), mx.split_and_load(y, DEVICES)
        with mx.autograd.record():
            losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
            if amp:
                with mx.amp.scale_loss(losses, trainer) as scaled:
                    mx.autograd.backward(scaled)
            else:
                mx.autograd.backward(losses)
        trainer.step(8)


def _snapshot(net, trainer, tmp_path, name):
    """Parameters of every mirror, and every optimizer-state array, as host arrays."""
    params = {f"{k}@{i}": d.asnumpy() for k, p in net.collect_params().items() for i, d in enumerate(p.list_data())}
    trainer.save_states(tmp_path / name)
    states, optimizer_state, _ = unpack_states((tmp_path / name).read_bytes())
    flat = {}

    def walk(prefix, node):
        if isinstance(node, (tuple, list)):
            for i, part in enumerate(node):
                walk(f"{prefix}/{i}", part)
        elif node is not None:
            flat[prefix] = np.asarray(node)

    for key, state in states.items():
        walk(str(key), state)
    return params, flat, optimizer_state


@pytest.mark.parametrize("amp, compression", [(False, None), (True, None), (False, {"type": "2bit", "threshold": 0.01}),
                                              (False, {"type": "topk", "ratio": 0.3}), (True, {"type": "fp16"})])
def test_resume_from_a_checkpoint_is_bit_exact(tmp_path, amp, compression):
    net, straight_trainer = _setup(amp=amp, compression=compression)
    _steps(net, straight_trainer, 0, 8, amp)
    straight = _snapshot(net, straight_trainer, tmp_path, "straight.states")

    net, trainer = _setup(amp=amp, compression=compression)
    _steps(net, trainer, 0, 4, amp)
    mx.checkpoint.save(tmp_path / "ckpt", net, trainer, step=4)
    _steps(net, trainer, 4, 6, amp)  # work after the checkpoint, lost by the "crash"

    net2, trainer2 = _setup(seed=7, amp=amp, compression=compression)  # other initial values and streams
    assert mx.checkpoint.load(tmp_path / "ckpt", net2, trainer2) == 4
    _steps(net2, trainer2, 4, 8, amp)
    resumed = _snapshot(net2, trainer2, tmp_path, "resumed.states")
    for want, got in zip(straight[:2], resumed[:2]):
        assert sorted(want) == sorted(got)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    assert resumed[2] == straight[2]  # hyperparameters, update counts, schedule position
    if amp:  # the scale moved during the run (scale_window=2), and resumed where it was
        assert trainer2._amp_loss_scaler.state_dict() == straight_trainer._amp_loss_scaler.state_dict()
        assert trainer2._amp_loss_scaler.loss_scale != 2.0**10


def test_latest_keep_and_step_validation(tmp_path):
    net, trainer = _setup()
    for step in (1, 2, 3, 4):
        mx.checkpoint.save(tmp_path, net, trainer, step=step, keep=2)
    assert mx.checkpoint.latest_step(tmp_path) == 4
    assert sorted(os.listdir(tmp_path)) == ["latest", "step-00000003", "step-00000004"]
    assert mx.checkpoint.latest_step(tmp_path / "nothing") is None
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        mx.checkpoint.load(tmp_path / "nothing", net, trainer)
    with pytest.raises(FileNotFoundError, match="step 1"):
        mx.checkpoint.load(tmp_path, net, trainer, step=1)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="step must be a non-negative int"):
            mx.checkpoint.save(tmp_path, net, trainer, step=bad)


def _reseal(folder):
    """Rewrite a checkpoint's manifest to match its files (as a hand-made checkpoint would)."""
    import json  # noqa: PLC0415

    from mxlite.formats.archive import file_sha256  # noqa: PLC0415

    path = os.path.join(folder, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    for name in manifest["files"]:
        digest, size = file_sha256(os.path.join(folder, name))
        manifest["files"][name] = {"sha256": digest, "bytes": size}
    manifest["self_sha256"] = mx.checkpoint._self_digest(manifest["step"], manifest["files"])
    with open(path, "w") as f:
        json.dump(manifest, f)


def _state_of(net, trainer, tmp_path):
    params = {k: p.data(DEVICES[1]).asnumpy() for k, p in net.collect_params().items()}
    trainer.save_states(tmp_path / "probe.states")
    return params, (tmp_path / "probe.states").read_bytes(), mx.random.get_state()


@pytest.mark.parametrize("damage", ["trainer_file", "params_shape", "meta_json", "trainer_missing"])
def test_a_failed_load_changes_nothing(tmp_path, damage):
    net, trainer = _setup()
    _steps(net, trainer, 0, 2)
    folder = mx.checkpoint.save(tmp_path / "ckpt", net, trainer, step=2)
    _steps(net, trainer, 2, 3)
    if damage == "trainer_file":
        path = os.path.join(folder, "trainer-rank0.states")
        with open(path, "r+b") as f:
            f.truncate(100)
        match = "trainer-rank0.states"
    elif damage == "params_shape":
        path = os.path.join(folder, "params.npz")
        arrays = dict(np.load(path))
        key = sorted(arrays)[0]
        arrays[key] = np.zeros((3, 3), np.float32)
        np.savez(path, **arrays)
        _reseal(folder)  # a consistent manifest: the shape check itself must refuse it
        match = key.replace(".", r"\.")
    elif damage == "meta_json":
        with open(os.path.join(folder, "meta-rank0.json"), "w") as f:
            f.write("{not json")
        match = "meta-rank0.json"
    else:
        os.unlink(os.path.join(folder, "trainer-rank0.states"))
        match = "trainer-rank0.states"
    before = _state_of(net, trainer, tmp_path)
    mx.random.uniform(shape=(1,))  # move a stream so that a restore would show
    before_random = mx.random.get_state()
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        mx.checkpoint.load(tmp_path / "ckpt", net, trainer)
    after = _state_of(net, trainer, tmp_path)
    for k in before[0]:
        np.testing.assert_array_equal(after[0][k], before[0][k], err_msg=k)
    assert after[1] == before[1]
    assert mx.random.get_state() == before_random


def test_loading_without_the_trainer_it_was_saved_with_is_refused(tmp_path):
    net, trainer = _setup()
    mx.checkpoint.save(tmp_path, net, trainer, step=0)
    with pytest.raises(ValueError, match="saved with a trainer"):
        mx.checkpoint.load(tmp_path, net)


_SAVER = """
import sys
import numpy as np
import mxlite as mx
mx.random.seed(0)
net = mx.nn.Sequential(mx.nn.Dense(512, in_units=512), mx.nn.Dense(512, in_units=512))
net.initialize(mx.init.Xavier(), device=[mx.cpu(0)])
trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
for step in range(1, 10_000):
    for p in net.collect_params().values():
        p.set_data(np.full(p.shape, step, np.float32))
    mx.checkpoint.save(sys.argv[1], net, trainer, step=step, keep=2)
    print(step, flush=True)
"""


@pytest.mark.parametrize("delay", [0.0, 0.013, 0.029, 0.047])
def test_a_process_killed_mid_save_leaves_the_last_checkpoint_loadable(tmp_path, delay):
    script = tmp_path / "saver.py"
    script.write_text(_SAVER)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "ckpt")], stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        for line in proc.stdout:
            if int(line) >= 3:
                break
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=deadlines.scaled(30))
    step = mx.checkpoint.latest_step(tmp_path / "ckpt")
    assert step is not None and step >= 3
    mx.random.seed(0)
    net = mx.nn.Sequential(mx.nn.Dense(512, in_units=512), mx.nn.Dense(512, in_units=512))
    net.initialize(mx.init.Zero(), device=[mx.cpu(0)])
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    assert mx.checkpoint.load(tmp_path / "ckpt", net, trainer) == step
    for p in net.collect_params().values():
        np.testing.assert_array_equal(p.data().asnumpy(), np.full(p.shape, step, np.float32))


def test_a_crash_between_the_renames_of_a_re_save_is_undone(tmp_path):
    net, trainer = _setup()
    mx.checkpoint.save(tmp_path, net, trainer, step=5)
    os.replace(tmp_path / "step-00000005", tmp_path / ".old-step-00000005")  # as if killed right there
    net2, trainer2 = _setup(seed=3)
    assert mx.checkpoint.load(tmp_path, net2, trainer2) == 5
    for k, p in net.collect_params().items():
        np.testing.assert_array_equal(net2.collect_params()[k].data().asnumpy(), p.data().asnumpy())
    mx.checkpoint.save(tmp_path, net, trainer, step=5)  # a re-save of the same step
    assert sorted(os.listdir(tmp_path)) == ["latest", "step-00000005"]
