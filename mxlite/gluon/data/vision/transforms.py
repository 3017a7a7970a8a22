"""Image transforms (Gluon's ``gluon.data.vision.transforms``), in NumPy.

Every transform takes an image in MXNet's layout, ``(H, W, C)`` (or a batch ``(N, H, W, C)``),
usually uint8 in [0, 255], as a NumPy array or an mxlite :class:`~mxlite.Tensor`, and returns
the same kind (a Tensor comes back on its device). :class:`ToTensor` turns it into
``(C, H, W)`` float32 in [0, 1], after which :class:`Normalize` works channel-wise::

    transform = transforms.Compose([
        transforms.RandomResizedCrop(224), transforms.RandomFlipLeftRight(),
        transforms.ToTensor(), transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    dataset = dataset.transform_first(transform)

Random transforms draw from :func:`mxlite.ops.random.host_generator`, so ``mx.random.seed(n)``
makes them reproducible (DataLoader worker processes reseed it per worker).

Resizing (``Resize``, ``CenterCrop``, ``RandomResizedCrop``) takes OpenCV's interpolation codes, as
MXNet's: 0 nearest, 1 bilinear (the default), 2 bicubic, 3 area, 4 Lanczos. It runs through
:func:`mxlite.image.resize_array`: OpenCV when installed (``opencv-python-headless``, in the
``vision`` extra), giving MXNet's results; else nearest and bilinear in NumPy with OpenCV's
conventions (uint8 results may differ from OpenCV's fixed-point ones by 1) and the other codes
with Pillow's filters, which differ from OpenCV's (see :mod:`mxlite.image`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ....autograd.tensor import Tensor
from ....device import cpu
from ....device.copy import as_host
from ....image import INTERPOLATIONS, resize_array
from ....ops import random as _random

__all__ = ["CenterCrop", "Cast", "Compose", "HybridCompose", "Normalize", "RandomBrightness", "RandomContrast",
           "RandomFlipLeftRight", "RandomFlipTopBottom", "RandomResizedCrop", "Resize", "ToTensor", "imresize"]


def _unwrap(x: Any) -> tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """``x`` as NumPy, and the function that turns a result back into ``x``'s kind."""
    if isinstance(x, Tensor):
        device = x.device
        return as_host(x), (lambda a: Tensor(np.ascontiguousarray(a), cpu(0)) if device == cpu(0)
                            else Tensor(np.ascontiguousarray(a), cpu(0)).to(device))
    if hasattr(x, "__cuda_array_interface__"):
        import cupy  # device array in, device array out

        return as_host(x), cupy.asarray
    return np.asarray(x), (lambda a: a)


def _image_ndim(name: str, a: np.ndarray) -> None:
    if a.ndim not in (3, 4):
        raise ValueError(f"{name}: expected an image (H, W, C) or a batch (N, H, W, C), got shape {a.shape}")


def _cast_like(out: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``out`` (float) in ``dtype``: integer types rounded and saturated (as OpenCV's saturate_cast)."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.clip(np.rint(out), info.min, info.max).astype(dtype)
    return out.astype(dtype, copy=False)


def imresize(src: Any, w: int, h: int, interp: int = 1) -> Any:
    """Resize an ``(H, W, C)`` image (or ``(N, H, W, C)`` batch) to width ``w`` and height ``h``.

    As ``mx.image.imresize`` (``interp`` 0 nearest, 1 bilinear, 2 bicubic, 3 area, 4 Lanczos), but
    returning the kind it was given (a NumPy array for a NumPy array). Keeps the dtype (integers
    rounded and saturated).

    Raises:
        ValueError: ``w`` or ``h`` < 1, an unknown ``interp``, or not an image.
    """
    a, wrap = _unwrap(src)
    _image_ndim("imresize", a)
    return wrap(resize_array(a, w, h, interp))


def _interpolation(name: str, interpolation: Any) -> int:
    if isinstance(interpolation, bool) or interpolation not in INTERPOLATIONS:
        raise ValueError(f"{name}: interpolation must be one of {INTERPOLATIONS} (OpenCV's codes), got "
                         f"{interpolation!r}")
    return int(interpolation)


def _size_pair(name: str, size: Any) -> tuple[int, int]:
    """``size`` (an int, or ``(width, height)``) as ``(width, height)``, checked."""
    pair = (size, size) if isinstance(size, (int, np.integer)) and not isinstance(size, bool) else size
    if not isinstance(pair, (tuple, list)) or len(pair) != 2 or any(
            isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in pair):
        raise ValueError(f"{name}: size must be an integer >= 1 or a (width, height) pair of them, got {size!r}")
    return int(pair[0]), int(pair[1])


def _fixed_crop(a: np.ndarray, x0: int, y0: int, w: int, h: int, size: tuple[int, int] | None,
                interp: int) -> np.ndarray:
    out = a[..., y0:y0 + h, x0:x0 + w, :]
    if size is not None and (w, h) != size:
        out = imresize(out, size[0], size[1], interp)
    return out


def _scale_down(src_size: tuple[int, int], size: tuple[int, int]) -> tuple[int, int]:
    """MXNet's ``scale_down``: shrink ``size`` (w, h), keeping its ratio, to fit in ``src_size``."""
    w, h = size
    sw, sh = src_size
    if sh < h:
        w, h = float(w * sh) / h, sh
    if sw < w:
        w, h = sw, float(h * sw) / w
    return int(w), int(h)


def _center_crop(a: np.ndarray, size: tuple[int, int], interp: int) -> np.ndarray:
    h, w = a.shape[-3], a.shape[-2]
    new_w, new_h = _scale_down((w, h), size)
    x0, y0 = int((w - new_w) / 2), int((h - new_h) / 2)
    return _fixed_crop(a, x0, y0, new_w, new_h, size, interp)


class _Transform:
    """Base of the transforms: callable, with Gluon's Block spelling (``forward``, ``hybridize``)."""

    def __call__(self, x: Any, *args: Any) -> Any:
        out = self.forward(x)
        return (out, *args) if args else out

    def forward(self, x: Any) -> Any:
        a, wrap = _unwrap(x)
        return wrap(self._apply(a))

    def _apply(self, a: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def hybridize(self, *args: Any, **kwargs: Any) -> None:
        """Accepted for Gluon compatibility: transforms always run eagerly in NumPy."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k.lstrip('_')}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class Compose(_Transform):
    """Apply ``transforms`` in order (Gluon's ``Compose``).

    Raises:
        TypeError: an entry is not callable.
    """

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        transforms = list(transforms)
        for i, t in enumerate(transforms):
            if not callable(t):
                raise TypeError(f"Compose: transform {i} is not callable, got {type(t).__name__}")
        self._transforms = transforms

    def forward(self, x: Any) -> Any:
        for t in self._transforms:
            x = t(x)
        return x

    def __len__(self) -> int:
        return len(self._transforms)

    def __getitem__(self, i: int) -> Callable[[Any], Any]:
        return self._transforms[i]


class HybridCompose(Compose):
    """Gluon's ``HybridCompose`` (a sequence of hybridizable transforms): the same as :class:`Compose`."""


class Cast(_Transform):
    """Cast to ``dtype`` (default ``'float32'``)."""

    def __init__(self, dtype: Any = "float32") -> None:
        self._dtype = np.dtype(dtype)

    def _apply(self, a: np.ndarray) -> np.ndarray:
        return a.astype(self._dtype)


class ToTensor(_Transform):
    """``(H, W, C)`` in [0, 255] to ``(C, H, W)`` float32 in [0, 1] (batches: NHWC to NCHW).

    Raises:
        ValueError: the input is not 3-D or 4-D.
    """

    def _apply(self, a: np.ndarray) -> np.ndarray:
        _image_ndim("ToTensor", a)
        out = a.astype(np.float32) / np.float32(255.0)
        return np.ascontiguousarray(np.moveaxis(out, -1, -3))


class Normalize(_Transform):
    """``(x − mean[c]) / std[c]`` per channel of a ``(C, H, W)`` or ``(N, C, H, W)`` float image.

    Args:
        mean: one value for every channel, or one per channel.
        std: likewise; every value > 0.

    Raises:
        ValueError: a std <= 0; at call time, an input that is not 3-D/4-D or whose channel
            count does not match the number of means/stds.
    """

    def __init__(self, mean: float | Sequence[float] = 0.0, std: float | Sequence[float] = 1.0) -> None:
        self._mean = np.atleast_1d(np.asarray(mean, dtype=np.float64))
        self._std = np.atleast_1d(np.asarray(std, dtype=np.float64))
        if (self._std <= 0).any():
            raise ValueError(f"Normalize: std must be > 0, got {std!r}")

    def _apply(self, a: np.ndarray) -> np.ndarray:
        if a.ndim not in (3, 4):
            raise ValueError(f"Normalize: expected (C, H, W) or (N, C, H, W), got shape {a.shape}")
        c = a.shape[-3]
        for name, v in (("mean", self._mean), ("std", self._std)):
            if len(v) not in (1, c):
                raise ValueError(f"Normalize: the input has {c} channels but {name} has {len(v)} values")
        dtype = a.dtype if np.issubdtype(a.dtype, np.floating) else np.dtype(np.float32)
        mean = self._mean.astype(dtype)[:, None, None]
        std = self._std.astype(dtype)[:, None, None]
        return ((a.astype(dtype) - mean) / std).astype(dtype)


class Resize(_Transform):
    """Resize to ``size`` (Gluon's ``Resize``).

    Args:
        size: an int (square output, or with ``keep_ratio`` the shorter edge) or ``(width, height)``.
        keep_ratio: with an int ``size``, scale the shorter edge to ``size`` and the other edge
            by the same factor (``(300, 200)`` HxW with size 150 gives 225x150).
        interpolation: 0 nearest, 1 bilinear (default), 2 bicubic, 3 area, 4 Lanczos.

    Raises:
        ValueError: a size < 1 or with more than two values, or an unknown interpolation.
    """

    def __init__(self, size: int | Sequence[int], keep_ratio: bool = False, interpolation: int = 1) -> None:
        self._size = _size_pair("Resize", size)
        self._keep = bool(keep_ratio) and isinstance(size, (int, np.integer))
        self._interpolation = _interpolation("Resize", interpolation)

    def _apply(self, a: np.ndarray) -> np.ndarray:
        _image_ndim("Resize", a)
        w, h = self._size
        if self._keep:
            in_h, in_w = a.shape[-3], a.shape[-2]
            short = self._size[0]
            if in_h > in_w:
                w, h = short, int(in_h * short / in_w)
            else:
                w, h = int(in_w * short / in_h), short
        return imresize(a, w, h, self._interpolation)


class CenterCrop(_Transform):
    """Crop the centre ``size`` (an int or ``(width, height)``); a smaller image is cropped to
    the largest centred region of the same aspect ratio and resized up (MXNet's ``center_crop``).

    Raises:
        ValueError: a bad ``size`` or ``interpolation``.
    """

    def __init__(self, size: int | Sequence[int], interpolation: int = 1) -> None:
        self._size = _size_pair("CenterCrop", size)
        self._interpolation = _interpolation("CenterCrop", interpolation)

    def _apply(self, a: np.ndarray) -> np.ndarray:
        _image_ndim("CenterCrop", a)
        return _center_crop(a, self._size, self._interpolation)


class RandomResizedCrop(_Transform):
    """Crop a random area and aspect ratio, then resize to ``size`` (Gluon's ``RandomResizedCrop``).

    Up to 10 draws of an area fraction uniform in ``scale`` and a ratio (w/h) log-uniform in
    ``ratio``; the first crop that fits is taken at a uniform position, else the centre crop.

    Raises:
        ValueError: a bad ``size``, ``scale`` outside (0, 1] or decreasing, a bad ``ratio``.
    """

    def __init__(self, size: int | Sequence[int], scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0), interpolation: int = 1) -> None:
        self._size = _size_pair("RandomResizedCrop", size)
        if len(scale) != 2 or not 0 < scale[0] <= scale[1] <= 1:
            raise ValueError(f"RandomResizedCrop: scale must be (low, high) with 0 < low <= high <= 1, got {scale!r}")
        if len(ratio) != 2 or not 0 < ratio[0] <= ratio[1]:
            raise ValueError(f"RandomResizedCrop: ratio must be (low, high) with 0 < low <= high, got {ratio!r}")
        self._interpolation = _interpolation("RandomResizedCrop", interpolation)
        self._scale, self._ratio = tuple(scale), tuple(ratio)

    def _apply(self, a: np.ndarray) -> np.ndarray:
        _image_ndim("RandomResizedCrop", a)
        gen = _random.host_generator()
        h, w = a.shape[-3], a.shape[-2]
        log_ratio = (math.log(self._ratio[0]), math.log(self._ratio[1]))
        for _ in range(10):
            target = gen.uniform(*self._scale) * h * w
            r = math.exp(gen.uniform(*log_ratio))
            new_w, new_h = int(round(math.sqrt(target * r))), int(round(math.sqrt(target / r)))
            if 0 < new_w <= w and 0 < new_h <= h:
                x0 = int(gen.integers(0, w - new_w + 1))
                y0 = int(gen.integers(0, h - new_h + 1))
                return _fixed_crop(a, x0, y0, new_w, new_h, self._size, self._interpolation)
        return _center_crop(a, self._size, self._interpolation)


class _RandomFlip(_Transform):
    _axis = -2

    def __init__(self, p: float = 0.5) -> None:
        if not 0 <= p <= 1:
            raise ValueError(f"{type(self).__name__}: p must be in [0, 1], got {p!r}")
        self._p = float(p)

    def _apply(self, a: np.ndarray) -> np.ndarray:
        _image_ndim(type(self).__name__, a)
        if _random.host_generator().random() < self._p:
            return np.ascontiguousarray(np.flip(a, axis=self._axis))
        return a


class RandomFlipLeftRight(_RandomFlip):
    """Mirror the image horizontally (the W axis) with probability ``p`` (default 0.5)."""

    _axis = -2


class RandomFlipTopBottom(_RandomFlip):
    """Flip the image vertically (the H axis) with probability ``p`` (default 0.5)."""

    _axis = -3


def _factor(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    return float(value)


class RandomBrightness(_Transform):
    """Multiply by ``α = 1 + U(−brightness, brightness)``; integer images saturate.

    Raises:
        ValueError: ``brightness`` < 0.
    """

    def __init__(self, brightness: float) -> None:
        self._brightness = _factor("brightness", brightness)

    def _apply(self, a: np.ndarray) -> np.ndarray:
        alpha = 1.0 + _random.host_generator().uniform(-self._brightness, self._brightness)
        return _cast_like(a.astype(np.float64) * alpha, a.dtype)


class RandomContrast(_Transform):
    """``α·x + (1 − α)·gray`` with ``α = 1 + U(−contrast, contrast)`` and ``gray`` the image's mean
    luma ``0.299 R + 0.587 G + 0.114 B`` (the mean of the single channel for grey images).

    Raises:
        ValueError: ``contrast`` < 0; an input that is not ``(H, W, 1 or 3)``.
    """

    def __init__(self, contrast: float) -> None:
        self._contrast = _factor("contrast", contrast)

    def _apply(self, a: np.ndarray) -> np.ndarray:
        if a.ndim != 3 or a.shape[-1] not in (1, 3):
            raise ValueError(f"RandomContrast: expected an (H, W, 1 or 3) image, got shape {a.shape}")
        alpha = 1.0 + _random.host_generator().uniform(-self._contrast, self._contrast)
        f = a.astype(np.float64)
        gray = (f @ np.array([0.299, 0.587, 0.114])).mean() if a.shape[-1] == 3 else f.mean()
        return _cast_like(f * alpha + gray * (1.0 - alpha), a.dtype)
