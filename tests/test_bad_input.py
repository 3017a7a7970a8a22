"""Bad input across the public API: every error has the right type and names its culprit.

Each case checks the exception type and that the message names what is wrong (the parameter,
key, argument, shape, dtype, device or file), and where state could be damaged, that it was
not (a failed load leaves the model as it was). Properties (hypothesis) cover ``split_data``,
``reshape`` and ``FactorScheduler`` for arbitrary sizes. Cases whose fix belongs to a module
owned elsewhere are ``xfail(strict=True)`` with the needed fix as the reason.
"""

from __future__ import annotations

import math
import pathlib
import pickle
import re
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mxlite as mx
from mxlite import ops
from mxlite.device import devices as mx_device
from mxlite.gluon.parameter import DeferredInitializationError
from mxlite.ops import nn_ops
from mxlite.optimizer import lr_scheduler as lrs

DEVICES = [mx.cpu(0), mx.cpu(1)]


def _mlp(devices=DEVICES, seed: int = 0) -> mx.nn.Sequential:
    """A 4 -> 3 -> 2 MLP with known shapes, initialised on ``devices``."""
    mx.random.seed(seed)
    net = mx.nn.Sequential(mx.nn.Dense(3, in_units=4), mx.nn.Dense(2, in_units=3))
    net.initialize(device=devices)
    return net


def _snapshot(net: mx.nn.Block) -> dict[tuple[str, int], np.ndarray]:
    """Every mirror of every parameter, as host copies."""
    return {(name, i): d.asnumpy() for name, p in net.collect_params().items() for i, d in enumerate(p.list_data())}


def _assert_unchanged(net: mx.nn.Block, before: dict[tuple[str, int], np.ndarray]) -> None:
    after = _snapshot(net)
    assert after.keys() == before.keys()
    for key, value in before.items():
        np.testing.assert_array_equal(after[key], value, err_msg=f"{key} changed")


def _backward(net: mx.nn.Block, devices=DEVICES, batch: int = 4) -> None:
    x = np.linspace(-1, 1, batch * 4, dtype=np.float32).reshape(batch, 4)
    xs = mx.split_and_load(x, devices)
    with mx.autograd.record():
        losses = [net(a).sum() for a in xs]
    mx.autograd.backward(losses)


# == shapes and dtypes in ops ===================================================================
def test_matmul_inner_dimension_mismatch_names_both_shapes():
    with pytest.raises(ValueError, match=r"matmul: inner dimensions differ: a has shape \(2, 3\) \(3 columns\), "
                                         r"b has shape \(4, 5\) \(4 rows\)"):
        ops.matmul(mx.ones((2, 3)), mx.ones((4, 5)))


def test_matmul_batch_axes_that_do_not_broadcast():
    with pytest.raises(ValueError, match=r"matmul: batch axes \(2,\) of a and \(3,\) of b do not broadcast"):
        mx.ones((2, 2, 3)) @ mx.ones((3, 3, 4))


def test_matmul_of_a_scalar_names_the_operand():
    with pytest.raises(ValueError, match=r"matmul: operand b is 0-D \(a scalar, shapes \(3,\) and \(\)\)"):
        ops.dot(mx.ones(3), mx.array(2.0))


def test_add_broadcast_failure_names_op_and_inputs():
    with pytest.raises(ValueError, match=r"add: .*broadcast.*inputs: float32\[2, 3\]@cpu\(0\), "
                                         r"float32\[4, 3\]@cpu\(0\)"):
        mx.ones((2, 3)) + mx.ones((4, 3))


def test_binary_op_across_devices_names_both_devices():
    with pytest.raises(ValueError, match=r"multiply: inputs live on different devices "
                                         r"\(float32\[2\]@cpu\(0\), float32\[2\]@cpu\(1\)\)"):
        mx.ones(2, device=mx.cpu(0)) * mx.ones(2, device=mx.cpu(1))


def test_concat_shape_mismatch_lists_inputs():
    with pytest.raises(ValueError, match=r"concat: .*dimension 1.*inputs: float32\[2, 3\]@cpu\(0\), "
                                         r"float32\[2, 4\]@cpu\(0\)"):
        mx.concat([mx.ones((2, 3)), mx.ones((2, 4))], axis=0)


@pytest.mark.parametrize("fn", [mx.concat, mx.stack], ids=["concat", "stack"])
def test_concat_and_stack_of_nothing(fn):
    with pytest.raises(ValueError, match=rf"{fn.__name__} needs at least one tensor, got none"):
        fn([])


@pytest.mark.parametrize("fn", [mx.concat, mx.stack], ids=["concat", "stack"])
def test_concat_and_stack_name_the_entry_that_is_not_a_tensor(fn):
    with pytest.raises(TypeError, match=rf"{fn.__name__}: entry 1 is a ndarray, not a Tensor"):
        fn([mx.ones(2), np.ones(2)])


def test_stack_of_different_shapes_lists_inputs():
    with pytest.raises(ValueError, match=r"stack: .*same shape.*float32\[2, 3\]@cpu\(0\), float32\[3, 2\]@cpu\(0\)"):
        mx.stack([mx.ones((2, 3)), mx.ones((3, 2))])


def test_reshape_to_a_wrong_size_names_size_and_target():
    with pytest.raises(ValueError, match=r"reshape: cannot reshape array of size 6 into shape \(4, ?2\)"):
        mx.ones((2, 3)).reshape((4, 2))


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4),
       target=st.lists(st.integers(1, 6), min_size=1, max_size=4), infer=st.booleans())
def test_reshape_property(shape, target, infer):
    """Any target of the same size works (also with one -1); any other size raises naming the size."""
    size = math.prod(shape)
    x = mx.array(np.arange(size, dtype=np.float32).reshape(shape))
    rest = math.prod(target[1:])
    if infer and size % rest == 0:
        y = x.reshape([-1] + target[1:])
        assert y.shape == (size // rest, *target[1:])
        np.testing.assert_array_equal(y.asnumpy().ravel(), np.arange(size))
    elif math.prod(target) == size:
        y = x.reshape(target)
        assert y.shape == tuple(target)
        np.testing.assert_array_equal(y.asnumpy().ravel(), np.arange(size))
    else:
        with pytest.raises(ValueError, match=rf"reshape: cannot reshape array of size {size} into shape"):
            x.reshape(target)


def test_conv2d_op_names_input_rank():
    with pytest.raises(ValueError, match=r"conv2d: expected x \(N, C, H, W\).*got 3-D x and 4-D weight"):
        nn_ops.conv2d(mx.ones((2, 3, 4)), mx.ones((1, 3, 2, 2)))


def test_conv2d_layer_rejects_3d_input():
    layer = mx.nn.Conv2D(4, 3, in_channels=3)
    layer.initialize()
    with pytest.raises(ValueError, match=r"Conv2D expects NCHW input with 4 dimensions, got shape \(2, 3, 4\)"):
        layer(mx.ones((2, 3, 4)))


def test_dense_after_init_given_wrong_feature_count_names_its_weight():
    net = mx.nn.Sequential(mx.nn.Dense(3), mx.nn.Dense(2))
    net.initialize()
    net(mx.ones((2, 4)))  # deferred init: 0.weight becomes (3, 4)
    with pytest.raises(ValueError, match=r"Dense: Parameter '0\.weight' has shape \(3, 4\), so the layer expects 4 "
                                         r"input features, but x flattened to 5 features \(x shape \(2, 5\)\)"):
        net(mx.ones((2, 5)))


def test_dense_without_flatten_names_the_last_axis():
    net = mx.nn.Sequential(mx.nn.Dense(3, in_units=4, flatten=False))
    net.initialize()
    with pytest.raises(ValueError, match=r"Parameter '0\.weight' has shape \(3, 4\).*x's last axis has 6"):
        net(mx.ones((2, 5, 6)))


def test_conv2d_after_init_given_wrong_channels_names_its_weight():
    net = mx.nn.Sequential(mx.nn.Conv2D(4, 3))
    net.initialize()
    net(mx.ones((1, 3, 5, 5)))
    with pytest.raises(ValueError, match=r"Conv2D: Parameter '0\.weight' has shape \(4, 3, 3, 3\), so the layer "
                                         r"expects 3 input channels, but x has 2"):
        net(mx.ones((1, 2, 5, 5)))


def test_batchnorm_after_init_given_wrong_channels_names_gamma():
    net = mx.nn.Sequential(mx.nn.BatchNorm())
    net.initialize()
    net(mx.ones((2, 3, 4, 4)))
    with pytest.raises(ValueError, match=r"BatchNorm: Parameter '0\.gamma' has shape \(3,\), but the input has 5 "
                                         r"channels on axis 1"):
        net(mx.ones((2, 5, 4, 4)))


def test_softmax_cross_entropy_label_of_another_batch_size_names_both_shapes():
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    with pytest.raises(ValueError, match=r"must have shape \(4,\) .*got \(5,\)"):
        loss_fn(mx.ones((4, 10)), mx.ones(5))
    with pytest.raises(ValueError, match=r"must have shape \(4,\) .*got \(4, 2\)"):
        loss_fn(mx.ones((4, 10)), mx.ones((4, 2)))


def test_softmax_cross_entropy_error_says_label():
    with pytest.raises(ValueError, match=r"label"):
        mx.loss.SoftmaxCrossEntropyLoss()(mx.ones((4, 10)), mx.ones(5))


def test_integer_input_to_a_float_op_names_the_dtype():
    with pytest.raises(TypeError, match=r"avg_pool2d needs a floating-point input, got int32"):
        nn_ops.avg_pool2d(mx.zeros((1, 1, 4, 4), dtype="int32"))


def test_softmax_axis_out_of_range():
    with pytest.raises(ValueError, match=r"softmax: axis 2 is out of range for a 2-D input"):
        nn_ops.softmax(mx.ones((2, 3)), axis=2)


def test_one_hot_indices_out_of_range_name_the_range():
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 3\), got range \[0, 5\]"):
        ops.one_hot(mx.array([0, 5], dtype="int64"), 3)


def test_attach_grad_on_integers_names_the_dtype():
    with pytest.raises(TypeError, match=r"attach_grad: int64 tensors cannot have gradients"):
        mx.zeros(3, dtype="int64").attach_grad()


def test_backward_of_an_unrecorded_head():
    with pytest.raises(ValueError, match=r"backward: head 0 \(float32\[3\]@cpu\(0\)\) is not part of a recorded graph"):
        mx.ones(3).backward()


def test_backward_head_grad_of_the_wrong_shape():
    x = mx.ones(3)
    x.attach_grad()
    with mx.autograd.record():
        y = x * 2
    with pytest.raises(ValueError, match=r"head_grad shape \(4,\) != head shape \(3,\)"):
        y.backward(mx.ones(4))


def test_creation_with_a_negative_dimension():
    with pytest.raises(ValueError, match=r"zeros: negative dimension in shape \(2, -1\)"):
        mx.zeros((2, -1))


def test_creation_from_strings_names_the_dtype():
    with pytest.raises(TypeError, match=r"cannot build a numeric tensor from list \(dtype <U1\)"):
        mx.array(["a", "b"])


def test_creation_with_an_unknown_dtype():
    with pytest.raises(TypeError, match=r"unknown dtype 'floot'"):
        mx.zeros(2, dtype="floot")


# == split_and_load / split_data =================================================================
def test_batch_smaller_than_devices_with_even_split():
    with pytest.raises(ValueError, match=r"batch of 1 cannot be split into 2 non-empty slices"):
        mx.split_and_load(np.ones((1, 3)), DEVICES)


def test_indivisible_batch_with_even_split_names_both_sizes():
    with pytest.raises(ValueError, match=r"shape\[batch_axis\]=5 cannot be evenly split into 2 slices.*"
                                         r"even_split=False"):
        mx.split_and_load(np.ones((5, 3)), DEVICES)


@pytest.mark.parametrize("axis", [2, -3])
def test_batch_axis_out_of_range_names_axis_and_shape(axis):
    with pytest.raises(ValueError, match=rf"batch_axis {axis} is out of range for data of shape \(4, 3\)"):
        mx.split_and_load(np.ones((4, 3)), DEVICES, batch_axis=axis)


def test_negative_batch_axis_counts_from_the_end():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    parts = mx.split_and_load(x, DEVICES, batch_axis=-1)
    assert [p.shape for p in parts] == [(3, 2), (3, 2)]
    assert [p.device for p in parts] == DEVICES
    np.testing.assert_array_equal(np.concatenate([p.asnumpy() for p in parts], axis=1), x)


@pytest.mark.parametrize("workload, match", [
    ([1, 2, 3], r"workload has 3 entries for 2 devices"),
    ([1, -1], r"workload must be non-negative with a positive sum, got \[1, -1\]"),
    ([0, 0], r"workload must be non-negative with a positive sum, got \[0, 0\]"),
    ([float("nan"), 1], r"workload entries must be finite numbers, got \[nan, 1\]"),
    ([float("inf"), 1], r"workload entries must be finite numbers, got \[inf, 1\]"),
    ([100, 1], r"splitting a batch of 4 by workload \[100, 1\] gives slice sizes \[4, 0\]"),
])
def test_bad_workload(workload, match):
    with pytest.raises(ValueError, match=match):
        mx.split_and_load(np.ones((4, 3)), DEVICES, workload=workload)


def test_split_and_load_rejects_a_device_listed_twice():
    with pytest.raises(ValueError, match=r"device_list \[cpu\(0\), cpu\(0\)\] names cpu\(0\) more than once"):
        mx.split_and_load(np.ones((4, 3)), [mx.cpu(0), mx.cpu(0)])


def test_split_and_load_rejects_no_devices():
    with pytest.raises(ValueError, match=r"device_list is empty"):
        mx.split_and_load(np.ones((4, 3)), [])


@settings(max_examples=80, deadline=None)
@given(batch=st.integers(0, 40), n=st.integers(1, 8), even=st.booleans(),
       weights=st.none() | st.lists(st.floats(0.0, 10.0), min_size=8, max_size=8))
def test_split_data_property(batch, n, even, weights):
    """Either ``n`` non-empty pieces that concatenate back to the input, or a ValueError naming the sizes."""
    data = np.arange(batch * 2).reshape(batch, 2)
    workload = None if weights is None else weights[:n]
    try:
        parts = mx.split_data(data, n, even_split=even, workload=workload)
    except ValueError as exc:
        msg = str(exc)
        if workload is not None and sum(workload) == 0:
            assert "workload must be non-negative with a positive sum" in msg
        else:
            assert re.search(rf"(batch of |shape\[batch_axis\]=){batch}\b", msg), msg
            assert re.search(rf"into {n} |slice sizes \[", msg), msg
        return
    assert len(parts) == n
    assert all(p.shape[0] >= 1 for p in parts)
    if workload is None and even:
        assert all(p.shape[0] == batch // n for p in parts)
    np.testing.assert_array_equal(np.concatenate(parts), data)


# == devices =====================================================================================
def test_initialize_on_a_duplicate_device_names_it_and_changes_nothing():
    net = mx.nn.Sequential(mx.nn.Dense(3, in_units=4))
    with pytest.raises(ValueError, match=r"duplicate devices in \[cpu\(0\), cpu\(0\)\]: \['cpu\(0\)'\]"):
        net.initialize(device=[mx.cpu(0), mx.cpu(0)])
    assert not any(p.is_initialized for p in net.collect_params().values())


def test_gpu_beyond_what_cuda_provides_says_why():
    with pytest.raises(mx.DeviceUnavailableError, match=r"cannot use gpu\(4096\): (CuPy|only \d+ GPU\(s\) visible)"):
        mx.gpu(4096)


@pytest.mark.parametrize("status, device_id, match", [
    ((None, 0, "CuPy is not importable (ModuleNotFoundError: No module named 'cupy'); install mxlite with the "
      "'cuda12' or 'cuda13' extra"), 0, r"cannot use gpu\(0\): CuPy is not importable"),
    (("cupy", 0, "CuPy is installed but CUDA reports no usable GPU (cudaErrorNoDevice); is the NVIDIA driver "
      "loaded?"), 0, r"cannot use gpu\(0\): CuPy is installed but CUDA reports no usable GPU"),
    (("cupy", 2, ""), 5, r"cannot use gpu\(5\): only 2 GPU\(s\) visible \(gpu\(0\)\.\.gpu\(1\)\)"),
], ids=["no-cupy", "no-driver", "id-out-of-range"])
def test_gpu_unavailable_reasons(monkeypatch, status, device_id, match):
    monkeypatch.setattr(mx_device, "_cupy_status", lambda: status)
    with pytest.raises(mx.DeviceUnavailableError, match=match):
        mx.gpu(device_id)
    assert issubclass(mx.DeviceUnavailableError, RuntimeError)


@pytest.mark.parametrize("text", ["tpu:0", "cpu:x", "gpu(-1)", "cpu:", "gpu:1.5"])
def test_bad_device_strings_are_named(text):
    with pytest.raises(ValueError, match=rf"cannot parse device string {re.escape(repr(text))}"):
        mx.zeros(2, device=text)


def test_device_constructor_checks_type_and_id():
    with pytest.raises(ValueError, match=r"device_type must be 'cpu' or 'gpu', got 'tpu'"):
        mx.Device("tpu", 0)
    with pytest.raises(ValueError, match=r"device_id must be >= 0, got -1"):
        mx.cpu(-1)
    with pytest.raises(ValueError, match=r"device_id of a cpu device must be an integer, got str: 'a'"):
        mx.cpu("a")
    with pytest.raises(TypeError, match=r"expected a Device, got int: 3"):
        mx.zeros(2, device=3)


# == parameters ==================================================================================
def test_data_before_initialize_names_the_parameter():
    net = mx.nn.Sequential(mx.nn.Dense(3, in_units=4))
    with pytest.raises(RuntimeError, match=r"Parameter '0\.weight' has not been initialized; call net\.initialize"):
        net.collect_params()["0.weight"].data()


def test_data_of_a_deferred_parameter_before_the_first_batch():
    net = mx.nn.Sequential(mx.nn.Dense(3))
    net.initialize()
    with pytest.raises(DeferredInitializationError, match=r"Parameter '0\.weight' has not been initialized yet "
                                                          r"because initialization was deferred"):
        net.collect_params()["0.weight"].data()


def test_unknown_shape_without_deferred_init():
    p = mx.nn.Parameter("w", shape=(3, -1))
    with pytest.raises(ValueError, match=r"cannot initialize Parameter 'w': its shape \(3, -1\) is not fully known"):
        p.initialize()


def test_set_data_of_the_wrong_shape_names_both_and_keeps_the_value():
    net = _mlp()
    p = net.collect_params()["1.weight"]
    before = _snapshot(net)
    with pytest.raises(ValueError, match=r"Parameter '1\.weight': cannot set data of shape \(3, 2\), "
                                         r"expected \(2, 3\)"):
        p.set_data(np.zeros((3, 2), np.float32))
    _assert_unchanged(net, before)


def test_set_data_with_non_numbers():
    net = _mlp()
    with pytest.raises(TypeError, match=r"Parameter '0\.bias': set_data needs a Tensor or a numeric array, got str"):
        net.collect_params()["0.bias"].set_data("abc")


def test_set_data_fixing_a_deferred_shape_checks_the_known_part():
    net = mx.nn.Sequential(mx.nn.Dense(3))
    net.initialize()
    with pytest.raises(ValueError, match=r"Parameter '0\.weight': expected shape \(3, -1\) is incompatible with "
                                         r"given shape \(4, 5\)"):
        net.collect_params()["0.weight"].set_data(np.zeros((4, 5), np.float32))


def test_data_on_a_device_without_a_mirror_lists_where_it_lives():
    net = _mlp()
    with pytest.raises(RuntimeError, match=r"Parameter '0\.weight' was not initialized on cpu\(3\); its data lives on "
                                           r"\[cpu\(0\), cpu\(1\)\]"):
        net.collect_params()["0.weight"].data(mx.cpu(3))


def test_grad_of_a_parameter_without_gradient():
    net = mx.nn.Sequential(mx.nn.BatchNorm(in_channels=2))
    net.initialize()
    with pytest.raises(RuntimeError, match=r"Parameter '0\.running_mean' has no gradient because grad_req='null'"):
        net.collect_params()["0.running_mean"].grad()


# == load_parameters =============================================================================
@pytest.fixture()
def saved(tmp_path):
    """(path of a saved 4-3-2 MLP, that MLP)."""
    net = _mlp(seed=1)
    path = tmp_path / "mlp.npz"
    net.save_parameters(path)
    return path, net


def test_load_with_missing_names_lists_them_and_changes_nothing(saved):
    path, _ = saved
    net = mx.nn.Sequential(mx.nn.Dense(3, in_units=4), mx.nn.Dense(2, in_units=3), mx.nn.Dense(1, in_units=2))
    net.initialize(device=DEVICES)
    before = _snapshot(net)
    with pytest.raises(ValueError, match=rf"cannot load parameters from {re.escape(repr(str(path)))}: missing from the "
                                         r"file: \['2\.weight', '2\.bias'\] \(pass allow_missing=True"):
        net.load_parameters(path)
    _assert_unchanged(net, before)


def test_load_with_unexpected_names_lists_them_and_changes_nothing(saved):
    path, _ = saved
    net = mx.nn.Sequential(mx.nn.Dense(3, in_units=4))
    net.initialize(device=DEVICES)
    before = _snapshot(net)
    with pytest.raises(ValueError, match=r"not in the model: \['1\.weight', '1\.bias'\] \(pass ignore_extra=True"):
        net.load_parameters(path)
    _assert_unchanged(net, before)


def test_load_with_a_wrong_shape_names_it_and_changes_nothing(saved):
    """'0.*' would load fine, '1.weight' does not: nothing at all may change."""
    path, _ = saved
    net = mx.nn.Sequential(mx.nn.Dense(3, in_units=4), mx.nn.Dense(5, in_units=3))
    net.initialize(device=DEVICES)
    before = _snapshot(net)
    with pytest.raises(ValueError, match=r"'1\.weight': shape \(5, 3\) in the model, \(2, 3\) in the file"):
        net.load_parameters(path)
    _assert_unchanged(net, before)


def test_load_with_a_wrong_dtype_names_it_and_changes_nothing(saved, tmp_path):
    path, src = saved
    wide = tmp_path / "f64.npz"
    np.savez(wide, **{k: v.data(mx.cpu(0)).asnumpy().astype(np.float64) for k, v in src.collect_params().items()})
    net = _mlp(seed=2)
    before = _snapshot(net)
    with pytest.raises(ValueError, match=r"'0\.weight': dtype float32 in the model, float64 in the file "
                                         r"\(pass cast_dtype=True to convert\)"):
        net.load_parameters(wide)
    _assert_unchanged(net, before)


def test_successful_load_after_a_failed_one(saved):
    """The counterpart of the 'unchanged' checks: the same model does load a valid file."""
    path, src = saved
    net = _mlp(seed=3)
    net.load_parameters(path)
    for name, p in net.collect_params().items():
        for mirror in p.list_data():
            np.testing.assert_array_equal(mirror.asnumpy(), src.collect_params()[name].data(mx.cpu(0)).asnumpy())


class _TouchOnUnpickle:
    """Pickles to a call that creates ``path``: any unpickling on the load path would show."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path

    def __reduce__(self):
        return (pathlib.Path.touch, (self.path,))


def test_the_unpickling_detector_works(tmp_path):
    """Guards the check below: unpickling the payload does create the marker."""
    marker = tmp_path / "UNPICKLED"
    pickle.loads(pickle.dumps(_TouchOnUnpickle(marker)))
    assert marker.exists()


def _corrupt_files(tmp_path: pathlib.Path, good: pathlib.Path,
                   marker: pathlib.Path) -> dict[str, tuple[pathlib.Path, str]]:
    """name -> (file, what the error must say besides the file name)."""
    files = {}
    plain_zip = tmp_path / "plain.zip"
    with zipfile.ZipFile(plain_zip, "w") as zf:
        zf.writestr("hello.txt", "not an array")
    files["zip-not-npz"] = (plain_zip, r"not an \.npz of arrays: members \['hello\.txt'\] are not \.npy files")
    lookalike = tmp_path / "lookalike.npz"
    with zipfile.ZipFile(lookalike, "w") as zf:
        zf.writestr("0.weight", b"\x00" * 48)  # a parameter's name, but raw bytes instead of an .npy
    files["zip-raw-member"] = (lookalike, r"members \['0\.weight'\] are not \.npy files")
    pickled = tmp_path / "pickled.npz"
    pickled.write_bytes(pickle.dumps({"0.weight": _TouchOnUnpickle(marker)}))
    files["pickle"] = (pickled, r"pickled")
    objects = tmp_path / "objects.npz"
    np.savez(objects, **{"0.weight": np.array([_TouchOnUnpickle(marker)], dtype=object)})
    files["npz-object-array"] = (objects, r"Object arrays cannot be loaded")
    truncated = tmp_path / "truncated.npz"
    data = good.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    files["truncated"] = (truncated, r"\((BadZipFile|\w+Error): ")
    single = tmp_path / "single.npy"
    np.save(single, np.ones(3))
    files["npy-not-npz"] = (single, r"holds a single ndarray, not an \.npz archive")
    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    files["empty"] = (empty, r"\((BadZipFile|\w+Error): ")
    return files


@pytest.mark.parametrize("kind", ["zip-not-npz", "zip-raw-member", "pickle", "npz-object-array", "truncated",
                                  "npy-not-npz", "empty"])
def test_corrupt_or_foreign_parameter_files_are_rejected_without_unpickling(saved, tmp_path, kind):
    path, _ = saved
    marker = tmp_path / "UNPICKLED"
    bad, what = _corrupt_files(tmp_path, path, marker)[kind]
    net = _mlp(seed=4)
    before = _snapshot(net)
    with pytest.raises(ValueError, match=rf"cannot read {re.escape(repr(str(bad)))} as an mxlite \.npz file.*{what}"):
        net.load_parameters(bad)
    assert not marker.exists(), "the file was unpickled"
    _assert_unchanged(net, before)


def test_load_of_a_missing_file(tmp_path):
    net = _mlp()
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "nope.npz"))):
        net.load_parameters(tmp_path / "nope.npz")


# == KVStore =====================================================================================
@pytest.fixture()
def kv():
    store = mx.kv.create("device")
    store.init(3, mx.zeros((2, 3)))
    return store


@pytest.mark.parametrize("call", ["pull", "push", "pushpull"])
def test_kvstore_uninitialised_key(kv, call):
    value = mx.zeros((2, 3))
    args = {"pull": lambda: kv.pull(7, out=value), "push": lambda: kv.push(7, value),
            "pushpull": lambda: kv.pushpull(7, value)}
    with pytest.raises(ValueError, match=rf"{call}: key 7 has not been initialised; call init\(7, value\) first"):
        args[call]()


def test_kvstore_str_key_in_an_int_store(kv):
    with pytest.raises(ValueError, match=r"init: key 'a' is a str but this store's keys are ints; int and str keys "
                                         r"cannot be mixed"):
        kv.init("a", mx.zeros(2))


def test_kvstore_mixed_keys_in_one_call_store_nothing():
    store = mx.kv.create("local")
    with pytest.raises(ValueError, match=r"key 'a' is a str but the other keys given are ints"):
        store.init([1, "a"], [mx.zeros(2), mx.zeros(2)])
    store.init("b", mx.zeros(2))  # nothing was stored, so str keys are still possible


def test_kvstore_key_of_another_type(kv):
    with pytest.raises(TypeError, match=r"push: key 3\.5 must be an int or a str, got float"):
        kv.push(3.5, mx.zeros((2, 3)))


@pytest.mark.parametrize("value, match", [
    (lambda: mx.zeros((3, 2)), r"push: key 3: value is float32\(3, 2\) on cpu\(0\), the stored value is "
                               r"float32\(2, 3\) on cpu\(0\)"),
    (lambda: mx.zeros((2, 3), dtype="float64"), r"push: key 3: value is float64\(2, 3\) on cpu\(0\), the stored "
                                                 r"value is float32\(2, 3\)"),
    (lambda: [mx.zeros((2, 3), device=mx.cpu(0)), mx.zeros((2, 2), device=mx.cpu(1))],
     r"push: key 3: value 1 is float32\(2, 2\) on cpu\(1\)"),
], ids=["shape", "dtype", "second-of-list"])
def test_kvstore_push_shape_or_dtype_mismatch(kv, value, match):
    with pytest.raises(ValueError, match=match):
        kv.push(3, value())
    out = mx.ones((2, 3))
    kv.pull(3, out=out)
    np.testing.assert_array_equal(out.asnumpy(), 0)  # the failed push stored nothing


def test_kvstore_pull_into_the_wrong_shape(kv):
    with pytest.raises(ValueError, match=r"pull: key 3: out is float32\(3, 3\) on cpu\(0\), the stored value is "
                                         r"float32\(2, 3\) on cpu\(0\); shapes and dtypes must match"):
        kv.pull(3, out=mx.zeros((3, 3)))


def test_kvstore_key_and_value_lists_of_different_lengths(kv):
    with pytest.raises(ValueError, match=r"push: 2 keys \[3, 4\] but 1 values; give one per key"):
        kv.push([3, 4], [mx.zeros((2, 3))])


def test_kvstore_unknown_type():
    with pytest.raises(ValueError, match=r"unknown kvstore type 'foo'; known: local, device"):
        mx.kv.create("foo")


BAD_COMPRESSION = [
    ("3bit", {"type": "3bit"}, ValueError, r"compression_params\['type'\] must be one of none, 2bit, topk, threshold, "
                                           r"fp16, bf16, got '3bit'"),
    ("no-type", {"threshold": 0.5}, ValueError, r"compression_params\['type'\] is required"),
    ("2bit-threshold-0", {"type": "2bit", "threshold": 0}, ValueError,
     r"compression_params\['threshold'\] must be > 0, got 0"),
    ("threshold-negative", {"type": "threshold", "threshold": -1}, ValueError,
     r"compression_params\['threshold'\] must be > 0, got -1"),
    ("topk-ratio-1.5", {"type": "topk", "ratio": 1.5}, ValueError,
     r"compression_params\['ratio'\] must be in \(0, 1\], got 1\.5"),
    ("topk-ratio-0", {"type": "topk", "ratio": 0}, ValueError, r"compression_params\['ratio'\] must be in \(0, 1\]"),
    ("unknown-key", {"type": "2bit", "thresh": 0.5}, ValueError,
     r"compression_params\['thresh'\] is not a parameter of type '2bit' \(its parameters: 'threshold'\)"),
    ("not-a-dict", "2bit", TypeError, r"compression_params must be a dict"),
]


@pytest.mark.parametrize("params, exc, match", [c[1:] for c in BAD_COMPRESSION], ids=[c[0] for c in BAD_COMPRESSION])
def test_bad_compression_params_on_the_store(params, exc, match):
    with pytest.raises(exc, match=match):
        mx.kv.create("device").set_gradient_compression(params)


@pytest.mark.parametrize("params, exc, match", [c[1:] for c in BAD_COMPRESSION], ids=[c[0] for c in BAD_COMPRESSION])
def test_bad_compression_params_on_the_trainer(params, exc, match):
    net = _mlp()
    with pytest.raises(exc, match=match):
        mx.Trainer(net.collect_params(), "sgd", compression_params=params)


def test_compression_on_a_local_store():
    with pytest.raises(ValueError, match=r"gradient compression is not supported by kvstore 'local'"):
        mx.kv.create("local").set_gradient_compression({"type": "2bit"})


# == optimizers and schedulers ===================================================================
BAD_OPTIMIZER = [
    ("sgd", {"learning_rate": -1}, ValueError, r"learning_rate must be >= 0, got -1"),
    ("sgd", {"learning_rate": float("nan")}, ValueError, r"learning_rate must be a finite number, got nan"),
    ("adam", {"learning_rate": float("inf")}, ValueError, r"learning_rate must be a finite number, got inf"),
    ("sgd", {"learning_rate": "0.1"}, TypeError, r"learning_rate must be a real number, got str: '0\.1'"),
    ("sgd", {"wd": -1e-4}, ValueError, r"wd must be >= 0, got -0\.0001"),
    ("sgd", {"clip_gradient": 0.0}, ValueError, r"clip_gradient must be > 0 or None, got 0\.0"),
    ("sgd", {"clip_gradient": float("nan")}, ValueError, r"clip_gradient must be > 0 or None, got nan"),
    *[(name, {"momentum": m}, ValueError, rf"momentum must lie in \[0, 1\), got {m}")
      for name in ("sgd", "nag", "signum", "lars", "rmsprop") for m in (-0.1, 1.0, 1.5)],
    *[(name, {"beta1": 1.0}, ValueError, r"beta1 must lie in \[0, 1\), got 1\.0")
      for name in ("adam", "adamw", "lamb")],
    ("adam", {"beta1": -0.1}, ValueError, r"beta1 must lie in \[0, 1\), got -0\.1"),
    ("adam", {"beta2": 1.0}, ValueError, r"beta2 must lie in \[0, 1\), got 1\.0"),
    *[(name, {"epsilon": 0.0}, ValueError, r"epsilon must be > 0, got 0\.0")
      for name in ("adam", "adamw", "adagrad", "adadelta", "rmsprop", "lamb")],
    ("rmsprop", {"rho": 1.0}, ValueError, r"rho must lie in \[0, 1\), got 1\.0"),
    ("ftrl", {"learning_rate": 0.0}, ValueError, r"learning_rate must be > 0 for Ftrl"),
]


@pytest.mark.parametrize("name, kwargs, exc, match", BAD_OPTIMIZER,
                         ids=[f"{c[0]}-{next(iter(c[1]))}={next(iter(c[1].values()))}" for c in BAD_OPTIMIZER])
def test_bad_optimizer_hyperparameters(name, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        mx.optimizer.create(name, **kwargs)


@pytest.mark.parametrize("name, kwargs", [
    ("sgd", {"momentum": 0.0}), ("sgd", {"momentum": 0.999}), ("nag", {"momentum": 0.0}),
    ("adam", {"beta1": 0.0, "beta2": 0.0}), ("sgd", {"learning_rate": 0.0}), ("sgd", {"rescale_grad": 0.0}),
    ("sgd", {"learning_rate": np.float32(0.1)}),
])
def test_values_mxnet_accepts_are_still_accepted(name, kwargs):
    opt = mx.optimizer.create(name, **kwargs)
    for key, value in kwargs.items():
        attr = "lr" if key == "learning_rate" else key
        assert getattr(opt, attr) == value


def test_unknown_optimizer_lists_the_registered_ones():
    with pytest.raises(ValueError, match=r"unknown optimizer 'adamx'; registered: adabelief, adadelta, adagrad, "):
        mx.optimizer.create("adamx")


def test_unknown_optimizer_argument_is_named():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'foo'"):
        mx.optimizer.create("sgd", foo=1)


BAD_SCHEDULER = [
    ("factor>1", lambda: lrs.FactorScheduler(step=10, factor=1.5), ValueError,
     r"factor must be no more than 1 to make the rate decrease, got 1\.5"),
    ("factor<0", lambda: lrs.FactorScheduler(step=10, factor=-0.5), ValueError,
     r"factor must be >= 0 \(a negative factor makes the learning rate negative\), got -0\.5"),
    ("factor-step-0", lambda: lrs.FactorScheduler(step=0), ValueError,
     r"step must be greater or equal than 1 update, got 0"),
    ("multi-decreasing", lambda: lrs.MultiFactorScheduler(step=[10, 5], factor=0.5), ValueError,
     r"step must be a strictly increasing list, got \[10, 5\] \(step\[1\] = 5 <= step\[0\] = 10\)"),
    ("multi-repeated", lambda: lrs.MultiFactorScheduler(step=[10, 10], factor=0.5), ValueError,
     r"step\[1\] = 10 <= step\[0\] = 10"),
    ("multi-empty", lambda: lrs.MultiFactorScheduler(step=[]), ValueError, r"step must list at least one update"),
    ("multi-below-1", lambda: lrs.MultiFactorScheduler(step=[0, 3]), ValueError,
     r"step entries must be greater or equal than 1 update, got step\[0\] = 0"),
    ("multi-not-a-list", lambda: lrs.MultiFactorScheduler(step=5), TypeError,
     r"step must be a list of update numbers, got 5 of type int"),
    ("multi-factor>1", lambda: lrs.MultiFactorScheduler(step=[1], factor=2), ValueError,
     r"factor must be no more than 1"),
    ("multi-factor<0", lambda: lrs.MultiFactorScheduler(step=[1], factor=-1), ValueError, r"factor must be >= 0"),
    ("warmup-begin>base", lambda: lrs.FactorScheduler(step=10, base_lr=0.1, warmup_begin_lr=0.5, warmup_steps=5),
     ValueError, r"base_lr \(0\.1\) has to be higher than warmup_begin_lr \(0\.5\)"),
    ("warmup-steps<0", lambda: lrs.FactorScheduler(step=10, warmup_steps=-1), ValueError,
     r"warmup_steps has to be positive or 0, got -1"),
    ("warmup-steps-float", lambda: lrs.CosineScheduler(max_update=10, warmup_steps=2.5), TypeError,
     r"warmup_steps must be an integer, got 2\.5 of type float"),
    ("warmup-mode", lambda: lrs.PolyScheduler(max_update=10, warmup_mode="cubic"), ValueError,
     r"warmup_mode must be one of \('linear', 'constant'\), got 'cubic'"),
    ("poly-max<=warmup", lambda: lrs.PolyScheduler(max_update=5, warmup_steps=5), ValueError,
     r"max_update \(5\) must exceed warmup_steps \(5\)"),
    ("poly-pwr<0", lambda: lrs.PolyScheduler(max_update=5, pwr=-1), ValueError, r"pwr must be >= 0"),
    ("cosine-max-0", lambda: lrs.CosineScheduler(max_update=0), ValueError,
     r"max_update \(maximum number of updates\) must be strictly positive, got 0"),
]


@pytest.mark.parametrize("build, exc, match", [c[1:] for c in BAD_SCHEDULER], ids=[c[0] for c in BAD_SCHEDULER])
def test_bad_scheduler_arguments(build, exc, match):
    with pytest.raises(exc, match=match):
        build()


def test_scheduler_factors_mxnet_accepts_are_still_accepted():
    assert lrs.FactorScheduler(step=2, factor=1.0, base_lr=0.5)(10) == 0.5
    assert lrs.FactorScheduler(step=2, factor=0.0, stop_factor_lr=1e-3, base_lr=0.5)(10) == 1e-3
    assert lrs.MultiFactorScheduler(step=[2], factor=0.0, base_lr=0.5)(3) == 0.0


@settings(max_examples=60, deadline=None)
@given(step=st.integers(1, 10), factor=st.floats(0.0, 1.0), stop=st.floats(0.0, 1e-2), base=st.floats(1e-2, 1.0),
       updates=st.lists(st.integers(1, 200), min_size=1, max_size=30))
def test_factor_scheduler_is_non_increasing_and_above_its_floor(step, factor, stop, base, updates):
    sched = lrs.FactorScheduler(step=step, factor=factor, stop_factor_lr=stop, base_lr=base)
    rates = [sched(u) for u in sorted(updates)]
    assert rates[0] <= base
    assert all(b <= a for a, b in zip(rates, rates[1:]))
    assert all(r >= stop for r in rates)


@settings(max_examples=30, deadline=None)
@given(factor=st.floats(1.0, 1e6, exclude_min=True) | st.floats(-1e6, 0.0, exclude_max=True))
def test_factor_scheduler_rejects_any_factor_outside_0_1(factor):
    with pytest.raises(ValueError, match=rf"factor must be .*got {re.escape(str(factor))}"):
        lrs.FactorScheduler(step=3, factor=factor)


# == Trainer misuse ==============================================================================
@pytest.mark.parametrize("method", ["allreduce_grads", "update"])
def test_allreduce_or_update_when_updating_on_the_store(method):
    net = _mlp()
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, update_on_kvstore=True)
    _backward(net)
    call = trainer.allreduce_grads if method == "allreduce_grads" else (lambda: trainer.update(4))
    with pytest.raises(RuntimeError, match=rf"{method}\(\) when parameters are updated on kvstore is not supported"):
        call()


@pytest.mark.parametrize("update_on_kvstore", [False, True])
def test_stale_gradient_names_parameter_and_device(update_on_kvstore):
    net = _mlp()
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, update_on_kvstore=update_on_kvstore)
    x = mx.ones((2, 4), device=mx.cpu(0))
    with mx.autograd.record():
        loss = net(x).sum()  # backward reaches the cpu(0) mirrors only
    loss.backward()
    before = _snapshot(net)
    with pytest.raises(UserWarning, match=r"Gradient of Parameter '0\.bias' on device cpu\(1\) has not been updated "
                                          r"by backward since the last step.*ignore_stale_grad=True"):
        trainer.step(2)
    _assert_unchanged(net, before)


def test_optimizer_instance_with_optimizer_params():
    net = _mlp()
    with pytest.raises(ValueError, match=r"optimizer_params must be None when optimizer is an Optimizer instance"):
        mx.Trainer(net.collect_params(), mx.optimizer.SGD(), {"learning_rate": 0.1})


def test_unknown_kvstore_name():
    net = _mlp()
    with pytest.raises(ValueError, match=r"unknown kvstore 'foo'; known: local, device, nccl"):
        mx.Trainer(net.collect_params(), "sgd", kvstore="foo")


def test_update_on_a_reduce_only_store():
    net = _mlp()
    with pytest.raises(ValueError, match=r"set update_on_kvstore=False when training with kvstore 'nccl'"):
        mx.Trainer(net.collect_params(), "sgd", kvstore="nccl", update_on_kvstore=True)


@pytest.mark.parametrize("batch_size", [0, -2])
def test_step_with_a_non_positive_batch_size(batch_size):
    net = _mlp()
    trainer = mx.Trainer(net.collect_params(), "sgd")
    _backward(net)
    with pytest.raises(ValueError, match=rf"batch_size must be a positive number, got {batch_size}"):
        trainer.step(batch_size)


def test_step_with_a_nan_batch_size():
    net = _mlp()
    trainer = mx.Trainer(net.collect_params(), "sgd")
    _backward(net)
    with pytest.raises(ValueError, match=r"batch_size must be a positive number, got nan"):
        trainer.step(float("nan"))


def test_step_with_a_string_batch_size():
    net = _mlp()
    trainer = mx.Trainer(net.collect_params(), "sgd")
    _backward(net)
    with pytest.raises((TypeError, ValueError), match=r"batch_size"):
        trainer.step("4")


def test_kvstore_of_a_wrong_type():
    net = _mlp(devices=[mx.cpu(0)])
    with pytest.raises(TypeError, match=r"kvstore"):
        mx.Trainer(net.collect_params(), "sgd", kvstore=123)


def test_step_before_a_deferred_parameter_got_its_shape():
    net = mx.nn.Sequential(mx.nn.Dense(3, use_bias=False))
    net.initialize()
    trainer = mx.Trainer(net.collect_params(), "sgd")
    with pytest.raises(DeferredInitializationError, match=r"Parameter '0\.weight' has not been initialized "
                                                          r"yet because initialization was deferred"):
        trainer.step(1)


@pytest.fixture()
def sgd_states(tmp_path):
    """(states file of an SGD Trainer over the 4-3-2 MLP after one step, the net)."""
    net = _mlp()
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    _backward(net)
    trainer.step(4)
    path = tmp_path / "sgd.states"
    trainer.save_states(path)
    return path, net


def test_load_states_of_another_optimizer_names_the_file(sgd_states):
    path, net = sgd_states
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    with pytest.raises(ValueError, match=rf"cannot load trainer states from {re.escape(repr(str(path)))}: optimizer "
                                         r"state is for 'SGD', cannot load it into Adam"):
        trainer.load_states(path)
    assert trainer.optimizer.lr == 0.01 and trainer.optimizer.num_update == 0


def test_load_states_of_other_parameters_names_the_file(sgd_states):
    path, _ = sgd_states
    other = mx.nn.Sequential(mx.nn.Dense(3, in_units=4))
    other.initialize(device=DEVICES)
    trainer = mx.Trainer(other.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    with pytest.raises(ValueError, match=rf"{re.escape(repr(str(path)))}: it was saved for other parameters: "
                                         r"missing \[\], unexpected \['1\.bias', '1\.weight'\]"):
        trainer.load_states(path)


def test_load_states_from_a_parameter_file_names_the_file(sgd_states, tmp_path):
    _, net = sgd_states
    params = tmp_path / "params.npz"
    net.save_parameters(params)
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    with pytest.raises(ValueError, match=rf"cannot load trainer states from {re.escape(repr(str(params)))}"):
        trainer.load_states(params)


# == DataLoader and datasets =====================================================================
X, Y = np.arange(30, dtype=np.float32).reshape(10, 3), np.arange(10)


@pytest.mark.parametrize("batch_size", [0, -3, 2.5])
def test_dataloader_batch_size(batch_size):
    with pytest.raises(ValueError, match=rf"batch_size must be an integer >= 1, got {batch_size}"):
        mx.data.DataLoader(mx.data.ArrayDataset(X, Y), batch_size=batch_size)


def test_dataloader_sampler_without_length():
    with pytest.raises(TypeError, match=r"sampler must have a length, got int"):
        mx.data.DataLoader(mx.data.ArrayDataset(X, Y), batch_size=2, sampler=5)


def test_dataloader_sampler_with_shuffle():
    with pytest.raises(ValueError, match=r"shuffle must be False when a sampler is given, got shuffle=True and "
                                         r"sampler=SequentialSampler"):
        mx.data.DataLoader(mx.data.ArrayDataset(X, Y), batch_size=2, sampler=mx.data.SequentialSampler(10),
                           shuffle=True)


def test_dataloader_sampler_beyond_the_dataset_names_index_and_length():
    loader = mx.data.DataLoader(mx.data.ArrayDataset(X, Y), batch_size=4, sampler=mx.data.SequentialSampler(12))
    with pytest.raises(IndexError, match=r"the sampler gave index 10, but the dataset has 10 samples"):
        list(loader)


def test_dataloader_conflicting_batch_sampler():
    with pytest.raises(ValueError, match=r"must not be given with batch_sampler; got batch_size=2"):
        mx.data.DataLoader(mx.data.ArrayDataset(X, Y), batch_size=2, batch_sampler=[[0, 1]])


def test_dataloader_unknown_last_batch():
    with pytest.raises(ValueError, match=r"last_batch must be one of \('keep', 'discard', 'rollover'\), got 'drop'"):
        mx.data.DataLoader(mx.data.ArrayDataset(X, Y), batch_size=2, last_batch="drop")


def test_array_dataset_of_different_lengths_lists_them():
    with pytest.raises(ValueError, match=r"ArrayDataset: all arrays must have the same length, got lengths \[10, 9\]"):
        mx.data.ArrayDataset(X, Y[:9])


def test_array_dataset_arguments_without_length():
    with pytest.raises(ValueError, match=r"ArrayDataset needs at least one array"):
        mx.data.ArrayDataset()
    with pytest.raises(TypeError, match=r"ArrayDataset: argument 1 is a 0-d array"):
        mx.data.ArrayDataset(X, np.array(1.0))


def test_batchify_of_samples_with_different_shapes():
    dataset = mx.data.SimpleDataset([np.ones(3), np.ones(4)])
    with pytest.raises(ValueError, match=r"cannot stack samples of different shapes \[\(3,\), \(4,\)\]"):
        list(mx.data.DataLoader(dataset, batch_size=2))


# -- consistent checks at construction (NaN, inf, str, None, wrong arity), each naming the argument ------------

def _ce_update():
    metric = mx.metric.CrossEntropy()
    metric.update([mx.array(np.array([0, 1, 2], np.float32))], [mx.array(np.full((4, 3), 1 / 3, np.float32))])


def _param():
    return mx.nn.Parameter("w", shape=(2,))


CONSISTENT = [
    ("cross-entropy-3-labels-4-rows", _ce_update, ValueError, r"3 labels .* for 4 rows of predictions"),
    ("factor-step-nan", lambda: lrs.FactorScheduler(step=float("nan")), TypeError, r"step must be an integer, got nan"),
    ("factor-step-2.5", lambda: lrs.FactorScheduler(step=2.5), TypeError, r"step must be an integer, got 2\.5"),
    ("factor-step-str", lambda: lrs.FactorScheduler(step="5"), TypeError, r"step must be an integer, got '5'"),
    ("factor-base-nan", lambda: lrs.FactorScheduler(step=2, base_lr=float("nan")), ValueError,
     r"base_lr must be >= 0, got nan"),
    ("multifactor-nan", lambda: lrs.MultiFactorScheduler(step=[float("nan")]), TypeError,
     r"step\[0\] must be an integer"),
    ("poly-pwr-nan", lambda: lrs.PolyScheduler(5, pwr=float("nan")), ValueError, r"pwr must be >= 0, got nan"),
    ("poly-pwr-inf", lambda: lrs.PolyScheduler(5, pwr=float("inf")), ValueError, r"pwr must be a finite number"),
    ("called-with-nan", lambda: lrs.FactorScheduler(step=2)(float("nan")), ValueError, r"num_update must be .*got nan"),
    ("called-with-negative", lambda: lrs.PolyScheduler(5)(-3), ValueError, r"num_update must be .*>= 0, got -3"),
    ("adagrad-eps-nan", lambda: mx.optimizer.create("adagrad", epsilon=float("nan")), ValueError,
     r"epsilon must be > 0, got nan"),
    ("adadelta-eps-nan", lambda: mx.optimizer.create("adadelta", epsilon=float("nan")), ValueError,
     r"epsilon must be > 0, got nan"),
    ("rescale-inf", lambda: mx.optimizer.create("sgd", rescale_grad=float("inf")), ValueError,
     r"rescale_grad must be a finite number, got inf"),
    ("clip-str", lambda: mx.optimizer.create("sgd", clip_gradient="x"), TypeError, r"clip_gradient must be a real"),
    ("epsilon-str", lambda: mx.optimizer.create("adam", epsilon="x"), TypeError, r"epsilon must be a real number"),
    ("trainer-lr-str", lambda: mx.Trainer([_param()], "sgd", {"learning_rate": "0.1x"}), TypeError,
     r"learning_rate must be a real number, got str: '0\.1x'"),
    ("trainer-rescale-str", lambda: mx.Trainer([_param()], "sgd", {"rescale_grad": "2"}), TypeError,
     r"rescale_grad must be a real number"),
    ("dense-units-none", lambda: mx.nn.Dense(units=None), TypeError, r"Dense: units must be an integer"),
    ("dense-units-float", lambda: mx.nn.Dense(units=2.5), TypeError, r"Dense: units must be an integer"),
    ("conv-kernel-one", lambda: mx.nn.Conv2D(4, kernel_size=(3,)), ValueError, r"Conv2D: kernel_size must be .* pair"),
    ("conv-strides-0", lambda: mx.nn.Conv2D(4, kernel_size=3, strides=0), ValueError, r"Conv2D: strides must be >= 1"),
    ("pool-size-str", lambda: mx.nn.MaxPool2D(pool_size="2"), ValueError, r"MaxPool2D: pool_size must be"),
    ("loss-batch-axis-str", lambda: mx.loss.L2Loss(batch_axis="0"), TypeError, r"batch_axis must be an int"),
    ("split-batch-axis-str", lambda: mx.split_and_load(np.ones((4, 2)), [mx.cpu(0), mx.cpu(1)], batch_axis="0"),
     TypeError, r"batch_axis must be an int"),
    ("dropout-rate-str", lambda: mx.nn.Dropout("0.5"), TypeError, r"Dropout: rate must be a real number"),
    ("batchnorm-eps-nan", lambda: mx.nn.BatchNorm(epsilon=float("nan")), ValueError, r"BatchNorm: epsilon must be > 0"),
    ("exp-decay-inf", lambda: lrs.ExponentialDecay(1, decay_steps=float("inf"), decay_rate=0.5), ValueError,
     r"decay_steps must be a finite number"),
]


@pytest.mark.parametrize("make, exc, match", [c[1:] for c in CONSISTENT], ids=[c[0] for c in CONSISTENT])
def test_construction_refuses_nan_inf_str_and_wrong_arity_naming_the_argument(make, exc, match):
    with pytest.raises(exc, match=match):
        make()
