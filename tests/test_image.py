"""mx.image: MXNet's tests/python/unittest/test_image.py replayed on tiny images written here (decoding,
resizing, cropping, borders, normalisation, augmenters), the same interpolation codes in the Gluon
transforms, and the Pillow/NumPy path taken without OpenCV."""

from __future__ import annotations

import json

import numpy as np
import pytest

import mxlite as mx
from mxlite import image

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless (the test extra) is needed to compare with OpenCV")
transforms = mx.gluon.data.vision.transforms


@pytest.fixture
def images(tmp_path):
    """A smooth colour JPEG, a noisy PNG and a grey PNG, as files (BGR arrays as OpenCV writes them)."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:21, 0:34]
    smooth = np.stack([yy * 10, xx * 7, (yy + xx) * 4], axis=-1).astype(np.uint8)
    paths = []
    for name, img in (("smooth.jpg", smooth), ("noise.png", rng.integers(0, 256, (17, 11, 3), dtype=np.uint8)),
                      ("grey.png", rng.integers(0, 256, (9, 13), dtype=np.uint8))):
        path = str(tmp_path / name)
        assert cv2.imwrite(path, img)
        paths.append(path)
    return paths


# -- MXNet's test_image.py -----------------------------------------------------------------------------------------
def test_imread_not_found():
    with pytest.raises(FileNotFoundError, match="blah.jpg"):
        image.imread("/139810923jadjsajlskd.___adskj/blah.jpg")


def test_imread_vs_imdecode_vs_opencv(images):
    for path in images:
        with open(path, "rb") as f:
            raw = f.read()
        bgr = image.imdecode(raw, to_rgb=0)
        assert isinstance(bgr, mx.NDArray) and bgr.dtype == np.uint8
        np.testing.assert_array_equal(bgr.asnumpy(), cv2.imread(path)[:, :, :])
        rgb = image.imread(path)
        np.testing.assert_array_equal(rgb.asnumpy(), bgr.asnumpy()[:, :, ::-1])
        np.testing.assert_array_equal(image.imdecode(bytearray(raw), to_rgb=0).asnumpy(), bgr.asnumpy())
        grey = image.imread(path, flag=0)
        np.testing.assert_array_equal(grey.asnumpy()[:, :, 0], cv2.imread(path, 0))
        assert mx.img is image


def test_imdecode_empty_and_invalid_buffers():
    with pytest.raises(ValueError, match="buffer is empty"):
        image.imdecode(b"", to_rgb=0)
    with pytest.raises(ValueError, match="not an image"):
        image.imdecode(b"clearly not image content")
    with pytest.raises(TypeError, match="encode a str first"):
        image.imdecode("a string")


def test_scale_down():
    assert image.scale_down((640, 480), (720, 120)) == (640, 106)
    assert image.scale_down((360, 1000), (480, 500)) == (360, 375)
    assert image.scale_down((300, 400), (0, 0)) == (0, 0)


@pytest.mark.parametrize("interp", [0, 1, 2, 3, 4])
def test_imresize_and_resize_short_are_opencvs(images, interp):
    cv_img = cv2.imread(images[0])
    mx_img = mx.nd.array(cv_img[:, :, (2, 1, 0)])  # float32, as MXNet's test
    for new_w, new_h in ((7, 5), (50, 40), (34, 9)):
        expected = cv2.resize(cv_img.astype(np.float32), (new_w, new_h), interpolation=interp)
        out = image.imresize(mx_img, new_w, new_h, interp=interp)
        np.testing.assert_allclose(out.asnumpy()[:, :, (2, 1, 0)], expected, atol=1e-4)
        into = mx.nd.zeros((new_h, new_w, 3))
        image.imresize(mx_img, new_w, new_h, interp=interp, out=into)
        np.testing.assert_allclose(into.asnumpy()[:, :, (2, 1, 0)], expected, atol=1e-4)
    h, w = cv_img.shape[:2]
    for size in (5, 30):
        new_h, new_w = (size * h // w, size) if h > w else (size, size * w // h)
        out = image.resize_short(image.imdecode(open(images[0], "rb").read(), to_rgb=0), size, interp)
        np.testing.assert_array_equal(out.asnumpy(), cv2.resize(cv_img, (new_w, new_h), interpolation=interp))


def test_color_normalize():
    rng = np.random.default_rng(1)
    mean, std = rng.random(3) * 255, rng.random(3) + 1
    src = rng.random((12, 17, 3)) * 255.0
    out = image.color_normalize(mx.nd.array(src), mx.nd.array(mean), mx.nd.array(std))
    np.testing.assert_allclose(out.asnumpy(), (src - mean) / std, atol=1e-3)


@pytest.mark.parametrize("border", [0, 1, 2, 3, 4])
def test_copyMakeBorder_is_opencvs(images, border):
    cv_img = cv2.imread(images[1])
    top, bot, left, right = 3, 1, 2, 4
    val = [17, 99, 250]
    expected = cv2.copyMakeBorder(cv_img, top, bot, left, right, borderType=border, value=val)
    out = image.copyMakeBorder(mx.nd.array(cv_img, dtype="uint8"), top, bot, left, right, type=border, values=val)
    np.testing.assert_array_equal(out.asnumpy(), expected)
    into = mx.nd.zeros(expected.shape, dtype="uint8")
    image.copyMakeBorder(cv_img, top, bot, left, right, type=border, values=val, out=into)
    np.testing.assert_array_equal(into.asnumpy(), expected)


def test_augmenters(images):
    rng = np.random.default_rng(2)
    mean, std = rng.random(3) * 255, rng.random(3) + 1
    src = rng.random((10, 14, 3)) * 255.0
    out = image.ColorNormalizeAug(mean=mx.nd.array(mean), std=std)(mx.nd.array(src))
    np.testing.assert_allclose(out.asnumpy(), (src - mean) / std, atol=1e-3)
    augs = image.CreateAugmenter((3, 8, 8), resize=12, rand_crop=True, rand_resize=True, rand_mirror=True,
                                 mean=True, std=np.array([1.1, 1.03, 1.05]), brightness=0.1, contrast=0.1,
                                 saturation=0.1, hue=0.1, pca_noise=0.1, rand_gray=0.2, inter_method=10)
    assert [type(a).__name__ for a in augs] == [
        "ResizeAug", "RandomSizedCropAug", "HorizontalFlipAug", "CastAug", "ColorJitterAug", "HueJitterAug",
        "LightingAug", "RandomGrayAug", "ColorNormalizeAug"]
    for path in images[:2]:
        img = image.imread(path)
        for aug in augs:
            img = aug(img)
        assert img.shape == (8, 8, 3) and img.dtype == np.float32 and np.isfinite(img.asnumpy()).all()
    assert json.loads(augs[0].dumps()) == ["resizeaug", {"size": 12, "interp": 10}]
    with pytest.raises(ValueError, match="rand_resize=True needs rand_crop=True"):
        image.CreateAugmenter((3, 8, 8), rand_resize=True)


def test_crops_and_flips():
    img = np.arange(6 * 8 * 1, dtype=np.uint8).reshape(6, 8, 1)
    out, rect = image.center_crop(img, (4, 2))
    assert rect == (2, 2, 4, 2)
    np.testing.assert_array_equal(out.asnumpy(), img[2:4, 2:6])
    mx.random.seed(5)
    out, (x0, y0, w, h) = image.random_crop(img, (3, 3))
    np.testing.assert_array_equal(out.asnumpy(), img[y0:y0 + 3, x0:x0 + 3])
    np.testing.assert_array_equal(image.fixed_crop(img, 1, 2, 3, 2).asnumpy(), img[2:4, 1:4])
    with pytest.raises(ValueError, match="does not lie inside the 8x6"):
        image.fixed_crop(img, 6, 0, 3, 2)
    np.testing.assert_array_equal(image.HorizontalFlipAug(1.0)(img).asnumpy(), img[:, ::-1])


def test_random_size_crop():
    rng = np.random.default_rng(3)
    src = rng.random((40, 60, 3)) * 255.0
    ratio = (0.75, 1)
    mx.random.seed(0)
    for _ in range(10):
        out, (x0, y0, new_w, new_h) = image.random_size_crop(mx.nd.array(src), size=(60, 40), area=0.08, ratio=ratio)
        assert out.shape == (40, 60, 3)
        _, centre = image.center_crop(mx.nd.array(src), size=(60, 40))
        if (x0, y0, new_w, new_h) != centre:
            assert ratio[0] - 0.05 <= new_w / new_h <= ratio[1] + 0.05


# -- the Gluon transforms take the same codes ----------------------------------------------------------------------
@pytest.mark.parametrize("interp", [2, 3, 4])
def test_transforms_resize_bicubic_area_lanczos(interp):
    img = np.random.default_rng(4).integers(0, 256, (20, 30, 3), dtype=np.uint8)
    out = transforms.Resize((12, 9), interpolation=interp)(mx.nd.array(img, dtype="uint8"))
    np.testing.assert_array_equal(out.asnumpy(), cv2.resize(img, (12, 9), interpolation=interp))
    crop = transforms.CenterCrop(40, interpolation=interp)(img)  # larger than the image: enlarged
    np.testing.assert_array_equal(crop, cv2.resize(img[:, 5:25], (40, 40), interpolation=interp))
    assert transforms.RandomResizedCrop(8, interpolation=interp)(img).shape == (8, 8, 3)
    with pytest.raises(ValueError, match="interpolation must be one of"):
        transforms.RandomResizedCrop(8, interpolation=7)


# -- without OpenCV ------------------------------------------------------------------------------------------------
def test_without_opencv_pillow_and_numpy_take_over(images, monkeypatch):
    pytest.importorskip("PIL", reason="pillow is needed for the fallback")
    with open(images[1], "rb") as f:
        png = f.read()
    with_cv = image.imdecode(png).asnumpy()
    smooth = cv2.imread(images[0])
    cv_results = {i: cv2.resize(smooth, (50, 31), interpolation=i).astype(int) for i in range(5)}
    monkeypatch.setattr(image, "_cv2", lambda: None)
    assert image.backend() == "pillow"
    np.testing.assert_array_equal(image.imdecode(png).asnumpy(), with_cv)  # PNG decodes identically
    for interp, expected in cv_results.items():
        out = image.resize_array(smooth, 50, 31, interp).astype(int)
        # nearest/bilinear: NumPy with OpenCV's conventions (rounding may differ by 1); the rest Pillow's filters
        assert np.abs(out - expected).max() <= (1 if interp < 2 else 30), interp
    back = image.decode_bgr(image.encode_bgr(smooth, 3, ".png"))
    np.testing.assert_array_equal(back, smooth)
    monkeypatch.setattr(image, "_pillow", lambda: None)
    assert image.backend() == "numpy"
    with pytest.raises(ImportError, match="opencv-python-headless"):
        image.imdecode(png)
    with pytest.raises(ImportError, match="bicubic resizing"):
        image.resize_array(smooth, 5, 5, 2)


@pytest.mark.gpu
def test_an_image_on_a_gpu_comes_back_on_it():
    img = mx.nd.array(np.random.default_rng(5).integers(0, 256, (6, 8, 3)), ctx=mx.gpu(0), dtype="uint8")
    out = image.imresize(img, 4, 3, interp=3)
    assert out.device == mx.gpu(0) and out.shape == (3, 4, 3)
    np.testing.assert_array_equal(out.asnumpy(), cv2.resize(img.asnumpy(), (4, 3), interpolation=3))
    cropped, _ = image.center_crop(img, (4, 4))
    assert cropped.device == mx.gpu(0)
