"""The device layer: where arrays live, how they move, and how kernels are loaded for them.

* :mod:`.devices`: :class:`Device` (``cpu(i)``, ``gpu(i)``), NumPy/CuPy dispatch, the current device
  (MXNet 2.x's ``mx.device``);
* :mod:`.copy`: copies between devices and to the host, ordered on CUDA streams;
* :mod:`.kernels`: ``kernels/*.cu`` as CuPy RawModules on GPUs and host builds on CPU devices
  (built by :mod:`._hostcuda`);
* :mod:`.topology`: whether MPI started this process, and its rank on its node;
* :mod:`.context`: MXNet 1.x's ``mx.context`` spellings (``Context``, ``ctx=``).

Nothing here imports from the layers above (autograd, arenas, optimizers, communication, Gluon).
"""

from .copy import as_host, copy_between
from .devices import (
    EMULATE_GPUS_ENV,
    Device,
    DeviceUnavailableError,
    as_device,
    cpu,
    cuda_status,
    current_device,
    device_of,
    gpu,
    gpu_devices,
    num_gpus,
)

__all__ = ["EMULATE_GPUS_ENV", "Device", "DeviceUnavailableError", "as_device", "as_host", "copy_between", "cpu",
           "cuda_status", "current_device", "device_of", "gpu", "gpu_devices", "num_gpus"]
