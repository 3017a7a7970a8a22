"""MXNet's own event handler unit tests (tests/python/unittest/test_gluon_event_handler.py, MXNet 1.9.1), replayed
on mxlite.

Each test names the MXNet test it mirrors; all eight are here, in MXNet's order. The calls are a Gluon 1.x user's,
with ``import mxlite as mx``; the expected values (counts, file names, log lines) are MXNet's. MXNet's
``TemporaryDirectory`` is pytest's ``tmp_path``, and its redirection of ``sys.stdout`` is pytest's
``monkeypatch``. Every one passes.

As in MXNet, ``_get_test_network()`` without an argument adds three layers to *one* Sequential, its default
argument, shared by every test that calls it so: each such test trains that growing network further (the layers
added since the last test are initialised by the Estimator, the others keep their weights).
"""

import io
import logging
import os
import re
import sys

import mxlite as mx
from mxlite import nd
from mxlite.gluon import loss, nn
from mxlite.gluon.contrib.estimator import EpochEnd, estimator, event_handler
from mxlite.gluon.contrib.estimator.event_handler import LoggingHandler, ValidationHandler
from mxlite.gluon.data.dataset import Dataset


class TestAxisArrayDataset(Dataset):
    __test__ = False  # a dataset, named as in MXNet's test; not a test class

    def __init__(self, *args):
        self._length = len(args[1])
        self._data = []
        for data in args:
            self._data.append(data)

    def __getitem__(self, idx):
        if len(self._data) == 1:
            return self._data[idx][0]
        return tuple(data[:, idx] for data in self._data)

    def __len__(self):
        return self._length


class TestHandler(EpochEnd):
    __test__ = False  # a handler, named as in MXNet's test; not a test class

    def __init__(self):
        pass

    def epoch_end(self, estimator, *args, **kwargs):
        estimator.run_test_handler = True


def _get_test_network(net=nn.Sequential()):  # noqa: B008 - MXNet's shared default network (module docstring)
    net.add(nn.Dense(128, activation="relu", flatten=False),
            nn.Dense(64, activation="relu"),
            nn.Dense(10, activation="relu"))
    return net


def _get_test_data(in_size=32):
    data = nd.ones((in_size, 100))
    label = nd.zeros((in_size, 1))
    data_arr = mx.gluon.data.dataset.ArrayDataset(data, label)
    return mx.gluon.data.DataLoader(data_arr, batch_size=8)


def _get_batch_axis_test_data(in_size=32):
    data = nd.ones((100, in_size))
    label = nd.zeros((1, in_size))
    data_arr = TestAxisArrayDataset(data, label)
    return mx.gluon.data.DataLoader(data_arr, batch_size=8)


def test_checkpoint_handler(tmp_path):
    """Mirrors MXNet's ``test_checkpoint_handler``: the best and every epoch's checkpoint, then checkpoints every 2
    batches keeping 2, with the hybridized net's ``-symbol.json``."""
    tmpdir = str(tmp_path)
    model_prefix = "test_epoch"
    file_path = os.path.join(tmpdir, model_prefix)
    test_data = _get_test_data()

    net = _get_test_network()
    ce_loss = loss.SoftmaxCrossEntropyLoss()
    acc = mx.metric.Accuracy()
    est = estimator.Estimator(net, loss=ce_loss, train_metrics=acc)
    checkpoint_handler = event_handler.CheckpointHandler(model_dir=tmpdir, model_prefix=model_prefix, monitor=acc,
                                                         save_best=True, epoch_period=1)
    est.fit(test_data, event_handlers=[checkpoint_handler], epochs=1)
    assert checkpoint_handler.current_epoch == 1
    assert checkpoint_handler.current_batch == 4
    assert os.path.isfile(file_path + "-best.params")
    assert os.path.isfile(file_path + "-best.states")
    assert os.path.isfile(file_path + "-epoch0batch4.params")
    assert os.path.isfile(file_path + "-epoch0batch4.states")

    model_prefix = "test_batch"
    file_path = os.path.join(tmpdir, model_prefix)
    net = _get_test_network(nn.HybridSequential())
    net.hybridize()
    est = estimator.Estimator(net, loss=ce_loss, train_metrics=acc)
    checkpoint_handler = event_handler.CheckpointHandler(model_dir=tmpdir, model_prefix=model_prefix,
                                                         epoch_period=None, batch_period=2, max_checkpoints=2)
    est.fit(test_data, event_handlers=[checkpoint_handler], batches=10)
    assert checkpoint_handler.current_batch == 10
    assert checkpoint_handler.current_epoch == 3
    assert not os.path.isfile(file_path + "best.params")
    assert not os.path.isfile(file_path + "best.states")
    assert not os.path.isfile(file_path + "-epoch0batch0.params")
    assert not os.path.isfile(file_path + "-epoch0batch0.states")
    assert os.path.isfile(file_path + "-symbol.json")
    assert os.path.isfile(file_path + "-epoch1batch7.params")
    assert os.path.isfile(file_path + "-epoch1batch7.states")
    assert os.path.isfile(file_path + "-epoch2batch9.params")
    assert os.path.isfile(file_path + "-epoch2batch9.states")


def test_resume_checkpoint(tmp_path):
    """Mirrors MXNet's ``test_resume_checkpoint``: two epochs, then a run of five resumed from the checkpoint
    trains the three that remain."""
    tmpdir = str(tmp_path)
    model_prefix = "test_net"
    file_path = os.path.join(tmpdir, model_prefix)
    test_data = _get_test_data()

    net = _get_test_network()
    ce_loss = loss.SoftmaxCrossEntropyLoss()
    acc = mx.metric.Accuracy()
    est = estimator.Estimator(net, loss=ce_loss, train_metrics=acc)
    checkpoint_handler = event_handler.CheckpointHandler(model_dir=tmpdir, model_prefix=model_prefix, monitor=acc,
                                                         max_checkpoints=1)
    est.fit(test_data, event_handlers=[checkpoint_handler], epochs=2)
    assert os.path.isfile(file_path + "-epoch1batch8.params")
    assert os.path.isfile(file_path + "-epoch1batch8.states")
    checkpoint_handler = event_handler.CheckpointHandler(model_dir=tmpdir, model_prefix=model_prefix, monitor=acc,
                                                         max_checkpoints=1, resume_from_checkpoint=True)
    est.fit(test_data, event_handlers=[checkpoint_handler], epochs=5)
    # should only continue to train 3 epochs and last checkpoint file is epoch4
    assert est.max_epoch == 3
    assert os.path.isfile(file_path + "-epoch4batch20.states")


def test_early_stopping():
    """Mirrors MXNet's ``test_early_stopping``: accuracy watched in 'min' mode stops after the second epoch; in
    'auto' mode with patience 2 a one-epoch run ends normally."""
    test_data = _get_test_data()

    net = _get_test_network()
    ce_loss = loss.SoftmaxCrossEntropyLoss()
    acc = mx.metric.Accuracy()
    est = estimator.Estimator(net, loss=ce_loss, train_metrics=acc)
    early_stopping = event_handler.EarlyStoppingHandler(monitor=acc, patience=0, mode="min")
    est.fit(test_data, event_handlers=[early_stopping], epochs=5)
    assert early_stopping.current_epoch == 2
    assert early_stopping.stopped_epoch == 1

    early_stopping = event_handler.EarlyStoppingHandler(monitor=acc, patience=2, mode="auto")
    est.fit(test_data, event_handlers=[early_stopping], epochs=1)
    assert early_stopping.current_epoch == 1


def test_logging(tmp_path):
    """Mirrors MXNet's ``test_logging``: a LoggingHandler over the training metrics, the log also written to a
    file through the Estimator's logger."""
    tmpdir = str(tmp_path)
    test_data = _get_test_data()
    file_name = "test_log"
    output_dir = os.path.join(tmpdir, file_name)

    net = _get_test_network()
    ce_loss = loss.SoftmaxCrossEntropyLoss()
    acc = mx.metric.Accuracy()
    est = estimator.Estimator(net, loss=ce_loss, train_metrics=acc)

    file_handler = logging.FileHandler(output_dir)
    est.logger.addHandler(file_handler)

    train_metrics = est.train_metrics
    logging_handler = event_handler.LoggingHandler(metrics=train_metrics)
    est.fit(test_data, event_handlers=[logging_handler], epochs=3)
    assert logging_handler.batch_index == 0
    assert logging_handler.current_epoch == 3
    assert os.path.isfile(output_dir)
    file_handler.close()  # MXNet's `del est`: release the file before the folder goes


def test_custom_handler():
    """Mirrors MXNet's ``test_custom_handler``: a user's handler stops the training after a batch or an epoch."""
    class CustomStopHandler(event_handler.TrainBegin, event_handler.BatchEnd, event_handler.EpochEnd):
        def __init__(self, batch_stop=None, epoch_stop=None):
            self.batch_stop = batch_stop
            self.epoch_stop = epoch_stop
            self.num_batch = 0
            self.num_epoch = 0
            self.stop_training = False

        def train_begin(self, estimator, *args, **kwargs):
            self.num_batch = 0
            self.num_epoch = 0

        def batch_end(self, estimator, *args, **kwargs):
            self.num_batch += 1
            if self.num_batch == self.batch_stop:
                self.stop_training = True
            return self.stop_training

        def epoch_end(self, estimator, *args, **kwargs):
            self.num_epoch += 1
            if self.num_epoch == self.epoch_stop:
                self.stop_training = True
            return self.stop_training

    # total data size is 32, batch size is 8
    # 4 batch per epoch
    test_data = _get_test_data()
    net = _get_test_network()
    ce_loss = loss.SoftmaxCrossEntropyLoss()
    acc = mx.metric.Accuracy()
    est = estimator.Estimator(net, loss=ce_loss, train_metrics=acc)
    custom_handler = CustomStopHandler(3, 2)
    est.fit(test_data, event_handlers=[custom_handler], epochs=3)
    assert custom_handler.num_batch == 3
    assert custom_handler.num_epoch == 1
    custom_handler = CustomStopHandler(100, 5)
    est.fit(test_data, event_handlers=[custom_handler], epochs=10)
    assert custom_handler.num_batch == 5 * 4
    assert custom_handler.num_epoch == 5


def _count_batch_lines(text):
    pattern = (r"(\[Epoch \d+\]\[Batch \d+\]\[Samples \d+\] time\/interval: \d+.\d+s"
               r" training accuracy: \d+.\d+)")
    return sum(1 for info in text.splitlines() if re.match(pattern, info))


def test_logging_interval(monkeypatch):
    """Mirrors MXNet's ``test_logging_interval``: logging every batch, then every 5 batches, of 100 samples in
    batches of 8 gives 13, then 3, batch lines on standard output."""
    batch_size = 8
    data_size = 100
    mystdout = io.StringIO()
    monkeypatch.setattr(sys, "stdout", mystdout)
    log_interval = 1
    net = _get_test_network()
    dataloader = _get_test_data(in_size=data_size)
    num_epochs = 1
    ce_loss = loss.SoftmaxCrossEntropyLoss()
    acc = mx.metric.Accuracy()
    logging_handler = LoggingHandler(metrics=[acc], log_interval=log_interval)
    est = estimator.Estimator(net=net, loss=ce_loss, train_metrics=acc)
    est.fit(train_data=dataloader, epochs=num_epochs, event_handlers=[logging_handler])
    assert _count_batch_lines(mystdout.getvalue()) == int(data_size / batch_size / log_interval) + 1

    mystdout = io.StringIO()
    monkeypatch.setattr(sys, "stdout", mystdout)
    acc = mx.metric.Accuracy()
    log_interval = 5
    logging_handler = LoggingHandler(metrics=[acc], log_interval=log_interval)
    est = estimator.Estimator(net=net, loss=ce_loss, train_metrics=acc)
    est.fit(train_data=dataloader, epochs=num_epochs, event_handlers=[logging_handler])
    assert _count_batch_lines(mystdout.getvalue()) == int(data_size / batch_size / log_interval) + 1


def test_validation_handler_batch_axis():
    """Mirrors MXNet's ``test_validation_handler_batch_axis``: training and validating with samples along axis 0,
    then along axis 1 of the dataset's arrays (``batch_axis=1``)."""
    # test case #1: test batch_axis=0
    test_data = _get_test_data()
    net = _get_test_network()
    ce_loss = loss.SoftmaxCrossEntropyLoss()
    acc = mx.metric.Accuracy()
    est = estimator.Estimator(net, loss=ce_loss, train_metrics=acc)
    est.fit(test_data, epochs=3)

    # test case #2: test batch_axis=1
    test_data = _get_batch_axis_test_data()
    val_data = _get_batch_axis_test_data(in_size=30)
    est = estimator.Estimator(net, loss=ce_loss, train_metrics=acc)
    est.fit(test_data, val_data=val_data, epochs=3, batch_axis=1)


def test_validation_handler():
    """Mirrors MXNet's ``test_validation_handler``: a ValidationHandler given its own handlers runs them when it
    validates."""
    test_data = _get_test_data()

    net = _get_test_network()
    ce_loss = loss.SoftmaxCrossEntropyLoss()
    acc = mx.metric.Accuracy()
    est = estimator.Estimator(net, loss=ce_loss, train_metrics=acc)
    val_handler = ValidationHandler(val_data=test_data, eval_fn=est.evaluate, event_handlers=TestHandler())

    est.fit(train_data=test_data, val_data=test_data, event_handlers=[val_handler], epochs=2)
    assert est.run_test_handler is True
