"""MXNet's ``mx.io.ImageRecordIter``: batches of decoded, augmented and normalised images read from an image
RecordIO file (``.rec``, as ``mxlite im2rec`` or MXNet's ``im2rec`` write it)::

    train = mx.io.ImageRecordIter(path_imgrec="train.rec", path_imgidx="train.idx", data_shape=(3, 224, 224),
                                  batch_size=64, shuffle=True, rand_crop=True, rand_mirror=True, resize=256,
                                  mean_r=123.68, mean_g=116.28, mean_b=103.53, std_r=58.4, std_g=57.12, std_b=57.38,
                                  num_parts=kv.num_workers, part_index=kv.rank)
    for batch in train:
        x, y = batch.data[0], batch.label[0]        # (64, 3, 224, 224) float32 RGB, (64,) float32

Each image goes through MXNet's default augmenter, in its order: shorter edge to ``resize``; a random
resized crop (``random_resized_crop``), else a crop of ``data_shape`` (random with ``rand_crop``, else centred;
an image smaller than the crop is first enlarged); a mirror (``rand_mirror``: half of the images; ``mirror``:
all); then ``(pixel - mean) * scale / std`` per channel, in RGB order, laid out ``(C, H, W)``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..autograd.tensor import NDTensor
from ..device import cpu
from ..image import decode_bgr, resize_array
from ..recordio import MXIndexedRecordIO, MXRecordIO, record_offsets, unpack
from .io import DataBatch, DataDesc, DataIter

__all__ = ["ImageRecordIter"]

# MXNet's arguments that change nothing here (loading, threading and logging knobs).
_NO_EFFECT = {"prefetch_buffer", "verbose", "ctx", "device_id", "shuffle_chunk_size", "shuffle_chunk_seed",
              "aug_seq"}
# MXNet's augmentations mxlite's ImageRecordIter does not provide, with their "off" values.
_NOT_PROVIDED = {"max_rotate_angle": 0, "max_shear_ratio": 0.0, "max_crop_size": -1, "min_crop_size": -1,
                 "max_random_scale": 1.0, "min_random_scale": 1.0, "max_img_size": 1e10, "min_img_size": 0.0,
                 "brightness": 0.0, "contrast": 0.0, "saturation": 0.0, "pca_noise": 0.0, "random_h": 0,
                 "random_s": 0, "random_l": 0, "rotate": -1, "pad": 0, "fill_value": 255, "mean_img": "",
                 "max_random_contrast": 0.0, "max_random_illumination": 0.0}


def _check_kwargs(kwargs: dict[str, Any]) -> None:
    unknown = sorted(set(kwargs) - _NO_EFFECT - set(_NOT_PROVIDED))
    if unknown:
        raise TypeError(f"ImageRecordIter: unknown argument(s) {unknown}")
    if kwargs.get("aug_seq", "aug_default") != "aug_default":
        raise NotImplementedError(f"ImageRecordIter: aug_seq={kwargs['aug_seq']!r}: only MXNet's default augmenter "
                                  "('aug_default') is provided")
    used = sorted(k for k, off in _NOT_PROVIDED.items() if k in kwargs and kwargs[k] != off)
    if used:
        raise NotImplementedError(f"ImageRecordIter: {used} are not provided by mxlite; augment with "
                                  "mxlite.image's augmenters or gluon.data.vision.transforms over an "
                                  "ImageRecordDataset instead")


def _data_shape(value: Any) -> tuple[int, int, int]:
    shape = tuple(value) if isinstance(value, (tuple, list)) else ()
    if len(shape) != 3 or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1 for s in shape):
        raise ValueError(f"ImageRecordIter: data_shape must be (channels, height, width) of positive integers, "
                         f"got {value!r}")
    if shape[0] not in (1, 3):
        raise ValueError(f"ImageRecordIter: data_shape must have 1 (grey) or 3 (RGB) channels, got {shape[0]}")
    return int(shape[0]), int(shape[1]), int(shape[2])


def _read_imglist(path: str, label_width: int) -> dict[int, np.ndarray]:
    """An image list (``index<TAB>label(s)<TAB>path`` lines) as index -> float32 labels."""
    labels = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            fields = line.strip().split("\t")
            if not line.strip():
                continue
            if len(fields) != label_width + 2:
                raise ValueError(f"ImageRecordIter: {path} line {number} holds {len(fields) - 2} label(s); "
                                 f"label_width is {label_width}")
            try:
                labels[int(fields[0])] = np.asarray([float(v) for v in fields[1:-1]], np.float32)
            except ValueError as exc:
                raise ValueError(f"ImageRecordIter: {path} line {number}: {exc}") from exc
    return labels


def _interp(code: int, old_wh: tuple[int, int], new_wh: tuple[int, int], gen: np.random.Generator) -> int:
    """MXNet's choice of interpolation: 9 by the sizes (bicubic to enlarge, area to shrink, else bilinear),
    10 at random among 0-4, else ``code`` itself."""
    if code == 9:
        if new_wh[0] > old_wh[0] and new_wh[1] > old_wh[1]:
            return 2
        return 3 if new_wh[0] < old_wh[0] and new_wh[1] < old_wh[1] else 1
    if code == 10:
        return int(gen.integers(0, 5))
    return code


class _Augmenter:
    """MXNet's default image augmenter and normaliser, for one iterator's arguments."""

    def __init__(self, shape: tuple[int, int, int], resize: int, rand_crop: bool, random_resized_crop: bool,
                 area: tuple[float, float], ratio: tuple[float, float], inter_method: int, rand_mirror: bool,
                 mirror: bool, mean: np.ndarray, scale: np.ndarray, dtype: str) -> None:
        self.shape, self.resize, self.rand_crop = shape, resize, rand_crop
        self.random_resized_crop, self.area, self.ratio = random_resized_crop, area, ratio
        self.inter_method, self.rand_mirror, self.mirror = inter_method, rand_mirror, mirror
        self.mean, self.scale, self.dtype = mean, scale, dtype

    def __call__(self, img: np.ndarray, gen: np.random.Generator) -> np.ndarray:
        img = img[:, :, None] if img.ndim == 2 else img
        img = self._resize_short(img, gen)
        cropped = self._random_resized_crop(img, gen) if self.random_resized_crop else None
        img = cropped if cropped is not None else self._crop(img, gen)
        if (self.rand_mirror and gen.random() < 0.5) or self.mirror:
            img = img[:, ::-1]
        if img.shape[2] == 3:
            img = img[:, :, ::-1]  # BGR -> RGB
        chw = np.ascontiguousarray(img.transpose(2, 0, 1))
        if self.dtype == "uint8":
            return chw
        return (chw.astype(np.float32) - self.mean) * self.scale

    def _resize_short(self, img: np.ndarray, gen: np.random.Generator) -> np.ndarray:
        if self.resize == -1:
            return img
        rows, cols = img.shape[:2]
        if rows > cols:
            new_h, new_w = self.resize * rows // cols, self.resize
        else:
            new_h, new_w = self.resize, self.resize * cols // rows
        return resize_array(img, new_w, new_h, _interp(self.inter_method, (cols, rows), (new_w, new_h), gen))

    def _random_resized_crop(self, img: np.ndarray, gen: np.random.Generator) -> np.ndarray | None:
        if self.area == (1.0, 1.0) and self.ratio == (1.0, 1.0):
            return None
        rows, cols = img.shape[:2]
        _, height, width = self.shape
        for _ in range(10):
            target = rows * cols * gen.uniform(*self.area)
            ratio = gen.uniform(*self.ratio)
            y_area, x_area = round(math.sqrt(target / ratio)), round(math.sqrt(target * ratio))
            if gen.random() > 0.5:
                y_area, x_area = x_area, y_area
            if 1 <= y_area <= rows and 1 <= x_area <= cols:
                y0, x0 = int(gen.integers(0, rows - y_area + 1)), int(gen.integers(0, cols - x_area + 1))
                interp = _interp(self.inter_method, (x_area, y_area), (width, height), gen)
                return resize_array(img[y0:y0 + y_area, x0:x0 + x_area], width, height, interp)
        return None

    def _crop(self, img: np.ndarray, gen: np.random.Generator) -> np.ndarray:
        _, height, width = self.shape
        rows, cols = img.shape[:2]
        interp = _interp(self.inter_method, (cols, rows), (width, height), gen)
        if rows < height:
            img = resize_array(img, int(height / rows * cols), height, interp)
        if img.shape[1] < width:
            img = resize_array(img, width, int(width / img.shape[1] * img.shape[0]), interp)
        y, x = img.shape[0] - height, img.shape[1] - width
        if self.rand_crop:
            y, x = int(gen.integers(0, y + 1)), int(gen.integers(0, x + 1))
        else:
            y, x = y // 2, x // 2
        return img[y:y + height, x:x + width]


class ImageRecordIter(DataIter):
    """Batches of images from an image RecordIO file (MXNet's ``mx.io.ImageRecordIter``, default augmenter).

    Args:
        path_imgrec: the ``.rec`` file.
        data_shape: ``(channels, height, width)`` of one output image; 3 channels decode in colour (RGB), 1 in
            grey.
        batch_size: images per batch.
        path_imgidx: the ``.idx`` index (optional: without it the file's record headers are scanned once).
        path_imglist: an image list (``index<TAB>label(s)<TAB>path``) whose labels replace the records', matched
            by the record header's id.
        label_width: labels per image; batches' labels are ``(batch_size,)`` for 1, else
            ``(batch_size, label_width)``, float32. Records packed with several labels must hold this many.
        shuffle: a new random order of the records at every epoch (from ``seed``).
        seed: seed of the shuffles and the augmentations (NumPy's generators: the draws differ from MXNet's).
        seed_aug: when given, each record's augmentation is drawn from ``seed_aug`` and the record's position in
            the file, the same at every epoch (MXNet's ``seed_aug``).
        resize: shorter edge in pixels before cropping (-1: no resize).
        rand_crop: crop at a random position (else centred).
        random_resized_crop: crop a random area in ``[min_random_area, max_random_area]`` of the image with an
            aspect ratio (w/h) uniform in ``[min_aspect_ratio, max_aspect_ratio]`` (``min_aspect_ratio`` None:
            ``[1 - max_aspect_ratio, 1 + max_aspect_ratio]``), height and width swapped half of the time, resized
            to ``data_shape``; after 10 draws that do not fit, the centre crop. Not with ``rand_crop``.
        inter_method: interpolation of every resize: 0 nearest, 1 bilinear (default), 2 bicubic, 3 area,
            4 Lanczos, 9 auto, 10 random.
        rand_mirror, mirror: mirror half of the images at random, or all of them.
        mean_r, mean_g, mean_b, std_r, std_g, std_b, scale: the output is ``(pixel - mean) * scale / std`` per
            channel (grey images use the ``_r`` values).
        num_parts, part_index: read only part ``part_index`` of ``num_parts`` contiguous parts of nearly equal
            record counts (one per worker).
        round_batch: a last incomplete batch is filled up with the epoch's first images (``batch.pad`` counts
            them); with False as well.
        preprocess_threads: threads decoding and augmenting a batch's images (OpenCV works outside the GIL).
        dtype: 'float32' (default), or 'uint8' for the raw pixels (mirrored and cropped, not normalised).
        data_name, label_name: the names in ``provide_data``/``provide_label``.
        prefetch_buffer, verbose, ctx, device_id, shuffle_chunk_size, shuffle_chunk_seed, aug_seq: accepted, no
            effect (``aug_seq`` must be 'aug_default').

    Batches are ``mx.nd`` arrays on cpu(0).

    Raises:
        FileNotFoundError: a file does not exist.
        ValueError: bad arguments, a file that is not RecordIO, a record whose labels do not match
            ``label_width`` or that is not an image (the message names the file and the record's offset).
        NotImplementedError: one of MXNet's other augmentations (rotation, shear, colour jitter, padding, ...).
        TypeError: an argument MXNet's ImageRecordIter does not take.
    """

    def __init__(self, path_imgrec: str, data_shape: Sequence[int], batch_size: int, path_imgidx: str = "",
                 path_imglist: str = "", label_width: int = 1, shuffle: bool = False, seed: int = 0,
                 seed_aug: int | None = None, resize: int = -1, rand_crop: bool = False,
                 random_resized_crop: bool = False, min_random_area: float = 1.0, max_random_area: float = 1.0,
                 min_aspect_ratio: float | None = None, max_aspect_ratio: float = 0.0, inter_method: int = 1,
                 rand_mirror: bool = False, mirror: bool = False, mean_r: float = 0.0, mean_g: float = 0.0,
                 mean_b: float = 0.0, std_r: float = 1.0, std_g: float = 1.0, std_b: float = 1.0, scale: float = 1.0,
                 num_parts: int = 1, part_index: int = 0, round_batch: bool = True, preprocess_threads: int = 4,
                 dtype: str = "float32", data_name: str = "data", label_name: str = "softmax_label",
                 **kwargs: Any) -> None:
        _check_kwargs(kwargs)
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"ImageRecordIter: batch_size must be an integer >= 1, got {batch_size!r}")
        super().__init__(int(batch_size))
        self.data_shape = _data_shape(data_shape)
        if isinstance(label_width, bool) or not isinstance(label_width, (int, np.integer)) or label_width < 1:
            raise ValueError(f"ImageRecordIter: label_width must be an integer >= 1, got {label_width!r}")
        if not 0 <= part_index < num_parts:
            raise ValueError(f"ImageRecordIter: part_index must lie in [0, num_parts={num_parts}), got {part_index!r}")
        if str(dtype) not in ("float32", "uint8"):
            raise ValueError(f"ImageRecordIter: dtype must be 'float32' or 'uint8', got {dtype!r}")
        self.label_width = int(label_width)
        self._dtype = str(dtype)
        self._names = (data_name, label_name)
        self._threads = max(1, int(preprocess_threads))
        self._augment = self._augmenter(resize, rand_crop, random_resized_crop, (min_random_area, max_random_area),
                                        (min_aspect_ratio, max_aspect_ratio), inter_method, rand_mirror, mirror,
                                        (mean_r, mean_g, mean_b), (std_r, std_g, std_b), scale)
        self._record, self._offsets = self._open(path_imgrec, path_imgidx, num_parts, part_index)
        self._imglist = _read_imglist(path_imglist, self.label_width) if path_imglist else None
        self.shuffle, self._seed, self._seed_aug = bool(shuffle), int(seed), seed_aug
        self._shuffler = np.random.default_rng(self._seed)
        self._epoch = -1
        self._order = np.arange(len(self._offsets))
        self._cursor = 0
        self._current: tuple[np.ndarray, np.ndarray, int] | None = None
        self.reset()

    def _augmenter(self, resize: int, rand_crop: bool, random_resized_crop: bool, area: tuple[float, float],
                   aspect: tuple[float | None, float], inter_method: int, rand_mirror: bool, mirror: bool,
                   mean: tuple[float, ...], std: tuple[float, ...], scale: float) -> _Augmenter:
        if inter_method not in (0, 1, 2, 3, 4, 9, 10):
            raise ValueError(f"ImageRecordIter: inter_method must be 0-4, 9 or 10, got {inter_method!r}")
        if resize != -1 and (isinstance(resize, bool) or not isinstance(resize, (int, np.integer)) or resize < 1):
            raise ValueError(f"ImageRecordIter: resize must be -1 (none) or an integer >= 1, got {resize!r}")
        low, high = aspect
        ratio = (1.0 - high, 1.0 + high) if low is None else (float(low), float(high))
        if ratio != (1.0, 1.0) and not random_resized_crop:
            raise NotImplementedError("ImageRecordIter: an aspect-ratio change without random_resized_crop (MXNet's "
                                      "affine augmentation) is not provided by mxlite")
        if random_resized_crop:
            if rand_crop:
                raise ValueError("ImageRecordIter: random_resized_crop=True conflicts with rand_crop=True")
            if not (0 < area[0] <= area[1] and 0 < ratio[0] <= ratio[1]):
                raise ValueError(f"ImageRecordIter: need 0 < min_random_area <= max_random_area and 0 < "
                                 f"min_aspect_ratio <= max_aspect_ratio, got areas {area}, ratios {ratio}")
        channels = self.data_shape[0]
        if any(s == 0 for s in std[:channels]):
            raise ValueError(f"ImageRecordIter: std_r, std_g, std_b must not be 0, got {std}")
        mean_c = np.asarray(mean[:channels], np.float32).reshape(channels, 1, 1)
        scale_c = (np.float32(scale) / np.asarray(std[:channels], np.float32)).reshape(channels, 1, 1)
        return _Augmenter(self.data_shape, int(resize), bool(rand_crop), bool(random_resized_crop),
                          (float(area[0]), float(area[1])), ratio, int(inter_method), bool(rand_mirror), bool(mirror),
                          mean_c, scale_c, self._dtype)

    @staticmethod
    def _open(path_imgrec: str, path_imgidx: str, num_parts: int, part_index: int) -> tuple[MXRecordIO, list[int]]:
        for path in filter(None, (path_imgrec, path_imgidx)):
            if not os.path.isfile(path):
                raise FileNotFoundError(f"ImageRecordIter: no such file {path!r}")
        if path_imgidx:
            record: MXRecordIO = MXIndexedRecordIO(path_imgidx, path_imgrec, "r")
            offsets = [record.idx[k] for k in record.keys]  # type: ignore[attr-defined]
        else:
            record, offsets = MXRecordIO(path_imgrec, "r"), record_offsets(path_imgrec)
        if not offsets:
            raise ValueError(f"ImageRecordIter: {path_imgrec} holds no records")
        part = offsets[part_index * len(offsets) // num_parts:(part_index + 1) * len(offsets) // num_parts]
        if not part:
            raise ValueError(f"ImageRecordIter: part {part_index} of {num_parts} of {path_imgrec} holds no records "
                             f"({len(offsets)} records in all)")
        return record, part

    @property
    def provide_data(self) -> list[DataDesc]:  # type: ignore[override]
        """The data's name, batch shape ``(batch_size, C, H, W)`` and dtype."""
        return [DataDesc(self._names[0], (self.batch_size,) + self.data_shape, np.dtype(self._dtype))]

    @property
    def provide_label(self) -> list[DataDesc]:  # type: ignore[override]
        """The labels' name, batch shape (``(batch_size,)`` or ``(batch_size, label_width)``) and dtype."""
        shape = (self.batch_size,) if self.label_width == 1 else (self.batch_size, self.label_width)
        return [DataDesc(self._names[1], shape, np.dtype(np.float32))]

    @property
    def num_records(self) -> int:
        """How many records this part reads per epoch."""
        return len(self._offsets)

    def reset(self) -> None:
        """Start the next epoch from its first image (a new order with ``shuffle``)."""
        self._epoch += 1
        self._order = self._shuffler.permutation(len(self._offsets)) if self.shuffle else np.arange(len(self._offsets))
        self._cursor = 0
        self._current = None

    def iter_next(self) -> bool:
        """Load the next batch; False at the end of the epoch."""
        if self._cursor >= len(self._order):
            return False
        positions = self._order[self._cursor:self._cursor + self.batch_size]
        pad = self.batch_size - len(positions)
        if pad:  # fill up with the epoch's first images (cyclically, for a part smaller than a batch)
            positions = np.concatenate([positions, np.resize(self._order, pad)])
        self._cursor += self.batch_size
        data, labels = self._load(positions)
        self._current = (data, labels, pad)
        return True

    def next(self) -> DataBatch:
        """The next batch (``data``: ``(batch_size, C, H, W)``, ``label``, ``pad``).

        Raises:
            StopIteration: the end of the epoch (call :meth:`reset`).
        """
        if not self.iter_next():
            raise StopIteration
        return DataBatch(data=self.getdata(), label=self.getlabel(), pad=self.getpad(), index=None,
                         provide_data=self.provide_data, provide_label=self.provide_label)

    def getdata(self) -> list[NDTensor]:
        """The current batch's images."""
        return [NDTensor(self._batch()[0], cpu(0))]

    def getlabel(self) -> list[NDTensor]:
        """The current batch's labels."""
        return [NDTensor(self._batch()[1], cpu(0))]

    def getpad(self) -> int:
        """How many images at the end of the current batch are fill-up from the epoch's start."""
        return self._batch()[2]

    def _batch(self) -> tuple[np.ndarray, np.ndarray, int]:
        if self._current is None:
            raise RuntimeError("ImageRecordIter: no current batch: call iter_next() (or next()) first")
        return self._current

    def _load(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Read, decode and augment the records at ``positions`` (indices into this part's records)."""
        raws = [self._record.read_at(self._offsets[p]) for p in positions]
        seeds = [self._record_seed(int(p), i) for i, p in enumerate(positions)]
        work = list(zip(positions, raws, seeds))
        if self._threads > 1 and len(work) > 1:
            with ThreadPoolExecutor(min(self._threads, len(work))) as pool:
                samples = list(pool.map(lambda w: self._sample(*w), work))
        else:
            samples = [self._sample(*w) for w in work]
        data = np.stack([s[0] for s in samples])
        labels = np.stack([s[1] for s in samples]).astype(np.float32)
        return data, (labels[:, 0] if self.label_width == 1 else labels)

    def _record_seed(self, position: int, slot: int) -> list[int]:
        if self._seed_aug is not None:
            return [int(self._seed_aug), position]
        return [self._seed, self._epoch, self._cursor + slot, position]

    def _sample(self, position: int, raw: bytes | None, seed: list[int]) -> tuple[np.ndarray, np.ndarray]:
        where = f"{self._record.uri}, record at byte {self._offsets[position]}"
        if raw is None:
            raise ValueError(f"ImageRecordIter: {where}: no record there")
        header, payload = unpack(raw)
        labels = self._labels(header, where)
        try:
            img = decode_bgr(payload, 1 if self.data_shape[0] == 3 else 0)
        except ValueError as exc:
            raise ValueError(f"ImageRecordIter: {where}: {exc}") from exc
        return self._augment(img, np.random.default_rng(seed)), labels

    def _labels(self, header: Any, where: str) -> np.ndarray:
        if self._imglist is not None:
            if header.id not in self._imglist:
                raise ValueError(f"ImageRecordIter: {where}: image id {header.id} is not in the image list")
            return self._imglist[header.id]
        labels = np.atleast_1d(np.asarray(header.label, np.float32))
        if labels.size != self.label_width:
            raise ValueError(f"ImageRecordIter: {where} holds {labels.size} label(s) but label_width is "
                             f"{self.label_width}")
        return labels
