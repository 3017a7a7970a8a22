"""``mx.npx``: MXNet 2.x's operators beyond NumPy (``softmax``, ``pick``, ``topk``, ``reshape`` codes, ``save``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as _onp

from .. import ops as _ops
from ..autograd.tensor import Tensor
from ..device import cpu, current_device, gpu, num_gpus
from ..device.context import current_context
from ..ops import attention as _attention
from ..ops import nn_ops as _nn
from ..ops.creation import array
from . import _nd_ops
from ._common import reshape_npx, shape_arg, tensor, tensors, waitall

__all__ = ["softmax", "log_softmax", "relu", "sigmoid", "activation", "leaky_relu", "pick", "one_hot", "topk",
           "batch_dot", "reshape", "waitall", "load", "save", "set_np", "reset_np", "is_np_array", "cpu", "gpu",
           "num_gpus", "current_device", "current_context", "fully_connected", "dropout", "layer_norm",
           "batch_flatten", "embedding", "sequence_mask", "stop_gradient", "relu6", "gamma", "masked_softmax",
           "masked_log_softmax", "interleaved_matmul_selfatt_qk", "interleaved_matmul_selfatt_valatt",
           "interleaved_matmul_encdec_qk", "interleaved_matmul_encdec_valatt", "scaled_dot_product_attention"]


def softmax(data: Any, axis: int = -1, length: Any = None, temperature: float | None = None,
            use_length: bool = False, dtype: Any = None) -> Tensor:
    """Softmax along ``axis`` (of ``data / temperature`` when given)."""
    return _nd_ops.softmax(data, axis, temperature)


def log_softmax(data: Any, axis: int = -1, length: Any = None, temperature: float | None = None,
                use_length: bool = False, dtype: Any = None) -> Tensor:
    """Log-softmax along ``axis``, computed stably."""
    return _nd_ops.log_softmax(data, axis, temperature)


def relu(data: Any) -> Tensor:
    """``max(x, 0)``."""
    return _ops.relu(tensor(data))


def sigmoid(data: Any) -> Tensor:
    """``1 / (1 + exp(-x))``."""
    return _ops.sigmoid(tensor(data))


def relu6(data: Any) -> Tensor:
    """``min(max(x, 0), 6)``."""
    return _nd_ops.relu6(data)


def activation(data: Any, act_type: str = "relu") -> Tensor:
    """An activation by name ('relu', 'sigmoid', 'tanh', 'softrelu', 'softsign', 'log_sigmoid', 'mish')."""
    return _nd_ops.Activation(data, act_type)


def leaky_relu(data: Any, gamma: Any = None, act_type: str = "leaky", slope: float = 0.25, **kwargs: Any) -> Tensor:
    """MXNet's ``LeakyReLU`` family ('leaky', 'prelu', 'elu', 'selu', 'gelu')."""
    return _nd_ops.LeakyReLU(data, gamma, act_type, slope)


def pick(data: Any, index: Any, axis: int = -1, mode: str = "clip", keepdims: bool = False) -> Tensor:
    """One entry per position along ``axis``: ``out[i] = data[i, index[i]]`` for ``axis=1``."""
    return _nd_ops.pick(data, index, axis, keepdims)


def one_hot(data: Any, depth: int, on_value: float = 1.0, off_value: float = 0.0, dtype: Any = _onp.float32) -> Tensor:
    """``(..., depth)`` array with ``on_value`` at each index."""
    return _nd_ops.one_hot(data, depth, on_value, off_value, dtype)


def topk(data: Any, axis: int = -1, k: int = 1, ret_typ: str = "indices", is_ascend: bool = False,
         dtype: Any = _onp.int64) -> Any:
    """The ``k`` largest (smallest when ``is_ascend``) entries along ``axis``; indices are int64 (MXNet 2.x)."""
    return _nd_ops.topk(data, axis, k, ret_typ, is_ascend, dtype)


def batch_dot(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
    """Batched matrix product of 3-D arrays, optionally transposed."""
    return _nd_ops.batch_dot(a, b, transpose_a, transpose_b)


def reshape(a: Any, newshape: Any, reverse: bool = False, order: str = "C") -> Tensor:
    """Reshape with MXNet 2.x's codes: -1 infer, -2 copy this dim, -3 drop a size-1 dim, -4 copy the rest,
    -5 merge two dims, -6 split one dim into the next two entries.

    Raises:
        ValueError: codes that do not fit the input's shape.
    """
    a = tensor(a)
    return _ops.reshape(a, reshape_npx(a.shape, shape_arg(newshape), reverse))


def batch_flatten(data: Any) -> Tensor:
    """Collapse every axis but the first."""
    return _ops.flatten(tensor(data))


def fully_connected(x: Any, weight: Any, bias: Any = None, num_hidden: int = 0, no_bias: bool = True,
                    flatten: bool = True) -> Tensor:
    """``x · weightᵀ + bias``."""
    return _nd_ops.FullyConnected(x, weight, bias, num_hidden, no_bias and bias is None, flatten)


def dropout(data: Any, p: float = 0.5, axes: Any = (), mode: str = "training", **kwargs: Any) -> Tensor:
    """Inverted dropout while training."""
    return _nd_ops.Dropout(data, p, axes, mode)


def layer_norm(data: Any, gamma: Any, beta: Any, axis: int = -1, eps: float = 1e-5) -> Tensor:
    """Layer normalisation over ``axis``."""
    data, gamma, beta = tensors(data, gamma, beta)
    return _nn.layer_norm(data, gamma, beta, axis=axis, eps=eps)


def embedding(data: Any, weight: Any, input_dim: int = 0, output_dim: int = 0, sparse_grad: bool = False,
              **kwargs: Any) -> Tensor:
    """Rows of ``weight`` at the ids in ``data``."""
    weight = tensor(weight)
    ids = data.array if isinstance(data, Tensor) else data
    return _nn.embedding(ids, weight, sparse_grad=sparse_grad)


def sequence_mask(data: Any, sequence_length: Any = None, use_sequence_length: bool = False, value: float = 0.0,
                  axis: int = 0) -> Tensor:
    """Set entries past each sequence's length to ``value`` (time on ``axis`` 0 or 1, batch on the other)."""
    data = tensor(data)
    if not use_sequence_length or sequence_length is None:
        return data
    lengths = tensor(sequence_length, data)
    xp = data.device.xp
    steps = data.shape[axis]
    with data.device.use():  # the mask is made on the data's device, whichever device is current
        t = xp.arange(steps).reshape((steps, 1) if axis == 0 else (1, steps))
        lens = lengths.array.reshape((1, -1) if axis == 0 else (-1, 1))
        keep = xp.broadcast_to((t < lens).reshape(tuple(data.shape[:2]) + (1,) * (data.ndim - 2)), data.shape)
    return _ops.where(Tensor(keep, data.device), data, value)


def masked_softmax(data: Any, mask: Any, axis: int = -1, temperature: float = 1.0, normalize: bool = True) -> Tensor:
    """Softmax along ``axis`` over the entries ``mask`` keeps; masked entries (and rows with none kept) are 0.

    See :func:`mxlite.ops.attention.masked_softmax` for the arguments and errors.
    """
    data = tensor(data)
    return _attention.masked_softmax(data, tensor(mask, data), axis, temperature, normalize)


def masked_log_softmax(data: Any, mask: Any, axis: int = -1, temperature: float = 1.0,
                       normalize: bool = True) -> Tensor:
    """Log of :func:`masked_softmax`: -inf at masked entries (and in rows with none kept)."""
    data = tensor(data)
    return _attention.masked_log_softmax(data, tensor(mask, data), axis, temperature, normalize)


def interleaved_matmul_selfatt_qk(queries_keys_values: Any, heads: int) -> Tensor:
    """Scaled self-attention scores from (seq, batch, heads * 3 * head_dim) interleaved projections:
    (batch * heads, seq, seq). See :mod:`mxlite.ops.attention`."""
    return _attention.interleaved_matmul_selfatt_qk(tensor(queries_keys_values), heads)


def interleaved_matmul_selfatt_valatt(queries_keys_values: Any, attention: Any, heads: int) -> Tensor:
    """Attention weights (batch * heads, seq, seq) applied to the interleaved values: (seq, batch, heads * head_dim)."""
    return _attention.interleaved_matmul_selfatt_valatt(*tensors(queries_keys_values, attention), heads)


def interleaved_matmul_encdec_qk(queries: Any, keys_values: Any, heads: int) -> Tensor:
    """Scaled encoder-decoder scores, queries (q_seq, batch, heads * head_dim) against the keys interleaved in
    (kv_seq, batch, heads * 2 * head_dim): (batch * heads, q_seq, kv_seq)."""
    return _attention.interleaved_matmul_encdec_qk(*tensors(queries, keys_values), heads)


def interleaved_matmul_encdec_valatt(keys_values: Any, attention: Any, heads: int) -> Tensor:
    """Attention weights (batch * heads, q_seq, kv_seq) applied to the interleaved values: (q_seq, batch,
    heads * head_dim)."""
    return _attention.interleaved_matmul_encdec_valatt(*tensors(keys_values, attention), heads)


def scaled_dot_product_attention(query: Any, key: Any, value: Any, mask: Any = None, causal: bool = False,
                                 valid_length: Any = None, dropout: float = 0.0, scale: float | None = None,
                                 training: bool | None = None) -> Tensor:
    """``softmax(query · keyᵀ · scale) · value`` over (batch, heads, T, head_dim) arrays, with masks and dropout on
    the weights, never holding the (batch, heads, Tq, Tk) scores. See
    :func:`mxlite.ops.attention.scaled_dot_product_attention` for the arguments and errors."""
    query, key, value = tensors(query, key, value)
    return _attention.scaled_dot_product_attention(query, key, value, mask=mask, causal=causal,
                                                   valid_length=valid_length, dropout=dropout, scale=scale,
                                                   training=training)


def stop_gradient(data: Any) -> Tensor:
    """``data`` cut from the graph."""
    return _nd_ops.stop_gradient(data)


def gamma(data: Any) -> Tensor:
    """Elementwise Gamma function (no gradient), computed on the host."""
    data = tensor(data)
    host = _onp.frompyfunc(math.gamma, 1, 1)(data.asnumpy()).astype(data.dtype)
    return array(host, data.device)


def save(file: Any, arr: Any, *, format: str = "npz") -> None:
    """Save a Tensor, a list of Tensors or a dict name -> Tensor to ``file``; atomic, no pickle.

    ``format="npz"`` (default) writes mxlite's ``.npz`` archive; ``format="mxnet"`` writes MXNet's
    binary NDArray format as MXNet 2.x's ``npx.save`` does (NumPy-shape V3 arrays, so 0-d arrays
    are kept; MXNet reads them back with ``npx.load`` or ``load_parameters``). Load either with :func:`load`.

    Raises:
        TypeError: ``arr`` is not a Tensor, a list of them or a dict of them, or (``"mxnet"``) a dtype
            MXNet has no type flag for.
        ValueError: an unknown ``format``.
    """
    _nd_ops.save_arrays(file, arr, format, np_shape=True, where="npx.save")


def load(file: Any, device: Any = None) -> list[Tensor] | dict[str, Tensor]:
    """Load what :func:`save` or :func:`mxlite.nd.save` wrote, or a file of MXNet's ``npx.save``/``nd.save``.

    The same as :func:`mxlite.nd.load`: the format is told by the file's first bytes.
    """
    return _nd_ops.load(file, device)


def set_np(shape: bool = True, array: bool = True, dtype: bool = False) -> None:
    """MXNet's switch to NumPy semantics; mxlite always has them, so this does nothing."""


def reset_np() -> None:
    """MXNet's switch back to 1.x semantics; a no-op in mxlite (each namespace keeps its own conventions)."""


def is_np_array() -> bool:
    """Always True: mxlite's arrays follow NumPy's semantics."""
    return True


def is_np_shape() -> bool:
    """Always True: zero-size and scalar shapes are valid."""
    return True


# MXNet 2.x's npx operators that are mx.nd's operators under snake_case names, with the same arguments
# (npx.slice(x, begin, end, step), npx.convolution(x, weight, bias, kernel=..., num_filter=...), ...); their
# results keep NumPy's face
slice = _nd_ops.slice
slice_like = _nd_ops.slice_like
reshape_like = _nd_ops.reshape_like
broadcast_like = _nd_ops.broadcast_like
arange_like = _nd_ops.arange_like
gather_nd = _nd_ops.gather_nd
shape_array = _nd_ops.shape_array
smooth_l1 = _nd_ops.smooth_l1
softsign = _nd_ops.softsign
erf = _nd_ops.erf
add_n = _nd_ops.add_n
sequence_last = _nd_ops.SequenceLast
sequence_reverse = _nd_ops.SequenceReverse
convolution = _nd_ops.Convolution
deconvolution = _nd_ops.Deconvolution
pooling = _nd_ops.Pooling
batch_norm = _nd_ops.BatchNorm
instance_norm = _nd_ops.InstanceNorm
group_norm = _nd_ops.GroupNorm
pad = _nd_ops.pad
norm = _nd_ops.norm
cast = _nd_ops.cast
__all__ += ["slice", "slice_like", "reshape_like", "broadcast_like", "arange_like", "gather_nd", "shape_array",
            "smooth_l1", "softsign", "erf", "add_n", "sequence_last", "sequence_reverse", "convolution",
            "deconvolution", "pooling", "batch_norm", "instance_norm", "group_norm", "pad", "norm", "cast"]
