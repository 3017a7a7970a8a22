"""mxlite: data-parallel training on CuPy/NumPy behind a Gluon-like API (see README.md)."""

from . import autograd, random, sparse
from ._creation import arange, array, empty, from_dlpack, from_numpy, full, ones, zeros
from .autograd.tensor import Tensor
from .device import Device, DeviceUnavailableError, cpu, current_device, gpu, gpu_devices, num_gpus

__version__ = "0.1.0"
