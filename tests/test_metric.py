"""Tests of mxlite.metric: values against hand computations, list/single inputs, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mxlite as mx
from mxlite import metric


def test_accuracy_from_scores_over_devices() -> None:
    acc = metric.Accuracy()
    preds = [mx.array([[0.9, 0.1], [0.2, 0.8]], device=mx.cpu(0)),
             mx.array([[0.3, 0.7], [0.6, 0.4]], device=mx.cpu(1))]
    labels = [mx.array([0, 1], device=mx.cpu(0)), mx.array([0, 0], device=mx.cpu(1))]
    acc.update(labels, preds)
    assert acc.num_inst == 4
    assert acc.sum_metric == 3.0
    assert acc.get() == ("accuracy", 0.75)
    assert acc.get_name_value() == [("accuracy", 0.75)]


def test_accuracy_class_ids_single_arrays_and_column_labels() -> None:
    acc = metric.Accuracy()
    acc.update(np.array([1, 2, 3]), np.array([1.0, 2.0, 0.0]))  # ids, same shape as labels
    assert acc.get()[1] == pytest.approx(2 / 3)
    acc.reset()
    acc.update(mx.array(np.array([[1], [0]])), mx.array([[0.1, 0.9], [0.2, 0.8]]))  # (N, 1) labels
    assert acc.get()[1] == 0.5


def test_accuracy_axis() -> None:
    acc = metric.Accuracy(axis=0)
    acc.update(np.array([1, 0]), np.array([[0.1, 0.9], [0.8, 0.2]]))  # argmax over axis 0 -> [1, 0]
    assert acc.get()[1] == 1.0


def test_get_is_nan_before_update_and_after_reset() -> None:
    for m in (metric.Accuracy(), metric.CrossEntropy(), metric.Loss()):
        assert math.isnan(m.get()[1])
        m.update([np.array([0])], [np.array([[1.0, 0.0]])])
        m.reset()
        assert m.num_inst == 0 and m.sum_metric == 0.0
        assert math.isnan(m.get()[1])


def test_cross_entropy_matches_formula() -> None:
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]], dtype=np.float32)
    labels = np.array([0, 2])
    ce = metric.CrossEntropy()
    ce.update([mx.array(labels)], [mx.array(probs)])
    expected = -(math.log(0.7 + 1e-12) + math.log(0.8 + 1e-12)) / 2
    assert ce.get()[0] == "cross-entropy"
    assert ce.get()[1] == pytest.approx(expected, rel=1e-6)
    assert ce.num_inst == 2


def test_cross_entropy_eps_keeps_zero_probability_finite() -> None:
    ce = metric.CrossEntropy(eps=1e-8)
    ce.update(np.array([1]), np.array([[1.0, 0.0]]))
    assert ce.get()[1] == pytest.approx(-math.log(1e-8))


def test_cross_entropy_from_logits() -> None:
    logits = np.array([[2.0, 0.0, -1.0]])
    ce = metric.CrossEntropy(from_logits=True)
    ce.update(np.array([0]), logits)
    p = np.exp(logits) / np.exp(logits).sum()
    assert ce.get()[1] == pytest.approx(-math.log(p[0, 0]))


def test_cross_entropy_label_out_of_range() -> None:
    with pytest.raises(ValueError, match="label 3 is outside"):
        metric.CrossEntropy().update(np.array([3]), np.array([[0.5, 0.5]]))


def test_loss_is_mean_of_values_and_ignores_labels() -> None:
    loss = metric.Loss()
    loss.update(None, [mx.array([1.0, 2.0]), mx.array([3.0, 4.0, 5.0], device=mx.cpu(1))])
    assert loss.num_inst == 5
    assert loss.get() == ("loss", 3.0)
    loss.update(None, np.array([9.0]))
    assert loss.get()[1] == pytest.approx(24 / 6)


def test_mismatched_counts_name_both() -> None:
    with pytest.raises(ValueError, match=r"labels 2 .* predictions 1"):
        metric.Accuracy().update([np.array([0]), np.array([1])], [np.array([[1.0, 0.0]])])
    with pytest.raises(ValueError, match=r"\(3,\).*\(2,\)"):
        metric.Accuracy().update(np.array([0, 1, 1]), np.array([[1.0, 0.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="one row of class probabilities"):
        metric.CrossEntropy().update(np.array([0, 1]), np.array([0.2, 0.3, 0.5]))


def test_create_by_name() -> None:
    assert isinstance(metric.create("acc"), metric.Accuracy)
    assert isinstance(metric.create("Accuracy"), metric.Accuracy)
    assert isinstance(metric.create("ce"), metric.CrossEntropy)
    assert isinstance(metric.create("cross-entropy", eps=1e-6), metric.CrossEntropy)
    assert isinstance(metric.create("loss"), metric.Loss)
    m = metric.Loss(name="train-loss")
    assert metric.create(m) is m
    assert metric.create(**metric.Accuracy(axis=0).get_config()).axis == 0
    with pytest.raises(ValueError, match="known metrics: .*accuracy"):
        metric.create("f1-score")


def test_metric_on_gpu_tensors() -> None:
    if mx.num_gpus() == 0:
        pytest.skip("needs a GPU")
    acc = metric.Accuracy()
    acc.update([mx.array([1, 0], device=mx.gpu(0))], [mx.array([[0.0, 1.0], [0.0, 1.0]], device=mx.gpu(0))])
    assert acc.get()[1] == 0.5
