"""Random numbers, seeded and reproducible per device.

Each device draws from its own stream, derived from the seed and the device's identity, so
``seed(s)`` followed by the same calls gives the same numbers on every run; on CPU devices
NumPy's PCG64, on GPUs CuPy's generator. Initializers draw from a separate host stream so that
every mirror of a parameter gets the same values. Without a call to :func:`seed` the streams
start from fresh OS entropy (as MXNet's do). Dropout on GPUs draws from a counter-based generator
whose position lives on the device (:mod:`mxlite.autograd._philox`), seeded here as well.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..device import Device, as_device
from .tensor import Tensor

__all__ = ["entropy", "get_state", "host_generator", "normal", "parse_state", "randint", "seed", "set_state", "shuffle",
           "uniform"]

_HOST_STREAM = 2**31 - 1  # device-id slot reserved for the host (initializer) stream
_seed_entropy: int | None = None
_generators: dict[Any, Any] = {}


def seed(seed_state: int, device: Device | str = "all", ctx: Device | str | None = None) -> None:
    """Seed the random streams of every device (``device='all'``) or of one device.

    Args:
        seed_state: the seed, an integer >= 0.
        device: ``'all'`` or the device whose stream is seeded.
        ctx: MXNet's name for ``device`` (``mx.random.seed(1, ctx=mx.gpu(0))``).

    Raises:
        ValueError: ``seed_state`` is not a non-negative integer, or both ``device`` and
            ``ctx`` name a device.
    """
    global _seed_entropy
    if ctx is not None:
        if not (isinstance(device, str) and device == "all"):
            raise ValueError(f"give the device once: device={device!r} and ctx={ctx!r}")
        device = ctx
    if not isinstance(seed_state, (int, np.integer)) or seed_state < 0:
        raise ValueError(f"seed_state must be a non-negative integer, got {seed_state!r}")
    from . import _philox  # noqa: PLC0415 - _philox reads the entropy from this module

    if device == "all":
        _seed_entropy = int(seed_state)
        _generators.clear()
        _philox.reseed(None, int(seed_state))
    else:
        dev = as_device(device)
        _generators[dev] = _make_generator(dev, int(seed_state))
        if dev.is_gpu:
            _philox.reseed(dev, int(seed_state))


def entropy() -> int:
    """The entropy behind every stream when no seed was set (drawn once per process from the OS)."""
    global _seed_entropy
    if _seed_entropy is None:
        _seed_entropy = int(np.random.SeedSequence().entropy % 2**63)
    return _seed_entropy


def _make_generator(dev: Device | None, seed_state: int) -> Any:
    if dev is None:
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed_state, _HOST_STREAM])))
    kind = 0 if dev.device_type == "cpu" else 1
    ss = np.random.SeedSequence([seed_state, kind, dev.device_id])
    if dev.device_type == "cpu":
        return np.random.Generator(np.random.PCG64(ss))
    with dev.use():
        return dev.xp.random.RandomState(int(ss.generate_state(1, np.uint32)[0]))


def _generator(dev: Device | None) -> Any:
    """The generator of ``dev`` (``None``: the host stream used by initializers)."""
    key = dev if dev is not None else "host"
    gen = _generators.get(key)
    if gen is None:
        gen = _generators[key] = _make_generator(dev, entropy())
    return gen


def get_state() -> dict[str, Any]:
    """Every random stream's position, as JSON-able data (for checkpoints; see :func:`set_state`).

    Holds the seed the streams derive from and the exact state of the host stream and of each
    CPU device's stream. CuPy's GPU generators cannot export their state: their entries are
    None, and :func:`set_state` restarts them from the seed.
    """
    streams: dict[str, Any] = {}
    for key, gen in _generators.items():
        name = "host" if key == "host" else str(key)
        streams[name] = gen.bit_generator.state if isinstance(gen, np.random.Generator) else None
    return {"entropy": _seed_entropy, "streams": streams}


def set_state(state: dict[str, Any]) -> None:
    """Restore :func:`get_state`'s result; the streams then continue exactly where they were.

    Raises:
        ValueError: a malformed state (nothing is changed then).
    """
    global _seed_entropy
    from . import _philox  # noqa: PLC0415

    entropy, restored = parse_state(state)
    _seed_entropy = entropy
    _generators.clear()
    _generators.update(restored)
    if entropy is not None:
        _philox.reseed(None, entropy)  # GPU dropout streams restart from the seed too


def parse_state(state: dict[str, Any]) -> tuple[int | None, dict[Any, Any]]:
    """(seed, generators) rebuilt from :func:`get_state`'s data, without installing them (checkpoints check first).

    Raises:
        ValueError: malformed state data (names the part).
    """
    try:
        entropy = state["entropy"]
        if entropy is not None and (not isinstance(entropy, int) or entropy < 0):
            raise ValueError(f"entropy {entropy!r} is not a non-negative integer")
        restored: dict[Any, Any] = {}
        for name, bits in dict(state["streams"]).items():
            key = "host" if name == "host" else as_device(name)
            if key != "host" and key.device_type != "cpu":
                continue  # a GPU stream: restarts from the seed (see get_state)
            gen = np.random.Generator(np.random.PCG64())
            gen.bit_generator.state = bits
            restored[key] = gen
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"random.set_state: malformed state ({type(exc).__name__}: {exc})") from exc
    return entropy, restored


def host_generator() -> np.random.Generator:
    """The host NumPy generator used for parameter initialisation (seeded by :func:`seed`)."""
    return _generator(None)


def _shape(shape: Any) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)


# dtypes CuPy's generators draw natively (cuRAND's float and double generators); other float
# dtypes (float16) are drawn as float32 and rounded, which costs no precision float16 can hold.
_NATIVE_GPU = (np.dtype(np.float32), np.dtype(np.float64))


def _draw(dev: Device, gen: Any, method: str, a: float, b: float, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """``gen.<method>(a, b, shape)`` as ``dtype`` on ``dev``.

    GPU: drawn in ``dtype`` itself when CuPy can, else in float32 (float16) or float64 (the rest)
    and cast, so a float32 draw neither costs a float64 pass nor rounds twice. CPU: NumPy's
    generator draws float64 (its ``normal``/``uniform`` take no dtype), then cast; these are the
    values every seeded CPU run has always produced.
    """
    if dev.device_type == "cpu":
        return getattr(gen, method)(a, b, size=shape).astype(dtype)
    draw_as = dtype if dtype in _NATIVE_GPU else np.dtype(np.float32) if dtype == np.float16 else np.dtype(np.float64)
    data = getattr(gen, method)(a, b, size=shape, dtype=draw_as)
    return data if data.dtype == dtype else data.astype(dtype)


def _device_or_ctx(device: Device | str | None, ctx: Device | str | None, where: str) -> Device:
    """``device``, or MXNet's ``ctx=`` spelling of it (``mx.random.uniform(shape=(2, 3), ctx=mx.cpu())``)."""
    if ctx is not None:
        if device is not None:
            raise ValueError(f"{where}: give the device once: device={device!r} and ctx={ctx!r}")
        device = ctx
    return as_device(device)


def normal(loc: float = 0.0, scale: float = 1.0, shape: Any = (), dtype: Any = None,
           device: Device | str | None = None, ctx: Device | str | None = None) -> Tensor:
    """Samples of N(loc, scale²) on ``device`` (float32 by default; see :func:`_draw` for the GPU's dtypes).

    ``ctx`` is MXNet's name for ``device``.

    Raises:
        ValueError: negative ``scale``, or both ``device`` and ``ctx`` given.
    """
    if scale < 0:
        raise ValueError(f"normal: scale must be >= 0, got {scale}")
    dev = _device_or_ctx(device, ctx, "normal")
    dtype = np.dtype(dtype or np.float32)
    gen = _generator(dev)
    with dev.use():
        data = _draw(dev, gen, "normal", loc, scale, _shape(shape), dtype)
    return Tensor(data, dev)


def uniform(low: float = 0.0, high: float = 1.0, shape: Any = (), dtype: Any = None,
            device: Device | str | None = None, ctx: Device | str | None = None) -> Tensor:
    """Samples of U[low, high) on ``device`` (float32 by default; see :func:`_draw` for the GPU's dtypes).

    ``ctx`` is MXNet's name for ``device``.

    Raises:
        ValueError: ``high < low``, or both ``device`` and ``ctx`` given.
    """
    if high < low:
        raise ValueError(f"uniform: high ({high}) must be >= low ({low})")
    dev = _device_or_ctx(device, ctx, "uniform")
    dtype = np.dtype(dtype or np.float32)
    gen = _generator(dev)
    with dev.use():
        data = _draw(dev, gen, "uniform", low, high, _shape(shape), dtype)
    return Tensor(data, dev)


def randint(low: int, high: int, shape: Any = (), dtype: Any = None, device: Device | str | None = None,
            ctx: Device | str | None = None) -> Tensor:
    """Integers uniform in ``[low, high)`` on ``device`` (int32 by default; ``ctx`` is MXNet's name for ``device``)."""
    if high <= low:
        raise ValueError(f"randint: high ({high}) must be > low ({low})")
    dev = _device_or_ctx(device, ctx, "randint")
    gen = _generator(dev)
    dtype = np.dtype(dtype or np.int32)
    with dev.use():
        if dev.device_type == "cpu":
            data = gen.integers(low, high, size=_shape(shape)).astype(dtype)
        else:
            data = gen.randint(low, high, size=_shape(shape)).astype(dtype)
    return Tensor(data, dev)


def shuffle(data: Tensor) -> Tensor:
    """A copy of ``data`` with its first axis permuted by the data's device stream."""
    gen = _generator(data.device)
    with data.device.use():
        perm = gen.permutation(data.shape[0])
        return Tensor(data._data[perm], data.device)
