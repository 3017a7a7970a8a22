"""The Estimator's event handlers: checkpoints and resuming (to the uninterrupted run's weights), early stopping,
validation periods, the metric checks, and the errors of each.

MXNet's own handler tests are replayed in test_mxnet_mirror_event_handler.py.
"""

import json
import logging
import math
import os

import numpy as np
import pytest

import mxlite as mx
from mxlite import gluon
from mxlite.gluon import nn
from mxlite.gluon.contrib.estimator import (
    BatchEnd,
    CheckpointHandler,
    EarlyStoppingHandler,
    EpochEnd,
    Estimator,
    GradientUpdateHandler,
    LoggingHandler,
    MetricHandler,
    StoppingHandler,
    ValidationHandler,
)

CPU = mx.cpu()


def _net(seed=3):
    mx.random.seed(seed)
    net = nn.Sequential()
    net.add(nn.Dense(6, activation="tanh", in_units=4), nn.Dense(3, in_units=6))
    net.initialize(mx.init.Xavier(), ctx=CPU)
    return net


def _loader(n=12, batch_size=4):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (np.arange(n) % 3).astype(np.float32)
    return gluon.data.DataLoader(gluon.data.ArrayDataset(x, y), batch_size=batch_size)


def _estimator(net):
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.05})
    return Estimator(net, gluon.loss.SoftmaxCrossEntropyLoss(), trainer=trainer, context=CPU)


def _weights(net):
    return {name: p.data().asnumpy() for name, p in net.collect_params().items()}


def _checkpoints(folder):
    return sorted(name for name in os.listdir(folder) if name.endswith(".params"))


def test_resuming_from_an_epoch_checkpoint_gives_the_uninterrupted_runs_weights(tmp_path):
    """Two epochs, then a resumed run of five: three more epochs, from the saved weights and Adam's states, to
    the weights five epochs in a row give."""
    straight = _net()
    _estimator(straight).fit(_loader(), epochs=5)

    net = _net()
    _estimator(net).fit(_loader(), epochs=2, event_handlers=[CheckpointHandler(str(tmp_path))])
    resumed_net = _net(seed=99)  # other weights: the checkpoint must replace them
    est = _estimator(resumed_net)
    handler = CheckpointHandler(str(tmp_path), resume_from_checkpoint=True)
    est.fit(_loader(), epochs=5, event_handlers=[handler])
    assert est.max_epoch == 3
    assert (handler.trained_epoch, handler.trained_batch) == (1, 6)
    for name, value in _weights(straight).items():
        np.testing.assert_allclose(_weights(resumed_net)[name], value, rtol=1e-6, atol=1e-7, err_msg=name)
    assert _checkpoints(tmp_path)[-1] == "model-epoch4batch15.params"


def test_resuming_from_a_batch_checkpoint_trains_the_batches_left(tmp_path):
    """Four batches with a checkpoint every two, then a resumed run of seven trains three more, to the weights of
    seven in a row. One batch an epoch: a resumed run starts its loader afresh (as MXNet's), so only then are the
    batches it trains the ones the uninterrupted run trains."""
    straight = _net()
    _estimator(straight).fit(_loader(batch_size=12), batches=7)
    net = _net()
    _estimator(net).fit(_loader(batch_size=12), batches=4,
                        event_handlers=[CheckpointHandler(str(tmp_path), epoch_period=None, batch_period=2)])
    assert _checkpoints(tmp_path) == ["model-epoch1batch1.params", "model-epoch3batch3.params"]
    resumed = _net(seed=99)
    est = _estimator(resumed)
    est.fit(_loader(batch_size=12), batches=7, event_handlers=[
        CheckpointHandler(str(tmp_path), epoch_period=None, batch_period=2, resume_from_checkpoint=True)])
    assert est.max_batch == 3
    for name, value in _weights(straight).items():
        np.testing.assert_allclose(_weights(resumed)[name], value, rtol=1e-6, atol=1e-7, err_msg=name)
    assert _checkpoints(tmp_path)[-1] == "model-epoch5batch5.params"


def test_max_checkpoints_counts_those_found_when_resuming_and_spares_lookalikes(tmp_path):
    """Resuming keeps max_checkpoints over the old and the new checkpoints; deleting model-epoch0batch3 leaves
    model-epoch0batch30 (another run's file that starts with the same text) alone."""
    _estimator(_net()).fit(_loader(), epochs=2, event_handlers=[CheckpointHandler(str(tmp_path), max_checkpoints=2)])
    assert _checkpoints(tmp_path) == ["model-epoch0batch3.params", "model-epoch1batch6.params"]
    (tmp_path / "model-epoch0batch30.txt").write_text("not a checkpoint")
    _estimator(_net()).fit(_loader(), epochs=4, event_handlers=[
        CheckpointHandler(str(tmp_path), max_checkpoints=2, resume_from_checkpoint=True)])
    assert _checkpoints(tmp_path) == ["model-epoch2batch9.params", "model-epoch3batch12.params"]
    assert (tmp_path / "model-epoch0batch30.txt").exists()


def test_resume_errors_name_what_is_wrong(tmp_path):
    folder = str(tmp_path)
    _estimator(_net()).fit(_loader(), epochs=2, event_handlers=[CheckpointHandler(folder)])
    with pytest.raises(ValueError, match=r"has trained epoch 1, the last of fit\(epochs=2\)"):
        _estimator(_net()).fit(_loader(), epochs=2, event_handlers=[CheckpointHandler(folder,
                                                                                      resume_from_checkpoint=True)])
    with pytest.raises(ValueError, match=r"fit\(batches=\.\.\.\) needs checkpoints by batch only"):
        _estimator(_net()).fit(_loader(), batches=5, event_handlers=[CheckpointHandler(folder,
                                                                                       resume_from_checkpoint=True)])
    os.remove(os.path.join(folder, "model-epoch1batch6.states"))
    with pytest.raises(FileNotFoundError, match=r"cannot resume: .*model-epoch1batch6.states is missing"):
        _estimator(_net()).fit(_loader(), epochs=4, event_handlers=[CheckpointHandler(folder,
                                                                                      resume_from_checkpoint=True)])
    (tmp_path / "model-epochXbatch1.params").write_text("")
    with pytest.raises(ValueError, match=r"cannot read the epoch and batch of 'model-epochXbatch1.params'"):
        _estimator(_net()).fit(_loader(), epochs=4, event_handlers=[CheckpointHandler(folder,
                                                                                      resume_from_checkpoint=True)])


def test_save_best_keeps_the_weights_of_the_lowest_loss(tmp_path):
    """mode='min' on the training loss: the best file holds the weights of the epoch with the lowest loss."""
    net = _net()
    est = _estimator(net)
    loss_metric = est.train_metrics[1]
    seen = []

    class Snapshot(EpochEnd):
        priority = 1  # after the checkpoint (priority 0)

        def epoch_end(self, estimator, *args, **kwargs):
            seen.append((loss_metric.get()[1], _weights(net)))
            return False

    handler = CheckpointHandler(str(tmp_path), monitor=loss_metric, save_best=True, mode="min")
    est.fit(_loader(), epochs=3, event_handlers=[handler, Snapshot()])
    best_loss, best_weights = min(seen, key=lambda pair: pair[0])
    assert handler.best == best_loss
    saved = _net(seed=99)
    saved.load_parameters(str(tmp_path / "model-best.params"))
    for name, value in best_weights.items():
        np.testing.assert_array_equal(_weights(saved)[name], value)


def test_checkpoint_handler_writes_the_architecture_after_the_first_batch(tmp_path):
    """``model-symbol.json`` is MXNet's symbol file of the net (its two Dense layers and the tanh between)."""
    _estimator(_net()).fit(_loader(), epochs=1, event_handlers=[CheckpointHandler(str(tmp_path))])
    with open(tmp_path / "model-symbol.json") as f:
        graph = json.load(f)
    ops = [node["op"] for node in graph["nodes"] if node["op"] != "null"]
    assert ops == ["FullyConnected", "Activation", "FullyConnected"]
    assert sorted(os.listdir(tmp_path)) == ["model-epoch0batch3.params", "model-epoch0batch3.states",
                                            "model-symbol.json"]


def test_checkpoint_handler_logs_why_a_net_has_no_architecture_file_and_trains_on(tmp_path):
    class Scaled(nn.Block):  # a constant array: MXNet's symbol file cannot hold it
        def __init__(self):
            super().__init__()
            self.dense = nn.Dense(3, in_units=4)

        def forward(self, x):
            return self.dense(x) * mx.nd.array([1.0, 2.0, 3.0], ctx=x.context)

    net = Scaled()
    net.initialize(ctx=CPU)
    est = _estimator(net)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    est.logger.addHandler(handler)
    est.fit(_loader(), epochs=1, event_handlers=[CheckpointHandler(str(tmp_path))])
    messages = [r.getMessage() for r in records if "architecture" in r.getMessage()]
    assert len(messages) == 1 and "model-symbol.json) is not saved: NotImplementedError: export:" in messages[0]
    assert sorted(os.listdir(tmp_path)) == ["model-epoch0batch3.params", "model-epoch0batch3.states"]


def test_checkpoint_handler_refuses_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="save_best=True needs monitor="):
        CheckpointHandler(str(tmp_path), save_best=True)
    with pytest.raises(ValueError, match="batch_period must be a positive integer or None, got 1.5"):
        CheckpointHandler(str(tmp_path), batch_period=1.5)
    with pytest.raises(ValueError, match="max_checkpoints must be a positive integer or None, got -1"):
        CheckpointHandler(str(tmp_path), max_checkpoints=-1)


def test_early_stopping_auto_mode_lowers_a_loss():
    """mode='auto' on a loss treats a smaller value as better (MXNet 1.9 treats a larger one so, and stops a run
    whose loss falls): a falling training loss does not stop five epochs."""
    est = _estimator(_net())
    with pytest.warns(UserWarning, match="treats a smaller 'training softmaxcrossentropyloss' as an improvement"):
        stopping = EarlyStoppingHandler(monitor=est.train_metrics[1], patience=0)
    est.fit(_loader(), epochs=5, event_handlers=[stopping])
    assert not stopping.stop_training and stopping.current_epoch == 5
    with pytest.warns(UserWarning, match="treats a larger 'training accuracy' as an improvement"):
        EarlyStoppingHandler(monitor=est.train_metrics[0])


def test_early_stopping_baseline_and_min_delta():
    """A baseline the loss never beats stops after ``patience`` epochs; a min_delta no step reaches stops at the
    second epoch (the first sets the best)."""
    est = _estimator(_net())
    stopping = EarlyStoppingHandler(monitor=est.train_metrics[1], patience=2, mode="min", baseline=0.0)
    est.fit(_loader(), epochs=5, event_handlers=[stopping])
    assert stopping.stop_training and stopping.stopped_epoch == 1 and stopping.current_epoch == 2
    stopping = EarlyStoppingHandler(monitor=est.train_metrics[1], patience=0, mode="min", min_delta=10.0)
    est.fit(_loader(), epochs=5, event_handlers=[stopping])
    assert stopping.stopped_epoch == 1 and stopping.min_delta == -10.0


def test_early_stopping_refuses_a_composite_or_missing_metric():
    with pytest.raises(ValueError, match="monitor cannot be a CompositeEvalMetric"):
        EarlyStoppingHandler(monitor=mx.metric.CompositeEvalMetric([mx.metric.Accuracy()]), mode="max")
    with pytest.raises(ValueError, match="monitor must be one of estimator.train_metrics"):
        EarlyStoppingHandler(monitor="accuracy")


def test_validation_handler_batch_period_counts_evaluations():
    """batch_period=2 over 3 batches an epoch for 2 epochs: validations after batches 2, 4 and 6."""
    est = _estimator(_net())
    calls = []
    handler = ValidationHandler(_loader(), lambda **kw: calls.append(sorted(kw)), epoch_period=None, batch_period=2)
    est.fit(_loader(), epochs=2, event_handlers=[handler])
    assert calls == [["batch_axis", "event_handlers", "val_data"]] * 3


def test_a_handler_over_a_metric_the_estimator_does_not_update_is_refused_by_name():
    est = _estimator(_net())
    other = mx.metric.Accuracy(name="mine")
    with pytest.raises(ValueError, match=r"LoggingHandler.metrics holds the metric 'mine', which the Estimator does "
                                         r"not update \(it updates 'training accuracy'"):
        est.fit(_loader(), epochs=1, event_handlers=[LoggingHandler(metrics=[other])])


def test_every_handler_must_be_an_event_handler():
    with pytest.raises(ValueError, match=r"event_handlers must be an EventHandler or a list of them, got \['log'\]"):
        _estimator(_net()).fit(_loader(), epochs=1, event_handlers=["log"])


def test_gradient_update_handler_needs_per_sample_losses():
    class Mean:  # a batch processor whose loss is one number
        def fit_batch(self, estimator, batch, batch_axis=0):
            with mx.autograd.record():
                loss = estimator.loss(estimator.net(batch[0]), batch[1]).mean()
            loss.backward()
            return [batch[0]], [batch[1]], [None], [loss]

        def evaluate_batch(self, estimator, batch, batch_axis=0):
            return self.fit_batch(estimator, batch, batch_axis)

    net = _net()
    est = Estimator(net, gluon.loss.SoftmaxCrossEntropyLoss(), trainer=gluon.Trainer(net.collect_params(), "sgd"),
                    context=CPU, batch_processor=Mean())
    with pytest.raises(ValueError, match=r"each loss must hold one value per sample.*got a loss of shape \(\)"):
        est.fit(_loader(), epochs=1, event_handlers=[MetricHandler(metrics=[]), LoggingHandler(metrics=[])])


def test_stopping_handler_counts_batches_and_epochs():
    est = _estimator(_net())
    seen = []

    class Count(BatchEnd):
        def batch_end(self, estimator, *args, **kwargs):
            seen.append(1)
            return False

    est.fit(_loader(), batches=5, event_handlers=[Count()])
    assert len(seen) == 5
    stopping = StoppingHandler(max_epoch=2)
    stopping.train_begin(est)  # takes the Estimator's limits
    assert (stopping.max_epoch, stopping.max_batch) == (None, 5)
    assert GradientUpdateHandler().priority == -2000 and MetricHandler([]).priority == -1000
    assert LoggingHandler().priority == math.inf
