"""A data-parallel forward and backward pass on a random batch, shared by the Trainer tests."""

from __future__ import annotations

from typing import Any

import numpy as np

import mxlite as mx


def random_backward(net: Any, devices: Any, rng: np.random.Generator, batch: int, features: int,
                    classes: int) -> None:
    """Draw ``batch`` normal samples of ``features`` values and integer labels below ``classes`` from ``rng``
    (in that order), split them over ``devices``, and backpropagate the softmax cross-entropy of ``net``."""
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    x = rng.standard_normal((batch, features)).astype(np.float32)
    y = rng.integers(0, classes, batch).astype(np.float32)
    xs, ys = mx.split_and_load(x, devices), mx.split_and_load(y, devices)
    with mx.autograd.record():
        losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
    mx.autograd.backward(losses)
