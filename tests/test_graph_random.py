"""Dropout on GPUs from Philox with its offset on the device (``kernels/random.cu``, ``mxlite.ops._philox``).

The kernels give their NumPy twins' bits (on the emulated GPUs and on CPU devices through the serial host
build); Philox4x32-10 matches its published known-answer vectors; a draw advances the offset on the device
by the counters it used; seeding rewrites the state in place; and a hybridized block with Dropout in
training mode is captured, replays new masks at every step and trains bit for bit as eagerly.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mxlite as mx
from mxlite.ops import _philox


@pytest.fixture
def emu():
    """The emulation's counters; skipped on real GPUs."""
    from mxlite._emulation import install  # noqa: PLC0415

    return install if mx.num_gpus() and install.emulated_gpu_count() else pytest.skip("needs the GPU emulation")


def test_philox_known_answers():
    """Random123's known-answer vectors for philox4x32-10 (counter and key zero; counter and key all ones)."""
    zero = _philox.philox4x32(np.array([0], np.uint64), 0)[0]
    assert [int(w) for w in zero] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


def test_twin_uniforms_are_in_range_and_uniform():
    u = _philox.uniforms(12345, 7, 100_001)
    assert u.dtype == np.float32 and u.shape == (100_001,)
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 0.01
    # consecutive offsets continue one stream: a draw at offset k + 1 is the first one's tail
    assert np.array_equal(_philox.uniforms(12345, 8, 8), _philox.uniforms(12345, 7, 12)[4:])


def _check_kernel(device, dtype, shape, rate):
    key = 0x0123456789ABCDEF
    offset = 5
    with device.use():
        rng_state = device.xp.asarray(np.array([key, offset], np.uint64))
    mask = _philox.dropout_mask(device, shape, rate, dtype, rng_state=rng_state)
    got = mask.get() if device.is_gpu else mask
    want = _philox.dropout_mask_twin(key, offset, shape, rate, dtype)
    assert got.dtype == np.dtype(dtype) and got.tobytes() == want.tobytes()
    after = rng_state.get() if device.is_gpu else rng_state
    assert int(after[0]) == key and int(after[1]) == offset + _philox.counters(int(np.prod(shape)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape,rate", [((1000,), 0.5), ((3, 7, 5), 0.1), ((2, 3), 0.9), ((0, 4), 0.5),
                                        ((5,), 1.0), ((4, 4), 0.0)])
def test_kernel_gives_the_twins_bits_on_gpus(emu, dtype, shape, rate):
    _check_kernel(mx.gpu(0), dtype, shape, rate)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_kernel_gives_the_twins_bits_on_cpu_devices(dtype):
    if not _philox.KERNELS.cpu_enabled():
        pytest.skip("no host build of the kernels (g++ and the cpu extra)")
    _check_kernel(mx.cpu(), dtype, (1001,), 0.3)


@pytest.mark.gpu
def test_dropout_on_gpus_draws_from_the_device_state_and_seed_rewrites_it(emu):
    device = mx.gpu(0)
    mx.random.seed(3)
    x = mx.nd.ones((6, 10), device=device)
    state = _philox.state(device)
    key = int(state.get()[0])
    masks = [mx.nd.Dropout(x, p=0.4, mode="always").asnumpy() for _ in range(2)]
    want = [_philox.dropout_mask_twin(key, offset, (6, 10), 0.4, np.float32) for offset in (0, 15)]
    assert [m.tobytes() for m in masks] == [w.tobytes() for w in want]
    assert int(state.get()[1]) == 30
    mx.random.seed(3)  # the same array, rewritten: graphs holding it keep reading it
    assert _philox.state(device) is state and state.get().tolist() == [key, 0]
    assert mx.nd.Dropout(x, p=0.4, mode="always").asnumpy().tobytes() == masks[0].tobytes()
    mx.random.seed(4, device=device)
    assert int(state.get()[0]) != key and int(state.get()[1]) == 0
    emu.reset_counters()
    mx.nd.Dropout(x, p=0.4, mode="always")
    counts = emu.counters()[0]
    # the mask kernel and the advance kernel, then the product: no host sync, no copy, no cuRAND
    assert counts["kernel_launches"] == {"dropout_mask<float, float>": 1, "philox_advance": 1}, counts
    assert counts["host_syncs"] == 0 and not any(k.startswith("random.") for k in counts["ops"])


def _dropout_net(device):
    net = mx.nn.Sequential(mx.nn.Dense(16, activation="relu"), mx.nn.Dropout(0.5), mx.nn.Dense(4))
    net.initialize(mx.init.Xavier(), device=device)
    return net


@pytest.mark.gpu
def test_a_captured_block_with_dropout_replays_new_masks_bit_for_bit(emu):
    """Eager and captured training of an MLP with Dropout draw the same masks and give the same bits."""
    device = mx.gpu(0)
    results = []
    for graphs in (False, True):
        mx.random.seed(11)
        net = _dropout_net(device)
        if graphs:
            net.hybridize(static_alloc=True, static_shape=True)
        trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
        rng = np.random.default_rng(5)
        outs = []
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # nothing falls back
            for _ in range(6):
                x = mx.nd.array(rng.standard_normal((8, 12)).astype(np.float32), device=device)
                with mx.autograd.record():
                    y = net(x)
                y.backward()
                trainer.step(8)
                outs.append(y.asnumpy())
        results.append((outs, [p.data(device).asnumpy() for p in net.collect_params().values()]))
        # every step drew its mask at a new offset, the replays' draws advanced by the graph itself
        assert int(_philox.state(device).get()[1]) == 6 * _philox.counters(8 * 16)
        if graphs:
            info = net.graph_info()
            assert len(info) == 1 and info[0]["backward"] and info[0]["launches"] == 5  # all but the warm-up
    (eager, eager_params), (captured, captured_params) = results
    assert [o.tobytes() for o in eager] == [o.tobytes() for o in captured]
    assert [p.tobytes() for p in eager_params] == [p.tobytes() for p in captured_params]
