"""Define-by-run automatic differentiation (MXNet's ``mx.autograd``).

Usage::

    x = mx.array([1.0, 2.0]); x.attach_grad()
    with mx.autograd.record():
        y = (x * x).sum()
    y.backward()            # x.grad == [2, 4]
"""

from ._state import (
    is_recording,
    is_training,
    pause,
    predict_mode,
    record,
    set_recording,
    set_training,
    train_mode,
)
from .tensor import Tensor, backward

__all__ = [
    "Tensor",
    "backward",
    "is_recording",
    "is_training",
    "pause",
    "predict_mode",
    "record",
    "set_recording",
    "set_training",
    "train_mode",
]
