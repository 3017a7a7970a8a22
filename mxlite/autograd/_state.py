"""Thread-local recording / training flags and the scopes that set them (MXNet semantics)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Flags(threading.local):
    def __init__(self) -> None:
        self.recording = False
        self.training = False


_FLAGS = _Flags()


def is_recording() -> bool:
    """True inside ``record()`` (and not inside a nested ``pause()``)."""
    return _FLAGS.recording


def is_training() -> bool:
    """True when layers such as Dropout and BatchNorm should behave as in training."""
    return _FLAGS.training


@contextmanager
def _scope(recording: bool | None, training: bool | None) -> Iterator[None]:
    old = (_FLAGS.recording, _FLAGS.training)
    if recording is not None:
        _FLAGS.recording = recording
    if training is not None:
        _FLAGS.training = training
    try:
        yield
    finally:
        _FLAGS.recording, _FLAGS.training = old


def record(train_mode: bool = True):  # noqa: ANN201 - a context manager
    """Record operations for ``backward``; ``train_mode`` also sets training behaviour."""
    return _scope(True, train_mode)


def pause(train_mode: bool = False):  # noqa: ANN201
    """Stop recording inside a ``record()`` block (e.g. for metric computation)."""
    return _scope(False, train_mode)


def train_mode():  # noqa: ANN201
    """Training behaviour (Dropout active, BatchNorm on batch statistics) without recording."""
    return _scope(None, True)


def predict_mode():  # noqa: ANN201
    """Inference behaviour, even inside ``record()``."""
    return _scope(None, False)


def set_recording(is_record: bool) -> bool:
    """Set the recording flag; returns the previous value (MXNet's ``set_recording``)."""
    old = _FLAGS.recording
    _FLAGS.recording = bool(is_record)
    return old


def set_training(train_mode: bool) -> bool:
    """Set the training flag; returns the previous value (MXNet's ``set_training``)."""
    old = _FLAGS.training
    _FLAGS.training = bool(train_mode)
    return old
