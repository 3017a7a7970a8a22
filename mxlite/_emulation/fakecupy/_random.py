"""``cupy.random``: seeded generators drawing on the current emulated GPU (NumPy's PCG64 underneath).

float32 draws (``dtype=numpy.float32``) are generated natively in float32 where CuPy does so
(``normal``, ``standard_normal``, ``uniform``, ``random_sample``), not rounded from float64.
The numbers differ from CuPy's (cuRAND) but are reproducible for a given seed. Draws on a capturing stream
raise as CuPy's do (cuRAND cannot be called during a stream capture).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core, _counters, _errors, _ndarray, _state, _streams

__all__ = ["RandomState", "Generator", "default_rng", "get_random_state", "set_random_state", "reset_states", "seed",
           "normal", "uniform", "randint", "permutation", "rand", "randn", "random_sample", "random",
           "standard_normal", "shuffle", "choice"]


def _size(size: Any) -> tuple[int, ...] | None:
    if size is None:
        return None
    return (int(size),) if isinstance(size, (int, np.integer)) else tuple(int(n) for n in size)


def _refuse_capture() -> None:
    """CuPy's refusal of cuRAND on a capturing stream (the draws are made on the host here, at once)."""
    if _streams.active_captures and _streams.get_current_stream()._capture is not None:
        raise NotImplementedError("calling cuRAND API during stream capture is currently unsupported")


def _to_device(host: Any, name: str) -> _ndarray.ndarray:
    device_id = _state.current_device_id()
    _counters.counters[device_id].ops[f"random.{name}"] += 1
    return _core.from_host(np.asarray(host), device_id, count=False)


def _floating(dtype: Any) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"Unsupported dtype {dtype} for random floats: float32 or float64")
    return dtype


class RandomState:
    """A seeded random generator on the current device (CuPy's ``RandomState``).

    Args:
        seed: an integer seed (None: fresh entropy).
        method: accepted for compatibility.
    """

    def __init__(self, seed: Any = None, method: Any = None) -> None:
        self.seed(seed)

    def seed(self, seed: Any = None) -> None:
        """Restart the stream from ``seed``."""
        self._gen = np.random.Generator(np.random.PCG64(None if seed is None else int(seed)))

    @property
    def _rng(self) -> np.random.Generator:
        _refuse_capture()
        return self._gen

    def standard_normal(self, size: Any = None, dtype: Any = float) -> _ndarray.ndarray:
        """Samples of N(0, 1)."""
        return _to_device(self._rng.standard_normal(_size(size), dtype=_floating(dtype)), "standard_normal")

    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None, dtype: Any = float) -> _ndarray.ndarray:
        """Samples of N(loc, scale^2), drawn in ``dtype``."""
        dtype = _floating(dtype)
        z = self._rng.standard_normal(_size(size), dtype=dtype)
        return _to_device((z * dtype.type(scale) + dtype.type(loc)).astype(dtype, copy=False), "normal")

    def random_sample(self, size: Any = None, dtype: Any = float) -> _ndarray.ndarray:
        """Samples of U[0, 1)."""
        return _to_device(self._rng.random(_size(size), dtype=_floating(dtype)), "random_sample")

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None, dtype: Any = float) -> _ndarray.ndarray:
        """Samples of U[low, high), drawn in ``dtype``."""
        dtype = _floating(dtype)
        u = self._rng.random(_size(size), dtype=dtype)
        return _to_device((u * dtype.type(high - low) + dtype.type(low)).astype(dtype, copy=False), "uniform")

    def rand(self, *size: Any, **kwarg: Any) -> _ndarray.ndarray:
        """U[0, 1) samples of shape ``size``."""
        return self.random_sample(size, **kwarg)

    def randn(self, *size: Any, **kwarg: Any) -> _ndarray.ndarray:
        """N(0, 1) samples of shape ``size``."""
        return self.standard_normal(size, **kwarg)

    def randint(self, low: int, high: int | None = None, size: Any = None, dtype: Any = int) -> _ndarray.ndarray:
        """Integers uniform in ``[low, high)`` (``[0, low)`` without ``high``)."""
        if high is None:
            low, high = 0, low
        return _to_device(self._rng.integers(low, high, _size(size), dtype=np.dtype(dtype)), "randint")

    def permutation(self, a: Any) -> _ndarray.ndarray:
        """A random permutation of ``range(a)`` (int ``a``) or of device array ``a``'s first axis."""
        if isinstance(a, _ndarray.ndarray):
            return a[self.permutation(len(a))]
        return _to_device(self._rng.permutation(int(a)), "permutation")

    def shuffle(self, a: _ndarray.ndarray) -> None:
        """Permute device array ``a``'s first axis in place."""
        if not isinstance(a, _ndarray.ndarray):
            raise TypeError("The array must be cupy.ndarray")
        perm = self._rng.permutation(len(a))
        _core.apply("random.shuffle", lambda x: x.__setitem__(slice(None), x[perm]), (a,), {}, write_args=(0,))

    def choice(self, a: Any, size: Any = None, replace: bool = True, p: Any = None) -> _ndarray.ndarray:
        """Random samples from ``range(a)`` (int ``a``) or device array ``a``."""
        probs = None if p is None else (p.get() if isinstance(p, _ndarray.ndarray) else np.asarray(p))
        if isinstance(a, _ndarray.ndarray):
            idx = self._rng.choice(len(a), _size(size), replace=replace, p=probs)
            return a[_to_device(idx, "choice")]
        return _to_device(self._rng.choice(int(a), _size(size), replace=replace, p=probs), "choice")


class Generator:
    """CuPy's new-style generator (``default_rng``): ``random``, ``standard_normal``, ``uniform``, ``integers``."""

    def __init__(self, bit_generator: Any) -> None:
        self._state = RandomState(bit_generator)

    @staticmethod
    def _refuse_capture() -> None:
        if _streams.active_captures and _streams.get_current_stream()._capture is not None:
            raise _errors.EmulatedGPUError("draws of cupy.random.Generator on a capturing stream are not emulated (the "
                                   "double draws on the host); draw before begin_capture()")

    def random(self, size: Any = None, dtype: Any = np.float64, out: Any = None) -> _ndarray.ndarray:
        """U[0, 1) samples."""
        self._refuse_capture()
        return self._state.random_sample(size, dtype)

    def standard_normal(self, size: Any = None, dtype: Any = np.float64, out: Any = None) -> _ndarray.ndarray:
        """N(0, 1) samples."""
        self._refuse_capture()
        return self._state.standard_normal(size, dtype)

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None, dtype: Any = np.float64) -> _ndarray.ndarray:
        """U[low, high) samples."""
        self._refuse_capture()
        return self._state.uniform(low, high, size, dtype)

    def integers(self, low: int, high: int | None = None, size: Any = None, dtype: Any = np.int64,
                 endpoint: bool = False) -> _ndarray.ndarray:
        """Integers in ``[low, high)`` (``[low, high]`` with ``endpoint``)."""
        self._refuse_capture()
        if high is None:
            low, high = 0, low
        return self._state.randint(low, high + 1 if endpoint else high, size, dtype)


def default_rng(seed: Any = None) -> Generator:
    """A :class:`Generator` seeded with ``seed``."""
    return Generator(seed)


_states: dict[int, RandomState] = {}


def get_random_state() -> RandomState:
    """The current device's global RandomState."""
    device_id = _state.current_device_id()
    state = _states.get(device_id)
    if state is None:
        state = _states[device_id] = RandomState()
    return state


def set_random_state(rs: RandomState) -> None:
    """Make ``rs`` the current device's global RandomState."""
    _states[_state.current_device_id()] = rs


def reset_states() -> None:
    """Forget every device's global RandomState."""
    _states.clear()


def seed(seed: Any = None) -> None:
    """Reseed the current device's global RandomState."""
    get_random_state().seed(seed)


def normal(loc: Any = 0.0, scale: Any = 1.0, size: Any = None, dtype: Any = float) -> _ndarray.ndarray:
    """N(loc, scale^2) samples from the global RandomState."""
    return get_random_state().normal(loc, scale, size, dtype)


def uniform(low: Any = 0.0, high: Any = 1.0, size: Any = None, dtype: Any = float) -> _ndarray.ndarray:
    """U[low, high) samples from the global RandomState."""
    return get_random_state().uniform(low, high, size, dtype)


def randint(low: int, high: int | None = None, size: Any = None, dtype: Any = "l") -> _ndarray.ndarray:
    """Integers from the global RandomState."""
    return get_random_state().randint(low, high, size, dtype)


def permutation(a: Any) -> _ndarray.ndarray:
    """A permutation from the global RandomState."""
    return get_random_state().permutation(a)


def rand(*size: Any, **kwarg: Any) -> _ndarray.ndarray:
    """U[0, 1) samples of shape ``size``."""
    return get_random_state().rand(*size, **kwarg)


def randn(*size: Any, **kwarg: Any) -> _ndarray.ndarray:
    """N(0, 1) samples of shape ``size``."""
    return get_random_state().randn(*size, **kwarg)


def random_sample(size: Any = None, dtype: Any = float) -> _ndarray.ndarray:
    """U[0, 1) samples."""
    return get_random_state().random_sample(size, dtype)


def random(size: Any = None, dtype: Any = float) -> _ndarray.ndarray:
    """U[0, 1) samples."""
    return get_random_state().random_sample(size, dtype)


def standard_normal(size: Any = None, dtype: Any = float) -> _ndarray.ndarray:
    """N(0, 1) samples."""
    return get_random_state().standard_normal(size, dtype)


def shuffle(a: _ndarray.ndarray) -> None:
    """Shuffle ``a``'s first axis in place."""
    get_random_state().shuffle(a)


def choice(a: Any, size: Any = None, replace: bool = True, p: Any = None) -> _ndarray.ndarray:
    """Random samples from the global RandomState."""
    return get_random_state().choice(a, size, replace, p)


