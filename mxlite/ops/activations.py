"""Activation functions: ReLU as one kernel per direction, and leaky ReLU, PReLU, ELU, SELU, GELU, swish
composed from the primitive ops.

The composed ones are differentiable through the ops they are built from. Gluon's activation layers
(:mod:`mxlite.gluon.nn.activations`, ``Activation('relu')`` and the ``activation=`` of Dense and the
convolutions) and ``mx.nd.LeakyReLU`` apply them.

:func:`relu` runs ``kernels/activation.cu``: one pass forward and one backward (the composed backward,
``g * (x > 0)``, makes a mask and a product), on GPUs through CuPy and on CPU devices through the serial
host build, whose thread pool splits the elements (NumPy's elementwise passes run on one thread); the
NumPy twins serve CPU devices without the host build, with the same bits.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..autograd.tensor import Tensor, op_result
from ..device.host_buffers import host_empty
from ..device.kernels import KernelFile
from . import core
from .core import _op

__all__ = ["elu", "gelu", "leaky_relu", "prelu", "relu", "selu", "swish"]

KERNEL_FILE = "activation.cu"
KERNELS = KernelFile(KERNEL_FILE, ("float32", "float64", "float16"), ("relu_forward", "relu_backward"))
_MAX_BLOCKS = 65535
# Elements per block: on a CPU device 64 Ki (256 KiB of float32, a share of L2; a 4 M-element layer is 64
# blocks for the thread pool to deal out); on a GPU 4 Ki (256 threads, 16 elements each).
_CPU_CHUNK, _GPU_CHUNK = 1 << 16, 1 << 12


def _relu_forward_twin(x: np.ndarray) -> np.ndarray:
    """``relu_forward``: x where x > 0 or NaN, else 0."""
    return np.where((x > 0) | (x != x), x, x.dtype.type(0))


def _relu_backward_twin(g: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``relu_backward``: g where x > 0, else 0."""
    return np.where(x > 0, g, g.dtype.type(0))


def _relu_launch(device: Any, name: str, arrays: tuple[Any, ...], n: int, out: Any = None) -> Any:
    """``name<T>`` over ``n`` elements with the C-contiguous ``arrays`` (inputs), returning the output: ``out``
    (C-contiguous, the inputs' shape and dtype) when given, else a new array."""
    xp = device.xp
    first = arrays[0]
    if out is None and xp is np:  # reused memory (device/host_buffers.py: no page faults on every step)
        out = host_empty(first.shape, first.dtype)
    elif out is None:
        with device.use():
            out = xp.empty(first.shape, dtype=first.dtype)
    if n:
        base, threads = (_GPU_CHUNK if device.is_gpu else _CPU_CHUNK), KERNELS.block_for(device)
        blocks = min(_MAX_BLOCKS, -(-n // base))
        chunk = -(-n // blocks)
        function = KERNELS.function(f"{name}<{KERNELS.type_name(first.dtype)}>", device)
        with device.use():
            function((blocks,), (threads,), (*arrays, out, np.int64(n), np.int64(chunk)))
    return out


@_op("relu")
def relu(x: Tensor) -> Tensor:
    """Elementwise ``max(x, 0)`` (NaN stays NaN); the gradient is ``g`` where ``x > 0``, else 0.

    The same values as :func:`mxlite.ops.core.relu`, in one kernel pass per direction for float16,
    float32 and float64 (other dtypes go through ``ops.relu``).
    """
    device = x.device
    if not KERNELS.supports(x.dtype):
        return core.relu(x)
    xp = device.xp
    data = x._data if x._data.flags.c_contiguous else xp.ascontiguousarray(x._data)
    compiled = KERNELS.compiled_on(device)
    out = _relu_launch(device, "relu_forward", (data,), data.size) if compiled else _relu_forward_twin(data)

    def backward(g: Any) -> tuple[Any]:
        g = g if g.flags.c_contiguous and g.dtype == data.dtype else xp.ascontiguousarray(g, dtype=data.dtype)
        if compiled:
            return (_relu_launch(device, "relu_backward", (g, data), data.size),)
        return (_relu_backward_twin(g, data),)

    return op_result("relu", out, device, (x,), backward)

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _positive(x: Tensor) -> Tensor:
    """The bool mask ``x > 0`` (no gradient)."""
    return core.greater(x, 0)


def leaky_relu(x: Tensor, alpha: float) -> Tensor:
    """``x`` where positive, else ``alpha * x``."""
    return core.where(_positive(x), x, core.multiply(x, alpha))


def prelu(x: Tensor, alpha: Tensor) -> Tensor:
    """``x`` where positive, else ``alpha * x``; ``alpha`` (one value, or one per channel on axis 1) is learned."""
    if alpha.size > 1 and x.ndim >= 2:
        alpha = core.reshape(alpha, (1, alpha.size) + (1,) * (x.ndim - 2))
    return core.where(_positive(x), x, core.multiply(x, alpha))


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x`` where positive, else ``alpha * (exp(x) - 1)`` (``exp`` of a clamped value: no overflow)."""
    neg = core.multiply(core.expm1(core.minimum(x, 0.0)), alpha)
    return core.where(_positive(x), x, neg)


def selu(x: Tensor) -> Tensor:
    """Self-normalising ELU: ``scale * elu(x, alpha)`` with Klambauer et al.'s constants."""
    return core.multiply(elu(x, _SELU_ALPHA), _SELU_SCALE)


def gelu(x: Tensor, approximation: str = "erf") -> Tensor:
    """Gaussian error linear unit: ``x * Φ(x)`` (``'erf'``, exact) or its ``'tanh'`` approximation.

    Raises:
        ValueError: unknown ``approximation``.
    """
    if approximation == "erf":
        return core.multiply(core.multiply(x, 0.5), core.add(core.erf(core.multiply(x, 1 / math.sqrt(2.0))), 1.0))
    if approximation == "tanh":
        inner = core.multiply(core.add(x, core.multiply(core.power(x, 3.0), 0.044715)), math.sqrt(2 / math.pi))
        return core.multiply(core.multiply(x, 0.5), core.add(core.tanh(inner), 1.0))
    raise ValueError(f"GELU: approximation must be 'erf' or 'tanh', got {approximation!r}")


def swish(x: Tensor, beta: float = 1.0) -> Tensor:
    """``x * sigmoid(beta * x)``."""
    return core.multiply(x, core.sigmoid(core.multiply(x, beta)))
