"""Writes this folder's files with Apache MXNet 1.9.1 (run once; the tests need no MXNet).

    python3 -m venv /tmp/mxvenv && /tmp/mxvenv/bin/pip install mxnet==1.9.1 'numpy<1.24'
    /tmp/mxvenv/bin/python tests/data/mxnet_export/make_files.py

For each model NAME: NAME-symbol.json and NAME-0000.params (HybridBlock.export), and NAME-io.params
(mx.nd.save of the inputs 'data' or 'data0', 'data1', ... and MXNet's output 'output' on them).
"""

import os

import mxnet as mx
import numpy as np
from mxnet import gluon
from mxnet.gluon import nn
from mxnet.gluon.model_zoo import vision

HERE = os.path.dirname(os.path.abspath(__file__))


class Mixed(gluon.HybridBlock):
    """Operators between layers, two inputs: dense features and embedding ids."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.dense = nn.Dense(8, in_units=6)
            self.norm = nn.LayerNorm(in_channels=8)
            self.embed = nn.Embedding(10, 4)

    def hybrid_forward(self, F, x, ids):
        y = F.LeakyReLU(self.norm(self.dense(x)), act_type="elu", slope=0.5)
        z = F.concat(y * 2 + 1, F.relu(y), F.flatten(self.embed(ids)), dim=1)   # (N, 8 + 8 + 12)
        z = F.transpose(z.reshape((0, 4, -1)), axes=(0, 2, 1))                  # (N, 7, 4)
        z = F.softmax(z, axis=-1)
        z = F.sum(z, axis=1) - F.mean(z, axis=1) * 0.5
        z = F.clip(z, -0.5, 3.0) / 3.0
        z = F.broadcast_mul(z, F.expand_dims(F.max(z, axis=1), axis=1))
        return F.log_softmax(z, axis=-1)


class SmallCNN(gluon.HybridBlock):
    """Convolutions of several kinds, BatchNorm, pooling, a residual sum and a concatenation."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.stem = nn.HybridSequential()
            self.stem.add(nn.Conv2D(8, 3, padding=1, use_bias=False), nn.BatchNorm(), nn.Activation("relu"),
                          nn.MaxPool2D(3, 2, ceil_mode=True))
            self.branch = nn.HybridSequential()
            self.branch.add(nn.Conv2D(8, 3, padding=1, groups=4), nn.BatchNorm(scale=False), nn.PReLU())
            self.up = nn.Conv2DTranspose(4, 3, strides=2, padding=1, output_padding=1, activation="sigmoid")
            self.pool = nn.AvgPool2D(3, 1, 1, count_include_pad=False)
            self.head = nn.HybridSequential()
            self.head.add(nn.GlobalMaxPool2D(), nn.Flatten(), nn.Dropout(0.5), nn.Dense(5, activation="softrelu"),
                          nn.LeakyReLU(0.1))

    def hybrid_forward(self, F, x):
        x = self.stem(x)
        x = x + self.branch(x)
        x = F.concat(self.pool(x), F.Activation(x, act_type="tanh"), dim=1)
        return self.head(self.up(x))


def _randomise(net):
    rng = np.random.RandomState(0)
    for name, p in net.collect_params().items():
        value = rng.normal(0, 0.3, p.shape)
        if name.endswith("running_var"):
            value = rng.uniform(0.5, 2.0, p.shape)
        p.set_data(mx.nd.array(value.astype(np.float32)))


def _write(name, net, inputs):
    net.initialize(mx.init.Xavier())
    net(*inputs)
    _randomise(net)
    net.hybridize()
    out = net(*inputs)
    net.export(os.path.join(HERE, name))
    names = ["data"] if len(inputs) == 1 else [f"data{i}" for i in range(len(inputs))]
    mx.nd.save(os.path.join(HERE, f"{name}-io.params"), {**dict(zip(names, inputs)), "output": out})


def main():
    rng = np.random.RandomState(1)
    mx.random.seed(0)
    _write("mixed", Mixed(), [mx.nd.array(rng.normal(size=(2, 6))), mx.nd.array([[1, 9, 3], [0, 2, 7]])])
    _write("small_cnn", SmallCNN(), [mx.nd.array(rng.normal(size=(2, 3, 12, 12)))])
    _write("resnet_thumb", vision.ResNetV1(vision.BasicBlockV1, [1, 1, 1, 1], [8, 8, 16, 32, 64], classes=10,
                                           thumbnail=True), [mx.nd.array(rng.normal(size=(2, 3, 16, 16)))])
    _write("densenet_tiny", vision.DenseNet(8, 4, [2, 2], classes=10), [mx.nd.array(rng.normal(size=(2, 3, 56, 56)))])
    _write("mobilenet0.25", vision.get_model("mobilenet0.25"), [mx.nd.array(rng.normal(size=(2, 3, 64, 64)))])
    _write("mobilenetv2_0.25", vision.get_model("mobilenetv2_0.25", classes=10),
           [mx.nd.array(rng.normal(size=(2, 3, 64, 64)))])


if __name__ == "__main__":
    main()
