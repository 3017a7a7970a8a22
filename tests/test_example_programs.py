"""The steps of MXNet's own example programs that need images, RecordIO, export/imports and the fit API, written as
a Gluon 1.x user writes them (only the import line names mxlite): a super-resolution input pipeline and training
step, a RecordIO image classifier, and the fit API with its checkpoint exported and imported again."""

from __future__ import annotations

import os

import numpy as np
import pytest

import mxlite as mx
from mxlite import autograd, gluon, image, nd, recordio
from mxlite.gluon import nn

cv2 = pytest.importorskip("cv2")


def _photo(seed: int, height: int = 24, width: int = 32) -> np.ndarray:
    """A smooth BGR uint8 picture (JPEG keeps it close), as cv2.imread returns."""
    y, x = np.mgrid[0:height, 0:width]
    rng = np.random.default_rng(seed)
    base = np.stack([np.sin(x / (3 + c) + rng.uniform(0, 3)) + np.cos(y / (4 + c)) for c in range(3)], axis=-1)
    return np.clip(127 + 60 * base, 0, 255).astype(np.uint8)


def test_super_resolution_inputs_and_a_training_step():
    # example/gluon/super_resolution: decode, crop, shrink by area (the input) and keep the crop (the target),
    # then an ESPCN-style network with PixelShuffle2D learns to upscale.
    upscale, crop = 2, 16
    encoded = cv2.imencode(".png", _photo(1))[1].tobytes()
    img = image.imdecode(encoded)  # RGB, HWC, uint8
    target, _ = image.center_crop(img, (crop, crop))
    low = image.imresize(target, crop // upscale, crop // upscale, interp=3)  # OpenCV's INTER_AREA, as MXNet's
    expected = cv2.resize(cv2.cvtColor(_photo(1), cv2.COLOR_BGR2RGB)[4:20, 8:24], (8, 8), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(low.asnumpy(), expected)

    to_tensor = gluon.data.vision.transforms.ToTensor()
    x, y = to_tensor(low).expand_dims(0), to_tensor(target).expand_dims(0)
    net = nn.HybridSequential()
    net.add(nn.Conv2D(8, 3, padding=1, activation="relu"), nn.Conv2D(3 * upscale ** 2, 3, padding=1),
            nn.PixelShuffle2D(upscale))
    net.initialize(mx.init.Xavier())
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    loss_fn = gluon.loss.L2Loss()
    losses = []
    for _ in range(5):
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(1)
        losses.append(float(loss.mean().asscalar()))
    assert net(x).shape == (1, 3, crop, crop) and losses[-1] < losses[0]


def test_a_recordio_image_classifier_trains_from_a_packed_file(tmp_path):
    # tools/im2rec.py's files read by mx.io.ImageRecordIter, as MXNet's image-classification examples do.
    rec, idx = str(tmp_path / "train.rec"), str(tmp_path / "train.idx")
    writer = recordio.MXIndexedRecordIO(idx, rec, "w")
    for i in range(6):
        header = recordio.IRHeader(0, float(i % 2), i, 0)
        writer.write_idx(i, recordio.pack_img(header, _photo(i), quality=95, img_fmt=".png"))
    writer.close()
    train = mx.io.ImageRecordIter(path_imgrec=rec, path_imgidx=idx, data_shape=(3, 16, 16), batch_size=3,
                                  shuffle=True, rand_crop=True, rand_mirror=True, mean_r=123.68, mean_g=116.28,
                                  mean_b=103.53, std_r=58.395, std_g=57.12, std_b=57.375, seed=7)
    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3, activation="relu"), nn.GlobalAvgPool2D(), nn.Dense(2))
    net.initialize(mx.init.Xavier())
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    seen = []
    for _ in range(2):
        train.reset()
        for batch in train:
            data, label = batch.data[0], batch.label[0]
            assert data.shape == (3, 3, 16, 16) and label.shape == (3,)
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            trainer.step(data.shape[0])
            seen.extend(label.asnumpy().tolist())
    assert sorted(seen) == [0.0] * 6 + [1.0] * 6


def test_the_fit_api_checkpoints_a_model_that_imports_and_predicts_the_same(tmp_path):
    # The 1.x fit API (gluon.contrib.estimator) with a learning-rate schedule and CheckpointHandler, then the
    # exported checkpoint loaded by SymbolBlock.imports in "another program".
    from mxlite.gluon.contrib.estimator import CheckpointHandler, Estimator

    rng = np.random.default_rng(0)
    features = rng.standard_normal((32, 5)).astype(np.float32)
    labels = (features[:, 0] > 0).astype(np.float32)
    loader = gluon.data.DataLoader(gluon.data.ArrayDataset(features, labels), batch_size=8)
    net = nn.HybridSequential()
    net.add(nn.Dense(8, activation="relu"), nn.BatchNorm(), nn.Dense(2))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    schedule = mx.lr_scheduler.FactorScheduler(step=4, factor=0.5, base_lr=0.1)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "lr_scheduler": schedule})
    est = Estimator(net, gluon.loss.SoftmaxCrossEntropyLoss(), train_metrics=mx.gluon.metric.Accuracy(),
                    trainer=trainer)
    est.fit(loader, epochs=2, event_handlers=[CheckpointHandler(str(tmp_path), model_prefix="net", epoch_period=1)])
    # MXNet's FactorScheduler halves once the update count exceeds 4 (updates 5-8), next only past 8
    assert trainer.learning_rate == pytest.approx(0.05)

    symbol = tmp_path / "net-symbol.json"
    params = sorted(p for p in os.listdir(tmp_path) if p.endswith(".params") and "trainer" not in p)
    assert symbol.exists() and params, os.listdir(tmp_path)
    exported = str(tmp_path / "exported")
    net.export(exported, epoch=2)
    imported = gluon.SymbolBlock.imports(f"{exported}-symbol.json", ["data"], f"{exported}-0002.params")
    probe = nd.array(features[:4])
    np.testing.assert_allclose(imported(probe).asnumpy(), net(probe).asnumpy(), rtol=1e-5, atol=1e-6)
