"""Gluon's spelling of the public API: ``mx.gluon.nn``, ``mx.gluon.loss``, ``mx.gluon.Trainer`` ...

Every name here is the same object as its top-level counterpart, except ``gluon.utils``, which
also holds :func:`clip_global_norm`.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from . import data, loss, metric, model_zoo, nn, rnn, trainer
from .autograd.tensor import Tensor
from .device.copy import as_host
from .nn import Block, Constant, HybridBlock, Parameter, block, parameter  # and MXNet's gluon.block/.parameter
from .parallel import split_and_load, split_data
from .trainer import Trainer


def clip_global_norm(arrays: Sequence[Tensor], max_norm: float, check_isfinite: bool = True) -> float:
    """Rescale ``arrays`` in place so that their joint L2 norm is at most ``max_norm`` (MXNet's).

    The global norm is ``sqrt(sum over arrays of sum(a**2))``; every array is multiplied by
    ``min(1, max_norm / (norm + 1e-8))``. The squared sums are computed on each array's device,
    in float64 on the host only once per device, so the whole call synchronises each device once.

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
    per_device: dict[Any, list[Any]] = {}
    for a in arrays:
        xp = a.device.xp
        with a.device.use():
            data = a._data
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
                a._data *= a._data.dtype.type(scale)
    return norm


utils = SimpleNamespace(split_and_load=split_and_load, split_data=split_data, clip_global_norm=clip_global_norm,
                        download=data.download, check_sha1=data.check_sha1)

# ``from mxlite.gluon.data.vision import transforms`` and the like, as with MXNet's gluon package.
for _name, _module in {"data": data, "data.vision": data.vision, "data.vision.transforms": data.vision.transforms,
                       "data.vision.datasets": data.vision.datasets, "data.batchify": data.batchify,
                       "data.sampler": data.sampler, "data.dataset": data.dataset, "data.dataloader": data.dataloader,
                       "nn": nn, "loss": loss, "metric": metric, "utils": utils, "rnn": rnn,
                       "model_zoo": model_zoo, "model_zoo.vision": model_zoo.vision, "block": block,
                       "parameter": parameter, "trainer": trainer}.items():
    sys.modules.setdefault(f"{__name__}.{_name}", _module)  # type: ignore[arg-type]

__all__ = ["Block", "Constant", "HybridBlock", "Parameter", "Trainer", "block", "clip_global_norm", "data", "loss",
           "metric", "model_zoo", "nn", "parameter", "rnn", "trainer", "utils"]
