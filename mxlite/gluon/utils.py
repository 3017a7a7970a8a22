"""Gluon's ``utils``: splitting batches over devices, a data-parallel executor, global-norm clipping, downloads.

``split_and_load(batch, devices)`` cuts a batch along ``batch_axis`` into one slice per
device (optionally weighted by each device's ``workload``) and copies each slice there. The
model's parameters are mirrored on every device, so each device runs forward and backward
on its slice; the Trainer then sums the gradients.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import autograd
from ..autograd.tensor import Tensor
from ..comm.buckets import wait_for_reductions
from ..device import Device, as_device
from ..device.context import pick_devices
from ..device.copy import as_host
from ..ops.creation import array
from .data.download import check_sha1, download
from .rnn.rnn_layer import fused_layout, split_fused

__all__ = ["DataParallelExecutor", "check_sha1", "clip_global_norm", "download", "slice_sizes", "split_and_load",
           "split_rnn_params",
           "split_data"]


def slice_sizes(batch: int, num_slice: int, even_split: bool = True,
                workload: Sequence[float] | None = None) -> list[int]:
    """Sizes of the slices a batch of ``batch`` samples is cut into.

    Without ``workload``: equal slices; with ``even_split=False`` the first ``batch % num_slice``
    slices take one sample more, as ``numpy.array_split`` and MXNet 2.x do (10 into 3: [4, 3, 3]).
    With ``workload``: slice ``i`` gets ``round(w_i * batch / sum(w))`` samples and the last gets
    what remains.

    Raises:
        ValueError: ``num_slice`` < 1, a batch that does not split evenly with
            ``even_split=True``, a workload with a negative, infinite or NaN entry, a zero
            sum or the wrong length, or any slice that would be empty.
    """
    if num_slice < 1:
        raise ValueError(f"num_slice must be >= 1, got {num_slice}")
    if workload is not None:
        w = [float(x) for x in workload]
        if len(w) != num_slice:
            raise ValueError(f"workload has {len(w)} entries for {num_slice} devices")
        if not all(math.isfinite(x) for x in w):
            raise ValueError(f"workload entries must be finite numbers, got {list(workload)}")
        if any(x < 0 for x in w) or sum(w) <= 0:
            raise ValueError(f"workload must be non-negative with a positive sum, got {list(workload)}")
        total = sum(w)
        sizes = [int(round(x * batch / total)) for x in w[:-1]]
        sizes.append(batch - sum(sizes))
    else:
        if batch < num_slice:
            raise ValueError(f"too many slices for the data: batch of {batch} cannot be split into {num_slice} "
                             "non-empty slices; use a larger batch or fewer devices")
        if even_split and batch % num_slice:
            raise ValueError(f"data with shape[batch_axis]={batch} cannot be evenly split into {num_slice} slices; "
                             "use a batch size that's a multiple of the number of devices, or set even_split=False")
        step, extra = divmod(batch, num_slice)
        sizes = [step + 1] * extra + [step] * (num_slice - extra)
    if any(s <= 0 for s in sizes):
        raise ValueError(f"splitting a batch of {batch} by workload {list(workload or [])} gives slice sizes "
                         f"{sizes}: every device needs at least one sample")
    return sizes


def split_data(data: Any, num_slice: int, batch_axis: int = 0, even_split: bool = True,
               workload: Sequence[float] | None = None) -> list[Any]:
    """Cut ``data`` (Tensor, NumPy or CuPy array, or nested list) into ``num_slice`` slices along ``batch_axis``.

    Slices are views where the input allows (a nested list becomes a NumPy array first); see
    :func:`slice_sizes` for sizes and errors. A negative ``batch_axis`` counts from the last axis.

    Raises:
        ValueError: ``batch_axis`` out of range for ``data``'s shape, and :func:`slice_sizes`' errors.
    """
    if not hasattr(data, "shape"):
        data = as_host(data)
    shape = tuple(data.shape)
    if isinstance(batch_axis, bool) or not isinstance(batch_axis, (int, np.integer)):
        raise TypeError(f"batch_axis must be an int, got {type(batch_axis).__name__}: {batch_axis!r}")
    if not -len(shape) <= batch_axis < len(shape):
        raise ValueError(f"batch_axis {batch_axis} is out of range for data of shape {shape}")
    batch_axis %= len(shape)
    sizes = slice_sizes(shape[batch_axis], num_slice, even_split, workload)
    if num_slice == 1:
        return [data]
    slices = []
    start = 0
    for size in sizes:
        index = [slice(None)] * len(shape)
        index[batch_axis] = slice(start, start + size)
        slices.append(data[tuple(index)])
        start += size
    return slices


def split_and_load(data: Any, device_list: Sequence[Device] | Device | None = None, batch_axis: int = 0,
                   even_split: bool = True, workload: Sequence[float] | None = None,
                   ctx_list: Sequence[Device] | Device | None = None) -> list[Tensor]:
    """Split ``data`` along ``batch_axis`` and copy slice ``i`` to ``device_list[i]``.

    ``ctx_list`` is MXNet 1.x's name for ``device_list``.

    Args:
        data: a Tensor, a NumPy or CuPy array (a CuPy array is sliced on its GPU and each slice
            copied from there), another device array with ``get()`` (read to the host first),
            or a nested list.
        device_list: the devices, one slice each.
        workload: relative speed of each device (slice sizes proportional to it).

    Raises:
        ValueError: as :func:`split_data`, an empty device list, or a device listed twice
            (two slices on one device would run forward on the same parameter mirror, and
            the second backward would overwrite the first one's gradient).
    """
    device_list = pick_devices(device_list, ctx_list, where="split_and_load")
    if device_list is None:
        raise TypeError("split_and_load: give the devices (device_list=, or ctx_list= as in MXNet 1.x)")
    if isinstance(device_list, (Device, str)):
        device_list = [device_list]
    devices = [as_device(d) for d in device_list]
    if not devices:
        raise ValueError("split_and_load: device_list is empty")
    twice = sorted({str(d) for d in devices if devices.count(d) > 1})
    if twice:
        raise ValueError(f"split_and_load: device_list {devices} names {', '.join(twice)} more than once; "
                         "list each device once")
    if not isinstance(data, (Tensor, np.ndarray)) and not hasattr(data, "__cuda_array_interface__"):
        data = as_host(data)  # np.asarray would raise on a device array
    if len(devices) == 1:
        return [data.to(devices[0]) if isinstance(data, Tensor) else array(data, devices[0], data.dtype)]
    parts = split_data(data, len(devices), batch_axis, even_split, workload)
    out = []
    for part, dev in zip(parts, devices):
        out.append(part.to(dev) if isinstance(part, Tensor) else array(part, dev, part.dtype))
    return out


class DataParallelExecutor:
    """Runs one model on several devices, one slice of each batch per device.

    In the spirit of MXNet's ``DataParallelExecutorManager``: ``forward_backward`` splits a
    batch by ``workload``, runs forward and backward on every device (recording), and updates
    ``metric`` with every device's outputs; ``step`` then applies the trainer; ``get_params``
    returns each parameter averaged over its device mirrors (equal to any mirror while the
    trainer keeps them in sync).

    Args:
        net: an initialised Block whose parameters live on every device in ``devices``.
        loss_fn: ``loss_fn(output, label) -> per-sample loss``.
        devices: the devices, in order.
        trainer: a Trainer over ``net``'s parameters (optional: needed for ``step``).
        workload: relative speed per device (slice sizes proportional to it).
        metric: an EvalMetric updated with ``(labels, outputs)`` after each forward.
    """

    def __init__(self, net: Any, loss_fn: Callable, devices: Sequence[Device], trainer: Any = None,
                 workload: Sequence[float] | None = None, metric: Any = None) -> None:
        self.net = net
        self.loss_fn = loss_fn
        self.devices = [as_device(d) for d in devices]
        self.trainer = trainer
        self.workload = list(workload) if workload is not None else None
        self.metric = metric
        self.last_outputs: list[Tensor] = []
        self.last_losses: list[Tensor] = []

    def forward_backward(self, data: Any, label: Any) -> float:
        """Forward and backward on every device; returns the batch's summed loss."""
        even = self.workload is None and len(data) % len(self.devices) == 0
        xs = split_and_load(data, self.devices, even_split=even, workload=self.workload)
        ys = split_and_load(label, self.devices, even_split=even, workload=self.workload)
        with autograd.record():
            outputs = [self.net(x) for x in xs]
            losses = [self.loss_fn(o, y) for o, y in zip(outputs, ys)]
        autograd.backward(losses)
        self.last_outputs, self.last_losses = outputs, losses
        if self.metric is not None:
            self.metric.update(ys, outputs)
        return float(sum(loss.sum().item() for loss in losses))

    def step(self, batch_size: int) -> None:
        """Apply the trainer (sum gradients over devices, update every mirror)."""
        if self.trainer is None:
            raise RuntimeError("DataParallelExecutor.step needs a trainer (pass trainer=...)")
        self.trainer.step(batch_size)

    def get_params(self) -> dict[str, np.ndarray]:
        """Every parameter averaged over its mirrors, as NumPy arrays by structural name."""
        out = {}
        for name, param in self.net.collect_params().items():
            mirrors = [d.asnumpy() for d in param.list_data()]
            out[name] = np.mean(np.stack(mirrors), axis=0).astype(mirrors[0].dtype)
        return out

    def copy_params_to(self, arg_params: dict[str, np.ndarray]) -> None:
        """Write the averaged parameters into ``arg_params`` (MXNet's ``copy_to``)."""
        arg_params.update(self.get_params())


def clip_global_norm(arrays: Sequence[Tensor], max_norm: float, check_isfinite: bool = True) -> float:
    """Rescale ``arrays`` in place so that their joint L2 norm is at most ``max_norm`` (MXNet's).

    The global norm is ``sqrt(sum over arrays of sum(a**2))``; every array is multiplied by
    ``min(1, max_norm / (norm + 1e-8))``. The squared sums are computed on each array's device,
    in float64 on the host only once per device, so the whole call synchronises each device once.

    Gradients between backward and ``trainer.step``: with the Trainer's default ``overlap=True`` they
    hold the sums over devices, which on GPUs may still be running when backward returns; the call
    first makes every device wait for them (however the arrays were fetched, before backward too), so
    it reads and scales the sums. With ``overlap=False`` each device holds its own gradient until
    ``trainer.allreduce_grads()``, as in MXNet; so does each process where the step's CUDA graph sums
    the gradients (one GPU per process, hybridized blocks), which a UserWarning says once per process.
    Calling ``trainer.allreduce_grads()`` first, then this, then ``trainer.update`` clips the sums in
    every case.

    Args:
        arrays: the Tensors (typically gradients), on any devices.
        max_norm: the largest joint norm to keep (> 0).
        check_isfinite: warn (UserWarning) when the norm is NaN or infinite; the arrays then
            hold undefined values (NaN), as in MXNet.

    Returns:
        The global norm before clipping, as a Python float.

    Raises:
        ValueError: ``arrays`` is empty or ``max_norm`` is not a positive number.
        TypeError: an entry is not a Tensor.
    """
    arrays = list(arrays)
    if not arrays:
        raise ValueError("clip_global_norm needs at least one array, got none")
    if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float)) or not max_norm > 0:
        raise ValueError(f"max_norm must be a number > 0, got {max_norm!r}")
    bad = [type(a).__name__ for a in arrays if not isinstance(a, Tensor)]
    if bad:
        raise TypeError(f"clip_global_norm takes mxlite Tensors, got {', '.join(sorted(set(bad)))}")
    wait_for_reductions()  # the arrays may be gradients whose overlapped sums still run (read and scaled here)
    per_device: dict[Any, list[Any]] = {}
    for a in arrays:
        xp = a.device.xp
        with a.device.use():
            data = a.array
            per_device.setdefault(a.device, []).append(xp.sum(xp.square(data.astype(xp.float64, copy=False))))
    total = 0.0
    for device, sums in per_device.items():
        with device.use():
            total += float(as_host(device.xp.stack(sums)).sum())  # one transfer per device
    norm = math.sqrt(total)
    if check_isfinite and not math.isfinite(norm):
        warnings.warn("nan or inf is detected. Clipping results will be undefined.", UserWarning, stacklevel=2)
    scale = max_norm / (norm + 1e-8)
    if not scale >= 1.0:  # also NaN: the arrays become NaN, as MXNet's
        for a in arrays:
            with a.device.use():
                values = a.array
                values *= values.dtype.type(scale)
    return norm


def split_rnn_params(param: Any, mode: str, num_layers: int, input_size: int, hidden_size: int,
                     bidirectional: bool = False, projection_size: int | None = None) -> dict[str, Any]:
    """MXNet 2.x's fused recurrent-layer vector (``layer.rnn_param``) split into its weights and biases by name.

    ``{'l0_i2h_weight': (gates * hidden_size, input_size), 'l0_h2h_weight': ..., 'r0_...' (bidirectional),
    'l0_i2h_bias': ..., ...}``: slices of ``param`` (a 1-D Tensor or NumPy array), in MXNet's packing (see
    :func:`~mxlite.gluon.rnn.rnn_layer.fused_layout`); the names are those of mxlite's layer parameters.

    Args:
        param: the flat vector. mode: 'rnn_relu', 'rnn_tanh', 'lstm' or 'gru'.
        num_layers, input_size, hidden_size, bidirectional: the layer's configuration.
        projection_size: MXNet's LSTMP; not supported.

    Raises:
        ValueError: an unknown ``mode``, or a ``param`` whose length is not the configuration's.
        NotImplementedError: ``projection_size`` given.
    """
    if projection_size:
        raise NotImplementedError("split_rnn_params: projection_size (LSTMP) is not supported by mxlite")
    modes = ("rnn_relu", "rnn_tanh", "lstm", "gru")
    if mode not in modes:
        raise ValueError(f"split_rnn_params: mode must be one of {modes}, got {mode!r}")
    layout = fused_layout(mode, num_layers, input_size, hidden_size, bidirectional)
    total = sum(int(np.prod(shape)) for _, shape in layout)
    if tuple(param.shape) != (total,):
        raise ValueError(f"split_rnn_params: a {mode} layer with num_layers={num_layers}, input_size={input_size}, "
                         f"hidden_size={hidden_size}, bidirectional={bidirectional} packs {total} values, got a "
                         f"param of shape {tuple(param.shape)}")
    return split_fused(param, layout)
