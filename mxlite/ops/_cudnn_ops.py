"""Convolution and batch norm through cuDNN (:mod:`mxlite.device.cudnn`), where a device has it.

``conv.py`` and ``_norm_kernels.py`` call these first on GPUs; each returns None when cuDNN does not
take the call (not available, ``MXLITE_CUDNN=off``, a dtype other than float32/float16/bfloat16, a
graph cuDNN declines), and the caller goes on with its GEMM or kernel path. Results follow the same
contracts as those paths: convolution returns a recorded :class:`Tensor` whose backward computes
the data and weight gradients with cuDNN; batch norm returns the kernels' ``(out, saved)`` and
``(gx, ggamma, gbeta)``, so the two paths can be mixed (inference backward always runs the kernel).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..autograd.tensor import Tensor, grad_out, op_result
from ..device import cudnn as _cudnn
from ..device import device_of

__all__ = ["batch_norm_backward", "batch_norm_forward", "conv"]


def conv(name: str, x: Tensor, weight: Tensor, bias: Tensor | None, stride: tuple[int, ...],
         pad: tuple[int, ...], dilation: tuple[int, ...], out_sp: tuple[int, ...]) -> Tensor | None:
    """The convolution of ``x`` by ``weight`` (+ ``bias``) as cuDNN graphs, or None (the GEMM path runs)."""
    device = x.device
    xd, wd = x._data, weight._data
    if not 1 <= len(pad) <= 3 or not _cudnn.eligible(xd, wd) or not _cudnn.available(device):
        return None
    y_shape = (x.shape[0], weight.shape[0]) + tuple(out_sp)
    geom = (tuple(pad), tuple(stride), tuple(dilation))
    if not _cudnn.conv_plans(device, x.shape, weight.shape, y_shape, xd.dtype.name, *geom):
        return None
    xp = device.xp
    with device.use():
        xd = xd if xd.flags.c_contiguous else xp.ascontiguousarray(xd)
        wd = wd if wd.flags.c_contiguous else xp.ascontiguousarray(wd)
    out = _cudnn.conv_forward(device, xd, wd, y_shape, *geom)
    nd = len(pad)
    if bias is not None:
        with device.use():
            out += bias._data.reshape((1, y_shape[1]) + (1,) * nd)

    def backward(g: Any) -> tuple[Any, ...]:
        gx = gw = gb = None
        with device.use():
            g = xp.ascontiguousarray(g, dtype=xd.dtype)
            if x._requires_grad():
                gx = _cudnn.conv_data_grad(device, g, wd, x.shape, *geom)
            if weight._requires_grad():
                gw = _cudnn.conv_weight_grad(device, xd, g, weight.shape, *geom, out=grad_out(weight, xd.dtype))
            if bias is not None and bias._requires_grad():
                gb = g.sum(axis=(0,) + tuple(range(2, g.ndim)), out=grad_out(bias, g.dtype))
        return (gx, gw) if bias is None else (gx, gw, gb)

    parents = (x, weight) if bias is None else (x, weight, bias)
    return op_result(name, out, device, parents, backward)


def batch_norm_forward(xp: Any, x: Any, shape3: tuple[int, int, int], gamma: Any, beta: Any, running_mean: Any,
                       running_var: Any, eps: float, momentum: float, batch_stats: bool,
                       fix_gamma: bool) -> tuple[Any, Any] | None:
    """``_norm_kernels.forward_kernel``'s result computed by cuDNN, or None (the kernel runs).

    cuDNN gives the batch mean and ``inv_std``; the running averages are updated here from them, with the
    biased variance ``1 / inv_std**2 - eps``, as the kernel updates them (MXNet's formula; cuDNN's own running
    update, which the graph must declare, goes to scratch).
    """
    device = device_of(x)
    if x.dtype == np.float64 or not _cudnn.eligible(x) or not _cudnn.available(device):
        return None
    if any(a.dtype != np.float32 or not a.flags.c_contiguous for a in (beta, running_mean, running_var)):
        return None
    if not _cudnn.batch_norm_plan(device, shape3, x.dtype.name, eps, batch_stats):
        return None
    c = shape3[1]
    with device.use():
        saved = xp.empty((3, c), dtype=np.float32)  # mean, inv_std, k = gamma * inv_std (the kernel's layout)
        scale = xp.ones((c,), dtype=np.float32) if fix_gamma else gamma
        if batch_stats:
            out = _cudnn.batch_norm_forward(device, x, shape3, scale, beta, eps, saved[0], saved[1], True,
                                            running_mean, running_var, momentum)
            var = 1.0 / xp.square(saved[1]) - np.float32(eps)
            for running, new in ((running_mean, saved[0]), (running_var, var)):
                running[...] = np.float32(momentum) * running + np.float32(1.0 - momentum) * new
        else:
            saved[0] = running_mean
            saved[1] = 1.0 / xp.sqrt(running_var + np.float32(eps))
            out = _cudnn.batch_norm_forward(device, x, shape3, scale, beta, eps, saved[0], saved[1], False)
        xp.multiply(scale, saved[1], out=saved[2])
    return out, saved


def batch_norm_backward(xp: Any, g: Any, x: Any, shape3: tuple[int, int, int], saved: Any, batch_stats: bool,
                        fix_gamma: bool, ggamma: Any, gbeta: Any) -> tuple[Any, Any, Any] | None:
    """``_norm_kernels.backward_kernel``'s result computed by cuDNN (training only), or None (the kernel runs).

    ``gamma`` is ``k / inv_std`` of the forward's ``saved`` (1 with ``fix_gamma``, whose gradient is then 0).
    """
    device = device_of(x)
    if not batch_stats or saved.dtype != np.float32 or g.dtype != x.dtype or not _cudnn.available(device):
        return None
    if not _cudnn.eligible(x) or not _cudnn.batch_norm_backward_plan(device, shape3, x.dtype.name):
        return None
    c = shape3[1]
    with device.use():
        scale = xp.ones((c,), dtype=np.float32) if fix_gamma else saved[2] / saved[1]
        dscale = xp.empty((c,), dtype=np.float32) if ggamma is None or fix_gamma else ggamma
        gbeta = xp.empty((c,), dtype=np.float32) if gbeta is None else gbeta
        gx = _cudnn.batch_norm_backward(device, g, x, shape3, scale, saved[0], saved[1], dscale, gbeta)
        if fix_gamma:
            ggamma = xp.zeros((c,), dtype=np.float32) if ggamma is None else ggamma
            ggamma[...] = 0
        else:
            ggamma = dscale
    return gx, ggamma, gbeta
