"""Parameter initializers (``mx.init``), with MXNet's formulas.

An initializer fills a NumPy array on the host in place; :class:`~mxlite.gluon.Parameter` then
copies the same values to every device mirror, so mirrors start identical. Randomness comes
from :func:`mxlite.ops.random.host_generator`, so ``mx.random.seed(s)`` makes it reproducible.

When a whole Block is initialised with one initializer, the parameter's name picks the rule
as in MXNet: names ending in ``bias``, ``beta``, ``running_mean``/``moving_mean`` get zeros,
``gamma``, ``running_var``/``moving_var`` get ones, anything else the initializer's weight
rule. A parameter's own ``init`` (e.g. Dense's ``bias_initializer='zeros'``) takes precedence.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import numpy as np

from .device.copy import as_host
from .ops.random import host_generator

__all__ = ["Initializer", "Zero", "One", "Constant", "Uniform", "Normal", "Xavier", "MSRAPrelu", "Orthogonal",
           "Bilinear", "LSTMBias", "Mixed", "create", "register"]

_REGISTRY: dict[str, type[Initializer]] = {}


def register(klass: type[Initializer]) -> type[Initializer]:
    """Register an Initializer subclass under its lower-case class name (for :func:`create`)."""
    _REGISTRY[klass.__name__.lower()] = klass
    return klass


class Initializer:
    """Base class of initializers (MXNet's ``mx.init.Initializer``).

    ``init(name, arr)`` fills the NumPy array ``arr`` in place, choosing the rule by the name's ending
    as MXNet does: ``weight`` (and any other name) -> :meth:`_init_weight`, ``bias`` -> ``_init_bias``,
    ``gamma`` -> ``_init_gamma``, ``beta`` -> ``_init_beta``, ``running_mean``/``moving_mean`` ->
    ``_init_zero``, ``running_var``/``moving_var`` -> ``_init_one``. Subclasses implement
    :meth:`_init_weight` and may override the others.

    Args:
        **kwargs: the initializer's settings, kept as given (MXNet's ``_kwargs``): a subclass calls
            ``super().__init__(scale=scale, ...)``; :meth:`dumps`, ``==`` and ``repr`` use them.
    """

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._verbose = False
        self._print_func: Any = None

    def _settings(self) -> dict[str, Any]:
        """The settings: ``_kwargs`` (a subclass that never called ``__init__`` has its attributes instead)."""
        kwargs = self.__dict__.get("_kwargs")
        if kwargs is not None:
            return kwargs
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def set_verbosity(self, verbose: bool = False, print_func: Any = None) -> Initializer:
        """Log each initialised array (``logging.info``) with ``print_func(arr)`` (default: its RMS); returns self."""
        self._verbose = verbose
        self._print_func = print_func or (lambda a: str(float(np.sqrt(np.mean(np.square(a))))))
        return self

    def dumps(self) -> str:
        """The initializer as MXNet's JSON string ``'["name", {settings}]'`` (``mx.init.create`` reads it back)."""
        settings = {k: (v.tolist() if hasattr(v, "tolist") and not isinstance(v, (int, float)) else v)
                    for k, v in self._settings().items()}
        return json.dumps([type(self).__name__.lower(), settings])

    def __call__(self, name: str, arr: np.ndarray) -> None:
        name = str(name)
        if name.endswith("weight"):
            self._init_weight(name, arr)
        elif name.endswith("bias"):
            self._init_bias(name, arr)
        elif name.endswith("gamma"):
            self._init_gamma(name, arr)
        elif name.endswith("beta"):
            self._init_beta(name, arr)
        elif name.endswith(("running_mean", "moving_mean")):
            self._init_zero(name, arr)
        elif name.endswith(("running_var", "moving_var")):
            self._init_one(name, arr)
        else:
            self._init_weight(name, arr)
        if self.__dict__.get("_verbose") and self._print_func is not None:
            logging.info("Initialized %s as %s: %s", name, type(self).__name__, self._print_func(arr))

    def init_weight(self, name: str, arr: np.ndarray) -> None:
        """Apply the weight rule regardless of ``name`` (used for a parameter's own init)."""
        self._init_weight(name, arr)

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _init_weight")

    def _init_zero(self, name: str, arr: np.ndarray) -> None:
        arr[...] = 0.0

    def _init_one(self, name: str, arr: np.ndarray) -> None:
        arr[...] = 1.0

    _init_bias = _init_beta = _init_zero
    _init_gamma = _init_one

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._settings().items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        """Same class and same settings (MXNet compares ``_kwargs``: ``Constant(1) == Constant(1)``)."""
        if not isinstance(other, Initializer):
            return NotImplemented
        if type(self) is not type(other):
            return False
        mine, theirs = self._settings(), other._settings()
        return mine.keys() == theirs.keys() and all(_same_setting(mine[k], theirs[k]) for k in mine)

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(self._settings()))))  # equal initializers share class and setting names


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
        super().__init__(value=value)
        self.value = value

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        arr[...] = as_host(self.value)  # np.asarray raises on a CuPy array


@register
class Uniform(Initializer):
    """Samples of U(-scale, scale); MXNet's default initializer (scale 0.07)."""

    def __init__(self, scale: float = 0.07) -> None:
        super().__init__(scale=scale)
        self.scale = scale

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        arr[...] = host_generator().uniform(-self.scale, self.scale, arr.shape)


@register
class Normal(Initializer):
    """Samples of N(0, sigma²)."""

    def __init__(self, sigma: float = 0.01) -> None:
        super().__init__(sigma=sigma)
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
        super().__init__(rnd_type=rnd_type, factor_type=factor_type, magnitude=magnitude)
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


@register
class MSRAPrelu(Xavier):
    """He et al.'s initialisation for (P)ReLU networks: Xavier 'gaussian' with magnitude ``2 / (1 + slope²)``.

    Args:
        factor_type: 'avg', 'in' or 'out' (see :class:`Xavier`).
        slope: the initial slope of the PReLU-like nonlinearity (0 for ReLU).
    """

    def __init__(self, factor_type: str = "avg", slope: float = 0.25) -> None:
        super().__init__("gaussian", factor_type, 2.0 / (1 + slope ** 2))
        self._kwargs = {"factor_type": factor_type, "slope": slope}


@register
class Orthogonal(Initializer):
    """A (semi-)orthogonal matrix times ``scale`` (Saxe et al.), from the SVD of a random matrix.

    The parameter is viewed as ``(shape[0], prod(shape[1:]))``; ``rand_type`` 'uniform' (U(-1, 1)) or
    'normal' (N(0, 1)) draws the matrix whose singular vectors are used.

    Raises:
        ValueError: an unknown ``rand_type``.
    """

    def __init__(self, scale: float = 1.414, rand_type: str = "uniform") -> None:
        if rand_type not in ("uniform", "normal"):
            raise ValueError(f"Orthogonal: rand_type must be 'uniform' or 'normal', got {rand_type!r}")
        super().__init__(scale=scale, rand_type=rand_type)
        self.scale, self.rand_type = scale, rand_type

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        rows, cols = arr.shape[0], int(np.prod(arr.shape[1:]))
        gen = host_generator()
        shape = (rows, cols)
        tmp = gen.uniform(-1.0, 1.0, shape) if self.rand_type == "uniform" else gen.normal(0.0, 1.0, shape)
        u, _, vt = np.linalg.svd(tmp, full_matrices=False)
        q = u if u.shape == tmp.shape else vt  # the factor with the parameter's (rows, cols) shape
        arr[...] = (self.scale * q).reshape(arr.shape)


@register
class Bilinear(Initializer):
    """Bilinear-upsampling kernels for a ``Conv2DTranspose`` weight ``(C_out, C_in, kh, kw)`` (every channel pair)."""

    def __init__(self) -> None:
        super().__init__()

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        if arr.ndim != 4:
            raise ValueError(f"Bilinear needs a 4-d weight (C_out, C_in, kh, kw); {name!r} has shape {arr.shape}")
        kh, kw = arr.shape[2], arr.shape[3]
        f = np.ceil(kw / 2.0)
        c = (2 * f - 1 - f % 2) / (2.0 * f)
        rows = 1 - np.abs(np.arange(kh) / f - c)
        cols = 1 - np.abs(np.arange(kw) / f - c)
        arr[...] = np.outer(rows, cols)


@register
class LSTMBias(Initializer):
    """An LSTM bias: zeros, except ``forget_bias`` for the forget gate (the second quarter, MXNet's gate order)."""

    def __init__(self, forget_bias: float = 1.0) -> None:
        super().__init__(forget_bias=forget_bias)
        self.forget_bias = forget_bias

    def _init_weight(self, name: str, arr: np.ndarray) -> None:
        arr[...] = 0.0
        hidden = arr.shape[0] // 4
        arr[hidden:2 * hidden] = self.forget_bias


class Mixed(Initializer):
    """Several initializers chosen by name: the first regular expression of ``patterns`` that matches a
    parameter's name (``re.match``) picks the initializer at the same position.

    Raises:
        ValueError: ``patterns`` and ``initializers`` differ in length, or (when called) no pattern matches.
    """

    def __init__(self, patterns: list[str], initializers: list[Initializer]) -> None:
        if len(patterns) != len(initializers):
            raise ValueError(f"Mixed: {len(patterns)} patterns but {len(initializers)} initializers")
        super().__init__()
        self.map = [(re.compile(p), create(i)) for p, i in zip(patterns, initializers)]

    def __call__(self, name: str, arr: np.ndarray) -> None:
        for pattern, init in self.map:
            if pattern.match(str(name)):
                init(name, arr)
                return
        raise ValueError(f"Mixed: parameter {name!r} matches none of the patterns "
                         f"{[p.pattern for p, _ in self.map]}; add a '.*' pattern as a default")

    init_weight = __call__


_ALIASES = {"zeros": "zero", "ones": "one"}


def create(init: Initializer | str | None, **kwargs: Any) -> Initializer | None:
    """An Initializer from an instance, a registered name ('zeros', 'xavier', ...), what :meth:`Initializer.dumps`
    wrote, or None.

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    if init is None or isinstance(init, Initializer):
        return init
    if isinstance(init, str) and init.lstrip().startswith("["):  # what dumps() wrote: '["name", {settings}]'
        name, settings = json.loads(init)
        return create(name, **{**settings, **kwargs})
    if isinstance(init, str):
        key = _ALIASES.get(init.lower(), init.lower())
        if key not in _REGISTRY:
            known = sorted(set(_REGISTRY) | set(_ALIASES))
            raise ValueError(f"unknown initializer {init!r}; known: {', '.join(known)}")
        return _REGISTRY[key](**kwargs)
    raise TypeError(f"expected an Initializer or a name, got {type(init).__name__}")
