"""Image datasets (Gluon's ``gluon.data.vision.datasets``): MNIST, Fashion-MNIST, CIFAR, image folders, image
lists (:class:`ImageListDataset`) and image RecordIO files (:class:`ImageRecordDataset`).

Each downloadable dataset reads the standard files from ``root`` (default
``$MXNET_HOME/datasets/<name>``, ``MXNET_HOME`` defaulting to ``~/.mxnet``, as in MXNet):

* MNIST / FashionMNIST: ``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``,
  ``t10k-images-idx3-ubyte.gz``, ``t10k-labels-idx1-ubyte.gz`` (gzip-compressed IDX);
* CIFAR10: ``data_batch_1.bin`` ... ``data_batch_5.bin`` and ``test_batch.bin``; CIFAR100:
  ``train.bin`` and ``test.bin`` (the binary versions: per image a label byte (two for
  CIFAR-100: coarse, fine) and 3072 bytes, the R, G and B planes of 32x32).

Every file's SHA-1 is checked against the published one. A missing file, or one whose SHA-1
differs, is downloaded (with a progress bar) from the Gluon data repository,
``$MXNET_GLUON_REPO`` (default ``https://apache-mxnet.s3-accelerate.dualstack.amazonaws.com/``)
under ``gluon/dataset/<name>/``; CIFAR comes as one ``.tar.gz`` whose ``.bin`` files are
extracted into ``root``. Nothing is unpickled: the binary formats are parsed directly.

A sample is ``(image, label)``: the image an ``(H, W, C)`` uint8 CPU :class:`~mxlite.Tensor`
(28x28x1 for MNIST, 32x32x3 for CIFAR) and the label a NumPy int32, or whatever
``transform(image, label)`` returns.
"""

from __future__ import annotations

import os
import tarfile
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ....autograd.tensor import Tensor
from ....device import cpu
from ....formats.idx import IMAGES_MAGIC, LABELS_MAGIC, read_idx
from ....image import imdecode, imread
from ....recordio import MXIndexedRecordIO, unpack
from ..dataset import Dataset
from ..download import check_sha1, download, repo_file_url

__all__ = ["CIFAR10", "CIFAR100", "FashionMNIST", "ImageFolderDataset", "ImageListDataset", "ImageRecordDataset",
           "MNIST"]


def _data_root(name: str) -> str:
    return os.path.join(os.environ.get("MXNET_HOME", os.path.join("~", ".mxnet")), "datasets", name)


class _DownloadedDataset(Dataset):
    """Images and labels held in memory; samples are ``(Tensor image, int32 label)``."""

    def __init__(self, root: str, transform: Callable[..., Any] | None) -> None:
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable or None, got {type(transform).__name__}")
        self._root = os.path.expanduser(root)
        self._transform = transform
        self._data: np.ndarray = np.zeros((0, 1, 1, 1), np.uint8)
        self._label: np.ndarray = np.zeros((0,), np.int32)
        os.makedirs(self._root, exist_ok=True)
        self._get_data()

    def _get_data(self) -> None:
        raise NotImplementedError

    def __getitem__(self, idx: int) -> Any:
        image = Tensor(self._data[idx], cpu(0))
        if self._transform is not None:
            return self._transform(image, self._label[idx])
        return image, self._label[idx]

    def __len__(self) -> int:
        return len(self._label)


class MNIST(_DownloadedDataset):
    """The MNIST handwritten digits (60000 training, 10000 test images of 28x28x1, labels 0-9).

    Args:
        root: the folder holding (or receiving) the files.
        train: the training set (True) or the test set.
        transform: called as ``transform(image, label)`` for every sample read.

    Raises:
        OSError: a file is missing and cannot be downloaded, or fails its SHA-1 check.
        ValueError: a file is not in the IDX format.
    """

    _namespace = "mnist"
    _train_data = ("train-images-idx3-ubyte.gz", "6c95f4b05d2bf285e1bfb0e7960c31bd3b3f8a7d")
    _train_label = ("train-labels-idx1-ubyte.gz", "2a80914081dc54586dbdf242f9805a6b8d2a15fc")
    _test_data = ("t10k-images-idx3-ubyte.gz", "c3a25af1f52dad7f726cce8cacb138654b760d48")
    _test_label = ("t10k-labels-idx1-ubyte.gz", "763e7fa3757d93b0cdec073cef058b2004252c17")

    def __init__(self, root: str | None = None, train: bool = True,
                 transform: Callable[..., Any] | None = None) -> None:
        self._train = bool(train)
        super().__init__(root if root is not None else _data_root(self._namespace), transform)

    def _fetch(self, name: str, sha1: str) -> str:
        return download(repo_file_url(f"gluon/dataset/{self._namespace}", name), path=self._root, sha1_hash=sha1)

    def _get_data(self) -> None:
        data, label = (self._train_data, self._train_label) if self._train else (self._test_data, self._test_label)
        label_file = self._fetch(*label)
        data_file = self._fetch(*data)
        labels = read_idx(label_file, LABELS_MAGIC, 1).astype(np.int32)
        images = read_idx(data_file, IMAGES_MAGIC, 3)
        if len(images) != len(labels):
            raise ValueError(f"{data_file} holds {len(images)} images but {label_file} {len(labels)} labels")
        self._data = images[..., None]
        self._label = labels


class FashionMNIST(MNIST):
    """Fashion-MNIST (Zalando's clothing images in MNIST's format and sizes); arguments as :class:`MNIST`."""

    _namespace = "fashion-mnist"
    _train_data = ("train-images-idx3-ubyte.gz", "0cf37b0d40ed5169c6b3aba31069a9770ac9043d")
    _train_label = ("train-labels-idx1-ubyte.gz", "236021d52f1e40852b06a4c3008d8de8aef1e40b")
    _test_data = ("t10k-images-idx3-ubyte.gz", "626ed6a7c06dd17c0eec72fa3be1740f146a2863")
    _test_label = ("t10k-labels-idx1-ubyte.gz", "17f9ab60e7257a1620f4ad76bbbaf857c3920701")


class CIFAR10(_DownloadedDataset):
    """CIFAR-10 (50000 training, 10000 test images of 32x32x3, labels 0-9), binary version.

    Args:
        root: the folder holding (or receiving) the ``.bin`` files.
        train: the training set (True) or the test set.
        transform: called as ``transform(image, label)`` for every sample read.

    Raises:
        OSError: files are missing or fail their SHA-1 check and cannot be downloaded.
        ValueError: a file's size is not a whole number of records.
    """

    _namespace = "cifar10"
    _archive_file = ("cifar-10-binary.tar.gz", "fab780a1e191a7eda0f345501ccd62d20f7ed891")
    _train_data = [("data_batch_1.bin", "aadd24acce27caa71bf4b10992e9e7b2d74c2540"),
                   ("data_batch_2.bin", "c0ba65cce70568cd57b4e03e9ac8d2a5367c1795"),
                   ("data_batch_3.bin", "1dd00a74ab1d17a6e7d73e185b69dbf31242f295"),
                   ("data_batch_4.bin", "aab85764eb3584312d3c7f65fd2fd016e36a258e"),
                   ("data_batch_5.bin", "26e2849e66a845b7f1e4614ae70f4889ae604628")]
    _test_data = [("test_batch.bin", "67eb016db431130d61cd03c7ad570b013799c88c")]
    _label_bytes = 1

    def __init__(self, root: str | None = None, train: bool = True,
                 transform: Callable[..., Any] | None = None) -> None:
        self._train = bool(train)
        super().__init__(root if root is not None else _data_root(self._namespace), transform)

    def _label_column(self) -> int:
        return 0

    def _read_batch(self, path: str) -> tuple[np.ndarray, np.ndarray]:
        record = self._label_bytes + 3072
        with open(path, "rb") as f:
            raw = f.read()
        if len(raw) % record:
            raise ValueError(f"{path}: {len(raw)} bytes is not a whole number of {record}-byte CIFAR records")
        rows = np.frombuffer(raw, dtype=np.uint8).reshape(-1, record)
        images = rows[:, self._label_bytes:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        return np.ascontiguousarray(images), rows[:, self._label_column()].astype(np.int32)

    def _get_data(self) -> None:
        wanted = self._train_data if self._train else self._test_data
        every = self._train_data + self._test_data
        if any(not os.path.exists(os.path.join(self._root, n)) or not check_sha1(os.path.join(self._root, n), s)
               for n, s in every):
            archive = download(repo_file_url(f"gluon/dataset/{self._namespace}", self._archive_file[0]),
                               path=self._root, sha1_hash=self._archive_file[1])
            self._extract(archive, {n for n, _ in every})
            for n, s in every:
                path = os.path.join(self._root, n)
                if not os.path.exists(path) or not check_sha1(path, s):
                    raise OSError(f"{path}: missing from {archive} or its SHA-1 is not {s}")
        parts = [self._read_batch(os.path.join(self._root, n)) for n, _ in wanted]
        self._data = np.concatenate([p[0] for p in parts])
        self._label = np.concatenate([p[1] for p in parts])

    def _extract(self, archive: str, names: set[str]) -> None:
        """Copy the archive's regular files named in ``names`` (by base name) into ``root``; nothing else
        is written, whatever paths the archive holds."""
        with tarfile.open(archive, "r:*") as tar:
            for member in tar.getmembers():
                base = os.path.basename(member.name)
                if member.isfile() and base in names:
                    source = tar.extractfile(member)
                    if source is None:
                        continue
                    with source, open(os.path.join(self._root, base), "wb") as out:
                        out.write(source.read())


class CIFAR100(CIFAR10):
    """CIFAR-100 (50000 training, 10000 test images of 32x32x3), binary version.

    Args:
        root, train, transform: as :class:`CIFAR10`.
        fine_label: the 100 fine classes (True) or the 20 coarse superclasses (False, MXNet's default).
    """

    _namespace = "cifar100"
    _archive_file = ("cifar-100-binary.tar.gz", "a0bb982c76b83111308126cc779a992fa506b90b")
    _train_data = [("train.bin", "e207cd2e05b73b1393c74c7f5e7bea451d63e08e")]
    _test_data = [("test.bin", "8fb6623e830365ff53cf14adec797474f5478006")]
    _label_bytes = 2

    def __init__(self, root: str | None = None, fine_label: bool = False, train: bool = True,
                 transform: Callable[..., Any] | None = None) -> None:
        self._fine_label = bool(fine_label)
        super().__init__(root, train, transform)

    def _label_column(self) -> int:
        return 1 if self._fine_label else 0


class ImageFolderDataset(Dataset):
    """Images in one sub-folder per class: ``root/<class>/<image>.png|jpg|jpeg`` (Gluon's class).

    ``synsets`` lists the class names (the sub-folders, sorted); ``items`` lists
    ``(path, label)``, label being the index in ``synsets``. Files with other extensions are
    skipped with a warning. Images are decoded when read, with Pillow (``pip install
    mxlite[vision]``), into ``(H, W, 3)`` RGB (``flag=1``) or ``(H, W, 1)`` grey (``flag=0``)
    uint8 CPU Tensors.

    Args:
        root: the folder of class folders.
        flag: 1 for colour, 0 for greyscale.
        transform: called as ``transform(image, label)`` for every sample read.

    Raises:
        FileNotFoundError: ``root`` is not a directory.
        ValueError: ``flag`` is not 0 or 1.
        ImportError: (when an image is read) Pillow is not installed.
    """

    _exts = (".jpg", ".jpeg", ".png")

    def __init__(self, root: str, flag: int = 1, transform: Callable[..., Any] | None = None) -> None:
        self._root = os.path.expanduser(root)
        if not os.path.isdir(self._root):
            raise FileNotFoundError(f"ImageFolderDataset: root {root!r} is not a directory")
        if flag not in (0, 1):
            raise ValueError(f"flag must be 0 (greyscale) or 1 (colour), got {flag!r}")
        self._flag = flag
        self._transform = transform
        self.synsets: list[str] = []
        self.items: list[tuple[str, int]] = []
        for folder in sorted(os.listdir(self._root)):
            path = os.path.join(self._root, folder)
            if not os.path.isdir(path):
                warnings.warn(f"ImageFolderDataset: ignoring {path}, which is not a directory", stacklevel=2)
                continue
            label = len(self.synsets)
            self.synsets.append(folder)
            for name in sorted(os.listdir(path)):
                filename = os.path.join(path, name)
                if os.path.splitext(name)[1].lower() not in self._exts:
                    warnings.warn(f"ImageFolderDataset: ignoring {filename}, whose extension is not one of "
                                  f"{self._exts}", stacklevel=2)
                    continue
                self.items.append((filename, label))

    def __getitem__(self, idx: int) -> Any:
        try:
            from PIL import Image
        except ImportError as exc:
            raise ImportError("ImageFolderDataset decodes images with Pillow: pip install 'mxlite[vision]'") from exc
        path, label = self.items[idx]
        with Image.open(path) as img:
            array = np.asarray(img.convert("RGB" if self._flag else "L"), dtype=np.uint8)
        if array.ndim == 2:
            array = array[..., None]
        image = Tensor(np.ascontiguousarray(array), cpu(0))
        if self._transform is not None:
            return self._transform(image, np.int32(label))
        return image, np.int32(label)

    def __len__(self) -> int:
        return len(self.items)


class ImageRecordDataset(Dataset):
    """The images of an MXNet RecordIO file (``.rec``, with its ``.idx`` index beside it), as Gluon's
    ``ImageRecordDataset``: the records written by ``mxlite im2rec``, MXNet's ``im2rec`` or
    :func:`mxlite.recordio.pack_img`.

    A sample is ``(image, label)``: the image decoded into an ``(H, W, 3)`` RGB (``flag=1``) or ``(H, W, 1)``
    grey (``flag=0``) uint8 array (:func:`mxlite.image.imdecode`), the label the record header's (a float, or a
    float32 NumPy array for records packed with several labels), or whatever ``transform(image, label)``
    returns. Sample ``i`` is the record of the ``i``-th key of the index. DataLoader worker processes each
    reopen the files.

    Args:
        filename: path of the ``.rec`` file; the index is the same path with ``.idx``.
        flag: 1 for colour, 0 for greyscale.
        transform: called as ``transform(image, label)`` for every sample read.

    Raises:
        FileNotFoundError: the ``.rec`` or ``.idx`` file does not exist.
        ValueError: ``flag`` is not 0 or 1; (when read) a record that is not an image record.
    """

    def __init__(self, filename: str, flag: int = 1, transform: Callable[..., Any] | None = None) -> None:
        if flag not in (0, 1):
            raise ValueError(f"ImageRecordDataset: flag must be 0 (greyscale) or 1 (colour), got {flag!r}")
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable or None, got {type(transform).__name__}")
        self.filename = os.path.expanduser(filename)
        self.idx_file = os.path.splitext(self.filename)[0] + ".idx"
        for path in (self.filename, self.idx_file):
            if not os.path.isfile(path):
                raise FileNotFoundError(f"ImageRecordDataset: no such file {path!r} (the dataset needs the .rec file "
                                        "and its .idx index beside it)")
        self._record = MXIndexedRecordIO(self.idx_file, self.filename, "r")
        self._flag = flag
        self._transform = transform

    def __getitem__(self, idx: int) -> Any:
        key = self._record.keys[idx]
        header, payload = unpack(self._record.read_idx(key))
        try:
            image = imdecode(payload, self._flag)
        except ValueError as exc:
            raise ValueError(f"ImageRecordDataset: {self.filename}, record {key}: {exc}") from exc
        if self._transform is not None:
            return self._transform(image, header.label)
        return image, header.label

    def __len__(self) -> int:
        return len(self._record.keys)


def _list_labels(entry: Sequence[Any]) -> np.ndarray:
    """The float32 labels of an image-list entry ``[label or labels..., path]``."""
    labels = entry[:-1] if len(entry) > 2 else entry[0]
    return np.atleast_1d(np.asarray(labels, dtype=np.float32))


class ImageListDataset(Dataset):
    """Images named by a list, with their labels (Gluon's ``ImageListDataset``).

    ``imglist`` is a list file under ``root`` (lines ``index<TAB>label(s)<TAB>path``, as ``mxlite im2rec --list``
    writes) or a list of entries ``[label or labels..., path]``; paths are relative to ``root``. A sample is
    ``(image, label)``: the image decoded with :func:`mxlite.image.imread` (``(H, W, 3)`` RGB for ``flag=1``,
    ``(H, W, 1)`` grey for 0) and the labels a float32 NumPy array.

    Raises:
        ValueError: ``imglist`` is neither a file name nor a list, an entry has no path, or a bad ``flag``.
        OSError: the list file cannot be read.
    """

    def __init__(self, root: str = ".", imglist: str | Sequence[Sequence[Any]] | None = None, flag: int = 1) -> None:
        if flag not in (0, 1):
            raise ValueError(f"ImageListDataset: flag must be 0 (greyscale) or 1 (colour), got {flag!r}")
        self._root = os.path.expanduser(root)
        self._flag = flag
        self.items: list[tuple[np.ndarray, str]] = []
        if isinstance(imglist, str):
            self._read_list(os.path.join(self._root, imglist))
        elif isinstance(imglist, (list, tuple)):
            for number, entry in enumerate(imglist):
                if not isinstance(entry, (list, tuple)) or len(entry) < 2 or not isinstance(entry[-1], str):
                    raise ValueError(f"ImageListDataset: entry {number} must be [label(s)..., path], got {entry!r}")
                self.items.append((_list_labels(entry), os.path.join(self._root, entry[-1])))
        else:
            raise ValueError(f"ImageListDataset: imglist must be a list file name or a list of [label(s)..., path] "
                             f"entries, got {type(imglist).__name__}")

    def _read_list(self, path: str) -> None:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                fields = line.strip().split("\t")
                if not line.strip():
                    continue
                if len(fields) < 3:
                    raise ValueError(f"ImageListDataset: {path} line {number}: expected index, label(s) and path")
                self.items.append((np.asarray(fields[1:-1], dtype=np.float32), os.path.join(self._root, fields[-1])))

    def __getitem__(self, idx: int) -> Any:
        label, path = self.items[idx]
        return imread(path, self._flag), label

    def __len__(self) -> int:
        return len(self.items)
