"""Process topology: whether MPI started this process, and its rank among the processes of its node.

The device layer needs it to pick a process's GPU (``mx.gpu_devices()`` gives one GPU per process when
several processes share a node); the communicators and kvstores use the same answers. mpi4py is an
optional dependency (the ``mpi`` extra), imported on first use.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["launched_by_mpi", "local_rank_and_size", "mpi_module", "node_communicator"]

# Environment variables that MPI launchers set in every rank (MPICH/Hydra, Open MPI, Slurm's PMI).
_RANK_VARIABLES = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MPI_LOCALRANKID")


def launched_by_mpi() -> bool:
    """Whether this process was started by an MPI launcher (mpiexec, mxlite launch, srun)."""
    return any(v in os.environ for v in _RANK_VARIABLES)


def mpi_module() -> Any:
    """``mpi4py.MPI``; RuntimeError saying how to install it when it is missing."""
    try:
        from mpi4py import MPI  # noqa: PLC0415 - optional dependency, loaded on first use
    except ImportError as exc:
        raise RuntimeError("multi-process training needs mpi4py and an MPI library: "
                           "pip install 'mxlite[mpi]' (mpi4py and the mpich wheel)") from exc
    return MPI


def node_communicator(world: Any) -> Any:
    """The processes of ``world`` that share this node's memory: ``Split_type(COMM_TYPE_SHARED)``.

    Ranks keep their order (``key`` = world rank), so local rank 0 is the node's lowest world rank.
    A collective over ``world``.
    """
    mpi = mpi_module()
    return world.Split_type(mpi.COMM_TYPE_SHARED, key=world.Get_rank())


_local: tuple[int, int] | None = None


def local_rank_and_size() -> tuple[int, int]:
    """(local rank, processes on this node) of this process within ``COMM_WORLD``, from an MPI split.

    The node's processes are those :func:`node_communicator` groups (MPI's shared-memory split, not
    launcher variables, which differ between MPICH, Open MPI and Slurm). Computed once per process:
    the first call is a collective over ``COMM_WORLD``, so every rank must make it (``mx.gpu_devices()``
    and creating a 'dist_*' KVStore make it; call them on every rank alike).

    Raises:
        RuntimeError: mpi4py is not installed.
    """
    global _local
    if _local is None:
        world = mpi_module().COMM_WORLD
        if world.Get_size() == 1:
            _local = (0, 1)
        else:
            node = node_communicator(world)
            try:
                _local = (node.Get_rank(), node.Get_size())
            finally:
                node.Free()
    return _local
