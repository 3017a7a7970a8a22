"""Tests of mxlite.gluon.metric: values against hand computations, list/single inputs, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mxlite as mx
from mxlite.gluon import metric


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


# -- MXNet 2.x's metrics: mirrors of MXNet's tests/python/unittest/test_metric.py (same calls, same values)
# and of the values in the metrics' docstrings. mx.array stands for mx.nd.array / mx.np.array.
def check_metric(name, *args, **kwargs) -> None:
    """MXNet's check_metric: a metric rebuilt from its JSON config has the same config."""
    import json

    m = metric.create(name, *args, **kwargs)
    m2 = metric.create(json.dumps(m.get_config()))
    assert m.get_config() == m2.get_config()
    assert type(m2) is type(m)


def test_metrics_round_trip_through_json_config() -> None:  # MXNet: test_metrics
    check_metric("acc", axis=0)
    check_metric("f1")
    check_metric("mcc")
    check_metric("perplexity", -1)
    check_metric("pearsonr")
    check_metric("pcc")
    check_metric("loss")
    check_metric("top_k_acc", top_k=3)
    check_metric("f1", class_type="multiclass", average="macro")
    check_metric("fbeta", beta=2)
    check_metric("nll_loss")
    check_metric("meanpairwisedistance", p=3)
    check_metric("meancosinesimilarity", eps=1e-6)
    for name in ("mae", "mse", "rmse", "binaryaccuracy", "ce"):
        check_metric(name)
    composite = metric.create(["acc", "f1"])
    check_metric(composite)
    rebuilt = metric.create(composite.get_config())
    assert [type(m) for m in rebuilt.metrics] == [metric.Accuracy, metric.F1]
    assert metric.create("top_k_acc", top_k=3).get_config()["name"] == "top_k_accuracy_3"
    assert metric.create('["f1", {"average": "macro"}]').average == "macro"


def test_create_from_a_list_a_function_and_errors() -> None:
    comp = metric.create(["acc", metric.MAE(), {"metric": "RMSE"}])
    assert isinstance(comp, metric.CompositeEvalMetric)
    assert [type(m) for m in comp.metrics] == [metric.Accuracy, metric.MAE, metric.RMSE]
    custom = metric.create(lambda label, pred: float(np.abs(label - pred).sum()))
    assert isinstance(custom, metric.CustomMetric) and custom.name == "custom(<lambda>)"
    custom.update([np.array([1.0, 2.0])], [np.array([1.5, 2.0])])
    assert custom.get()[1] == 0.5
    with pytest.raises(NotImplementedError, match="cannot be serialized"):
        custom.get_config()
    with pytest.raises(ValueError, match="not a valid JSON"):
        metric.create("{nope")
    with pytest.raises(ValueError, match="top_k > 1"):
        metric.TopKAccuracy(top_k=1)
    with pytest.raises(ValueError, match="average must be"):
        metric.F1(average="weighted")
    with pytest.raises(ValueError, match="class_type must be"):
        metric.F1(class_type="ordinal")


def test_acc_2d_label() -> None:  # MXNet: test_acc_2d_label
    pred = mx.array([[0.3, 0.7], [0, 1.0], [0.4, 0.6], [0.8, 0.2], [0.3, 0.5], [0.6, 0.4]])
    label = mx.array([[0, 1, 1], [1, 0, 1]])
    m = metric.create("acc")
    m.update([label], [pred])
    expected = (np.argmax(pred.asnumpy(), axis=1) == label.asnumpy().ravel()).sum() / 6.0
    assert m.get()[1] == expected


def test_loss_update() -> None:  # MXNet: test_loss_update
    pred = mx.array([[0.3, 0.7], [0, 1.0], [0.4, 0.6]])
    m1, m2 = metric.create("loss"), metric.create("loss")
    m1.update(None, [pred])
    m2.update(None, pred)
    assert m1.get()[1] == m2.get()[1]


def test_top_k_accuracy_docstring_value() -> None:  # MXNet's TopKAccuracy example
    np.random.seed(999)
    predicts = [mx.array(np.random.rand(10, 10))]
    labels = [mx.array([2, 6, 9, 2, 3, 4, 7, 8, 9, 6])]
    acc = metric.TopKAccuracy(top_k=3)
    acc.update(labels, predicts)
    assert acc.get() == ("top_k_accuracy_3", 0.3)


def test_top_k_accuracy_counts_hits_in_the_k_best() -> None:
    acc = metric.create("top_k_accuracy", top_k=2)
    scores = np.array([[0.1, 0.5, 0.4], [0.7, 0.2, 0.1], [0.2, 0.3, 0.5]])
    acc.update([np.array([2, 1, 0])], [scores])  # 2 in {1, 2}: hit; 1 in {0, 1}: hit; 0 in {2, 1}: miss
    assert acc.get()[1] == pytest.approx(2 / 3)
    acc.update([np.array([2])], [np.array([[0.3, 0.2, 0.1]])])
    assert (acc.sum_metric, acc.num_inst) == (2.0, 4)
    many = metric.TopKAccuracy(top_k=5)  # more than the classes: every label is a hit
    many.update([np.array([0, 2])], [scores[:2]])
    assert many.get()[1] == 1.0


def test_binary_f1() -> None:  # MXNet: test_binary_f1
    micro_f1 = metric.create("f1", average="micro")
    macro_f1 = metric.F1(average="macro")
    assert np.isnan(macro_f1.get()[1]) and np.isnan(micro_f1.get()[1])
    pred, label = mx.array([[0.9, 0.1], [0.8, 0.2]]), mx.array([0, 0])  # divide by zero
    macro_f1.update([label], [pred])
    micro_f1.update([label], [pred])
    assert macro_f1.get()[1] == 0.0 and micro_f1.get()[1] == 0.0
    macro_f1.reset()
    micro_f1.reset()
    pred11, label11 = mx.array([[0.1, 0.9], [0.5, 0.5]]), mx.array([1, 0])
    pred12, label12 = mx.array([[0.85, 0.15], [1.0, 0.0]]), mx.array([1, 0])
    pred21, label21 = mx.array([[0.6, 0.4]]), mx.array([0])
    pred22, label22 = mx.array([[0.2, 0.8]]), mx.array([1])
    for m in (micro_f1, macro_f1):
        m.update([label11, label12], [pred11, pred12])
        assert m.num_inst == 4
        np.testing.assert_almost_equal(m.get()[1], 2.0 * 1 / (2 * 1 + 1 + 0))
        m.update([label21, label22], [pred21, pred22])
        assert m.num_inst == 6
        np.testing.assert_almost_equal(m.get()[1], 2.0 * (1 + 1) / (2 * (1 + 1) + (1 + 0) + (0 + 0)))


def test_multiclass_f1() -> None:  # MXNet: test_multiclass_f1 (sklearn's values written out)
    micro_f1 = metric.create("f1", class_type="multiclass", average="micro")
    macro_f1 = metric.F1(class_type="multiclass", average="macro")
    assert np.isnan(macro_f1.get()[1]) and np.isnan(micro_f1.get()[1])
    pred, label = mx.array([[0.9, 0.1], [0.8, 0.2]]), mx.array([0, 0])
    macro_f1.update([label], [pred])
    micro_f1.update([label], [pred])
    assert macro_f1.get()[1] == 0.5  # one class is 1.0, the other 0 (divided by 0)
    assert micro_f1.get()[1] == 1.0
    macro_f1.reset()
    micro_f1.reset()
    pred11, label11 = mx.array([[1, 0, 0], [0, 1, 0]]), mx.array([0, 2])
    pred12, label12 = mx.array([[0, 0, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1]]), mx.array([1, 0, 0, 1])
    micro_f1.update([label11, label12], [pred11, pred12])
    macro_f1.update([label11, label12], [pred11, pred12])
    assert micro_f1.num_inst == 6 and macro_f1.num_inst == 6
    # predictions [0, 1, 2, 0, 1, 2], labels [0, 2, 1, 0, 0, 1]: f1_score(average='micro') = 1/3,
    # 'macro' = mean(0.8, 0, 0) = 0.2666...
    np.testing.assert_almost_equal(micro_f1.get()[1], 1 / 3)
    np.testing.assert_almost_equal(macro_f1.get()[1], 0.8 / 3)
    per_class = metric.F1(class_type="multiclass", average=None)
    per_class.update([label11, label12], [pred11, pred12])
    np.testing.assert_allclose(per_class.get()[1], [0.8, 0.0, 0.0])


def test_multilabel_f1() -> None:  # MXNet: test_multilabel_f1 (sklearn's values written out)
    micro_f1 = metric.create("f1", class_type="multilabel", average="micro")
    macro_f1 = metric.F1(class_type="multilabel", average="macro")
    assert np.isnan(macro_f1.get()[1]) and np.isnan(micro_f1.get()[1])
    pred, label = mx.array([[0.9, 0.1], [0.8, 0.2]]), mx.array([[1, 1], [1, 1]])
    macro_f1.update([label], [pred])
    micro_f1.update([label], [pred])
    assert macro_f1.get()[1] == 0.5
    assert micro_f1.get()[1] == 2.0 / 3
    macro_f1.reset()
    micro_f1.reset()
    pred11, label11 = mx.array([[0.9, 0.4, 0.3], [0.2, 0.7, 0.8]]), mx.array([[1, 0, 1], [0, 0, 1]])
    pred12, label12 = mx.array([[0.6, 0.6, 0.7]]), mx.array([[0, 1, 1]])
    micro_f1.update([label11, label12], [pred11, pred12])
    macro_f1.update([label11, label12], [pred11, pred12])
    assert micro_f1.num_inst == 3 and macro_f1.num_inst == 3
    # predictions [[1,0,0],[0,1,1],[1,1,1]] against [[1,0,1],[0,0,1],[0,1,1]]: per class F1 2/3, 2/3, 4/5;
    # micro: TP 4, FP 2, FN 1 -> 8/11.
    np.testing.assert_almost_equal(micro_f1.get()[1], 8 / 11)
    np.testing.assert_almost_equal(macro_f1.get()[1], (2 / 3 + 2 / 3 + 0.8) / 3)


def test_mcc() -> None:  # MXNet: test_mcc
    mcc = metric.create("mcc")
    assert np.isnan(mcc.get()[1])
    mcc.update([mx.array([0, 0])], [mx.array([[0.9, 0.1], [0.8, 0.2]])])
    assert mcc.get()[1] == 0.0
    mcc.reset()
    pred11, label11 = mx.array([[0.1, 0.9], [0.5, 0.5]]), mx.array([1, 0])
    pred12, label12 = mx.array([[0.85, 0.15], [1.0, 0.0]]), mx.array([1, 0])
    pred21, label21 = mx.array([[0.6, 0.4]]), mx.array([0])
    pred22, label22 = mx.array([[0.2, 0.8]]), mx.array([1])
    mcc.update([label11, label12], [pred11, pred12])
    assert mcc.num_inst == 4
    tp1, fp1, fn1, tn1 = 1, 0, 1, 2
    mcc1 = (tp1 * tn1 - fp1 * fn1) / np.sqrt((tp1 + fp1) * (tp1 + fn1) * (tn1 + fp1) * (tn1 + fn1))
    np.testing.assert_almost_equal(mcc.get()[1], mcc1)
    mcc.update([label21, label22], [pred21, pred22])
    assert mcc.num_inst == 6
    tp, fp, fn, tn = tp1 + 1, fp1 + 0, fn1 + 0, tn1 + 1
    mcc_total = (tp * tn - fp * fn) / np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    np.testing.assert_almost_equal(mcc.get()[1], mcc_total)


def test_f1_mcc_pcc_docstring_values() -> None:  # MXNet's MCC/PCC example: a network almost always positive
    fp, fn, tp, tn = 1000, 1, 10000, 1
    preds = [mx.array([[0.3, 0.7]] * fp + [[0.7, 0.3]] * tn + [[0.7, 0.3]] * fn + [[0.3, 0.7]] * tp)]
    labels = [mx.array([0.0] * (fp + tn) + [1.0] * (fn + tp))]
    results = {}
    for name in ("f1", "mcc", "pcc"):
        m = metric.create(name)
        m.update(preds=preds, labels=labels)
        results[name] = m.get()[1]
    np.testing.assert_almost_equal(results["f1"], 0.95233560306652054)
    np.testing.assert_almost_equal(results["mcc"], 0.01917751877733392)
    np.testing.assert_almost_equal(results["pcc"], 0.01917751877733392)


def test_binary_accuracy_and_fbeta_docstring_values() -> None:
    bacc = metric.BinaryAccuracy(threshold=0.6)
    bacc.update(preds=[mx.array([0.7, 1, 0.55])], labels=[mx.array([0.0, 1.0, 0.0])])
    assert bacc.get() == ("binary_accuracy", pytest.approx(2 / 3))
    multilabel = metric.BinaryAccuracy(threshold=np.array([0.5, 0.9]))
    multilabel.update([np.array([[1, 1], [0, 0]])], [np.array([[0.6, 0.8], [0.4, 0.95]])])
    assert multilabel.get()[1] == 0.5  # [[1, 0], [0, 1]] decided
    predicts, labels = [mx.array([[0.3, 0.7], [0.0, 1.0], [0.4, 0.6]])], [mx.array([0.0, 1.0, 1.0])]
    f1 = metric.F1()
    f1.update(preds=predicts, labels=labels)
    assert f1.get() == ("f1", pytest.approx(0.8))
    fbeta = metric.Fbeta(beta=2)
    fbeta.update(preds=predicts, labels=labels)
    assert fbeta.get()[1] == pytest.approx(0.9090909090909091)


def test_composite_docstring_value() -> None:
    predicts, labels = [mx.array([[0.3, 0.7], [0, 1.0], [0.4, 0.6]])], [mx.array([0, 1, 1])]
    comp = metric.CompositeEvalMetric()
    for child in [metric.Accuracy(), metric.F1()]:
        comp.add(child)
    comp.update(labels=labels, preds=predicts)
    names, values = comp.get()
    assert names == ["accuracy", "f1"] and values == [pytest.approx(2 / 3), pytest.approx(0.8)]
    assert comp.get_name_value() == [("accuracy", pytest.approx(2 / 3)), ("f1", pytest.approx(0.8))]
    assert comp.get_metric(1) is comp.metrics[1]
    with pytest.raises(ValueError, match="out of range"):
        comp.get_metric(5)
    comp.reset()
    assert all(np.isnan(v) for v in comp.get()[1])
    named = metric.CompositeEvalMetric(["acc", "loss"], label_names=["y"], output_names=["out"])
    named.update_dict({"y": labels[0], "other": mx.array([5, 5, 5])}, {"out": predicts[0]})
    assert named.get_metric(0).get()[1] == pytest.approx(2 / 3)


def test_perplexity() -> None:  # MXNet: test_perplexity
    pred = mx.array([[0.8, 0.2], [0.2, 0.8], [0, 1.0]])
    label = mx.array([0, 1, 1])
    p = pred.asnumpy()[np.arange(3), label.asnumpy().astype("int32")]
    expected = np.exp(-np.log(p).sum() / 3)
    m = metric.create("perplexity", -1)
    m.update([label], [pred])
    assert m.get()[1] == pytest.approx(expected, rel=1e-12)
    doc = metric.Perplexity(ignore_label=None)  # the docstring's value
    doc.update([mx.array([0, 1, 1])], [mx.array([[0.3, 0.7], [0, 1.0], [0.4, 0.6]])])
    assert doc.get()[1] == pytest.approx(1.7710976285155853)
    ignoring = metric.Perplexity(ignore_label=0)  # the label-0 row leaves the sum and the count
    ignoring.update([mx.array([0, 1, 1])], [mx.array([[0.3, 0.7], [0, 1.0], [0.4, 0.6]])])
    assert ignoring.num_inst == 2 and ignoring.get()[1] == pytest.approx(math.exp(-math.log(0.6) / 2))


def test_pearsonr() -> None:  # MXNet: test_pearsonr (numpy.corrcoef's values)
    pred1, label1 = mx.array([[0.3, 0.7], [0, 1.0], [0.4, 0.6]]), mx.array([[1, 0], [0, 1], [0, 1]])
    pr = metric.create("pearsonr")
    assert np.isnan(pr.get()[1])
    pr.update([label1], [pred1])
    np.testing.assert_almost_equal(pr.get()[1], np.corrcoef(pred1.asnumpy().ravel(), label1.asnumpy().ravel())[0, 1])
    np.testing.assert_almost_equal(pr.get()[1], 0.42163704544016178)  # the docstring's value
    pred2, label2 = mx.array([[1, 2], [3, 2], [4, 6]]), mx.array([[1, 0], [0, 1], [0, 1]])
    pr.update([label2], [pred2])
    both_p = np.concatenate([pred1.asnumpy().ravel(), pred2.asnumpy().ravel()])
    both_l = np.concatenate([label1.asnumpy().ravel(), label2.asnumpy().ravel()])
    np.testing.assert_almost_equal(pr.get()[1], np.corrcoef(both_p, both_l)[0, 1])
    with pytest.raises(ValueError, match="shape"):
        pr.update([mx.array([1.0, 2.0])], [mx.array([1.0, 2.0, 3.0])])


def _cm_batch(cm):
    """MXNet's cm_batch: a batch whose confusion matrix (rows: labels) is ``cm``."""
    n = len(cm)
    ident = np.identity(n)
    labels, preds = [], []
    for i in range(n):
        for j in range(n):
            labels += [i] * cm[i][j]
            preds += [ident[j]] * cm[i][j]
    return [mx.array(np.array(labels, dtype="int32"))], [mx.array(np.array(preds))]


def test_pcc() -> None:  # MXNet: test_pcc
    labels, preds = _cm_batch([[7, 3], [2, 5]])
    pcc = metric.create("pcc")
    pcc.update(labels, preds)
    value = pcc.get()[1]
    mcc = metric.create("mcc")
    mcc.update(labels, preds)
    np.testing.assert_almost_equal(value, mcc.get()[1])  # binary: PCC is MCC
    pear = metric.create("pearsonr")
    pear.update(labels, [mx.array(p.asnumpy().argmax(axis=1)) for p in preds])
    np.testing.assert_almost_equal(value, pear.get()[1])  # and Pearson's r
    pcc.reset()
    pcc.update(labels, [mx.array(p.asnumpy().argmax(axis=1)) for p in preds])  # class ids as predictions
    np.testing.assert_almost_equal(value, pcc.get()[1])
    cm = [[23, 13, 3], [7, 19, 11], [2, 5, 17]]
    k = 3
    ref = sum(cm[a][a] * cm[b][c] - cm[a][b] * cm[c][a] for a in range(k) for b in range(k) for c in range(k)) / (
        sum(sum(cm[a][b] for b in range(k)) * sum(sum(cm[f][g] for g in range(k)) for f in range(k) if f != a)
            for a in range(k))
        * sum(sum(cm[b][a] for b in range(k)) * sum(sum(cm[f][g] for f in range(k)) for g in range(k) if g != a)
              for a in range(k))) ** 0.5
    labels, preds = _cm_batch(cm)
    pcc.reset()
    pcc.update(labels, preds)
    value = pcc.get()[1]
    np.testing.assert_almost_equal(value, ref)
    # order, batch size and update frequency do not change the score
    one_by_one = list(zip(labels[0].asnumpy(), preds[0].asnumpy()))[::-1]
    pcc.reset()
    for lab, pre in one_by_one:
        pcc.update([mx.array(np.array([lab]))], [mx.array(pre.reshape(1, -1))])
    assert pcc.get()[1] == pytest.approx(value, rel=1e-12)


def test_single_array_input() -> None:  # MXNet: test_single_array_input
    pred = mx.array([[1, 2, 3, 4]])
    label = pred + 0.1
    for name, want in (("mse", 0.01), ("mae", 0.1), ("rmse", 0.1)):
        m = metric.create(name)
        m.update(label, pred)
        np.testing.assert_almost_equal(m.get()[1], want)


def test_regression_docstring_values() -> None:
    predicts, labels = [mx.array([3, -0.5, 2, 7])], [mx.array([2.5, 0.0, 2, 8])]
    for klass, want in ((metric.MAE, 0.5), (metric.MSE, 0.375), (metric.RMSE, 0.612372457981)):
        m = klass()
        m.update(labels=labels, preds=predicts)
        assert m.get()[1] == pytest.approx(want)
    mse = metric.MSE()  # (N,) labels against (N, 1) outputs: reshaped, not broadcast to (N, N)
    mse.update([np.array([1.0, 2.0])], [np.array([[1.0], [4.0]])])
    assert (mse.get()[1], mse.num_inst) == (2.0, 2)
    rows = metric.MAE()  # per instance: the mean over its elements; then the mean over instances
    rows.update([np.zeros((2, 2))], [np.array([[1.0, 3.0], [0.0, 0.0]])])
    assert rows.get()[1] == 1.0


def test_nll_loss() -> None:  # MXNet: test_nll_loss
    m = metric.create("nll_loss")
    assert isinstance(m, metric.NegativeLogLikelihood) and m.name == "nll-loss"
    pred = mx.array([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]])
    m.update([mx.array([2, 1])], [pred])
    p = pred.asnumpy().astype(np.float64)
    assert m.get()[1] == pytest.approx(-(np.log(p[0, 2]) + np.log(p[1, 1])) / 2, rel=1e-10)
    assert m.num_inst == 2


def test_nll_loss_docstring_value_and_eps_is_added() -> None:  # MXNet's NegativeLogLikelihood example
    m = metric.NegativeLogLikelihood()
    m.update([mx.array([0, 1, 1])], [mx.array([[0.3, 0.7], [0, 1.0], [0.4, 0.6]])])
    assert m.get()[1] == pytest.approx(0.57159948348999023, rel=1e-6)
    zero = metric.NegativeLogLikelihood(eps=1e-3)  # p + eps, not max(p, eps) as CrossEntropy
    zero.update([np.array([0])], [np.array([[0.5, 0.5]])])
    assert zero.get()[1] == pytest.approx(-math.log(0.501), rel=1e-12)
    with pytest.raises(ValueError, match="outside"):
        zero.update([np.array([2])], [np.array([[0.5, 0.5]])])
    with pytest.raises(ValueError, match="2 labels"):
        zero.update([np.array([0, 1])], [np.array([[0.5, 0.5]])])


def test_mean_pairwise_distance() -> None:  # MXNet's MeanPairwiseDistance example
    mpd = metric.create("meanpairwisedistance")
    mpd.update(labels=[mx.array([[1.0, 0.0], [4.0, 2.0]])], preds=[mx.array([[1.0, 2.0], [3.0, 4.0]])])
    assert mpd.get() == ("mpd", pytest.approx(2.1180338859558105, rel=1e-7))  # (2 + sqrt(5)) / 2
    assert mpd.num_inst == 2
    mpd.update([np.zeros((1, 2, 2))], [np.ones((1, 2, 2))])  # one instance of 4 elements: distance 2
    assert mpd.get()[1] == pytest.approx((2 + math.sqrt(5) + 2) / 3)
    l1 = metric.MeanPairwiseDistance(p=1)  # MXNet raises the differences to p without abs
    l1.update([np.array([[1.0, 3.0]])], [np.array([[2.0, 1.0]])])
    assert l1.get()[1] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="do not match"):
        l1.update([np.zeros((2, 3))], [np.zeros((2, 2))])


def test_mean_cosine_similarity() -> None:  # MXNet's MeanCosineSimilarity example
    mcs = metric.create("meancosinesimilarity")
    mcs.update(labels=[mx.array([[3.0, 4.0], [2.0, 2.0]])], preds=[mx.array([[1.0, 0.0], [1.0, 1.0]])])
    assert mcs.get() == ("cos_sim", pytest.approx(0.8))
    mcs.reset()
    mcs.update([np.array([1.0, 0.0])], [np.array([0.0, 0.0])])  # 1-D: one vector; a zero vector gives 0
    assert (mcs.get()[1], mcs.num_inst) == (0.0, 1)
    batch = metric.MeanCosineSimilarity()
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 4))  # 6 vectors along the last axis
    batch.update([a], [b])
    want = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    assert batch.num_inst == 6 and batch.get()[1] == pytest.approx(want.mean())
