"""Parameter initializers (``mx.init``), with MXNet's formulas.

An initializer fills a NumPy array on the host in place; :class:`~mxlite.gluon.Parameter` then
copies the same values to every device mirror, so mirrors start identical. Randomness comes
from :func:`mxlite.autograd.random.host_generator`, so ``mx.random.seed(s)`` makes it reproducible.

When a whole Block is initialised with one initializer, the parameter's name picks the rule
as in MXNet: names ending in ``bias``, ``beta``, ``running_mean``/``moving_mean`` get zeros,
``gamma``, ``running_var``/``moving_var`` get ones, anything else the initializer's weight
rule. A parameter's own ``init`` (e.g. Dense's ``bias_initializer='zeros'``) takes precedence.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .autograd.random import host_generator
from .device.copy import as_host

__all__ = ["Initializer", "Zero", "One", "Constant", "Uniform", "Normal", "Xavier", "create", "register"]

_REGISTRY: dict[str, type[Initializer]] = {}


def register(klass: type[Initializer]) -> type[Initializer]:
    """Register an Initializer subclass under its lower-case class name (for :func:`create`)."""
    _REGISTRY[klass.__name__.lower()] = klass
    return klass


class Initializer:
    """Base class: ``init(name, arr)`` fills the NumPy array ``arr`` in place.

    Subclasses implement :meth:`_init_weight`.
    """

    def __call__(self, name: str, arr: np.ndarray) -> None:
        name = str(name)
        if name.endswith(("bias", "beta", "running_mean", "moving_mean")):
            arr[...] = 0.0
        elif name.endswith(("gamma", "running_var", "moving_var")):
            arr[...] = 1.0
        else:
            self._init_weight(name, arr)

    def init_weight(self, name: str, arr: np.ndarray) -> None:
        """Apply the weight rule regardless of ``name`` (used for a parameter's own init)."""
        self._init_weight(name, arr)

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _init_weight")

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        """Same class and same settings (MXNet compares initializers by value: ``Constant(1) == Constant(1)``)."""
        if not isinstance(other, Initializer):
            return NotImplemented
        if type(self) is not type(other):
            return False
        mine, theirs = vars(self), vars(other)
        return mine.keys() == theirs.keys() and all(_same_setting(mine[k], theirs[k]) for k in mine)

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(vars(self)))))  # equal initializers share class and setting names


def _same_setting(a: Any, b: Any) -> bool:
    """Whether two initializer settings are equal; arrays (NumPy, CuPy, Tensor) compare by shape and values."""
    if a is b:
        return True
    if any(hasattr(v, "shape") and not isinstance(v, (int, float, np.generic)) for v in (a, b)):
        ha, hb = np.asarray(as_host(a)), np.asarray(as_host(b))
        return ha.shape == hb.shape and bool(np.array_equal(ha, hb))
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


@register
class Zero(Initializer):
    """Fill with 0."""

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        arr[...] = 0.0


@register
class One(Initializer):
    """Fill with 1."""

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        arr[...] = 1.0


@register
class Constant(Initializer):
    """Fill with ``value``: a scalar, or an array (NumPy, CuPy, Tensor) broadcastable to the parameter's shape."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        arr[...] = as_host(self.value)  # np.asarray raises on a CuPy array


@register
class Uniform(Initializer):
    """Samples of U(-scale, scale); MXNet's default initializer (scale 0.07)."""

    def __init__(self, scale: float = 0.07) -> None:
        self.scale = scale

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        arr[...] = host_generator().uniform(-self.scale, self.scale, arr.shape)


@register
class Normal(Initializer):
    """Samples of N(0, sigma²)."""

    def __init__(self, sigma: float = 0.01) -> None:
        self.sigma = sigma

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        arr[...] = host_generator().normal(0.0, self.sigma, arr.shape)


@register
class Xavier(Initializer):
    """Glorot initialisation with MXNet's parametrisation.

    ``fan_in = shape[1] * prod(shape[2:])``, ``fan_out = shape[0] * prod(shape[2:])``;
    ``factor`` is ``(fan_in + fan_out) / 2`` ('avg'), ``fan_in`` ('in') or ``fan_out`` ('out');
    ``scale = sqrt(magnitude / factor)``; values are U(-scale, scale) ('uniform') or
    N(0, scale²) ('gaussian').

    Raises:
        ValueError: unknown ``rnd_type``/``factor_type``, or a parameter with fewer than 2 dims.
    """

    def __init__(self, rnd_type: str = "uniform", factor_type: str = "avg", magnitude: float = 3) -> None:
        if rnd_type not in ("uniform", "gaussian"):
            raise ValueError(f"Xavier: rnd_type must be 'uniform' or 'gaussian', got {rnd_type!r}")
        if factor_type not in ("avg", "in", "out"):
            raise ValueError(f"Xavier: factor_type must be 'avg', 'in' or 'out', got {factor_type!r}")
        self.rnd_type = rnd_type
        self.factor_type = factor_type
        self.magnitude = float(magnitude)

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        shape = arr.shape
        if len(shape) < 2:
            raise ValueError(f"Xavier initializer needs a parameter with >= 2 dimensions; {name!r} has shape {shape}")
        hw = float(np.prod(shape[2:])) if len(shape) > 2 else 1.0
        fan_in, fan_out = shape[1] * hw, shape[0] * hw
        factor = {"avg": (fan_in + fan_out) / 2.0, "in": fan_in, "out": fan_out}[self.factor_type]
        scale = np.sqrt(self.magnitude / factor)
        gen = host_generator()
        if self.rnd_type == "uniform":
            arr[...] = gen.uniform(-scale, scale, shape)
        else:
            arr[...] = gen.normal(0.0, scale, shape)


_ALIASES = {"zeros": "zero", "ones": "one"}


def create(init: Initializer | str | None, **kwargs: Any) -> Initializer | None:
    """An Initializer from an instance, a registered name ('zeros', 'xavier', ...) or None.

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    if init is None or isinstance(init, Initializer):
        return init
    if isinstance(init, str):
        key = _ALIASES.get(init.lower(), init.lower())
        if key not in _REGISTRY:
            known = sorted(set(_REGISTRY) | set(_ALIASES))
            raise ValueError(f"unknown initializer {init!r}; known: {', '.join(known)}")
        return _REGISTRY[key](**kwargs)
    raise TypeError(f"expected an Initializer or a name, got {type(init).__name__}")
