"""Checks shared by the Estimator and its event handlers: metric lists, the metrics a handler refers to, the
default metric for a loss, and which way a monitored metric improves."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from ...loss import Loss, SoftmaxCrossEntropyLoss
from ...metric import Accuracy, CompositeEvalMetric, EvalMetric

# Metric names in which a larger value is better ('training accuracy', 'validation f1', ...); any other
# metric (a loss, an error, a distance) improves by going down.
_HIGHER_IS_BETTER = ("acc", "f1", "mcc", "pearson", "pcc")


def _check_metrics(metrics: Any) -> list[EvalMetric]:
    """``metrics`` as a flat list: a metric, a list of metrics, a CompositeEvalMetric (its members) or None.

    Raises:
        ValueError: anything else (a metric's name as a string included, as in MXNet), naming it.
    """
    if isinstance(metrics, CompositeEvalMetric):
        return [leaf for member in metrics.metrics for leaf in _check_metrics(member)]
    if isinstance(metrics, EvalMetric):
        return [metrics]
    if metrics is None:
        return []
    if isinstance(metrics, (list, tuple)) and all(isinstance(m, EvalMetric) for m in metrics):
        return list(metrics)
    raise ValueError(f"metrics must be a gluon.metric.EvalMetric or a list of them, got {metrics!r}")


def _metric_references(handler: Any) -> Iterable[tuple[str, EvalMetric]]:
    """(attribute name, metric) for every metric a handler holds in an attribute named like ``*metric*``."""
    for attribute in dir(handler):
        if "metric" not in attribute:
            continue
        value = getattr(handler, attribute, None)
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, EvalMetric):
                yield attribute, item


def _check_handler_metric_ref(handler: Any, known_metrics: Iterable[EvalMetric]) -> None:
    """Refuse a handler that holds a metric the Estimator does not update.

    Raises:
        ValueError: naming the handler, the metric and the metrics the Estimator updates.
    """
    known = list(known_metrics)
    for attribute, metric in _metric_references(handler):
        if not any(metric is k for k in known):
            names = ", ".join(repr(k.name) for k in known)
            raise ValueError(f"{type(handler).__name__}.{attribute} holds the metric {metric.name!r}, which the "
                             f"Estimator does not update (it updates {names}): give the handler metrics from "
                             "estimator.train_metrics and estimator.val_metrics")


def _suggest_metric_for_loss(loss: Loss) -> EvalMetric | None:
    """The metric the Estimator adds for a loss: accuracy for softmax cross-entropy, else none."""
    return Accuracy() if isinstance(loss, SoftmaxCrossEntropyLoss) else None


def _improvement_op(mode: str, monitor: EvalMetric, who: str) -> Callable[[float, float], bool]:
    """How ``who`` (a handler's name) compares a new value of ``monitor`` with the best so far.

    ``'max'``: larger is better; ``'min'``: smaller is better; ``'auto'``: larger for accuracies, F1, MCC and
    correlations, smaller otherwise (the choice is announced with a warning). An unknown mode warns and
    falls back to ``'auto'``, as MXNet.
    """
    if mode not in ("auto", "min", "max"):
        warnings.warn(f"{who}: mode {mode!r} is unknown, using 'auto' (one of 'auto', 'min', 'max')",
                      RuntimeWarning, stacklevel=3)
        mode = "auto"
    if mode == "auto":
        name = monitor.get()[0]
        name = name if isinstance(name, str) else " ".join(name)
        mode = "max" if any(key in name.lower() for key in _HIGHER_IS_BETTER) else "min"
        better = "larger" if mode == "max" else "smaller"
        warnings.warn(f"{who}: mode='auto' treats a {better} {name!r} as an improvement; give mode='min' or "
                      "mode='max' to choose (and silence this warning)", UserWarning, stacklevel=3)
    return _greater if mode == "max" else _less


def _greater(value: float, best: float) -> bool:
    return value > best


def _less(value: float, best: float) -> bool:
    return value < best


def _worst(op: Callable[[float, float], bool]) -> float:
    """The starting 'best' value for a comparison: every real value improves on it."""
    return -math.inf if op is _greater else math.inf
