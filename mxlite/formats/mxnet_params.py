"""MXNet's binary NDArray-list format: what ``mx.nd.save``, ``mx.npx.save`` and 1.x ``save_parameters`` write.

A pure codec (bytes <-> NumPy arrays); :mod:`mxlite.formats.archive` does the file I/O. No pickle is
involved anywhere: the format is a flat binary layout, read field by field with bounds checks.

The layout, as MXNet writes it through ``dmlc::Stream`` (every integer little-endian), learnt from
MXNet's sources: ``NDArray::Save``/``Load``/``LegacyLoad`` and the list ``Save``/``Load`` in
``src/ndarray/ndarray.cc``, ``MXNDArraySave``/``MXNDArrayLoad`` in ``src/c_api/c_api.cc``,
``Tuple::Save``/``Load`` (``TShape``) in ``include/mxnet/tuple.h``, ``Context::Save``/``Load`` in
``include/mxnet/base.h``, dmlc-core's vector and string serializers, and the ``TypeFlag`` enum
and ``mshadow_sizeof`` in ``3rdparty/mshadow/mshadow/base.h``::

    file    = u64 0x112 (list magic) | u64 reserved (0)
              | u64 count | array * count
              | u64 n_names (0: an unnamed list, else == count) | (u64 length | UTF-8 bytes) * n_names
    array   = u32 0xF993FAC9 (V2: storage type) or 0xF993FACA (V3: NumPy shape semantics)
                | i32 storage type (0 dense, 1 row_sparse, 2 csr)
                | [sparse only: shape storage_shape]
                | shape | <stop here if "none"> | context | i32 dtype flag
                | [sparse only: (i32 aux dtype flag | shape aux_shape) * (1 row_sparse, 2 csr)]
                | data: itemsize * prod(shape) bytes (sparse: prod(storage_shape)) | [sparse: aux data]
            | u32 0xF993FAC8 (V1: int64 shape) | shape | <stop if "none"> | context | i32 dtype flag | data
            | u32 ndim (legacy, pre-V1: the magic *is* ndim) | u32 dim * ndim | <stop if "none"> | context
                | i32 dtype flag | data
    shape   = i32 ndim | i64 dim * ndim
    context = i32 device type (1 cpu, 2 gpu, 3 cpu_pinned, 5 cpu_shared) | i32 device id

"none" is an uninitialised NDArray, written with no context, dtype or data: ``ndim == 0`` in V2 (1.x
shapes have no 0-d arrays), ``ndim == -1`` or a dimension of -1 in V3 (NumPy semantics: ``ndim == 0``
is a scalar), ``ndim == 0`` in V1 and legacy arrays (their writers ended only a storage-less array
after its shape: a zero-size array of known shape has its context and dtype). Data is C-ordered, raw.

Dtype flags (mshadow ``TypeFlag``): 0 float32, 1 float64, 2 float16, 3 uint8, 4 int32, 5 int8,
6 int64, 7 bool, 8 int16, 9 uint16, 10 uint32, 11 uint64, 12 bfloat16. NumPy has no bfloat16, so
a bfloat16 array is read as float32 (exactly: every bfloat16 is a float32 with the low 16 bits 0)
and cannot be written.

Refused with a :class:`ValueError` naming the file and what was found: a wrong list magic, sparse
storage, an unknown storage type, array magic, dtype flag or device type, a "none" array, a
truncated file or bytes after the end, a name count that is neither 0 nor the array count, names
that are not UTF-8, and a name given twice.
"""

from __future__ import annotations

import collections
import os
import struct
from collections.abc import Mapping, Sequence

import numpy as np

from . import _messages

__all__ = ["LIST_MAGIC", "V1_MAGIC", "V2_MAGIC", "V3_MAGIC", "MXNetFormatError", "looks_like_mxnet", "decode",
           "encode", "strip_arg_aux_prefixes"]

LIST_MAGIC = 0x112          # kMXAPINDArrayListMagic (u64)
V1_MAGIC = 0xF993FAC8       # NDARRAY_V1_MAGIC: int64 TShape
V2_MAGIC = 0xF993FAC9       # NDARRAY_V2_MAGIC: + storage type
V3_MAGIC = 0xF993FACA       # NDARRAY_V3_MAGIC: + NumPy shape semantics (0-d arrays are scalars)
_HEAD = struct.pack("<Q", LIST_MAGIC)

_BFLOAT16 = 12
# flag -> (name, little-endian storage dtype); bfloat16 is stored as uint16 bit patterns
_DTYPES: dict[int, tuple[str, np.dtype]] = {
    0: ("float32", np.dtype("<f4")), 1: ("float64", np.dtype("<f8")), 2: ("float16", np.dtype("<f2")),
    3: ("uint8", np.dtype("u1")), 4: ("int32", np.dtype("<i4")), 5: ("int8", np.dtype("i1")),
    6: ("int64", np.dtype("<i8")), 7: ("bool", np.dtype("u1")), 8: ("int16", np.dtype("<i2")),
    9: ("uint16", np.dtype("<u2")), 10: ("uint32", np.dtype("<u4")), 11: ("uint64", np.dtype("<u8")),
    _BFLOAT16: ("bfloat16", np.dtype("<u2")),
}
_FLAG_OF = {np.dtype(name): flag for flag, (name, _) in _DTYPES.items() if flag != _BFLOAT16}
_STORAGE = {0: "default (dense)", 1: "row_sparse", 2: "csr"}
_NUM_AUX = {1: 1, 2: 2}     # aux arrays per sparse storage type (row_sparse: indices; csr: indptr, indices)
_DEVICES = {1: "cpu", 2: "gpu", 3: "cpu_pinned", 5: "cpu_shared"}
_LEGACY_MAX_NDIM = 32       # a legacy array's first word is its ndim; larger values are not an array at all


class MXNetFormatError(ValueError):
    """A file that is not (or not entirely) a readable MXNet NDArray list; the message says what was found."""


def looks_like_mxnet(head: bytes) -> bool:
    """Whether a file whose first bytes are ``head`` is an MXNet NDArray list (or a truncated start of one)."""
    return head[:8] == _HEAD if len(head) >= 8 else bool(head) and _HEAD.startswith(head)


def _known_flags() -> str:
    return ", ".join(f"{flag} {name}" for flag, (name, _) in _DTYPES.items())


class _Reader:
    """A cursor over the file's bytes: every read is bounds-checked and says what it was reading."""

    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = memoryview(buf), 0

    def take(self, nbytes: int, what: str) -> memoryview:
        if nbytes < 0 or self.pos + nbytes > len(self.buf):
            raise MXNetFormatError(f"truncated: {what} needs {nbytes} bytes at offset {self.pos}, the file has "
                                   f"{len(self.buf) - self.pos} left")
        out = self.buf[self.pos:self.pos + nbytes]
        self.pos += nbytes
        return out

    def unpack(self, fmt: str, what: str) -> tuple[int, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))

    def shape(self, what: str, legacy_ndim: int | None = None, np_shape: bool = False) -> tuple[int, ...] | None:
        """A TShape (i32 ndim, i64 dims), or a legacy u32 one whose ndim was already read; None: unknown ndim."""
        if legacy_ndim is not None:
            return self.unpack(f"<{legacy_ndim}I", f"{what} ({legacy_ndim} u32 dims)")
        (ndim,) = self.unpack("<i", f"{what} ndim")
        if ndim == -1 and np_shape:
            return None
        if ndim < 0:
            raise MXNetFormatError(f"{what} has ndim {ndim}")
        dims = self.unpack(f"<{ndim}q", f"{what} ({ndim} i64 dims)")
        floor = -1 if np_shape else 0  # -1: a dimension NumPy-shape semantics leaves unknown ("none")
        if any(d < floor for d in dims):
            raise MXNetFormatError(f"{what} {dims} has a negative dimension")
        return dims


def _size(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def decode(buf: bytes, source: str = "<bytes>") -> tuple[list[str] | None, list[np.ndarray]]:
    """Parse a whole MXNet NDArray-list file: (names, or None for an unnamed list; arrays).

    Every array comes back as a new C-contiguous array of the native byte order: float16/32/64,
    (u)int8/16/32/64 and bool as saved, bfloat16 widened to float32. The saved context is ignored.

    Raises:
        MXNetFormatError (a ValueError): ``"cannot read {source!r} as an MXNet NDArray file: ..."``,
            naming what was found (see the module docstring for every refusal).
    """
    try:
        return _decode(_Reader(buf))
    except MXNetFormatError as exc:
        raise MXNetFormatError(f"cannot read {source!r} as an MXNet NDArray file: {exc}") from None


def _decode(r: _Reader) -> tuple[list[str] | None, list[np.ndarray]]:
    (magic, _reserved) = r.unpack("<QQ", "the header (list magic and reserved word)")
    if magic != LIST_MAGIC:
        raise MXNetFormatError(f"list magic {magic:#x}, expected {LIST_MAGIC:#x}")
    (count,) = r.unpack("<Q", "the array count")
    if count > (len(r.buf) - r.pos) // 4:  # every array takes at least its 4-byte magic
        raise MXNetFormatError(f"truncated or corrupt: the header announces {count} arrays, more than the "
                               f"{len(r.buf) - r.pos} bytes left can hold")
    arrays: list[np.ndarray | None] = []
    refused: dict[int, str] = {}  # index -> why; reported once the names are known
    for i in range(count):
        value, why = _decode_array(r, f"array #{i} (of {count})")
        arrays.append(value)
        if why:
            refused[i] = why
    (n_names,) = r.unpack("<Q", "the name count")
    if n_names not in (0, count):
        raise MXNetFormatError(f"{n_names} names for {count} arrays (MXNet writes none or one per array)")
    names: list[str] | None = None
    if n_names:
        names = []
        for i in range(n_names):
            (length,) = r.unpack("<Q", f"the length of name #{i}")
            raw = r.take(length, f"name #{i}")
            try:
                names.append(bytes(raw).decode("utf-8"))
            except UnicodeDecodeError:
                raise MXNetFormatError(f"name #{i} ({bytes(raw[:40])!r}) is not UTF-8") from None
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise MXNetFormatError(f"the name {_messages.quote(name)} is given to two arrays")
            seen.add(name)
    if r.pos != len(r.buf):
        raise MXNetFormatError(f"{len(r.buf) - r.pos} unexpected bytes after the end of the list (offset {r.pos})")
    if refused:
        listed = [(f"{_messages.quote(names[i])} (#{i})" if names else f"#{i}") + f" {why}"
                  for i, why in refused.items()]
        more = f"; and {len(listed) - _messages.LIST_LIMIT} more" if len(listed) > _messages.LIST_LIMIT else ""
        raise MXNetFormatError("unsupported array(s): " + "; ".join(listed[:_messages.LIST_LIMIT]) + more)
    return names, arrays  # type: ignore[return-value] # no None left: "none" arrays are refused above


def _decode_array(r: _Reader, what: str) -> tuple[np.ndarray | None, str]:
    """One array: (its value, "") or (None, why it is refused) when it was skipped whole (sparse, "none")."""
    (magic,) = r.unpack("<I", f"{what}: its magic")
    stype, nad, sshape = 0, 0, ()
    if magic in (V2_MAGIC, V3_MAGIC):
        np_shape = magic == V3_MAGIC
        (stype,) = r.unpack("<i", f"{what}: its storage type")
        if stype not in _STORAGE:
            raise MXNetFormatError(f"{what} has storage type {stype}, not one MXNet defines "
                                   "(0 default, 1 row_sparse, 2 csr)")
        nad = _NUM_AUX.get(stype, 0)
        if nad:
            sshape = r.shape(f"{what}: its storage shape")
        shape = r.shape(f"{what}: its shape", np_shape=np_shape)
        none = shape is None or (-1 in shape if np_shape else len(shape) == 0)
    elif magic == V1_MAGIC:
        shape = r.shape(f"{what}: its shape")
        none = len(shape) == 0  # a zero-size array of known shape was written whole (context, dtype, no data)
    elif magic <= _LEGACY_MAX_NDIM:
        shape = r.shape(f"{what}: its shape", legacy_ndim=magic)
        none = len(shape) == 0
    else:
        raise MXNetFormatError(f"{what} starts with {magic:#010x}, not an NDArray magic "
                               f"(V1 {V1_MAGIC:#x}, V2 {V2_MAGIC:#x}, V3 {V3_MAGIC:#x}, or a legacy ndim)")
    if none:
        return None, "is an empty (uninitialised) NDArray without data"
    (dev_type, dev_id) = r.unpack("<ii", f"{what}: its context")
    if dev_type not in _DEVICES:
        raise MXNetFormatError(f"{what} has device type {dev_type}, not one MXNet defines "
                               "(1 cpu, 2 gpu, 3 cpu_pinned, 5 cpu_shared)")
    (flag,) = r.unpack("<i", f"{what}: its dtype flag")
    if flag not in _DTYPES:
        raise MXNetFormatError(f"{what} has dtype flag {flag}, not one MXNet defines ({_known_flags()})")
    name, stored = _DTYPES[flag]
    if nad:
        aux = []
        for k in range(nad):
            (aux_flag,) = r.unpack("<i", f"{what}: the dtype of its aux array #{k}")
            aux_shape = r.shape(f"{what}: the shape of its aux array #{k}")
            if aux_flag not in _DTYPES:
                raise MXNetFormatError(f"{what} has an aux array of dtype flag {aux_flag}, not one MXNet defines")
            aux.append((_DTYPES[aux_flag][1].itemsize, aux_shape))
        r.take(stored.itemsize * _size(sshape), f"{what}: its {name} values")
        for k, (itemsize, aux_shape) in enumerate(aux):
            r.take(itemsize * _size(aux_shape), f"{what}: its aux array #{k}")
        return None, (f"has {_STORAGE[stype]} storage (shape {tuple(shape)}); only dense arrays can be loaded "
                      "(call tostype('default') in MXNet before saving)")
    count = _size(shape)
    raw = r.take(stored.itemsize * count, f"{what}: its {count} {name} values of shape {tuple(shape)}")
    flat = np.frombuffer(raw, dtype=stored, count=count)
    if flag == _BFLOAT16:
        value = (flat.astype(np.uint32) << 16).view(np.float32)
    elif name == "bool":
        value = flat != 0
    else:
        value = flat.astype(stored.newbyteorder("="))  # a native-order copy, independent of the file's buffer
    try:
        return value.reshape(shape), ""
    except ValueError:  # zero elements, but a dimension beyond NumPy's size limit: (0, 2**62)
        raise MXNetFormatError(f"{what} has shape {tuple(shape)}, which NumPy cannot hold") from None


def encode(arrays: Sequence[np.ndarray], names: Sequence[str] | None = None, np_shape: bool = False) -> bytes:
    """The bytes of an MXNet NDArray-list file holding ``arrays`` (named if ``names`` is given), on cpu(0).

    ``np_shape=False`` writes V2 arrays, as MXNet 1.x's ``nd.save`` (and 2.x's outside NumPy
    semantics); ``np_shape=True`` writes V3 arrays, as 2.x's ``npx.save``. Both load in MXNet's
    Gluon ``load_parameters``; a V3 file needs NumPy semantics in MXNet's ``nd.load``.

    Raises:
        TypeError: an array whose dtype has no MXNet type flag (complex, object, ...).
        ValueError: names and arrays of different lengths, a name given twice, or a 0-d array with
            ``np_shape=False`` (MXNet's V2 layout reads ndim 0 as an uninitialised array).
    """
    labels = [_messages.quote(n) for n in names] if names is not None else [f"#{i}" for i in range(len(arrays))]
    if names is not None:
        if len(names) != len(arrays):
            raise ValueError(f"{len(names)} names for {len(arrays)} arrays")
        if len(set(names)) != len(names):
            counts = collections.Counter(names)
            twice = sorted(n for n, k in counts.items() if k > 1)
            raise ValueError("a name is given twice: " + _messages.listing(twice))
    out = [struct.pack("<QQQ", LIST_MAGIC, 0, len(arrays))]
    for label, value in zip(labels, arrays):
        value = np.asarray(value)
        flag = _FLAG_OF.get(value.dtype.newbyteorder("="))
        if flag is None:
            raise TypeError(f"array {label}: dtype {value.dtype} has no MXNet type flag (MXNet's are "
                            f"{', '.join(n for f, (n, _) in _DTYPES.items() if f != _BFLOAT16)})")
        if value.ndim == 0 and not np_shape:
            raise ValueError(f"array {label} is 0-d: MXNet's NDArray (V2) layout reads ndim 0 as an uninitialised "
                             "array; reshape it to (1,) or write the NumPy-shape (V3) layout (mx.npx.save)")
        out.append(struct.pack(f"<Iii{value.ndim}q", V3_MAGIC if np_shape else V2_MAGIC, 0, value.ndim,
                               *value.shape))
        out.append(struct.pack("<iii", 1, 0, flag))  # cpu(0), dtype flag
        out.append(np.ascontiguousarray(value).astype(_DTYPES[flag][1], copy=False).tobytes())
    if names is None:
        out.append(struct.pack("<Q", 0))
    else:
        out.append(struct.pack("<Q", len(names)))
        for name in names:
            raw = name.encode("utf-8")
            out.append(struct.pack("<Q", len(raw)) + raw)
    return b"".join(out)


def strip_arg_aux_prefixes(loaded: Mapping[str, np.ndarray], source: str | os.PathLike) -> dict[str, np.ndarray]:
    """``loaded`` with MXNet's ``arg:``/``aux:`` prefixes (files saved from a Module or symbol) removed.

    MXNet's Gluon loaders (``ParameterDict.load``, ``Block.load_dict``) strip them the same way.

    Raises:
        ValueError: two names that become the same (``arg:w`` and ``w``), naming both and the file.
    """
    out: dict[str, np.ndarray] = {}
    origin: dict[str, str] = {}
    for key, value in loaded.items():
        name = key[4:] if key.startswith(("arg:", "aux:")) else key
        if name in out:
            first, second, both = (_messages.quote(n) for n in (origin[name], key, name))
            raise ValueError(f"cannot load parameters from {os.fspath(source)!r}: {first} and {second} both name "
                             f"parameter {both} once MXNet's arg:/aux: prefixes are removed")
        out[name], origin[name] = value, key
    return out
