"""The split of ``mx.nd`` into the operator family (``arrays/_nd_ops.py``) and the namespace (``arrays/nd.py``).

The public names of ``mx.nd``, ``mx.np``, ``mx.npx`` and their sub-namespaces are those before the split
(a superset is fine); the modules of ``mxlite/arrays`` build their namespaces with plain assignments (no
``globals()`` rewriting, no class changed in place) and read no private name of a sibling module.
"""

import ast
import pathlib

import numpy as np
import pytest

import mxlite as mx
from mxlite.autograd.tensor import NDTensor

ARRAYS = pathlib.Path(mx.__file__).parent / "arrays"

# public names before the split, per namespace
PUBLIC_NAMES = {
    "nd": (
        "Activation Any BatchNorm BilinearResize2D BlockGrad Cast Concat Convolution Deconvolution Dropout "
        "ElementWiseSum Embedding Flatten FullyConnected GroupNorm InstanceNorm L2Normalization LayerNorm LeakyReLU "
        "NDArray NDTensor Pooling Reshape Sequence SequenceLast SequenceMask SequenceReverse SimpleNamespace "
        "SliceChannel SoftmaxActivation SwapAxis Tensor UpSampling abs add add_n annotations arange arange_like "
        "arccos arccosh arcsin arcsinh arctan arctan2 arctanh argmax argmax_channel argmin argsort array as_dtype "
        "autograd batch_dot batch_take broadcast_add broadcast_axes broadcast_axis broadcast_div broadcast_equal "
        "broadcast_greater broadcast_greater_equal broadcast_hypot broadcast_lesser broadcast_lesser_equal "
        "broadcast_like broadcast_logical_and broadcast_logical_or broadcast_logical_xor broadcast_maximum "
        "broadcast_minimum broadcast_minus broadcast_mod broadcast_mul broadcast_not_equal broadcast_plus "
        "broadcast_power broadcast_sub broadcast_to cast cbrt ceil clip concat concatenate contrib copy cos cosh crop "
        "degrees depth_to_space device_arg diag div_sqrt_dim divide dot elemwise_add elemwise_div elemwise_equal "
        "elemwise_greater elemwise_greater_equal elemwise_hypot elemwise_lesser elemwise_lesser_equal "
        "elemwise_logical_and elemwise_logical_or elemwise_logical_xor elemwise_maximum elemwise_minimum elemwise_mod "
        "elemwise_mul elemwise_not_equal elemwise_power elemwise_sub empty empty_like equal erf exp expand_dims expm1 "
        "eye fix flatten flip floor full full_like functools gather_nd greater greater_equal hard_sigmoid hypot "
        "identity inspect isfinite isinf isnan less less_equal lesser lesser_equal linalg linalg_det "
        "linalg_extractdiag linalg_extracttrian linalg_gemm linalg_gemm2 linalg_inverse linalg_makediag "
        "linalg_maketrian linalg_potrf linalg_potri linalg_slogdet linalg_sumlogdiag linalg_syrk linalg_trmm "
        "linalg_trsm linspace load log log10 log1p log2 log_sigmoid log_softmax logical_and logical_not logical_or "
        "logical_xor matmul max max_axis maximum mean min min_axis minimum mish mod moments multiply nanprod nansum "
        "negative norm normal not_equal np one_hot ones ones_like pad pick power prod radians random "
        "random_exponential random_gamma random_generalized_negative_binomial random_negative_binomial random_normal "
        "random_poisson random_randint random_uniform rcbrt reciprocal relu relu6 repeat reset_arrays reshape "
        "reshape_like reshape_nd reverse rint round rsqrt sample_exponential sample_gamma "
        "sample_generalized_negative_binomial sample_multinomial sample_negative_binomial sample_normal "
        "sample_poisson sample_uniform save shape_arg shape_array shuffle sigmoid sign sin sinh size_array slice "
        "slice_axis slice_like smooth_l1 softmax softmax_cross_entropy softmin softsign sort space_to_depth split "
        "split_v2 sqrt square squeeze stack stop_gradient subtract sum sum_axis swapaxes take tan tanh tensor tensors "
        "tile topk transpose true_divide trunc uniform waitall where zeros zeros_like "),
    "nd.random": (
        "exponential exponential_like gamma gamma_like generalized_negative_binomial "
        "generalized_negative_binomial_like multinomial negative_binomial negative_binomial_like normal normal_like "
        "poisson poisson_like randint randn seed shuffle uniform uniform_like "),
    "nd.linalg": (
        "det extractdiag extracttrian gemm gemm2 inverse makediag maketrian potrf potri slogdet sumlogdiag syrk trmm "
        "trsm "),
    "nd.contrib": (
        "BilinearResize2D arange_like div_sqrt_dim interleaved_matmul_encdec_qk interleaved_matmul_encdec_valatt "
        "interleaved_matmul_selfatt_qk interleaved_matmul_selfatt_valatt "),
    "np": (
        "Any Sequence SimpleNamespace Tensor abs absolute add all amax amin annotations any arange arccos arccosh "
        "arcsin arcsinh arctan arctan2 arctanh argmax argmin argsort around array array_split asarray atleast_1d "
        "atleast_2d atleast_3d bool_ broadcast_to cbrt ceil clip column_stack concat concatenate contextlib cos cosh "
        "cumsum device_arg divide dot dsplit dstack dtype e empty empty_like equal exp expand_dims expm1 eye fix flip "
        "float16 float32 float64 floor fmod full full_like greater greater_equal hsplit hstack hypot identity inf "
        "int32 int64 int8 isfinite isinf isnan less less_equal linalg linspace log log10 log1p log2 logical_and "
        "logical_not logical_or logical_xor matmul max maximum may_share_memory mean min minimum mod moveaxis "
        "multiply nan ndarray negative newaxis not_equal np_shape ones ones_like outer pi power prod random ravel "
        "reciprocal remainder repeat reshape rint round row_stack shape_arg sign sin sinh sort split sqrt square "
        "squeeze stack std subtract sum swapaxes take take_along_axis tan tanh tensor tensors tile transpose "
        "true_divide trunc uint8 var vsplit vstack where zeros zeros_like "),
    "np.random": (
        "choice exponential gamma multinomial normal rand randint randn seed shuffle uniform "),
    "np.linalg": (
        "cholesky det eigh inv lstsq norm pinv qr slogdet solve svd "),
    "npx": (
        "Any Tensor activation add_n annotations arange_like array batch_dot batch_flatten batch_norm broadcast_like "
        "cast convolution cpu current_context current_device deconvolution dropout embedding erf fully_connected "
        "gamma gather_nd gpu group_norm instance_norm interleaved_matmul_encdec_qk interleaved_matmul_encdec_valatt "
        "interleaved_matmul_selfatt_qk interleaved_matmul_selfatt_valatt is_np_array is_np_shape layer_norm "
        "leaky_relu load log_softmax masked_log_softmax masked_softmax math norm num_gpus one_hot pad pick pooling "
        "relu relu6 reset_np reshape reshape_like reshape_npx save scaled_dot_product_attention sequence_last "
        "sequence_mask sequence_reverse set_np shape_arg shape_array sigmoid slice slice_like smooth_l1 softmax "
        "softsign stop_gradient tensor tensors topk waitall "),
}


def _namespace(path: str):
    top, *rest = path.split(".")
    obj = getattr(mx, top)
    for part in rest:
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("path", sorted(PUBLIC_NAMES))
def test_public_names_are_kept(path):
    have = set(dir(_namespace(path)))
    missing = sorted(set(PUBLIC_NAMES[path].split()) - have)
    assert not missing, f"mx.{path} lost {missing}"


def _module_trees():
    for path in sorted(ARRAYS.glob("*.py")):
        yield path.name, ast.parse(path.read_text())


def test_arrays_modules_neither_rewrite_globals_nor_change_classes():
    found = []
    for name, tree in _module_trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "globals":
                found.append(f"{name}:{node.lineno} globals()")
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr == "__class__":
                    found.append(f"{name}:{node.lineno} __class__ assignment")
    assert not found, found


def test_arrays_modules_read_no_private_name_of_a_sibling():
    found = []
    for name, tree in _module_trees():
        siblings = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module is None:
                    siblings.update(a.asname or a.name for a in node.names)
                else:
                    found += [f"{name}:{node.lineno} {node.module}.{a.name}" for a in node.names
                              if a.name.startswith("_")]
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in siblings
                    and node.attr.startswith("_")):
                found.append(f"{name}:{node.lineno} {node.value.id}.{node.attr}")
    assert not found, found


def test_sub_namespaces_share_the_mx_nd_functions():
    for name in ("div_sqrt_dim", "arange_like", "BilinearResize2D"):
        assert getattr(mx.nd.contrib, name) is getattr(mx.nd, name), name
    assert mx.nd.random.uniform.__wrapped__ is mx.nd.uniform.__wrapped__
    assert mx.nd.linalg.gemm2.__wrapped__ is mx.nd.linalg_gemm2.__wrapped__
    draw = mx.nd.random.uniform(shape=(2, 3))
    assert type(draw) is NDTensor and draw.shape == (2, 3)
    inverse = mx.nd.linalg.inverse(mx.nd.array([[2.0, 0.0], [0.0, 4.0]]))
    assert type(inverse) is NDTensor
    np.testing.assert_allclose(inverse.asnumpy(), [[0.5, 0.0], [0.0, 0.25]])


def test_creation_results_are_new_nd_arrays_of_the_shape_asked_for():
    source = mx.np.array([1.0, 2.0])
    made = mx.nd.array(source)
    assert type(made) is NDTensor and made is not source and type(source) is not NDTensor
    scalar = mx.nd.zeros(())
    assert type(scalar) is NDTensor and scalar.shape == ()
    like = mx.nd.ones_like(source)
    assert type(like) is NDTensor and like.shape == (2,)
    np.testing.assert_array_equal(like.asnumpy(), [1.0, 1.0])


def test_comparisons_keep_each_face_convention():
    a, b = np.array([1.0, -1.0], np.float32), np.array([0.0, 0.0], np.float32)
    nd_result = mx.nd.greater(mx.nd.array(a), mx.nd.array(b))
    assert nd_result.dtype == np.float32
    np.testing.assert_array_equal(nd_result.asnumpy(), [1.0, 0.0])
    np_result = mx.np.greater(mx.np.array(a), mx.np.array(b))
    assert np_result.dtype == np.bool_
    np.testing.assert_array_equal(np_result.asnumpy(), [True, False])
    assert mx.nd.lesser(mx.nd.array(a), 0.0).dtype == np.float32
    assert mx.np.logical_not(mx.np.array(a)).dtype == np.bool_
    assert mx.nd.logical_not(mx.nd.array(a)).dtype == np.float32


def test_nd_reduction_has_no_0d_result_and_gradient_flows():
    x = mx.nd.array([1.0, 2.0, 3.0])
    x.attach_grad()
    with mx.autograd.record():
        total = mx.nd.sum(mx.nd.square(x))
    total.backward()
    assert type(total) is NDTensor and total.shape == (1,)
    np.testing.assert_allclose(x.grad.asnumpy(), [2.0, 4.0, 6.0])
