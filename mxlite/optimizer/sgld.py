"""SGLD, Stochastic Gradient Langevin Dynamics (Welling & Teh 2011), MXNet 2.x form::

    G   = clip(rescale_grad · g, ±clip_gradient) + wd · w
    w   = w − lr/2 · G + N(0, sqrt(lr))

``N(0, sqrt(lr))`` is fresh Gaussian noise of standard deviation ``sqrt(lr)`` for every entry.
Symbols: ``lr`` and ``wd`` with their multipliers. No state.

The noise of update ``t`` of parameter ``index`` comes from a generator seeded with
(the :mod:`mxlite.ops.random` seed, ``index``, ``t``): every mirror of a parameter (one per device,
or one per process under ``dist_sync``) draws the *same* noise, so the mirrors stay identical,
and ``mx.random.seed(n)`` makes a run reproducible. (NumPy's PCG64 on CPU devices, CuPy's
generator on GPUs: a CPU and a GPU mirror of one parameter would draw different noise.)

Where mxlite differs: nowhere from MXNet.

No fused kernel: :meth:`SGLD.step` (NumPy/CuPy) is the implementation.
"""

from __future__ import annotations

import math
import zlib
from typing import Any

import numpy as np

from ..ops import random as _random
from .optimizer import Optimizer, _xp, register

__all__ = ["SGLD"]


@register
class SGLD(Optimizer):
    """SGLD with MXNet's argument names and defaults.

    Args:
        learning_rate: step size (default 0.1); also the variance of the noise.
        **kwargs: the :class:`Optimizer` arguments.
    """

    def __init__(self, learning_rate: float = 0.1, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, **kwargs)

    def _noise(self, xp: Any, shape: tuple[int, ...], dtype: Any, index: Any = 0, count: int = 1) -> Any:
        """Standard normal noise shaped like the weight, the same on every mirror of ``index`` at ``count``."""
        key = [_random.entropy() % 2**32, zlib.crc32(repr(index).encode()), int(count)]
        if xp is np:
            return np.random.Generator(np.random.PCG64(key)).standard_normal(shape).astype(dtype, copy=False)
        seed = int(np.random.SeedSequence(key).generate_state(1, np.uint32)[0])
        return xp.random.RandomState(seed).standard_normal(shape).astype(dtype, copy=False)

    def step(self, index: Any, weight: Any, grad: Any, state: Any, count: int) -> None:
        xp = _xp(weight)
        lr, wd = self._get_lr(index), self._get_wd(index)
        g = self._effective_grad(xp, grad, weight, wd)         # G = clip(rescale·g) + wd·w
        weight -= (lr / 2.0) * g                               # w −= lr/2·G
        weight += math.sqrt(lr) * self._noise(xp, weight.shape, weight.dtype, index, count)  # w += N(0, √lr)
