"""``scaled_dot_product_attention`` (mxlite.ops.attention, ``mx.npx``): against PyTorch's numbers, a composed
reference (batch_dot + mask + softmax), float64 finite differences; its masks, dropout and errors; on the emulated
GPUs (or real ones), where it must give the CPU devices' bits and hold memory that grows with T, not T².

Two paths compute it: the kernels of kernels/attention.cu (float32, float16, bfloat16; CPU devices through the host
build) and a blockwise path of array operations (float64, or where the host build is missing); both are checked.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import mxlite as mx
from mxlite import ops
from mxlite.ops import _attention_kernels as ak
from mxlite.ops import attention as A
from mxlite.ops import nn_ops
from tests.gradcheck import check_grad

sdpa = A.scaled_dot_product_attention


@pytest.fixture(params=["kernels", "blockwise"])
def path(request, monkeypatch):
    """Run the op on the kernels' path (skipped without the host build) or on the blockwise path."""
    if request.param == "blockwise":
        monkeypatch.setattr(ak, "compiled", lambda device: False)
    elif not ak.compiled(mx.cpu(0)):
        pytest.skip("the host build of kernels/attention.cu is not available")
    return request.param


# -- PyTorch's numbers ----------------------------------------------------------------------------------------
def _formula_inputs(b, h, tq, tk, d):
    """The inputs the PyTorch constants below were computed from (deterministic formulas, no random generator)."""
    q = np.sin(np.arange(b * h * tq * d) * 0.37 + 0.1).reshape(b, h, tq, d)
    k = np.cos(np.arange(b * h * tk * d) * 0.23 + 0.5).reshape(b, h, tk, d)
    v = np.sin(np.arange(b * h * tk * d) * 0.71 - 0.3).reshape(b, h, tk, d)
    return q, k, v


# torch 2.13.0 (CPU), float64: torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs) on the inputs
# above, then (out * cos(0.5 * arange(out.size)).reshape(out.shape)).sum().backward(); rounded to 12 decimals.
TORCH = {
    "plain": ((1, 2, 3, 3, 4), {}, {
        "out": [-0.147191565881, 0.203226736885, 0.455430384753, 0.487535345043, -0.151214507078, 0.254395607758,
                0.537062367764, 0.560179641725, -0.271515737539, -0.073122160306, 0.160609620206, 0.316722586069,
                0.489465327459, 0.222952021728, -0.151308700552, -0.452445521736, 0.330368199523, 0.289732861576,
                0.109076513359, -0.124293922981, 0.628608623852, 0.590646297087, 0.26723864396, -0.185319098346],
        "dq": [0.117125635873, 0.121464192253, 0.119405568513, 0.111058186623, -0.218969827472, -0.246115885298,
               -0.260299706111, -0.260774267642, -0.164677709917, -0.140647739346, -0.109210244753, -0.072020951266,
               -0.049188501377, -0.077828113605, -0.102368736231, -0.121517883129, -0.144835075586, -0.155947326859,
               -0.158846267522, -0.153379218457, -0.163117443187, -0.159436967419, -0.147359391408, -0.127520807385],
        "dk": [-0.275854857586, -0.238689394321, -0.169218441277, -0.076844566046, 0.25215614971, 0.321548666816,
               0.347421080321, 0.32627168043, 0.023698707876, -0.082859272495, -0.178202639044, -0.249427114384,
               -0.209965843711, -0.181461170976, -0.128396580021, -0.057954114296, 0.400558451234, 0.428068829747,
               0.397642100316, 0.313396378031, -0.190592607522, -0.246607658772, -0.269245520295, -0.255442263735],
        "dv": [0.230936981837, -0.05774213614, -0.332283965363, -0.525471091057, -0.055285617483, -0.020738855508,
               0.018885501589, 0.053886029242, -0.245441821765, -0.05587586144, 0.147370458505, 0.314535350483,
               0.612263317979, 0.550386043087, 0.353755069464, 0.070512517196, 0.029650865154, -0.050448238975,
               -0.118195854759, -0.157005003074, -0.666315459368, -0.600899009065, -0.388361524258, -0.080739593731],
    }),
    # is_causal=True with Tq=3 < Tk=5: PyTorch aligns the causal mask at the top left (key j <= query i)
    "causal": ((1, 1, 3, 5, 4), {"causal": True}, {
        "out": [-0.295520206661, 0.398609327984, 0.900100442177, 0.966594391833, -0.105311575643, 0.286710059639,
                0.54017153303, 0.53258093465, -0.271515737539, -0.073122160306, 0.160609620206, 0.316722586069],
        "dq": [0.0, 0.0, 0.0, 0.0, -0.219125283513, -0.248329110094, -0.264454135288, -0.266651099006,
               -0.164677709917, -0.140647739346, -0.109210244753, -0.072020951266],
        "dk": [-0.297537365064, -0.292815346866, -0.248462145128, -0.170480757636, 0.278476249623, 0.359334711374,
               0.391558905656, 0.370787438943, 0.019061115441, -0.066519364508, -0.143096760528, -0.200306681307,
               0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        "dv": [0.574223408063, 0.220589385014, -0.18705261281, -0.54889760733, -0.303621964079, -0.245172072663,
               -0.126695507185, 0.022800537112, -0.340391901395, -0.109774165438, 0.147720114726, 0.369047358885,
               0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    }),
    # attn_mask = this boolean (Tq, Tk) mask, True where a query attends
    "masked": ((1, 2, 3, 4, 4), {"mask": [[1, 0, 1, 1], [0, 1, 0, 0], [1, 1, 1, 0]]}, {
        "out": [-0.16845232993, 0.329891031775, 0.668805893389, 0.684502752192, 0.565956230449, -0.10819513453,
                -0.730058360839, -0.999101721687, -0.271515737539, -0.073122160306, 0.160609620206, 0.316722586069,
                -0.669461736687, -0.417202353056, 0.036681018424, 0.472837324947, 0.972007501395, 0.890281658454,
                0.378303835936, -0.316499245025, -0.268855046621, -0.350990524045, -0.263500617918, -0.048667121813],
        "dq": [0.028164307555, 0.038675126727, 0.047149034878, 0.053139734909, 0.0, 0.0, 0.0, 0.0,
               -0.164677709917, -0.140647739346, -0.109210244753, -0.072020951266, 0.295863071522, 0.195604202205,
               0.085043405296, -0.029996390499, 0.0, 0.0, 0.0, 0.0, 0.110337894859, 0.06920659511, 0.024430377084,
               -0.021632520743],
        "dk": [0.006464469487, -0.000469310079, -0.007339570728, -0.01321645491, -0.022773308821, 0.079474154342,
               0.170965163546, 0.239316839897, 0.011205222513, -0.102156992531, -0.201692737876, -0.273930317332,
               0.005103616822, 0.023152148268, 0.038067145058, 0.047829932345, 0.270478542183, 0.271854968832,
               0.236437100779, 0.169018580312, -0.270156327756, -0.287976200152, -0.266819844815, -0.209550675191,
               0.297655970055, 0.312696181624, 0.285414431934, 0.219503177821, -0.297978184482, -0.296574950304,
               -0.255031687898, -0.178971082942],
        "dv": [0.603916822966, 0.586335290076, 0.425198429017, 0.159958163222, -0.627886171371, -0.869428168368,
               -0.898103827381, -0.706892346985, -0.203665010941, 0.010214969365, 0.221593968912, 0.378719036509,
               0.157843901936, 0.13852105584, 0.085283424183, 0.011165435923, 0.626395227657, 0.664792173448,
               0.540424809741, 0.283742604635, -0.420422822884, -0.757822145343, -0.909680176651, -0.838816774509,
               -0.412193004112, -0.192859368754, 0.07369296628, 0.322202693037, 0.181819323104, 0.184928135697,
               0.142760091076, 0.065639397229],
    }),
    "scaled": ((2, 1, 2, 3, 4), {"scale": 0.3}, {
        "out": [-0.140358453782, 0.137607287524, 0.349070695215, 0.391836527029, -0.127917534593, 0.176474259541,
                0.395580235653, 0.423511679688, 0.332665687482, 0.188325177717, -0.047028417342, -0.259654295318,
                0.368975277432, 0.176092447384, -0.10189167994, -0.330633978478],
        "dq": [0.086540007864, 0.088767709792, 0.086320264108, 0.079326570949, -0.141984812266, -0.161022085381,
               -0.171578774512, -0.173098888296, 0.032999236009, 0.052814948494, 0.069849044996, 0.083204387177,
               0.005071344399, -0.0114834409, -0.027433425405, -0.041938567934],
        "dk": [-0.189491452717, -0.153011739085, -0.095822604378, -0.025664329694, 0.194798614471, 0.174989785637,
               0.131496910231, 0.070206544906, -0.005307161754, -0.021978046552, -0.035674305853, -0.044542215212,
               -0.11086856489, -0.064754081134, -0.009875436271, 0.046339802563, 0.174243292919, 0.116461324152,
               0.042916861506, -0.036436197013, -0.063374728028, -0.051707243018, -0.033041425234, -0.00990360555],
        "dv": [0.273517119846, -0.014964043671, -0.299781487407, -0.511201967782, 0.175696619478, 0.03453152871,
               -0.115088084615, -0.236530120989, 0.134639424129, 0.056871461304, -0.03482061871, -0.117987396852,
               0.24887936091, 0.467007730451, 0.570796320114, 0.534834063395, 0.076953309398, 0.221470110714,
               0.311763304887, 0.325725968898, -0.019306004521, 0.077313985132, 0.155004814806, 0.194745059833],
    }),
}


def _run(arrays, kwargs, dtype, device=None, head=None):
    """(out, dq, dk, dv) as float64 NumPy arrays of attention on ``arrays`` in ``dtype``, back-propagating ``head``
    (default: PyTorch's cos(0.5 * arange))."""
    device = device or mx.cpu(0)
    q, k, v = (mx.array(a.astype(dtype), device=device) for a in arrays)
    for t in (q, k, v):
        t.attach_grad()
    with mx.autograd.record():
        out = sdpa(q, k, v, **kwargs)
    if head is None:
        head = np.cos(np.arange(out.size) * 0.5).reshape(out.shape)
    out.backward(mx.array(head.astype(dtype), device=device))
    return tuple(a.asnumpy().astype(np.float64) for a in (out, q.grad, k.grad, v.grad))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", list(TORCH))
def test_matches_pytorch_numbers(case, dtype, path):
    shape, kwargs, want = TORCH[case]
    got = _run(_formula_inputs(*shape), kwargs, dtype)
    tol = 2e-6 if dtype == np.float32 else 1e-11
    for name, a in zip(("out", "dq", "dk", "dv"), got):
        np.testing.assert_allclose(a.reshape(-1), want[name], rtol=tol, atol=tol, err_msg=f"{case} {name}")


# -- a composed reference and finite differences --------------------------------------------------------------
def _composed(q, k, v, keep, scale):
    """batch_dot + an additive mask + softmax + batch_dot: the (B, H, Tq, Tk) way."""
    b, h, tq, d = q.shape
    tk = k.shape[2]
    flat = [ops.reshape(t, (b * h, -1, t.shape[3])) for t in (q, k, v)]
    scores = mx.nd.batch_dot(flat[0], flat[1], transpose_b=True) * scale
    bias = np.where(np.broadcast_to(keep, (b, h, tq, tk)).reshape(b * h, tq, tk), 0.0, -1e30).astype(q.dtype)
    weights = nn_ops.softmax(scores + mx.array(bias, device=q.device), axis=-1)
    return ops.reshape(mx.nd.batch_dot(weights, flat[2]), (b, h, tq, v.shape[3]))


def test_float32_matches_the_composed_reference(path):
    rng = np.random.default_rng(0)
    b, h, tq, tk, d = 2, 3, 19, 75, 24
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((b, h, tq, d), (b, h, tk, d), (b, h, tk, d))]
    keep = rng.random((b, 1, tq, tk)) > 0.25
    keep[..., 0] = True  # every row keeps a key: the additive mask cannot express an empty row
    head = rng.standard_normal((b, h, tq, d)).astype(np.float32)
    got = _run(arrays, {"mask": keep}, np.float32, head=head)
    q, k, v = (mx.array(a) for a in arrays)
    for t in (q, k, v):
        t.attach_grad()
    with mx.autograd.record():
        ref = _composed(q, k, v, keep, 1 / np.sqrt(d))
    ref.backward(mx.array(head))
    for name, a, r in zip(("out", "dq", "dk", "dv"), got, (ref, q.grad, k.grad, v.grad)):
        np.testing.assert_allclose(a, r.asnumpy(), rtol=1e-5, atol=2e-6, err_msg=name)


GRAD_CASES = {
    "mask": {"mask": np.array([[1, 1, 0, 1, 0], [0, 1, 1, 1, 1], [1, 0, 0, 0, 1]], bool)},
    "causal+lengths": {"causal": True, "valid_length": np.array([2, 5])},
    "mask4d+scale": {"mask": np.random.default_rng(3).random((2, 1, 3, 5)) > 0.4, "scale": 0.7},
}


@pytest.mark.parametrize("case", list(GRAD_CASES))
def test_gradients_match_finite_differences_in_float64(case):
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s) for s in ((2, 2, 3, 3), (2, 2, 5, 3), (2, 2, 5, 2))]
    kwargs = GRAD_CASES[case]
    check_grad(lambda q, k, v: sdpa(q, k, v, **kwargs), arrays, rtol=1e-6, atol=1e-8)


def test_gradients_with_dropout_match_finite_differences_in_float64():
    """With the stream reseeded before each call, every call draws the same weights to drop."""
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(s) for s in ((1, 2, 4, 3), (1, 2, 6, 3), (1, 2, 6, 3))]

    def attend(q, k, v):
        mx.random.seed(11)
        return sdpa(q, k, v, dropout=0.4, causal=True)

    check_grad(attend, arrays, rtol=1e-6, atol=1e-8)


# -- masks, dropout, paths ------------------------------------------------------------------------------------
def _inputs(dtype=np.float32, b=2, h=2, tq=21, tk=90, d=16, seed=4):
    rng = np.random.default_rng(seed)
    return [mx.array(rng.standard_normal(s).astype(dtype)) for s in ((b, h, tq, d), (b, h, tk, d), (b, h, tk, d))]


def test_valid_length_is_the_mask_it_stands_for(path):
    q, k, v = _inputs()
    lengths = np.array([30, 90])
    mask = np.arange(90)[None, None, None, :] < lengths[:, None, None, None]
    a = sdpa(q, k, v, valid_length=lengths).asnumpy()
    b = sdpa(q, k, v, mask=mask).asnumpy()
    np.testing.assert_array_equal(a, b)


def test_rows_that_keep_no_key_are_zero_and_pass_no_gradient(path):
    q, k, v = _inputs(tq=4, tk=6)
    mask = np.ones((4, 6), bool)
    mask[2] = False
    for t in (q, k, v):
        t.attach_grad()
    with mx.autograd.record():
        out = sdpa(q, k, v, mask=mask)
    out.backward()
    assert (out.asnumpy()[:, :, 2] == 0).all() and np.isfinite(out.asnumpy()).all()
    assert (q.grad.asnumpy()[:, :, 2] == 0).all()


def test_the_kernels_and_the_blockwise_path_agree_dropout_included(monkeypatch):
    if not ak.compiled(mx.cpu(0)):
        pytest.skip("the host build of kernels/attention.cu is not available")
    q, k, v = _inputs()
    results = []
    for compiled in (True, False):
        monkeypatch.setattr(ak, "compiled", lambda device, c=compiled: c)
        mx.random.seed(5)
        results.append(_run([t.asnumpy() for t in (q, k, v)], {"dropout": 0.3, "causal": True}, np.float32))
    for name, a, b in zip(("out", "dq", "dk", "dv"), *results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)


def test_dropout_follows_the_seed_and_the_training_flag(path):
    q, k, v = _inputs(tq=8, tk=40)
    plain = sdpa(q, k, v).asnumpy()
    mx.random.seed(3)
    first = sdpa(q, k, v, dropout=0.5, training=True).asnumpy()
    second = sdpa(q, k, v, dropout=0.5, training=True).asnumpy()
    mx.random.seed(3)
    again = sdpa(q, k, v, dropout=0.5, training=True).asnumpy()
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, second) and not np.allclose(first, plain)
    np.testing.assert_array_equal(sdpa(q, k, v, dropout=0.5).asnumpy(), plain)  # not recording: no dropout
    with mx.autograd.record():
        recorded = sdpa(q, k, v, dropout=0.5).asnumpy()
    assert not np.allclose(recorded, plain)
    assert (sdpa(q, k, v, dropout=1.0, training=True).asnumpy() == 0).all()


def test_dropout_keeps_the_expected_output():
    """Inverted dropout: averaged over many draws, the output is the output without dropout."""
    q, k, v = _inputs(b=1, h=1, tq=2, tk=8, d=4)
    mx.random.seed(0)
    mean = np.mean([sdpa(q, k, v, dropout=0.25, training=True).asnumpy() for _ in range(400)], axis=0)
    np.testing.assert_allclose(mean, sdpa(q, k, v).asnumpy(), atol=0.08)


def test_half_precision_is_close_to_float32():
    q, k, v = _inputs()
    want = sdpa(q, k, v, causal=True).asnumpy()
    got = sdpa(*(t.astype(np.float16) for t in (q, k, v)), causal=True)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.asnumpy().astype(np.float32), want, atol=3e-3)


def test_npx_face_takes_arrays_of_any_kind():
    q, k, v = (t.asnumpy() for t in _inputs(tq=3, tk=5, d=4))
    out = mx.npx.scaled_dot_product_attention(q, k, v, mask=[[1, 0, 1, 1, 1]] * 3)
    assert out.shape == (2, 2, 3, 4)
    np.testing.assert_allclose(out.asnumpy(), sdpa(*(mx.array(a) for a in (q, k, v)),
                                                   mask=np.array([[1, 0, 1, 1, 1]] * 3)).asnumpy())


def test_bad_inputs_raise_errors_naming_what_is_wrong():
    q, k, v = _inputs(tq=3, tk=5, d=4)
    with pytest.raises(ValueError, match=r"key must be \(batch, heads, Tk, Dk\) = \(2, 2, Tk, 4\)"):
        sdpa(q, v[:, :, :, :3], v)
    with pytest.raises(ValueError, match="value must be"):
        sdpa(q, k, v[:, :, :4])
    with pytest.raises(ValueError, match="query must be 4-D"):
        sdpa(q[0], k, v)
    with pytest.raises(TypeError, match="one dtype"):
        sdpa(q, k, v.astype(np.float64))
    with pytest.raises(ValueError, match=r"mask\[:, None\]"):
        sdpa(q, k, v, mask=np.ones((2, 3, 5)))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 3, 3, 5\) does not broadcast"):
        sdpa(q, k, v, mask=np.ones((2, 3, 3, 5)))
    with pytest.raises(ValueError, match=r"valid_length must have shape \(batch,\) = \(2,\), got \(3,\)"):
        sdpa(q, k, v, valid_length=[1, 2, 3])
    with pytest.raises(ValueError, match="dropout must lie in"):
        sdpa(q, k, v, dropout=1.5)
    with pytest.raises(ValueError, match=r"not an additive one \(0 / -inf\)"):
        sdpa(q, k, v, mask=np.where(np.tril(np.ones((3, 5))) > 0, 0.0, -np.inf))
    with pytest.raises(ValueError, match="scale must be a finite number"):
        sdpa(q, k, v, scale=float("nan"))
    with pytest.raises(TypeError, match="floating-point"):
        sdpa(q.astype(np.int32), k, v)
    with pytest.raises(ValueError, match=r"scaled_dot_product_attention: mask lives on cpu\(1\).*different devices"):
        sdpa(q, k, v, mask=mx.array(np.ones((3, 5)), device=mx.cpu(1)))


def test_second_derivatives_raise_naming_the_op():
    q, k, v = (mx.array(t.asnumpy().astype(np.float64)) for t in _inputs(tq=3, tk=4, d=2))
    q.attach_grad()
    with mx.autograd.record():
        y = sdpa(q, k, v).sum()
    with pytest.raises(NotImplementedError, match="'scaled_dot_product_attention'"):
        mx.autograd.grad(y, [q], create_graph=True)


# -- GPUs (emulated where there is none) ----------------------------------------------------------------------
gpu = pytest.mark.gpu


@gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["kernels-f32", "blockwise-f64"])
def test_gpu_gives_the_cpu_devices_results(dtype):
    if dtype == np.float32 and not ak.compiled(mx.cpu(0)):
        pytest.skip("the host build of kernels/attention.cu is not available")
    arrays = [t.asnumpy().astype(dtype) for t in _inputs(tq=20, tk=70, d=12)]
    kwargs = {"mask": np.random.default_rng(6).random((2, 1, 20, 70)) > 0.2, "valid_length": np.array([60, 70]),
              "causal": True}
    cpu = _run(arrays, kwargs, dtype)
    gpu_ = _run(arrays, kwargs, dtype, device=mx.gpu(0))
    for name, a, b in zip(("out", "dq", "dk", "dv"), cpu, gpu_):
        if dtype == np.float32:  # the same kernels' operations in the same order: the same bits
            np.testing.assert_array_equal(a, b, err_msg=name)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=name)


@gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["kernels-f32", "blockwise-f64"])
def test_gpu_dropout_follows_the_seed(dtype):
    q, k, v = (mx.array(t.asnumpy().astype(dtype), device=mx.gpu(0)) for t in _inputs(tq=6, tk=20, d=8))
    mx.random.seed(8)
    first = sdpa(q, k, v, dropout=0.5, training=True).asnumpy()
    mx.random.seed(8)
    again = sdpa(q, k, v, dropout=0.5, training=True).asnumpy()
    other = sdpa(q, k, v, dropout=0.5, training=True).asnumpy()
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


@pytest.fixture
def emulation():
    """The emulation's counters (they exist only on emulated GPUs)."""
    if mx.num_gpus() == 0 or mx.device.devices._emulated_gpus() < 1:
        pytest.skip("memory counts come from the GPU emulation (MXLITE_EMULATE_GPUS >= 1)")
    from mxlite._emulation import install  # noqa: PLC0415

    return install


def _peak_bytes(emulation, attend, t, d=16):
    """Peak bytes allocated on gpu(0) by a forward and backward of ``attend`` over (1, 2, t, d) inputs."""
    q, k, v = (mx.array(a.asnumpy(), device=mx.gpu(0)) for a in _inputs(b=1, h=2, tq=t, tk=t, d=d, seed=t))
    for x in (q, k, v):
        x.attach_grad()
    gc.collect()
    emulation.reset_counters()
    base = emulation.counters()[0]["bytes_in_use"]
    with mx.autograd.record():
        out = attend(q, k, v)
    out.backward()
    peak = emulation.counters()[0]["peak_bytes"] - base
    del out
    return peak


@gpu
def test_gpu_memory_grows_with_t_not_t_squared(emulation):
    """The kernels hold no (B, H, T, T) matrix: the peak of a forward and backward at 4x the length is about
    4x, and below one (B, H, T, T) float32 matrix; the composed form's grows about 16x."""
    def fused_attention(q, k, v):
        return sdpa(q, k, v, causal=True)

    def composed_attention(q, k, v):
        return _composed(q, k, v, np.tril(np.ones((q.shape[2], k.shape[2]), bool)), 0.25)

    for attend in (fused_attention, composed_attention):  # first calls set up what stays (a GEMM's handle, ...)
        _peak_bytes(emulation, attend, 16)
    fused = {t: _peak_bytes(emulation, fused_attention, t) for t in (64, 256)}
    composed = {t: _peak_bytes(emulation, composed_attention, t) for t in (64, 256)}
    scores_bytes = 2 * 256 * 256 * 4
    assert fused[256] < 5 * fused[64] and fused[256] < scores_bytes, fused
    assert composed[256] > 12 * composed[64] and composed[256] > 2 * scores_bytes, composed
