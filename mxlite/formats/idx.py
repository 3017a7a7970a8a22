"""The IDX format of the MNIST files: a big-endian header (magic number, then one uint32 per dimension) and
the unsigned bytes, row-major. Read plain or gzip-compressed (``train-images-idx3-ubyte[.gz]``)."""

from __future__ import annotations

import gzip
import struct

import numpy as np

__all__ = ["read_idx", "IMAGES_MAGIC", "LABELS_MAGIC"]

IMAGES_MAGIC = 2051  # unsigned bytes, 3 dimensions (count, rows, columns)
LABELS_MAGIC = 2049  # unsigned bytes, 1 dimension (count)


def read_idx(path: str, magic: int, ndim: int) -> np.ndarray:
    """The uint8 array of an IDX file of ``ndim`` dimensions, gzip-compressed or not.

    Raises:
        OSError: the file cannot be read.
        ValueError: a short header, another magic number, or a size that contradicts the header (each names the
            file and what was found).
    """
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: too short for an IDX header ({len(raw)} bytes)")
    found, *dims = struct.unpack(f">{1 + ndim}I", raw[:header])
    if found != magic:
        raise ValueError(f"{path}: not an IDX file of this kind (magic number {found}, expected {magic})")
    count = int(np.prod(dims))
    if len(raw) - header != count:
        raise ValueError(f"{path}: the header gives shape {tuple(dims)} ({count} bytes) but the file holds "
                         f"{len(raw) - header}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)
