"""MXNet 1.x's file iterators: :class:`MNISTIter` (the MNIST IDX files) and :class:`CSVIter` (CSV files).

Both read their files once, at construction, into host memory and batch them as :class:`NDArrayIter` does
(batches of Tensors on ``cpu(0)``, ``data`` and ``softmax_label`` named as in MXNet).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..autograd.tensor import Tensor
from ..device import cpu
from ..formats.idx import IMAGES_MAGIC, LABELS_MAGIC, read_idx
from .io import NDArrayIter

__all__ = ["CSVIter", "MNISTIter"]


_PIXEL_SCALE = np.float32(1 / 256)  # MXNet's iter_mnist.cc; a power of two, so every pixel's value is exact
_ACCEPTED = ("prefetch_buffer", "ctx", "device", "preprocess_threads")  # MXNet's loading knobs: no effect here


def _check_extra(layer: str, kwargs: dict[str, Any]) -> None:
    unknown = sorted(set(kwargs) - set(_ACCEPTED))
    if unknown:
        raise TypeError(f"{layer}: unknown argument(s) {unknown}; besides its own it accepts {list(_ACCEPTED)} "
                        "(which change nothing in mxlite)")


def _shape(name: str, value: Any) -> tuple[int, ...]:
    shape = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not shape or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1 for s in shape):
        raise ValueError(f"{name} must be a tuple of positive integers, got {value!r}")
    return tuple(int(s) for s in shape)


def _check_label_shape(shape: tuple[int, ...]) -> None:
    """Refuse a CSVIter ``label_shape`` whose first dimension is 1 but which holds several numbers.

    MXNet reshapes a batch of labels whose second axis is 1 to ``(batch,)`` (``MXDataIterGetLabel``): right for
    ``(1,)`` and ``(1, 1)``, but for ``(1, 3)`` it keeps the first ``batch`` numbers of the batch and drops the rest.
    """
    if shape[0] == 1 and int(np.prod(shape)) > 1:
        rest = shape[1:]
        raise ValueError(f"CSVIter: label_shape {shape} is refused: MXNet hands such a batch of labels out as "
                         f"(batch,), keeping only part of each label; give label_shape {rest} instead")


class _FileIter(NDArrayIter):
    """MXNet's file iterators hand out one data and one label array: ``getdata()``/``getlabel()`` give the array,
    not a list of them (``next()`` gives a DataBatch of lists, as every iterator)."""

    def getdata(self) -> Tensor:  # type: ignore[override]
        """The current batch's data array (a Tensor on cpu(0))."""
        return super().getdata()[0]

    def getlabel(self) -> Tensor:  # type: ignore[override]
        """The current batch's label array (a Tensor on cpu(0))."""
        return super().getlabel()[0]


class MNISTIter(_FileIter):
    """Batches of MNIST images and labels read from the IDX files (MXNet's ``mx.io.MNISTIter``).

    Args:
        image, label: paths of the images (``train-images-idx3-ubyte``) and labels (``train-labels-idx1-ubyte``)
            files, plain or gzip-compressed.
        batch_size: images per batch; a last incomplete batch is dropped, as MXNet does.
        shuffle: shuffle the images once, at construction, with ``seed`` (``reset()`` keeps the order, as MXNet).
        flat: batches of ``(batch_size, 784)`` instead of ``(batch_size, 1, 28, 28)``.
        seed: the shuffle's seed (NumPy's generator: the order differs from MXNet's).
        silent: accepted (mxlite prints nothing).
        num_parts, part_index: read only contiguous part ``part_index`` of ``num_parts`` (one per worker).
        data_shape: optional shape of one image (``(784,)`` or ``(1, 28, 28)``), checked against ``flat``'s.
        dtype: accepted, 'float32' only.
        prefetch_buffer, ctx, device, preprocess_threads: accepted, no effect.

    Pixels are scaled by 1/256 as MXNet does (float32 in [0, 255/256]: a pixel of 255 reads 0.99609375); labels
    are float32, a batch's of shape ``(batch_size,)``.

    Raises:
        TypeError: an argument MXNet's MNISTIter does not take.
        OSError: a file cannot be read. ValueError: a file that is not an MNIST IDX file, counts that differ
            between the files, or bad arguments.
    """

    def __init__(self, image: str, label: str, batch_size: int = 128, shuffle: bool = True, flat: bool = False,
                 seed: int = 0, silent: bool = False, num_parts: int = 1, part_index: int = 0,
                 data_shape: Sequence[int] | None = None, dtype: str = "float32", **kwargs: Any) -> None:
        _check_extra("MNISTIter", kwargs)
        if str(dtype) != "float32":
            raise ValueError(f"MNISTIter: dtype must be 'float32', got {dtype!r}")
        if not 0 <= part_index < num_parts:
            raise ValueError(f"MNISTIter: part_index must lie in [0, num_parts={num_parts}), got {part_index!r}")
        images = read_idx(image, IMAGES_MAGIC, 3)
        labels = read_idx(label, LABELS_MAGIC, 1)
        if len(images) != len(labels):
            raise ValueError(f"MNISTIter: {image} holds {len(images)} images but {label} {len(labels)} labels")
        per_image = (images.shape[1] * images.shape[2],) if flat else (1,) + images.shape[1:]
        if data_shape is not None and _shape("MNISTIter: data_shape", data_shape) != per_image:
            raise ValueError(f"MNISTIter: data_shape {tuple(data_shape)} does not match the images' {per_image} "
                             f"(flat={bool(flat)})")
        order = np.random.default_rng(seed).permutation(len(images)) if shuffle else np.arange(len(images))
        part = np.array_split(order, num_parts)[part_index]
        data = images[part].reshape((len(part),) + per_image).astype(np.float32) * _PIXEL_SCALE
        super().__init__(data, labels[part].astype(np.float32), batch_size=batch_size,
                         last_batch_handle="discard")


class CSVIter(_FileIter):
    """Batches read from CSV files of numbers, one example per line (MXNet's ``mx.io.CSVIter``).

    Args:
        data_csv: path of the data file; each line holds ``prod(data_shape)`` comma-separated numbers.
        data_shape: shape of one example.
        label_csv: path of the labels file (``prod(label_shape)`` numbers per line), or None for zero labels.
        label_shape: shape of one label (default ``(1,)``). A batch's labels have shape
            ``(batch_size,) + label_shape``, except, as in MXNet, ``(batch_size,)`` for a label of one number
            (``(1,)``, ``(1, 1)``) and for the zero labels given without ``label_csv``.
        batch_size: examples per batch.
        round_batch: a last incomplete batch is filled up with the first examples (``batch.pad`` counts
            them); with False as well, where MXNet leaves the filler unspecified.
        dtype: 'float32' (default), 'int32' or 'int64', of data and labels.
        prefetch_buffer, ctx, device, preprocess_threads: accepted, no effect.

    Raises:
        TypeError: an argument MXNet's CSVIter does not take.
        OSError: a file cannot be read. ValueError: a line with another count of numbers than the shape
            needs, files with different numbers of lines, with ``label_csv`` a ``label_shape`` of several
            numbers whose first dimension is 1 (MXNet would keep only part of each label), or bad arguments.
    """

    def __init__(self, data_csv: str, data_shape: Sequence[int], label_csv: str | None = None,
                 label_shape: Sequence[int] = (1,), batch_size: int = 1, round_batch: bool = True,
                 dtype: str = "float32", **kwargs: Any) -> None:
        _check_extra("CSVIter", kwargs)
        if str(dtype) not in ("float32", "int32", "int64"):
            raise ValueError(f"CSVIter: dtype must be 'float32', 'int32' or 'int64', got {dtype!r}")
        data = self._read(data_csv, _shape("CSVIter: data_shape", data_shape), dtype)
        label_shape = _shape("CSVIter: label_shape", label_shape)
        if label_csv is None:
            labels = np.zeros(len(data), dtype=dtype)  # MXNet's dummy label, whatever label_shape: one 0 per example
        else:
            _check_label_shape(label_shape)
            labels = self._read(label_csv, label_shape, dtype)
            if len(labels) != len(data):
                raise ValueError(f"CSVIter: {data_csv} holds {len(data)} examples but {label_csv} {len(labels)}")
            if label_shape[0] == 1:
                labels = labels.reshape(len(labels))  # MXNet hands a (batch, 1, ...) label out as (batch,)
        # as Tensors, which NDArrayIter keeps in their dtype (NumPy inputs become float32)
        super().__init__(Tensor(data, cpu(0)), Tensor(labels, cpu(0)), batch_size=batch_size,
                         last_batch_handle="pad")

    @staticmethod
    def _read(path: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        width = int(np.prod(shape))
        rows = []
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                values = line.strip().split(",")
                if len(values) != width:
                    raise ValueError(f"CSVIter: {path} line {number} holds {len(values)} numbers, the shape {shape} "
                                     f"needs {width}")
                rows.append([float(v) if dtype == "float32" else int(float(v)) for v in values])
        return np.asarray(rows, dtype=dtype).reshape((len(rows),) + shape)
