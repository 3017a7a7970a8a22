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

import math
import numbers
from typing import Any

import numpy as np

from .. import ops
from ..autograd.tensor import Tensor
from ..ops import nn_ops
from .block import Block

__all__ = [
    "Loss", "L2Loss", "L1Loss", "SigmoidBinaryCrossEntropyLoss", "SigmoidBCELoss",
    "SoftmaxCrossEntropyLoss", "SoftmaxCELoss", "KLDivLoss", "CTCLoss", "HuberLoss", "HingeLoss",
    "SquaredHingeLoss", "LogisticLoss", "TripletLoss", "PoissonNLLLoss", "CosineEmbeddingLoss", "SDMLLoss",
]


def _as_tensor_like(x: Any, like: Tensor) -> Tensor:
    """A label or weight given as a NumPy array or scalar, as a tensor on ``like``'s device."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (list, tuple, np.ndarray)):
        x = np.asarray(x)
        if np.issubdtype(x.dtype, np.floating) and np.issubdtype(like.dtype, np.floating):
            x = x.astype(like.dtype, copy=False)  # a float64 NumPy label must not upcast a float32 loss
    return ops.as_tensor(x, like)


def _reshape_like(*args: Any) -> Tensor:
    """``x`` reshaped to ``y``'s shape (the sizes must agree): Gluon's ``_reshape_like(F, x, y)``, which
    MXNet's examples import for their own losses; ``_reshape_like(x, y)`` works too (``F`` is not needed).

    Raises:
        TypeError: not two or three arguments. ValueError: the sizes differ.
    """
    if len(args) not in (2, 3):
        raise TypeError(f"_reshape_like takes (F, x, y) or (x, y), got {len(args)} arguments")
    x, y = args[-2:]
    x = _as_tensor_like(x, y)
    if x.shape == y.shape:
        return x
    if x.size != y.size:
        raise ValueError(f"label of shape {x.shape} ({x.size} elements) cannot be reshaped to the "
                         f"prediction's shape {y.shape} ({y.size} elements)")
    return ops.reshape(x, y.shape)


def _apply_weighting(F: Any, loss: Any, weight: float | None = None, sample_weight: Any = None) -> Tensor:
    """Gluon's ``_apply_weighting(F, loss, weight, sample_weight)``, which MXNet's examples import for their own
    losses: ``loss`` times ``sample_weight`` (broadcast), then times the number ``weight``. ``F`` is not needed.

    Raises:
        TypeError: ``weight`` is not a number.
    """
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, numbers.Number)):
        raise TypeError(f"_apply_weighting: weight must be a number, got {type(weight).__name__}: {weight!r}")
    if sample_weight is not None:
        loss = ops.multiply(loss, _as_tensor_like(sample_weight, loss))
    if weight is not None:
        loss = ops.multiply(loss, weight)
    return loss


class Loss(Block):
    """Base class of losses: weighting and the per-sample mean (Gluon's ``Loss``, a Block).

    Args:
        weight: a global scalar multiplying the loss, or ``None`` for no scaling.
        batch_axis: the axis of the samples; the loss is averaged over every other axis.

    Raises:
        TypeError: ``weight`` is not a number.
    """

    def __init__(self, weight: float | None = None, batch_axis: int = 0, **kwargs: Any) -> None:
        if weight is not None and not isinstance(weight, numbers.Number):
            raise TypeError(f"weight must be a number or None, got {type(weight).__name__}: {weight!r}")
        if isinstance(batch_axis, bool) or not isinstance(batch_axis, (int, np.integer)):
            raise TypeError(f"batch_axis must be an int, got {type(batch_axis).__name__}: {batch_axis!r}")
        super().__init__(**kwargs)
        self._weight = weight
        self._batch_axis = batch_axis

    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_axis={self._batch_axis}, w={self._weight})"

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        """The per-sample loss, shape ``(pred.shape[batch_axis],)``: subclasses override this, or define
        Gluon 1.x's ``hybrid_forward(self, F, pred, label, ...)``, which is called with ``F`` = ``mx.nd``
        (as :meth:`Block.forward` does).

        Raises:
            NotImplementedError: the subclass defines neither.
        """
        return super().forward(*args, **kwargs)

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

    def __init__(self, weight: float | None = 1.0, batch_axis: int = 0, **kwargs: Any) -> None:
        super().__init__(weight, batch_axis, **kwargs)

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

    def __init__(self, weight: float | None = None, batch_axis: int = 0, **kwargs: Any) -> None:
        super().__init__(weight, batch_axis, **kwargs)

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

    def __init__(self, from_sigmoid: bool = False, weight: float | None = None, batch_axis: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(weight, batch_axis, **kwargs)
        self._from_sigmoid = from_sigmoid

    def __call__(self, pred: Tensor, label: Any, sample_weight: Any = None, pos_weight: Any = None) -> Tensor:
        return self.forward(pred, label, sample_weight, pos_weight)

    def forward(self, pred: Tensor, label: Any, sample_weight: Any = None, pos_weight: Any = None) -> Tensor:
        """Per-sample mean binary cross-entropy; ``label`` is reshaped to ``pred``'s shape."""
        z = _reshape_like(_as_tensor_like(label, pred), pred)
        if not self._from_sigmoid:
            softplus = _softplus(ops.negative(ops.abs(pred)))  # log(1 + exp(-|x|)): never overflows
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
                 weight: float | None = None, batch_axis: int = 0, **kwargs: Any) -> None:
        super().__init__(weight, batch_axis, **kwargs)
        self._axis = axis
        self._sparse_label = sparse_label
        self._from_logits = from_logits

    def forward(self, pred: Tensor, label: Any, sample_weight: Any = None) -> Tensor:
        """Per-sample cross-entropy, shape ``(batch,)``.

        Raises:
            ValueError: ``label`` does not have one class id per row (sparse) or ``pred``'s
                size (dense).
        """
        label = _as_tensor_like(label, pred)
        if self._sparse_label:
            ids = tuple(n for i, n in enumerate(pred.shape) if i != self._axis % len(pred.shape))
            if label.size != int(np.prod(ids)):
                raise ValueError(f"SoftmaxCrossEntropyLoss: the label must have shape {ids} (one class id per sample "
                                 f"of pred {tuple(pred.shape)}), got {tuple(label.shape)}")
        else:
            label = _reshape_like(label, pred)
        if self._fused(pred, label):
            loss = nn_ops.softmax_cross_entropy(pred, label, self._sparse_label)
        else:
            logp = pred if self._from_logits else nn_ops.log_softmax(pred, self._axis)
            if self._sparse_label:
                loss = ops.negative(nn_ops.pick(logp, label, axis=self._axis, keepdims=True))
            else:
                loss = ops.negative(ops.sum(ops.multiply(logp, label), axis=self._axis, keepdims=True))
        return self._batch_mean(self._weighted(loss, sample_weight, self._weight))

    def _fused(self, pred: Tensor, label: Tensor) -> bool:
        """Whether one fused op (:func:`nn_ops.softmax_cross_entropy`: the log-softmax, the pick or the dot,
        one pass per row and direction) computes the loss: for float32/float64 logits over their last axis,
        not ``from_logits``, and dense labels of ``pred``'s dtype. Otherwise the composed ops do (the same
        numbers to rounding)."""
        return (not self._from_logits and pred.ndim > 0 and self._axis % pred.ndim == pred.ndim - 1
                and pred.size > 0 and np.dtype(pred.dtype).name in ("float32", "float64")
                and (self._sparse_label or label.dtype == pred.dtype))


SoftmaxCELoss = SoftmaxCrossEntropyLoss


def _mask(cond: Any, like: Tensor) -> Tensor:
    """A constant boolean tensor (no gradient) on ``like``'s device from a raw comparison result."""
    return Tensor(cond, like.device)


def _softplus(x: Tensor) -> Tensor:
    """``log(1 + exp(x))`` for x <= 0 (the callers pass ``-|pred|``): never overflows."""
    return ops.log(ops.add(ops.exp(x), 1.0))


class KLDivLoss(Loss):
    """Kullback-Leibler divergence ``label * (log(label + 1e-12) - pred)``, averaged per sample.

    With ``from_logits`` (the default) ``pred`` holds log-probabilities; otherwise a log-softmax
    over ``axis`` is applied to it first. ``label`` holds probabilities, shaped like ``pred``.

    Args:
        from_logits: ``pred`` is already a log-probability.
        axis: the class axis of the log-softmax (only without ``from_logits``).
        weight: scalar multiplying the loss, or ``None``.
        batch_axis: the axis of the samples.
    """

    def __init__(self, from_logits: bool = True, axis: int = -1, weight: float | None = None,
                 batch_axis: int = 0, **kwargs: Any) -> None:
        super().__init__(weight, batch_axis, **kwargs)
        self._from_logits = from_logits
        self._axis = axis

    def forward(self, pred: Tensor, label: Any, sample_weight: Any = None) -> Tensor:
        """Per-sample mean of ``label * (log(label + 1e-12) - log_prob)``."""
        logp = pred if self._from_logits else nn_ops.log_softmax(pred, self._axis)
        label = _as_tensor_like(label, pred)
        loss = ops.multiply(label, ops.subtract(ops.log(ops.add(label, 1e-12)), logp))
        return self._batch_mean(self._weighted(loss, sample_weight, self._weight))


class HuberLoss(Loss):
    """Smoothed L1: ``0.5/rho * d**2`` where ``d = |label - pred| <= rho``, else ``d - 0.5*rho``; mean per sample.

    Args:
        rho: the threshold between the quadratic and the linear part (> 0).
        weight: scalar multiplying the loss, or ``None``.
        batch_axis: the axis of the samples.

    Raises:
        ValueError: ``rho <= 0``.
    """

    def __init__(self, rho: float = 1, weight: float | None = None, batch_axis: int = 0, **kwargs: Any) -> None:
        if isinstance(rho, bool) or not isinstance(rho, numbers.Real) or not rho > 0:
            raise ValueError(f"HuberLoss: rho must be a number > 0, got {rho!r}")
        super().__init__(weight, batch_axis, **kwargs)
        self._rho = rho

    def forward(self, pred: Tensor, label: Any, sample_weight: Any = None) -> Tensor:
        """Per-sample mean Huber loss; ``label`` is reshaped to ``pred``'s shape."""
        label = _reshape_like(_as_tensor_like(label, pred), pred)
        dist = ops.abs(ops.subtract(label, pred))
        loss = ops.where(ops.greater(dist, self._rho), ops.subtract(dist, 0.5 * self._rho),
                         ops.multiply(ops.square(dist), 0.5 / self._rho))
        return self._batch_mean(self._weighted(loss, sample_weight, self._weight))


class HingeLoss(Loss):
    """SVM hinge loss ``max(0, margin - pred * label)`` for labels -1/1, averaged per sample.

    Args:
        margin: the margin.
        weight: scalar multiplying the loss, or ``None``.
        batch_axis: the axis of the samples.
    """

    def __init__(self, margin: float = 1, weight: float | None = None, batch_axis: int = 0, **kwargs: Any) -> None:
        super().__init__(weight, batch_axis, **kwargs)
        self._margin = margin

    def _hinge(self, pred: Tensor, label: Any) -> Tensor:
        label = _reshape_like(_as_tensor_like(label, pred), pred)
        return ops.relu(ops.subtract(self._margin, ops.multiply(pred, label)))

    def forward(self, pred: Tensor, label: Any, sample_weight: Any = None) -> Tensor:
        """Per-sample mean hinge loss; ``label`` (-1 or 1) is reshaped to ``pred``'s shape."""
        return self._batch_mean(self._weighted(self._hinge(pred, label), sample_weight, self._weight))


class SquaredHingeLoss(HingeLoss):
    """Soft-margin SVM loss ``max(0, margin - pred * label)**2`` for labels -1/1, averaged per sample.

    Args:
        margin: the margin.
        weight: scalar multiplying the loss, or ``None``.
        batch_axis: the axis of the samples.
    """

    def forward(self, pred: Tensor, label: Any, sample_weight: Any = None) -> Tensor:
        """Per-sample mean squared hinge loss; ``label`` (-1 or 1) is reshaped to ``pred``'s shape."""
        loss = ops.square(self._hinge(pred, label))
        return self._batch_mean(self._weighted(loss, sample_weight, self._weight))


class LogisticLoss(Loss):
    """Logistic loss ``log(1 + exp(-pred * label))`` (labels -1/1; 0/1 with ``label_format='binary'``).

    Computed in the overflow-free form ``relu(x) - x*z + log(1 + exp(-|x|))`` with ``z`` the 0/1
    label, so it equals :class:`SigmoidBinaryCrossEntropyLoss` on binary labels.

    Args:
        weight: scalar multiplying the loss, or ``None``.
        batch_axis: the axis of the samples.
        label_format: ``'signed'`` (labels -1/1) or ``'binary'`` (labels 0/1).

    Raises:
        ValueError: another ``label_format``.
    """

    def __init__(self, weight: float | None = None, batch_axis: int = 0, label_format: str = "signed",
                 **kwargs: Any) -> None:
        if label_format not in ("signed", "binary"):
            raise ValueError(f"label_format can only be 'signed' or 'binary', got {label_format!r}")
        super().__init__(weight, batch_axis, **kwargs)
        self._label_format = label_format

    def forward(self, pred: Tensor, label: Any, sample_weight: Any = None) -> Tensor:
        """Per-sample mean logistic loss; ``label`` is reshaped to ``pred``'s shape."""
        z = _reshape_like(_as_tensor_like(label, pred), pred)
        if self._label_format == "signed":
            z = ops.divide(ops.add(z, 1.0), 2.0)
        loss = ops.add(ops.subtract(ops.relu(pred), ops.multiply(pred, z)), _softplus(ops.negative(ops.abs(pred))))
        return self._batch_mean(self._weighted(loss, sample_weight, self._weight))


class TripletLoss(Loss):
    """Triplet loss ``max(0, ||positive - pred||² - ||negative - pred||² + margin)`` per sample.

    The squared distances are summed over every axis but ``batch_axis``; the weighting applies to
    the per-sample loss (MXNet 2.x).

    Args:
        margin: the margin between the positive and the negative distance.
        weight: scalar multiplying the loss, or ``None``.
        batch_axis: the axis of the samples.
    """

    def __init__(self, margin: float = 1, weight: float | None = None, batch_axis: int = 0, **kwargs: Any) -> None:
        super().__init__(weight, batch_axis, **kwargs)
        self._margin = margin

    def forward(self, pred: Tensor, positive: Any, negative: Any, sample_weight: Any = None) -> Tensor:
        """Per-sample triplet loss, shape ``(batch,)``; ``positive``/``negative`` take ``pred``'s shape."""
        positive = _reshape_like(_as_tensor_like(positive, pred), pred)
        negative = _reshape_like(_as_tensor_like(negative, pred), pred)
        diff = ops.subtract(ops.square(ops.subtract(positive, pred)), ops.square(ops.subtract(negative, pred)))
        axis = self._batch_axis % diff.ndim
        others = tuple(i for i in range(diff.ndim) if i != axis)
        loss = ops.relu(ops.add(ops.sum(diff, axis=others) if others else diff, self._margin))
        return self._weighted(loss, sample_weight, self._weight)


class PoissonNLLLoss(Loss):
    """Negative log-likelihood of a Poisson target, averaged per sample.

    ``exp(pred) - target * pred`` with ``from_logits`` (``pred`` is the log of the rate), else
    ``pred - target * log(pred + epsilon)``. With ``compute_full`` Stirling's approximation of
    ``log(target!)``, ``target*log(target) - target + 0.5*log(2*pi*target)``, is added where
    ``target > 1`` (0 elsewhere: MXNet 2.x multiplies by the mask and yields NaN for a target 0,
    mxlite gives the intended 0).

    Args:
        weight: scalar multiplying the loss, or ``None``.
        from_logits: ``pred`` is the log of the Poisson rate.
        batch_axis: the axis of the samples.
        compute_full: add the Stirling term.
    """

    def __init__(self, weight: float | None = None, from_logits: bool = True, batch_axis: int = 0,
                 compute_full: bool = False, **kwargs: Any) -> None:
        super().__init__(weight, batch_axis, **kwargs)
        self._from_logits = from_logits
        self._compute_full = compute_full

    def forward(self, pred: Tensor, target: Any, sample_weight: Any = None, epsilon: float = 1e-08) -> Tensor:
        """Per-sample mean Poisson NLL; ``target`` is reshaped to ``pred``'s shape."""
        target = _reshape_like(_as_tensor_like(target, pred), pred)
        if self._from_logits:
            loss = ops.subtract(ops.exp(pred), ops.multiply(target, pred))
        else:
            loss = ops.subtract(pred, ops.multiply(target, ops.log(ops.add(pred, epsilon))))
        if self._compute_full:
            big = ops.greater(target, 1)
            safe = ops.where(big, target, 1.0)  # log of a target <= 1 is never used
            stirling = ops.add(ops.subtract(ops.multiply(safe, ops.log(safe)), safe),
                               ops.multiply(ops.log(ops.multiply(safe, 2 * math.pi)), 0.5))
            loss = ops.add(loss, ops.where(big, stirling, 0.0))
        return self._batch_mean(self._weighted(loss, sample_weight, self._weight))


class CosineEmbeddingLoss(Loss):
    """Cosine embedding loss of two batches of vectors and labels 1 (similar) or -1 (dissimilar).

    With ``cos = x1·x2 / max(||x1||·||x2||, 1e-12)`` over the last axis: ``1 - cos`` for label 1,
    ``clip(cos - margin, 0, 1 - margin)`` otherwise (MXNet 2.x); weighted, then averaged per
    sample.

    Args:
        weight: scalar multiplying the loss, or ``None``.
        batch_axis: the axis of the samples.
        margin: the similarity below which a dissimilar pair costs nothing.
    """

    def __init__(self, weight: float | None = None, batch_axis: int = 0, margin: float = 0, **kwargs: Any) -> None:
        super().__init__(weight, batch_axis, **kwargs)
        self._margin = margin

    def forward(self, input1: Any, input2: Tensor, label: Any, sample_weight: Any = None) -> Tensor:
        """Per-sample loss, shape ``(batch,)``; ``input1`` is reshaped to ``input2``'s shape."""
        input1 = _reshape_like(_as_tensor_like(input1, input2), input2)
        dot = ops.reshape(ops.sum(ops.multiply(input1, input2), axis=-1), (-1, 1))
        n1 = ops.sqrt(ops.sum(ops.square(input1), axis=-1))
        n2 = ops.sqrt(ops.sum(ops.square(input2), axis=-1))
        cos = ops.divide(dot, ops.maximum(ops.reshape(ops.multiply(n1, n2), (-1, 1)), 1e-12))
        label = _reshape_like(_as_tensor_like(label, cos), cos)
        loss = ops.where(ops.equal(label, 1), ops.subtract(1.0, cos),
                         ops.clip(ops.subtract(cos, self._margin), 0.0, 1.0 - self._margin))
        return self._batch_mean(self._weighted(loss, sample_weight, self._weight))


class SDMLLoss(Loss):
    """Batchwise Smoothed Deep Metric Learning loss (Bonadiman et al., 2019) of aligned batches ``x1``, ``x2``.

    Row i of ``x1`` and row i of ``x2`` form a positive pair; every other row is a negative.
    The loss is :class:`KLDivLoss` between ``log_softmax(-D, axis=1)``, with ``D`` the squared
    Euclidean distances between every row of ``x1`` and every row of ``x2``, and smoothed
    identity labels (``1 - smoothing_parameter`` on the diagonal, the rest spread evenly).

    Args:
        smoothing_parameter: the probability mass spread over the negatives, in [0, 1).
        weight: scalar multiplying the loss (default 1).
        batch_axis: the axis of the samples.

    Raises:
        ValueError: ``smoothing_parameter`` outside [0, 1); from forward, inputs that are not
            ``(batch, dim)`` with equal shapes, or a batch of one sample.
    """

    def __init__(self, smoothing_parameter: float = 0.3, weight: float | None = 1.0, batch_axis: int = 0,
                 **kwargs: Any) -> None:
        if isinstance(smoothing_parameter, bool) or not isinstance(smoothing_parameter, numbers.Real) \
                or not 0 <= smoothing_parameter < 1:
            raise ValueError(f"SDMLLoss: smoothing_parameter must lie in [0, 1), got {smoothing_parameter!r}")
        super().__init__(weight, batch_axis, **kwargs)
        self.kl_loss = KLDivLoss(from_logits=True)
        self.smoothing_parameter = smoothing_parameter

    def _compute_labels(self, batch_size: int) -> np.ndarray:
        gold = np.eye(batch_size)
        return gold * (1 - self.smoothing_parameter) + (1 - gold) * self.smoothing_parameter / (batch_size - 1)

    def forward(self, x1: Tensor, x2: Any) -> Tensor:
        """Per-sample loss, shape ``(batch,)``."""
        x2 = _as_tensor_like(x2, x1)
        if x1.ndim != 2 or x1.shape != x2.shape:
            raise ValueError(f"SDMLLoss needs two (batch, dim) inputs of one shape, got {x1.shape} and {x2.shape}")
        if x1.shape[0] < 2:
            raise ValueError(f"SDMLLoss needs at least 2 samples per batch (the others are the negatives), "
                             f"got {x1.shape[0]}")
        diffs = ops.subtract(ops.expand_dims(x1, 1), ops.expand_dims(x2, 0))
        distances = ops.sum(ops.square(diffs), axis=2)
        log_prob = nn_ops.log_softmax(ops.negative(distances), 1)
        labels = _as_tensor_like(self._compute_labels(x1.shape[0]).astype(x1.dtype), x1)
        return self._weighted(self.kl_loss(log_prob, labels), None, self._weight)


_NEG = -1e30  # log(0) for the CTC recursion: finite, so 0 * it and its differences stay finite


def _logsumexp(terms: list[Tensor]) -> Tensor:
    """``log(sum(exp(t)))`` of same-shaped tensors, shifted by their maximum (exact gradient)."""
    top = terms[0]
    for t in terms[1:]:
        top = ops.maximum(top, t)
    total = None
    for t in terms:
        e = ops.exp(ops.subtract(t, top))
        total = e if total is None else ops.add(total, e)
    return ops.add(top, ops.log(total))


class CTCLoss(Loss):
    """Connectionist Temporal Classification loss (Graves et al., 2006), MXNet's ``blank_label='last'``.

    ``pred`` holds unnormalised scores over ``alphabet_size`` classes, the last of which is the
    blank; the loss is ``-log p(label | pred)`` summed over every alignment, computed by the
    forward (alpha) recursion in log space from mxlite's differentiable ops, so its gradient
    comes from autograd.

    Args:
        layout: ``'NTC'`` (batch, time, classes) or ``'TNC'``.
        label_layout: ``'NT'`` (batch, label length) or ``'TN'``.
        weight: scalar multiplying the loss, or ``None``.

    Inputs (forward):
        pred: the scores in ``layout``.
        label: class ids in ``[0, alphabet_size - 1)`` in ``label_layout``; without
            ``label_lengths`` each sequence ends at its first ``-1`` (padding). (As in MXNet,
            the blank's id inside a label is not rejected: it counts as one more symbol.)
        pred_lengths: optional ``(batch,)`` valid time steps per sample (default: all).
        label_lengths: optional ``(batch,)`` label lengths (default: up to the first ``-1``).
        sample_weight: optional per-sample weights, broadcast to ``(batch,)``.

    Output: the loss per sample, shape ``(batch,)`` (not averaged over time).

    Raises:
        ValueError: an unknown layout; from forward, shapes that do not agree, a label outside
            ``[0, alphabet_size)``, or lengths outside the tensors' extents.
    """

    def __init__(self, layout: str = "NTC", label_layout: str = "NT", weight: float | None = None,
                 **kwargs: Any) -> None:
        if layout not in ("NTC", "TNC"):
            raise ValueError(f"CTCLoss: layout must be 'NTC' or 'TNC', got {layout!r}")
        if label_layout not in ("NT", "TN"):
            raise ValueError(f"CTCLoss: label_layout must be 'NT' or 'TN', got {label_layout!r}")
        super().__init__(weight, label_layout.find("N"), **kwargs)
        self._layout, self._label_layout = layout, label_layout

    @staticmethod
    def _host_ints(x: Any, what: str) -> np.ndarray:
        if isinstance(x, Tensor):
            x = x.asnumpy()
        arr = np.asarray(x)
        if arr.size and not np.all(np.isfinite(arr)) or (arr.size and np.any(arr != np.round(arr))):
            raise ValueError(f"CTCLoss: {what} must hold whole numbers, got {arr.tolist()}")
        return arr.astype(np.int64)

    def forward(self, pred: Tensor, label: Any, pred_lengths: Any = None, label_lengths: Any = None,
                sample_weight: Any = None) -> Tensor:
        """Per-sample CTC loss, shape ``(batch,)``."""
        if pred.ndim != 3:
            raise ValueError(f"CTCLoss: pred must be 3-D ({self._layout}), got shape {pred.shape}")
        if self._layout == "NTC":
            pred = ops.swapaxes(pred, 0, 1)  # -> (T, N, C)
        steps, batch, classes = pred.shape
        blank = classes - 1
        labels = self._host_ints(label, "label")
        if labels.ndim != 2:
            raise ValueError(f"CTCLoss: label must be 2-D ({self._label_layout}), got shape {labels.shape}")
        if self._label_layout == "TN":
            labels = labels.T
        if labels.shape[0] != batch:
            raise ValueError(f"CTCLoss: {labels.shape[0]} label sequences for a batch of {batch}")
        if label_lengths is None:
            padded = labels == -1
            lengths = np.where(padded.any(axis=1), padded.argmax(axis=1), labels.shape[1])
        else:
            lengths = self._host_ints(label_lengths, "label_lengths").reshape(-1)
        t_len = np.full(batch, steps) if pred_lengths is None else self._host_ints(pred_lengths, "pred_lengths")
        t_len = t_len.reshape(-1)
        if lengths.shape != (batch,) or t_len.shape != (batch,):
            raise ValueError(f"CTCLoss: lengths must have shape ({batch},), got {lengths.shape} and {t_len.shape}")
        if np.any(lengths < 0) or np.any(lengths > labels.shape[1]) or np.any(t_len < 1) or np.any(t_len > steps):
            raise ValueError(f"CTCLoss: label lengths {lengths.tolist()} must lie in [0, {labels.shape[1]}] and "
                             f"pred lengths {t_len.tolist()} in [1, {steps}]")
        width = 2 * max(int(lengths.max()), 0) + 1  # extended label: blank, l1, blank, l2, ..., blank
        ext = np.full((batch, width), blank, np.int64)
        for n in range(batch):
            seq = labels[n, :lengths[n]]
            if np.any(seq < 0) or np.any(seq >= classes):
                raise ValueError(f"CTCLoss: labels must lie in [0, {classes}) (class {blank} is the blank), "
                                 f"got {seq.tolist()} in sample {n}")
            ext[n, 1:2 * len(seq):2] = seq
        skip = np.zeros((batch, width), bool)  # s may follow s - 2 (a different non-blank label)
        skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
        onehot = np.zeros((batch, classes, width), pred.dtype)
        onehot[np.arange(batch)[:, None], ext, np.arange(width)[None, :]] = 1.0
        logp = nn_ops.log_softmax(pred, -1)  # (T, N, C)
        emit = ops.matmul(ops.swapaxes(logp, 0, 1), _as_tensor_like(onehot, pred))  # (N, T, S)
        neg = _as_tensor_like(np.full((batch, 1), _NEG, pred.dtype), pred)
        skip_t = _mask(_as_tensor_like(skip, pred).array, pred)
        start = np.full((batch, width), _NEG, pred.dtype)
        start[:, 0] = 0.0
        start[lengths > 0, 1] = 0.0
        alpha = ops.add(_as_tensor_like(start, pred), ops.getitem(emit, (slice(None), 0)))
        for t in range(1, steps):
            stay = alpha
            step1 = ops.concat([neg, ops.getitem(alpha, (slice(None), slice(0, width - 1)))], axis=1)
            step2 = ops.concat([neg, neg, ops.getitem(alpha, (slice(None), slice(0, width - 2)))], axis=1) \
                if width > 2 else None
            terms = [stay, step1]
            if step2 is not None:
                terms.append(ops.where(skip_t, step2, _NEG))
            new = ops.add(_logsumexp(terms), ops.getitem(emit, (slice(None), t)))
            active = _mask(_as_tensor_like((t < t_len)[:, None], pred).array, pred)
            alpha = ops.where(active, new, alpha)  # a finished sequence keeps its last alpha
        last = np.zeros((batch, width), bool)
        last[np.arange(batch), 2 * lengths] = True
        before = np.zeros((batch, width), bool)
        before[np.arange(batch)[lengths > 0], 2 * lengths[lengths > 0] - 1] = True
        end_a = ops.sum(ops.where(_mask(_as_tensor_like(last, pred).array, pred), alpha, 0.0), axis=1)
        end_b = ops.sum(ops.where(_mask(_as_tensor_like(before, pred).array, pred), alpha, 0.0), axis=1)
        end_b = ops.add(end_b, _as_tensor_like(np.where(lengths > 0, 0.0, _NEG).astype(pred.dtype), pred))
        loss = ops.negative(_logsumexp([end_a, end_b]))
        return self._weighted(loss, sample_weight, self._weight)
