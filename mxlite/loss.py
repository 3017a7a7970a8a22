"""Loss functions (Gluon's ``gluon.loss``): each call returns one loss per sample.

Usage::

    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    with mx.autograd.record():
        loss = loss_fn(net(x), y)        # shape (batch,)
    loss.backward()                      # gradient of loss.sum()

Every loss computes an elementwise loss, multiplies it by ``sample_weight`` (which must
broadcast to that loss's shape: ``(batch, 1)`` weighs each sample of a ``(batch, k)`` loss) and by
the constructor's scalar ``weight``, then averages over every axis but ``batch_axis`` (Gluon's
``mean(loss, axis=batch_axis, exclude=True)``). Labels are reshaped to the prediction's shape
where Gluon does so (``_reshape_like``). All arithmetic goes through the differentiable ops,
so the losses work on any device and inside ``autograd.record()``.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from .autograd import nn_ops, ops
from .autograd.tensor import Tensor
from .nn.block import Block

__all__ = [
    "Loss", "L2Loss", "L1Loss", "SigmoidBinaryCrossEntropyLoss", "SigmoidBCELoss",
    "SoftmaxCrossEntropyLoss", "SoftmaxCELoss",
]


def _as_tensor_like(x: Any, like: Tensor) -> Tensor:
    """A label or weight given as a NumPy array or scalar, as a tensor on ``like``'s device."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (list, tuple, np.ndarray)):
        x = np.asarray(x)
        if np.issubdtype(x.dtype, np.floating) and np.issubdtype(like.dtype, np.floating):
            x = x.astype(like.dtype, copy=False)  # a float64 NumPy label must not upcast a float32 loss
    return ops._as_tensor(x, like)


def _reshape_like(x: Tensor, y: Tensor) -> Tensor:
    """``x`` reshaped to ``y``'s shape (the sizes must agree), as Gluon's ``_reshape_like``."""
    if x.shape == y.shape:
        return x
    if x.size != y.size:
        raise ValueError(f"label of shape {x.shape} ({x.size} elements) cannot be reshaped to the "
                         f"prediction's shape {y.shape} ({y.size} elements)")
    return ops.reshape(x, y.shape)


class Loss(Block):
    """Base class of losses: weighting and the per-sample mean (Gluon's ``Loss``, a Block).

    Args:
        weight: a global scalar multiplying the loss, or ``None`` for no scaling.
        batch_axis: the axis of the samples; the loss is averaged over every other axis.

    Raises:
        TypeError: ``weight`` is not a number.
    """

    def __init__(self, weight: float | None = None, batch_axis: int = 0) -> None:
        if weight is not None and not isinstance(weight, numbers.Number):
            raise TypeError(f"weight must be a number or None, got {type(weight).__name__}: {weight!r}")
        if isinstance(batch_axis, bool) or not isinstance(batch_axis, (int, np.integer)):
            raise TypeError(f"batch_axis must be an int, got {type(batch_axis).__name__}: {batch_axis!r}")
        super().__init__()
        self._weight = weight
        self._batch_axis = batch_axis

    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_axis={self._batch_axis}, w={self._weight})"

    def forward(self, pred: Tensor, label: Any, sample_weight: Any = None) -> Tensor:
        """The per-sample loss, shape ``(pred.shape[batch_axis],)``."""
        raise NotImplementedError

    # -- shared steps ---------------------------------------------------------------------
    def _weighted(self, loss: Tensor, sample_weight: Any, weight: float | None) -> Tensor:
        """Gluon's ``_apply_weighting``: times ``sample_weight`` (broadcast), then times ``weight``."""
        if sample_weight is not None:
            sample_weight = _as_tensor_like(sample_weight, loss)
            if np.broadcast_shapes(loss.shape, sample_weight.shape) != loss.shape:
                raise ValueError(
                    f"sample_weight of shape {sample_weight.shape} must broadcast to the loss's shape "
                    f"{loss.shape}; to weigh each sample, give it shape "
                    f"{tuple(n if i == self._batch_axis % loss.ndim else 1 for i, n in enumerate(loss.shape))}")
            loss = ops.multiply(loss, sample_weight)
        if weight is not None:
            loss = ops.multiply(loss, weight)
        return loss

    def _batch_mean(self, loss: Tensor) -> Tensor:
        """Mean over every axis but the batch axis."""
        axis = self._batch_axis % loss.ndim if loss.ndim else 0
        others = tuple(i for i in range(loss.ndim) if i != axis)
        return ops.mean(loss, axis=others) if others else loss


class L2Loss(Loss):
    """Squared error: ``weight / 2 * (pred - label)**2``, averaged per sample.

    Args:
        weight: scalar multiplying the loss (default 1, so the loss is half the squared error).
        batch_axis: the axis of the samples.
    """

    def __init__(self, weight: float | None = 1.0, batch_axis: int = 0) -> None:
        super().__init__(weight, batch_axis)

    def forward(self, pred: Tensor, label: Any, sample_weight: Any = None) -> Tensor:
        """Per-sample ``mean(weight/2 * (pred - label)**2)``; ``label`` is reshaped to ``pred``'s shape."""
        label = _reshape_like(_as_tensor_like(label, pred), pred)
        loss = ops.square(ops.subtract(label, pred))
        half = None if self._weight is None else self._weight / 2
        return self._batch_mean(self._weighted(loss, sample_weight, half))


class L1Loss(Loss):
    """Absolute error: ``weight * |pred - label|``, averaged per sample.

    Args:
        weight: scalar multiplying the loss, or ``None``.
        batch_axis: the axis of the samples.
    """

    def __init__(self, weight: float | None = None, batch_axis: int = 0) -> None:
        super().__init__(weight, batch_axis)

    def forward(self, pred: Tensor, label: Any, sample_weight: Any = None) -> Tensor:
        """Per-sample ``mean(|pred - label|)``; ``label`` is reshaped to ``pred``'s shape."""
        label = _reshape_like(_as_tensor_like(label, pred), pred)
        loss = ops.abs(ops.subtract(label, pred))
        return self._batch_mean(self._weighted(loss, sample_weight, self._weight))


class SigmoidBinaryCrossEntropyLoss(Loss):
    """Binary cross-entropy of labels ``z`` in [0, 1] and logits (or probabilities).

    With ``from_sigmoid=False`` ``pred`` holds logits ``x`` and the loss is computed in the
    overflow-free form ``relu(x) - x*z + log(1 + exp(-|x|))``; with ``from_sigmoid=True``
    ``pred`` holds probabilities ``p`` and the loss is
    ``-(z*log(p + eps) + (1-z)*log(1 - p + eps))`` with ``eps = 1e-12``. An optional
    ``pos_weight`` (broadcast to ``pred``) scales the positive term, as Gluon's.

    Args:
        from_sigmoid: ``pred`` is already a probability.
        weight: scalar multiplying the loss, or ``None``.
        batch_axis: the axis of the samples.
    """

    _EPS = 1e-12  # Gluon's guard against log(0) in the from_sigmoid form

    def __init__(self, from_sigmoid: bool = False, weight: float | None = None, batch_axis: int = 0) -> None:
        super().__init__(weight, batch_axis)
        self._from_sigmoid = from_sigmoid

    def __call__(self, pred: Tensor, label: Any, sample_weight: Any = None, pos_weight: Any = None) -> Tensor:
        return self.forward(pred, label, sample_weight, pos_weight)

    def forward(self, pred: Tensor, label: Any, sample_weight: Any = None, pos_weight: Any = None) -> Tensor:
        """Per-sample mean binary cross-entropy; ``label`` is reshaped to ``pred``'s shape."""
        z = _reshape_like(_as_tensor_like(label, pred), pred)
        if not self._from_sigmoid:
            # log(1 + exp(-|x|)): the softplus of a non-positive number never overflows.
            softplus = ops.log(ops.add(ops.exp(ops.negative(ops.abs(pred))), 1.0))
            if pos_weight is None:
                loss = ops.add(ops.subtract(ops.relu(pred), ops.multiply(pred, z)), softplus)
            else:
                # (1 - z) * x + (1 + (pw - 1) * z) * (log(1 + exp(-|x|)) + relu(-x))
                log_weight = ops.add(ops.multiply(ops.subtract(_as_tensor_like(pos_weight, pred), 1.0), z), 1.0)
                loss = ops.add(ops.subtract(pred, ops.multiply(pred, z)),
                               ops.multiply(log_weight, ops.add(softplus, ops.relu(ops.negative(pred)))))
        else:
            eps = self._EPS
            pos = ops.multiply(ops.log(ops.add(pred, eps)), z)
            if pos_weight is not None:
                pos = ops.multiply(pos, _as_tensor_like(pos_weight, pred))
            neg = ops.multiply(ops.log(ops.add(ops.subtract(1.0, pred), eps)), ops.subtract(1.0, z))
            loss = ops.negative(ops.add(pos, neg))
        return self._batch_mean(self._weighted(loss, sample_weight, self._weight))


SigmoidBCELoss = SigmoidBinaryCrossEntropyLoss


class SoftmaxCrossEntropyLoss(Loss):
    """Cross-entropy of a softmax over ``axis``: ``-sum(label * log_softmax(pred))``.

    With ``sparse_label`` (the default) each label is a class id (integer or float) and
    the loss is ``-log_softmax(pred)[label]``; otherwise ``label`` is a distribution of
    ``pred``'s shape. With ``from_logits`` ``pred`` already holds log-probabilities.

    Args:
        axis: the class axis.
        sparse_label: labels are class ids rather than distributions.
        from_logits: skip the log-softmax (``pred`` are log-probabilities).
        weight: scalar multiplying the loss, or ``None``.
        batch_axis: the axis of the samples.
    """

    def __init__(self, axis: int = -1, sparse_label: bool = True, from_logits: bool = False,
                 weight: float | None = None, batch_axis: int = 0) -> None:
        super().__init__(weight, batch_axis)
        self._axis = axis
        self._sparse_label = sparse_label
        self._from_logits = from_logits

    def forward(self, pred: Tensor, label: Any, sample_weight: Any = None) -> Tensor:
        """Per-sample cross-entropy, shape ``(batch,)``.

        Raises:
            ValueError: ``label`` does not have one class id per row (sparse) or ``pred``'s
                size (dense).
        """
        logp = pred if self._from_logits else nn_ops.log_softmax(pred, self._axis)
        label = _as_tensor_like(label, pred)
        if self._sparse_label:
            ids = tuple(n for i, n in enumerate(pred.shape) if i != self._axis % len(pred.shape))
            if label.size != int(np.prod(ids)):
                raise ValueError(f"SoftmaxCrossEntropyLoss: the label must have shape {ids} (one class id per sample "
                                 f"of pred {tuple(pred.shape)}), got {tuple(label.shape)}")
            loss = ops.negative(nn_ops.pick(logp, label, axis=self._axis, keepdims=True))
        else:
            label = _reshape_like(label, logp)
            loss = ops.negative(ops.sum(ops.multiply(logp, label), axis=self._axis, keepdims=True))
        return self._batch_mean(self._weighted(loss, sample_weight, self._weight))


SoftmaxCELoss = SoftmaxCrossEntropyLoss
