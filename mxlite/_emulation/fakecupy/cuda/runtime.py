"""``cupy.cuda.runtime``: device count and properties of the emulated GPUs."""

from __future__ import annotations

from typing import Any

from .. import _core, _counters, _memory, _state, _streams

__all__ = ["CUDARuntimeError", "getDeviceCount", "getDeviceProperties", "deviceCanAccessPeer", "getDevice",
           "setDevice", "deviceSynchronize", "runtimeGetVersion", "driverGetVersion", "memGetInfo", "memcpyPeerAsync",
           "is_hip"]

_TOTAL_GLOBAL_MEM = 80 * 1024**3
is_hip = False


class CUDARuntimeError(RuntimeError):
    """A CUDA runtime error (``status`` is the cudaError_t code)."""

    def __init__(self, status: int) -> None:
        self.status = status
        super().__init__(f"CUDA runtime error {status}")

    @classmethod
    def _with(cls, status: int, message: str) -> CUDARuntimeError:
        err = cls(status)
        err.args = (message,)
        return err


def getDeviceCount() -> int:  # noqa: N802 - CUDA's name
    """Number of emulated GPUs."""
    return _state.num_devices()


def getDeviceProperties(device: int) -> dict[str, Any]:  # noqa: N802
    """The properties of emulated GPU ``device`` (the keys of CuPy's dict that mxlite reads, H100-like values)."""
    _state.check_device_id(device)
    return {
        "name": b"Emulated GPU (mxlite)", "totalGlobalMem": _TOTAL_GLOBAL_MEM, "sharedMemPerBlock": 49152,
        "regsPerBlock": 65536, "warpSize": 32, "maxThreadsPerBlock": 1024, "maxThreadsDim": (1024, 1024, 64),
        "maxGridSize": (2147483647, 65535, 65535), "clockRate": 1980000, "totalConstMem": 65536, "major": 9,
        "minor": 0, "multiProcessorCount": 132, "l2CacheSize": 52428800, "maxThreadsPerMultiProcessor": 2048,
        "memoryClockRate": 2619000, "memoryBusWidth": 5120, "pciBusID": device, "pciDeviceID": 0, "pciDomainID": 0,
        "integrated": 0, "canMapHostMemory": 1, "concurrentKernels": 1, "ECCEnabled": 0, "unifiedAddressing": 1,
        "managedMemory": 1, "sharedMemPerMultiprocessor": 233472,
    }


def deviceCanAccessPeer(device: int, peerDevice: int) -> int:  # noqa: N802, N803
    """1: emulated GPUs can all access each other."""
    _state.check_device_id(device)
    _state.check_device_id(peerDevice)
    return 1


def getDevice() -> int:  # noqa: N802
    """The current device id."""
    return _state.current_device_id()


def setDevice(device: int) -> None:  # noqa: N802
    """Make ``device`` current."""
    _state.set_current_device_id(device)


def deviceSynchronize() -> None:  # noqa: N802
    """Block the host until the current device's streams are done."""
    _streams.synchronize_device(_state.current_device_id())


def runtimeGetVersion() -> int:  # noqa: N802
    """12080: CUDA 12.8."""
    return 12080


def driverGetVersion() -> int:  # noqa: N802
    """12080: CUDA 12.8."""
    return 12080


def memGetInfo() -> tuple[int, int]:  # noqa: N802
    """``(free, total)`` bytes of the current device (total minus the pool's held bytes)."""
    pool = _memory._pools.get(_state.current_device_id())
    held = pool.used + pool.free_size if pool else 0
    return _TOTAL_GLOBAL_MEM - held, _TOTAL_GLOBAL_MEM


def memcpyPeerAsync(dst: int, dstDevice: int, src: int, srcDevice: int, size: int,  # noqa: N802, N803
                    stream: int) -> None:
    """Copy ``size`` bytes from ``src`` on GPU ``srcDevice`` to ``dst`` on GPU ``dstDevice``, ordered on ``stream``.

    ``stream`` must belong to the current device, which must be one of the two. The copy reads the
    source and writes the destination on that stream (both checked for races like any operation).

    Raises:
        EmulatedGPUError: a pointer range outside a live allocation of its device, a stream of another
            device, or a race.
    """
    device_id = _state.current_device_id()
    if device_id not in (dstDevice, srcDevice):
        raise _core.EmulatedGPUError(f"memcpyPeerAsync from gpu({srcDevice}) to gpu({dstDevice}) issued while "
                                     f"gpu({device_id}) is current; make one of them current")
    dst_alloc, dst_offset = _memory.resolve(dst, size, dstDevice)
    src_alloc, src_offset = _memory.resolve(src, size, srcDevice)
    on = _streams.stream_from_ptr(stream, device_id)
    what = f"memcpyPeerAsync({size} bytes, gpu({srcDevice}) -> gpu({dstDevice}))"
    source, target = (src_alloc, src_offset, src_offset + size), (dst_alloc, dst_offset, dst_offset + size)
    _core.check_access(on, [source], [target], what)
    _core.record_access(on, [source], [target])
    dst_alloc.view_bytes()[dst_offset:dst_offset + size] = src_alloc.view_bytes()[src_offset:src_offset + size]
    counters = _counters.counters[dstDevice]
    counters.p2p_copies += 1
    counters.p2p_bytes += size
