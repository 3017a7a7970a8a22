"""MXNet 2.x's dataset and batchify "handle" tests (tests/python/unittest/test_gluon_data.py), replayed on mxlite.

MXNet 2.x can copy a dataset or a batchify function into C++ (``__mx_handle__()``) for its loader's
no-Python path. mxlite reads and batchifies in Python, so each object is its own handle; these tests check
that the handle behaves as the object does. The rest of that MXNet file is mirrored in test_gluon_data.py.
A deliberate difference keeps its MXNet test as a strict xfail that says why.
"""

import numpy as np
import pytest

import mxlite as mx
from mxlite import gluon

batchify = gluon.data.batchify


def test_dataset_filter_handle():
    """Mirrors MXNet's ``test_dataset_filter_handle``: the multiples of 10 among 0..99 through the handle."""
    handle = gluon.data.SimpleDataset(np.arange(100)).filter(lambda x: x % 10 == 0).__mx_handle__()
    assert len(handle) == 10
    assert [int(s) for s in handle] == list(range(0, 100, 10))


def test_dataset_shard_handle():
    """Mirrors MXNet's ``test_dataset_shard_handle``: 9 samples in 4 shards give 3, 2, 2, 2, covering them once."""
    a = gluon.data.SimpleDataset(np.arange(9))
    shards = [a.shard(4, i).__mx_handle__() for i in range(4)]
    assert [len(s) for s in shards] == [3, 2, 2, 2]
    assert sum(int(x) for s in shards for x in s) == 36
    assert [int(x) for x in shards[3]] == [7, 8]


def test_dataset_take_handle():
    """Mirrors MXNet's ``test_dataset_take_handle``: take(1000) and take(None) keep all 100, take(10) the first 10."""
    a = gluon.data.SimpleDataset(np.arange(100))
    assert len(a.take(1000).__mx_handle__()) == 100
    assert len(a.take(None).__mx_handle__()) == 100
    first = a.take(10).__mx_handle__()
    assert len(first) == 10
    assert sum(int(x) for x in first) == 45


def test_dataset_is_its_own_handle():
    """mxlite's handle is the dataset itself, so a transformed dataset's handle keeps the transform."""
    a = gluon.data.ArrayDataset(np.arange(4), np.arange(4) * 2).transform_first(lambda x: x + 1)
    assert a.__mx_handle__() is a
    assert a.__mx_handle__()[2] == (3, 4)


def test_batchify_stack_handle():
    """Mirrors the handle half of MXNet's ``test_batchify_stack``."""
    a = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    b = np.array([[5, 6, 7, 8], [1, 2, 3, 4]])
    fn = batchify.Stack()
    np.testing.assert_array_equal(fn.__mx_handle__()([a, b]).asnumpy(), fn([a, b]).asnumpy())
    np.testing.assert_array_equal(fn.__mx_handle__()([a, b]).asnumpy(), np.stack((a, b)))


def test_batchify_pad_and_group_handle():
    """Mirrors the handle halves of MXNet's ``test_batchify_pad`` and ``test_batchify_group``: -1 fills the
    shorter samples, and Group pads each field."""
    a = np.array([[1, 2, 3, 4], [11, 12, 13, 14]])
    b = np.array([[4, 5, 6]])
    c = np.array([[9, 10]])
    expected = np.array([[[1, 2, 3, 4], [11, 12, 13, 14]],
                         [[4, 5, 6, -1], [-1, -1, -1, -1]],
                         [[9, 10, -1, -1], [-1, -1, -1, -1]]], dtype=np.float32)
    pad = batchify.Pad(val=-1).__mx_handle__()
    np.testing.assert_array_equal(pad([a, b, c]).asnumpy(), expected)
    group = batchify.Group(batchify.Pad(val=-1), batchify.Pad(val=-1)).__mx_handle__()
    for part in group([(a, a), (b, b), (c, c)]):
        np.testing.assert_array_equal(part.asnumpy(), expected)


def test_dataloader_try_nopython_is_accepted():
    """``DataLoader(try_nopython=True)`` (MXNet's C++ loading path) loads the same batches in Python."""
    data = gluon.data.ArrayDataset(np.arange(10, dtype=np.float32))
    loader = gluon.data.DataLoader(data, batch_size=4, try_nopython=True)
    assert [b.asnumpy().tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


@pytest.fixture
def prepare_record(tmp_path):
    """MXNet's ``prepare_record`` on 6 small PNG files written here (MXNet downloads 16 JPEG test images): each packed
    with ``recordio.pack((0, i, i, 0), file bytes)`` into ``test.rec`` and its index."""
    cv2 = pytest.importorskip("cv2", reason="opencv-python-headless (the test extra) writes the images")
    folder = tmp_path / "test_images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    record = mx.recordio.MXIndexedRecordIO(str(tmp_path / "test.idx"), str(tmp_path / "test.rec"), "w")
    for i in range(6):
        path = folder / f"img{i}.png"
        cv2.imwrite(str(path), rng.integers(0, 256, (5 + i, 7, 3), dtype=np.uint8))
        record.write_idx(i, mx.recordio.pack((0, i, i, 0), path.read_bytes()))
    record.close()
    return str(tmp_path / "test.rec")


def test_recordimage_dataset(prepare_record):
    """Mirrors MXNet's ``test_recordimage_dataset``."""
    dataset = gluon.data.vision.ImageRecordDataset(prepare_record).transform(lambda x, y: (x, y))
    loader = gluon.data.DataLoader(dataset, 1)
    for i, (x, y) in enumerate(loader):
        assert x.shape[0] == 1 and x.shape[3] == 3
        assert y.asscalar() == i


def _dataset_transform_fn(x, y):
    return x, y


def _dataset_transform_first_fn(x):
    return x


def test_recordimage_dataset_with_data_loader_multiworker(prepare_record):
    """Mirrors MXNet's ``test_recordimage_dataset_with_data_loader_multiworker`` (2 workers for MXNet's 5)."""
    for dataset in (gluon.data.vision.ImageRecordDataset(prepare_record),
                    gluon.data.vision.ImageRecordDataset(prepare_record).transform(_dataset_transform_fn),
                    gluon.data.vision.ImageRecordDataset(prepare_record).transform_first(_dataset_transform_first_fn)):
        loader = gluon.data.DataLoader(dataset, 1, num_workers=2, try_nopython=None)
        for i, (x, y) in enumerate(loader):
            assert x.shape[0] == 1 and x.shape[3] == 3
            assert y.asscalar() == i


def test_image_list_dataset(prepare_record, tmp_path):
    """Mirrors MXNet's ``test_image_list_dataset``: from a list of entries and from a .lst file."""
    root = str(tmp_path / "test_images")
    imlist = sorted(p.name for p in (tmp_path / "test_images").iterdir())
    dataset = gluon.data.vision.ImageListDataset(root=root, imglist=[(0, path) for path in imlist])
    assert len(dataset) == 6
    img, label = dataset[0]
    assert len(img.shape) == 3 and label == 0
    (tmp_path / "test_images" / "list.lst").write_text("".join(f"{i}\t0\t{p}\n" for i, p in enumerate(imlist)))
    dataset = gluon.data.vision.ImageListDataset(root=root, imglist="list.lst")
    assert len(dataset) == 6
    img, label = dataset[0]
    assert img.shape == (5, 7, 3) and label == 0


def test_mx_handle_of_a_vision_transform_dataset():
    """A vision dataset's handle is itself too (MXNet's ``test_datasets_handles`` counts samples through it)."""
    images = gluon.data.ArrayDataset(mx.np.zeros((3, 4, 4, 1), dtype="uint8"), np.arange(3))
    handle = images.transform_first(gluon.data.vision.transforms.ToTensor()).__mx_handle__()
    assert len(handle) == 3
    assert handle[1][0].shape == (1, 4, 4)
