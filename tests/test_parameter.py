"""Parameter: per-device mirrors as views into flat arenas, deferred init, grad_req, initializers."""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite.gluon.nn import Parameter
from mxlite.store import ALIGN, ParameterStore

CPUS3 = [mx.cpu(0), mx.cpu(1), mx.cpu(2)]


def _arena_of(param: Parameter, device: mx.Device):
    return param._slots[device]


# -- mirrors and devices --------------------------------------------------------------------------
def test_init_on_three_devices_gives_identical_mirrors():
    mx.random.seed(0)
    p = Parameter("weight", shape=(3, 4))
    p.initialize(device=CPUS3)
    assert p.is_initialized
    assert p.list_device() == CPUS3
    values = [d.asnumpy() for d in p.list_data()]
    assert values[0].shape == (3, 4) and values[0].dtype == np.float32
    assert np.abs(values[0]).max() > 0  # the default Uniform(0.07) drew something
    assert np.abs(values[0]).max() <= 0.07
    for v in values[1:]:
        np.testing.assert_array_equal(v, values[0])
    for dev in CPUS3:
        assert p.data(dev).device == dev
        assert p.grad(dev).device == dev
        np.testing.assert_array_equal(p.grad(dev).asnumpy(), np.zeros((3, 4)))
    # mirrors are separate buffers
    p.data(mx.cpu(1))._data[0, 0] = 99.0
    assert p.data(mx.cpu(0)).asnumpy()[0, 0] != 99.0
    assert len(p.list_grad()) == 3


def test_duplicate_devices_rejected():
    p = Parameter("weight", shape=(2,))
    with pytest.raises(ValueError, match="duplicate"):
        p.initialize(device=[mx.cpu(0), mx.cpu(1), mx.cpu(0)])
    assert not p.is_initialized
    with pytest.raises(ValueError):
        mx.nn.Dense(2, in_units=2).initialize(device=[mx.cpu(1), mx.cpu(1)])


def test_data_on_wrong_device_names_the_devices():
    p = Parameter("weight", shape=(2,))
    p.initialize(device=[mx.cpu(0), mx.cpu(1)])
    with pytest.raises(RuntimeError) as info:
        p.data(mx.cpu(5))
    msg = str(info.value)
    assert "cpu(5)" in msg and "cpu(0)" in msg and "cpu(1)" in msg
    with pytest.raises(RuntimeError, match="cpu\\(0\\).*cpu\\(1\\)"):
        p.grad(mx.cpu(5))
    # with several mirrors and no device given, the current device picks the mirror
    with mx.cpu(1):
        assert p.data().device == mx.cpu(1)


def test_uninitialised_data_mentions_initialize():
    p = Parameter("weight", shape=(2, 2))
    with pytest.raises(RuntimeError, match="initialize"):
        p.data()
    with pytest.raises(RuntimeError, match="initialize"):
        p.grad()
    with pytest.raises(RuntimeError, match="initialize"):
        p.list_data()


def test_unknown_shape_needs_deferred_init():
    p = Parameter("weight", shape=(3, 0))
    with pytest.raises(ValueError, match="allow_deferred_init"):
        p.initialize()


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="grad_req"):
        Parameter("w", grad_req="sometimes")
    with pytest.raises(ValueError, match="grad_stype"):
        Parameter("w", grad_stype="csr")


def test_deferred_init_gets_shape_at_first_forward():
    net = mx.nn.Dense(4)
    net.initialize(device=[mx.cpu(0), mx.cpu(1)])
    assert not net.weight.is_initialized
    assert net.weight.shape == (4, -1)
    assert net.weight.list_device() == [mx.cpu(0), mx.cpu(1)]
    with pytest.raises(mx.nn.DeferredInitializationError):
        net.weight.data()
    x = mx.ones((2, 6), device=mx.cpu(1))
    y = net(x)
    assert y.shape == (2, 4) and y.device == mx.cpu(1)
    assert net.weight.shape == (4, 6)
    assert net.weight.is_initialized and net.bias.is_initialized
    np.testing.assert_array_equal(net.weight.data(mx.cpu(0)).asnumpy(), net.weight.data(mx.cpu(1)).asnumpy())
    np.testing.assert_array_equal(net.bias.data(mx.cpu(0)).asnumpy(), np.zeros(4))
    expected = x.asnumpy() @ net.weight.data(mx.cpu(1)).asnumpy().T
    np.testing.assert_allclose(y.asnumpy(), expected, rtol=1e-6)


def test_deferred_set_data_completes_init():
    p = Parameter("weight", shape=(2, -1), allow_deferred_init=True)
    p.initialize(device=mx.cpu(0))
    assert not p.is_initialized
    p.set_data(np.arange(6.0).reshape(2, 3))
    assert p.shape == (2, 3)
    np.testing.assert_array_equal(p.data().asnumpy(), np.arange(6.0).reshape(2, 3))


def test_reinitialize_warns_and_force_reinit_rewrites():
    p = Parameter("weight", shape=(2,))
    p.initialize(init="ones", device=mx.cpu(0))
    d = p.data()
    with pytest.warns(UserWarning, match="force_reinit"):
        p.initialize(init="zeros", device=mx.cpu(0))
    np.testing.assert_array_equal(p.data().asnumpy(), [1.0, 1.0])
    p.initialize(init="zeros", device=mx.cpu(0), force_reinit=True)
    np.testing.assert_array_equal(p.data().asnumpy(), [0.0, 0.0])
    assert p.data() is d  # same devices and shape: rewritten in place

    net = mx.nn.Sequential(mx.nn.Dense(3, in_units=2), mx.nn.Dense(2))
    net.initialize(device=mx.cpu(0))
    net(mx.ones((1, 2)))
    net.initialize(mx.init.One(), force_reinit=True)
    for name, param in net.collect_params().items():
        expected = 0.0 if name.endswith("bias") else 1.0
        np.testing.assert_array_equal(param.data().asnumpy(), np.full(param.shape, expected), err_msg=name)


# -- arena views ----------------------------------------------------------------------------------
def test_data_and_grad_are_arena_views():
    store = ParameterStore()
    p = Parameter("weight", shape=(2, 3))
    p.initialize(init=mx.init.Constant(1.5), device=mx.cpu(0), store=store)
    arena, slot = _arena_of(p, mx.cpu(0))
    assert arena is store.arena(mx.cpu(0), np.float32)
    d = p.data()
    d._data[1, 2] = 7.0
    assert arena.data[slot.offset + 5] == 7.0
    np.testing.assert_array_equal(arena.data[slot.offset: slot.offset + 5], [1.5] * 5)
    arena.data[slot.offset] = -3.0
    assert p.data().asnumpy()[0, 0] == -3.0
    g = p.grad()
    g._data[0, 1] = 4.0
    off = arena.grad_offset_in_region(slot)
    assert arena.grad[off + 1] == 4.0
    assert np.shares_memory(d._data, arena.data) and np.shares_memory(g._data, arena.grad)


def test_mlp_grads_in_reverse_registration_order():
    net = mx.nn.Sequential(mx.nn.Dense(5, in_units=3), mx.nn.Dense(4, in_units=5), mx.nn.Dense(2, in_units=4))
    net.initialize(device=mx.cpu(0))
    params = net.collect_params()
    names = list(params)
    assert names == ["0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"]
    arenas = {id(params[n]._slots[mx.cpu(0)][0]) for n in names}
    assert len(arenas) == 1  # one arena for the whole model
    arena = params[names[0]]._slots[mx.cpu(0)][0]
    slots = [params[n]._slots[mx.cpu(0)][1] for n in names]
    data_offsets = [s.offset for s in slots]
    grad_offsets = [arena.grad_offset_in_region(s) for s in slots]
    assert data_offsets == sorted(data_offsets)  # data: registration order
    assert grad_offsets == sorted(grad_offsets, reverse=True)  # grads: reverse order
    assert grad_offsets[-1] == 0  # the last layer's bias comes first in arena.grad
    assert all(o % ALIGN == 0 for o in data_offsets + grad_offsets)
    # slots are contiguous (up to alignment): each starts where the previous one's span ends
    for a, b in zip(slots, slots[1:]):
        assert b.offset == a.offset + a.span
        assert arena.grad_offset_in_region(a) == arena.grad_offset_in_region(b) + b.span
    assert arena.used == arena.grad_used == sum(s.span for s in slots)

    # backward writes gradients straight into the arena
    x = mx.array(np.random.default_rng(0).standard_normal((4, 3)), dtype="float32")  # as the float32 layers
    with mx.autograd.record():
        loss = net(x).sum()
    loss.backward()
    for name, s in zip(names, slots):
        off = arena.grad_offset_in_region(s)
        np.testing.assert_array_equal(arena.grad[off: off + s.size], params[name].grad().asnumpy().ravel())
    assert np.abs(arena.grad).sum() > 0


def test_deferred_mlp_arena_follows_first_use_order():
    net = mx.nn.Sequential(mx.nn.Dense(5), mx.nn.Dense(4), mx.nn.Dense(2))
    net.initialize(device=mx.cpu(0))
    net(mx.ones((2, 3)))
    params = net.collect_params()
    arena = params["0.weight"]._slots[mx.cpu(0)][0]
    offsets = [arena.grad_offset_in_region(p._slots[mx.cpu(0)][1]) for p in params.values()]
    assert offsets == sorted(offsets, reverse=True)
    assert offsets[-1] == 0


def test_arena_growth_keeps_values_and_repoints_views():
    store = ParameterStore()
    p = Parameter("weight", shape=(3,))
    p.initialize(init=mx.init.Constant(2.0), device=mx.cpu(0), store=store)
    d, g = p.data(), p.grad()
    arena = store.arena(mx.cpu(0), np.float32)
    first_buffer = arena.data_buf
    others = []
    for i in range(12):
        q = Parameter(f"w{i}", shape=(200,))
        q.initialize(init=mx.init.Constant(float(i)), device=mx.cpu(0), store=store)
        others.append(q)
    assert arena.data_buf is not first_buffer  # it grew
    assert p.data() is d and p.grad() is g  # same Tensor objects ...
    assert np.shares_memory(d._data, arena.data)  # ... now viewing the new buffer
    assert np.shares_memory(g._data, arena.grad)
    np.testing.assert_array_equal(d.asnumpy(), [2.0, 2.0, 2.0])
    for i, q in enumerate(others):
        np.testing.assert_array_equal(q.data().asnumpy(), np.full(200, float(i)))
    arena.data[_arena_of(p, mx.cpu(0))[1].offset] = 11.0
    assert d.asnumpy()[0] == 11.0
    # padding between slots stays zero
    slot = _arena_of(p, mx.cpu(0))[1]
    np.testing.assert_array_equal(arena.data[slot.offset + slot.size: slot.offset + slot.span], 0)


@pytest.mark.parametrize("shape", [(3, -1), (3, 1.5), (True, 2), None, "ab"])
def test_a_bad_shape_adds_no_slot_to_the_arena(shape):
    # N7 step 3: the shape is checked and the views are made before a slot is listed or counted, so a
    # failure leaves no phantom slot (which would shift every later parameter's offsets).
    store = ParameterStore()
    arena = store.arena(mx.cpu(0), np.float32)
    first = arena.add("first", (5,))
    state = (arena.used, arena.grad_used, list(arena.slots))
    with pytest.raises(ValueError, match=r"cannot place 'bad' in an arena: its shape .* must be integers >= 0"):
        arena.add("bad", shape)
    assert (arena.used, arena.grad_used, list(arena.slots)) == state
    second = arena.add("second", (4,))
    assert second.offset == first.span and arena.used == first.span + second.span


# -- values and gradients -------------------------------------------------------------------------
def test_set_data_writes_every_mirror():
    p = Parameter("weight", shape=(2, 2))
    p.initialize(device=[mx.cpu(0), mx.cpu(1)])
    p.set_data(mx.array([[1.0, 2.0], [3.0, 4.0]], device=mx.cpu(3)))
    for dev in (mx.cpu(0), mx.cpu(1)):
        np.testing.assert_array_equal(p.data(dev).asnumpy(), [[1, 2], [3, 4]])
    p.set_data(np.full((2, 2), 0.5, dtype=np.float64))
    assert p.data(mx.cpu(1)).dtype == np.float32
    np.testing.assert_array_equal(p.data(mx.cpu(1)).asnumpy(), np.full((2, 2), 0.5))
    with pytest.raises(ValueError, match="shape"):
        p.set_data(np.zeros((3, 2)))


def test_zero_grad():
    p = Parameter("weight", shape=(3,))
    p.initialize(init="ones", device=[mx.cpu(0), mx.cpu(1)])
    for dev in p.list_device():
        x = p.data(dev)
        with mx.autograd.record():
            y = (x * x * 3.0).sum()
        y.backward()
        np.testing.assert_allclose(p.grad(dev).asnumpy(), [6.0, 6.0, 6.0])
    p.zero_grad()
    for g in p.list_grad():
        np.testing.assert_array_equal(g.asnumpy(), np.zeros(3))


def test_reset_device_keeps_values():
    p = Parameter("weight", shape=(2, 3))
    p.initialize(device=mx.cpu(0))
    before = p.data().asnumpy()
    p.reset_device([mx.cpu(1), mx.cpu(2)])
    assert p.list_device() == [mx.cpu(1), mx.cpu(2)]
    for dev in (mx.cpu(1), mx.cpu(2)):
        np.testing.assert_array_equal(p.data(dev).asnumpy(), before)
        assert p.data(dev).device == dev
        np.testing.assert_array_equal(p.grad(dev).asnumpy(), np.zeros((2, 3)))
    with pytest.raises(RuntimeError, match="cpu\\(1\\)"):
        p.data(mx.cpu(0))


def test_reset_device_of_deferred_param():
    net = mx.nn.Dense(3)
    net.initialize(device=mx.cpu(0))
    net.reset_device(mx.cpu(2))
    net(mx.ones((1, 2), device=mx.cpu(2)))
    assert net.weight.list_device() == [mx.cpu(2)]


def test_grad_req_null_has_no_grad():
    p = Parameter("weight", grad_req="null", shape=(2,))
    p.initialize(init="ones", device=mx.cpu(0))
    with pytest.raises(RuntimeError, match="grad_req='null'"):
        p.grad()
    with pytest.raises(RuntimeError, match="grad_req='null'"):
        p.list_grad()
    p.zero_grad()  # a no-op, not an error
    slot = _arena_of(p, mx.cpu(0))[1]
    assert slot.grad is None and slot.grad_offset is None


def test_switching_grad_req():
    p = Parameter("weight", grad_req="null", shape=(3,))
    p.initialize(init=mx.init.Constant(2.0), device=mx.cpu(0))
    p.grad_req = "write"
    assert p.grad_req == "write"
    np.testing.assert_array_equal(p.data().asnumpy(), [2.0, 2.0, 2.0])  # values kept
    np.testing.assert_array_equal(p.grad().asnumpy(), np.zeros(3))

    def run_backward():
        x = p.data()
        with mx.autograd.record():
            y = (x * x).sum()
        y.backward()

    run_backward()
    run_backward()
    np.testing.assert_array_equal(p.grad().asnumpy(), [4.0, 4.0, 4.0])  # 'write' overwrites
    p.grad_req = "add"
    assert p.data()._grad_req == "add"
    p.zero_grad()
    run_backward()
    run_backward()
    np.testing.assert_array_equal(p.grad().asnumpy(), [8.0, 8.0, 8.0])  # 'add' accumulates
    p.grad_req = "null"
    with pytest.raises(RuntimeError):
        p.grad()
    np.testing.assert_array_equal(p.data().asnumpy(), [2.0, 2.0, 2.0])
    with pytest.raises(ValueError, match="grad_req"):
        p.grad_req = "maybe"


def test_lr_mult_wd_mult_stored():
    p = Parameter("weight", shape=(2,), lr_mult=0.1, wd_mult=0.0)
    assert p.lr_mult == 0.1 and p.wd_mult == 0.0
    p.lr_mult = 2.0
    assert p.lr_mult == 2.0


def test_cast_dtype():
    p = Parameter("weight", shape=(2, 2))
    p.initialize(init=mx.init.Constant(0.25), device=[mx.cpu(0), mx.cpu(1)])
    p.cast("float64")
    assert p.dtype == np.float64
    for dev in (mx.cpu(0), mx.cpu(1)):
        assert p.data(dev).dtype == np.float64 and p.grad(dev).dtype == np.float64
        np.testing.assert_array_equal(p.data(dev).asnumpy(), np.full((2, 2), 0.25))
        arena, _ = _arena_of(p, dev)
        assert arena.dtype == np.float64
    p.cast(np.float16)
    assert p.data(mx.cpu(1)).dtype == np.float16
    np.testing.assert_array_equal(p.data(mx.cpu(1)).asnumpy(), np.full((2, 2), 0.25))
    q = Parameter("w", shape=(1,))
    q.cast("float64")  # before initialisation: only the dtype changes
    q.initialize(device=mx.cpu(0))
    assert q.data().dtype == np.float64


def test_constant_parameter():
    c = mx.nn.Constant(np.array([[1.0, 2.0], [3.0, 4.0]]))
    assert c.grad_req == "null" and c.shape == (2, 2) and c.dtype == np.float32
    c.initialize(device=[mx.cpu(0), mx.cpu(1)])
    for dev in (mx.cpu(0), mx.cpu(1)):
        np.testing.assert_array_equal(c.data(dev).asnumpy(), [[1, 2], [3, 4]])
    with pytest.raises(RuntimeError):
        c.grad()
    c.grad_req = "write"  # a Constant stays non-differentiable
    assert c.grad_req == "null"


def test_repr_and_label():
    net = mx.nn.Sequential(mx.nn.Dense(2, in_units=3))
    params = net.collect_params()
    assert params["0.weight"].label == "0.weight"
    assert "0.weight" in repr(params["0.weight"]) and "(2, 3)" in repr(params["0.weight"])


# -- initializers ---------------------------------------------------------------------------------
class _Custom(mx.nn.Block):
    def __init__(self):
        super().__init__()
        self.weight = Parameter("weight", shape=(3, 4))
        self.bias = Parameter("bias", shape=(3,))
        self.gamma = Parameter("gamma", shape=(3,))
        self.beta = Parameter("beta", shape=(3,))
        self.running_var = Parameter("running_var", shape=(3,), grad_req="null")
        self.mine = Parameter("mine", shape=(2, 2), init=mx.init.Constant(5.0))


def test_initializer_name_rules():
    blk = _Custom()
    blk.initialize(mx.init.One(), device=mx.cpu(0))
    np.testing.assert_array_equal(blk.weight.data().asnumpy(), np.ones((3, 4)))
    np.testing.assert_array_equal(blk.bias.data().asnumpy(), np.zeros(3))  # bias -> zeros
    np.testing.assert_array_equal(blk.beta.data().asnumpy(), np.zeros(3))  # beta -> zeros
    np.testing.assert_array_equal(blk.gamma.data().asnumpy(), np.ones(3))  # gamma -> ones
    np.testing.assert_array_equal(blk.running_var.data().asnumpy(), np.ones(3))
    np.testing.assert_array_equal(blk.mine.data().asnumpy(), np.full((2, 2), 5.0))  # own init wins


def test_own_init_wins_over_block_init():
    net = mx.nn.Dense(3, in_units=2, weight_initializer="ones", bias_initializer=mx.init.Constant(0.5))
    net.initialize(mx.init.Zero(), device=mx.cpu(0))
    np.testing.assert_array_equal(net.weight.data().asnumpy(), np.ones((3, 2)))
    np.testing.assert_array_equal(net.bias.data().asnumpy(), np.full(3, 0.5))
    # an explicit init to Parameter.initialize wins over the parameter's own one
    p = Parameter("weight", shape=(2,), init="ones")
    p.initialize(init="zeros", device=mx.cpu(0))
    np.testing.assert_array_equal(p.data().asnumpy(), [0.0, 0.0])


def test_bn_defaults_and_dense_bias_zero_with_xavier():
    net = mx.nn.Sequential(mx.nn.Dense(4, in_units=3), mx.nn.BatchNorm(in_channels=4))
    net.initialize(mx.init.Xavier(), device=mx.cpu(0))
    p = net.collect_params()
    np.testing.assert_array_equal(p["0.bias"].data().asnumpy(), np.zeros(4))
    np.testing.assert_array_equal(p["1.gamma"].data().asnumpy(), np.ones(4))
    np.testing.assert_array_equal(p["1.beta"].data().asnumpy(), np.zeros(4))
    np.testing.assert_array_equal(p["1.running_mean"].data().asnumpy(), np.zeros(4))
    np.testing.assert_array_equal(p["1.running_var"].data().asnumpy(), np.ones(4))


@pytest.mark.parametrize("shape", [(64, 32), (16, 8, 3, 3)])
def test_xavier_bounds_and_std(shape):
    mx.random.seed(1)
    arr = np.zeros(shape)
    mx.init.Xavier()("weight", arr)
    hw = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    fan_in, fan_out = shape[1] * hw, shape[0] * hw
    bound = np.sqrt(3.0 / ((fan_in + fan_out) / 2.0))
    assert np.all(np.abs(arr) <= bound)
    assert np.abs(arr).max() > 0.9 * bound
    np.testing.assert_allclose(arr.std(), bound / np.sqrt(3.0), rtol=0.08)
    assert abs(arr.mean()) < 0.1 * bound

    gauss = np.zeros(shape)
    mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2.0)("weight", gauss)
    np.testing.assert_allclose(gauss.std(), np.sqrt(2.0 / fan_in), rtol=0.08)


def test_xavier_through_dense():
    mx.random.seed(2)
    net = mx.nn.Dense(40, in_units=60)
    net.initialize(mx.init.Xavier(), device=mx.cpu(0))
    w = net.weight.data().asnumpy()
    bound = np.sqrt(3.0 / 50.0)
    assert np.abs(w).max() <= bound * (1 + 1e-6)
    np.testing.assert_allclose(w.std(), bound / np.sqrt(3.0), rtol=0.08)


def test_xavier_errors():
    with pytest.raises(ValueError, match="dimensions"):
        mx.init.Xavier()("weight", np.zeros(5))
    with pytest.raises(ValueError, match="rnd_type"):
        mx.init.Xavier(rnd_type="laplace")
    with pytest.raises(ValueError, match="factor_type"):
        mx.init.Xavier(factor_type="sum")


def test_simple_initializers():
    mx.random.seed(3)
    arr = np.zeros((100, 50))
    mx.init.Normal(0.5)("weight", arr)
    np.testing.assert_allclose(arr.std(), 0.5, rtol=0.05)
    assert abs(arr.mean()) < 0.03
    mx.init.Uniform(0.2)("weight", arr)
    assert np.all(np.abs(arr) <= 0.2) and np.abs(arr).max() > 0.19
    np.testing.assert_allclose(arr.std(), 0.2 / np.sqrt(3.0), rtol=0.05)
    mx.init.Constant(3.0)("weight", arr)
    assert np.all(arr == 3.0)
    mx.init.Constant(np.arange(50.0))("weight", arr)
    np.testing.assert_array_equal(arr[7], np.arange(50.0))
    mx.init.Zero()("weight", arr)
    assert np.all(arr == 0.0)
    mx.init.One()("weight", arr)
    assert np.all(arr == 1.0)


def test_initializer_reproducible_with_seed():
    mx.random.seed(11)
    a = np.zeros((4, 4))
    mx.init.Uniform()("weight", a)
    mx.random.seed(11)
    b = np.zeros((4, 4))
    mx.init.Uniform()("weight", b)
    np.testing.assert_array_equal(a, b)


def test_init_create():
    assert isinstance(mx.init.create("zeros"), mx.init.Zero)
    assert isinstance(mx.init.create("ones"), mx.init.One)
    assert isinstance(mx.init.create("Xavier"), mx.init.Xavier)
    assert mx.init.create("normal", sigma=2.0).sigma == 2.0
    inst = mx.init.Uniform(0.3)
    assert mx.init.create(inst) is inst
    assert mx.init.create(None) is None
    with pytest.raises(ValueError) as info:
        mx.init.create("no_such_init")
    msg = str(info.value)
    assert "no_such_init" in msg
    for name in ("zeros", "ones", "xavier", "normal", "uniform", "constant"):
        assert name in msg
    with pytest.raises(TypeError):
        mx.init.create(3)
