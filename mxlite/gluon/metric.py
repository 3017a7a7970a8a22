"""Evaluation metrics (MXNet's ``mx.gluon.metric``).

A metric accumulates ``sum_metric`` and ``num_inst`` over calls to ``update`` and reports
their ratio from ``get``. ``update(labels, preds)`` takes one list entry per device, which is
what a data-parallel loop holds after ``split_and_load``::

    acc = mxlite.gluon.metric.Accuracy()
    for data, label in loader:
        ...
        acc.update(labels, outputs)   # lists of per-device Tensors
    name, value = acc.get()           # ('accuracy', 0.93)

Labels and predictions may be Tensors on any device, NumPy arrays, or CuPy arrays; metrics
copy them to the host with ``asnumpy()`` and compute in float64 there, so the running sums
do not depend on the devices or on the order in which devices report.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..autograd.tensor import Tensor

__all__ = ["MAE", "MCC", "MSE", "PCC", "RMSE", "Accuracy", "BinaryAccuracy", "CompositeEvalMetric", "CrossEntropy",
           "CustomMetric", "EvalMetric", "F1", "Fbeta", "Loss", "MeanCosineSimilarity", "MeanPairwiseDistance",
           "NegativeLogLikelihood", "PearsonCorrelation", "Perplexity", "TopKAccuracy", "check_label_shapes", "create",
           "register"]


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
    """Mean negative log-likelihood of the labelled class: ``mean(-log(max(eps, p[label])))`` (MXNet 2.x).

    Predictions hold class probabilities along ``axis`` (by default the last); labels hold one
    class id per row, in any shape with that many elements. The value is in nats per instance.

    Args:
        eps: probabilities below ``eps`` count as ``eps``, so ``p = 0`` gives a finite loss.
        ignore_label: a label value whose instances are left out of the sum and the count
            (None: every instance counts).
        axis: the class axis of the predictions.
        from_logits: predictions are unnormalised logits; a (stable) log-softmax over ``axis``
            is applied first and ``eps`` is not used.
        name, output_names, label_names: as :class:`EvalMetric`.

    Raises (from update):
        ValueError: the numbers of label and prediction arrays differ, a prediction does not
            hold a whole row per label, or a label (other than ``ignore_label``) is outside
            ``[0, classes)``.
    """

    def __init__(self, eps: float = 1e-12, ignore_label: int | None = None, axis: int = -1,
                 from_logits: bool = False, name: str = "cross-entropy", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None) -> None:
        super().__init__(name, eps=eps, ignore_label=ignore_label, axis=axis, from_logits=from_logits,
                         output_names=output_names, label_names=label_names)
        self.eps = eps
        self.ignore_label = ignore_label
        self.axis = axis
        self.from_logits = from_logits

    def update(self, labels: Any, preds: Any) -> None:
        """Add the summed negative log-likelihood and the instance count of each pair."""
        labels, preds = check_label_shapes(labels, preds, wrap=True)
        for label, pred in zip(labels, preds, strict=True):
            label_np = _to_numpy(label)
            label_ids = label_np.reshape(-1).astype(np.int64)
            pred_np = _to_numpy(pred).astype(np.float64)
            n = label_ids.shape[0]
            if pred_np.ndim >= 2:
                pred_np = np.moveaxis(pred_np, self.axis, -1)
            if pred_np.ndim >= 2 and pred_np.size // max(pred_np.shape[-1], 1) != n:
                raise ValueError(
                    f"{self.name}: {n} labels (shape {label_np.shape}) for {pred_np.size // max(pred_np.shape[-1], 1)} "
                    f"rows of predictions (shape {_to_numpy(pred).shape}); give one label per row")
            if n == 0:
                continue
            if pred_np.size % n != 0 or pred_np.size == 0:
                raise ValueError(
                    f"{self.name}: predictions of shape {pred_np.shape} do not hold one row of class "
                    f"probabilities per label (labels of shape {label_np.shape})"
                )
            pred_np = pred_np.reshape(n, -1)
            classes = pred_np.shape[1]
            keep = np.ones(n, bool) if self.ignore_label is None else label_ids != int(self.ignore_label)
            bad = keep & ((label_ids < 0) | (label_ids >= classes))
            if bad.any():
                raise ValueError(
                    f"{self.name}: label {int(label_ids[bad][0])} is outside [0, {classes}) for predictions "
                    f"of shape {pred_np.shape}"
                )
            rows, ids = np.arange(n)[keep], label_ids[keep]
            if self.from_logits:
                shifted = pred_np - pred_np.max(axis=1, keepdims=True)
                log_prob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
                nll = -log_prob[rows, ids]
            else:
                nll = -np.log(np.maximum(self.eps, pred_np[rows, ids]))
            self.sum_metric += float(nll.sum())
            self.num_inst += int(keep.sum())


class NegativeLogLikelihood(EvalMetric):
    """Mean negative log-likelihood of the labelled class, ``mean(-log(p[label] + eps))`` (MXNet's ``nll_loss``).

    Unlike :class:`CrossEntropy` (which clamps, ``max(eps, p)``), MXNet's NegativeLogLikelihood
    adds ``eps`` to every probability; predictions are ``(N, classes)`` probabilities (class axis
    1), labels one class id per row in any shape with N elements. The value is in nats per instance.

    Args:
        eps: added to each picked probability, so ``p = 0`` gives a finite loss (default 1e-12).
        name, output_names, label_names: as :class:`EvalMetric`.

    Raises (from update):
        ValueError: the numbers of label and prediction arrays differ, the labels do not number
            the prediction rows, or a label is outside ``[0, classes)``.
    """

    def __init__(self, eps: float = 1e-12, name: str = "nll-loss", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None) -> None:
        super().__init__(name, eps=eps, output_names=output_names, label_names=label_names)
        self.eps = eps

    def update(self, labels: Any, preds: Any) -> None:
        """Add the summed negative log-likelihood and the row count of each pair."""
        labels, preds = check_label_shapes(labels, preds, wrap=True)
        for label, pred in zip(labels, preds, strict=True):
            label_ids = _to_numpy(label).reshape(-1).astype(np.int64)
            pred_np = _to_numpy(pred).astype(np.float64)
            n = pred_np.shape[0] if pred_np.ndim else 0
            if pred_np.ndim != 2 or label_ids.shape[0] != n:
                raise ValueError(f"{self.name}: {label_ids.shape[0]} labels for predictions of shape "
                                 f"{pred_np.shape}; give (N, classes) probabilities and N labels")
            classes = pred_np.shape[1]
            bad = (label_ids < 0) | (label_ids >= classes)
            if bad.any():
                raise ValueError(f"{self.name}: label {int(label_ids[bad][0])} is outside [0, {classes}) for "
                                 f"predictions of shape {pred_np.shape}")
            prob = pred_np[np.arange(n), label_ids]
            self.sum_metric += float((-np.log(prob + self.eps)).sum())
            self.num_inst += n


class Perplexity(CrossEntropy):
    """``exp`` of the mean negative log-likelihood of the labelled class (MXNet 2.x's ``Perplexity``).

    ``exp(-(1/N) Σ log max(eps, q(x_i)))`` where ``q(x_i)`` is the probability predicted for
    sample i's label; 1 is a perfect model, ``classes`` a uniform guess. Arguments, inputs and
    errors as :class:`CrossEntropy` (note MXNet 2.x's order: the first positional is ``eps``).
    """

    def __init__(self, eps: float = 1e-12, ignore_label: int | None = None, axis: int = -1,
                 from_logits: bool = False, name: str = "perplexity", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None) -> None:
        super().__init__(eps=eps, ignore_label=ignore_label, axis=axis, from_logits=from_logits, name=name,
                         output_names=output_names, label_names=label_names)

    def get(self) -> tuple[str, float]:
        """``(name, exp(sum_metric / num_inst))``; NaN before any instance was seen."""
        if self.num_inst == 0:
            return self.name, float("nan")
        return self.name, math.exp(self.sum_metric / self.num_inst)


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


class CompositeEvalMetric(EvalMetric):
    """Several metrics updated together; :meth:`get` returns ``([names], [values])`` (MXNet's).

    Args:
        metrics: child metrics: instances, names or configs (anything :func:`create` takes).
        name, output_names, label_names: as :class:`EvalMetric`; with names given,
            :meth:`update_dict` passes only those entries on to the children.
    """

    def __init__(self, metrics: Sequence[Any] | None = None, name: str = "composite",
                 output_names: Sequence[str] | None = None, label_names: Sequence[str] | None = None) -> None:
        self.metrics: list[EvalMetric] = [create(m) for m in (metrics or [])]
        super().__init__(name, output_names=output_names, label_names=label_names)

    def add(self, metric: Any) -> None:
        """Append a child metric (an instance, a name or a config)."""
        self.metrics.append(create(metric))

    def get_metric(self, index: int) -> EvalMetric:
        """The child metric at ``index``.

        Raises:
            ValueError: ``index`` is out of range (the message gives the range).
        """
        try:
            return self.metrics[index]
        except IndexError:
            raise ValueError(f"metric index {index} is out of range 0 and {len(self.metrics)}") from None

    def update_dict(self, labels: dict[str, Any], preds: dict[str, Any]) -> None:
        """Pass the entries named by ``label_names``/``output_names`` (all when None) to every child."""
        if self.label_names is not None:
            labels = {k: v for k, v in labels.items() if k in self.label_names}
        if self.output_names is not None:
            preds = {k: v for k, v in preds.items() if k in self.output_names}
        for metric in self.metrics:
            metric.update_dict(labels, preds)

    def update(self, labels: Any, preds: Any) -> None:
        """Update every child with the same labels and predictions."""
        for metric in self.metrics:
            metric.update(labels, preds)

    def reset(self) -> None:
        """Reset every child."""
        for metric in getattr(self, "metrics", []):
            metric.reset()

    def get(self) -> tuple[list[str], list[float]]:  # type: ignore[override]
        """``([name, ...], [value, ...])`` over the children, flattening nested composites."""
        names: list[str] = []
        values: list[float] = []
        for metric in self.metrics:
            name, value = metric.get()
            names.extend(name if isinstance(name, list) else [name])
            values.extend(value if isinstance(value, list) else [value])
        return names, values

    def get_config(self) -> dict[str, Any]:
        """The base config plus ``'metrics'``: every child's config."""
        config = super().get_config()
        config["metrics"] = [m.get_config() for m in self.metrics]
        return config


class TopKAccuracy(EvalMetric):
    """Fraction of instances whose label is among the ``top_k`` highest-scored classes.

    Predictions are ``(N, classes)`` scores (or ``(N,)`` class ids, compared directly); labels
    hold N class ids. The reported name is ``'<name>_<top_k>'`` (MXNet's).

    Args:
        top_k: how many of the highest-scored classes count as a hit; must be > 1 (use
            :class:`Accuracy` for 1). More than the number of classes counts every class.
        name, output_names, label_names: as :class:`EvalMetric`.

    Raises:
        ValueError: ``top_k <= 1`` (at construction); from update, predictions with more than
            2 dimensions or label and prediction counts that differ.
    """

    def __init__(self, top_k: int = 1, name: str = "top_k_accuracy", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None) -> None:
        if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k <= 1:
            raise ValueError(f"TopKAccuracy needs top_k > 1 (use Accuracy for top_k = 1), got {top_k!r}")
        suffix = f"_{int(top_k)}"
        name = str(name) if str(name).endswith(suffix) else f"{name}{suffix}"  # a config rebuilds the same name
        super().__init__(name, top_k=int(top_k), output_names=output_names, label_names=label_names)
        self.top_k = int(top_k)

    def update(self, labels: Any, preds: Any) -> None:
        """Add the hits and the instance count of each (label, prediction) pair."""
        labels, preds = check_label_shapes(labels, preds, wrap=True)
        for label, pred in zip(labels, preds, strict=True):
            pred_np = _to_numpy(pred).astype(np.float32)
            label_ids = _to_numpy(label).astype(np.int32).reshape(-1)
            if pred_np.ndim > 2:
                raise ValueError(f"{self.name}: predictions must have at most 2 dimensions, got shape {pred_np.shape}")
            if pred_np.ndim <= 1:
                ids = pred_np.astype(np.int32).reshape(-1)
                check_label_shapes(label_ids, ids, shape=True)
                self.sum_metric += float(np.count_nonzero(ids == label_ids))
                self.num_inst += int(ids.size)
                continue
            if pred_np.shape[0] != label_ids.size:
                raise ValueError(f"{self.name}: {label_ids.size} labels for {pred_np.shape[0]} rows of predictions "
                                 f"(shape {pred_np.shape})")
            k = min(pred_np.shape[1], self.top_k)
            top = np.argpartition(pred_np, -k, axis=1)[:, -k:]
            self.sum_metric += float(np.count_nonzero(top == label_ids[:, None]))
            self.num_inst += int(pred_np.shape[0])


def _threshold(pred: np.ndarray, threshold: Any) -> np.ndarray:
    """``pred > threshold``; a threshold array holds one value per class (the last axis)."""
    if isinstance(threshold, numbers.Real) and not isinstance(threshold, bool):
        return pred > threshold
    thr = _to_numpy(threshold)
    if thr.ndim == 0 or thr.shape[-1] != pred.shape[-1]:
        raise ValueError(f"threshold of shape {thr.shape} does not give one value per class for predictions of "
                         f"shape {pred.shape}")
    return pred > thr


class _ClassificationCounts:
    """True/false positive/negative counts per class, accumulated over batches (float64, on the host)."""

    def __init__(self, class_type: str = "binary", threshold: Any = 0.5, beta: float = 1.0) -> None:
        if class_type not in ("binary", "multiclass", "multilabel"):
            raise ValueError(f"class_type must be 'binary', 'multiclass' or 'multilabel', got {class_type!r}")
        self.class_type, self.threshold, self.beta = class_type, threshold, beta
        self.reset_stats()

    def reset_stats(self) -> None:
        self.num_classes: int | None = None
        self.tp = self.fp = self.fn = self.tn = np.zeros(0)

    def _set(self, num: int) -> None:
        if self.num_classes is None:
            self.num_classes = num
            self.tp, self.fp, self.fn, self.tn = (np.zeros(num) for _ in range(4))
        elif self.num_classes != num:
            raise ValueError(f"the number of classes changed from {self.num_classes} to {num}")

    def update_stats(self, label: Any, pred: Any) -> None:
        pred_np, label_np = _to_numpy(pred).astype(np.float64), _to_numpy(label).astype(np.int32)
        if self.class_type == "binary":
            self._set(1)
            if label_np.size and (label_np.max() > 1 or label_np.min() < 0):
                raise ValueError(f"binary classification needs labels 0 or 1, got {sorted(set(label_np.ravel()))}")
            if pred_np.shape != label_np.shape:
                if pred_np.shape[-1] > 2:
                    raise ValueError(f"predictions of shape {pred_np.shape} do not fit binary classification "
                                     "(at most 2 scores per instance)")
                if pred_np.shape[-1] == 2:
                    pred_np = pred_np.reshape(-1, 2)[:, 1]  # the positive class's score
            pred_ids = _threshold(pred_np, self.threshold).reshape(-1, 1).astype(np.int32)
            label_ids = label_np.reshape(-1, 1)
        elif self.class_type == "multiclass":
            num = pred_np.shape[-1]
            self._set(num)
            if label_np.size and label_np.max() >= num:
                raise ValueError(f"label {int(label_np.max())} is outside [0, {num}) for predictions of shape "
                                 f"{pred_np.shape}")
            eye = np.eye(num, dtype=np.int32)
            pred_ids, label_ids = eye[pred_np.argmax(axis=-1).reshape(-1)], eye[label_np.reshape(-1)]
        else:
            num = pred_np.shape[-1]
            self._set(num)
            if pred_np.shape != label_np.shape:
                raise ValueError(f"multilabel classification needs labels shaped like the predictions, got "
                                 f"{label_np.shape} and {pred_np.shape}")
            pred_ids = _threshold(pred_np, self.threshold).reshape(-1, num).astype(np.int32)
            label_ids = label_np.reshape(-1, num)
        check_label_shapes(label_ids, pred_ids, shape=True)
        p_true, l_true = pred_ids == 1, label_ids == 1
        p_false, l_false = pred_ids == 0, label_ids == 0
        self.tp = self.tp + (p_true & l_true).sum(0)
        self.fp = self.fp + (p_true & l_false).sum(0)
        self.fn = self.fn + (p_false & l_true).sum(0)
        self.tn = self.tn + (p_false & l_false).sum(0)

    @property
    def total_examples(self) -> int:
        if self.num_classes is None:
            return 0
        return int(self.tp[0] + self.fp[0] + self.fn[0] + self.tn[0])

    def fscore(self) -> np.ndarray:
        """Per-class F-beta (0 where undefined)."""
        precision = self.tp / np.maximum(self.tp + self.fp, 1e-12)
        recall = self.tp / np.maximum(self.tp + self.fn, 1e-12)
        b2 = self.beta ** 2
        return (1 + b2) * precision * recall / np.maximum(b2 * precision + recall, 1e-12)

    def micro_fscore(self) -> float:
        """F-beta of the counts summed over classes (0 where undefined)."""
        tp, fp, fn = self.tp.sum(), self.fp.sum(), self.fn.sum()
        precision, recall = tp / max(tp + fp, 1e-12), tp / max(tp + fn, 1e-12)
        if precision + recall <= 0:
            return 0.0
        b2 = self.beta ** 2
        return float((1 + b2) * precision * recall / (b2 * precision + recall))

    def matthews(self) -> float:
        """Binary MCC; zero factors of the denominator count as 1 (MXNet's rule)."""
        if not self.total_examples:
            return 0.0
        tp, fp, fn, tn = (float(x[0]) for x in (self.tp, self.fp, self.fn, self.tn))
        denom = 1.0
        for t in (tp + fp, tp + fn, tn + fp, tn + fn):
            if t != 0.0:
                denom *= t
        return (tp * tn - fp * fn) / math.sqrt(denom)


class F1(EvalMetric):
    """F1 score: harmonic mean of precision and recall, accumulated over every batch seen.

    ``precision = TP / (TP + FP)``, ``recall = TP / (TP + FN)``, ``F1 = 2·P·R / (P + R)`` (an
    undefined ratio counts as 0). The counts accumulate across :meth:`update` calls, so the
    value is that of all instances seen, not a mean of per-batch scores.

    Args:
        name, output_names, label_names: as :class:`EvalMetric`.
        class_type: ``'binary'`` (labels 0/1; predictions are positive-class probabilities,
            or ``(N, 2)`` scores whose column 1 is used), ``'multiclass'`` (argmax of
            ``(N, classes)`` scores against class ids) or ``'multilabel'`` (0/1 labels shaped like
            the predictions).
        threshold: a prediction above it is positive (binary, multilabel); a float, or one value
            per class.
        average: ``'micro'`` (F1 of the counts summed over classes), ``'macro'`` (mean of the
            per-class F1) or None (the per-class F1 array, from :meth:`get`).

    Raises:
        ValueError: an unknown ``class_type`` or ``average``; from update, labels that do not fit
            the class type, or a changing number of classes.
    """

    _beta = 1.0

    def __init__(self, name: str = "f1", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None, class_type: str = "binary", threshold: Any = 0.5,
                 average: str | None = "micro") -> None:
        if average not in ("micro", "macro", None):
            raise ValueError(f"average must be 'micro', 'macro' or None, got {average!r}")
        self.average = average
        self.metrics = _ClassificationCounts(class_type, threshold, self._beta)
        config = {"class_type": class_type, "average": average}
        if isinstance(threshold, numbers.Real):
            config["threshold"] = threshold
        super().__init__(name, output_names=output_names, label_names=label_names, **config)

    def update(self, labels: Any, preds: Any) -> None:
        """Add each pair's counts, then recompute the score over everything seen."""
        labels, preds = check_label_shapes(labels, preds, wrap=True)
        for label, pred in zip(labels, preds, strict=True):
            self.metrics.update_stats(label, pred)
        total = self.metrics.total_examples
        if self.average == "micro":
            self.sum_metric = self.metrics.micro_fscore() * total
        elif self.average == "macro":
            self.sum_metric = float(self.metrics.fscore().mean()) * total
        else:
            self.sum_metric = self.metrics.fscore() * total
        self.num_inst = total

    def get(self) -> tuple[str, Any]:
        """``(name, score)``: a float, or the per-class array with ``average=None``; NaN before any update."""
        if self.num_inst == 0:
            return self.name, float("nan")
        value = self.sum_metric / self.num_inst
        return self.name, value if isinstance(value, np.ndarray) else float(value)

    def reset(self) -> None:
        """Forget every count."""
        self.sum_metric = 0.0
        self.num_inst = 0
        if hasattr(self, "metrics"):
            self.metrics.reset_stats()


class Fbeta(F1):
    """F-beta score: ``(1 + β²)·P·R / (β²·P + R)``; β > 1 weighs recall more. Otherwise as :class:`F1`.

    Args:
        beta: β, > 0.
        Others as :class:`F1`.
    """

    def __init__(self, name: str = "fbeta", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None, class_type: str = "binary", beta: float = 1,
                 threshold: Any = 0.5, average: str | None = "micro") -> None:
        if isinstance(beta, bool) or not isinstance(beta, numbers.Real) or not beta > 0:
            raise ValueError(f"beta must be a number > 0, got {beta!r}")
        self._beta = float(beta)
        super().__init__(name, output_names, label_names, class_type, threshold, average)
        self._kwargs["beta"] = beta


class BinaryAccuracy(EvalMetric):
    """Fraction of correct positive/negative decisions, ``pred > threshold`` against 0/1 labels.

    Works for binary and multilabel problems alike: every element counts as one instance.

    Args:
        name, output_names, label_names: as :class:`EvalMetric`.
        threshold: a prediction above it is positive; a float, or one value per class (last axis).
    """

    def __init__(self, name: str = "binary_accuracy", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None, threshold: Any = 0.5) -> None:
        self.threshold = threshold
        config = {"threshold": threshold} if isinstance(threshold, numbers.Real) else {}
        super().__init__(name, output_names=output_names, label_names=label_names, **config)

    def update(self, labels: Any, preds: Any) -> None:
        """Add the correct decisions and the element count of each pair."""
        labels, preds = check_label_shapes(labels, preds, wrap=True)
        for label, pred in zip(labels, preds, strict=True):
            decided = _threshold(_to_numpy(pred), self.threshold).astype(np.int32).reshape(-1)
            label_ids = _to_numpy(label).astype(np.int32).reshape(-1)
            check_label_shapes(label_ids, decided, shape=True)
            self.sum_metric += float(np.count_nonzero(decided == label_ids))
            self.num_inst += int(decided.size)


class MCC(EvalMetric):
    """Matthews correlation coefficient of a binary problem, over every instance seen.

    ``(TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN))``, where zero factors of the
    denominator are replaced by 1 (so a constant predictor scores 0). Inputs as binary :class:`F1`.

    Args:
        name, output_names, label_names: as :class:`EvalMetric`.
    """

    def __init__(self, name: str = "mcc", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None) -> None:
        self._metrics = _ClassificationCounts()
        super().__init__(name, output_names=output_names, label_names=label_names)

    def update(self, labels: Any, preds: Any) -> None:
        """Add each pair's counts, then recompute the coefficient over everything seen."""
        labels, preds = check_label_shapes(labels, preds, wrap=True)
        for label, pred in zip(labels, preds, strict=True):
            self._metrics.update_stats(label, pred)
        self.num_inst = self._metrics.total_examples
        self.sum_metric = self._metrics.matthews() * self.num_inst

    def reset(self) -> None:
        """Forget every count."""
        self.sum_metric = 0.0
        self.num_inst = 0
        if hasattr(self, "_metrics"):
            self._metrics.reset_stats()


def _regression_pair(label: Any, pred: Any) -> tuple[np.ndarray, np.ndarray]:
    """float64 host copies; a label with the prediction's size but another shape takes its shape."""
    label_np, pred_np = _to_numpy(label).astype(np.float64), _to_numpy(pred).astype(np.float64)
    if label_np.shape != pred_np.shape and label_np.size == pred_np.size:
        label_np = label_np.reshape(pred_np.shape)  # (N,) labels for (N, 1) outputs: no silent (N, N) broadcast
    try:
        np.broadcast_shapes(label_np.shape, pred_np.shape)
    except ValueError:
        raise ValueError(f"labels of shape {label_np.shape} do not fit predictions of shape {pred_np.shape}") from None
    return label_np, pred_np


class MAE(EvalMetric):
    """Mean absolute error: per instance the mean of ``|label − pred|`` over its elements, averaged over instances.

    Instances are the entries of the first axis. A label of the prediction's size but another
    shape (``(N,)`` for ``(N, 1)`` outputs) is reshaped to it instead of broadcast.

    Args:
        name, output_names, label_names: as :class:`EvalMetric`.
    """

    def __init__(self, name: str = "mae", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None) -> None:
        super().__init__(name, output_names=output_names, label_names=label_names)

    def _per_instance(self, diff: np.ndarray) -> np.ndarray:
        return np.abs(diff)

    def update(self, labels: Any, preds: Any) -> None:
        """Add the per-instance errors and the instance count of each pair."""
        labels, preds = check_label_shapes(labels, preds, wrap=True)
        for label, pred in zip(labels, preds, strict=True):
            label_np, pred_np = _regression_pair(label, pred)
            diff = label_np - pred_np
            n = diff.shape[0] if diff.ndim else 1
            self.sum_metric += float(self._per_instance(diff).reshape(n, -1).mean(axis=-1).sum())
            self.num_inst += n


class MSE(MAE):
    """Mean squared error: per instance the mean of ``(label − pred)²``, averaged over instances; as :class:`MAE`."""

    def __init__(self, name: str = "mse", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None) -> None:
        super().__init__(name, output_names=output_names, label_names=label_names)

    def _per_instance(self, diff: np.ndarray) -> np.ndarray:
        return diff * diff


class RMSE(MSE):
    """Root mean squared error: ``sqrt`` of :class:`MSE` over every instance seen (MXNet's definition)."""

    def __init__(self, name: str = "rmse", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None) -> None:
        super().__init__(name, output_names=output_names, label_names=label_names)

    def get(self) -> tuple[str, float]:
        """``(name, sqrt(sum_metric / num_inst))``; NaN before any instance was seen."""
        if self.num_inst == 0:
            return self.name, float("nan")
        return self.name, math.sqrt(self.sum_metric / self.num_inst)


class MeanPairwiseDistance(EvalMetric):
    """Mean over instances of the p-norm distance between label and prediction (MXNet 2.x's ``mpd``).

    Instance i (a row of the first axis, flattened) contributes ``(Σ_j (label_ij − pred_ij)^p)^(1/p)``,
    in the units of the data. As in MXNet the differences are raised to ``p`` without ``abs``: for
    an even ``p`` (the default 2) that is the p-norm; for an odd ``p`` negative differences count
    negatively (MXNet's values are kept).

    Args:
        p: the power of the norm (default 2, the Euclidean distance).
        name, output_names, label_names: as :class:`EvalMetric`.

    Raises (from update):
        ValueError: the numbers of label and prediction arrays differ, or a label and its
            prediction have different numbers of rows or of elements per row.
    """

    def __init__(self, name: str = "mpd", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None, p: float = 2) -> None:
        super().__init__(name, output_names=output_names, label_names=label_names, p=p)
        self.p = p

    def update(self, labels: Any, preds: Any) -> None:
        """Add the per-instance distances and the instance count of each pair."""
        labels, preds = check_label_shapes(labels, preds, wrap=True)
        for label, pred in zip(labels, preds, strict=True):
            label_np, pred_np = _to_numpy(label).astype(np.float64), _to_numpy(pred).astype(np.float64)
            n = label_np.shape[0] if label_np.ndim else 1
            label_np, pred_np = label_np.reshape(n, -1), pred_np.reshape(pred_np.shape[0] if pred_np.ndim else 1, -1)
            if label_np.shape != pred_np.shape:
                raise ValueError(f"{self.name}: labels of shape {label_np.shape} (rows, elements) do not match "
                                 f"predictions of shape {pred_np.shape}")
            dist = ((label_np - pred_np) ** self.p).sum(axis=-1) ** (1.0 / self.p)
            self.sum_metric += float(dist.sum())
            self.num_inst += n


class MeanCosineSimilarity(EvalMetric):
    """Mean cosine similarity along the last axis: ``label·pred / max(‖label‖·‖pred‖, eps)`` (MXNet 2.x).

    Every vector along the last axis is one instance (a 1-D array is one vector); the value is
    dimensionless, in [-1, 1].

    Args:
        eps: the smallest denominator, so a zero vector gives similarity 0 (default 1e-8).
        name, output_names, label_names: as :class:`EvalMetric`.

    Raises (from update):
        ValueError: the numbers of label and prediction arrays differ, or a label and its
            prediction do not broadcast.
    """

    def __init__(self, name: str = "cos_sim", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None, eps: float = 1e-8) -> None:
        super().__init__(name, output_names=output_names, label_names=label_names, eps=eps)
        self.eps = eps

    def update(self, labels: Any, preds: Any) -> None:
        """Add the summed similarities and the vector count of each pair."""
        labels, preds = check_label_shapes(labels, preds, wrap=True)
        for label, pred in zip(labels, preds, strict=True):
            label_np, pred_np = _to_numpy(label).astype(np.float64), _to_numpy(pred).astype(np.float64)
            label_np, pred_np = np.atleast_2d(label_np), np.atleast_2d(pred_np)
            try:
                dot = (label_np * pred_np).sum(axis=-1)
            except ValueError:
                raise ValueError(f"{self.name}: labels of shape {label_np.shape} do not fit predictions of "
                                 f"shape {pred_np.shape}") from None
            norms = np.linalg.norm(label_np, axis=-1) * np.linalg.norm(pred_np, axis=-1)
            self.sum_metric += float((dot / np.maximum(norms, self.eps)).sum())
            self.num_inst += int(np.prod(label_np.shape[:-1]))


class PearsonCorrelation(EvalMetric):
    """Pearson correlation of every label and prediction element seen (flattened), computed online.

    Means, sums of squares and the co-moment are updated with Welford's algorithm, so the
    value equals ``numpy.corrcoef`` of the concatenated data whatever the batching.

    Args:
        name, output_names, label_names: as :class:`EvalMetric`.

    Raises (from update):
        ValueError: a label and its prediction have different shapes.
    """

    def __init__(self, name: str = "pearsonr", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None) -> None:
        super().__init__(name, output_names=output_names, label_names=label_names)

    def reset(self) -> None:
        """Forget every element seen."""
        self._count = 0
        self._mean_l = self._mean_p = 0.0
        self._sse_l = self._sse_p = 0.0
        self._comoment = 0.0
        self.num_inst = 0
        self.sum_metric = 0.0

    @staticmethod
    def _welford(values: np.ndarray, count: int, mean: float, m2: float) -> tuple[int, float, float]:
        count += values.size
        delta = values - mean
        mean += float(np.sum(delta / count))
        m2 += float(np.sum(delta * (values - mean)))
        return count, mean, m2

    def update(self, labels: Any, preds: Any) -> None:
        """Fold each (label, prediction) pair into the running moments."""
        labels, preds = check_label_shapes(labels, preds, wrap=True)
        for label, pred in zip(labels, preds, strict=True):
            label_np, pred_np = _to_numpy(label), _to_numpy(pred)
            check_label_shapes(label_np, pred_np, shape=True)
            lab = label_np.reshape(-1).astype(np.float64)
            prd = pred_np.reshape(-1).astype(np.float64)
            self.num_inst += 1
            count, self._mean_l, self._sse_l = self._welford(lab, self._count, self._mean_l, self._sse_l)
            self._comoment += float(np.sum((lab - self._mean_l) * (prd - self._mean_p)))
            self._count, self._mean_p, self._sse_p = self._welford(prd, self._count, self._mean_p, self._sse_p)

    def get(self) -> tuple[str, float]:
        """``(name, r)``; NaN before any update (and where a variance is 0)."""
        if self.num_inst == 0:
            return self.name, float("nan")
        n = self._count
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.float64(self._comoment) / ((n - 1) * np.sqrt(self._sse_p / (n - 1)) * np.sqrt(self._sse_l / (n - 1)))
        return self.name, float(r)


class PCC(EvalMetric):
    """Multiclass Matthews correlation (Gorodkin's R_K) from the confusion matrix of every instance seen.

    For K classes and confusion matrix C (grown as larger class ids appear):
    ``(n·Σ_k C_kk − Σ_k x_k·y_k) / sqrt((n² − Σ_k x_k²)(n² − Σ_k y_k²))`` with row sums x, column
    sums y and n instances; equal to :class:`MCC` for two classes. NaN when every prediction or
    every label is one class. Predictions are class scores (argmax over axis 1) or class ids.

    Args:
        name, output_names, label_names: as :class:`EvalMetric`.
    """

    def __init__(self, name: str = "pcc", output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None) -> None:
        self.k = 2
        super().__init__(name, output_names=output_names, label_names=label_names)

    @property
    def sum_metric(self) -> float:  # type: ignore[override]
        """The coefficient times ``num_inst`` (so the base class's ratio is the coefficient)."""
        return self._calc_mcc(self.lcm) * self.num_inst

    @sum_metric.setter
    def sum_metric(self, value: float) -> None:
        pass  # derived from the confusion matrix

    def _calc_mcc(self, cmat: np.ndarray) -> float:
        n = cmat.sum()
        x, y = cmat.sum(axis=1), cmat.sum(axis=0)
        cov_xx, cov_yy = np.sum(x * (n - x)), np.sum(y * (n - y))
        if cov_xx == 0 or cov_yy == 0:
            return float("nan")
        cov_xy = np.sum(np.diag(cmat) * n - x * y)
        return float(cov_xy / (cov_xx * cov_yy) ** 0.5)

    def update(self, labels: Any, preds: Any) -> None:
        """Add each pair to the confusion matrix (rows: predicted class, columns: label)."""
        labels, preds = check_label_shapes(labels, preds, wrap=True)
        for label, pred in zip(labels, preds, strict=True):
            label_ids = _to_numpy(label).astype(np.int64).reshape(-1)
            pred_np = _to_numpy(pred)
            if pred_np.shape != _to_numpy(label).shape and pred_np.ndim > 1:
                pred_ids = pred_np.argmax(axis=1).astype(np.int64).reshape(-1)
            else:
                pred_ids = pred_np.astype(np.int64).reshape(-1)
            check_label_shapes(label_ids, pred_ids, shape=True)
            if label_ids.size == 0:
                continue
            if min(label_ids.min(), pred_ids.min()) < 0:
                raise ValueError(f"{self.name}: class ids must be >= 0, got {min(label_ids.min(), pred_ids.min())}")
            top = int(max(pred_ids.max(), label_ids.max()))
            if top >= self.k:
                self.lcm = np.pad(self.lcm, ((0, top + 1 - self.k), (0, top + 1 - self.k)))
                self.k = top + 1
            np.add.at(self.lcm, (pred_ids, label_ids), 1.0)
        self.num_inst += 1

    def reset(self) -> None:
        """Forget the confusion matrix."""
        self.num_inst = 0
        self.lcm = np.zeros((self.k, self.k), dtype=np.float64)


class CustomMetric(EvalMetric):
    """A metric from a function ``feval(label, pred)`` of NumPy arrays (MXNet's ``CustomMetric``).

    ``feval`` returns the batch's metric (counted as one instance) or ``(sum_metric, num_inst)``.

    Args:
        feval: the function.
        name: defaults to ``feval.__name__`` (``'custom(<lambda>)'`` for a lambda).
        allow_extra_outputs: accept more predictions than labels (extra ones are ignored).
        output_names, label_names: as :class:`EvalMetric`.
    """

    def __init__(self, feval: Callable[[np.ndarray, np.ndarray], Any], name: str | None = None,
                 allow_extra_outputs: bool = False, output_names: Sequence[str] | None = None,
                 label_names: Sequence[str] | None = None) -> None:
        if name is None:
            name = feval.__name__
            if "<" in name:
                name = f"custom({name})"
        super().__init__(name, output_names=output_names, label_names=label_names)
        self._feval = feval
        self._allow_extra_outputs = allow_extra_outputs

    def update(self, labels: Any, preds: Any) -> None:
        """Add ``feval``'s value for each (label, prediction) pair."""
        labels, preds = _as_list(labels), _as_list(preds)
        if not self._allow_extra_outputs:
            check_label_shapes(labels, preds)
        for label, pred in zip(labels, preds):
            value = self._feval(_to_numpy(label), _to_numpy(pred))
            if isinstance(value, tuple):
                self.sum_metric += float(value[0])
                self.num_inst += int(value[1])
            else:
                self.sum_metric += float(value)
                self.num_inst += 1

    def get_config(self) -> dict[str, Any]:
        """Not available: a function cannot be written into a config (MXNet raises too)."""
        raise NotImplementedError("CustomMetric cannot be serialized")


_METRICS: dict[str, type[EvalMetric]] = {}


def register(klass: type[EvalMetric], *aliases: str) -> type[EvalMetric]:
    """Make ``klass`` known to :func:`create` under its lower-case class name and ``aliases``."""
    for name in (klass.__name__, *aliases):
        _METRICS[name.lower()] = klass
    return klass


for _klass, _aliases in [
    (CompositeEvalMetric, ("composite",)), (Accuracy, ("acc",)), (TopKAccuracy, ("top_k_accuracy", "top_k_acc")),
    (F1, ()), (Fbeta, ()), (BinaryAccuracy, ()), (MCC, ()), (MAE, ()), (MSE, ()), (RMSE, ()),
    (CrossEntropy, ("ce", "cross-entropy")), (NegativeLogLikelihood, ("nll_loss",)), (Perplexity, ()),
    (MeanPairwiseDistance, ()), (MeanCosineSimilarity, ()), (PearsonCorrelation, ("pearsonr",)), (PCC, ()),
    (Loss, ()), (CustomMetric, ()),
]:
    register(_klass, *_aliases)


def create(metric: Any, *args: Any, **kwargs: Any) -> EvalMetric:
    """Build a metric, MXNet's ``metric.create``.

    ``metric`` may be:

    * a name, case-insensitive: a class name (``'F1'``, ``'TopKAccuracy'``) or an alias
      (``'acc'``, ``'top_k_acc'``, ``'ce'``, ``'nll_loss'``, ``'pearsonr'``, ``'composite'``); ``args`` and
      ``kwargs`` go to the constructor;
    * a config: a dict from :meth:`EvalMetric.get_config`, or its JSON text (``'{...}'``), or a
      JSON list ``'[name, {kwargs}]'``;
    * a list of any of these: a :class:`CompositeEvalMetric` of them (``args``/``kwargs`` go to
      every child);
    * a function ``feval(label, pred)``: a :class:`CustomMetric`;
    * an :class:`EvalMetric` instance, returned unchanged.

    Raises:
        ValueError: unknown name (the message lists the known ones), malformed JSON, or
            arguments given with an instance or a config.
        TypeError: anything else.
    """
    if isinstance(metric, EvalMetric):
        if args or kwargs:
            raise ValueError(f"create: no arguments may be given with a metric instance, got {args} {kwargs}")
        return metric
    if isinstance(metric, list):
        composite = CompositeEvalMetric()
        for child in metric:
            composite.add(create(child, *args, **kwargs))
        return composite
    if isinstance(metric, dict):
        if args or kwargs:
            raise ValueError("create: no arguments may be given with a metric config")
        config = dict(metric)
        if "metric" not in config:
            raise ValueError(f"create: a metric config needs a 'metric' entry, got keys {sorted(config)}")
        return create(config.pop("metric"), **config)
    if isinstance(metric, str):
        text = metric.strip()
        if text.startswith(("{", "[")):
            if args or kwargs:
                raise ValueError("create: no arguments may be given with a JSON metric config")
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"create: {metric!r} is not a valid JSON metric config ({exc})") from exc
            if isinstance(parsed, list):
                if len(parsed) != 2 or not isinstance(parsed[0], str) or not isinstance(parsed[1], dict):
                    raise ValueError(f"create: a JSON list config must be [name, {{kwargs}}], got {metric!r}")
                return create(parsed[0], **parsed[1])
            return create(parsed)
        cls = _METRICS.get(text.lower())
        if cls is None:
            raise ValueError(f"unknown metric {metric!r}; known metrics: {', '.join(sorted(_METRICS))}")
        return cls(*args, **kwargs)
    if callable(metric):
        return CustomMetric(metric, *args, **kwargs)
    raise TypeError(f"create: metric must be a name, a config, a list, a function or an EvalMetric, "
                    f"got {type(metric).__name__}")
