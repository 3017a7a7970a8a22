"""MXNet 1.x's samplers (``nd.random.*``, ``nd.sample_*``, ``nd.random.multinomial`` with ``get_prob``) and
MXNet 2.x's ``np.random.choice``/``multinomial``/``gamma``/``exponential``, checked as MXNet's own tests check
them (``tests/python/unittest/test_random.py`` of MXNet 1.9.1: ``test_sample_multinomial``,
``check_with_device``'s mean and standard-deviation checks with tolerance 0.1, ``test_sample_multinomial_num_outputs``;
``test_numpy_op.py::test_np_choice`` of MXNet 2.x), on smaller sample counts. Every draw comes from mxlite's
random stream, so ``mx.random.seed`` makes it reproducible.
"""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd

TOL = 0.1  # MXNet's check_with_device tolerance on the mean and the standard deviation
SHAPE = (200, 200)

# name, nd.random sampler, scalar parameters, per-entry parameters (2 x 2), checks (mean, std) of the draws
DISTRIBUTIONS = [
    ("normal", mx.nd.random.normal, {"loc": 10.0, "scale": 0.5},
     {"loc": [[0.0, 2.5], [-9.75, -7.0]], "scale": [[1.0, 3.7], [4.2, 1.5]]},
     lambda p: (p["loc"], p["scale"])),
    ("uniform", mx.nd.random.uniform, {"low": -1.5, "high": 3.0},
     {"low": [[0.0, 2.5], [-9.75, -1.0]], "high": [[1.0, 3.7], [4.2, 10.5]]},
     lambda p: ((p["low"] + p["high"]) / 2, np.sqrt(1 / 12) * (p["high"] - p["low"]))),
    ("gamma", mx.nd.random.gamma, {"alpha": 9.0, "beta": 0.5},
     {"alpha": [[0.1, 2.5], [9.75, 11.0]], "beta": [[1.0, 0.7], [0.5, 0.3]]},
     lambda p: (p["alpha"] * p["beta"], np.sqrt(p["alpha"] * p["beta"] ** 2))),
    ("exponential", mx.nd.random.exponential, {"scale": 1 / 4},
     {"scale": [[1 / 1.0, 1 / 8.5], [1 / 2.7, 1 / 0.5]]},
     lambda p: (p["scale"], p["scale"])),
    ("poisson", mx.nd.random.poisson, {"lam": 4.0}, {"lam": [[25.0, 8.5], [2.7, 0.5]]},
     lambda p: (p["lam"], np.sqrt(p["lam"]))),
    ("negative_binomial", mx.nd.random.negative_binomial, {"k": 3, "p": 0.4},
     {"k": [[3, 4], [5, 6]], "p": [[0.4, 0.77], [0.5, 0.84]]},
     lambda p: (p["k"] * (1 - p["p"]) / p["p"], np.sqrt(p["k"] * (1 - p["p"])) / p["p"])),
    ("generalized_negative_binomial", mx.nd.random.generalized_negative_binomial, {"mu": 2.0, "alpha": 0.3},
     {"mu": [[2.0, 2.5], [1.3, 1.9]], "alpha": [[1.0, 0.1], [0.2, 0.5]]},
     lambda p: (p["mu"], np.sqrt(p["mu"] + p["alpha"] * p["mu"] ** 2))),
]
IDS = [d[0] for d in DISTRIBUTIONS]


def _check_moments(draws, params, moments, name):
    mean, std = moments(params)
    assert abs(np.mean(draws.astype(np.float64)) - mean) < TOL, (name, "mean", np.mean(draws), mean)
    assert abs(np.std(draws.astype(np.float64)) - std) < TOL, (name, "std", np.std(draws), std)


# -- the 1.x samplers ---------------------------------------------------------------------------
@pytest.mark.parametrize("name,sampler,scalars,arrays,moments", DISTRIBUTIONS, ids=IDS)
def test_nd_random_with_numbers(name, sampler, scalars, arrays, moments):
    mx.random.seed(128)
    first = sampler(shape=SHAPE, **scalars)
    mx.random.seed(128)
    second = sampler(shape=SHAPE, **scalars)
    assert first.shape == SHAPE and first.dtype == np.float32 and isinstance(first, mx.nd.NDArray)
    np.testing.assert_array_equal(first.asnumpy(), second.asnumpy())  # the same seed, the same draws
    _check_moments(first.asnumpy(), scalars, moments, name)


@pytest.mark.parametrize("name,sampler,scalars,arrays,moments", DISTRIBUTIONS, ids=IDS)
def test_nd_random_with_arrays_draws_per_entry(name, sampler, scalars, arrays, moments):
    params = {k: mx.nd.array(v) for k, v in arrays.items()}
    mx.random.seed(128)
    draws = sampler(shape=SHAPE, **params).asnumpy()
    mx.random.seed(128)
    np.testing.assert_array_equal(draws, sampler(shape=SHAPE, **params).asnumpy())
    assert draws.shape == (2, 2) + SHAPE
    for i in range(2):
        for j in range(2):
            _check_moments(draws[i, j], {k: np.asarray(v)[i, j] for k, v in arrays.items()}, moments, name)


@pytest.mark.parametrize("name,sampler,scalars,arrays,moments", DISTRIBUTIONS, ids=IDS)
def test_sample_operators_draw_per_entry(name, sampler, scalars, arrays, moments):
    op = getattr(mx.nd, "sample_" + name)
    values = dict(arrays)
    if name == "exponential":  # sample_exponential takes the rate
        values = {"lam": 1 / np.asarray(arrays["scale"])}
    if name == "normal":  # sample_normal's parameters are mu and sigma
        values = {"mu": arrays["loc"], "sigma": arrays["scale"]}
    mx.random.seed(3)
    draws = op(*[mx.nd.array(v) for v in values.values()], shape=SHAPE, dtype="float64")
    assert draws.dtype == np.float64 and draws.shape == (2, 2) + SHAPE
    for i in range(2):
        for j in range(2):
            _check_moments(draws.asnumpy()[i, j], {k: np.asarray(v)[i, j] for k, v in arrays.items()}, moments, name)


def test_like_samplers_randn_and_flat_names():
    like = mx.nd.ones(SHAPE, dtype="float64")
    mx.random.seed(5)
    checks = [(mx.nd.random.normal_like(like, loc=10.0, scale=0.5), 10.0, 0.5),
              (mx.nd.random.uniform_like(like, low=-1.5, high=3.0), 0.75, np.sqrt(1 / 12) * 4.5),
              (mx.nd.random.gamma_like(like, alpha=9.0, beta=0.5), 4.5, 1.5),
              (mx.nd.random.exponential_like(like, lam=4.0), 0.25, 0.25),
              (mx.nd.random.poisson_like(like, lam=4.0), 4.0, 2.0),
              (mx.nd.random.negative_binomial_like(like, k=3, p=0.4), 4.5, np.sqrt(1.8) / 0.4),
              (mx.nd.random.generalized_negative_binomial_like(like, mu=2.0, alpha=0.3), 2.0, np.sqrt(3.2)),
              (mx.nd.random.randn(*SHAPE, loc=10.0, scale=0.5), 10.0, 0.5),
              (mx.nd.random_exponential(lam=4.0, shape=SHAPE), 0.25, 0.25),
              (mx.nd.random_gamma(alpha=9.0, beta=0.5, shape=SHAPE), 4.5, 1.5)]
    for draws, mean, std in checks:
        assert draws.shape == SHAPE
        assert abs(draws.asnumpy().mean() - mean) < TOL and abs(draws.asnumpy().std() - std) < TOL
    assert checks[0][0].dtype == np.float64  # the _like samplers take the array's dtype
    randn = mx.nd.random.randn(2, loc=mx.nd.array([0.0, 100.0]), scale=mx.nd.array([1.0, 1.0]))
    assert randn.shape == (2, 2) and randn.asnumpy()[1].min() > 90  # one row per loc entry


def test_a_sampler_without_shape_draws_one_value_of_shape_1():
    for sampler in (mx.nd.random.uniform, mx.nd.random.normal, mx.nd.random.gamma, mx.nd.random.poisson):
        assert sampler().shape == (1,)  # MXNet 1.x: shape=1 when no shape is given


def test_bad_parameters_are_refused_naming_them():
    with pytest.raises(ValueError, match=r"gamma: needs alpha > 0, got alpha=-1.0, beta=1.0 at index \(1,\)"):
        mx.nd.sample_gamma(mx.nd.array([1.0, -1.0]), mx.nd.array([1.0, 1.0]))
    with pytest.raises(ValueError, match="uniform: needs low <= high, got low=2.0, high=1.0"):
        mx.nd.random.uniform(mx.nd.array([2.0]), mx.nd.array([1.0]))
    with pytest.raises(ValueError, match="poisson: needs lam >= 0"):
        mx.nd.random.poisson(-1.0)
    with pytest.raises(TypeError, match="gamma: the parameters must all be arrays or all numbers, got alpha=NDTensor"):
        mx.nd.random.gamma(mx.nd.array([1.0]), 2.0)
    with pytest.raises(ValueError, match=r"normal: the parameter arrays must have one shape.*loc: shape \(2,\)"):
        mx.nd.sample_normal(mx.nd.array([0.0, 1.0]), mx.nd.array([1.0]))
    with pytest.raises(TypeError, match="samples are float16, float32 or float64, got dtype int32"):
        mx.nd.random.poisson(1.0, shape=2, dtype="int32")


# -- multinomial --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["uint8", "int32", "float16", "float32", "float64"])
def test_sample_multinomial_as_mxnet_tests_it(dtype):
    samples = 10000
    for x in [mx.nd.array([[0, 1, 2, 3, 4], [4, 3, 2, 1, 0]]) / 10.0, mx.nd.array([0, 1, 2, 3, 4]) / 10.0]:
        dx = mx.nd.ones_like(x)
        autograd.mark_variables([x], [dx])
        with autograd.record():
            y, prob = mx.nd.random.multinomial(x, shape=samples, get_prob=True, dtype=dtype)
            r = prob * 5
            r.backward()
        assert np.dtype(dtype) == y.dtype
        y, x, dx, prob = y.asnumpy(), x.asnumpy(), dx.asnumpy(), prob.asnumpy()
        if x.ndim == 1:
            x, dx, y, prob = x.reshape(1, -1), dx.reshape(1, -1), y.reshape(1, -1), prob.reshape(1, -1)
        for i in range(x.shape[0]):
            freq = np.bincount(y[i].astype("int32"), minlength=5) / np.float32(samples) * x[i].sum()
            np.testing.assert_allclose(freq, x[i], rtol=0.20, atol=1e-1)
            rprob = x[i][y[i].astype("int32")] / x[i].sum()
            np.testing.assert_allclose(np.log(rprob), prob[i], atol=1e-5)
            real_dx = np.zeros(5)
            np.add.at(real_dx, y[i].astype("int32"), 5.0 / rprob)
            np.testing.assert_allclose(real_dx, dx[i], rtol=1e-4, atol=1e-5)


def test_multinomial_refuses_more_categories_than_the_dtype_indexes():
    for dtype, k in (("uint8", 257), ("float16", 2 ** 11 + 2)):
        with pytest.raises(ValueError, match=f"{k} categories cannot be indexed exactly in dtype {dtype}"):
            mx.nd.random.multinomial(mx.nd.zeros(k), dtype=dtype)


def test_sample_multinomial_num_outputs():
    probs = [[0.125, 0.25, 0.625], [0.0625, 0.125, 0.8125]]
    out = mx.nd.random.multinomial(data=mx.nd.array(probs), shape=100, get_prob=False)
    assert isinstance(out, mx.nd.NDArray) and out.shape == (2, 100) and out.dtype == np.int32
    out = mx.nd.random.multinomial(data=mx.nd.array(probs), shape=100, get_prob=True)
    assert isinstance(out, list) and len(out) == 2 and out[1].shape == (2, 100)
    one = mx.nd.sample_multinomial(mx.nd.array([0.0, 1.0]))
    assert one.shape == (1,) and one.asscalar() == 1


def test_multinomial_shapes_follow_mxnet():
    probs = mx.nd.array(np.full((3, 4, 5), 0.2))
    assert mx.nd.random.multinomial(probs).shape == (3, 4)
    assert mx.nd.random.multinomial(probs, shape=(2, 6)).shape == (3, 4, 2, 6)
    assert mx.nd.random.multinomial(mx.nd.array([0.5, 0.5]), shape=(2, 3)).shape == (2, 3)


def test_multinomial_refuses_a_row_that_is_not_a_distribution():
    with pytest.raises(ValueError, match="distribution 1 sums to 0.5"):
        mx.nd.random.multinomial(mx.nd.array([[0.5, 0.5], [0.25, 0.25]]))
    with pytest.raises(ValueError, match="probabilities must be finite and >= 0; distribution 0"):
        mx.nd.random.multinomial(mx.nd.array([-0.5, 1.5]))


def test_reinforce_gradient_of_log_prob():
    logits = mx.nd.array([[0.2, -0.3, 1.0]])
    logits.attach_grad()
    mx.random.seed(11)
    with autograd.record():
        probs = mx.nd.softmax(logits)
        action, logp = mx.nd.sample_multinomial(probs, get_prob=True)
        loss = -logp * 2.0  # reward 2
    loss.backward()
    p = probs.asnumpy()[0]
    onehot = np.eye(3)[int(action.asscalar())]
    np.testing.assert_allclose(logits.grad.asnumpy()[0], -2.0 * (onehot - p), rtol=1e-5, atol=1e-6)


def test_multinomial_is_reproducible_with_the_seed():
    probs = mx.nd.array([[0.1, 0.2, 0.7], [0.3, 0.3, 0.4]])
    mx.random.seed(42)
    first = mx.nd.random.multinomial(probs, shape=50).asnumpy()
    mx.random.seed(42)
    np.testing.assert_array_equal(first, mx.nd.random.multinomial(probs, shape=50).asnumpy())


# -- mx.np.random (MXNet 2.x) -------------------------------------------------------------------
@pytest.mark.parametrize("wtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("replace", [True, False])
def test_np_choice_indexing_mode(wtype, replace):
    num_classes = 10
    weight = mx.np.array(np.random.default_rng(0).dirichlet([1.0] * num_classes)).astype(wtype)
    for samples in (mx.np.random.choice(mx.np.arange(num_classes), num_classes // 2, replace),
                    mx.np.random.choice(mx.np.arange(num_classes), num_classes // 2, replace, weight)):
        assert len(samples) == num_classes // 2
        if not replace:
            assert len(np.unique(samples.asnumpy())) == num_classes // 2


def test_np_choice_distribution_and_shape():
    mx.random.seed(7)
    weight = np.array([0.1, 0.0, 0.3, 0.6, 0.0])
    for p, expected in ((None, np.full(5, 0.2)), (mx.np.array(weight), weight)):
        samples = mx.np.random.choice(5, (200, 100), p=p).asnumpy()
        assert samples.shape == (200, 100) and samples.dtype == np.int64
        density = np.histogram(samples, np.arange(6), density=True)[0]
        np.testing.assert_allclose(density, expected, rtol=1e-1, atol=1e-1)
    assert mx.np.random.choice(5).shape == ()
    without = mx.np.random.choice(5, 3, replace=False, p=weight).asnumpy()
    assert len(set(without.tolist())) == 3 and set(without.tolist()) <= {0, 2, 3}
    with pytest.raises(ValueError, match="choice: each distribution must sum to 1"):
        mx.np.random.choice(3, 2, p=[0.5, 0.2, 0.2])
    with pytest.raises(ValueError, match=r"choice: p must be 1-D with one probability per entry \(3\)"):
        mx.np.random.choice(3, 2, p=[0.5, 0.5])


def test_np_multinomial_gamma_exponential():
    mx.random.seed(9)
    counts = mx.np.random.multinomial(1000, [1 / 6.0] * 6, size=2)
    assert counts.shape == (2, 6) and counts.dtype == np.int64
    np.testing.assert_array_equal(counts.asnumpy().sum(axis=1), [1000, 1000])
    g = mx.np.random.gamma(9.0, 0.5, size=SHAPE).asnumpy()
    assert abs(g.mean() - 4.5) < TOL and abs(g.std() - 1.5) < TOL
    e = mx.np.random.exponential(mx.np.array([[0.5], [2.0]]), size=(2, 20000)).asnumpy()
    np.testing.assert_allclose(e.mean(axis=1), [0.5, 2.0], atol=TOL)


# -- on a GPU ---------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.requires_gpus(1)
def test_samplers_on_a_gpu():
    gpu = mx.gpu(0)
    probs = mx.nd.array([[0.25, 0.75], [0.5, 0.5]], ctx=gpu)
    probs.attach_grad()
    mx.random.seed(1)
    with autograd.record():
        y, logp = mx.nd.random.multinomial(probs, shape=4000, get_prob=True)
    logp.backward()
    assert y.context == gpu and logp.context == gpu and probs.grad.context == gpu
    freq = (y.asnumpy()[0] == 1).mean()
    assert abs(freq - 0.75) < 0.05
    picked = np.where(y.asnumpy() == 1, probs.asnumpy()[:, 1:], probs.asnumpy()[:, :1])
    np.testing.assert_allclose(logp.asnumpy(), np.log(picked), rtol=1e-6)
    counts = np.stack([(y.asnumpy() == c).sum(axis=1) for c in range(2)], axis=1)
    np.testing.assert_allclose(probs.grad.asnumpy(), counts / probs.asnumpy(), rtol=1e-4)  # float32 sums
    g = mx.nd.sample_gamma(mx.nd.array([9.0], ctx=gpu), mx.nd.array([0.5], ctx=gpu), shape=20000)
    assert g.context == gpu and abs(g.asnumpy().mean() - 4.5) < TOL
    mx.random.seed(1)
    again = mx.nd.random.multinomial(probs, shape=4000)
    np.testing.assert_array_equal(again.asnumpy(), y.asnumpy())
    assert mx.np.random.choice(4, 3, device=gpu).context == gpu
