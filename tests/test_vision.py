"""gluon.data.vision: transforms (MXNet's test_gluon_data_vision.py calls and values where they do not
need OpenCV; hand-derived values for resizing) and the datasets on small files in the standard formats
that the tests write themselves, downloaded from a local file:// repository."""

from __future__ import annotations

import gzip
import hashlib
import io
import struct
import tarfile

import numpy as np
import pytest

import mxlite as mx

transforms = mx.gluon.data.vision.transforms
vdatasets = mx.gluon.data.vision.datasets


# -- transforms: MXNet's test_to_tensor / test_normalize -------------------------------------------
def test_to_tensor():
    data_in = np.random.uniform(0, 255, (300, 300, 3)).astype(dtype=np.uint8)
    out_nd = transforms.ToTensor()(mx.array(data_in, dtype='uint8'))
    np.testing.assert_allclose(out_nd.asnumpy(), np.transpose(data_in.astype(dtype=np.float32) / 255.0, (2, 0, 1)),
                               rtol=1e-6)
    data_in = np.random.uniform(0, 255, (5, 30, 30, 3)).astype(dtype=np.uint8)
    out_nd = transforms.ToTensor()(mx.array(data_in, dtype='uint8'))
    np.testing.assert_allclose(out_nd.asnumpy(),
                               np.transpose(data_in.astype(dtype=np.float32) / 255.0, (0, 3, 1, 2)), rtol=1e-6)
    with pytest.raises(ValueError, match="shape"):
        transforms.ToTensor()(np.zeros((5, 5, 30, 30, 3), np.uint8))
    data_in = np.zeros((10, 20, 3)).astype(dtype=np.uint8)
    out = transforms.ToTensor()(data_in)  # NumPy in, NumPy out
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, np.transpose(np.zeros(data_in.shape, dtype=np.float32), (2, 0, 1)))
    data_in = np.full((10, 20, 3), 255).astype(dtype=np.uint8)
    out = transforms.ToTensor()(mx.array(data_in, dtype='uint8'))
    np.testing.assert_array_equal(out.asnumpy(), np.transpose(np.ones(data_in.shape, dtype=np.float32), (2, 0, 1)))


def test_normalize():
    data_in_3d = np.random.uniform(0, 1, (3, 30, 30)).astype(np.float32)
    out_nd_3d = transforms.Normalize(mean=(0, 1, 2), std=(3, 2, 1))(mx.array(data_in_3d))
    expected = data_in_3d.copy()
    expected[0] = expected[0] / 3.0
    expected[1] = (expected[1] - 1.0) / 2.0
    expected[2] = expected[2] - 2.0
    np.testing.assert_allclose(out_nd_3d.asnumpy(), expected, rtol=1e-6)
    data_in_4d = np.random.uniform(0, 1, (2, 3, 30, 30)).astype(np.float32)
    out_nd_4d = transforms.Normalize(mean=(0, 1, 2), std=(3, 2, 1))(data_in_4d)
    expected = data_in_4d.copy()
    expected[:, 0] = expected[:, 0] / 3.0
    expected[:, 1] = (expected[:, 1] - 1.0) / 2.0
    expected[:, 2] = expected[:, 2] - 2.0
    np.testing.assert_allclose(out_nd_4d, expected, rtol=1e-6)
    normalize_transformer = transforms.Normalize(mean=(0, 1, 2), std=(3, 2, 1))
    with pytest.raises(ValueError, match="shape"):
        normalize_transformer(np.zeros((5, 5, 3, 30, 30), np.float32))
    with pytest.raises(ValueError, match="4 channels"):
        normalize_transformer(np.zeros((5, 4, 30, 30), np.float32))


# -- resizing: hand-derived OpenCV-convention values -------------------------------------------------
def test_resize_bilinear_values():
    # 1x4 -> 1x2: scale 2, x_src = (x + 0.5)·2 − 0.5 = 0.5, 2.5: means of pixels (0, 1) and (2, 3).
    img = np.array([[[0], [10], [20], [40]]], dtype=np.float32)
    out = transforms.imresize(img, 2, 1)
    np.testing.assert_allclose(out[..., 0], [[5.0, 30.0]])
    # 1x2 -> 1x4 upsampling: x_src = (x + 0.5)/2 − 0.5 = −0.25→0, 0.25, 0.75, 1.25→last.
    out = transforms.imresize(np.array([[[0], [100]]], np.uint8), 4, 1)
    np.testing.assert_array_equal(out[..., 0], [[0, 25, 75, 100]])
    # nearest: floor(x · in/out)
    out = transforms.imresize(img, 2, 1, interp=0)
    np.testing.assert_array_equal(out[..., 0], [[0, 20]])


def test_resize():
    data_in = np.random.uniform(0, 255, (300, 200, 3)).astype(np.uint8)
    out = transforms.Resize(200)(mx.array(data_in, dtype='uint8'))
    assert out.shape == (200, 200, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(out.asnumpy(), transforms.imresize(data_in, 200, 200, 1))
    batch = np.random.uniform(0, 255, (3, 30, 20, 3)).astype(np.uint8)
    out_batch = transforms.Resize(20)(batch)
    for i in range(len(out_batch)):
        np.testing.assert_array_equal(transforms.imresize(batch[i], 20, 20, 1), out_batch[i])
    assert transforms.Resize((200, 100))(data_in).shape == (100, 200, 3)  # size is (width, height)
    assert transforms.Resize(150, keep_ratio=True)(data_in).shape == (225, 150, 3)
    with pytest.raises(ValueError, match="-150"):
        transforms.Resize(-150, keep_ratio=True)(data_in)
    with pytest.raises(ValueError, match=r"\(100, 100, 100\)"):
        transforms.Resize((100, 100, 100), keep_ratio=True)(data_in)
    with pytest.raises(ValueError, match="interpolation.*5"):
        transforms.Resize(10, interpolation=5)


def test_center_crop():
    img = np.arange(6 * 8 * 1, dtype=np.uint8).reshape(6, 8, 1)
    out = transforms.CenterCrop((4, 2))(img)  # (width, height)
    np.testing.assert_array_equal(out, img[2:4, 2:6])
    out = transforms.CenterCrop(10)(img)  # larger than the image: centred 6x6, resized up
    assert out.shape == (10, 10, 1)


def test_random_resized_crop_and_flips():
    mx.random.seed(3)
    img = np.random.default_rng(0).integers(0, 256, (40, 60, 3), dtype=np.uint8)
    out = transforms.RandomResizedCrop(24)(mx.array(img, dtype='uint8'))
    assert out.shape == (24, 24, 3) and out.dtype == np.uint8
    mx.random.seed(3)
    again = transforms.RandomResizedCrop(24)(img)
    np.testing.assert_array_equal(out.asnumpy(), again)  # reproducible under mx.random.seed
    np.testing.assert_array_equal(transforms.RandomFlipLeftRight(p=1.0)(img), img[:, ::-1])
    np.testing.assert_array_equal(transforms.RandomFlipTopBottom(p=1.0)(img), img[::-1])
    np.testing.assert_array_equal(transforms.RandomFlipLeftRight(p=0.0)(img), img)
    flips = [np.array_equal(transforms.RandomFlipLeftRight()(img), img) for _ in range(200)]
    assert 60 < sum(flips) < 140


def test_brightness_contrast_and_compose():
    img = np.full((4, 4, 3), 100, np.uint8)
    out = transforms.RandomBrightness(0.5)(img)
    assert out.dtype == np.uint8 and 50 <= out[0, 0, 0] <= 150 and (out == out[0, 0, 0]).all()
    img2 = np.zeros((2, 2, 3), np.uint8)
    img2[0] = 200
    out = transforms.RandomContrast(0.0)(img2)  # alpha = 1: unchanged
    np.testing.assert_array_equal(out, img2)
    with pytest.raises(ValueError, match="brightness.*-1"):
        transforms.RandomBrightness(-1)
    pipeline = transforms.Compose([transforms.Resize(8), transforms.ToTensor(),
                                   transforms.Normalize(0.5, 0.25), transforms.Cast('float16')])
    out = pipeline(mx.array(np.full((16, 16, 3), 255, np.uint8), dtype='uint8'))
    assert out.shape == (3, 8, 8) and out.dtype == np.float16
    np.testing.assert_array_equal(out.asnumpy(), np.full((3, 8, 8), 2.0, np.float16))
    hybrid = transforms.HybridCompose([transforms.ToTensor()])
    hybrid.hybridize()
    assert hybrid(np.zeros((2, 2, 1), np.uint8)).shape == (1, 2, 2)


# -- datasets on files written here --------------------------------------------------------------------
def _sha1(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


def _idx_gz(array: np.ndarray, magic: int) -> bytes:
    header = struct.pack(f">{1 + array.ndim}I", magic, *array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes())


def _mnist_files(n: int, seed: int) -> tuple[dict[str, bytes], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    return {"images": _idx_gz(images, 2051), "labels": _idx_gz(labels, 2049)}, images, labels


@pytest.mark.parametrize("cls", [vdatasets.MNIST, vdatasets.FashionMNIST])
def test_mnist_reads_downloads_and_checks_sha1(cls, tmp_path, monkeypatch):
    train, train_images, train_labels = _mnist_files(7, 0)
    test, test_images, test_labels = _mnist_files(3, 1)
    repo = tmp_path / "repo"
    folder = repo / "gluon" / "dataset" / cls._namespace
    folder.mkdir(parents=True)
    names = {"_train_data": (train, "images", "train-images-idx3-ubyte.gz"),
             "_train_label": (train, "labels", "train-labels-idx1-ubyte.gz"),
             "_test_data": (test, "images", "t10k-images-idx3-ubyte.gz"),
             "_test_label": (test, "labels", "t10k-labels-idx1-ubyte.gz")}
    for attr, (files, kind, name) in names.items():
        assert getattr(cls, attr)[0] == name
        (folder / name).write_bytes(files[kind])
        monkeypatch.setattr(cls, attr, (name, _sha1(files[kind])))
    monkeypatch.setenv("MXNET_GLUON_REPO", repo.as_uri() + "/")
    root = tmp_path / "root"
    ds = cls(root=str(root))  # nothing in root: downloaded from the repository
    assert len(ds) == 7 and len(cls(root=str(root), train=False)) == 3
    image, label = ds[4]
    assert image.shape == (28, 28, 1) and image.dtype == np.uint8 and isinstance(image, mx.Tensor)
    np.testing.assert_array_equal(image.asnumpy()[..., 0], train_images[4])
    assert label == train_labels[4] and label.dtype == np.int32
    # a corrupted local file fails its SHA-1 and is fetched again
    (root / "train-images-idx3-ubyte.gz").write_bytes(b"corrupt")
    np.testing.assert_array_equal(cls(root=str(root))[0][0].asnumpy()[..., 0], train_images[0])
    # with a transform, as in MXNet's docstring
    t = cls(root=str(root), train=False, transform=lambda d, lab: (d.astype(np.float32) / 255, lab))
    np.testing.assert_allclose(t[2][0].asnumpy()[..., 0], test_images[2] / 255, rtol=1e-6)
    assert t[2][1] == test_labels[2]


def test_published_hashes_are_mxnets():
    assert vdatasets.MNIST._train_data == ("train-images-idx3-ubyte.gz", "6c95f4b05d2bf285e1bfb0e7960c31bd3b3f8a7d")
    assert vdatasets.CIFAR10._archive_file[1] == "fab780a1e191a7eda0f345501ccd62d20f7ed891"
    assert vdatasets.CIFAR100._train_data == [("train.bin", "e207cd2e05b73b1393c74c7f5e7bea451d63e08e")]


def test_missing_file_without_network_names_the_url(tmp_path, monkeypatch):
    monkeypatch.setenv("MXNET_GLUON_REPO", (tmp_path / "empty").as_uri() + "/")
    with pytest.raises(OSError, match="train-labels-idx1-ubyte.gz"):
        vdatasets.MNIST(root=str(tmp_path / "root"))


def _cifar_records(n: int, label_bytes: int, seed: int) -> tuple[bytes, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 100, (n, label_bytes), dtype=np.uint8)
    planes = rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)
    raw = np.concatenate([labels, planes.reshape(n, -1)], axis=1).tobytes()
    return raw, planes.transpose(0, 2, 3, 1), labels


def _tar_gz(files: dict[str, bytes], prefix: str = "") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(prefix + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_cifar10_from_archive(tmp_path, monkeypatch):
    train_names = [f"data_batch_{i}.bin" for i in range(1, 6)]
    files, images, labels = {}, [], []
    for i, name in enumerate(train_names):
        files[name], im, lab = _cifar_records(2, 1, i)
        images.append(im)
        labels.append(lab[:, 0])
    files["test_batch.bin"], test_im, test_lab = _cifar_records(3, 1, 9)
    archive = _tar_gz(files, prefix="cifar-10-batches-bin/")
    repo = tmp_path / "repo" / "gluon" / "dataset" / "cifar10"
    repo.mkdir(parents=True)
    (repo / "cifar-10-binary.tar.gz").write_bytes(archive)
    monkeypatch.setattr(vdatasets.CIFAR10, "_archive_file", ("cifar-10-binary.tar.gz", _sha1(archive)))
    monkeypatch.setattr(vdatasets.CIFAR10, "_train_data", [(n, _sha1(files[n])) for n in train_names])
    monkeypatch.setattr(vdatasets.CIFAR10, "_test_data", [("test_batch.bin", _sha1(files["test_batch.bin"]))])
    monkeypatch.setenv("MXNET_GLUON_REPO", (tmp_path / "repo").as_uri())
    root = tmp_path / "root"
    ds = vdatasets.CIFAR10(root=str(root))
    assert len(ds) == 10
    image, label = ds[7]
    np.testing.assert_array_equal(image.asnumpy(), np.concatenate(images)[7])
    assert image.shape == (32, 32, 3) and label == np.concatenate(labels)[7]
    test = vdatasets.CIFAR10(root=str(root), train=False)
    assert len(test) == 3 and test[1][1] == test_lab[1, 0]
    assert sorted(p.name for p in root.iterdir() if p.suffix == ".bin") == sorted(files)


def test_cifar100_fine_and_coarse(tmp_path, monkeypatch):
    train, train_im, train_lab = _cifar_records(4, 2, 0)
    test, _, _ = _cifar_records(2, 2, 1)
    (tmp_path / "train.bin").write_bytes(train)
    (tmp_path / "test.bin").write_bytes(test)
    monkeypatch.setattr(vdatasets.CIFAR100, "_train_data", [("train.bin", _sha1(train))])
    monkeypatch.setattr(vdatasets.CIFAR100, "_test_data", [("test.bin", _sha1(test))])
    coarse = vdatasets.CIFAR100(root=str(tmp_path))
    fine = vdatasets.CIFAR100(root=str(tmp_path), fine_label=True)
    assert len(coarse) == len(fine) == 4 and len(vdatasets.CIFAR100(root=str(tmp_path), train=False)) == 2
    assert [int(coarse[i][1]) for i in range(4)] == train_lab[:, 0].tolist()
    assert [int(fine[i][1]) for i in range(4)] == train_lab[:, 1].tolist()
    np.testing.assert_array_equal(fine[3][0].asnumpy(), train_im[3])


def test_image_folder_dataset(tmp_path):
    from PIL import Image
    rng = np.random.default_rng(0)
    pixels = {}
    for cls, ext in (("cat", "png"), ("dog", "jpg")):
        (tmp_path / cls).mkdir()
        for i in range(2):
            arr = rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)
            Image.fromarray(arr).save(tmp_path / cls / f"{i}.{ext}")
            pixels[(cls, i)] = arr
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    with pytest.warns(UserWarning, match="notes.txt"):
        dataset = mx.gluon.data.vision.ImageFolderDataset(str(tmp_path))
    assert dataset.synsets == ["cat", "dog"]
    assert len(dataset.items) == 4
    image, label = dataset[1]
    assert label == 0 and image.shape == (5, 7, 3) and image.dtype == np.uint8
    np.testing.assert_array_equal(image.asnumpy(), pixels[("cat", 1)])  # PNG is lossless
    image, label = dataset[2]
    assert label == 1 and image.shape == (5, 7, 3)  # JPEG: decoded, lossy
    with pytest.warns(UserWarning, match="notes.txt"):
        grey = mx.gluon.data.vision.ImageFolderDataset(str(tmp_path), flag=0)
    assert grey[0][0].shape == (5, 7, 1)
    loader = mx.gluon.data.DataLoader(dataset.transform_first(transforms.ToTensor()), batch_size=4, num_workers=2)
    images, labels = next(iter(loader))
    assert images.shape == (4, 3, 5, 7) and labels.asnumpy().tolist() == [0, 0, 1, 1]
