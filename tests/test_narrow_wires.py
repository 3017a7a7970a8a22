"""Compression on the NCCL path without the host (GPU-marked; runs on the emulated GPUs).

* fp16/bf16: one cast-and-prescale launch and one half-precision NCCL all-reduce per bucket, half
  the NCCL bytes of float32, no device-to-host bytes, and the fused update reads the half sum
  (kernel ``<T, __half>`` / ``<T, __nv_bfloat16>``); the sum is within the bound stated in
  mxlite/comm/narrow.py.
* 2bit/topk/threshold: exchanged by a device-side NCCL allGather, decoded on the devices,
  bit-identical to the host exchange; no device-to-host bytes (threshold: one 4-byte count per
  bucket, read once per step); NCCL bytes as small as each codec's message.
* every new kernel entry against its NumPy twin.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import mxlite as mx
from mxlite.comm import compression as C
from mxlite.optimizer import _fused
from mxlite.optimizer._fused import CHUNK, HP, ArenaPlan, Launcher, Segment, fused_rule
from tests.test_fused_update import FUSED, _bf16_bits, _bf16_value, _optimizer
from tests.training_helpers import random_backward

pytestmark = [pytest.mark.gpu, pytest.mark.requires_gpus(2)]

STEPS = 2


def _counters():
    from mxlite._emulation import install

    return install


def _net(devices):
    mx.random.seed(0)
    net = mx.nn.Sequential(mx.nn.Dense(64, activation="relu", in_units=20), mx.nn.Dense(10, in_units=64))
    net.initialize(mx.init.Xavier(), device=devices)
    return net


def _backward(net, devices, rng):
    random_backward(net, devices, rng, 16, 20, 10)


def _step_counts(kvstore, compression, optimizer="adam"):
    """Counters of one training step (backward and step) after a first step, and the trainer."""
    install = pytest.importorskip("mxlite._emulation.install")
    devices = [mx.gpu(0), mx.gpu(1)]
    net = _net(devices)
    trainer = mx.Trainer(net.collect_params(), optimizer, {"learning_rate": 0.01}, kvstore=kvstore,
                         compression_params=compression, bucket_bytes=4096)
    rng = np.random.default_rng(1)
    for _ in range(2):
        install.reset_counters()
        _backward(net, devices, rng)
        trainer.step(16)
    for d in devices:
        with d.use():
            import cupy

            cupy.cuda.get_current_stream().synchronize()
    counts = install.counters()
    sync = next(s for _, s in trainer._syncs.values() if s is not None)
    return counts, sync, net, trainer


def _bucket_elements(sync):
    return [b.end[0] - b.start[0] for b in sync.buckets]


# -- fp16 / bf16: a real half-precision all-reduce read by the update -------------------------------------
# kvstore 'device' on GPUs reduces over NCCL; the 'nccl' store itself refuses compression (as MXNet).
@pytest.mark.parametrize("kvstore", ["device"])
@pytest.mark.parametrize("codec,nccl_dtype,grad_type", [("fp16", "float16", "__half"),
                                                        ("bf16", "bfloat16", "__nv_bfloat16")])
def test_narrow_wire_is_one_half_allreduce_per_bucket_and_no_host_bytes(kvstore, codec, nccl_dtype, grad_type):
    counts, sync, _, _ = _step_counts(kvstore, {"type": codec})
    plain, plain_sync, _, _ = _step_counts(kvstore, None)
    sizes = _bucket_elements(sync)
    assert sizes == _bucket_elements(plain_sync) and len(sizes) >= 2
    for gpu in (0, 1):
        c = counts[gpu]
        assert c["nccl_calls"] == {"allReduce": len(sizes)}, c["nccl_calls"]        # one NCCL call per bucket
        assert c["nccl_bytes"] == {nccl_dtype: 2 * sum(sizes)}, c["nccl_bytes"]
        assert plain[gpu]["nccl_bytes"] == {"float32": 4 * sum(sizes)}               # half the bytes of float32
        assert c["d2h_bytes"] == 0 and c["d2h_copies"] == 0
        launches = c["kernel_launches"]
        wire_casts = {k: v for k, v in launches.items() if k.startswith("to_wire")}
        assert sum(wire_casts.values()) == len(sizes), launches                      # one cast per bucket
        assert not any(k.startswith("from_wire") for k in launches), launches         # no cast back
        assert launches.get(f"adam_update<float, {grad_type}>") == 1, launches        # reads the half sum
        assert "adam_update<float>" not in launches


@pytest.mark.parametrize("codec,u,floor", [("fp16", 2.0**-11, 2.0**-25), ("bf16", 2.0**-8, 0.0)])
def test_narrow_wire_sum_is_within_the_stated_bound(codec, u, floor):
    """allreduce_grads() writes float32(wire) * N into the gradients: within N*u*sum|g| + N^2*floor of the sum."""
    devices = [mx.gpu(0), mx.gpu(1)]
    n_contrib = len(devices)
    net = _net(devices)
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="device",
                         compression_params={"type": codec}, bucket_bytes=4096)
    _backward(net, devices, np.random.default_rng(3))
    local = {k: [g.asnumpy().astype(np.float64) for g in p.list_grad()] for k, p in net.collect_params().items()}
    trainer.allreduce_grads()
    for k, p in net.collect_params().items():
        exact = sum(local[k])
        bound = n_contrib * u * sum(np.abs(g) for g in local[k]) + n_contrib**2 * floor
        bound = bound + np.abs(exact) * 2.0**-23  # the float32 product by N and the float32 gradient
        for mirror in p.list_grad():
            got = mirror.asnumpy().astype(np.float64)
            assert (np.abs(got - exact) <= bound).all(), (k, np.max(np.abs(got - exact) - bound))


def test_narrow_wire_training_matches_the_materialised_path():
    """The update reading the wire directly equals the update reading the materialised float32 sum."""
    devices = [mx.gpu(0), mx.gpu(1)]
    out = []
    for check_finite in (False, True):  # check_finite reads the gradient buffers: the sums are written there first
        net = _net(devices)
        trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9}, kvstore="device",
                             compression_params={"type": "fp16"}, bucket_bytes=4096, check_finite=check_finite)
        rng = np.random.default_rng(5)
        for _ in range(STEPS):
            _backward(net, devices, rng)
            trainer.step(16)
        out.append({k: p.list_data()[1].asnumpy() for k, p in net.collect_params().items()})
    for k in out[0]:
        # float32(rescale*N) * float(half) (direct) vs rescale * float32(float(half) * N): one float32 rounding apart
        np.testing.assert_allclose(out[0][k], out[1][k], rtol=1e-6, atol=1e-7, err_msg=k)


# -- 2bit / topk / threshold: device-side allGather ----------------------------------------------------------
@pytest.mark.parametrize("compression", [{"type": "2bit", "threshold": 0.001}, {"type": "topk", "ratio": 0.1},
                                         {"type": "threshold", "threshold": 0.002}])
def test_sparse_codecs_exchange_on_the_devices(compression):
    counts, sync, net, _ = _step_counts("device", compression)
    sizes = _bucket_elements(sync)
    for gpu in (0, 1):
        c = counts[gpu]
        if compression["type"] == "threshold":
            # one all-reduce (max) of every bucket's count, read once: 4 bytes per bucket
            assert c["nccl_calls"] == {"allReduce": 1, "allGather": len(sizes)}, c["nccl_calls"]
            assert (c["d2h_bytes"], c["d2h_copies"]) == ((4 * len(sizes), 1) if gpu == 0 else (0, 0))  # GPU 0's
            assert c["nccl_bytes"]["int32"] >= 4 * len(sizes)
        else:
            assert c["nccl_calls"] == {"allGather": len(sizes)}, c["nccl_calls"]    # one NCCL call per bucket
            assert c["d2h_bytes"] == 0 and c["d2h_copies"] == 0
        if compression["type"] == "2bit":
            assert c["nccl_bytes"] == {"uint32": sum(4 * math.ceil(n / 16) for n in sizes)}  # 2 bits per value
        if compression["type"] == "topk":
            want = sum(4 + 8 * C.topk_count(0.1, n) for n in sizes)                 # count, k indices, k values
            assert c["nccl_bytes"] == {"int32": want}


@pytest.mark.parametrize("compression", [{"type": "2bit", "threshold": 0.001}, {"type": "topk", "ratio": 0.1},
                                         {"type": "threshold", "threshold": 0.002}])
def test_sparse_codecs_on_the_devices_equal_the_host_exchange(compression):
    """Same bits as the host exchange: the GPU run's gradient sums equal Codec.reduce on host copies."""
    devices = [mx.gpu(0), mx.gpu(1)]
    net = _net(devices)
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="device",
                         compression_params=dict(compression), bucket_bytes=4096, overlap=False)  # read g first
    codec = C.create(compression)
    sync = next(s for _, s in trainer._syncs.values() if s is not None)
    rng = np.random.default_rng(2)
    host_residuals = None
    for _ in range(STEPS):
        _backward(net, devices, rng)
        buckets = [[np.array(b.get()) for b in bucket.buffers()] for bucket in sync.buckets]
        if host_residuals is None:
            host_residuals = [[np.zeros_like(g) for g in grads] for grads in buckets]
        want = []
        for grads, residuals in zip(buckets, host_residuals):
            out = np.empty_like(grads[0])
            codec.reduce(grads, residuals, out)
            want.append(out)
        trainer.allreduce_grads()
        for bucket, expected in zip(sync.buckets, want):
            for buf in bucket.buffers():
                np.testing.assert_array_equal(buf.get(), expected)


# -- kernels against their twins ------------------------------------------------------------------------------
def test_compact_take_and_scatter_add_message_match_their_twins():
    import cupy

    rng = np.random.default_rng(4)
    n = 3000
    g = rng.normal(size=n).astype(np.float32)
    g[::97] = np.nan
    r0 = rng.normal(size=n).astype(np.float32)
    with mx.gpu(0).use():
        rg, gg = cupy.asarray(r0), cupy.asarray(g)
        indices, values, count = C.threshold_select_on_device(gg, rg, 0.9)
        m = int(count.get()[0])
        got_idx, got_val, got_r = indices.get()[:m], values.get()[:m], rg.get()
    r_host = r0.copy()
    want_idx, want_val = C.threshold_select(g, r_host, 0.9)
    np.testing.assert_array_equal(got_idx, want_idx)
    np.testing.assert_array_equal(got_val.view(np.uint32), want_val.view(np.uint32))
    np.testing.assert_array_equal(got_r.view(np.uint32), r_host.view(np.uint32))
    # the twin of compact_take itself
    r_twin = r0 + g
    pos = np.cumsum(~(np.abs(r_twin) < np.float32(0.9)), dtype=np.int32)  # NaN is selected (sent)
    t_idx, t_val = C.kernels.compact_take_twin(pos, r_twin)
    np.testing.assert_array_equal(t_idx, want_idx)
    # scatter_add_message: capacity larger than the count; the padding is never read
    capacity = m + 5
    message = np.concatenate([[m], want_idx, np.full(5, 12345678, np.int32), want_val.view(np.int32),
                              np.full(5, -1, np.int32)]).astype(np.int32)
    base = rng.normal(size=n).astype(np.float32)
    want = C.scatter_add_message(message, capacity, base.copy())
    with mx.gpu(0).use():
        out = cupy.asarray(base)
        C.scatter_add_message(cupy.asarray(message), capacity, out)
        np.testing.assert_array_equal(out.get().view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("k_ratio", [0.01, 0.3, 1.0])
def test_topk_selection_without_host_sync_matches_the_twin(k_ratio):
    import cupy

    rng = np.random.default_rng(6)
    n = 1000
    g = np.round(rng.normal(size=n), 1).astype(np.float32)  # many ties
    g[5] = np.nan
    k = C.topk_count(k_ratio, n)
    r_host = np.zeros(n, np.float32)
    want_idx, want_val = C.topk_select(g, r_host, k)
    with mx.gpu(0).use():
        rg = cupy.zeros(n, np.float32)
        idx, val = C.topk_select(cupy.asarray(g), rg, k)
        np.testing.assert_array_equal(idx.get(), want_idx)
        np.testing.assert_array_equal(val.get().view(np.uint32), want_val.view(np.uint32))


def _wire_bits(values, wire):
    return values.astype(np.float16).view(np.uint16) if wire == "float16" else _bf16_bits(values)


def _wire_values(bits, wire):
    return bits.view(np.float16).astype(np.float32) if wire == "float16" else _bf16_value(bits)


@pytest.mark.parametrize("wdtype,multi_precision,wire", [
    ("float32", False, "float16"), ("float32", False, "bfloat16"), ("float16", True, "bfloat16"),
    ("float16", False, "bfloat16")], ids=["f32-f16g", "f32-bf16g", "f16-master-bf16g", "f16-bf16g"])
@pytest.mark.parametrize("name,kwargs", FUSED, ids=[f"{n}-{i}" for i, (n, _) in enumerate(FUSED)])
def test_kernels_reading_a_wire_match_the_twin(name, kwargs, wdtype, multi_precision, wire):
    """kernel<T, G>(wire, grad_scale N) against the twin on float32(wire) with rescale_grad * N."""
    import cupy

    rng = np.random.default_rng(9)
    sizes = [300, 7, CHUNK + 3]
    offsets = np.cumsum([0, *[s + 16 for s in sizes[:-1]]])
    total = int(offsets[-1] + sizes[-1])
    plan = ArenaPlan([Segment(int(o), int(o), s) for o, s in zip(offsets, sizes)])
    w0 = rng.normal(size=total).astype(wdtype)
    bits = _wire_bits((rng.normal(size=total) * 0.5 + 0.1).astype(np.float32), wire)
    grad32 = _wire_values(bits, wire)
    n_contrib = 2
    results = []
    for side in ("twin", "kernel"):
        opt = _optimizer(name, kwargs, multi_precision)
        rule = fused_rule(opt, np.float32)
        hp = np.zeros((len(sizes), HP), np.float32)
        counts = []
        for k in range(len(sizes)):
            counts.append(opt._update_count(k))
            row = rule.row(opt, k, counts[-1])
            hp[k, :len(row)] = row
        names = rule.states(opt)
        if side == "twin":
            opt.rescale_grad = opt.rescale_grad * n_contrib
            w = w0.copy()
            st = {s: np.zeros(total, np.float32) for s in names}
            master = w0.astype(np.float32) if multi_precision else None
            if rule.twin is not None:
                rule.twin(opt, plan, w, grad32, st, master, hp)
            else:
                _fused.step_segments(opt, plan, list(range(len(sizes))), counts, w, grad32, names, st, master)
            results.append(w.astype(np.float64))
        else:
            with mx.gpu(0).use():
                w = cupy.asarray(w0)
                g = cupy.asarray(bits.view(np.float16) if wire == "float16" else bits)
                st = {s: cupy.zeros(total, np.float32) for s in names}
                master = cupy.asarray(w0.astype(np.float32)) if multi_precision else None
                rule.launch(Launcher(mx.gpu(0), plan, wdtype, hp, wire, n_contrib), opt, w, g, st, master)
                results.append(w.get().astype(np.float64))
    twin, kernel = results
    if wdtype == "float32":
        np.testing.assert_allclose(kernel, twin, rtol=1e-6, atol=1e-7)
    else:  # float16 storage: one float16 ulp (as tests/test_fused_update.py)
        ulp = np.abs(np.spacing(twin.astype(np.float16))).astype(np.float64)
        assert (np.abs(kernel - twin) <= ulp + 1e-7).all()


@pytest.mark.parametrize("wire", ["float16"])
@pytest.mark.parametrize("name,kwargs", FUSED, ids=[f"{n}-{i}" for i, (n, _) in enumerate(FUSED)])
def test_bfloat16_storage_reading_a_half_wire_follows_float32(name, kwargs, wire):
    """bfloat16 weights reading a float16 wire land within bfloat16's ulp of float32 weights reading float32."""
    import cupy

    rng = np.random.default_rng(8)
    sizes = [2000, 7, CHUNK + 3]
    plan = ArenaPlan([Segment(int(o), int(o), n) for o, n in zip(np.cumsum([0, *sizes[:-1]]), sizes)])
    total = sum(sizes)
    w_bits = _bf16_bits(rng.normal(size=total))
    g16 = (rng.normal(size=total) + 0.2).astype(np.float16)
    results = []
    for dtype in ("float32", "bfloat16"):
        opt = _optimizer(name, kwargs)
        rule = fused_rule(opt, np.float32)
        hp = np.zeros((len(sizes), HP), np.float32)
        for k in range(len(sizes)):
            row = rule.row(opt, k, opt._update_count(k))
            hp[k, :len(row)] = row
        with mx.gpu(0).use():
            states = {n: cupy.zeros(total, np.float32) for n in rule.states(opt)}
            if dtype == "float32":
                w = cupy.asarray(_bf16_value(w_bits))
                rule.launch(Launcher(mx.gpu(0), plan, dtype, hp), opt, w, cupy.asarray(g16.astype(np.float32)),
                            states, None)
            else:
                w = cupy.asarray(w_bits)
                rule.launch(Launcher(mx.gpu(0), plan, dtype, hp, wire), opt, w, cupy.asarray(g16), states, None)
            out = w.get()
        results.append(out if dtype == "float32" else _bf16_value(out))
    np.testing.assert_allclose(results[1], results[0], rtol=2 ** -8, atol=1e-6)
