"""Evaluation metrics (MXNet's ``mx.gluon.metric``).

A metric accumulates ``sum_metric`` and ``num_inst`` over calls to ``update`` and reports
their ratio from ``get``. ``update(labels, preds)`` takes one list entry per device, which is
what a data-parallel loop holds after ``split_and_load``::

    acc = mxlite.metric.Accuracy()
    for data, label in loader:
        ...
        acc.update(labels, outputs)   # lists of per-device Tensors
    name, value = acc.get()           # ('accuracy', 0.93)

Labels and predictions may be Tensors on any device, NumPy arrays, or CuPy arrays; metrics
copy them to the host with ``asnumpy()`` and compute in float64 there, so the running sums
do not depend on the devices or on the order in which devices report.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .autograd.tensor import Tensor

__all__ = ["Accuracy", "CrossEntropy", "EvalMetric", "Loss", "check_label_shapes", "create"]


def _to_numpy(x: Any) -> np.ndarray:
    """Host copy of a Tensor, CuPy array, NumPy array or Python number/sequence."""
    if isinstance(x, Tensor):
        return x.asnumpy()
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__cuda_array_interface__"):  # a raw CuPy array
        return x.get()
    return np.asarray(x)


def _as_list(x: Any) -> list[Any]:
    """``x`` itself when it is a list/tuple of per-device arrays, else ``[x]``."""
    return list(x) if isinstance(x, (list, tuple)) else [x]


def check_label_shapes(labels: Any, preds: Any, wrap: bool = False, shape: bool = False) -> tuple[Any, Any]:
    """Check that labels and predictions agree, as MXNet's helper of the same name.

    Args:
        labels, preds: lists of per-device arrays, or single arrays.
        wrap: wrap single arrays into one-element lists before returning.
        shape: compare ``.shape`` (arrays) instead of ``len`` (lists).

    Returns:
        ``(labels, preds)``, wrapped into lists when ``wrap``.

    Raises:
        ValueError: the counts (or shapes) differ; the message gives both.
    """
    if wrap:
        labels, preds = _as_list(labels), _as_list(preds)
    if shape:
        label_shape, pred_shape = tuple(labels.shape), tuple(preds.shape)
    else:
        label_shape, pred_shape = len(labels), len(preds)
    if label_shape != pred_shape:
        what = "shape" if shape else "number"
        raise ValueError(
            f"{what} of labels {label_shape} does not match {what} of predictions {pred_shape}; "
            "pass one label array per prediction array (one per device)"
        )
    return labels, preds


class EvalMetric:
    """Base class of evaluation metrics: accumulates a sum and a count, reports their ratio.

    Subclasses implement :meth:`update`, adding to ``sum_metric`` (the summed per-instance
    metric, a float) and ``num_inst`` (the number of instances, an int).

    Args:
        name: the name reported by :meth:`get`.
        output_names: prediction names that :meth:`update_dict` selects (None: all, in order).
        label_names: label names that :meth:`update_dict` selects (None: all, in order).
        **kwargs: extra configuration, kept for :meth:`get_config`.
    """

    def __init__(self, name: str, output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None, **kwargs: Any) -> None:
        self.name = str(name)
        self.output_names = output_names
        self.label_names = label_names
        self._kwargs = kwargs
        self.num_inst = 0
        self.sum_metric = 0.0
        self.reset()

    def __str__(self) -> str:
        return f"EvalMetric: {dict(self.get_name_value())}"

    def get_config(self) -> dict[str, Any]:
        """The arguments that rebuild this metric through :func:`create`."""
        config = dict(self._kwargs)
        config.update({
            "metric": self.__class__.__name__,
            "name": self.name,
            "output_names": self.output_names,
            "label_names": self.label_names,
        })
        return config

    def update_dict(self, label: dict[str, Any], pred: dict[str, Any]) -> None:
        """Update from dicts of named labels and predictions.

        Entries are picked by ``label_names`` / ``output_names`` when those were given, else
        all values are used in insertion order.

        Raises:
            KeyError: a configured name is missing from the dict.
        """
        preds = [pred[n] for n in self.output_names] if self.output_names is not None else list(pred.values())
        labels = [label[n] for n in self.label_names] if self.label_names is not None else list(label.values())
        self.update(labels, preds)

    def update(self, labels: Any, preds: Any) -> None:
        """Accumulate a batch: ``labels`` and ``preds`` are lists (one per device) or single arrays."""
        raise NotImplementedError(f"{type(self).__name__} does not implement update()")

    def reset(self) -> None:
        """Forget every accumulated instance (``num_inst = 0``, ``sum_metric = 0.0``)."""
        self.num_inst = 0
        self.sum_metric = 0.0

    def get(self) -> tuple[str, float]:
        """``(name, sum_metric / num_inst)``; the value is NaN before any instance was seen."""
        if self.num_inst == 0:
            return self.name, float("nan")
        return self.name, float(self.sum_metric) / self.num_inst

    def get_name_value(self) -> list[tuple[str, float]]:
        """:meth:`get` as a list of ``(name, value)`` pairs."""
        name, value = self.get()
        names = name if isinstance(name, list) else [name]
        values = value if isinstance(value, list) else [value]
        return list(zip(names, values, strict=True))


class Accuracy(EvalMetric):
    """Fraction of instances whose predicted class equals the label.

    A prediction whose shape differs from its label's is taken as class scores and reduced
    by ``argmax`` over ``axis``; one with the label's shape is taken as class ids already.
    Both are then cast to int32 and flattened, so labels of shape ``(N,)`` or ``(N, 1)`` work.

    Args:
        axis: the class axis of score predictions (1 for ``(batch, classes)``).
        name, output_names, label_names: as :class:`EvalMetric`.

    Raises (from update):
        ValueError: the numbers of label and prediction arrays differ, or a label array and
            its (reduced) prediction hold different numbers of instances.
    """

    def __init__(self, axis: int = 1, name: str = "accuracy", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None) -> None:
        super().__init__(name, axis=axis, output_names=output_names, label_names=label_names)
        self.axis = axis

    def update(self, labels: Any, preds: Any) -> None:
        """Add the correct count and the instance count of each (label, prediction) pair."""
        labels, preds = check_label_shapes(labels, preds, wrap=True)
        for label, pred in zip(labels, preds, strict=True):
            label_np, pred_np = _to_numpy(label), _to_numpy(pred)
            if pred_np.shape != label_np.shape:
                pred_np = pred_np.argmax(axis=self.axis)
            label_ids = label_np.astype(np.int32).reshape(-1)
            pred_ids = pred_np.astype(np.int32).reshape(-1)
            check_label_shapes(label_ids, pred_ids, shape=True)
            self.sum_metric += float(np.count_nonzero(pred_ids == label_ids))
            self.num_inst += int(label_ids.size)


class CrossEntropy(EvalMetric):
    """Mean negative log-likelihood of the labelled class: ``mean(-log(p[label] + eps))``.

    Predictions are class probabilities of shape ``(N, classes)`` (anything reshaping to
    that); labels are N class ids. The value is in nats per instance.

    Args:
        eps: added to each probability before the log so that ``p = 0`` gives a finite loss.
        name, output_names, label_names: as :class:`EvalMetric`.
        from_logits: predictions are unnormalised logits; a (stable) log-softmax over the
            last axis is applied first and ``eps`` is not used (MXNet 2's option).

    Raises (from update):
        ValueError: the numbers of label and prediction arrays differ, a prediction does not
            hold a whole row per label, or a label is outside ``[0, classes)``.
    """

    def __init__(self, eps: float = 1e-12, name: str = "cross-entropy", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None, *, from_logits: bool = False) -> None:
        super().__init__(name, eps=eps, from_logits=from_logits, output_names=output_names,
                         label_names=label_names)
        self.eps = eps
        self.from_logits = from_logits

    def update(self, labels: Any, preds: Any) -> None:
        """Add the summed negative log-likelihood and the instance count of each pair."""
        labels, preds = check_label_shapes(labels, preds, wrap=True)
        for label, pred in zip(labels, preds, strict=True):
            label_ids = _to_numpy(label).reshape(-1).astype(np.int64)
            pred_np = _to_numpy(pred).astype(np.float64)
            n = label_ids.shape[0]
            if pred_np.ndim >= 2 and pred_np.shape[0] != n:
                raise ValueError(
                    f"{self.name}: {n} labels (shape {_to_numpy(label).shape}) for {pred_np.shape[0]} rows of "
                    f"predictions (shape {pred_np.shape}); give one label per row")
            if n == 0:
                continue
            if pred_np.size % n != 0 or pred_np.size == 0:
                raise ValueError(
                    f"{self.name}: predictions of shape {pred_np.shape} do not hold one row of class "
                    f"probabilities per label (labels of shape {_to_numpy(label).shape})"
                )
            pred_np = pred_np.reshape(n, -1)
            classes = pred_np.shape[1]
            bad = (label_ids < 0) | (label_ids >= classes)
            if bad.any():
                raise ValueError(
                    f"{self.name}: label {int(label_ids[bad][0])} is outside [0, {classes}) for predictions "
                    f"of shape {pred_np.shape}"
                )
            if self.from_logits:
                shifted = pred_np - pred_np.max(axis=1, keepdims=True)
                log_prob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
                nll = -log_prob[np.arange(n), label_ids]
            else:
                nll = -np.log(pred_np[np.arange(n), label_ids] + self.eps)
            self.sum_metric += float(nll.sum())
            self.num_inst += n


class Loss(EvalMetric):
    """Mean of loss values computed elsewhere (e.g. by a ``gluon.loss`` block).

    ``update`` ignores the labels; each prediction array is a batch of per-instance losses,
    adding its sum to ``sum_metric`` and its element count to ``num_inst``.

    Args:
        name, output_names, label_names: as :class:`EvalMetric`.
    """

    def __init__(self, name: str = "loss", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None) -> None:
        super().__init__(name, output_names=output_names, label_names=label_names)

    def update(self, _: Any, preds: Any) -> None:
        """Add the sum and element count of each loss array in ``preds``; labels are ignored."""
        for pred in _as_list(preds):
            values = _to_numpy(pred)
            self.sum_metric += float(values.sum(dtype=np.float64))
            self.num_inst += int(values.size)


_METRICS: dict[str, type[EvalMetric]] = {
    "acc": Accuracy,
    "accuracy": Accuracy,
    "ce": CrossEntropy,
    "cross-entropy": CrossEntropy,
    "crossentropy": CrossEntropy,
    "loss": Loss,
}


def create(metric: str | EvalMetric, *args: Any, **kwargs: Any) -> EvalMetric:
    """Build a metric by name (case-insensitive), MXNet's ``metric.create``.

    Known names: ``'acc'``/``'accuracy'`` (:class:`Accuracy`), ``'ce'``/``'cross-entropy'``
    (:class:`CrossEntropy`), ``'loss'`` (:class:`Loss`). ``args``/``kwargs`` go to the
    constructor. An :class:`EvalMetric` instance is returned unchanged.

    Raises:
        ValueError: unknown name; the message lists the known ones.
        TypeError: ``metric`` is neither a string nor an :class:`EvalMetric`.
    """
    if isinstance(metric, EvalMetric):
        return metric
    if not isinstance(metric, str):
        raise TypeError(f"create: metric must be a name or an EvalMetric, got {type(metric).__name__}")
    cls = _METRICS.get(metric.lower())
    if cls is None:
        raise ValueError(f"unknown metric {metric!r}; known metrics: {', '.join(sorted(_METRICS))}")
    return cls(*args, **kwargs)

