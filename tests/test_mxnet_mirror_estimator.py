"""MXNet's own Estimator unit tests (tests/python/unittest/test_gluon_estimator.py, MXNet 1.9.1), replayed on mxlite.

Each test names the MXNet test it mirrors; all eleven are here, in MXNet's order. The calls are a Gluon 1.x
user's, with ``import mxlite as mx`` (``mx.metric``, ``context=``, ``ctx=``); the expected values are MXNet's.
Where MXNet raises ``AssertionError`` mxlite raises a Python error type (docs/mxnet-differences.md, "errors").
MXNet's tests catch warnings with ``catch_warnings(record=True)`` alone; here ``simplefilter("always")`` is added
so that a warning already shown by an earlier test is recorded again. A deliberate difference keeps its MXNet
test as a strict xfail that says why (docs/mxnet-differences.md names each).

Cost: MXNet's two ResNet-18 cases train on 10 images of 224x224; here the images are 32x32 (ResNet-18 ends in a
global pooling, so every layer runs as at 224x224, on 49 times fewer pixels).
"""

import warnings

import pytest

import mxlite as mx
from mxlite import gluon
from mxlite.device import DeviceUnavailableError
from mxlite.gluon import nn
from mxlite.gluon.contrib.estimator import (  # MXNet's test star-imports the package and event_handler
    BatchBegin,
    BatchEnd,
    EarlyStoppingHandler,
    EpochBegin,
    Estimator,
    GradientUpdateHandler,
    LoggingHandler,
    MetricHandler,
    TrainBegin,
    TrainEnd,
    ValidationHandler,
)
from mxlite.gluon.model_zoo.vision import PretrainedUnavailableError

IMAGE = 32  # MXNet: 224 (see the module docstring)


def _get_test_network(params=None):
    net = nn.Sequential(params=params)
    net.add(nn.Dense(4, activation="relu", flatten=False))
    return net


def _get_test_network_with_namescope(params=None):
    net = nn.Sequential(params=params)
    with net.name_scope():
        net.add(nn.Dense(4, activation="relu", flatten=False))
    return net


def _get_test_data():
    batch_size = 4
    in_data = mx.nd.random.uniform(shape=(10, 3))
    out_data = mx.nd.random.uniform(shape=(10, 4))
    # Input dataloader
    dataset = gluon.data.dataset.ArrayDataset(in_data, out_data)
    dataloader = gluon.data.DataLoader(dataset, batch_size=batch_size)
    dataiter = mx.io.NDArrayIter(data=in_data, label=out_data, batch_size=batch_size)
    return dataloader, dataiter


def test_fit():
    """Mirrors MXNet's ``test_fit``: a DataLoader trains; a DataIter or a list of arrays is refused."""
    net = _get_test_network()
    dataloader, dataiter = _get_test_data()
    num_epochs = 1
    ctx = mx.cpu()
    loss = gluon.loss.L2Loss()
    acc = mx.metric.Accuracy()
    net.initialize(ctx=ctx)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.001})
    est = Estimator(net=net, loss=loss, train_metrics=acc, trainer=trainer, context=ctx)
    est.fit(train_data=dataloader, epochs=num_epochs)
    with pytest.raises(ValueError):
        est.fit(train_data=dataiter, epochs=num_epochs)
    # Input NDArray
    with pytest.raises(ValueError):
        est.fit(train_data=[mx.nd.ones(shape=(10, 3))], epochs=num_epochs)


def test_validation():
    """Mirrors MXNet's ``test_validation``: validation data of the same kinds, with a validation loss."""
    net = _get_test_network()
    dataloader, dataiter = _get_test_data()
    num_epochs = 1
    ctx = mx.cpu()
    loss = gluon.loss.L2Loss()
    acc = mx.metric.Accuracy()
    val_loss = gluon.loss.L1Loss()
    net.initialize(ctx=ctx)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.001})
    est = Estimator(net=net, loss=loss, train_metrics=acc, trainer=trainer, context=ctx, val_loss=val_loss)
    # Input dataloader
    est.fit(train_data=dataloader, val_data=dataloader, epochs=num_epochs)
    # using validation handler
    ValidationHandler(val_data=dataloader, eval_fn=est.evaluate)
    with pytest.raises(ValueError):
        est.fit(train_data=dataiter, val_data=dataiter, epochs=num_epochs)
    # Input NDArray
    with pytest.raises(ValueError):
        est.fit(train_data=[mx.nd.ones(shape=(10, 3))], val_data=[mx.nd.ones(shape=(10, 3))], epochs=num_epochs)


def test_initializer():
    """Mirrors MXNet's ``test_initializer``: no initializer, one given for an initialised net (a warning), and a
    partly initialised ResNet-18 (fine-tuning). MXNet's ResNet loads pretrained weights; mxlite has no model store,
    so that call raises PretrainedUnavailableError, and the case runs on random weights (images: 32x32)."""
    net = _get_test_network()
    train_data, _ = _get_test_data()
    num_epochs = 1
    ctx = mx.cpu()
    loss = gluon.loss.L2Loss()
    acc = mx.metric.Accuracy()
    # no initializer
    est = Estimator(net=net, loss=loss, train_metrics=acc, context=ctx)
    est.fit(train_data=train_data, epochs=num_epochs)

    # different initializer for net and estimator
    net = _get_test_network()
    net.initialize(mx.init.Xavier(), ctx=ctx)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.001})
    # catch reinit warning
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        est = Estimator(net=net, loss=loss, train_metrics=acc, initializer=mx.init.MSRAPrelu(), trainer=trainer,
                        context=ctx)
        assert "Network already fully initialized" in str(w[-1].message)
    # net partially initialized, fine tuning use case
    with pytest.raises(PretrainedUnavailableError):
        gluon.model_zoo.vision.resnet18_v1(pretrained=True, ctx=ctx)
    net = gluon.model_zoo.vision.resnet18_v1(pretrained=False, ctx=ctx)
    net.features.initialize(ctx=ctx)  # what the pretrained weights would give: every layer but the output
    net.output = gluon.nn.Dense(10)  # last layer not initialized
    est = Estimator(net, loss=loss, train_metrics=acc, context=ctx)
    dataset = gluon.data.ArrayDataset(mx.nd.zeros((10, 3, IMAGE, IMAGE)), mx.nd.zeros((10, 10)))
    train_data = gluon.data.DataLoader(dataset=dataset, batch_size=5)
    est.fit(train_data=train_data, epochs=num_epochs)


def test_trainer():
    """Mirrors MXNet's ``test_trainer``: no trainer (SGD with a warning) and a trainer that is not one."""
    net = _get_test_network()
    train_data, _ = _get_test_data()
    num_epochs = 1
    ctx = mx.cpu()
    loss = gluon.loss.L2Loss()
    acc = mx.metric.Accuracy()
    net.initialize(ctx=ctx)
    # input no trainer
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        est = Estimator(net=net, loss=loss, train_metrics=acc, context=ctx)
        assert "No trainer specified" in str(w[-1].message)
    est.fit(train_data=train_data, epochs=num_epochs)
    # input invalid trainer
    trainer = "sgd"
    with pytest.raises(ValueError):
        Estimator(net=net, loss=loss, train_metrics=acc, trainer=trainer, context=ctx)


def test_metric():
    """Mirrors MXNet's ``test_metric``: no metric, a list, a string (refused), and accuracy as the default metric
    of softmax cross-entropy."""
    net = _get_test_network()
    train_data, _ = _get_test_data()
    num_epochs = 1
    ctx = mx.cpu()
    loss = gluon.loss.L2Loss()
    net.initialize(ctx=ctx)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.001})
    # input no metric
    est = Estimator(net=net, loss=loss, trainer=trainer, context=ctx)
    est.fit(train_data=train_data, epochs=num_epochs)
    # input list of metrics
    metrics = [mx.metric.Accuracy(), mx.metric.Accuracy()]
    est = Estimator(net=net, loss=loss, train_metrics=metrics, trainer=trainer, context=ctx)
    est.fit(train_data=train_data, epochs=num_epochs)
    # input invalid metric
    with pytest.raises(ValueError):
        Estimator(net=net, loss=loss, train_metrics="acc", trainer=trainer, context=ctx)
    # test default metric
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    est = Estimator(net=net, loss=loss, trainer=trainer, context=ctx)
    assert isinstance(est.train_metrics[0], mx.metric.Accuracy)


def test_loss():
    """Mirrors MXNet's ``test_loss``: a loss that is not a gluon Loss is refused."""
    net = _get_test_network()
    ctx = mx.cpu()
    acc = mx.metric.Accuracy()
    net.initialize(ctx=ctx)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.001})
    # input invalid loss
    with pytest.raises(ValueError):
        Estimator(net=net, loss="mse", train_metrics=acc, trainer=trainer, context=ctx)


def test_context():
    """Mirrors MXNet's ``test_context``: no context, a list, a string (ValueError), and an unavailable GPU (MXNet:
    AssertionError from the Estimator; mxlite: ``mx.gpu(100)`` itself raises DeviceUnavailableError, a
    RuntimeError, naming it)."""
    net = _get_test_network()
    loss = gluon.loss.L2Loss()
    metrics = mx.metric.Accuracy()
    # input no context
    Estimator(net=net, loss=loss, train_metrics=metrics)
    # input list of context
    gpus = mx.context.num_gpus()
    ctx = [mx.gpu(i) for i in range(gpus)] if gpus > 0 else [mx.cpu()]
    net = _get_test_network()
    Estimator(net=net, loss=loss, train_metrics=metrics, context=ctx)
    # input invalid context
    with pytest.raises(ValueError):
        Estimator(net=net, loss=loss, train_metrics=metrics, context="cpu")
    with pytest.raises(DeviceUnavailableError, match=r"gpu\(100\)"):
        Estimator(net=net, loss=loss, train_metrics=metrics, context=[mx.gpu(0), mx.gpu(100)])


def test_categorize_handlers():
    """Mirrors MXNet's ``test_categorize_handlers``: each handler is listed under the events its mixins name."""
    class CustomHandler1(TrainBegin):
        def train_begin(self):
            print("custom train begin")

    class CustomHandler2(EpochBegin, BatchBegin, TrainEnd):
        def epoch_begin(self):
            print("custom epoch begin")

        def batch_begin(self):
            print("custom batch begin")

        def train_end(self):
            print("custom train end")

    class CustomHandler3(EpochBegin, BatchBegin, BatchEnd, TrainEnd):
        def epoch_begin(self):
            print("custom epoch begin")

        def batch_begin(self):
            print("custom batch begin")

        def batch_end(self):
            print("custom batch end")

        def train_end(self):
            print("custom train end")

    net = nn.Sequential()
    net.add(nn.Dense(10))
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    est = Estimator(net, loss=loss)
    event_handlers = [CustomHandler1(), CustomHandler2(), CustomHandler3()]
    train_begin, epoch_begin, batch_begin, batch_end, epoch_end, train_end = est._categorize_handlers(event_handlers)
    assert len(train_begin) == 1
    assert len(epoch_begin) == 2
    assert len(batch_begin) == 2
    assert len(batch_end) == 1
    assert len(train_end) == 2


def test_default_handlers():
    """Mirrors MXNet's ``test_default_handlers``: the defaults alone, mixed with the user's over the Estimator's
    metrics, a handler over another metric (refused), and the order of the handlers by priority."""
    net = _get_test_network()
    train_data, _ = _get_test_data()
    num_epochs = 1
    ctx = mx.cpu()
    net.initialize(ctx=ctx)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.001})
    train_acc = mx.metric.RMSE()
    loss = gluon.loss.L2Loss()
    est = Estimator(net=net, loss=loss, train_metrics=train_acc, trainer=trainer, context=ctx)
    # no handler(all default handlers), no warning
    with warnings.catch_warnings(record=True):
        est.fit(train_data=train_data, epochs=num_epochs)

    # handler with prepared loss and metrics
    # use mix of default and user defined handlers
    train_metrics = est.train_metrics
    logging = LoggingHandler(metrics=train_metrics)
    est.fit(train_data=train_data, epochs=num_epochs, event_handlers=[logging])

    # handler with all user defined metrics
    # use mix of default and user defined handlers
    metric = MetricHandler(metrics=[train_acc])
    logging = LoggingHandler(metrics=[train_acc])
    est.fit(train_data=train_data, epochs=num_epochs, event_handlers=[metric, logging])

    # handler with mixed metrics, some handler use metrics prepared by estimator
    # some handler use metrics user prepared
    logging = LoggingHandler(metrics=[mx.metric.RMSE("val acc")])
    with pytest.raises(ValueError):
        est.fit(train_data=train_data, epochs=num_epochs, event_handlers=[logging])

    # test handler order
    val_metrics = est.val_metrics
    early_stopping = EarlyStoppingHandler(monitor=val_metrics[0])
    handlers = est._prepare_default_handlers(val_data=None, event_handlers=[early_stopping])
    assert len(handlers) == 5
    assert isinstance(handlers[0], GradientUpdateHandler)
    assert isinstance(handlers[1], MetricHandler)
    assert isinstance(handlers[4], LoggingHandler)


@pytest.mark.xfail(strict=True, reason="mxlite names parameters by structure and params= shares by structural "
                   "name, so the val_net built without a name scope shares the net's weights (MXNet 1.x's prefixes "
                   "differ, its val_net is left uninitialised and validating raises RuntimeError); "
                   "docs/mxnet-differences.md, 'name_scope(), prefix'")
def test_val_net():
    """Mirrors MXNet's ``test_val_net`` (its first case; the others are in test_val_net_with_namescope_and_resnet):
    a val_net given the net's parameters without a name scope does not share them in MXNet 1.x, and validating
    with it raises RuntimeError (uninitialised parameters)."""
    net = _get_test_network()
    val_net = _get_test_network(params=net.collect_params())
    dataloader, _ = _get_test_data()
    ctx = mx.cpu()
    loss = gluon.loss.L2Loss()
    net.initialize(ctx=ctx)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.001})
    est = Estimator(net=net, loss=loss, train_metrics=mx.metric.Accuracy(), trainer=trainer, context=ctx,
                    val_loss=gluon.loss.L2Loss(), val_net=val_net)
    with pytest.raises(RuntimeError):
        est.fit(train_data=dataloader, val_data=dataloader, epochs=1)


def test_val_net_with_namescope_and_resnet():
    """The rest of MXNet's ``test_val_net``: a val_net sharing the net's parameters through a name scope, and two
    ResNet-18s sharing the output layer, validate (images: 32x32)."""
    dataloader, _ = _get_test_data()
    ctx = mx.cpu()
    loss = gluon.loss.L2Loss()
    val_loss = gluon.loss.L2Loss()
    acc = mx.metric.Accuracy()
    net = _get_test_network_with_namescope()
    val_net = _get_test_network_with_namescope(params=net.collect_params())
    net.initialize(ctx=ctx)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.001})
    est = Estimator(net=net, loss=loss, train_metrics=acc, trainer=trainer, context=ctx, val_loss=val_loss,
                    val_net=val_net)
    est.fit(train_data=dataloader, val_data=dataloader, epochs=1)

    net = gluon.model_zoo.vision.resnet18_v1(pretrained=False, ctx=ctx)
    net.output = gluon.nn.Dense(10)
    val_net = gluon.model_zoo.vision.resnet18_v1(pretrained=False, ctx=ctx)
    val_net.output = gluon.nn.Dense(10, params=net.collect_params())
    dataset = gluon.data.ArrayDataset(mx.nd.zeros((10, 3, IMAGE, IMAGE)), mx.nd.zeros((10, 10)))
    dataloader = gluon.data.DataLoader(dataset=dataset, batch_size=5)
    net.initialize(ctx=ctx)
    val_net.initialize(ctx=ctx)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.001})
    est = Estimator(net=net, loss=loss, train_metrics=acc, trainer=trainer, context=ctx, val_loss=val_loss,
                    val_net=val_net)
    est.fit(train_data=dataloader, val_data=dataloader, epochs=1)


def test_val_handlers():
    """Mirrors MXNet's ``test_val_handlers``: evaluate with the default handlers, then with a LoggingHandler over
    the validation metrics logging every batch."""
    net = _get_test_network()
    train_data, _ = _get_test_data()
    val_data, _ = _get_test_data()
    ctx = mx.cpu()
    net.initialize(ctx=ctx)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.001})
    train_acc = mx.metric.RMSE()
    loss = gluon.loss.L2Loss()
    est = Estimator(net=net, loss=loss, train_metrics=train_acc, trainer=trainer, context=ctx)
    with warnings.catch_warnings(record=True):
        est.fit(train_data=train_data, epochs=1)
        est.evaluate(val_data=val_data)
    logging = LoggingHandler(log_interval=1, metrics=est.val_metrics)
    est.evaluate(val_data=val_data, event_handlers=[logging])
