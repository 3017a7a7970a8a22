"""Trainer states are read once, and applied from what was read and checked.

* ``Trainer._read_states`` parses the bytes it is given (``data=``) or reads the file once; what
  ``_apply_states`` installs is that parse, also with ``update_on_kvstore=True`` (where it used to
  read the file again through ``kvstore.load_optimizer_states``, after the checks): a states file
  replaced or deleted between reading and applying changes nothing;
* ``mx.checkpoint.load`` with an ``update_on_kvstore`` trainer opens each file once, and a trainer
  file changed after its check does not reach the trainer;
* the readers given bytes (``load_arrays``/``is_mxnet_file``/``Block._plan_load``) do not open
  the file they name, and still name it in their errors.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import mxlite as mx
from mxlite.formats.archive import is_mxnet_file, load_arrays, save_mxnet_arrays
from tests.test_checkpoint_load_once import _count_opens
from tests.training_helpers import random_backward

DEVICES = [mx.cpu(0), mx.cpu(1)]


def _net(seed=0):
    mx.random.seed(seed)
    net = mx.nn.Sequential(mx.nn.Dense(6, activation="relu"), mx.nn.Dense(3))
    net.initialize(mx.init.Xavier(), device=DEVICES)
    net(mx.zeros((1, 5), device=DEVICES[0]))  # settle the deferred shapes
    return net


def _trainer(net, on_kvstore=True):
    return mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01}, kvstore="device",
                      update_on_kvstore=on_kvstore)


def _train(net, trainer, steps, seed=1):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        random_backward(net, DEVICES, rng, 8, 5, 3)
        trainer.step(8)


def _params(net):
    return {k: p.data(DEVICES[0]).asnumpy().copy() for k, p in net.collect_params().items()}


@pytest.fixture
def saved(tmp_path):
    """A run saved after 2 steps (parameters and kvstore states), the parameters one step later, and
    another run's states file (other values, same layout)."""
    net = _net()
    trainer = _trainer(net)
    assert trainer.update_on_kvstore
    _train(net, trainer, 2)
    net.save_parameters(str(tmp_path / "params.npz"))
    trainer.save_states(str(tmp_path / "run.states"))
    _train(net, trainer, 1, seed=7)
    other_net = _net(seed=5)
    other = _trainer(other_net)
    _train(other_net, other, 3, seed=9)
    other.save_states(str(tmp_path / "other.states"))
    return tmp_path, _params(net)


def _resumed(tmp_path):
    net = _net(seed=3)
    net.load_parameters(str(tmp_path / "params.npz"))
    return net, _trainer(net)


@pytest.mark.parametrize("change", ["deleted", "replaced"])
def test_kvstore_states_changed_between_read_and_apply_change_nothing(saved, change):
    tmp_path, expected = saved
    net, trainer = _resumed(tmp_path)
    path = tmp_path / "run.states"
    parsed = trainer._read_states(str(path))
    if change == "deleted":
        path.unlink()
    else:
        os.replace(tmp_path / "other.states", path)
    trainer._apply_states(parsed)  # the states read above, not whatever the file holds now
    _train(net, trainer, 1, seed=7)
    for k, v in _params(net).items():
        np.testing.assert_array_equal(v, expected[k], err_msg=k)


def test_kvstore_states_given_as_bytes_are_what_is_applied(saved):
    tmp_path, expected = saved
    net, trainer = _resumed(tmp_path)
    data = (tmp_path / "run.states").read_bytes()
    # The file named holds other states: only the bytes given count.
    parsed = trainer._read_states(str(tmp_path / "other.states"), data=data)
    trainer._apply_states(parsed)
    _train(net, trainer, 1, seed=7)
    for k, v in _params(net).items():
        np.testing.assert_array_equal(v, expected[k], err_msg=k)


@pytest.mark.parametrize("on_kvstore", [True, False])
def test_load_states_reads_the_file_once(saved, monkeypatch, on_kvstore):
    tmp_path, _ = saved
    net = _net()
    trainer = _trainer(net, on_kvstore)
    _train(net, trainer, 1)
    trainer.save_states(str(tmp_path / "mine.states"))
    opened = _count_opens(monkeypatch)
    trainer.load_states(str(tmp_path / "mine.states"))
    monkeypatch.undo()
    assert opened["mine.states"] == 1, opened


def test_load_states_of_a_missing_or_foreign_file_on_the_store(saved):
    tmp_path, _ = saved
    net, trainer = _resumed(tmp_path)
    with pytest.raises(FileNotFoundError):
        trainer.load_states(str(tmp_path / "missing.states"))
    with pytest.raises(ValueError, match=r"cannot load KVStore optimizer states from '.*params\.npz'"):
        trainer.load_states(str(tmp_path / "params.npz"))


def test_store_states_of_other_shapes_are_refused_before_anything_changes(saved):
    """The store has no values yet when a run resumes (its keys are set at the first step), so the
    store's own shape checks pass anything: the Trainer checks the states against its parameters,
    as it does without update_on_kvstore, instead of failing in the middle of the next step."""
    tmp_path, _ = saved
    mx.random.seed(0)
    wide = mx.nn.Sequential(mx.nn.Dense(7, activation="relu"), mx.nn.Dense(3))  # 7 hidden units, not 6
    wide.initialize(mx.init.Xavier(), device=DEVICES)
    wide(mx.zeros((1, 5), device=DEVICES[0]))
    trainer = _trainer(wide)
    before = _params(wide)
    with pytest.raises(ValueError, match=r"cannot load trainer states from '.*run\.states': the state of parameter "
                                         r"'0\.(weight|bias)' has shape \(6,.*\), the parameter has shape \(7,"):
        trainer.load_states(str(tmp_path / "run.states"))
    _train(wide, trainer, 1)  # the trainer is untouched: it trains from fresh states
    assert all(np.all(np.isfinite(v)) for v in _params(wide).values())
    assert any(not np.array_equal(v, before[k]) for k, v in _params(wide).items())


def test_checkpoint_load_on_the_store_reads_each_file_once_and_applies_the_verified_states(saved, monkeypatch):
    tmp_path, expected = saved
    net = _net(seed=3)
    net.load_parameters(str(tmp_path / "params.npz"))
    trainer = _trainer(net)
    trainer.load_states(str(tmp_path / "run.states"))
    folder = mx.checkpoint.save(tmp_path / "ckpt", net, trainer, step=2)
    states = os.path.join(folder, "trainer-rank0.states")

    net2 = _net(seed=4)
    trainer2 = _trainer(net2)
    real_plan_load = type(net2)._plan_load

    def plan_then_tamper(self, *args, **kwargs):  # after the trainer states were read and checked
        os.replace(tmp_path / "other.states", states)
        return real_plan_load(self, *args, **kwargs)

    monkeypatch.setattr(type(net2), "_plan_load", plan_then_tamper)
    opened = _count_opens(monkeypatch)
    assert mx.checkpoint.load(tmp_path / "ckpt", net2, trainer2) == 2
    monkeypatch.undo()
    for name in ("manifest.json", "meta-rank0.json", "params.npz", "trainer-rank0.states"):
        assert opened[name] == 1, opened
    _train(net2, trainer2, 1, seed=7)
    for k, v in _params(net2).items():
        np.testing.assert_array_equal(v, expected[k], err_msg=k)


# -- the readers given bytes ------------------------------------------------------------------------

def test_load_arrays_given_bytes_opens_nothing_and_names_the_file(tmp_path, monkeypatch):
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.float16)}
    np.savez(tmp_path / "a.npz", **arrays)
    save_mxnet_arrays(tmp_path / "a.params", list(arrays.values()), list(arrays))
    npz, mxnet = (tmp_path / "a.npz").read_bytes(), (tmp_path / "a.params").read_bytes()
    opened = _count_opens(monkeypatch)
    for data in (npz, mxnet):
        loaded = load_arrays(tmp_path / "nowhere", data=data)  # the path is not read: it need not exist
        assert set(loaded) == set(arrays)
        for k, v in arrays.items():
            np.testing.assert_array_equal(loaded[k], v)
            assert loaded[k].dtype == v.dtype
    assert is_mxnet_file(tmp_path / "nowhere", data=mxnet) and not is_mxnet_file(tmp_path / "nowhere", data=npz)
    with pytest.raises(ValueError, match=r"cannot read '.*nowhere' as an mxlite \.npz file"):
        load_arrays(tmp_path / "nowhere", data=npz[:40])
    with pytest.raises(ValueError, match=r"cannot read '.*nowhere' as an MXNet NDArray file"):
        load_arrays(tmp_path / "nowhere", data=mxnet[:20])
    with pytest.raises(ValueError, match=r"cannot read '.*nowhere' as an mxlite \.npz file"):
        load_arrays(tmp_path / "nowhere", data=b"")
    monkeypatch.undo()
    assert not opened, opened


def test_plan_load_given_bytes_parses_them_and_names_the_file(tmp_path):
    net = _net()
    net.save_parameters(str(tmp_path / "p.npz"))
    data = (tmp_path / "p.npz").read_bytes()
    other = _net(seed=8)
    plan = other._plan_load(str(tmp_path / "elsewhere.npz"), data=data)
    other._apply_load(plan)
    for k, v in _params(net).items():
        np.testing.assert_array_equal(_params(other)[k], v)
    small = mx.nn.Sequential(mx.nn.Dense(2, in_units=5))
    small.initialize(device=[mx.cpu(0)])
    with pytest.raises(ValueError, match=r"from '.*elsewhere\.npz': not in the model: \['1\.weight'"):
        small._plan_load(str(tmp_path / "elsewhere.npz"), data=data)
