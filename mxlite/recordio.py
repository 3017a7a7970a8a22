"""MXNet's RecordIO files (``mx.recordio``): ``.rec`` record files and their ``.idx`` text index, byte for byte.

A ``.rec`` file is a sequence of records; each is written as (all words little-endian ``uint32``)::

    magic 0xced7230a | lrec | data | zero padding to a multiple of 4 bytes

``lrec`` holds the data length in its lower 29 bits and a continuation flag in its upper 3 bits: 0 for a whole
record. A record whose data holds the magic number at an offset that is a multiple of 4 is cut there, the magic
itself dropped, into parts flagged 1 (first), 2 (middle) and 3 (last), which the reader joins with the magic
between them (dmlc-core's rule, so a reader that resynchronises on the magic never starts inside a record).
A ``.idx`` file has one line per record: ``key<TAB>byte offset of the record``.

Image records (``pack``/``pack_img``) start with the 24-byte header :class:`IRHeader` (struct ``IfQQ``: flag,
label, id, id2); a flag ``n > 0`` means ``n`` float32 labels follow the header (the header's label is then 0),
then the encoded image::

    with MXIndexedRecordIO("train.idx", "train.rec", "w") as rec:
        rec.write_idx(0, pack_img(IRHeader(0, 3.0, 0, 0), bgr_image))
    header, image = unpack_img(MXIndexedRecordIO("train.idx", "train.rec", "r").read_idx(0))

Images are encoded and decoded with OpenCV (``opencv-python-headless``), else Pillow (``mxlite.image``).
"""

from __future__ import annotations

import numbers
import os
import struct
from collections import namedtuple
from typing import Any

import numpy as np

from .image import decode_bgr, encode_bgr

__all__ = ["IRHeader", "MXIndexedRecordIO", "MXRecordIO", "pack", "pack_img", "record_offsets", "unpack",
           "unpack_img"]

MAGIC = 0xCED7230A
_MAGIC_BYTES = struct.pack("<I", MAGIC)
_LENGTH_BITS = 29
_MAX_LENGTH = (1 << _LENGTH_BITS) - 1
_WHOLE, _FIRST, _MIDDLE, _LAST = 0, 1, 2, 3


def _padded(length: int) -> int:
    return (length + 3) & ~3


def _encode_parts(buf: bytes) -> list[tuple[int, bytes]]:
    """``buf`` as (continuation flag, data) parts: cut at every magic number on a 4-byte boundary."""
    cuts = [i for i in range(0, len(buf) - 3, 4) if buf[i:i + 4] == _MAGIC_BYTES]
    if not cuts:
        return [(_WHOLE, buf)]
    parts, start = [], 0
    for i in cuts:
        parts.append((_FIRST if start == 0 else _MIDDLE, buf[start:i]))
        start = i + 4
    parts.append((_LAST, buf[start:]))
    return parts


class MXRecordIO:
    """Sequential reading or writing of a RecordIO file (MXNet's ``mx.recordio.MXRecordIO``).

    Args:
        uri: path of the ``.rec`` file.
        flag: ``'r'`` to read, ``'w'`` to write (an existing file is truncated).

    A reader used in another process than the one that opened it (a forked DataLoader worker) reopens the file
    there, at its start, instead of sharing the parent's file position. Usable as a context manager.

    Raises:
        ValueError: ``flag`` is not 'r' or 'w'.
        OSError: the file cannot be opened.
    """

    def __init__(self, uri: str | os.PathLike, flag: str) -> None:
        if flag not in ("r", "w"):
            raise ValueError(f"MXRecordIO: flag must be 'r' (read) or 'w' (write), got {flag!r}")
        self.uri = os.fspath(uri)
        self.flag = flag
        self.writable = flag == "w"
        self.is_open = False
        self.pid: int | None = None
        self._file: Any = None
        self.open()

    def open(self) -> None:
        """Open the file: for writing, truncated; for reading, at its first record."""
        self._file = open(self.uri, "wb" if self.writable else "rb")  # noqa: SIM115 - closed by close()
        self.pid = os.getpid()
        self.is_open = True

    def close(self) -> None:
        """Close the file (a no-op when closed)."""
        if self.is_open:
            self._file.close()
            self.is_open = False
            self.pid = None

    def reset(self) -> None:
        """Back to the first record; a writer truncates the file to empty (as MXNet)."""
        self.close()
        self.open()

    def __enter__(self) -> MXRecordIO:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown: the file may already be gone
            pass

    def __getstate__(self) -> dict[str, Any]:
        """The state without the open file: a copy in another process reopens it (at its start)."""
        state = dict(self.__dict__)
        state["_file"] = None
        state["pid"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.is_open:
            self.is_open = False
            self.open()

    def _check_process(self) -> None:
        if not self.is_open:
            raise ValueError(f"{type(self).__name__}: {self.uri} is closed")
        if self.pid != os.getpid():
            if self.writable:
                raise RuntimeError(f"{type(self).__name__}: {self.uri} was opened for writing in process {self.pid}; "
                                   f"process {os.getpid()} may not write to it")
            self.reset()

    def write(self, buf: bytes | bytearray | memoryview) -> None:
        """Append ``buf`` as one record.

        Raises:
            ValueError: the file is open for reading or closed, or ``buf`` holds 2**29 bytes or more.
            TypeError: ``buf`` is not bytes-like (a ``str`` must be encoded first).
        """
        if not self.writable:
            raise ValueError(f"{type(self).__name__}: {self.uri} is open for reading ('r'); open it with 'w' to write")
        if isinstance(buf, str):
            raise TypeError("MXRecordIO.write: buf must be bytes, got str: encode it first (s.encode())")
        self._check_process()
        data = bytes(buf)
        if len(data) > _MAX_LENGTH:
            raise ValueError(f"MXRecordIO.write: a record holds at most {_MAX_LENGTH} bytes, got {len(data)}")
        for cflag, part in _encode_parts(data):
            self._file.write(_MAGIC_BYTES + struct.pack("<I", (cflag << _LENGTH_BITS) | len(part)))
            self._file.write(part + b"\0" * (_padded(len(part)) - len(part)))

    def read(self) -> bytes | None:
        """The next record's bytes, or None at the end of the file.

        Raises:
            ValueError: the file is open for writing, or is not a valid RecordIO file at this point (a wrong
                magic number, a truncated record or a misplaced continuation part; the message gives the offset).
        """
        if self.writable:
            raise ValueError(f"{type(self).__name__}: {self.uri} is open for writing ('w'); open it with 'r' to read")
        self._check_process()
        parts: list[bytes] = []
        while True:
            offset = self._file.tell()
            head = self._file.read(8)
            if not head and not parts:
                return None
            if len(head) < 8:
                raise ValueError(f"{self.uri}: truncated record header at byte {offset}")
            magic, lrec = struct.unpack("<II", head)
            if magic != MAGIC:
                raise ValueError(f"{self.uri}: not a RecordIO record at byte {offset}: magic number {magic:#010x}, "
                                 f"expected {MAGIC:#010x}")
            cflag, length = lrec >> _LENGTH_BITS, lrec & _MAX_LENGTH
            if (cflag in (_WHOLE, _FIRST)) != (not parts) or cflag > _LAST:
                raise ValueError(f"{self.uri}: continuation flag {cflag} out of sequence at byte {offset}")
            data = self._file.read(_padded(length))
            if len(data) < _padded(length):
                raise ValueError(f"{self.uri}: the record at byte {offset} is truncated: {length} bytes announced, "
                                 f"{len(data)} present")
            parts.append(data[:length])
            if cflag in (_WHOLE, _LAST):
                return _MAGIC_BYTES.join(parts)

    def read_at(self, offset: int) -> bytes | None:
        """The record starting at byte ``offset`` (an offset :meth:`tell` or :func:`record_offsets` gave), or None
        at the end of the file; errors as :meth:`read`."""
        if self.writable:
            raise ValueError(f"{type(self).__name__}: {self.uri} is open for writing ('w'); open it with 'r' to read")
        self._check_process()
        self._file.seek(offset)
        return self.read()

    def tell(self) -> int:
        """The byte offset where the next record will be written (or read)."""
        self._check_process()
        return self._file.tell()


class MXIndexedRecordIO(MXRecordIO):
    """A RecordIO file with its ``.idx`` index, for random access by key (MXNet's ``MXIndexedRecordIO``).

    Args:
        idx_path: path of the index file (lines ``key<TAB>offset``).
        uri: path of the ``.rec`` file.
        flag: ``'r'`` or ``'w'``.
        key_type: the type keys are converted to (default int).

    Attributes:
        keys: the keys in index order. idx: key -> byte offset.

    Raises:
        ValueError: a bad ``flag``, or (reading) an index line that is not ``key<TAB>offset``.
        OSError: a file cannot be opened.
    """

    def __init__(self, idx_path: str | os.PathLike, uri: str | os.PathLike, flag: str, key_type: type = int) -> None:
        self.idx_path = os.fspath(idx_path)
        self.idx: dict[Any, int] = {}
        self.keys: list[Any] = []
        self.key_type = key_type
        self.fidx: Any = None
        super().__init__(uri, flag)

    def open(self) -> None:
        """Open the record file and the index (reading it, or truncating it for writing)."""
        super().open()
        self.fidx = open(self.idx_path, self.flag)  # noqa: SIM115 - closed by close()
        if self.writable:
            self.idx, self.keys = {}, []
        elif not self.idx:
            self._read_index()

    def _read_index(self) -> None:
        for number, line in enumerate(self.fidx, 1):
            if not line.strip():
                continue
            fields = line.strip().split("\t")
            try:
                key, offset = self.key_type(fields[0]), int(fields[1])
            except (IndexError, ValueError) as exc:
                raise ValueError(f"{self.idx_path} line {number}: expected 'key<TAB>offset', got "
                                 f"{line.rstrip()!r}") from exc
            self.idx[key] = offset
            self.keys.append(key)

    def close(self) -> None:
        """Close the record file and the index."""
        if self.is_open:
            super().close()
            self.fidx.close()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["fidx"] = None
        return state

    def seek(self, idx: Any) -> None:
        """Move the reader to the record of key ``idx``.

        Raises:
            KeyError: no record has that key (the message names the index file).
        """
        if self.writable:
            raise ValueError(f"MXIndexedRecordIO: {self.uri} is open for writing; seek needs 'r'")
        self._check_process()
        if idx not in self.idx:
            raise KeyError(f"key {idx!r} is not in {self.idx_path} ({len(self.keys)} keys)")
        self._file.seek(self.idx[idx])

    def read_idx(self, idx: Any) -> bytes | None:
        """The record of key ``idx`` (see :meth:`seek` and :meth:`read` for the errors)."""
        self.seek(idx)
        return self.read()

    def write_idx(self, idx: Any, buf: bytes | bytearray | memoryview) -> None:
        """Append ``buf`` as a record and index it under key ``key_type(idx)``.

        Raises:
            ValueError: the key is already in the index (its first record would become unreachable), or as
                :meth:`MXRecordIO.write`.
        """
        key = self.key_type(idx)
        if key in self.idx:
            raise ValueError(f"MXIndexedRecordIO.write_idx: key {key!r} is already in {self.idx_path}")
        pos = self.tell()
        self.write(buf)
        self.fidx.write(f"{key}\t{pos}\n")
        self.idx[key] = pos
        self.keys.append(key)


def record_offsets(uri: str | os.PathLike) -> list[int]:
    """The byte offset of every record of a ``.rec`` file, read from the record headers alone (the data is
    skipped), for files without an index.

    Raises:
        ValueError: the file is not a valid RecordIO file (the message gives the offset).
    """
    path = os.fspath(uri)
    offsets, size = [], os.path.getsize(path)
    with open(path, "rb") as f:
        pos, inside = 0, False
        while pos < size:
            f.seek(pos)
            head = f.read(8)
            if len(head) < 8:
                raise ValueError(f"{path}: truncated record header at byte {pos}")
            magic, lrec = struct.unpack("<II", head)
            if magic != MAGIC:
                raise ValueError(f"{path}: not a RecordIO record at byte {pos}: magic number {magic:#010x}, "
                                 f"expected {MAGIC:#010x}")
            cflag = lrec >> _LENGTH_BITS
            if not inside:
                offsets.append(pos)
            inside = cflag in (_FIRST, _MIDDLE)
            pos += 8 + _padded(lrec & _MAX_LENGTH)
        if pos > size:
            raise ValueError(f"{path}: the last record is truncated ({pos - size} bytes missing)")
    return offsets


IRHeader = namedtuple("HEADER", ["flag", "label", "id", "id2"])
IRHeader.__doc__ = """The header of an image record (MXNet's ``IRHeader``).

Fields: ``flag`` (0, or the number of float32 labels that follow the header), ``label`` (a number, or an
array of labels), ``id`` and ``id2`` (the record's id, usually its index key; ``id2`` its higher bits, usually 0).
"""
_IR_FORMAT = "<IfQQ"
_IR_SIZE = struct.calcsize(_IR_FORMAT)


def pack(header: Any, s: bytes) -> bytes:
    """An image record: ``header`` (an :class:`IRHeader` or a 4-tuple) followed by ``s``.

    A number label is stored in the header (flag 0); an array of labels is stored after the header as float32,
    its size as the flag and 0 as the header's label.

    Raises:
        TypeError: ``s`` is not bytes-like. ValueError: an id that does not fit 64 bits.
    """
    header = IRHeader(*header)
    if not isinstance(s, (bytes, bytearray, memoryview)):
        raise TypeError(f"pack: s must be bytes, got {type(s).__name__}")
    payload = bytes(s)
    if isinstance(header.label, numbers.Number):
        header = header._replace(flag=0)
    else:
        labels = np.asarray(header.label, dtype=np.float32).ravel()
        header = header._replace(flag=labels.size, label=0)
        payload = labels.astype("<f4").tobytes() + payload
    try:
        return struct.pack(_IR_FORMAT, int(header.flag), float(header.label), int(header.id), int(header.id2)) + payload
    except struct.error as exc:
        raise ValueError(f"pack: header {tuple(header)} does not fit the record header (flag uint32, id and id2 "
                         f"uint64): {exc}") from exc


def unpack(s: bytes) -> tuple[Any, bytes]:
    """``(header, payload)`` of an image record; with a flag ``n > 0`` the header's label is the float32 array of
    the ``n`` labels that followed it.

    Raises:
        ValueError: ``s`` is shorter than the header and the labels it announces.
    """
    if len(s) < _IR_SIZE:
        raise ValueError(f"unpack: an image record starts with a {_IR_SIZE}-byte header, got {len(s)} bytes")
    header = IRHeader(*struct.unpack(_IR_FORMAT, s[:_IR_SIZE]))
    s = s[_IR_SIZE:]
    if header.flag > 0:
        if len(s) < 4 * header.flag:
            raise ValueError(f"unpack: the header announces {header.flag} float32 labels ({4 * header.flag} bytes) "
                             f"but {len(s)} bytes follow it")
        header = header._replace(label=np.frombuffer(s, "<f4", header.flag).astype(np.float32))
        s = s[4 * header.flag:]
    return header, s


def unpack_img(s: bytes, iscolor: int = -1) -> tuple[Any, np.ndarray]:
    """``(header, image)`` of an image record: the image decoded as OpenCV's ``imdecode(buf, iscolor)`` gives it
    (a NumPy uint8 array in BGR order; ``iscolor`` -1 keeps the file's channels, 0 grey ``(H, W)``, 1 colour).

    Raises:
        ValueError: the payload is not an image that can be decoded. ImportError: neither OpenCV nor Pillow.
    """
    header, payload = unpack(s)
    return header, decode_bgr(payload, iscolor)


def pack_img(header: Any, img: Any, quality: int = 95, img_fmt: str = ".jpg") -> bytes:
    """An image record holding ``img`` (``(H, W)`` or ``(H, W, 3)`` uint8 in BGR order, as OpenCV reads it)
    encoded as ``img_fmt`` ('.jpg'/'.jpeg' with JPEG ``quality`` 0-100, or '.png' with compression level
    ``quality`` 0-9, higher values meaning 9 as in OpenCV: MXNet's default 95 works for both).

    Raises:
        ValueError: an unknown format or a quality out of range. ImportError: neither OpenCV nor Pillow.
    """
    return pack(header, encode_bgr(img, quality, img_fmt))
