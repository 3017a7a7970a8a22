"""``npx.masked_softmax`` / ``npx.masked_log_softmax`` (mxlite.ops.attention): MXNet 2.x's documented numbers,
its rules for masked entries and fully masked rows, float64 finite differences, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite.ops.attention import masked_log_softmax, masked_softmax
from tests.gradcheck import check_grad


def _reference(x, keep, axis, temperature=1.0, log=False):
    """float64 softmax over the kept entries; masked entries 0 (log: -inf), a row keeping none all 0 (-inf)."""
    x, keep = np.asarray(x, np.float64), np.broadcast_to(np.asarray(keep) != 0, np.shape(x))
    z = np.where(keep, x / temperature, -np.inf)
    top = z.max(axis=axis, keepdims=True)
    e = np.where(keep, np.exp(z - np.where(np.isfinite(top), top, 0)), 0.0)
    total = e.sum(axis=axis, keepdims=True)
    if log:
        with np.errstate(divide="ignore", invalid="ignore"):  # rows keeping nothing: -inf everywhere
            return np.where(keep, z - np.where(np.isfinite(top), top, 0) - np.log(total), -np.inf)
    return e / np.where(total == 0, 1, total)


def test_mxnet_documented_examples():
    data = np.arange(5, dtype=np.float32)
    mask = np.array([1, 0, 1, 0, 1])
    np.testing.assert_allclose(mx.npx.masked_softmax(data, mask).asnumpy(),
                               [0.01587624, 0.0, 0.11731042, 0.0, 0.8668133], rtol=1e-6)
    out = mx.npx.masked_softmax(np.arange(10, dtype=np.float32).reshape(2, 5), mask, axis=0).asnumpy()
    np.testing.assert_allclose(out, [[0.00669285, 0, 0.00669285, 0, 0.00669285],
                                     [0.9933072, 0, 0.9933072, 0, 0.9933072]], rtol=1e-6)
    # MXNet's documented log-probabilities are 3e-6 from the exact ones (-4.1429316, ...), which mxlite gives
    np.testing.assert_allclose(mx.npx.masked_log_softmax(data, mask).asnumpy(),
                               [-4.1429286, -np.inf, -2.1429286, -np.inf, -0.14292854], atol=4e-6)
    np.testing.assert_allclose(mx.npx.masked_log_softmax(data, mask).asnumpy(), _reference(data, mask, -1, log=True),
                               rtol=1e-6)
    out = mx.npx.masked_log_softmax(np.arange(10, dtype=np.float32).reshape(2, 5), mask, axis=0).asnumpy()
    np.testing.assert_allclose(out, [[-5.0067153, -np.inf, -5.0067153, -np.inf, -5.0067153],
                                     [-0.00671535, -np.inf, -0.00671535, -np.inf, -0.00671535]], rtol=1e-6)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_a_row_with_every_entry_masked_is_zero_and_passes_no_gradient(log):
    x = mx.array(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32))
    x.attach_grad()
    mask = np.array([[1, 0, 1], [0, 0, 0]])
    fn = masked_log_softmax if log else masked_softmax
    with mx.autograd.record():
        out = fn(x, mask)
    out.backward()
    fill = -np.inf if log else 0.0
    assert (out.asnumpy()[1] == fill).all() and out.asnumpy()[0, 1] == fill
    np.testing.assert_array_equal(x.grad.asnumpy()[1], 0.0)
    assert x.grad.asnumpy()[0, 1] == 0 and np.isfinite(x.grad.asnumpy()).all()


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("axis, temperature", [(-1, 1.0), (0, 2.5), (1, 0.5)])
def test_values_match_a_float64_reference(axis, temperature, log):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6, 5)) * 3
    keep = rng.random((1, 6, 5)) > 0.4  # broadcast over the first axis
    fn = masked_log_softmax if log else masked_softmax
    got = fn(mx.array(x.astype(np.float32)), keep, axis=axis, temperature=temperature).asnumpy()
    np.testing.assert_allclose(got, _reference(x, keep, axis, temperature, log), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("temperature, normalize", [(1.0, True), (1.7, True), (0.6, False)])
def test_gradients_match_finite_differences_in_float64(temperature, normalize, log):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 5))
    mask = np.array([[1, 1, 0, 1, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    fn = masked_log_softmax if log else masked_softmax

    def f(data, m):
        out = fn(data, m, axis=-1, temperature=temperature, normalize=normalize)
        return mx.nd.where(mx.array(mask != 0), out, 0.0) if log else out  # -inf has no finite difference

    check_grad(f, [x, mask], rtol=1e-6, atol=1e-8)


def test_normalize_false_gives_the_same_probabilities_where_nothing_overflows():
    rng = np.random.default_rng(2)
    x, keep = mx.array(rng.standard_normal((3, 7))), rng.random((3, 7)) > 0.3
    np.testing.assert_allclose(masked_softmax(x, keep, normalize=False).asnumpy(),
                               masked_softmax(x, keep).asnumpy(), rtol=1e-12)


def test_masks_of_any_kind_and_half_precision():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    keep = rng.random((3, 4)) > 0.3
    want = _reference(x, keep, -1)
    for mask in (keep, keep.astype(np.float32), keep.tolist(), mx.array(keep.astype(np.int32))):
        np.testing.assert_allclose(masked_softmax(mx.array(x), mask).asnumpy(), want, rtol=1e-6, atol=1e-7)
    half = masked_softmax(mx.array(x.astype(np.float16)), keep)
    assert half.dtype == np.float16
    np.testing.assert_allclose(half.asnumpy(), want, atol=2e-3)


def test_bad_arguments_raise_errors_naming_them():
    x = mx.array(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"masked_softmax: the mask of shape \(3, 3\) does not broadcast to "
                                         r"data's shape \(2, 3\)"):
        masked_softmax(x, np.ones((3, 3)))
    with pytest.raises(ValueError, match="temperature must be a nonzero finite number"):
        masked_log_softmax(x, np.ones(3), temperature=0)
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        masked_softmax(x, np.ones(3), axis=2)
    with pytest.raises(TypeError, match="floating-point"):
        masked_softmax(mx.array(np.zeros((2, 3), np.int32)), np.ones(3))
    with pytest.raises(ValueError, match=r"masked_softmax: inputs live on different devices"):
        masked_softmax(x, mx.array(np.ones(3), device=mx.cpu(1)))


@pytest.mark.gpu
def test_gpu_gives_the_cpu_devices_results():
    rng = np.random.default_rng(4)
    x, keep = rng.standard_normal((4, 9)), rng.random((4, 9)) > 0.5
    keep[2] = False
    for fn in (masked_softmax, masked_log_softmax):
        outs = []
        for device in (mx.cpu(0), mx.gpu(0)):
            t = mx.array(x, device=device)
            t.attach_grad()
            with mx.autograd.record():
                out = fn(t, mx.array(keep, device=device), temperature=1.5)
            out.backward(mx.array(np.where(keep, 1.0, 0.0), device=device))
            outs.append((out.asnumpy(), t.grad.asnumpy()))
        np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=1e-12)
        np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-12, atol=1e-15)
