"""Random numbers, seeded and reproducible per device.

Each device draws from its own stream, derived from the seed and the device's identity, so
``seed(s)`` followed by the same calls gives the same numbers on every run; on CPU devices
NumPy's PCG64, on GPUs CuPy's generator. Initializers draw from a separate host stream so that
every mirror of a parameter gets the same values. Without a call to :func:`seed` the streams
start from fresh OS entropy (as MXNet's do). Dropout on GPUs draws from a counter-based generator
whose position lives on the device (:mod:`mxlite.ops._philox`), seeded here as well.

The distribution samplers (:func:`sample`: MXNet 1.x's ``sample_*`` operators and the ``random.*``
samplers with array parameters; :func:`multinomial` with its log-probability gradient; :func:`choice`,
:func:`multinomial_counts`) draw on the host with NumPy's generators, one implementation for every
device: a CPU device's own stream, or a host stream of each GPU's (seeded with it), whose draws are
copied to the GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..autograd.tensor import Tensor
from ..device import Device, as_device, cpu
from ..device.copy import copy_between
from . import core

__all__ = ["DISTRIBUTIONS", "Distribution", "choice", "entropy", "get_state", "host_generator", "multinomial", "normal",
           "multinomial_counts", "parse_state", "randint", "sample", "seed", "set_state", "shuffle", "uniform"]

_HOST_STREAM = 2**31 - 1  # device-id slot reserved for the host (initializer) stream
_HOST_DRAWS = 2  # the stream kind of a GPU's host-drawn samples (0: CPU devices, 1: the GPU's own generator)
_seed_entropy: int | None = None
_generators: dict[Any, Any] = {}
# Per GPU: the NumPy generator the distribution samplers (sample, multinomial, choice) draw from on the host
_host_draws: dict[Device, np.random.Generator] = {}
_gpu_reseeds: list[Callable[[Device | None, int], None]] = []  # see on_gpu_seed


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
    if device == "all":
        _seed_entropy = int(seed_state)
        _generators.clear()
        _host_draws.clear()
        _tell_gpu_streams(None, int(seed_state))
    else:
        dev = as_device(device)
        _generators[dev] = _make_generator(dev, int(seed_state))
        if dev.is_gpu:
            _host_draws[dev] = _make_host_draws(dev, int(seed_state))
            _tell_gpu_streams(dev, int(seed_state))


def on_gpu_seed(reseed: Callable[[Device | None, int], None]) -> None:
    """Have ``reseed(device, seed)`` called whenever the GPUs' streams restart from a seed: ``(None, seed)`` for
    every GPU (:func:`seed` for all devices, :func:`set_state`), ``(gpu, seed)`` for one. The GPU dropout
    generator (:mod:`mxlite.ops._philox`, which keeps its state on the device) registers here at import."""
    _gpu_reseeds.append(reseed)


def _tell_gpu_streams(device: Device | None, seed_state: int) -> None:
    for reseed in _gpu_reseeds:
        reseed(device, seed_state)


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
    entropy, restored = parse_state(state)
    _seed_entropy = entropy
    _generators.clear()
    _generators.update(restored)
    _host_draws.clear()  # restart from the seed, as the GPUs' own generators do
    if entropy is not None:
        _tell_gpu_streams(None, entropy)  # GPU dropout streams restart from the seed too


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


def _make_host_draws(dev: Device, seed_state: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed_state, _HOST_DRAWS, dev.device_id])))


def _sampling_stream(dev: Device) -> np.random.Generator:
    """The NumPy generator the distribution samplers draw from for ``dev``: a CPU device's own stream; for a
    GPU, a host stream of its own (seeded by :func:`seed` with the GPU's), whose draws are copied to it."""
    if dev.device_type == "cpu":
        return _generator(dev)
    gen = _host_draws.get(dev)
    if gen is None:
        gen = _host_draws[dev] = _make_host_draws(dev, entropy())
    return gen


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


# -- distributions with array parameters (MXNet 1.x's sample_* operators, mx.np.random) ----------------
def _gen_neg_binomial(gen: np.random.Generator, mu: Any, alpha: Any, size: tuple[int, ...]) -> np.ndarray:
    """Poisson draws whose rate is Gamma(1/alpha, alpha*mu): mean ``mu``, variance ``mu + alpha*mu²``
    (Poisson(mu) where alpha is 0), as MXNet's generalized negative binomial."""
    mu, alpha = np.broadcast_arrays(np.asarray(mu, dtype=np.float64), np.asarray(alpha, dtype=np.float64))
    positive = alpha > 0
    safe = np.where(positive, alpha, 1.0)
    rate = np.where(positive, gen.gamma(1.0 / safe, safe * mu, size), np.broadcast_to(mu, size))
    return gen.poisson(rate, size).astype(np.float64)


class Distribution(NamedTuple):
    """A distribution the samplers draw: its parameters' names, the host draw ``draw(generator, *params,
    size)`` (float64 results) and the rules its parameters must satisfy, as (rule, test on the parameters)."""

    params: tuple[str, ...]
    draw: Callable[..., np.ndarray]
    rules: tuple[tuple[str, Callable[..., Any]], ...]


def _as_float(draws: np.ndarray) -> np.ndarray:
    return np.asarray(draws, dtype=np.float64)


DISTRIBUTIONS: dict[str, Distribution] = {
    "uniform": Distribution(("low", "high"), lambda g, lo, hi, n: g.uniform(lo, hi, n),
                            (("low <= high", lambda lo, hi: lo <= hi),)),
    "normal": Distribution(("loc", "scale"), lambda g, mu, sd, n: g.normal(mu, sd, n),
                           (("scale >= 0", lambda mu, sd: sd >= 0),)),
    "gamma": Distribution(("alpha", "beta"), lambda g, a, b, n: g.gamma(a, b, n),
                          (("alpha > 0", lambda a, b: a > 0), ("beta > 0", lambda a, b: b > 0))),
    "exponential": Distribution(("lam",), lambda g, lam, n: g.exponential(1.0 / lam, n),
                                (("lam > 0", lambda lam: lam > 0),)),
    "poisson": Distribution(("lam",), lambda g, lam, n: _as_float(g.poisson(lam, n)),
                            (("lam >= 0", lambda lam: lam >= 0),)),
    "negative_binomial": Distribution(("k", "p"), lambda g, k, p, n: _as_float(g.negative_binomial(k, p, n)),
                                      (("k > 0", lambda k, p: k > 0), ("0 < p <= 1", lambda k, p: (p > 0) & (p <= 1)))),
    "generalized_negative_binomial": Distribution(("mu", "alpha"), _gen_neg_binomial,
                                                  (("mu >= 0", lambda mu, a: mu >= 0),
                                                   ("alpha >= 0", lambda mu, a: a >= 0))),
}


def _float_dtype(dtype: Any, where: str) -> np.dtype:
    out = np.dtype(dtype if dtype is not None else np.float32)
    if out not in (np.float16, np.float32, np.float64):
        raise TypeError(f"{where}: samples are float16, float32 or float64, got dtype {out}")
    return out


def _host_params(dist: str, params: Any, device: Any) -> tuple[list[np.ndarray], tuple[int, ...], Device]:
    """(parameters as float64 host arrays, their shape, the device): all numbers (the device is ``device``), or
    all arrays of one shape (their device), as MXNet's samplers take them.

    Raises:
        TypeError: numbers mixed with arrays. ValueError: arrays of different shapes or devices.
    """
    names = DISTRIBUTIONS[dist].params
    arrays = [p for p in params if isinstance(p, Tensor)]
    if not arrays:
        return [np.float64(p) for p in params], (), as_device(device)
    if len(arrays) != len(params):
        kinds = ", ".join(f"{n}={type(p).__name__}" for n, p in zip(names, params))
        raise TypeError(f"{dist}: the parameters must all be arrays or all numbers, got {kinds}")
    first = arrays[0]
    if any(p.shape != first.shape or p.device != first.device for p in arrays):
        shown = ", ".join(f"{n}: shape {q.shape} on {q.device}" for n, q in zip(names, arrays))
        raise ValueError(f"{dist}: the parameter arrays must have one shape and device, got {shown}")
    return [p.asnumpy().astype(np.float64) for p in arrays], first.shape, first.device


def _check_params(dist: str, values: list[np.ndarray]) -> None:
    """Raise ValueError naming the distribution, the rule and the first value that breaks it (or a NaN)."""
    names = DISTRIBUTIONS[dist].params
    for name, v in zip(names, values):
        if np.isnan(v).any():
            raise ValueError(f"{dist}: parameter {name} holds NaN")
    for rule, test in DISTRIBUTIONS[dist].rules:
        ok = np.broadcast_to(test(*values), np.broadcast_shapes(*(np.shape(v) for v in values)))
        if not ok.all():
            at = tuple(int(i) for i in np.argwhere(~ok)[0])
            shown = ", ".join(f"{n}={float(np.broadcast_to(v, ok.shape)[at])}" for n, v in zip(names, values))
            raise ValueError(f"{dist}: needs {rule}, got {shown}" + (f" at index {at}" if at else ""))


def sample(dist: str, params: Any, shape: Any = (), dtype: Any = None, device: Any = None) -> Tensor:
    """Samples of distribution ``dist`` (a key of :data:`DISTRIBUTIONS`) for each set of parameters.

    ``params`` are all numbers (the result has ``shape``, on ``device``) or all arrays of one shape ``P``
    (the result has shape ``P + shape``, on their device: ``shape`` samples per entry), as MXNet 1.x's
    ``sample_*`` operators: uniform(low, high), normal(loc, scale), gamma(alpha, beta) (shape and scale:
    mean ``alpha * beta``), exponential(lam) (rate: mean ``1 / lam``), poisson(lam), negative_binomial(k, p)
    (failures before the k-th success of probability p), generalized_negative_binomial(mu, alpha) (mean
    ``mu``, variance ``mu + alpha * mu²``). Drawn on the host from the device's sampling stream
    (:func:`seed` makes them reproducible) in float64, then cast to ``dtype`` (float32 by default;
    discrete distributions give whole numbers in it). No gradient.

    Raises:
        KeyError: an unknown ``dist``. TypeError: a non-float ``dtype``, or numbers mixed with arrays.
        ValueError: parameters outside the distribution's domain (names the rule and the value), or
            parameter arrays of different shapes or devices.
    """
    if dist not in DISTRIBUTIONS:
        raise KeyError(f"unknown distribution {dist!r}; known: {sorted(DISTRIBUTIONS)}")
    out_dtype = _float_dtype(dtype, dist)
    values, pshape, dev = _host_params(dist, list(params), device)
    sshape = _shape(shape)
    values = [np.reshape(v, pshape + (1,) * len(sshape)) for v in values]
    _check_params(dist, values)
    draws = DISTRIBUTIONS[dist].draw(_sampling_stream(dev), *values, pshape + sshape)
    return Tensor(copy_between(np.asarray(draws).astype(out_dtype), cpu(0), dev, copy=False), dev)


def _max_exact_index(dtype: np.dtype) -> int:
    """The largest category index ``dtype`` holds exactly."""
    if np.issubdtype(dtype, np.integer):
        return int(np.iinfo(dtype).max)
    return 2 ** (np.finfo(dtype).nmant + 1)


def _check_probabilities(probs: np.ndarray, where: str) -> None:
    """Raise ValueError unless every row of ``probs`` (N, K) is finite, >= 0 and sums to 1 (to rounding)."""
    bad = ~np.isfinite(probs) | (probs < 0)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise ValueError(f"{where}: probabilities must be finite and >= 0; distribution {row} holds "
                         f"{probs[row].tolist()[:8]}")
    totals = probs.sum(axis=1)
    tol = 1e-2 if probs.dtype == np.float16 else 1e-4 if probs.dtype == np.float32 else 1e-8
    off = np.abs(totals - 1) > tol * max(1.0, np.sqrt(probs.shape[1]))
    if off.any():
        row = int(np.argwhere(off)[0][0])
        raise ValueError(f"{where}: each distribution must sum to 1 along the last axis; distribution {row} "
                         f"sums to {float(totals[row])!r}")


def multinomial(data: Tensor, shape: Any = (), get_prob: bool = False, dtype: Any = np.int32) -> Any:
    """Category indices drawn from the distributions along ``data``'s last axis (MXNet 1.x's
    ``sample_multinomial``): ``data`` ``(..., K)`` holds probabilities summing to 1; ``shape`` samples are
    drawn from each, giving ``data.shape[:-1] + shape`` (``shape``, or ``(1,)``, for a 1-D ``data``) in
    ``dtype`` (int32 by default).

    The draw is MXNet's: the first category whose cumulative probability reaches a uniform number.
    With ``get_prob`` returns ``[samples, log_prob]``: ``log_prob`` (``data``'s dtype and the samples'
    shape) is the log-probability of each drawn sample, and the gradient flowing into it reaches ``data``
    as ``1 / p`` at the drawn category (REINFORCE: the reward as its head gradient), as MXNet's.

    Raises:
        ValueError: ``data`` with no axis, probabilities that are negative, not finite or do not sum to 1,
            or more categories than ``dtype`` can index exactly (uint8: 256).
    """
    if data.ndim == 0:
        raise ValueError("multinomial: data needs a last axis of category probabilities, got a 0-d array")
    out_dtype = np.dtype(dtype)
    k = data.shape[-1]
    if k - 1 > _max_exact_index(out_dtype):
        raise ValueError(f"multinomial: {k} categories cannot be indexed exactly in dtype {out_dtype} (its largest "
                         f"exact index is {_max_exact_index(out_dtype)}); give a wider dtype")
    sshape = _shape(shape)
    rows = int(np.prod(data.shape[:-1]))
    count = int(np.prod(sshape))
    probs = data.asnumpy().reshape(rows, k)
    _check_probabilities(probs, "multinomial")
    idx = _categorical(_sampling_stream(data.device), probs.astype(np.float64), count)  # (rows, count)
    out_shape = (sshape or (1,)) if data.ndim == 1 else data.shape[:-1] + sshape
    dev = data.device
    samples = Tensor(copy_between(idx.reshape(out_shape).astype(out_dtype), cpu(0), dev, copy=False), dev)
    if not get_prob:
        return samples
    picked = core.take_along_axis(core.reshape(data, (rows, k)), idx, axis=1)
    return [samples, core.reshape(core.log(picked), out_shape)]


def _categorical(gen: np.random.Generator, probs: np.ndarray, count: int) -> np.ndarray:
    """``count`` category indices per row of ``probs`` (rows, K): for each uniform u, the first category whose
    cumulative probability is >= u (MXNet's search); a row summing to a little less than u gives its last."""
    cdf = np.cumsum(probs, axis=1)
    u = gen.random((probs.shape[0], count))
    idx = np.empty(u.shape, dtype=np.int64)
    for row in range(probs.shape[0]):
        idx[row] = np.searchsorted(cdf[row], u[row], side="left")
    return np.minimum(idx, probs.shape[1] - 1)


def choice(a: Any, size: Any = None, replace: bool = True, p: Any = None, device: Any = None) -> Tensor:
    """NumPy's ``random.choice``: ``size`` draws (one when None, as a 0-d array) from ``range(a)`` (an int)
    or from a 1-D array ``a`` (its elements), with or without replacement, uniform or with probabilities
    ``p``. Indices are int64 on ``device`` (an array ``a``'s device); elements keep ``a``'s dtype.

    Raises:
        ValueError: a non-positive ``a``, ``a`` not 1-D, ``p`` of another length or not a distribution,
            or more draws than entries without replacement (NumPy's checks, naming ``choice``).
    """
    if isinstance(a, Tensor):
        if a.ndim != 1:
            raise ValueError(f"choice: a must be an int or a 1-D array, got shape {a.shape}")
        n, dev = a.shape[0], a.device
    else:
        n, dev = int(a), as_device(device)
    probs = None if p is None else _choice_probabilities(p, n)
    try:
        idx = _sampling_stream(dev).choice(n, size=size if size is None else _shape(size), replace=replace,
                                           p=probs)
    except ValueError as exc:
        raise ValueError(f"choice: {exc}") from None
    picked = Tensor(copy_between(np.asarray(idx, dtype=np.int64), cpu(0), dev, copy=False), dev)
    if not isinstance(a, Tensor):
        return picked
    return core.getitem(a, picked)


def _choice_probabilities(p: Any, n: int) -> np.ndarray:
    """``p`` as float64 probabilities of ``n`` entries, checked to sum to 1 to the rounding of its own dtype
    (float16 weights pass, as MXNet's), then normalised.

    Raises:
        ValueError: ``p`` not 1-D of ``n`` entries, or not a distribution.
    """
    host = p.asnumpy() if isinstance(p, Tensor) else np.asarray(p, dtype=np.float64)
    if host.shape != (n,):
        raise ValueError(f"choice: p must be 1-D with one probability per entry ({n}), got shape {host.shape}")
    _check_probabilities(host.reshape(1, n), "choice")
    wide = host.astype(np.float64)
    return wide / wide.sum()


def multinomial_counts(n: int, pvals: Any, size: Any = None, device: Any = None) -> Tensor:
    """NumPy's ``random.multinomial``: counts of ``n`` trials over the outcomes of probabilities ``pvals``,
    shape ``size + (len(pvals),)``, int64.

    Raises:
        ValueError: a negative ``n`` or ``pvals`` that is not a distribution (NumPy's checks, naming the call).
    """
    probs = np.asarray(pvals.asnumpy() if isinstance(pvals, Tensor) else pvals, dtype=np.float64)
    dev = pvals.device if isinstance(pvals, Tensor) else as_device(device)
    try:
        counts = _sampling_stream(dev).multinomial(int(n), probs, size=None if size is None else _shape(size))
    except ValueError as exc:
        raise ValueError(f"multinomial: {exc}") from None
    return Tensor(copy_between(np.asarray(counts, dtype=np.int64), cpu(0), dev, copy=False), dev)
