"""``cupy.cuda.runtime``: device count and properties of the emulated GPUs."""

from __future__ import annotations

from typing import Any

from .. import _core, _counters, _memory, _state, _streams

__all__ = ["CUDARuntimeError", "streamCaptureModeGlobal", "streamCaptureModeThreadLocal", "streamCaptureModeRelaxed",
           "streamCaptureStatusNone", "streamCaptureStatusActive", "streamCaptureStatusInvalidated", "getDeviceCount",
           "getDeviceProperties", "deviceCanAccessPeer", "getDevice", "setDevice", "deviceSynchronize",
           "runtimeGetVersion", "driverGetVersion", "memGetInfo", "memcpyPeerAsync", "is_hip"]

_TOTAL_GLOBAL_MEM = 80 * 1024**3
is_hip = False


# CUDA's name and text of the cudaError_t codes the emulation raises (as cudaGetErrorName/String give them).
_ERROR_TEXT = {
    1: ("cudaErrorInvalidValue", "invalid argument"),
    2: ("cudaErrorMemoryAllocation", "out of memory"),
    101: ("cudaErrorInvalidDevice", "invalid device ordinal"),
    400: ("cudaErrorInvalidResourceHandle", "invalid resource handle"),
    401: ("cudaErrorIllegalState", "the operation cannot be performed in the present state"),
    600: ("cudaErrorNotReady", "device not ready"),
    900: ("cudaErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing"),
    901: ("cudaErrorStreamCaptureInvalidated", "operation failed due to a previous error during capture"),
    902: ("cudaErrorStreamCaptureMerge", "operation would result in a merge of separate capture sequences"),
    903: ("cudaErrorStreamCaptureUnmatched", "capture was not ended in the same stream as it began"),
    904: ("cudaErrorStreamCaptureUnjoined", "capturing stream has unjoined work"),
    905: ("cudaErrorStreamCaptureIsolation", "dependency created on uncaptured work in another stream"),
    906: ("cudaErrorStreamCaptureImplicit",
          "operation would make the legacy stream depend on a capturing blocking stream"),
    907: ("cudaErrorCapturedEvent", "operation not permitted on an event last recorded in a capturing stream"),
    908: ("cudaErrorStreamCaptureWrongThread",
          "attempt to terminate a thread-local capture sequence from another thread"),
}
# cudaStreamCaptureMode and cudaStreamCaptureStatus, as CuPy's runtime module names them.
streamCaptureModeGlobal = 0  # noqa: N816 - CuPy's names
streamCaptureModeThreadLocal = 1  # noqa: N816
streamCaptureModeRelaxed = 2  # noqa: N816
streamCaptureStatusNone = 0  # noqa: N816
streamCaptureStatusActive = 1  # noqa: N816
streamCaptureStatusInvalidated = 2  # noqa: N816


class CUDARuntimeError(RuntimeError):
    """A CUDA runtime error (``status`` is the cudaError_t code; the message starts with CUDA's name and text)."""

    def __init__(self, status: int) -> None:
        self.status = status
        name, text = _ERROR_TEXT.get(status, (f"cudaError {status}", "CUDA runtime error"))
        super().__init__(f"{name}: {text}")

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
    source and writes the destination on that stream (both checked for races like any operation); on a
    capturing stream it is recorded into the graph.

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
    capture = None
    if on._capture is not None or _streams.active_captures:
        from .. import _graph  # noqa: PLC0415 - cycle

        capture = _graph.issue(on, what)
    source, target = (src_alloc, src_offset, src_offset + size), (dst_alloc, dst_offset, dst_offset + size)
    _core.check_access(on, [source], [target], what)
    _core.record_access(on, [source], [target])
    dst_bytes = dst_alloc.view_bytes()[dst_offset:dst_offset + size]
    src_bytes = src_alloc.view_bytes()[src_offset:src_offset + size]

    def copy() -> None:
        dst_bytes[...] = src_bytes

    copy()
    if capture is not None:
        capture.add("memcpyPeerAsync", copy, [source], [target])
        return
    counters = _counters.counters[dstDevice]
    counters.p2p_copies += 1
    counters.p2p_bytes += size
