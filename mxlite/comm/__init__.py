"""Communicators: sum, broadcast and gather arrays over local device mirrors and over processes.

One interface (:class:`~mxlite.comm.base.Communicator`), three implementations:

* :class:`LocalCommunicator` — one process, any number of local devices (CPU devices reduce
  with NumPy; GPUs with peer copies, the fallback when NCCL is missing);
* :class:`MpiCommunicator` — several processes, bootstrapped and carried by MPI (mpi4py):
  the local devices are reduced first, then the host buffers travel over MPI;
* :class:`NcclCommunicator` — GPUs, in one process (``initAll``) or one GPU per process
  (the NCCL unique id broadcast over MPI).

:func:`create` picks one for a kvstore type and a device list. :mod:`mxlite.comm.buckets` cuts
a gradient arena into zero-copy buckets reduced as soon as backward has produced them.
Every communicator also reduce-scatters and all-gathers flat buffers cut by :func:`shard_bounds`
(for sharded optimizer states; see :mod:`mxlite.comm.base`).
"""

from .base import Communicator, Work, shard_bounds
from .factory import create, launched_by_mpi
from .local import LocalCommunicator
from .mpi import MpiCommunicator
from .nccl import NcclCommunicator

__all__ = ["Communicator", "Work", "LocalCommunicator", "MpiCommunicator", "NcclCommunicator", "create",
           "launched_by_mpi", "shard_bounds"]
