"""Choosing a communicator for a kvstore type and this process's devices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..device import Device
from ..device.topology import launched_by_mpi
from . import faults
from .agree import check_same_across_ranks
from .base import Communicator
from .local import LocalCommunicator
from .mpi import MpiCommunicator, mpi_module
from .nccl import NcclCommunicator, nccl_available

__all__ = ["create", "launched_by_mpi", "DIST_TYPES", "LOCAL_TYPES"]

LOCAL_TYPES = ("local", "device", "nccl")
DIST_TYPES = ("dist_sync", "dist_sync_device", "dist_device_sync", "dist_async")


def create(kind: str, devices: Sequence[Device]) -> Communicator:
    """The communicator for kvstore type ``kind`` over ``devices`` (this process's devices).

    * 'local', 'device', 'nccl': one process. GPUs use NCCL when CuPy has it ('local' and
      'device' too: reducing on the devices is what makes them fast), else peer copies; CPU
      devices reduce with NumPy.
    * 'dist_*': every process started by the MPI launcher. One GPU per process: its buffers
      travel over NCCL (unique id broadcast over MPI) when available; several GPUs per process
      (mxlite's NCCL carrier runs one per process), or no NCCL: through the host over MPI; CPU
      buffers over MPI.

    For 'dist_*' the ranks first agree on their devices (one small MPI all-gather, under
    ``MXLITE_COLLECTIVE_TIMEOUT``): every rank must have the same kind and number of devices and
    pick the same carrier, or the ranks would enter different collectives and wait for ever.

    Raises:
        ValueError: an unknown type, 'nccl' with CPU devices, or 'dist_*' ranks whose devices
            differ in kind, number or carrier (raised on every rank, naming each rank's devices).
        RuntimeError: a 'dist_*' type without mpi4py, or 'nccl' without NCCL.
    """
    devices = list(devices)
    gpus = all(d.is_gpu for d in devices)
    if kind in DIST_TYPES:
        mpi = mpi_module()
        world = mpi.COMM_WORLD
        faults.install()  # a rank that fails ends the job instead of hanging the others
        nccl = gpus and len(devices) == 1 and nccl_available()
        _agree_on_devices(kind, devices, "nccl" if nccl else "mpi", world)
        if nccl:
            return NcclCommunicator(devices, mpi_comm=world)
        return MpiCommunicator(devices, world)
    if kind not in LOCAL_TYPES:
        raise ValueError(f"unknown kvstore type {kind!r}; known: {', '.join(LOCAL_TYPES + DIST_TYPES)}")
    if kind == "nccl" and not gpus:
        raise ValueError(f"kvstore 'nccl' reduces GPU buffers; these devices are not all GPUs: {devices}")
    if gpus and len(devices) > 1 and (kind == "nccl" or nccl_available()):
        return NcclCommunicator(devices)
    return LocalCommunicator(devices)


def _agree_on_devices(kind: str, devices: list[Device], carrier: str, world: Any) -> None:
    """Raise the same ValueError on every rank unless all ranks have the same kind and number of devices
    and chose the same carrier (a GPU rank on NCCL and a CPU rank on MPI would deadlock)."""
    kinds = "/".join(sorted({d.device_type for d in devices}))
    probe = MpiCommunicator([Device("cpu", 0)], world)  # CPU buffers over MPI: every rank can run it
    try:
        check_same_across_ranks(probe, f"the devices of kvstore {kind!r}",
                                [("devices", {"kind": kinds, "count": len(devices), "carrier": carrier})])
    except ValueError as exc:
        raise ValueError(f"{exc}; give every rank the same kind and number of devices: one GPU per rank "
                         "(NCCL when CuPy has it on every rank), or CPU devices (MPI)") from None
