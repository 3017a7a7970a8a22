"""``mx.nd``: MXNet 1.x's NDArray functions over mxlite's Tensor (``from mxlite import nd``).

Names and argument conventions are MXNet 1.x's: ``shape=``, ``ctx=``, ``dim=`` for ``concat``,
``axis=1`` as ``split``'s default, float32 results for ``argmax``/``argmin``, ``reshape`` with the
special codes 0/-1/-2/-3/-4, comparisons and logic giving 1 and 0 in the operands' dtype (not bool),
no 0-d results (``nd.sum(x)`` has shape ``(1,)``), and ``name=``/``attr=`` accepted and ignored by every
operator. Every function returns a :class:`~mxlite.Tensor` with the ``mx.nd`` face
(:class:`~mxlite.autograd.tensor.NDTensor`) and is differentiable where MXNet's is (rounding, comparisons,
index functions and random draws are not; ``random.multinomial``'s log-probability is). NumPy arrays and
Python numbers are accepted wherever a Tensor is and converted onto the device of the other operands.

This module is the namespace: each name below is an operator of :mod:`mxlite.arrays._nd_ops` (the 1.x
operator family, whose functions return plain Tensors) given the ``mx.nd`` face, and the sub-namespaces
``random``, ``linalg`` and ``contrib`` are built once, from the same operators.
"""

from __future__ import annotations

import builtins as _b
import functools
import inspect
from collections.abc import Sequence  # noqa: F401 - in mx.nd's namespace since its first release
from types import SimpleNamespace
from typing import Any

import numpy as np  # noqa: F401 - in mx.nd's namespace since its first release

from .. import autograd  # noqa: F401 - mx.nd.autograd, as MXNet 1.x
from .. import ops as _ops
from ..autograd.tensor import NDTensor, Tensor
from ..ops import linalg as _linalg
from ..ops import random as _random
from ..ops.creation import as_dtype  # noqa: F401 - in mx.nd's namespace (and __all__)
from . import _nd_ops as _f
from ._common import device_arg, reshape_nd, shape_arg, tensor, tensors, waitall  # noqa: F401 - see above

NDArray = Tensor


# -- the mx.nd face ----------------------------------------------------------------------------
# Every mx.nd function returns arrays with the nd face (NDTensor: MXNet 1.x's reshape codes in the
# method, fluent methods), as MXNet 1.x's return NDArrays. mx.np and mx.npx call the operators of
# _nd_ops unwrapped, so their results keep NumPy's face.
def _nd_out(value: Any, args: tuple, kwargs: dict, keep_0d: bool = False) -> Any:
    """``value`` (a Tensor, or a list/tuple/dict of them) with the nd face; an input returned as is is
    given the face as a view (:meth:`~mxlite.Tensor.as_nd_ndarray`), never changed in place. A new 0-d
    result has shape ``(1,)``, as MXNet 1.x (``keep_0d``: the creation functions keep the shape asked for)."""
    if value.__class__ is Tensor:
        if keep_0d or _b.any(value is a for a in args) or _b.any(value is v for v in kwargs.values()):
            return value.as_nd_ndarray()
        return _ops.nd_shape(value)
    if isinstance(value, list):
        return [_nd_out(v, args, kwargs, keep_0d) for v in value]
    if isinstance(value, tuple):
        return tuple(_nd_out(v, args, kwargs, keep_0d) for v in value)
    if isinstance(value, dict):
        return {k: _nd_out(v, args, kwargs, keep_0d) for k, v in value.items()}
    return value


def _takes(fn: Any, parameter: str) -> bool:
    """Whether ``fn`` declares a parameter named ``parameter``."""
    try:
        return parameter in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _nd_function(fn: Any, keep_0d: bool = False) -> Any:
    """``fn`` as an ``mx.nd`` function: results with the nd face (and no 0-d arrays unless ``keep_0d``), and
    MXNet's ``name=``/``attr=`` (which 1.x symbol code passes to every operator) accepted and ignored."""
    ignored = tuple(p for p in ("name", "attr") if not _takes(fn, p))

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for key in ignored:
            kwargs.pop(key, None)
        return _nd_out(fn(*args, **kwargs), args, kwargs, keep_0d)

    return wrapper


def _creation(fn: Any) -> Any:
    """``fn`` (a creation function) as an ``mx.nd`` function: its result has the shape asked for, 0-d included."""
    return _nd_function(fn, keep_0d=True)


# -- the operators -----------------------------------------------------------------------------
# (in _nd_ops's order: creation, samplers, elementwise, reductions, shapes, files, linear algebra, nn, contrib)
save = _f.save
reset_arrays = _f.reset_arrays

array = _creation(_f.array)
zeros = _creation(_f.zeros)
ones = _creation(_f.ones)
full = _creation(_f.full)
empty = _creation(_f.empty)
arange = _creation(_f.arange)
linspace = _creation(_f.linspace)
eye = _creation(_f.eye)
zeros_like = _creation(_f.zeros_like)
ones_like = _creation(_f.ones_like)
empty_like = _creation(_f.empty_like)
full_like = _creation(_f.full_like)
sample_uniform = _nd_function(_f.sample_uniform)
sample_normal = _nd_function(_f.sample_normal)
sample_gamma = _nd_function(_f.sample_gamma)
sample_exponential = _nd_function(_f.sample_exponential)
sample_poisson = _nd_function(_f.sample_poisson)
sample_negative_binomial = _nd_function(_f.sample_negative_binomial)
sample_generalized_negative_binomial = _nd_function(_f.sample_generalized_negative_binomial)
sample_multinomial = _nd_function(_f.sample_multinomial)
exp = _nd_function(_f.exp)
log = _nd_function(_f.log)
sqrt = _nd_function(_f.sqrt)
square = _nd_function(_f.square)
tanh = _nd_function(_f.tanh)
sigmoid = _nd_function(_f.sigmoid)
relu = _nd_function(_f.relu)
abs = _nd_function(_f.abs)  # noqa: A001 - MXNet's name
negative = _nd_function(_f.negative)
sin = _nd_function(_f.sin)
cos = _nd_function(_f.cos)
tan = _nd_function(_f.tan)
arcsin = _nd_function(_f.arcsin)
arccos = _nd_function(_f.arccos)
arctan = _nd_function(_f.arctan)
sinh = _nd_function(_f.sinh)
cosh = _nd_function(_f.cosh)
arcsinh = _nd_function(_f.arcsinh)
arccosh = _nd_function(_f.arccosh)
arctanh = _nd_function(_f.arctanh)
log1p = _nd_function(_f.log1p)
expm1 = _nd_function(_f.expm1)
log2 = _nd_function(_f.log2)
log10 = _nd_function(_f.log10)
reciprocal = _nd_function(_f.reciprocal)
rsqrt = _nd_function(_f.rsqrt)
cbrt = _nd_function(_f.cbrt)
erf = _nd_function(_f.erf)
sign = _nd_function(_f.sign)
floor = _nd_function(_f.floor)
ceil = _nd_function(_f.ceil)
trunc = _nd_function(_f.trunc)
fix = _nd_function(_f.fix)
rint = _nd_function(_f.rint)
round = _nd_function(_f.round)  # noqa: A001 - MXNet's name
isnan = _nd_function(_f.isnan)
isinf = _nd_function(_f.isinf)
isfinite = _nd_function(_f.isfinite)
add = _nd_function(_f.add)
subtract = _nd_function(_f.subtract)
multiply = _nd_function(_f.multiply)
divide = _nd_function(_f.divide)
power = _nd_function(_f.power)
maximum = _nd_function(_f.maximum)
minimum = _nd_function(_f.minimum)
mod = _nd_function(_f.mod)
hypot = _nd_function(_f.hypot)
arctan2 = _nd_function(_f.arctan2)
true_divide = _nd_function(_f.true_divide)
equal = _nd_function(_f.equal)
not_equal = _nd_function(_f.not_equal)
greater = _nd_function(_f.greater)
greater_equal = _nd_function(_f.greater_equal)
less = _nd_function(_f.less)
less_equal = _nd_function(_f.less_equal)
logical_and = _nd_function(_f.logical_and)
logical_or = _nd_function(_f.logical_or)
logical_xor = _nd_function(_f.logical_xor)
logical_not = _nd_function(_f.logical_not)
lesser = _nd_function(_f.lesser)
lesser_equal = _nd_function(_f.lesser_equal)
clip = _nd_function(_f.clip)
where = _nd_function(_f.where)
cast = _nd_function(_f.cast)
identity = _nd_function(_f.identity)
copy = _nd_function(_f.copy)
stop_gradient = _nd_function(_f.stop_gradient)
BlockGrad = _nd_function(_f.BlockGrad)
sum = _nd_function(_f.sum)  # noqa: A001 - MXNet's name
mean = _nd_function(_f.mean)
max = _nd_function(_f.max)  # noqa: A001 - MXNet's name
min = _nd_function(_f.min)  # noqa: A001 - MXNet's name
prod = _nd_function(_f.prod)
nansum = _nd_function(_f.nansum)
sum_axis = _nd_function(_f.sum_axis)
norm = _nd_function(_f.norm)
argmax = _nd_function(_f.argmax)
argmin = _nd_function(_f.argmin)
argsort = _nd_function(_f.argsort)
sort = _nd_function(_f.sort)
topk = _nd_function(_f.topk)
reshape = _nd_function(_f.reshape)
reshape_like = _nd_function(_f.reshape_like)
flatten = _nd_function(_f.flatten)
Flatten = _nd_function(_f.Flatten)
transpose = _nd_function(_f.transpose)
swapaxes = _nd_function(_f.swapaxes)
SwapAxis = _nd_function(_f.SwapAxis)
expand_dims = _nd_function(_f.expand_dims)
squeeze = _nd_function(_f.squeeze)
tile = _nd_function(_f.tile)
repeat = _nd_function(_f.repeat)
flip = _nd_function(_f.flip)
reverse = _nd_function(_f.reverse)
concat = _nd_function(_f.concat)
Concat = _nd_function(_f.Concat)
concatenate = _nd_function(_f.concatenate)
stack = _nd_function(_f.stack)
split = _nd_function(_f.split)
SliceChannel = _nd_function(_f.SliceChannel)
slice_axis = _nd_function(_f.slice_axis)
slice = _nd_function(_f.slice)  # noqa: A001 - MXNet's name
crop = _nd_function(_f.crop)
slice_like = _nd_function(_f.slice_like)
take = _nd_function(_f.take)
pick = _nd_function(_f.pick)
one_hot = _nd_function(_f.one_hot)
load = _creation(_f.load)
dot = _nd_function(_f.dot)
batch_dot = _nd_function(_f.batch_dot)
matmul = _nd_function(_f.matmul)
Activation = _nd_function(_f.Activation)
LeakyReLU = _nd_function(_f.LeakyReLU)
FullyConnected = _nd_function(_f.FullyConnected)
Dropout = _nd_function(_f.Dropout)
relu6 = _nd_function(_f.relu6)
smooth_l1 = _nd_function(_f.smooth_l1)
SequenceMask = _nd_function(_f.SequenceMask)
SequenceLast = _nd_function(_f.SequenceLast)
SequenceReverse = _nd_function(_f.SequenceReverse)
softmax = _nd_function(_f.softmax)
log_softmax = _nd_function(_f.log_softmax)
softmin = _nd_function(_f.softmin)
SoftmaxActivation = _nd_function(_f.SoftmaxActivation)
softmax_cross_entropy = _nd_function(_f.softmax_cross_entropy)
L2Normalization = _nd_function(_f.L2Normalization)
moments = _nd_function(_f.moments)
InstanceNorm = _nd_function(_f.InstanceNorm)
GroupNorm = _nd_function(_f.GroupNorm)
LayerNorm = _nd_function(_f.LayerNorm)
BatchNorm = _nd_function(_f.BatchNorm)
Embedding = _nd_function(_f.Embedding)
Convolution = _nd_function(_f.Convolution)
Deconvolution = _nd_function(_f.Deconvolution)
Pooling = _nd_function(_f.Pooling)
UpSampling = _nd_function(_f.UpSampling)
depth_to_space = _nd_function(_f.depth_to_space)
space_to_depth = _nd_function(_f.space_to_depth)
pad = _nd_function(_f.pad)
gather_nd = _nd_function(_f.gather_nd)
batch_take = _nd_function(_f.batch_take)
arange_like = _nd_function(_f.arange_like)
shape_array = _nd_function(_f.shape_array)
size_array = _nd_function(_f.size_array)
argmax_channel = _nd_function(_f.argmax_channel)
diag = _nd_function(_f.diag)
add_n = _nd_function(_f.add_n)
ElementWiseSum = _nd_function(_f.ElementWiseSum)
split_v2 = _nd_function(_f.split_v2)
log_sigmoid = _nd_function(_f.log_sigmoid)
mish = _nd_function(_f.mish)
softsign = _nd_function(_f.softsign)
hard_sigmoid = _nd_function(_f.hard_sigmoid)
rcbrt = _nd_function(_f.rcbrt)
degrees = _nd_function(_f.degrees)
radians = _nd_function(_f.radians)
max_axis = _nd_function(_f.max_axis)
min_axis = _nd_function(_f.min_axis)
nanprod = _nd_function(_f.nanprod)
Cast = _nd_function(_f.Cast)
Reshape = _nd_function(_f.Reshape)
div_sqrt_dim = _nd_function(_f.div_sqrt_dim)
BilinearResize2D = _nd_function(_f.BilinearResize2D)

# MXNet 1.x's broadcast_* and elemwise_* names of the binary operators
broadcast_to = _nd_function(_f.broadcast_to)
broadcast_like = _nd_function(_f.broadcast_like)
broadcast_axis = _nd_function(_f.broadcast_axis)
broadcast_axes = _nd_function(_f.broadcast_axes)
broadcast_add = _nd_function(_f.add)
broadcast_div = _nd_function(_f.divide)
broadcast_equal = _nd_function(_f.equal)
broadcast_greater = _nd_function(_f.greater)
broadcast_greater_equal = _nd_function(_f.greater_equal)
broadcast_hypot = _nd_function(_f.hypot)
broadcast_lesser = _nd_function(_f.less)
broadcast_lesser_equal = _nd_function(_f.less_equal)
broadcast_logical_and = _nd_function(_f.logical_and)
broadcast_logical_or = _nd_function(_f.logical_or)
broadcast_logical_xor = _nd_function(_f.logical_xor)
broadcast_maximum = _nd_function(_f.maximum)
broadcast_minimum = _nd_function(_f.minimum)
broadcast_minus = _nd_function(_f.subtract)
broadcast_mod = _nd_function(_f.mod)
broadcast_mul = _nd_function(_f.multiply)
broadcast_not_equal = _nd_function(_f.not_equal)
broadcast_plus = _nd_function(_f.add)
broadcast_power = _nd_function(_f.power)
broadcast_sub = _nd_function(_f.subtract)
elemwise_add = _nd_function(_f.add)
elemwise_div = _nd_function(_f.divide)
elemwise_equal = _nd_function(_f.equal)
elemwise_greater = _nd_function(_f.greater)
elemwise_greater_equal = _nd_function(_f.greater_equal)
elemwise_hypot = _nd_function(_f.hypot)
elemwise_lesser = _nd_function(_f.less)
elemwise_lesser_equal = _nd_function(_f.less_equal)
elemwise_logical_and = _nd_function(_f.logical_and)
elemwise_logical_or = _nd_function(_f.logical_or)
elemwise_logical_xor = _nd_function(_f.logical_xor)
elemwise_maximum = _nd_function(_f.maximum)
elemwise_minimum = _nd_function(_f.minimum)
elemwise_mod = _nd_function(_f.mod)
elemwise_mul = _nd_function(_f.multiply)
elemwise_not_equal = _nd_function(_f.not_equal)
elemwise_power = _nd_function(_f.power)
elemwise_sub = _nd_function(_f.subtract)

# MXNet 1.x's flat names of the linear-algebra operators (linalg_gemm2, linalg_potrf, ...)
linalg_det = _nd_function(_linalg.det)
linalg_extractdiag = _nd_function(_linalg.extractdiag)
linalg_extracttrian = _nd_function(_linalg.extracttrian)
linalg_gemm = _nd_function(_linalg.gemm)
linalg_gemm2 = _nd_function(_linalg.gemm2)
linalg_inverse = _nd_function(_linalg.inverse)
linalg_makediag = _nd_function(_linalg.makediag)
linalg_maketrian = _nd_function(_linalg.maketrian)
linalg_potrf = _nd_function(_linalg.potrf)
linalg_potri = _nd_function(_linalg.potri)
linalg_slogdet = _nd_function(_linalg.slogdet)
linalg_sumlogdiag = _nd_function(_linalg.sumlogdiag)
linalg_syrk = _nd_function(_linalg.syrk)
linalg_trmm = _nd_function(_linalg.trmm)
linalg_trsm = _nd_function(_linalg.trsm)

# MXNet 1.x's flat names of the samplers: mx.nd.uniform(shape=(2, 3)) is mx.nd.random.uniform(shape=(2, 3));
# the operator random_exponential takes the rate (lam), nd.random.exponential the scale
uniform = _nd_function(_f.uniform)
normal = _nd_function(_f.normal)
random_exponential = _nd_function(_f.exponential_rate)
random_gamma = _nd_function(_f.gamma)
random_generalized_negative_binomial = _nd_function(_f.generalized_negative_binomial)
random_negative_binomial = _nd_function(_f.negative_binomial)
random_normal = _nd_function(_f.normal)
random_poisson = _nd_function(_f.poisson)
random_randint = _nd_function(_f.randint)
random_uniform = _nd_function(_f.uniform)
shuffle = _nd_function(_random.shuffle)


# -- the sub-namespaces ------------------------------------------------------------------------
# mx.nd.random: MXNet 1.x's samplers (numbers or arrays of parameters, ``shape`` draws, ``ctx``/``out``)
random = SimpleNamespace(
    uniform=_nd_function(_f.uniform), normal=_nd_function(_f.normal), randint=_nd_function(_f.randint),
    randn=_nd_function(_f.randn), gamma=_nd_function(_f.gamma), exponential=_nd_function(_f.exponential),
    poisson=_nd_function(_f.poisson), negative_binomial=_nd_function(_f.negative_binomial),
    generalized_negative_binomial=_nd_function(_f.generalized_negative_binomial),
    multinomial=_nd_function(_f.multinomial), shuffle=_nd_function(_random.shuffle), seed=_random.seed,
    uniform_like=_nd_function(_f.uniform_like), normal_like=_nd_function(_f.normal_like),
    gamma_like=_nd_function(_f.gamma_like), exponential_like=_nd_function(_f.exponential_like),
    poisson_like=_nd_function(_f.poisson_like), negative_binomial_like=_nd_function(_f.negative_binomial_like),
    generalized_negative_binomial_like=_nd_function(_f.generalized_negative_binomial_like))
# mx.nd.linalg: MXNet 1.x's linear-algebra operators (gemm, potrf, trsm, ...), differentiable
linalg = SimpleNamespace(**{name: _nd_function(getattr(_linalg, name)) for name in _linalg.ND_LINALG})
# mx.nd.contrib: the contrib operators Gluon 1.x model code uses most
contrib = SimpleNamespace(
    div_sqrt_dim=div_sqrt_dim, arange_like=arange_like, BilinearResize2D=BilinearResize2D,
    interleaved_matmul_selfatt_qk=_nd_function(_f.interleaved_matmul_selfatt_qk),
    interleaved_matmul_selfatt_valatt=_nd_function(_f.interleaved_matmul_selfatt_valatt),
    interleaved_matmul_encdec_qk=_nd_function(_f.interleaved_matmul_encdec_qk),
    interleaved_matmul_encdec_valatt=_nd_function(_f.interleaved_matmul_encdec_valatt))

# MXNet 1.x NDArray's fluent methods (``x.softmax(axis=1)`` is ``nd.softmax(x, axis=1)``), for the names a
# Tensor does not already have as a method.
NDTensor.fluent.update(
    reshape_like=reshape_like, broadcast_axes=broadcast_axes, broadcast_like=broadcast_like, pad=pad, split=split,
    slice=slice, slice_like=slice_like, pick=pick, topk=topk, argmax_channel=argmax_channel, shape_array=shape_array,
    size_array=size_array, depth_to_space=depth_to_space, space_to_depth=space_to_depth, nansum=nansum,
    nanprod=nanprod, rint=rint, fix=fix, tan=tan, arcsin=arcsin, arccos=arccos, arctan=arctan, degrees=degrees,
    radians=radians, sinh=sinh, cosh=cosh, arcsinh=arcsinh, arccosh=arccosh, arctanh=arctanh, rsqrt=rsqrt,
    cbrt=cbrt, rcbrt=rcbrt, softmax=softmax, log_softmax=log_softmax, softmin=softmin, diag=diag,
    broadcast_axis=broadcast_axis)

# what ``from mxlite.nd import *`` brings: the operators, the sub-namespaces and the 1.x names above, not the
# helpers this module is built with
__all__ = sorted(name for name in dir() if not name.startswith("_") and name not in (
    "annotations", "Any", "Sequence", "SimpleNamespace", "np", "Tensor", "device_arg", "reshape_nd", "shape_arg",
    "tensor", "tensors", "NDTensor", "functools", "inspect"))
