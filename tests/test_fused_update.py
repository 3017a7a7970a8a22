"""Fused arena updates (kernels/optimizers.cu): chunk tables, the hand-tuned NumPy twins, and
(GPU) every kernel against its twin."""

import numpy as np
import pytest

import mxlite as mx
from mxlite.device import kernels as _kernels
from mxlite.optimizer import adam, sgd
from mxlite.optimizer._arena import ArenaUpdater
from mxlite.optimizer._fused import CHUNK, HP, ArenaPlan, Launcher, Segment, fused_rule
from mxlite.store import Arena
from tests.test_trainer_fused import FUSED


@pytest.fixture(autouse=True)
def numpy_twins(monkeypatch):
    """These tests are about the NumPy twins (and the kernels against them): CPU devices run the twins here."""
    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, "numpy")


def _model_arena(dtype="float32", device=None):
    """A 3-layer MLP initialised on ``device``; returns (net, arena, plan of its segments)."""
    mx.random.seed(0)
    device = device or mx.cpu(0)
    net = mx.nn.Sequential(mx.nn.Dense(7, in_units=5, dtype=dtype), mx.nn.Dense(4, in_units=7, dtype=dtype),
                           mx.nn.Dense(3, in_units=4, dtype=dtype))
    net.initialize(mx.init.Xavier(), device=device)
    params = list(net.collect_params().values())
    arena, _ = params[0].arena_slots()[0]
    segments = [Segment(s.offset, s.grad_offset, s.size) for _, s in (p.arena_slots()[0] for p in params)]
    return net, arena, ArenaPlan(segments)


def _hp(lr, wd):
    """The per-launch table: one row (lr, wd, 0, 0) per segment."""
    hp = np.zeros((len(lr), HP), np.float32)
    hp[:, 0], hp[:, 1] = lr, wd
    return hp


def _fill_grads(net, rng):
    for p in net.collect_params().values():
        g = p.grad()
        g._data[...] = rng.normal(size=g.shape).astype(g.dtype)


def test_chunks_never_straddle_segments_and_cover_everything():
    plan = ArenaPlan([Segment(0, 500_000, 3), Segment(16, 0, CHUNK * 2 + 5), Segment(CHUNK * 2 + 32, 7, 1)])
    covered = []
    for seg, start, end in zip(plan.chunk_seg, plan.chunk_start, plan.chunk_end):
        s = plan.segments[seg]
        assert s.offset <= start < end <= s.offset + s.size and end - start <= CHUNK
        covered.extend(range(start, end))
    expected = [i for s in plan.segments for i in range(s.offset, s.offset + s.size)]
    assert covered == expected
    assert list(plan.grad_shift()) == [500_000, -16, 7 - CHUNK * 2 - 32]


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_twin_matches_per_parameter_rule(momentum):
    rng = np.random.default_rng(1)
    net, arena, plan = _model_arena()
    params = list(net.collect_params().values())
    lr = np.array([0.1, 0.05, 0.2, 0.1, 0.3, 0.01], dtype=np.float32)
    wd = np.array([0.0, 1e-3, 0.0, 1e-2, 0.0, 0.1], dtype=np.float32)
    opts = [mx.optimizer.SGD(learning_rate=float(lr[i]), momentum=momentum, wd=float(wd[i]), rescale_grad=0.5,
                             clip_gradient=0.7) for i in range(len(params))]
    ref_w = [p.data().asnumpy() for p in params]
    states = [o.create_state(0, w) for o, w in zip(opts, ref_w)]
    mom = np.zeros_like(arena.data) if momentum else None
    for _ in range(5):
        _fill_grads(net, rng)
        for o, w, p, st in zip(opts, ref_w, params, states):
            o.update(0, w, p.grad().asnumpy(), st)
        sgd.sgd_twin(plan, arena.data_buf, arena.grad_buf, mom, None, _hp(lr, wd), momentum, 0.5, 0.7)
    for w, p in zip(ref_w, params):
        np.testing.assert_allclose(p.data().asnumpy(), w, rtol=1e-6, atol=1e-7)


def test_adam_twin_matches_per_parameter_rule_and_keeps_padding_zero():
    rng = np.random.default_rng(2)
    net, arena, plan = _model_arena()
    params = list(net.collect_params().values())
    n = len(params)
    opts = [mx.optimizer.Adam(learning_rate=0.01, wd=1e-3, rescale_grad=1.0) for _ in range(n)]
    ref_w = [p.data().asnumpy() for p in params]
    states = [o.create_state(0, w) for o, w in zip(opts, ref_w)]
    mean, var = np.zeros_like(arena.data_buf), np.zeros_like(arena.data_buf)
    for t in range(1, 6):
        _fill_grads(net, rng)
        for o, w, p, st in zip(opts, ref_w, params, states):
            o.update(0, w, p.grad().asnumpy(), st)
        lr_t = np.full(n, 0.01 * np.sqrt(1 - 0.999**t) / (1 - 0.9**t), dtype=np.float32)
        adam.adam_twin(plan, arena.data_buf, arena.grad_buf, mean, var, None,
                         _hp(lr_t, np.full(n, 1e-3, np.float32)), 0.9, 0.999, 1e-8, 1.0, None)
    for w, p in zip(ref_w, params):
        # float32 in a different evaluation order: a few ulp per step
        np.testing.assert_allclose(p.data().asnumpy(), w, rtol=1e-5, atol=1e-6)
    live = np.zeros(arena.used, dtype=bool)
    for s in plan.segments:
        live[s.offset: s.offset + s.size] = True
    assert not arena.data[~live].any()  # alignment padding stays zero


def test_half_weights_with_master_follow_the_float32_run():
    rng = np.random.default_rng(3)
    net32, arena32, plan32 = _model_arena("float32")
    net16, arena16, plan16 = _model_arena("float16")
    master = arena16.data_buf.astype(np.float32)
    n = len(plan32.segments)
    lr, wd = np.full(n, 0.1, np.float32), np.zeros(n, np.float32)
    mom32, mom16 = np.zeros_like(arena32.data_buf), np.zeros_like(master)
    for _ in range(3):
        g = rng.normal(size=arena32.grad_buf.shape).astype(np.float32)
        arena32.grad_buf[...] = g
        arena16.grad_buf[...] = g.astype(np.float16)
        sgd.sgd_twin(plan32, arena32.data_buf, arena32.grad_buf, mom32, None, _hp(lr, wd), 0.9, 1.0, None)
        sgd.sgd_twin(plan16, arena16.data_buf, arena16.grad_buf, mom16, master, _hp(lr, wd), 0.9, 1.0, None)
    np.testing.assert_allclose(master, arena32.data_buf.astype(np.float32), rtol=0, atol=5e-3)
    np.testing.assert_array_equal(arena16.data_buf, master.astype(np.float16))


def test_kernel_source_is_found_and_missing_names_raise():
    assert "adam_update" in _kernels.kernel_source("optimizers.cu")
    with pytest.raises(FileNotFoundError, match="nosuch.cu"):
        _kernels.kernel_source("nosuch.cu")


def test_launcher_rejects_weights_without_kernels():
    plan = ArenaPlan([Segment(0, 0, 3)])
    assert Launcher(mx.cpu(0), plan, "bfloat16", np.zeros((1, HP), np.float32)).type_name == "__nv_bfloat16"
    with pytest.raises(TypeError, match="float64"):
        Launcher(mx.cpu(0), plan, np.float64, np.zeros((1, HP), np.float32))


# -- GPU: every kernel against its twin --------------------------------------------------------------
gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(mx.num_gpus() == 0, reason="needs CuPy and a CUDA GPU")

# Sizes that give multi-chunk parameters, a chunk tail, and tiny ones (odd lengths, padding between).
SHAPES = [(300, 500), (7,), (33, 3), (CHUNK + 1,)]
STEPS = 3


def _optimizer(name, kwargs, multi_precision=False, wd=1e-3):
    """The rule with every per-parameter feature on: wd, rescale, clipping, lr/wd multipliers."""
    kwargs = {"wd": wd, "clip_gradient": 0.8, **kwargs}
    opt = getattr(mx.optimizer, name)(rescale_grad=0.5, multi_precision=multi_precision, **kwargs)
    opt.set_lr_mult({0: 0.5, 2: 2.0})
    opt.set_wd_mult({1: 0.0, 3: 3.0})
    if name == "LARS":
        opt.idx2name = {1: "dense0_bias"}  # one excluded parameter: trust ratio 1
    return opt


# Special weights (R1): per parameter, flat positions of inf, -inf and NaN (parameter 1 keeps finite weights).
SPECIAL = {0: (0, 777, 149999), 2: (4, 50, 98), 3: (1, CHUNK - 1, CHUNK)}


def _run_arena(device, name, kwargs, dtype, multi_precision, wd=1e-3, special=False):
    """STEPS fused updates on ``device`` from seeded data; NaN in the padding of weights and gradients.

    ``special``: inf, -inf and NaN weights at :data:`SPECIAL`. Returns the arena and the updater (states in
    its own buffers).
    """
    rng = np.random.default_rng(7)
    arena = Arena(device, dtype)
    slots = [arena.add(i, shape) for i, shape in enumerate(SHAPES)]
    xp = device.xp
    live = np.zeros(arena.data_buf.shape[0], bool)
    for s in slots:
        live[s.offset: s.offset + s.size] = True
    data = np.full(arena.data_buf.shape, np.nan, np.float32)
    data[live] = rng.normal(size=live.sum())
    if special:
        for i, where in SPECIAL.items():
            data[slots[i].offset + np.asarray(where)] = [np.inf, -np.inf, np.nan]
    arena.data_buf[...] = xp.asarray(data.astype(dtype))
    updater = ArenaUpdater(_optimizer(name, kwargs, multi_precision, wd), arena, 0)
    for _ in range(STEPS):
        grad = np.full(arena.grad_buf.shape, np.nan, np.float32)
        for s in slots:
            grad[s.grad_offset: s.grad_offset + s.size] = rng.normal(size=s.size) + 0.2
        arena.grad_buf[...] = xp.asarray(grad.astype(dtype))
        updater.step(list(enumerate(slots)))
    return arena, updater, live


def _host(a):
    return np.asarray(a.get() if hasattr(a, "get") else a, dtype=np.float64)


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype,multi_precision,rtol", [("float32", False, 1e-6), ("float16", True, 1e-6),
                                                        ("float16", False, 1e-3)],
                         ids=["f32", "f16-master", "f16"])
@pytest.mark.parametrize("name,kwargs", FUSED, ids=[f"{n}-{i}" for i, (n, _) in enumerate(FUSED)])
def test_kernel_matches_twin(name, kwargs, dtype, multi_precision, rtol):
    """Every live element is written as the twin writes it (so none is skipped), padding is untouched."""
    cpu_arena, cpu_upd, live = _run_arena(mx.cpu(0), name, kwargs, dtype, multi_precision)
    gpu_arena, gpu_upd, _ = _run_arena(mx.gpu(0), name, kwargs, dtype, multi_precision)
    want, got = _host(cpu_arena.data_buf), _host(gpu_arena.data_buf)
    if multi_precision:
        # The float32 master weights are compared below at rtol 1e-6 (LAMB and LARS sum their norms in
        # another order than the twin); rounding them to float16 may then land one float16 ulp apart.
        ulp = np.abs(np.spacing(want[live].astype(np.float16))).astype(np.float64)
        assert (np.abs(got[live] - want[live]) <= ulp).all(), "float16 weights more than one ulp from the twin"
    else:  # float16 storage without masters: the float32 results may round to neighbouring float16 values
        # LAMB and LARS: the GPU sums the norms in thread order, the twin in the serial kernel's (R2), so
        # the trust ratio may differ in its last bit; near-zero weights then differ by ~1e-8 absolute.
        atol = max(rtol * 1e-2, 1e-7) if name in ("LAMB", "LARS") else rtol * 1e-2
        np.testing.assert_allclose(got[live], want[live], rtol=rtol, atol=atol)
    assert np.isnan(got[~live]).all(), "the kernel wrote outside the parameters"
    for state in cpu_upd._states:  # every state buffer too (master weights included): float32
        on = live[:len(cpu_upd._states[state])]  # the states cover the arena's live region, not its capacity
        np.testing.assert_allclose(_host(gpu_upd._states[state])[on], _host(cpu_upd._states[state])[on],
                                   rtol=1e-5 if dtype == "float16" and not multi_precision else 1e-6, atol=1e-7,
                                   err_msg=state)


@gpu
@needs_gpu
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy's invalid-value warnings of the twins
@pytest.mark.parametrize("wd", [0.0, 1e-3], ids=["wd0", "wd>0"])
@pytest.mark.parametrize("dtype,multi_precision", [("float32", False), ("float16", True), ("float16", False)],
                         ids=["f32", "f16-master", "f16"])
@pytest.mark.parametrize("name,kwargs", FUSED, ids=[f"{n}-{i}" for i, (n, _) in enumerate(FUSED)])
def test_kernel_matches_twin_on_infinite_and_nan_weights(name, kwargs, dtype, multi_precision, wd):
    """R1 on the GPU: inf, -inf and NaN weights end where the twin's do (the same non-finite values in the
    same places, weights and states); finite values agree to the GPU's documented tolerance (thread-order
    norm sums for LAMB and LARS, float16 roundings), the same as :func:`test_kernel_matches_twin`'s."""
    cpu_arena, cpu_upd, live = _run_arena(mx.cpu(0), name, kwargs, dtype, multi_precision, wd, special=True)
    gpu_arena, gpu_upd, _ = _run_arena(mx.gpu(0), name, kwargs, dtype, multi_precision, wd, special=True)
    pairs = [("weights", _host(gpu_arena.data_buf)[live], _host(cpu_arena.data_buf)[live])]
    on = live[:len(cpu_upd._states[next(iter(cpu_upd._states))])] if cpu_upd._states else live  # the live region
    pairs += [(state, _host(gpu_upd._states[state])[on], _host(cpu_upd._states[state])[on])
              for state in cpu_upd._states]
    half = dtype == "float16"
    for what, got, want in pairs:
        finite = np.isfinite(want)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN in other places")
        np.testing.assert_array_equal(got[~finite], want[~finite], err_msg=f"{what}: other infinities")
        tol = 1e-3 if half and what == "weights" else 1e-5 if half and not multi_precision else 1e-6
        np.testing.assert_allclose(got[finite], want[finite], rtol=tol, atol=max(tol * 1e-2, 1e-7), err_msg=what)
    assert np.isnan(pairs[0][2]).sum() >= 3, "the NaN weights should stay NaN"


def _bf16_bits(x):
    """float32 -> bfloat16 bits (round to nearest even), as uint16."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _bf16_value(bits):
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


@gpu
@needs_gpu
@pytest.mark.parametrize("name,kwargs", FUSED, ids=[f"{n}-{i}" for i, (n, _) in enumerate(FUSED)])
def test_bfloat16_kernels_follow_the_float32_kernels(name, kwargs):
    """bfloat16 storage (float32 math): one step from bfloat16-exact data lands within bfloat16's ulp."""
    import cupy

    rng = np.random.default_rng(8)
    sizes = [2000, 7, CHUNK + 3]
    plan = ArenaPlan([Segment(o, o, n) for o, n in zip(np.cumsum([0, *sizes[:-1]]) * 1, sizes)])
    total = sum(sizes)
    w_bits = _bf16_bits(rng.normal(size=total))
    g_bits = _bf16_bits(rng.normal(size=total) + 0.2)
    opt32, opt16 = _optimizer(name, kwargs), _optimizer(name, kwargs)
    rule = fused_rule(opt32, np.float32)
    results = []
    for opt, dtype in ((opt32, "float32"), (opt16, "bfloat16")):
        hp = np.zeros((len(sizes), HP), np.float32)
        for k in range(len(sizes)):
            row = rule.row(opt, k, opt._update_count(k))
            hp[k, :len(row)] = row
        with mx.gpu(0).use():
            if dtype == "float32":
                w, g = cupy.asarray(_bf16_value(w_bits)), cupy.asarray(_bf16_value(g_bits))
            else:
                w, g = cupy.asarray(w_bits), cupy.asarray(g_bits)
            states = {n: cupy.zeros(total, np.float32) for n in rule.states(opt)}
            rule.launch(Launcher(mx.gpu(0), plan, dtype, hp), opt, w, g, states, None)
            out = w.get()
        results.append(out if dtype == "float32" else _bf16_value(out))
    np.testing.assert_allclose(results[1], results[0], rtol=2 ** -8, atol=1e-6)
