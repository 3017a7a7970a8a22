"""gluon.contrib.estimator.Estimator: its loop gives a hand-written Gluon loop's numbers, its defaults and its errors.

MXNet's own Estimator tests are replayed in test_mxnet_mirror_estimator.py; these check values: the weights and
metrics after ``fit`` against the same loop written out, the progress bar and the training curves.
"""

import io
import math
import sys

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd, gluon
from mxlite.gluon import nn
from mxlite.gluon.contrib import estimator as estimator_module
from mxlite.gluon.contrib.estimator import (
    BatchProcessor,
    EpochEnd,
    Estimator,
    LoggingHandler,
    TrainingCurveHandler,
)

CPUS = [mx.cpu(0), mx.cpu(1)]


def _net(seed=7, devices=CPUS, dropout=0.0):
    mx.random.seed(seed)
    net = nn.Sequential()
    net.add(nn.Dense(8, activation="relu", in_units=5))
    if dropout:
        net.add(nn.Dropout(dropout))
    net.add(nn.Dense(3, in_units=8))
    net.initialize(mx.init.Xavier(), ctx=devices)
    return net


def _data(n=20, batch_size=8):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 5)).astype(np.float32)
    y = (np.arange(n) % 3).astype(np.float32)
    return x, y, gluon.data.DataLoader(gluon.data.ArrayDataset(x, y), batch_size=batch_size)


def _estimator(net, **kwargs):
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.2, "momentum": 0.5})
    return Estimator(net, gluon.loss.SoftmaxCrossEntropyLoss(), trainer=trainer, **kwargs)


def _hand_loop(net, x, y, batch_size, steps, devices=CPUS):
    """The loop the Estimator runs, written out; returns (accuracy, mean loss) of the last epoch's batches."""
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.2, "momentum": 0.5})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    acc, mean_loss, done = gluon.metric.Accuracy(), gluon.metric.Loss(), 0
    while done < steps:
        acc.reset()
        mean_loss.reset()
        for start in range(0, len(x), batch_size):
            xs = gluon.utils.split_and_load(x[start:start + batch_size], devices, even_split=False)
            ys = gluon.utils.split_and_load(y[start:start + batch_size], devices, even_split=False)
            with autograd.record():
                outs = [net(part) for part in xs]
                losses = [loss_fn(o, t) for o, t in zip(outs, ys)]
            autograd.backward(losses)
            trainer.step(sum(int(v.shape[0]) for v in losses))
            acc.update(ys, outs)
            mean_loss.update(0, losses)
            done += 1
            if done == steps:
                break
    return acc.get()[1], mean_loss.get()[1]


def _weights(net):
    return {name: p.data(mx.cpu(0)).asnumpy() for name, p in net.collect_params().items()}


def test_fit_gives_the_hand_written_loops_weights_and_metrics():
    """Two epochs over 20 samples in batches of 8 (the last one 4), split over two devices: the same weights and
    the same last-epoch accuracy and mean loss as the loop written out."""
    x, y, loader = _data()
    net = _net()
    est = _estimator(net)
    est.fit(loader, epochs=2)
    reference = _net()
    acc, loss = _hand_loop(reference, x, y, 8, steps=6)
    for name, value in _weights(reference).items():
        np.testing.assert_allclose(_weights(net)[name], value, rtol=1e-6, atol=1e-7, err_msg=name)
    names = [m.name for m in est.train_metrics]
    assert names == ["training accuracy", "training softmaxcrossentropyloss"]
    assert est.train_metrics[0].get()[1] == pytest.approx(acc)
    assert est.train_metrics[1].get()[1] == pytest.approx(loss, rel=1e-6)


def test_fit_by_batches_stops_inside_an_epoch():
    """batches=4 with 3 batches per epoch: 4 updates (the second epoch stops after its first batch)."""
    x, y, loader = _data()
    net = _net()
    _estimator(net).fit(loader, batches=4)
    reference = _net()
    _hand_loop(reference, x, y, 8, steps=4)
    for name, value in _weights(reference).items():
        np.testing.assert_allclose(_weights(net)[name], value, rtol=1e-6, atol=1e-7, err_msg=name)


def test_evaluate_runs_the_val_net_in_predict_mode():
    """Validation metrics are the model's accuracy and loss on the validation data, with Dropout off."""
    x, y, loader = _data()
    net = _net(dropout=0.5, devices=[mx.cpu(0)])
    est = _estimator(net)
    est.evaluate(loader)
    out = net(mx.nd.array(x))
    expected_loss = gluon.loss.SoftmaxCrossEntropyLoss()(out, mx.nd.array(y)).asnumpy().mean()
    expected_acc = (out.asnumpy().argmax(axis=1) == y).mean()
    assert [m.name for m in est.val_metrics] == ["validation accuracy", "validation softmaxcrossentropyloss"]
    assert est.val_metrics[0].get()[1] == pytest.approx(expected_acc)
    assert est.val_metrics[1].get()[1] == pytest.approx(expected_loss, rel=1e-5)
    assert est.evaluations == 1


def test_device_defaults_to_the_initialised_nets_devices():
    net = _net()
    assert _estimator(net).device == CPUS
    assert _estimator(net).context == CPUS  # MXNet 1.x's name


def test_device_defaults_to_cpu_without_gpus(monkeypatch):
    monkeypatch.setattr(estimator_module.estimator, "num_gpus", lambda: 0)
    net = nn.Dense(2)
    with pytest.warns(UserWarning, match="No trainer specified"):
        est = Estimator(net, gluon.loss.L2Loss())
    assert est.device == [mx.cpu()]
    assert net.weight.list_device() == [mx.cpu()]


def test_a_partly_initialised_net_keeps_its_initialised_weights():
    net = nn.Sequential()
    net.add(nn.Dense(4, in_units=3), nn.Dense(2, in_units=4))
    net[0].initialize(mx.init.Constant(0.5), ctx=mx.cpu())
    Estimator(net, gluon.loss.L2Loss(), context=mx.cpu(), trainer=gluon.Trainer(net[0].collect_params(), "sgd"))
    np.testing.assert_array_equal(net[0].weight.data().asnumpy(), np.full((4, 3), 0.5, np.float32))
    assert net[1].weight.list_device() == [mx.cpu()]


def test_metric_names_get_one_prefix():
    """A metric given to two Estimators is named 'training accuracy' once (MXNet prefixes it again)."""
    acc = mx.metric.Accuracy()
    net = _net()
    _estimator(net, train_metrics=acc)
    est = _estimator(net, train_metrics=acc)
    assert acc.name == "training accuracy"
    assert [m.name for m in est.val_metrics] == ["validation accuracy"]
    assert est.val_metrics[0] is not acc


@pytest.mark.parametrize("epochs, batches, message", [
    (None, None, "exactly one of epochs= and batches="),
    (2, 3, "exactly one of epochs= and batches="),
    (-1, None, "epochs must be a positive integer, got -1"),
    (1.5, None, "epochs must be a positive integer, got 1.5"),
    (None, True, "batches must be a positive integer, got True"),
])
def test_fit_refuses_a_run_length_that_is_not_one_positive_count(epochs, batches, message):
    _, _, loader = _data()
    with pytest.raises(ValueError, match=message):
        _estimator(_net()).fit(loader, epochs=epochs, batches=batches)


def test_fit_refuses_validation_data_that_is_not_a_loader_before_training():
    _, _, loader = _data()
    net = _net()
    before = _weights(net)
    with pytest.raises(ValueError, match=r"fit: val_data must be a gluon.data.DataLoader, got NDArrayIter"):
        _estimator(net).fit(loader, val_data=mx.io.NDArrayIter(np.ones((4, 5)), np.ones(4), batch_size=2), epochs=1)
    for name, value in before.items():
        np.testing.assert_array_equal(_weights(net)[name], value)


def test_fit_on_a_loader_without_batches_raises_instead_of_looping():
    empty = gluon.data.DataLoader(gluon.data.ArrayDataset(np.ones((3, 5), np.float32), np.ones(3, np.float32)),
                                  batch_size=4, last_batch="discard")
    with pytest.raises(ValueError, match="train_data yielded no batch"):
        _estimator(_net()).fit(empty, batches=5)


def test_a_batch_without_labels_is_refused_naming_what_came():
    loader = gluon.data.DataLoader(gluon.data.ArrayDataset(np.ones((4, 5), np.float32)), batch_size=2)
    with pytest.raises(ValueError, match=r"a batch must be \(data, label, \.\.\.\).*got a Tensor of shape \(2, 5\)"):
        _estimator(_net()).fit(loader, epochs=1)


def test_device_errors_name_the_device():
    net = _net()
    with pytest.raises(ValueError, match=r"device must be a Device or a non-empty list of Devices.*got 'cpu'"):
        _estimator(net, context="cpu")
    with pytest.raises(ValueError, match=r"device must be a Device or a non-empty list of Devices.*got \[\]"):
        _estimator(net, device=[])
    with pytest.raises(ValueError, match=r"device=\[cpu\(0\)\] and context=\[cpu\(1\)\] disagree"):
        _estimator(net, device=[mx.cpu(0)], context=[mx.cpu(1)])
    with pytest.raises(ValueError, match=r"parameters are on \[cpu\(0\), cpu\(1\)\] but device=\[cpu\(0\)\]"):
        _estimator(net, device=mx.cpu(0))
    assert _estimator(net, device=CPUS, context=CPUS).device == CPUS


@pytest.mark.gpu
@pytest.mark.requires_gpus(2)
def test_a_gpu_beyond_those_visible_is_refused(monkeypatch):
    monkeypatch.setattr(estimator_module.estimator, "num_gpus", lambda: 1)
    with pytest.raises(ValueError, match=r"gpu\(1\) is not available; use one of cpu\(\), gpu\(0\)"):
        Estimator(nn.Dense(2), gluon.loss.L2Loss(), device=[mx.gpu(0), mx.gpu(1)])


def test_other_construction_errors_name_the_argument():
    net = _net()
    with pytest.raises(ValueError, match="loss must be a gluon.loss.Loss, got 'mse'"):
        Estimator(net, "mse")
    with pytest.raises(ValueError, match="trainer must be a gluon.Trainer, got 'sgd'"):
        Estimator(net, gluon.loss.L2Loss(), trainer="sgd")
    with pytest.raises(ValueError, match=r"metrics must be a gluon.metric.EvalMetric or a list of them, got 'acc'"):
        Estimator(net, gluon.loss.L2Loss(), train_metrics="acc")

    class OnlyFit:
        def fit_batch(self, estimator, batch, batch_axis=0):
            return None

    with pytest.raises(ValueError, match=r"lacks evaluate_batch\(\)"):
        _estimator(net, batch_processor=OnlyFit())


def test_a_custom_batch_processor_is_used():
    calls = []

    class Counting(BatchProcessor):
        def fit_batch(self, estimator, train_batch, batch_axis=0):
            calls.append(train_batch[0].shape[0])
            return super().fit_batch(estimator, train_batch, batch_axis)

    _, _, loader = _data()
    _estimator(_net(), batch_processor=Counting()).fit(loader, epochs=1)
    assert calls == [8, 8, 4]


def test_handlers_run_in_priority_order_user_handlers_first_among_equals():
    order = []

    class Recorder(EpochEnd):
        def __init__(self, name, priority=None):
            self.name = name
            if priority is not None:
                self.priority = priority

        def epoch_end(self, estimator, *args, **kwargs):
            order.append(self.name)
            return False

    _, _, loader = _data()
    handlers = [Recorder("late", 5), Recorder("no priority"), Recorder("first", -5000)]
    est = _estimator(_net())
    est.fit(loader, epochs=1, event_handlers=handlers)
    assert order == ["first", "no priority", "late"]
    names = [type(h).__name__ for h in est._prepare_default_handlers(loader, handlers)]
    assert names == ["Recorder", "GradientUpdateHandler", "MetricHandler", "ValidationHandler", "Recorder",
                     "StoppingHandler", "Recorder", "LoggingHandler"]


def test_logging_handler_draws_the_progress_bar():
    """A bar per epoch: the batch count, the training metrics and samples/s, cleared when the epoch ends."""
    _, _, loader = _data()
    est = _estimator(_net())
    bar = io.StringIO()
    logging = LoggingHandler(metrics=est.train_metrics, progress_bar=True, progress_file=bar)
    est.fit(loader, epochs=2, event_handlers=[logging])
    text = bar.getvalue()
    assert "epoch 0: " in text and "epoch 1: " in text
    for count in ("1/3", "2/3", "3/3"):
        assert count in text
    assert "training accuracy=" in text and "training softmaxcrossentropyloss=" in text and "samples/s=" in text
    assert text.endswith("\r")  # cleared, not left behind


def test_logging_handler_shows_no_bar_off_a_terminal_or_when_logging_batches():
    _, _, loader = _data()
    est = _estimator(_net())
    for handler in (LoggingHandler(metrics=est.train_metrics, progress_file=io.StringIO()),
                    LoggingHandler(log_interval=1, metrics=est.train_metrics, progress_bar=None,
                                   progress_file=io.StringIO())):
        est.fit(loader, epochs=1, event_handlers=[handler])
        assert handler.progress_file.getvalue() == ""


@pytest.mark.parametrize("interval", [0, -2, "batch", True])
def test_logging_handler_refuses_another_interval(interval):
    with pytest.raises(ValueError, match=rf"log_interval must be 'epoch' or a positive integer, got {interval!r}"):
        LoggingHandler(log_interval=interval)


def test_training_curve_handler_records_every_epoch_and_plots(tmp_path, monkeypatch):
    """The history holds each epoch's metric values; a validation every second epoch leaves NaN gaps; the plot
    has the losses on the left and the accuracies on the right."""
    import matplotlib.figure

    from mxlite.gluon.contrib.estimator import ValidationHandler

    seen = {}
    original = matplotlib.figure.Figure.savefig

    def capture(fig, path, **kwargs):
        seen["title"] = fig._suptitle.get_text()
        seen["panels"] = [(ax.get_title(), [line.get_label() for line in ax.get_lines()]) for ax in fig.axes]
        return original(fig, path, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", capture)
    _, _, loader = _data()
    est = _estimator(_net())
    path = str(tmp_path / "curves.png")
    curves = TrainingCurveHandler(path, title="digits")
    every_second = ValidationHandler(loader, est.evaluate, epoch_period=2)
    train_loss = []

    class LossRecorder(EpochEnd):
        priority = 500  # after the validation, before the curves

        def epoch_end(self, estimator, *args, **kwargs):
            train_loss.append(estimator.train_metrics[1].get()[1])
            return False

    est.fit(loader, val_data=loader, epochs=3, event_handlers=[curves, every_second, LossRecorder()])
    assert curves.history["training softmaxcrossentropyloss"] == train_loss
    validation = curves.history["validation accuracy"]
    assert math.isnan(validation[0]) and not math.isnan(validation[1]) and math.isnan(validation[2])
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert seen["title"] == "digits"
    assert seen["panels"] == [
        ("loss", ["training softmaxcrossentropyloss", "validation softmaxcrossentropyloss"]),
        ("accuracy", ["training accuracy", "validation accuracy"]),
    ]


def test_training_curve_handler_without_matplotlib_warns_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    _, _, loader = _data()
    path = tmp_path / "curves.png"
    curves = TrainingCurveHandler(str(path))
    with pytest.warns(UserWarning, match=r"curves.png not written: install matplotlib"):
        _estimator(_net()).fit(loader, epochs=1, event_handlers=[curves])
    assert not path.exists()
    assert len(curves.history["training accuracy"]) == 1


def test_training_curve_handler_keeps_metrics_of_one_name_apart():
    _, _, loader = _data()
    est = _estimator(_net(), train_metrics=[mx.metric.Accuracy(), mx.metric.Accuracy()])
    curves = TrainingCurveHandler("unused.png")
    curves.plot = lambda path: True  # no file: the history is what is checked
    est.fit(loader, epochs=2, event_handlers=[curves])
    assert {name: len(values) for name, values in curves.history.items()} == {
        "training accuracy": 2, "training accuracy (2)": 2, "validation accuracy": 2, "validation accuracy (2)": 2}
    assert curves.history["training accuracy"] == curves.history["training accuracy (2)"]
