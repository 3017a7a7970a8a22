"""Block: parameter naming, selection, sharing, Sequential, and checkpoint save/load."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

import mxlite as mx


class _Model(mx.nn.Block):
    def __init__(self, dtype=np.float32):
        super().__init__()
        self.encoder = mx.nn.Sequential(mx.nn.Dense(4, in_units=3, activation="tanh", dtype=dtype),
                                        mx.nn.Dense(3, in_units=4, dtype=dtype))
        self.head = mx.nn.Dense(2, in_units=3, dtype=dtype)

    def forward(self, x):
        return self.head(self.encoder(x))


def _mlp(init=True, devices=None, **dense_kw):
    net = mx.nn.Sequential(mx.nn.Dense(4, in_units=3, **dense_kw), mx.nn.Dense(2, in_units=4, **dense_kw))
    if init:
        net.initialize(mx.init.Xavier(), device=devices or mx.cpu(0))
    return net


def _values(net):
    return {name: p.data().asnumpy().copy() for name, p in net.collect_params().items()}


def _assert_values(net, expected):
    got = _values(net)
    assert list(got) == list(expected)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
        assert got[name].dtype == expected[name].dtype


def _randomize(net, seed):
    rng = np.random.default_rng(seed)
    for p in net.collect_params().values():
        p.set_data(rng.standard_normal(p.shape))


# -- naming, selection, sharing -------------------------------------------------------------------
def test_collect_params_names():
    net = _mlp(init=False)
    assert list(net.collect_params()) == ["0.weight", "0.bias", "1.weight", "1.bias"]
    model = _Model()
    assert list(model.collect_params()) == [
        "encoder.0.weight", "encoder.0.bias", "encoder.1.weight", "encoder.1.bias", "head.weight", "head.bias"]
    assert model.collect_params()["encoder.0.bias"] is model.encoder[0].bias
    assert model.collect_params()["encoder.0.bias"].shape == (4,)
    assert list(model.encoder[0].params) == ["weight", "bias"]


def test_collect_params_select_regex():
    model = _Model()
    assert list(model.collect_params(".*bias")) == ["encoder.0.bias", "encoder.1.bias", "head.bias"]
    assert list(model.collect_params("encoder")) == [
        "encoder.0.weight", "encoder.0.bias", "encoder.1.weight", "encoder.1.bias"]
    assert list(model.collect_params("head|encoder\\.1\\.weight")) == [
        "encoder.1.weight", "head.weight", "head.bias"]
    assert model.collect_params("nothing") == {}


def test_no_bias_dense_has_only_weight():
    net = mx.nn.Dense(3, use_bias=False, in_units=2)
    assert list(net.collect_params()) == ["weight"]


def test_share_parameters():
    a = _mlp()
    b = _mlp(init=False)
    b.share_parameters(a.collect_params())
    for name, p in b.collect_params().items():
        assert p is a.collect_params()[name]
    x = mx.array(np.random.default_rng(0).standard_normal((2, 3)), dtype="float32")  # float32 layers refuse float64
    np.testing.assert_array_equal(a(x).asnumpy(), b(x).asnumpy())
    a[0].weight.set_data(np.ones((4, 3)))
    np.testing.assert_array_equal(b[0].weight.data().asnumpy(), np.ones((4, 3)))
    # sharing a subset
    c = _mlp()
    c.share_parameters(a.collect_params("1\\."))
    assert c[1].weight is a[1].weight and c[0].weight is not a[0].weight
    with pytest.raises(ValueError, match="nope"):
        c.share_parameters({"0.nope": a[0].weight})


def test_block_must_call_super_init():
    class Bad(mx.nn.Block):
        def __init__(self):
            self.layer = mx.nn.Dense(2)

    with pytest.raises(RuntimeError, match="super"):
        Bad()


def test_sequential_indexing_and_len():
    d0, d1, d2 = mx.nn.Dense(2), mx.nn.Dense(3), mx.nn.Dense(4)
    net = mx.nn.Sequential(d0, d1)
    net.add(d2)
    assert len(net) == 3
    assert net[0] is d0 and net[2] is d2 and net[-1] is d2
    tail = net[1:]
    assert isinstance(tail, mx.nn.Sequential) and len(tail) == 2
    assert tail[0] is d1 and tail[1] is d2
    with pytest.raises(IndexError):
        net[3]
    assert mx.nn.HybridSequential is mx.nn.Sequential


def test_sequential_forward_chains_layers():
    net = _mlp()
    x = mx.array(np.random.default_rng(1).standard_normal((5, 3)), dtype="float32")
    h = x.asnumpy() @ net[0].weight.data().asnumpy().T + net[0].bias.data().asnumpy()
    y = h @ net[1].weight.data().asnumpy().T + net[1].bias.data().asnumpy()
    np.testing.assert_allclose(net(x).asnumpy(), y, rtol=1e-5, atol=1e-6)


def test_block_initialize_one_store_per_model():
    net = _mlp(devices=[mx.cpu(0), mx.cpu(1)])
    stores = {id(p._store) for p in net.collect_params().values()}
    assert len(stores) == 1
    for dev in (mx.cpu(0), mx.cpu(1)):
        arenas = {id(p._slots[dev][0]) for p in net.collect_params().values()}
        assert len(arenas) == 1


def test_block_zero_grad_cast_reset_device():
    net = _mlp()
    x = mx.ones((2, 3))
    with mx.autograd.record():
        loss = net(x).sum()
    loss.backward()
    assert np.abs(net[0].weight.grad().asnumpy()).sum() > 0
    net.zero_grad()
    for p in net.collect_params().values():
        np.testing.assert_array_equal(p.grad().asnumpy(), 0)
    before = _values(net)
    net.cast("float64")
    assert all(p.data().dtype == np.float64 for p in net.collect_params().values())
    net.reset_device([mx.cpu(1), mx.cpu(2)])
    for name, p in net.collect_params().items():
        assert p.list_device() == [mx.cpu(1), mx.cpu(2)]
        np.testing.assert_array_equal(p.data(mx.cpu(2)).asnumpy(), before[name].astype(np.float64))


# -- save / load ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_save_load_round_trip_exact(tmp_path, dtype):
    src = _Model(dtype=dtype)
    src.initialize(mx.init.Xavier(), device=mx.cpu(0))
    _randomize(src, 0)
    path = tmp_path / "model.params"
    src.save_parameters(path)
    dst = _Model(dtype=dtype)
    dst.initialize(device=[mx.cpu(0), mx.cpu(1)])
    dst.load_parameters(str(path))
    expected = _values(src)
    _assert_values(dst, expected)
    for name, p in dst.collect_params().items():
        np.testing.assert_array_equal(p.data(mx.cpu(1)).asnumpy(), expected[name])
    x = mx.array(np.random.default_rng(3).standard_normal((2, 3)), dtype=dtype)
    np.testing.assert_array_equal(src(x).asnumpy(), dst(x).asnumpy())
    # the file is a plain npz keyed by structural name
    with np.load(path) as f:
        assert sorted(f.files) == sorted(expected)
        assert f["head.weight"].dtype == dtype


def test_save_uses_name_exactly(tmp_path):
    net = _mlp()
    path = tmp_path / "weights"
    net.save_parameters(path)
    assert os.listdir(tmp_path) == ["weights"]


def test_load_into_uninitialised_deferred_net(tmp_path):
    src = _mlp()
    _randomize(src, 1)
    path = tmp_path / "m.params"
    src.save_parameters(path)
    # never initialised, shapes unknown
    fresh = mx.nn.Sequential(mx.nn.Dense(4), mx.nn.Dense(2))
    fresh.load_parameters(path, device=mx.cpu(1))
    _assert_values(fresh, _values(src))
    assert fresh[0].weight.shape == (4, 3)
    assert fresh[0].weight.list_device() == [mx.cpu(1)]
    assert len({id(p._store) for p in fresh.collect_params().values()}) == 1
    x = mx.ones((1, 3), device=mx.cpu(1))
    np.testing.assert_array_equal(fresh(x).asnumpy(), src(mx.ones((1, 3))).asnumpy())
    # initialised with deferred shapes, not yet run
    deferred = mx.nn.Sequential(mx.nn.Dense(4), mx.nn.Dense(2))
    deferred.initialize(device=[mx.cpu(0), mx.cpu(2)])
    deferred.load_parameters(path)
    assert deferred[1].weight.list_device() == [mx.cpu(0), mx.cpu(2)]
    _assert_values(deferred, _values(src))
    np.testing.assert_array_equal(deferred[1].weight.data(mx.cpu(2)).asnumpy(), src[1].weight.data().asnumpy())


def _saved(tmp_path, net, name="m.params"):
    path = tmp_path / name
    net.save_parameters(path)
    return path


def test_load_missing_names_raises_and_changes_nothing(tmp_path):
    small = _mlp()
    path = tmp_path / "small.params"
    only_first = mx.nn.Sequential(mx.nn.Dense(4, in_units=3))
    only_first.initialize(device=mx.cpu(0))
    _randomize(only_first, 5)
    only_first.save_parameters(path)
    before = _values(small)
    with pytest.raises(ValueError) as info:
        small.load_parameters(path)
    msg = str(info.value)
    assert "1.weight" in msg and "1.bias" in msg and "missing" in msg and "small.params" in msg
    _assert_values(small, before)
    small.load_parameters(path, allow_missing=True)
    np.testing.assert_array_equal(small[0].weight.data().asnumpy(), only_first[0].weight.data().asnumpy())
    np.testing.assert_array_equal(small[1].weight.data().asnumpy(), before["1.weight"])


def test_load_extra_names_raises_and_changes_nothing(tmp_path):
    big = mx.nn.Sequential(mx.nn.Dense(4, in_units=3), mx.nn.Dense(2, in_units=4), mx.nn.Dense(5, in_units=2))
    big.initialize(device=mx.cpu(0))
    _randomize(big, 6)
    path = _saved(tmp_path, big)
    net = _mlp()
    before = _values(net)
    with pytest.raises(ValueError) as info:
        net.load_parameters(path)
    msg = str(info.value)
    assert "2.weight" in msg and "2.bias" in msg and "ignore_extra" in msg
    _assert_values(net, before)
    net.load_parameters(path, ignore_extra=True)
    np.testing.assert_array_equal(net[1].weight.data().asnumpy(), big[1].weight.data().asnumpy())


def test_load_shape_mismatch_raises_and_changes_nothing(tmp_path):
    other = mx.nn.Sequential(mx.nn.Dense(4, in_units=3), mx.nn.Dense(2, in_units=4))
    other.initialize(device=mx.cpu(0))
    other[1].weight.set_data(np.ones((2, 4)))
    arrays = _values(other)
    arrays["1.weight"] = np.ones((3, 4), dtype=np.float32)  # wrong shape
    arrays["1.bias"] = np.ones((3,), dtype=np.float32)
    path = tmp_path / "shape.npz"
    np.savez(path, **arrays)
    net = _mlp()
    before = _values(net)
    with pytest.raises(ValueError) as info:
        net.load_parameters(path)
    msg = str(info.value)
    assert "1.weight" in msg and "(3, 4)" in msg and "(2, 4)" in msg and "1.bias" in msg
    assert "0.weight" not in msg
    _assert_values(net, before)  # 0.weight and 0.bias were fine, but nothing was loaded


def test_load_dtype_mismatch_and_cast_dtype(tmp_path):
    src = _mlp(dtype=np.float64)
    _randomize(src, 7)
    path = _saved(tmp_path, src)
    net = _mlp()
    before = _values(net)
    with pytest.raises(ValueError) as info:
        net.load_parameters(path)
    msg = str(info.value)
    for name in ("0.weight", "0.bias", "1.weight", "1.bias"):
        assert name in msg
    assert "float64" in msg and "float32" in msg and "cast_dtype" in msg
    _assert_values(net, before)
    net.load_parameters(path, cast_dtype=True)  # keep the model's dtype
    for name, value in _values(src).items():
        got = net.collect_params()[name].data().asnumpy()
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, value.astype(np.float32))
    net.load_parameters(path, cast_dtype=True, dtype_source="saved")  # adopt the file's dtype
    _assert_values(net, _values(src))
    with pytest.raises(ValueError, match="dtype_source"):
        net.load_parameters(path, cast_dtype=True, dtype_source="guess")


def test_load_reports_every_problem_at_once(tmp_path):
    arrays = {"0.weight": np.zeros((9, 9), dtype=np.float32), "0.bias": np.zeros(4, dtype=np.float64),
              "zzz.extra": np.zeros(1, dtype=np.float32)}
    path = tmp_path / "multi.npz"
    np.savez(path, **arrays)
    net = _mlp()
    before = _values(net)
    with pytest.raises(ValueError) as info:
        net.load_parameters(path)
    msg = str(info.value)
    for part in ("1.weight", "1.bias", "zzz.extra", "0.weight", "(9, 9)", "0.bias", "float64"):
        assert part in msg
    _assert_values(net, before)


def _check_unreadable(tmp_path, path):
    net = _mlp()
    _randomize(net, 8)
    before = _values(net)
    with pytest.raises(ValueError) as info:
        net.load_parameters(path)
    assert os.path.basename(str(path)) in str(info.value)
    _assert_values(net, before)


def test_load_corrupt_file(tmp_path):
    path = tmp_path / "corrupt.params"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    _check_unreadable(tmp_path, path)


def test_load_truncated_file(tmp_path):
    path = _saved(tmp_path, _mlp(), "full.params")
    data = path.read_bytes()
    cut = tmp_path / "truncated.params"
    cut.write_bytes(data[: len(data) // 2])
    _check_unreadable(tmp_path, cut)


def test_load_damaged_bytes_never_escape_as_other_errors(tmp_path):
    src = _mlp()
    _randomize(src, 12)
    good = _saved(tmp_path, src, "good.params").read_bytes()
    expected = _values(src)
    rng = np.random.default_rng(0)
    net = _mlp()
    path = tmp_path / "damaged.params"
    for _ in range(150):
        damaged = bytearray(good)
        for pos in rng.integers(0, len(good), rng.integers(1, 4)):
            damaged[pos] = rng.integers(0, 256)
        path.write_bytes(bytes(damaged))
        _randomize(net, 13)
        before = _values(net)
        try:
            net.load_parameters(path)
        except ValueError as exc:
            assert "damaged.params" in str(exc)
            _assert_values(net, before)
        else:  # the damage missed everything that matters: the values are the saved ones
            _assert_values(net, expected)


def test_load_npy_instead_of_npz(tmp_path):
    path = tmp_path / "single.npy"
    np.save(path, np.ones((4, 3), dtype=np.float32))
    _check_unreadable(tmp_path, path)


def test_load_pickled_object_array(tmp_path):
    path = tmp_path / "objects.npz"
    np.savez(path, **{"0.weight": np.array([{"evil": 1}, None], dtype=object)})
    _check_unreadable(tmp_path, path)
    raw = tmp_path / "raw.pkl"
    raw.write_bytes(pickle.dumps({"0.weight": np.ones((4, 3))}))
    _check_unreadable(tmp_path, raw)


def test_load_missing_file(tmp_path):
    net = _mlp()
    with pytest.raises(FileNotFoundError):
        net.load_parameters(tmp_path / "does-not-exist.params")


def test_save_is_atomic(tmp_path, monkeypatch):
    net = _mlp()
    _randomize(net, 9)
    path = _saved(tmp_path, net, "ckpt.params")
    good = path.read_bytes()
    original_values = _values(net)

    def broken_savez(file, *args, **kwargs):
        file.write(b"PK\x03\x04 half a zip archive")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken_savez)
    _randomize(net, 10)
    with pytest.raises(OSError, match="disk full"):
        net.save_parameters(path)
    monkeypatch.undo()
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["ckpt.params"]  # no temporary file left behind
    fresh = _mlp()
    fresh.load_parameters(path)
    _assert_values(fresh, original_values)


def test_save_deduplicate_shared(tmp_path):
    a = _mlp()
    shared = mx.nn.Sequential(a[0], a[0])  # the same layer twice
    p1 = tmp_path / "dup.params"
    shared.save_parameters(p1)
    with np.load(p1) as f:
        assert sorted(f.files) == ["0.bias", "0.weight", "1.bias", "1.weight"]
    p2 = tmp_path / "dedup.params"
    shared.save_parameters(p2, deduplicate=True)
    with np.load(p2) as f:
        assert sorted(f.files) == ["0.bias", "0.weight"]
        np.testing.assert_array_equal(f["0.weight"], a[0].weight.data().asnumpy())


def test_reassigning_a_registered_child_to_another_kind_raises():
    net = mx.nn.Sequential()
    net.head = mx.nn.Dense(2, in_units=3)
    with pytest.raises(TypeError, match="'head'.*Dense to NoneType"):
        net.head = None


def test_block_added_after_initialize_joins_the_model_store():
    net = mx.nn.Sequential()
    net.add(mx.nn.Dense(3, in_units=4))
    net.initialize()
    net.add(mx.nn.Dense(2, in_units=3))
    net.initialize()
    stores = {id(p._store) for p in net.collect_params().values()}
    assert len(stores) == 1


def test_force_reinit_of_a_deferred_model_replaces_values():
    net = mx.nn.Sequential(mx.nn.Dense(3), mx.nn.Dense(2))
    net.initialize(mx.init.One())
    net(mx.ones((1, 4)))
    net.initialize(mx.init.Zero(), force_reinit=True)
    for p in net.collect_params().values():
        assert not p.data().asnumpy().any()


def test_deduplicated_file_fills_every_sharing_name(tmp_path):
    class Two(mx.nn.Block):
        def __init__(self):
            super().__init__()
            self.a = mx.nn.Dense(2, in_units=2)
            self.b = mx.nn.Dense(2, in_units=2).share_parameters(self.a.collect_params())

    net = Two()
    net.initialize()
    path = str(tmp_path / "dedup.params")
    net.save_parameters(path, deduplicate=True)
    assert sorted(mx.npx.load(path)) == ["a.bias", "a.weight"]
    other = Two()
    other.load_parameters(path)
    np.testing.assert_array_equal(other.b.weight.data().asnumpy(), net.a.weight.data().asnumpy())
    params = Two().collect_params()
    params.load(path)  # ParameterDict.load follows the same rule
    lone = mx.nn.Sequential(mx.nn.Dense(2, in_units=2), mx.nn.Dense(2, in_units=2))
    with pytest.raises(ValueError, match="missing"):  # unshared names are still required
        lone.load_parameters(path, ignore_extra=True)


def test_collect_params_str_and_unregistered_block_warning():
    net = mx.nn.Sequential(mx.nn.Dense(3, in_units=2, use_bias=False))
    text = str(net.collect_params())
    assert text.startswith("{'0.weight': Parameter") and "\n" not in text and "(3, 2)" in text

    class Hidden(mx.nn.Block):
        def __init__(self):
            super().__init__()
            self.layers = {"x": [mx.nn.Dense(2)]}
            self.ok = [mx.nn.Dense(2)]
            self.register_child(self.ok[0], "ok0")

    with pytest.warns(UserWarning, match=r"Hidden\.layers.*unregistered"):
        params = Hidden().collect_params()
    assert list(params) == ["ok0.weight", "ok0.bias"]


def test_initializers_compare_by_value():
    assert mx.init.Constant(-10.0) == mx.init.Constant(-10.0)
    assert mx.init.Constant(1.0) != mx.init.Constant(2.0)
    assert mx.init.Constant(np.ones(3)) == mx.init.Constant(mx.np.ones(3))
    assert mx.init.Constant(np.ones(3)) != mx.init.Constant(np.ones(4))
    assert mx.init.Xavier(magnitude=2) == mx.init.Xavier(magnitude=2.0) != mx.init.Xavier()
    assert mx.init.Zero() != mx.init.One() and mx.init.Zero() != "zeros"
    assert len({mx.init.Uniform(0.1), mx.init.Uniform(0.1)}) == 1
