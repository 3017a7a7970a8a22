"""Dropout masks on GPUs from a counter-based generator whose position lives on the device (``kernels/random.cu``).

Purpose: a CUDA graph replays the kernels it recorded with the arguments it recorded. A mask drawn by
cuRAND cannot be captured at all, and one drawn from a position passed by the host would be the same
at every replay. Here each GPU holds its generator's state in device memory, two 64-bit words (the
key, derived from the seed and the device, and the offset, counted in Philox counters): a draw's
kernel reads both, and a second launch advances the offset by the counters it used. Eager calls and
graph replays run the same two launches on the same state, so a replayed block draws new masks at
every step, the ones an eager run would have drawn (Philox4x32-10, as PyTorch and JAX use for this).

``mx.random.seed`` rewrites the state in place (new key, offset 0), so graphs keep reading it. CPU
devices keep drawing dropout from NumPy's generator (:mod:`mxlite.ops.random`): nothing is
captured there.

Twin: :func:`philox4x32`, :func:`uniforms` and :func:`dropout_mask_twin` do the kernels' integer
operations in NumPy (tests/test_graph_random.py holds the kernels to them bit for bit, on the
emulated GPUs and on CPU devices through the serial host build).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..device import Device
from ..device.kernels import KernelFile
from . import random as _random

__all__ = ["KERNELS", "KERNEL_FILE", "counters", "dropout_mask", "dropout_mask_twin", "philox4x32", "reseed", "state",
           "uniforms"]

KERNEL_FILE = "random.cu"
# dropout_mask<T, A>: scale travels as float32 (A) for float32 and float16 masks
KERNELS = KernelFile(KERNEL_FILE, ("float32", "float64", "float16"), ("dropout_mask",), accumulator=True,
                     names=("philox_advance",))
_MAX_BLOCKS = 65535
_HOST_BLOCKS = 64  # one-thread blocks of the serial host build (a CPU device in tests)
_KEY_STREAM = 2  # a SeedSequence word that sets these keys apart from the devices' other streams

_M32 = np.uint64(0xFFFFFFFF)
_ROUND = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57), np.uint64(0x9E3779B9), np.uint64(0xBB67AE85))

_states: dict[Device, Any] = {}  # device -> its state array, uint64 (key, offset)
_seeds: dict[Device, int] = {}  # device -> the seed mx.random.seed gave it alone


def _key(seed: int, device: Device) -> np.uint64:
    return np.random.SeedSequence([seed, _KEY_STREAM, device.device_id]).generate_state(1, np.uint64)[0]


def state(device: Device) -> Any:
    """The generator state of GPU ``device``: a device array of two uint64, the key and the offset.

    Made the first time (key from ``mx.random.seed``'s seed, or the process's entropy; offset 0).
    """
    current = _states.get(device)
    if current is None:
        seed = _seeds.get(device, _random.entropy())
        with device.use():
            current = _states[device] = device.xp.asarray(np.array([_key(seed, device), 0], np.uint64))
    return current


def reseed(device: Device | None, seed: int) -> None:
    """``mx.random.seed(seed)`` for every GPU (``device`` None) or one: new key, offset 0, written in place."""
    if device is None:
        _seeds.clear()
    else:
        _seeds[device] = seed
    for dev, current in list(_states.items()):
        if device is None or dev == device:
            with dev.use():
                current[...] = dev.xp.asarray(np.array([_key(seed, dev), 0], np.uint64))


_random.on_gpu_seed(reseed)


def _forget() -> None:
    """Forget every device's state (the GPU emulation calls this when it is installed again)."""
    _states.clear()


# -- the twin ------------------------------------------------------------------------------------------------
def philox4x32(counters: np.ndarray, key: int) -> np.ndarray:
    """Philox4x32-10 at 64-bit ``counters`` (the counter's upper two words 0) under the 64-bit ``key``.

    Returns a ``(len(counters), 4)`` uint32 array: the four words of each counter's block, in
    ``kernels/random.cu``'s order.
    """
    counters = np.asarray(counters, np.uint64)
    c0, c1 = counters & _M32, counters >> np.uint64(32)
    c2 = c3 = np.zeros_like(counters)
    key = np.uint64(key)
    k0, k1 = key & _M32, key >> np.uint64(32)
    m0, m1, w0, w1 = _ROUND
    for round_ in range(10):
        if round_ > 0:
            k0, k1 = (k0 + w0) & _M32, (k1 + w1) & _M32
        p0, p1 = m0 * c0, m1 * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & _M32, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & _M32)
    return np.stack([c0, c1, c2, c3], axis=1).astype(np.uint32)


def uniforms(key: int, offset: int, n: int) -> np.ndarray:
    """The ``n`` float32 values in [0, 1) a draw at ``offset`` makes: ``(word >> 8) * 2^-24``."""
    words = philox4x32(np.arange(offset, offset + (n + 3) // 4, dtype=np.uint64), key).reshape(-1)[:n]
    return (words >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)


def _scale(rate: float, dtype: Any) -> np.generic:
    """``1 / (1 - rate)`` (0 for rate 1) in float64, rounded to the kernel's ``A``."""
    scale = 0.0 if rate >= 1.0 else 1.0 / (1.0 - rate)
    return np.float64(scale) if np.dtype(dtype) == np.float64 else np.float32(scale)


def dropout_mask_twin(key: int, offset: int, shape: tuple[int, ...], rate: float, dtype: Any) -> np.ndarray:
    """The mask ``dropout_mask`` draws at ``offset``: ``scale`` where ``u >= rate`` (in float32), else 0."""
    n = int(np.prod(shape, dtype=np.int64))
    keep = uniforms(key, offset, n) >= np.float32(rate)
    scale = _scale(rate, dtype)
    kept, dropped = scale.astype(dtype), np.zeros((), dtype)
    return np.where(keep, kept, dropped).reshape(shape)


# -- the kernels ---------------------------------------------------------------------------------------------
def counters(n: int) -> int:
    """How many Philox counters a draw of ``n`` values uses (four values each)."""
    return (n + 3) // 4


def dropout_mask(device: Device, shape: tuple[int, ...], rate: float, dtype: Any, rng_state: Any = None) -> Any:
    """A dropout mask of ``shape`` and ``dtype`` (float16/32/64) drawn on ``device`` by ``kernels/random.cu``.

    Two launches, no host synchronisation and no copy from the host, so it can be captured: the mask
    kernel reads ``rng_state`` (default :func:`state`), then ``philox_advance`` moves its offset on.

    Raises:
        TypeError: a dtype other than float16, float32 or float64.
    """
    name = np.dtype(dtype).name
    if not KERNELS.supports(name):
        raise TypeError(f"dropout masks are float16, float32 or float64; got {name}")
    rng_state = state(device) if rng_state is None else rng_state
    n = int(np.prod(shape, dtype=np.int64))
    xp = device.xp
    with device.use():
        mask = xp.empty(shape, dtype=dtype)
        used = counters(n)
        if used == 0:
            return mask
        if device.is_gpu:
            grid = min(_MAX_BLOCKS, -(-used // KERNELS.block_threads))
        else:
            grid = min(_HOST_BLOCKS, used)
        block = KERNELS.block_for(device)
        KERNELS.function(f"dropout_mask<{KERNELS.template_arguments(name)}>", device)(
            (grid,), (block,), (rng_state, mask, np.int64(n), np.float32(rate), _scale(rate, dtype)))
        KERNELS.function("philox_advance", device)((1,), (1,), (rng_state, np.uint64(used)))
    return mask
