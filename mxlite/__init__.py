"""mxlite: data-parallel training on CuPy/NumPy behind a Gluon-like API.

    import mxlite as mx
    devices = mx.gpu_devices() or [mx.cpu(0), mx.cpu(1)]
    net = mx.nn.Sequential(mx.nn.Dense(256, activation="relu"), mx.nn.Dense(10))
    net.initialize(mx.init.Xavier(), device=devices)
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 1e-3})

Names follow Apache MXNet Gluon 2.x (``device``, not ``ctx``); ``mx.gluon.*`` gives the same
objects under Gluon's spelling. See README.md and docs/design.md.
"""

import sys as _sys

from . import amp, autograd, checkpoint, datasets, gluon, image, io, kvstore, ops, optimizer, profiler, recordio
from . import initializer as init
from .arrays import (
    nd,  # MXNet's mx.nd
    np,  # MXNet's mx.np
    npx,
    util,
)
from .arrays.np import np_shape  # MXNet's mx.np_shape (a no-op scope: NumPy shapes always)
from .autograd.tensor import Tensor
from .device import Device, DeviceUnavailableError, context, cpu, current_device, gpu, gpu_devices, num_gpus
from .device.context import Context, current_context
from .device.threads import get_num_threads, set_num_threads
from .formats import mxnet_symbol as sym  # MXNet's mx.sym: load, load_json, var, Group, Symbol
from .gluon import data, loss, metric, model_zoo, nn, rnn  # also reachable as mx.nn, mx.loss, ...
from .gluon import utils as parallel  # mx.parallel: gluon.utils (split_and_load, DataParallelExecutor)
from .gluon.trainer import Trainer
from .gluon.utils import DataParallelExecutor, split_and_load, split_data
from .ops import nn_ops, random, sparse
from .ops.core import concat, stack
from .ops.creation import arange, array, empty, from_dlpack, from_numpy, full, ones, zeros
from .optimizer import lr_scheduler

NDArray = Tensor  # MXNet's name for the array type
kv = kvstore  # MXNet's mx.kv alias
img = image  # MXNet's mx.img alias
ndarray, numpy, numpy_extension = nd, np, npx  # MXNet's long names of mx.nd, mx.np, mx.npx
symbol = sym  # MXNet's long name of mx.sym

# MXNet's module paths, importable as MXNet's are: `import mxlite.ndarray as nd`, `from mxlite.lr_scheduler
# import FactorScheduler`, `from mxlite.util import use_np` give the modules above under MXNet's names.
for _path, _module in {"ndarray": nd, "numpy": np, "numpy_extension": npx, "lr_scheduler": lr_scheduler,
                       "util": util, "context": context, "metric": metric, "random": random,
                       "symbol": sym}.items():
    _sys.modules.setdefault(f"{__name__}.{_path}", _module)
del _path, _module

__version__ = "0.1.0"

__all__ = [
    "Device", "DeviceUnavailableError", "DataParallelExecutor", "NDArray", "Tensor", "Trainer",
    "amp", "arange", "array", "autograd", "checkpoint", "concat", "cpu", "current_device", "data", "datasets", "empty",
    "from_dlpack", "from_numpy", "full", "gluon", "gpu", "gpu_devices", "init", "io", "kv", "kvstore", "loss",
    "lr_scheduler", "metric", "model_zoo", "ndarray", "nn", "numpy", "numpy_extension", "rnn",
    "nn_ops", "np_shape", "num_gpus", "ones", "ops", "optimizer", "parallel", "random", "sparse", "split_and_load",
    "split_data", "stack", "util", "zeros", "Context", "context", "current_context", "nd", "np", "npx",
    "get_num_threads", "set_num_threads", "sym", "symbol", "image", "img", "recordio", "profiler",
]
