"""``mxlite im2rec``: MXNet's ``tools/im2rec.py``, making image lists and packing them into RecordIO files.

Two steps, as with MXNet::

    mxlite im2rec --list --recursive data/train images/     # images/<class>/*.jpg -> data/train.lst
    mxlite im2rec --resize 256 data/train images/           # data/train*.lst -> data/train*.rec + .idx

A list file has one line per image, ``index<TAB>label(s)<TAB>path relative to root``. ``--list`` walks
``root`` (with ``--recursive``, every sub-folder is a class, labelled 0, 1, ... in sorted order, and the
mapping is printed; without it, the images directly in ``root``, label 0), shuffles the list as MXNet does
(Python's ``random`` seeded with 100: the same order as MXNet's tool) and can split it into chunks and
train/val/test parts. Packing reads every ``<prefix>*.lst`` beside the prefix and writes ``.rec``/``.idx``
files of the same name, the records in list order, each keyed by its list index.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import image, recordio

_SHUFFLE_SEED = 100  # MXNet's tools/im2rec.py


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """MXNet's im2rec options (the same names and defaults)."""
    parser.add_argument("prefix", help="prefix of the input/output .lst and .rec files")
    parser.add_argument("root", help="folder holding the images")
    listing = parser.add_argument_group("making image lists")
    listing.add_argument("--list", action="store_true",
                         help="make <prefix>.lst by walking root instead of packing <prefix>*.lst")
    listing.add_argument("--exts", nargs="+", default=[".jpeg", ".jpg", ".png"], help="image file extensions")
    listing.add_argument("--chunks", type=int, default=1, help="number of chunks to split the list into")
    listing.add_argument("--train-ratio", type=float, default=1.0, help="fraction of the images for training")
    listing.add_argument("--test-ratio", type=float, default=0.0, help="fraction of the images for testing")
    listing.add_argument("--recursive", action="store_true",
                         help="walk sub-folders, one label per folder (else only root's images, label 0)")
    listing.add_argument("--no-shuffle", dest="shuffle", action="store_false", help="keep the walk's order")
    packing = parser.add_argument_group("packing records")
    packing.add_argument("--pass-through", action="store_true", help="store the image files' bytes as they are")
    packing.add_argument("--resize", type=int, default=0, help="resize the shorter edge to this size (0: keep)")
    packing.add_argument("--center-crop", action="store_true", help="crop the centre square first")
    packing.add_argument("--quality", type=int, default=95,
                         help="JPEG quality 0-100, or PNG compression 0-9 (higher values mean 9)")
    packing.add_argument("--num-thread", type=int, default=1, help="threads encoding images (order is kept)")
    packing.add_argument("--color", type=int, default=1, choices=[-1, 0, 1],
                         help="1: colour, 0: greyscale, -1: as stored (alpha kept)")
    packing.add_argument("--encoding", default=".jpg", choices=[".jpg", ".png"], help="encoding of the records")
    packing.add_argument("--pack-label", action="store_true", help="store every label of a multi-label list")


def check(args: argparse.Namespace) -> None:
    """Raise ValueError naming the first option out of range."""
    if args.chunks < 1:
        raise ValueError(f"--chunks must be at least 1, got {args.chunks}")
    if not (0 <= args.test_ratio <= 1 and 0 <= args.train_ratio <= 1 and args.train_ratio + args.test_ratio <= 1):
        raise ValueError(f"--train-ratio and --test-ratio must lie in [0, 1] with a sum <= 1, got "
                         f"{args.train_ratio} and {args.test_ratio}")
    if args.resize < 0:
        raise ValueError(f"--resize must be >= 0, got {args.resize}")
    if args.num_thread < 1:
        raise ValueError(f"--num-thread must be at least 1, got {args.num_thread}")
    if not os.path.isdir(args.root):
        raise ValueError(f"root {args.root!r} is not a folder")


def list_images(root: str, recursive: bool, exts: list[str]) -> Iterator[tuple[int, str, int]]:
    """``(index, path relative to root, label)`` of every image, in sorted walk order."""
    exts = [e.lower() for e in exts]
    index, labels = 0, {}
    if not recursive:
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if os.path.isfile(path) and os.path.splitext(name)[1].lower() in exts:
                yield index, os.path.relpath(path, root), 0
                index += 1
        return
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            if os.path.isfile(path) and os.path.splitext(name)[1].lower() in exts:
                labels.setdefault(folder, len(labels))
                yield index, os.path.relpath(path, root), labels[folder]
                index += 1
    for folder, label in sorted(labels.items(), key=lambda item: item[1]):
        print(os.path.relpath(folder, root), label)


def write_list(path: str, items: list[tuple[Any, ...]]) -> None:
    """Write ``(index, path, label, ...)`` items as list lines ``index<TAB>labels<TAB>path``."""
    with open(path, "w") as out:
        for item in items:
            out.write("\t".join([str(item[0]), *(str(v) for v in item[2:]), str(item[1])]) + "\n")


def make_lists(args: argparse.Namespace) -> list[str]:
    """``--list``: write the list file(s) and return their paths."""
    items = list(list_images(args.root, args.recursive, args.exts))
    if args.shuffle:
        random.Random(_SHUFFLE_SEED).shuffle(items)
    chunk_size = (len(items) + args.chunks - 1) // args.chunks
    written = []
    for i in range(args.chunks):
        chunk = items[i * chunk_size:(i + 1) * chunk_size]
        stem = args.prefix + (f"_{i}" if args.chunks > 1 else "")
        train, test = int(chunk_size * args.train_ratio), int(chunk_size * args.test_ratio)
        parts = {".lst": chunk} if args.train_ratio == 1.0 else {
            "_test.lst": chunk[:test] if args.test_ratio else None,
            "_val.lst": chunk[test + train:] if args.train_ratio + args.test_ratio < 1.0 else None,
            "_train.lst": chunk[test:test + train]}
        for suffix, part in parts.items():
            if part is not None:
                write_list(stem + suffix, part)
                written.append(stem + suffix)
    return written


def read_list(path: str) -> Iterator[tuple[Any, ...]]:
    """The items ``(index, path, label, ...)`` of a list file; malformed lines are reported and skipped."""
    with open(path) as f:
        for number, line in enumerate(f, 1):
            fields = [v.strip() for v in line.strip().split("\t")]
            if len(fields) < 3:
                print(f"{path} line {number}: skipped: expected index, label(s) and path, got {line.strip()!r}",
                      file=sys.stderr)
                continue
            try:
                yield (int(fields[0]), fields[-1], *(float(v) for v in fields[1:-1]))
            except ValueError as exc:
                print(f"{path} line {number}: skipped: {exc}", file=sys.stderr)


def encode(args: argparse.Namespace, item: tuple[Any, ...]) -> bytes | None:
    """One list item as a packed record, or None (reported) when its image cannot be read."""
    path = os.path.join(args.root, item[1])
    label = list(item[2:]) if len(item) > 3 and args.pack_label else item[2]
    header = recordio.IRHeader(0, label, item[0], 0)
    try:
        if args.pass_through:
            with open(path, "rb") as f:
                return recordio.pack(header, f.read())
        img = _prepare(image.decode_bgr(_read(path), args.color), args.center_crop, args.resize)
        return recordio.pack(header, image.encode_bgr(img, args.quality, args.encoding))
    except (OSError, ValueError) as exc:
        print(f"{path}: skipped: {exc}", file=sys.stderr)
        return None


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _prepare(img: Any, center_crop: bool, resize: int) -> Any:
    """MXNet's tool's square centre crop, then shorter edge to ``resize`` (bilinear)."""
    h, w = img.shape[:2]
    if center_crop:
        margin = abs(h - w) // 2
        img = img[margin:margin + w] if h > w else img[:, margin:margin + h]
        h, w = img.shape[:2]
    if resize:
        size = (resize, h * resize // w) if h > w else (w * resize // h, resize)
        squeeze = img.ndim == 2
        img = image.resize_array(img[:, :, None] if squeeze else img, size[0], size[1], 1)
        img = img[:, :, 0] if squeeze else img
    return img


def pack_list(args: argparse.Namespace, list_path: str) -> int:
    """Pack one list file into the ``.rec``/``.idx`` files beside it; returns the records written."""
    stem = os.path.splitext(list_path)[0]
    items = list(read_list(list_path))
    count = 0
    with recordio.MXIndexedRecordIO(stem + ".idx", stem + ".rec", "w") as record, \
            ThreadPoolExecutor(args.num_thread) as pool:
        for item, packed in zip(items, pool.map(lambda it: encode(args, it), items)):
            if packed is not None:
                record.write_idx(item[0], packed)
                count += 1
    print(f"{stem}.rec: {count} of {len(items)} images packed")
    return count


def run(args: argparse.Namespace) -> int:
    """Make the lists (``--list``) or pack them; returns the exit status (1 when no list file matches)."""
    args.prefix, args.root = os.path.abspath(args.prefix), os.path.abspath(args.root)
    if args.list:
        for path in make_lists(args):
            print(f"wrote {path}")
        return 0
    folder = args.prefix if os.path.isdir(args.prefix) else os.path.dirname(args.prefix)
    lists = sorted(os.path.join(folder, n) for n in os.listdir(folder)
                   if os.path.join(folder, n).startswith(args.prefix) and n.endswith(".lst"))
    if not lists:
        print(f"mxlite im2rec: no list file {args.prefix}*.lst: make one with --list", file=sys.stderr)
        return 1
    for path in lists:
        pack_list(args, path)
    return 0
