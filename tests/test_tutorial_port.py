"""The classic Gluon CNN tutorial, written as an MXNet user writes it; only the import lines changed.

The original (Gluon's MNIST CNN tutorial: ``from mxnet import gluon, autograd, nd``) trains on MNIST;
here the same script trains on the embedded 8x8 UCI digits, presented the way MXNet's vision
datasets present images (``(H, W, 1)`` uint8 in [0, 255]), on two CPU devices.
"""
# The tutorial's own spelling is kept verbatim (unused loop index ``i``, the loss named ``l``).
# ruff: noqa: B007, E741

from __future__ import annotations

import numpy as np

import mxlite as mx  # the only change: `import mxnet as mx` and `from mxnet ...` below
from mxlite import autograd, gluon, nd
from mxlite.datasets import train_test_split_digits  # the data set (MNIST in the original)
from mxlite.gluon import nn
from mxlite.gluon.data.vision import transforms


def _digits_as_mxnet_images():
    """The digits as MXNet's vision datasets give images: ``(N, H, W, 1)`` uint8, labels float32."""
    X_train, y_train, X_test, y_test = train_test_split_digits(test_fraction=0.2, seed=0)

    def images(X):
        return nd.array(np.round(X.reshape(-1, 8, 8, 1) * 255), dtype="uint8")

    return (gluon.data.ArrayDataset(images(X_train), nd.array(y_train)),
            gluon.data.ArrayDataset(images(X_test), nd.array(y_test)))


def test_gluon_cnn_tutorial_trains_on_two_cpus():
    mx.random.seed(42)
    np.random.seed(42)
    ctx = [mx.cpu(0), mx.cpu(1)]
    batch_size = 64
    epochs = 6

    train_set, test_set = _digits_as_mxnet_images()
    transformer = transforms.Compose([transforms.ToTensor(), transforms.Normalize(0.13, 0.31)])
    train_data = gluon.data.DataLoader(train_set.transform_first(transformer), batch_size=batch_size,
                                       shuffle=True, last_batch="rollover")
    test_data = gluon.data.DataLoader(test_set.transform_first(transformer), batch_size=batch_size, shuffle=False)

    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv2D(channels=20, kernel_size=3, activation="relu"))
        net.add(nn.BatchNorm())
        net.add(nn.MaxPool2D(pool_size=2, strides=2))
        net.add(nn.Conv2D(channels=32, kernel_size=2, activation="relu"))
        net.add(nn.Flatten())
        net.add(nn.Dense(64, activation="relu"))
        net.add(nn.Dropout(0.2))
        net.add(nn.Dense(10))
    net.hybridize()
    net.collect_params().initialize(mx.init.Xavier(magnitude=2.24), ctx=ctx)

    softmax_cross_entropy = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})

    def evaluate_accuracy(data_iterator, net):
        acc = mx.metric.Accuracy()
        for i, (data, label) in enumerate(data_iterator):
            data = gluon.utils.split_and_load(data, ctx_list=ctx, batch_axis=0, even_split=False)
            label = gluon.utils.split_and_load(label, ctx_list=ctx, batch_axis=0, even_split=False)
            outputs = [net(X) for X in data]
            preds = [nd.argmax(output, axis=1) for output in outputs]
            acc.update(preds=preds, labels=label)
        return acc.get()[1]

    history = []
    for e in range(epochs):
        cumulative_loss = 0
        for i, (data, label) in enumerate(train_data):
            data = gluon.utils.split_and_load(data, ctx_list=ctx, batch_axis=0)
            label = gluon.utils.split_and_load(label, ctx_list=ctx, batch_axis=0)
            with autograd.record():
                losses = [softmax_cross_entropy(net(X), Y) for X, Y in zip(data, label)]
            for l in losses:
                l.backward()
            trainer.step(batch_size)
            cumulative_loss += sum(nd.sum(l).asscalar() for l in losses)
        test_accuracy = evaluate_accuracy(test_data, net)
        train_accuracy = evaluate_accuracy(train_data, net)
        history.append((cumulative_loss / len(train_set), train_accuracy, test_accuracy))
        print(f"Epoch {e}. Loss: {history[-1][0]:.4f}, Train_acc {train_accuracy:.4f}, Test_acc {test_accuracy:.4f}")

    assert history[-1][0] < history[0][0]
    assert history[-1][2] >= 0.9, history
    # the two devices' mirrors are identical after training (data parallelism)
    for param in net.collect_params().values():
        mirrors = [d.asnumpy() for d in param.list_data()]
        if param.grad_req != "null":
            np.testing.assert_array_equal(mirrors[0], mirrors[1])
