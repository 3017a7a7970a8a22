"""MXNet's image functions and augmenters (``mx.image``, also ``mx.img``): decoding, resizing, cropping.

Images are ``(H, W, C)`` arrays, as in MXNet: decoding gives uint8 ``mx.nd`` arrays in RGB order (``to_rgb=0``:
OpenCV's BGR); every function takes an mxlite array or a NumPy array and returns an ``mx.nd`` array on the
input's device (CPU for NumPy input) of the input's dtype::

    img = mx.image.imread("cat.jpg")                         # (H, W, 3) uint8, RGB
    img = mx.image.resize_short(img, 256)                    # shorter edge 256, bicubic
    img, (x, y, w, h) = mx.image.center_crop(img, (224, 224))
    for aug in mx.image.CreateAugmenter((3, 224, 224), rand_mirror=True, mean=True, std=True):
        img = aug(img)

Interpolation codes are OpenCV's, as MXNet's: 0 nearest, 1 bilinear, 2 bicubic, 3 area, 4 Lanczos; the crop and
resize helpers also take 9 (bicubic to enlarge, area to shrink, bilinear otherwise) and 10 (one of 0-4 at random).

Codecs and resizing come from OpenCV (``pip install opencv-python-headless``, in the ``vision`` extra), which is
what MXNet itself uses: results equal MXNet's. Without OpenCV, Pillow decodes and encodes, nearest and bilinear
resizing are computed here in NumPy with OpenCV's conventions (uint8 results may differ from OpenCV's fixed-point
ones by 1), and bicubic, area and Lanczos resizing use Pillow's filters, which differ from OpenCV's: Pillow's
bicubic kernel is ``a = -0.5`` (OpenCV's ``-0.75``), its filters widen when shrinking (antialiasing) and its
area filter is a box filter; JPEG decoders may differ by a few levels and OpenCV applies the EXIF orientation
where Pillow does not. Random choices draw from mxlite's host generator, so ``mx.random.seed(n)`` repeats them.
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .autograd.tensor import NDTensor, Tensor
from .device import cpu
from .device.copy import as_host
from .ops import random as _random

__all__ = [
    "Augmenter", "BrightnessJitterAug", "CastAug", "CenterCropAug", "ColorJitterAug", "ColorNormalizeAug",
    "ContrastJitterAug", "CreateAugmenter", "ForceResizeAug", "HorizontalFlipAug", "HueJitterAug", "LightingAug",
    "RandomCropAug", "RandomGrayAug", "RandomOrderAug", "RandomSizedCropAug", "ResizeAug", "SaturationJitterAug",
    "SequentialAug", "center_crop", "color_normalize", "copyMakeBorder", "fixed_crop", "imdecode", "imread",
    "imresize", "random_crop", "random_size_crop", "resize_short", "scale_down",
]

INTERPOLATIONS = {0: "nearest", 1: "bilinear", 2: "bicubic", 3: "area", 4: "Lanczos"}


# -- the libraries -------------------------------------------------------------------------------------------------
def _cv2() -> Any:
    """OpenCV's module, or None when it is not installed."""
    try:
        import cv2
    except ImportError:
        return None
    return cv2


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:
        return None
    return Image


def backend() -> str:
    """Which library decodes and resizes: ``'opencv'``, ``'pillow'`` or ``'numpy'`` (nearest and bilinear
    resizing only; no codecs)."""
    if _cv2() is not None:
        return "opencv"
    return "pillow" if _pillow() is not None else "numpy"


def _need_codec(what: str) -> None:
    if _cv2() is None and _pillow() is None:
        raise ImportError(f"{what} needs OpenCV or Pillow: pip install opencv-python-headless (or pillow), or "
                          "pip install 'mxlite[vision]'")


# -- arrays in and out ---------------------------------------------------------------------------------------------
def _host(src: Any) -> np.ndarray:
    return as_host(src) if isinstance(src, Tensor) or hasattr(src, "__cuda_array_interface__") else np.asarray(src)


def _like(result: np.ndarray, src: Any) -> NDTensor:
    """``result`` as an ``mx.nd`` array on ``src``'s device (cpu(0) unless ``src`` is an mxlite array)."""
    out = NDTensor(np.ascontiguousarray(result), cpu(0))
    device = src.device if isinstance(src, Tensor) else cpu(0)
    return out if device == cpu(0) else out.to(device)


def _into(out: Any, result: np.ndarray, src: Any, what: str) -> NDTensor:
    """``result`` as :func:`_like` makes it, or written into the caller's ``out`` array (MXNet's ``out=``)."""
    if out is None:
        return _like(result, src)
    if not isinstance(out, Tensor) or tuple(out.shape) != tuple(result.shape):
        raise ValueError(f"{what}: out must be an mxlite array of shape {tuple(result.shape)}, got "
                         f"{getattr(out, 'shape', type(out).__name__)}")
    out[:] = result
    return out


def _image(what: str, a: np.ndarray) -> None:
    if a.ndim != 3:
        raise ValueError(f"{what}: expected an (H, W, C) image, got shape {a.shape}")


def _positive(what: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what}: {name} must be an integer >= 1, got {value!r}")
    return int(value)


def _cast_like(out: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float ``out`` in ``dtype``: integers rounded and saturated, as OpenCV's ``saturate_cast``."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.clip(np.rint(out), info.min, info.max).astype(dtype)
    return out.astype(dtype, copy=False)


# -- codecs --------------------------------------------------------------------------------------------------------
def _bytes(what: str, buf: Any) -> bytes:
    if isinstance(buf, Tensor):
        buf = as_host(buf)
    if isinstance(buf, np.ndarray):
        return buf.astype(np.uint8, copy=False).tobytes()
    if isinstance(buf, (bytes, bytearray, memoryview)):
        return bytes(buf)
    raise TypeError(f"{what}: buf must be bytes, bytearray, a NumPy array or an mxlite array of the encoded image, "
                    f"got {type(buf).__name__} (encode a str first)")


def decode_bgr(buf: Any, flag: int = 1) -> np.ndarray:
    """Decode an encoded image (JPEG, PNG, ...) as OpenCV's ``imdecode(buf, flag)``: a NumPy uint8 array in BGR
    (BGRA) order; ``flag`` 1 gives ``(H, W, 3)``, 0 grey ``(H, W)``, -1 the file's own channels.

    Raises:
        ValueError: an empty buffer, data that is not a decodable image, or a bad ``flag``.
        ImportError: neither OpenCV nor Pillow is installed.
    """
    data = _bytes("imdecode", buf)
    if flag not in (-1, 0, 1):
        raise ValueError(f"imdecode: flag must be 1 (colour), 0 (greyscale) or -1 (unchanged), got {flag!r}")
    if not data:
        raise ValueError("imdecode: the buffer is empty: no image to decode")
    _need_codec("imdecode")
    cv2 = _cv2()
    if cv2 is not None:
        img = cv2.imdecode(np.frombuffer(data, np.uint8), flag)
    else:
        img = _pillow_decode(data, flag)
    if img is None:
        raise ValueError(f"imdecode: the {len(data)} bytes (starting {data[:8]!r}) are not an image "
                         f"{backend()} can decode")
    return img


def _pillow_decode(data: bytes, flag: int) -> np.ndarray | None:
    Image = _pillow()
    try:
        with Image.open(io.BytesIO(data)) as img:
            if flag == 0:
                return np.asarray(img.convert("L"), dtype=np.uint8)
            if flag == 1 or img.mode not in ("RGBA", "LA", "L"):
                return np.ascontiguousarray(np.asarray(img.convert("RGB"), dtype=np.uint8)[..., ::-1])
            if img.mode == "L":
                return np.asarray(img, dtype=np.uint8)
            return np.ascontiguousarray(np.asarray(img.convert("RGBA"), dtype=np.uint8)[..., [2, 1, 0, 3]])
    except (OSError, ValueError, SyntaxError):
        return None


def encode_bgr(img: Any, quality: int = 95, img_fmt: str = ".jpg") -> bytes:
    """Encode a uint8 ``(H, W)``/``(H, W, 1)``/``(H, W, 3)`` image in BGR order as ``img_fmt`` (OpenCV's
    ``imencode``): '.jpg'/'.jpeg' with JPEG ``quality`` 0-100, '.png' with compression level ``quality`` 0-9
    (higher values mean 9, as in OpenCV).

    Raises:
        ValueError: an unknown format, a quality out of range, or not such an image.
        ImportError: neither OpenCV nor Pillow is installed.
    """
    a = _host(img)
    fmt = img_fmt.lower()
    if fmt not in (".jpg", ".jpeg", ".png"):
        raise ValueError(f"pack_img: img_fmt must be '.jpg', '.jpeg' or '.png', got {img_fmt!r}")
    high = 100 if fmt != ".png" else None  # a PNG level above 9 means 9, as in OpenCV (MXNet's default is 95)
    if isinstance(quality, bool) or not isinstance(quality, (int, np.integer)) or quality < 0 or (
            high is not None and quality > high):
        raise ValueError(f"pack_img: quality for {fmt} must be an integer in [0, {high or 9}], got {quality!r}")
    quality = min(int(quality), 9) if fmt == ".png" else int(quality)
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] != 3) or a.size == 0:
        raise ValueError(f"pack_img: expected an (H, W) or (H, W, 3) image, got shape {a.shape}")
    a = np.ascontiguousarray(a.astype(np.uint8, copy=False))
    _need_codec("pack_img")
    cv2 = _cv2()
    if cv2 is not None:
        param = cv2.IMWRITE_PNG_COMPRESSION if fmt == ".png" else cv2.IMWRITE_JPEG_QUALITY
        ok, encoded = cv2.imencode(fmt, a, [param, int(quality)])
        if not ok:
            raise ValueError(f"pack_img: OpenCV could not encode the {a.shape} image as {fmt}")
        return encoded.tobytes()
    out = io.BytesIO()
    pil = _pillow().fromarray(a if a.ndim == 2 else a[..., ::-1])
    if fmt == ".png":
        pil.save(out, format="PNG", compress_level=int(quality))
    else:
        pil.save(out, format="JPEG", quality=int(quality))
    return out.getvalue()


def _from_bgr(img: np.ndarray, to_rgb: Any) -> np.ndarray:
    if img.ndim == 2:
        return img[:, :, None]
    if to_rgb and img.shape[2] >= 3:
        order = [2, 1, 0] + list(range(3, img.shape[2]))
        return np.ascontiguousarray(img[:, :, order])
    return img


def imdecode(buf: Any, flag: int = 1, to_rgb: Any = 1, out: Any = None) -> NDTensor:
    """Decode an encoded image (MXNet's ``mx.image.imdecode``) into an ``(H, W, C)`` uint8 array on cpu(0).

    Args:
        buf: the encoded bytes (bytes, bytearray, a uint8 NumPy array or mxlite array).
        flag: 1 for colour (3 channels), 0 for greyscale (1 channel), -1 for the file's own channels.
        to_rgb: RGB order (MXNet's default), else OpenCV's BGR.
        out: an array to write the image into (its shape must match).

    Raises:
        ValueError: an empty buffer or data that is not a decodable image (as :func:`decode_bgr`).
        TypeError: ``buf`` is a str or another type.
        ImportError: neither OpenCV nor Pillow is installed.
    """
    return _into(out, _from_bgr(decode_bgr(buf, flag), to_rgb), None, "imdecode")


def imread(filename: str | os.PathLike, flag: int = 1, to_rgb: Any = True, out: Any = None) -> NDTensor:
    """Read and decode an image file (MXNet's ``mx.image.imread``); arguments as :func:`imdecode`.

    Raises:
        FileNotFoundError: no such file. ValueError: not a decodable image (the message names the file).
    """
    path = os.fspath(filename)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"imread: no such image file: {path!r}")
    with open(path, "rb") as f:
        data = f.read()
    try:
        return imdecode(data, flag, to_rgb, out)
    except ValueError as exc:
        raise ValueError(f"imread: {path}: {exc}") from exc


# -- resizing ------------------------------------------------------------------------------------------------------
def _check_interp(what: str, interp: Any) -> int:
    if isinstance(interp, bool) or interp not in INTERPOLATIONS:
        raise ValueError(f"{what}: interpolation must be one of {INTERPOLATIONS} (OpenCV's codes), got {interp!r}")
    return int(interp)


def _axis_index(in_size: int, out_size: int, interp: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source indices ``i0``, ``i1`` and the weights of ``i1`` along one axis, with OpenCV's conventions:
    nearest takes ``floor(x * in/out)``; bilinear samples at ``(x + 0.5) * in/out - 0.5``, clamped."""
    scale = in_size / out_size
    dst = np.arange(out_size, dtype=np.float64)
    if interp == 0:
        i0 = np.minimum(np.floor(dst * scale).astype(np.int64), in_size - 1)
        return i0, i0, np.zeros(out_size)
    src = np.maximum((dst + 0.5) * scale - 0.5, 0.0)
    i0 = np.floor(src).astype(np.int64)
    frac = src - i0
    last = i0 >= in_size - 1
    i0 = np.where(last, in_size - 1, i0)
    frac = np.where(last, 0.0, frac)
    return i0, np.minimum(i0 + 1, in_size - 1), frac


def _numpy_resize(a: np.ndarray, w: int, h: int, interp: int) -> np.ndarray:
    y0, y1, fy = _axis_index(a.shape[0], h, interp)
    x0, x1, fx = _axis_index(a.shape[1], w, interp)
    if interp == 0:
        return np.ascontiguousarray(a[y0][:, x0])
    f = a.astype(np.float64)
    rows = f[y0] * (1 - fy)[:, None, None] + f[y1] * fy[:, None, None]
    return _cast_like(rows[:, x0] * (1 - fx)[:, None] + rows[:, x1] * fx[:, None], a.dtype)


_CV2_DTYPES = (np.uint8, np.uint16, np.int16, np.float32, np.float64)


def _cv2_resize(cv2: Any, a: np.ndarray, w: int, h: int, interp: int) -> np.ndarray:
    work = a if a.dtype in _CV2_DTYPES else a.astype(np.float64)
    out = cv2.resize(np.ascontiguousarray(work), (w, h), interpolation=interp)
    out = out.reshape(h, w, a.shape[2])  # OpenCV drops a single channel axis
    return out if out.dtype == a.dtype else _cast_like(out, a.dtype)


def _pillow_resize(a: np.ndarray, w: int, h: int, interp: int) -> np.ndarray:
    Image = _pillow()
    resample = {2: Image.Resampling.BICUBIC, 3: Image.Resampling.BOX, 4: Image.Resampling.LANCZOS}[interp]
    channels = [np.asarray(Image.fromarray(np.ascontiguousarray(a[:, :, c], dtype=np.float32), mode="F")
                           .resize((w, h), resample=resample)) for c in range(a.shape[2])]
    return _cast_like(np.stack(channels, axis=-1).astype(np.float64), a.dtype)


def resize_array(a: np.ndarray, w: int, h: int, interp: int = 1) -> np.ndarray:
    """Resize a NumPy ``(H, W, C)`` image, or ``(N, H, W, C)`` batch, to width ``w`` and height ``h`` with
    OpenCV's interpolation code ``interp`` (0-4), keeping its dtype (integers rounded and saturated): the
    computation behind :func:`imresize` and the Gluon transforms, through OpenCV, else NumPy (0, 1) or Pillow.

    Raises:
        ValueError: a bad size or code, or not an image. ImportError: bicubic, area or Lanczos resizing
            without OpenCV or Pillow.
    """
    w, h = _positive("imresize", "w", w), _positive("imresize", "h", h)
    interp = _check_interp("imresize", interp)
    if a.ndim == 4:
        return np.stack([resize_array(img, w, h, interp) for img in a]) if len(a) else np.zeros(
            (0, h, w, a.shape[3]), a.dtype)
    _image("imresize", a)
    if a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(f"imresize: cannot resize an empty image of shape {a.shape}")
    cv2 = _cv2()
    if cv2 is not None:
        return _cv2_resize(cv2, a, w, h, interp)
    if interp in (0, 1):
        return _numpy_resize(a, w, h, interp)
    if _pillow() is None:
        raise ImportError(f"{INTERPOLATIONS[interp]} resizing (interp={interp}) needs OpenCV or Pillow: pip install "
                          "opencv-python-headless (or pillow)")
    return _pillow_resize(a, w, h, interp)


def imresize(src: Any, w: int, h: int, interp: int = 1, out: Any = None) -> NDTensor:
    """Resize an ``(H, W, C)`` image to width ``w`` and height ``h`` (MXNet's ``mx.image.imresize``).

    Args:
        src: the image (mxlite or NumPy array, any numeric dtype; the result keeps it).
        w, h: the new width and height in pixels (>= 1).
        interp: 0 nearest, 1 bilinear (default), 2 bicubic, 3 area, 4 Lanczos.
        out: an array to write the result into.

    Raises:
        ValueError: a bad size or code, or not an image.
    """
    return _into(out, resize_array(_host(src), w, h, interp), src, "imresize")


def _get_interp_method(interp: int, sizes: Sequence[int] = ()) -> int:
    """The code 0-4 to use: 9 picks by ``sizes`` = (old h, old w, new h, new w) (bicubic to enlarge both
    sides, area to shrink both, else bilinear; bicubic without sizes), 10 picks one of 0-4 at random."""
    if interp == 9:
        if not sizes:
            return 2
        oh, ow, nh, nw = sizes
        if nh > oh and nw > ow:
            return 2
        return 3 if nh < oh and nw < ow else 1
    if interp == 10:
        return int(_random.host_generator().integers(0, 5))
    if isinstance(interp, bool) or interp not in INTERPOLATIONS:
        raise ValueError(f"interp must be one of 0-4 {INTERPOLATIONS}, 9 (auto) or 10 (random), got {interp!r}")
    return int(interp)


def scale_down(src_size: Sequence[int], size: Sequence[int]) -> tuple[int, int]:
    """Shrink a crop ``size`` (w, h), keeping its aspect ratio, until it fits ``src_size`` (w, h)."""
    w, h = size
    sw, sh = src_size
    if sh < h:
        w, h = float(w * sh) / h, sh
    if sw < w:
        w, h = sw, float(h * sw) / w
    return int(w), int(h)


def resize_short(src: Any, size: int, interp: int = 2) -> NDTensor:
    """Resize so that the shorter edge is ``size`` pixels, the longer one in proportion (rounded down).

    Raises:
        ValueError: ``size`` < 1, a bad ``interp``, or not an image.
    """
    a = _host(src)
    _image("resize_short", a)
    size = _positive("resize_short", "size", size)
    h, w = a.shape[:2]
    new_h, new_w = (size * h // w, size) if h > w else (size, size * w // h)
    return _like(resize_array(a, new_w, new_h, _get_interp_method(interp, (h, w, new_h, new_w))), src)


def fixed_crop(src: Any, x0: int, y0: int, w: int, h: int, size: Sequence[int] | None = None,
               interp: int = 2) -> NDTensor:
    """The ``w`` x ``h`` region at column ``x0``, row ``y0``, resized to ``size`` (w, h) when given.

    Raises:
        ValueError: a region that does not lie inside the image, or not an image.
    """
    a = _host(src)
    _image("fixed_crop", a)
    if not (0 <= x0 and 0 <= y0 and w >= 1 and h >= 1 and x0 + w <= a.shape[1] and y0 + h <= a.shape[0]):
        raise ValueError(f"fixed_crop: the region x0={x0}, y0={y0}, w={w}, h={h} does not lie inside the "
                         f"{a.shape[1]}x{a.shape[0]} (w x h) image")
    out = a[y0:y0 + h, x0:x0 + w]
    if size is not None and (w, h) != tuple(size):
        out = resize_array(out, size[0], size[1], _get_interp_method(interp, (h, w, size[1], size[0])))
    return _like(out, src)


def random_crop(src: Any, size: Sequence[int], interp: int = 2) -> tuple[NDTensor, tuple[int, int, int, int]]:
    """A crop of ``size`` (w, h) at a random position; a smaller image gives its largest region of that aspect
    ratio, resized up. Returns ``(image, (x0, y0, w, h))``, the region in the source image."""
    a = _host(src)
    _image("random_crop", a)
    h, w = a.shape[:2]
    new_w, new_h = scale_down((w, h), size)
    gen = _random.host_generator()
    x0, y0 = int(gen.integers(0, w - new_w + 1)), int(gen.integers(0, h - new_h + 1))
    return fixed_crop(src, x0, y0, new_w, new_h, size, interp), (x0, y0, new_w, new_h)


def center_crop(src: Any, size: Sequence[int], interp: int = 2) -> tuple[NDTensor, tuple[int, int, int, int]]:
    """The centred crop of ``size`` (w, h) (a smaller image: its largest centred region of that aspect ratio,
    resized up). Returns ``(image, (x0, y0, w, h))``."""
    a = _host(src)
    _image("center_crop", a)
    h, w = a.shape[:2]
    new_w, new_h = scale_down((w, h), size)
    x0, y0 = int((w - new_w) / 2), int((h - new_h) / 2)
    return fixed_crop(src, x0, y0, new_w, new_h, size, interp), (x0, y0, new_w, new_h)


def random_size_crop(src: Any, size: Sequence[int], area: float | Sequence[float], ratio: Sequence[float],
                     interp: int = 2) -> tuple[NDTensor, tuple[int, int, int, int]]:
    """A crop of random area (a fraction of the image's, uniform in ``area``, or in ``[area, 1]`` for a number)
    and aspect ratio w/h (log-uniform in ``ratio``), resized to ``size`` (w, h); up to 10 draws, else the
    centre crop. Returns ``(image, (x0, y0, w, h))``.

    Raises:
        ValueError: an area outside (0, 1] or a ratio that is not positive.
    """
    a = _host(src)
    _image("random_size_crop", a)
    low, high = (float(area), 1.0) if isinstance(area, (int, float)) else (float(area[0]), float(area[1]))
    if not 0 < low <= high <= 1:
        raise ValueError(f"random_size_crop: area must lie in (0, 1] (low <= high), got {area!r}")
    if not 0 < ratio[0] <= ratio[1]:
        raise ValueError(f"random_size_crop: ratio must be (low, high) with 0 < low <= high, got {ratio!r}")
    h, w = a.shape[:2]
    gen = _random.host_generator()
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = gen.uniform(low, high) * h * w
        new_ratio = math.exp(gen.uniform(*log_ratio))
        new_w, new_h = int(round(math.sqrt(target * new_ratio))), int(round(math.sqrt(target / new_ratio)))
        if 1 <= new_w <= w and 1 <= new_h <= h:
            x0, y0 = int(gen.integers(0, w - new_w + 1)), int(gen.integers(0, h - new_h + 1))
            return fixed_crop(src, x0, y0, new_w, new_h, size, interp), (x0, y0, new_w, new_h)
    return center_crop(src, size, interp)


def color_normalize(src: Any, mean: Any, std: Any = None) -> NDTensor:
    """``(src - mean) / std`` per channel (either may be None), as a float array (float32 unless ``src`` is
    float64)."""
    a = _host(src)
    dtype = a.dtype if a.dtype == np.float64 else np.dtype(np.float32)
    out = a.astype(dtype)
    if mean is not None:
        out = out - _host(mean).astype(dtype)
    if std is not None:
        out = out / _host(std).astype(dtype)
    return _like(out, src)


_BORDERS = {0: "constant", 1: "edge", 2: "symmetric", 3: "wrap", 4: "reflect"}  # OpenCV's codes -> np.pad's


def copyMakeBorder(src: Any, top: int, bot: int, left: int, right: int, type: int = 0,  # noqa: N802, A002
                   value: float = 0.0, values: Sequence[float] = (), out: Any = None) -> NDTensor:
    """Pad an ``(H, W, C)`` image by ``top``/``bot`` rows and ``left``/``right`` columns (OpenCV's
    ``copyMakeBorder``, MXNet's names).

    Args:
        type: OpenCV's border codes: 0 constant (``values``, one per channel, else ``value``), 1 replicate
            (``aaa|abc``), 2 reflect (``cba|abc``), 3 wrap (``def|abcdef``), 4 reflect-101 (``dcb|abcd``).

    Raises:
        ValueError: a negative margin, an unknown ``type``, or more ``values`` than channels.
    """
    a = _host(src)
    _image("copyMakeBorder", a)
    margins = {"top": top, "bot": bot, "left": left, "right": right}
    if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 for v in margins.values()):
        raise ValueError(f"copyMakeBorder: margins must be integers >= 0, got {margins}")
    if type not in _BORDERS:
        raise ValueError(f"copyMakeBorder: type must be one of {_BORDERS} (OpenCV's border codes), got {type!r}")
    pad = ((top, bot), (left, right), (0, 0))
    if _BORDERS[type] != "constant":
        return _into(out, np.pad(a, pad, mode=_BORDERS[type]), src, "copyMakeBorder")
    fill = list(values) if len(values) else [value]
    if len(fill) == 1:
        fill = fill * a.shape[2]
    if len(fill) != a.shape[2]:
        raise ValueError(f"copyMakeBorder: {len(fill)} fill values for a {a.shape[2]}-channel image: give one "
                         "value, or one per channel")
    padded = np.empty((a.shape[0] + top + bot, a.shape[1] + left + right, a.shape[2]), a.dtype)
    padded[:] = _cast_like(np.asarray(fill, np.float64), a.dtype)
    padded[top:top + a.shape[0], left:left + a.shape[1]] = a
    return _into(out, padded, src, "copyMakeBorder")


# -- augmenters ----------------------------------------------------------------------------------------------------
class Augmenter:
    """The base of the image augmenters (MXNet's ``mx.image.Augmenter``): called on an image, returns the
    augmented image; :meth:`dumps` describes it as JSON."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = {k: (_host(v).tolist() if isinstance(v, (Tensor, np.ndarray)) else v)
                        for k, v in kwargs.items()}

    def dumps(self) -> str:
        """The augmenter as JSON: ``[class name in lower case, its arguments]``."""
        return json.dumps([type(self).__name__.lower(), self._kwargs])

    def __call__(self, src: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement __call__")


class SequentialAug(Augmenter):
    """Apply the augmenters ``ts`` in order."""

    def __init__(self, ts: Sequence[Augmenter]) -> None:
        super().__init__()
        self.ts = list(ts)

    def dumps(self) -> list[Any]:  # type: ignore[override]
        """``[name, [each augmenter's dumps()]]``."""
        return [type(self).__name__.lower(), [t.dumps() for t in self.ts]]

    def __call__(self, src: Any) -> Any:
        for aug in self.ts:
            src = aug(src)
        return src


class RandomOrderAug(SequentialAug):
    """Apply the augmenters ``ts`` in a random order (a new one per call)."""

    def __call__(self, src: Any) -> Any:
        for i in _random.host_generator().permutation(len(self.ts)):
            src = self.ts[int(i)](src)
        return src


class ResizeAug(Augmenter):
    """Resize the shorter edge to ``size`` (:func:`resize_short`)."""

    def __init__(self, size: int, interp: int = 2) -> None:
        super().__init__(size=size, interp=interp)
        self.size, self.interp = size, interp

    def __call__(self, src: Any) -> NDTensor:
        return resize_short(src, self.size, self.interp)


class ForceResizeAug(Augmenter):
    """Resize to ``size`` (w, h) whatever the aspect ratio."""

    def __init__(self, size: Sequence[int], interp: int = 2) -> None:
        super().__init__(size=size, interp=interp)
        self.size, self.interp = tuple(size), interp

    def __call__(self, src: Any) -> NDTensor:
        h, w = src.shape[0], src.shape[1]
        sizes = (h, w, self.size[1], self.size[0])
        return imresize(src, self.size[0], self.size[1], _get_interp_method(self.interp, sizes))


class RandomCropAug(Augmenter):
    """A random crop of ``size`` (w, h) (:func:`random_crop`)."""

    def __init__(self, size: Sequence[int], interp: int = 2) -> None:
        super().__init__(size=size, interp=interp)
        self.size, self.interp = tuple(size), interp

    def __call__(self, src: Any) -> NDTensor:
        return random_crop(src, self.size, self.interp)[0]


class RandomSizedCropAug(Augmenter):
    """A crop of random area and aspect ratio, resized to ``size`` (:func:`random_size_crop`)."""

    def __init__(self, size: Sequence[int], area: float | Sequence[float], ratio: Sequence[float],
                 interp: int = 2) -> None:
        super().__init__(size=size, area=area, ratio=ratio, interp=interp)
        self.size, self.area, self.ratio, self.interp = tuple(size), area, tuple(ratio), interp

    def __call__(self, src: Any) -> NDTensor:
        return random_size_crop(src, self.size, self.area, self.ratio, self.interp)[0]


class CenterCropAug(Augmenter):
    """The centre crop of ``size`` (w, h) (:func:`center_crop`)."""

    def __init__(self, size: Sequence[int], interp: int = 2) -> None:
        super().__init__(size=size, interp=interp)
        self.size, self.interp = tuple(size), interp

    def __call__(self, src: Any) -> NDTensor:
        return center_crop(src, self.size, self.interp)[0]


def _float_image(src: Any) -> np.ndarray:
    a = _host(src)
    return a if np.issubdtype(a.dtype, np.floating) else a.astype(np.float32)


def _jitter(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    return float(value)


_LUMA = np.array([0.299, 0.587, 0.114])


class BrightnessJitterAug(Augmenter):
    """Multiply by ``1 + U(-brightness, brightness)`` (a float image: put :class:`CastAug` first)."""

    def __init__(self, brightness: float) -> None:
        super().__init__(brightness=brightness)
        self.brightness = _jitter("brightness", brightness)

    def __call__(self, src: Any) -> NDTensor:
        a = _float_image(src)
        alpha = 1.0 + _random.host_generator().uniform(-self.brightness, self.brightness)
        return _like((a * alpha).astype(a.dtype), src)


class ContrastJitterAug(Augmenter):
    """``alpha * x + (1 - alpha) * mean luma``, ``alpha = 1 + U(-contrast, contrast)``, on an RGB float image."""

    def __init__(self, contrast: float) -> None:
        super().__init__(contrast=contrast)
        self.contrast = _jitter("contrast", contrast)

    def __call__(self, src: Any) -> NDTensor:
        a = _float_image(src)
        alpha = 1.0 + _random.host_generator().uniform(-self.contrast, self.contrast)
        gray = 3.0 * (1.0 - alpha) / a.size * float((a * _LUMA).sum())
        return _like((a * alpha + gray).astype(a.dtype), src)


class SaturationJitterAug(Augmenter):
    """``alpha * x + (1 - alpha) * luma(x)`` per pixel, ``alpha = 1 + U(-saturation, saturation)``."""

    def __init__(self, saturation: float) -> None:
        super().__init__(saturation=saturation)
        self.saturation = _jitter("saturation", saturation)

    def __call__(self, src: Any) -> NDTensor:
        a = _float_image(src)
        alpha = 1.0 + _random.host_generator().uniform(-self.saturation, self.saturation)
        gray = (a * _LUMA).sum(axis=2, keepdims=True) * (1.0 - alpha)
        return _like((a * alpha + gray).astype(a.dtype), src)


class HueJitterAug(Augmenter):
    """Rotate the hue by ``U(-hue, hue) * 180`` degrees in YIQ space (MXNet's linear approximation)."""

    _TYIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]])
    _ITYIQ = np.array([[1.0, 0.956, 0.621], [1.0, -0.272, -0.647], [1.0, -1.107, 1.705]])

    def __init__(self, hue: float) -> None:
        super().__init__(hue=hue)
        self.hue = _jitter("hue", hue)

    def __call__(self, src: Any) -> NDTensor:
        a = _float_image(src)
        alpha = _random.host_generator().uniform(-self.hue, self.hue)
        u, w = np.cos(alpha * np.pi), np.sin(alpha * np.pi)
        rotation = np.array([[1.0, 0.0, 0.0], [0.0, u, -w], [0.0, w, u]])
        t = (self._ITYIQ @ rotation @ self._TYIQ).T
        return _like((a @ t).astype(a.dtype), src)


class ColorJitterAug(RandomOrderAug):
    """Brightness, contrast and saturation jitter (those > 0), in a random order."""

    def __init__(self, brightness: float, contrast: float, saturation: float) -> None:
        ts: list[Augmenter] = []
        if brightness > 0:
            ts.append(BrightnessJitterAug(brightness))
        if contrast > 0:
            ts.append(ContrastJitterAug(contrast))
        if saturation > 0:
            ts.append(SaturationJitterAug(saturation))
        super().__init__(ts)


class LightingAug(Augmenter):
    """AlexNet's PCA lighting noise: add ``eigvec @ (alpha * eigval)``, ``alpha ~ N(0, alphastd)`` per
    component, to every pixel."""

    def __init__(self, alphastd: float, eigval: Any, eigvec: Any) -> None:
        super().__init__(alphastd=alphastd, eigval=eigval, eigvec=eigvec)
        self.alphastd = float(alphastd)
        self.eigval, self.eigvec = np.asarray(eigval, np.float64), np.asarray(eigvec, np.float64)

    def __call__(self, src: Any) -> NDTensor:
        a = _float_image(src)
        alpha = _random.host_generator().normal(0, self.alphastd, size=(3,))
        rgb = (self.eigvec * alpha) @ self.eigval
        return _like((a + rgb).astype(a.dtype), src)


class ColorNormalizeAug(Augmenter):
    """``(x - mean) / std`` per channel (:func:`color_normalize`)."""

    def __init__(self, mean: Any, std: Any) -> None:
        super().__init__(mean=mean, std=std)
        self.mean = None if mean is None else _host(mean)
        self.std = None if std is None else _host(std)

    def __call__(self, src: Any) -> NDTensor:
        return color_normalize(src, self.mean, self.std)


class RandomGrayAug(Augmenter):
    """With probability ``p``, replace every channel by the grey ``0.21 R + 0.72 G + 0.07 B``."""

    _MAT = np.array([[0.21, 0.21, 0.21], [0.72, 0.72, 0.72], [0.07, 0.07, 0.07]])

    def __init__(self, p: float) -> None:
        super().__init__(p=p)
        self.p = float(p)

    def __call__(self, src: Any) -> Any:
        if _random.host_generator().random() < self.p:
            a = _float_image(src)
            return _like((a @ self._MAT).astype(a.dtype), src)
        return src


class HorizontalFlipAug(Augmenter):
    """Mirror the image left-right with probability ``p``."""

    def __init__(self, p: float) -> None:
        super().__init__(p=p)
        self.p = float(p)

    def __call__(self, src: Any) -> Any:
        if _random.host_generator().random() < self.p:
            return _like(_host(src)[:, ::-1], src)
        return src


class CastAug(Augmenter):
    """Cast to ``typ`` (default float32)."""

    def __init__(self, typ: Any = "float32") -> None:
        super().__init__(type=str(np.dtype(typ)))
        self.typ = np.dtype(typ)

    def __call__(self, src: Any) -> NDTensor:
        return _like(_host(src).astype(self.typ), src)


_IMAGENET_MEAN = np.array([123.68, 116.28, 103.53])
_IMAGENET_STD = np.array([58.395, 57.12, 57.375])
_PCA_EIGVAL = np.array([55.46, 4.794, 1.148])
_PCA_EIGVEC = np.array([[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140], [-0.5836, -0.6948, 0.4203]])


def _normalization(name: str, value: Any, default: np.ndarray) -> np.ndarray | None:
    if value is None or value is False:
        return None
    if value is True:
        return default
    arr = _host(value).astype(np.float64).ravel()
    if arr.size not in (1, 3):
        raise ValueError(f"CreateAugmenter: {name} must be True, None or 1 or 3 values (R, G, B), got {arr.size}")
    return arr


def CreateAugmenter(data_shape: Sequence[int], resize: int = 0, rand_crop: bool = False,  # noqa: N802
                    rand_resize: bool = False, rand_mirror: bool = False, mean: Any = None, std: Any = None,
                    brightness: float = 0, contrast: float = 0, saturation: float = 0, hue: float = 0,
                    pca_noise: float = 0, rand_gray: float = 0, inter_method: int = 2) -> list[Augmenter]:
    """MXNet's standard augmenter list for images of ``data_shape`` (C, H, W), in MXNet's order: shorter edge
    to ``resize`` (if > 0); a crop to (W, H): random-sized (``rand_resize``, which needs ``rand_crop``), random
    (``rand_crop``) or centred; a random mirror; a cast to float32; colour jitter; hue jitter; PCA lighting
    noise; random grey; normalisation (``mean``/``std`` True: ImageNet's RGB values).

    Raises:
        ValueError: ``rand_resize`` without ``rand_crop``, a ``data_shape`` that is not (C, H, W), or a
            ``mean``/``std`` that is not 1 or 3 values.
    """
    if len(data_shape) != 3:
        raise ValueError(f"CreateAugmenter: data_shape must be (channels, height, width), got {tuple(data_shape)}")
    augs: list[Augmenter] = []
    if resize > 0:
        augs.append(ResizeAug(resize, inter_method))
    crop_size = (int(data_shape[2]), int(data_shape[1]))
    if rand_resize:
        if not rand_crop:
            raise ValueError("CreateAugmenter: rand_resize=True needs rand_crop=True")
        augs.append(RandomSizedCropAug(crop_size, 0.08, (3.0 / 4.0, 4.0 / 3.0), inter_method))
    elif rand_crop:
        augs.append(RandomCropAug(crop_size, inter_method))
    else:
        augs.append(CenterCropAug(crop_size, inter_method))
    if rand_mirror:
        augs.append(HorizontalFlipAug(0.5))
    augs.append(CastAug())
    if brightness or contrast or saturation:
        augs.append(ColorJitterAug(brightness, contrast, saturation))
    if hue:
        augs.append(HueJitterAug(hue))
    if pca_noise > 0:
        augs.append(LightingAug(pca_noise, _PCA_EIGVAL, _PCA_EIGVEC))
    if rand_gray > 0:
        augs.append(RandomGrayAug(rand_gray))
    mean_values = _normalization("mean", mean, _IMAGENET_MEAN)
    std_values = _normalization("std", std, _IMAGENET_STD)
    if mean_values is not None or std_values is not None:
        augs.append(ColorNormalizeAug(mean_values, std_values))
    return augs

