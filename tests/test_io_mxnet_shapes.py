"""The shapes and values of ``mx.io.CSVIter`` and ``mx.io.MNISTIter`` batches, pinned to MXNet 1.9.1's.

MXNet batches a CSVIter's labels as ``(batch,) + label_shape`` and then (``MXDataIterGetLabel``) hands out a label
whose second axis is 1 as ``(batch,)``: so the default ``label_shape=(1,)`` gives ``(batch,)``, and without a
label file the zero labels are ``(batch,)`` whatever ``label_shape`` says. MNISTIter scales pixels by 1/256
(``iter_mnist.cc``), so a pixel of 255 reads 0.99609375, never 1.
"""

import struct

import numpy as np
import pytest

import mxlite as mx


def _csv(path, rows):
    path.write_text("".join(",".join(str(v) for v in row) + "\n" for row in rows))
    return str(path)


def test_csv_labels_of_shape_1_come_as_a_vector_and_score_a_perfect_prediction_1(tmp_path):
    data = _csv(tmp_path / "data.csv", [[i, 10 - i] for i in range(6)])
    labels = _csv(tmp_path / "labels.csv", [[i % 3] for i in range(6)])
    it = mx.io.CSVIter(data_csv=data, data_shape=(2,), label_csv=labels, batch_size=3)
    assert [d.shape for d in it.provide_label] == [(3,)]
    batch = next(it)
    label = batch.label[0].asnumpy()
    assert label.shape == (3,) and it.getlabel().shape == (3,)
    np.testing.assert_array_equal(label, [0, 1, 2])
    prediction = np.eye(3, dtype=np.float32)[label.astype(int)]  # a perfect one-hot prediction
    assert (prediction.argmax(axis=1) == label).mean() == 1.0  # a usual accuracy line
    assert batch.data[0].shape == (3, 2)


@pytest.mark.parametrize("label_shape,batch_label_shape", [((1,), (4,)), ((1, 1), (4,)), ((3,), (4, 3)),
                                                            ((3, 1), (4, 3, 1)), ((2, 2), (4, 2, 2))])
def test_csv_label_shapes_are_mxnets(tmp_path, label_shape, batch_label_shape):
    width = int(np.prod(label_shape))
    data = _csv(tmp_path / "data.csv", [[i] for i in range(8)])
    labels = _csv(tmp_path / "labels.csv", [[10 * i + j for j in range(width)] for i in range(8)])
    it = mx.io.CSVIter(data_csv=data, data_shape=(1,), label_csv=labels, label_shape=label_shape, batch_size=4)
    batch = next(it)
    assert batch.label[0].shape == batch_label_shape and it.provide_label[0].shape == batch_label_shape
    np.testing.assert_array_equal(batch.label[0].asnumpy().reshape(4, width),
                                  [[10 * i + j for j in range(width)] for i in range(4)])
    assert batch.data[0].shape == (4, 1)  # data keeps its axis of 1: MXNet reshapes only the label


@pytest.mark.parametrize("label_shape", [(1,), (3,), (2, 2), (1, 3)])
def test_csv_without_a_label_file_gives_zero_labels_of_shape_batch(tmp_path, label_shape):
    data = _csv(tmp_path / "data.csv", [[1, 2], [3, 4], [5, 6]])
    batches = list(mx.io.CSVIter(data_csv=data, data_shape=(2,), label_shape=label_shape, batch_size=2))
    for batch in batches:
        np.testing.assert_array_equal(batch.label[0].asnumpy(), np.zeros(2))
        assert batch.label[0].shape == (2,)


def test_csv_a_label_shape_mxnet_would_cut_short_is_refused(tmp_path):
    """MXNet reshapes a ``(batch, 1, 3)`` label to ``(batch,)``, keeping a third of the numbers: refused instead."""
    data = _csv(tmp_path / "data.csv", [[1], [2]])
    labels = _csv(tmp_path / "labels.csv", [[1, 2, 3], [4, 5, 6]])
    with pytest.raises(ValueError, match=r"label_shape \(1, 3\).*\(3,\)"):
        mx.io.CSVIter(data_csv=data, data_shape=(1,), label_csv=labels, label_shape=(1, 3), batch_size=2)


def _mnist(folder, pixels, labels):
    images = np.asarray(pixels, dtype=np.uint8).reshape(-1, 28, 28)
    for name, magic, array in (("img", 2051, images), ("lbl", 2049, np.asarray(labels, dtype=np.uint8))):
        (folder / name).write_bytes(struct.pack(f">{1 + array.ndim}I", magic, *array.shape) + array.tobytes())
    return str(folder / "img"), str(folder / "lbl")


@pytest.mark.parametrize("flat", [False, True])
def test_mnist_pixels_are_scaled_by_1_over_256(tmp_path, flat):
    pixels = np.arange(2 * 784) % 256
    image, label = _mnist(tmp_path, pixels, [3, 7])
    it = mx.io.MNISTIter(image=image, label=label, batch_size=2, shuffle=False, flat=flat)
    batch = next(it)
    data = batch.data[0].asnumpy()
    assert data.shape == ((2, 784) if flat else (2, 1, 28, 28)) and data.dtype == np.float32
    np.testing.assert_array_equal(data.reshape(-1), (pixels / 256).astype(np.float32))
    assert data.max() == np.float32(255 / 256)
    assert batch.label[0].shape == (2,)
    np.testing.assert_array_equal(batch.label[0].asnumpy(), [3, 7])
