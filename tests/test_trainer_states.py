"""Trainer.save_states / load_states: a resumed run continues bit for bit; bad files change nothing."""

import numpy as np
import pytest

import mxlite as mx
from mxlite.optimizer.lr_scheduler import FactorScheduler

DEVICES = [mx.cpu(0), mx.cpu(1)]
STEPS, SAVE_AT = 10, 4


def _net(dtype="float32"):
    mx.random.seed(0)
    net = mx.nn.Sequential(mx.nn.Dense(16, activation="relu", in_units=6, dtype=dtype),
                           mx.nn.Dense(5, in_units=16, dtype=dtype))
    net.initialize(mx.init.Xavier(), device=DEVICES)
    net.collect_params()["1.bias"].lr_mult = 0.5
    return net


def _trainer(net, name, kwargs):
    kwargs = dict(kwargs)
    kwargs["lr_scheduler"] = FactorScheduler(step=3, factor=0.5, base_lr=kwargs["learning_rate"])
    return mx.Trainer(net.collect_params(), name, kwargs)


def _train(net, trainer, steps):
    """``steps`` training steps; the data of step k depends only on k, so a resumed run sees the same."""
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    for k in steps:
        rng = np.random.default_rng(100 + k)
        x = rng.normal(size=(8, 6)).astype(net[0].weight.dtype)
        y = rng.integers(0, 5, size=8)
        xs, ys = mx.split_and_load(x, DEVICES), mx.split_and_load(y, DEVICES)
        with mx.autograd.record():
            losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
        mx.autograd.backward(losses)
        trainer.step(8)


def _weights(net):
    return {k: [d.asnumpy() for d in p.list_data()] for k, p in net.collect_params().items()}


CASES = [
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}, "float32"),        # fused, hand-tuned twin
    ("adam", {"learning_rate": 0.01}, "float32"),                                  # fused, hand-tuned twin
    ("lamb", {"learning_rate": 0.01, "wd": 1e-2}, "float32"),                      # fused, generic twin
    ("rmsprop", {"learning_rate": 0.01, "centered": True}, "float32"),             # fused, three states
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "multi_precision": True}, "float16"),  # master weights
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "nesterov": True}, "float32"),  # per-parameter path
    ("adam", {"learning_rate": 0.01}, "float64"),                                  # per-parameter path
]


@pytest.mark.parametrize("name,kwargs,dtype", CASES, ids=[f"{n}-{d}-{i}" for i, (n, _, d) in enumerate(CASES)])
def test_resumed_run_is_bit_identical(tmp_path, name, kwargs, dtype):
    net = _net(dtype)
    trainer = _trainer(net, name, kwargs)
    _train(net, trainer, range(STEPS))
    straight = _weights(net)

    net = _net(dtype)
    trainer = _trainer(net, name, kwargs)
    _train(net, trainer, range(SAVE_AT))
    net.save_parameters(str(tmp_path / "net.npz"))
    trainer.save_states(tmp_path / "trainer.states")

    net = _net(dtype)  # a new process would start like this
    trainer = _trainer(net, name, kwargs)
    net.load_parameters(str(tmp_path / "net.npz"), device=DEVICES)
    trainer.load_states(tmp_path / "trainer.states")
    assert trainer.optimizer.num_update == SAVE_AT
    _train(net, trainer, range(SAVE_AT, STEPS))
    for key, mirrors in _weights(net).items():
        for got, want in zip(mirrors, straight[key]):
            np.testing.assert_array_equal(got, want, err_msg=key)
    assert trainer.learning_rate == kwargs["learning_rate"] * 0.5 ** 3  # the schedule went on from step 4


def test_saved_states_round_trip_before_the_next_step(tmp_path):
    """Saving right after loading writes what was loaded (states not yet moved to the devices)."""
    net = _net()
    trainer = _trainer(net, "adam", {"learning_rate": 0.01})
    _train(net, trainer, range(3))
    trainer.save_states(tmp_path / "a")
    again = _trainer(_net(), "adam", {"learning_rate": 0.01})
    again.load_states(tmp_path / "a")
    again.save_states(tmp_path / "b")
    a, b = np.load(tmp_path / "a"), np.load(tmp_path / "b")
    assert sorted(a.files) == sorted(b.files)
    for k in a.files:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _saved(tmp_path, name, kwargs, net=None):
    """A trainer after two steps and the path of its saved states."""
    net = net or _net()
    trainer = _trainer(net, name, kwargs)
    _train(net, trainer, range(2))
    trainer.save_states(tmp_path / "s")
    return net, trainer, tmp_path / "s"


def _changes_nothing(trainer, path, match, tmp_path):
    """Loading ``path`` raises ValueError naming it, and the trainer's saved states stay byte-identical."""
    trainer.save_states(tmp_path / "before")
    with pytest.raises(ValueError, match=match) as info:
        trainer.load_states(path)
    assert str(path) in str(info.value)
    trainer.save_states(tmp_path / "after")
    assert (tmp_path / "before").read_bytes() == (tmp_path / "after").read_bytes()


def test_states_of_other_parameters_are_rejected_naming_them(tmp_path):
    _, _, path = _saved(tmp_path, "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    other = mx.nn.Sequential(mx.nn.Dense(3, in_units=6), mx.nn.Dense(5, in_units=3))
    other.initialize(device=DEVICES)
    other_trainer = _trainer(other, "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    _train(other, other_trainer, range(1))
    _changes_nothing(other_trainer, path, "parameter '0.bias' has shape \\(16,\\)", tmp_path)


def test_states_of_another_optimizer_are_rejected(tmp_path):
    _, _, path = _saved(tmp_path, "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    adam = _trainer(_net(), "adam", {"learning_rate": 0.01})
    _changes_nothing(adam, path, "SGD", tmp_path)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "updater-archive"])
def test_damaged_or_foreign_files_are_rejected(tmp_path, damage):
    _, trainer, path = _saved(tmp_path, "adam", {"learning_rate": 0.01})
    data = path.read_bytes()
    bad = tmp_path / "bad"
    if damage == "garbage":
        bad.write_bytes(b"not a state file" * 10)
    elif damage == "truncated":
        bad.write_bytes(data[: len(data) // 2])
    else:  # a valid Updater archive, but not a Trainer's
        updater = mx.optimizer.get_updater(mx.optimizer.Adam())
        bad.write_bytes(updater.get_states(dump_optimizer=True))
    _changes_nothing(trainer, bad, "cannot", tmp_path)
    with pytest.raises(FileNotFoundError):
        trainer.load_states(tmp_path / "missing")


def test_save_states_replaces_the_file_atomically(tmp_path, monkeypatch):
    _, trainer, path = _saved(tmp_path, "adam", {"learning_rate": 0.01})
    good = path.read_bytes()
    import mxlite.gluon._trainer_states as trainer_module  # where save_states writes

    real_write = trainer_module.atomic_write

    def crash_half_way(path, write):
        def partial(f):
            f.write(b"PK\x03\x04 half a file")
            raise RuntimeError("killed during the save")
        real_write(path, partial)

    monkeypatch.setattr(trainer_module, "atomic_write", crash_half_way)
    with pytest.raises(RuntimeError, match="killed"):
        trainer.save_states(tmp_path / "s")
    assert (tmp_path / "s").read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == ["s"]  # no temporary file left behind
