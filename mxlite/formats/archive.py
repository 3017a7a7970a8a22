"""Safe, atomic file formats: NumPy ``.npz`` archives read with ``allow_pickle=False``, and MXNet's
binary NDArray-list files (what ``mx.nd.save`` and 1.x ``save_parameters`` write; :mod:`.mxnet_params`).

Writers go to a temporary file in the destination folder, fsync it and rename it over the
target, so a crash during a save leaves the previous file intact. Readers load into memory and
report a damaged or foreign file as a :class:`ValueError` naming the file, before any caller has
changed state. An ``.npz``'s arrays are described from their headers first
(:func:`describe_arrays`), checked against the zip's sizes, and allocated only within a limit, so
a small file cannot make a reader allocate what it does not declare. Readers tell the two formats
apart by the file's first bytes (a zip archive starts with ``PK``; an MXNet file with its u64 list
magic 0x112), not by its name.

Readers also take the file's bytes (``data=``) in place of reading ``path``: a caller that has
already read and verified a file (``mx.checkpoint.load`` against its SHA-256 manifest) parses
exactly those bytes, and ``path`` only names the file in errors.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import os
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import IO, Any

import numpy as np

from ..device.copy import as_host  # re-exported: device-to-host reads live in the device layer
from ..device.staging import fsync_dir  # re-exported: the host build cache makes its writes durable too
from . import _messages, mxnet_params

__all__ = ["atomic_write", "fsync_dir", "current_umask", "file_sha256", "save_arrays", "load_arrays", "as_host",
           "is_mxnet_file", "load_mxnet_arrays", "save_mxnet_arrays", "describe_arrays", "ArraySpec",
           "memory_limit"]


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> None:
    """Call ``write(fileobj)`` on a temporary file, fsync it, then rename it to ``path``."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-" + os.path.basename(path) + ".", dir=folder)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600; a plain open() would respect the umask
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(folder)  # make the rename itself durable


def current_umask() -> int:
    """This process's umask (read from /proc where it can be, so no thread sees it changed)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no /proc: the classic read-and-restore
    os.umask(mask)
    return mask


def file_sha256(path: str | os.PathLike) -> tuple[str, int]:
    """(SHA-256 hex digest, size in bytes) of the file at ``path``."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def save_arrays(path: str | os.PathLike, arrays: Mapping[str, np.ndarray]) -> None:
    """Atomically write ``arrays`` (name -> NumPy array) as an uncompressed ``.npz`` at ``path``.

    The file name is used exactly as given (no ``.npz`` suffix is appended).
    """
    def write(f: IO[bytes]) -> None:
        np.savez(f, **{k: np.ascontiguousarray(v) for k, v in arrays.items()})

    atomic_write(path, write)


def is_mxnet_file(path: str | os.PathLike, *, data: bytes | None = None) -> bool:
    """Whether the file at ``path`` starts as MXNet's NDArray-list format does (else: npz or foreign).

    Args:
        path: the file (only named, not read, when ``data`` is given).
        data: the file's bytes, already read by the caller; None reads the first bytes of ``path``.

    Raises:
        FileNotFoundError: no such file (``data`` None). (Other errors of opening it, a folder for one,
            give False: the ``.npz`` reader then reports them as it always has.)
    """
    return mxnet_params.looks_like_mxnet(_head(path) if data is None else data[:8])


def _head(path: str | os.PathLike) -> bytes:
    """The first 8 bytes of the file at ``path``; b"" when it cannot be read (FileNotFoundError passes)."""
    try:
        with open(path, "rb") as f:
            return f.read(8)
    except FileNotFoundError:
        raise
    except OSError:
        return b""


def load_mxnet_arrays(path: str | os.PathLike, *,
                      data: bytes | None = None) -> tuple[list[str] | None, list[np.ndarray]]:
    """Read an MXNet NDArray-list file: (names, or None for an unnamed list; arrays), dense arrays only.

    Args:
        path: the file (only named in errors when ``data`` is given).
        data: the file's bytes, already read by the caller; None reads ``path``.

    Raises:
        FileNotFoundError: no such file (``data`` None).
        ValueError: a truncated or corrupt file, sparse storage, an unknown dtype, ... (the message
            names the file and what was found; see :mod:`mxlite.formats.mxnet_params`).
    """
    path = os.fspath(path)
    if data is None:
        with open(path, "rb") as f:
            data = f.read()
    return mxnet_params.decode(data, path)


def save_mxnet_arrays(path: str | os.PathLike, arrays: list[np.ndarray], names: list[str] | None = None,
                      np_shape: bool = False) -> None:
    """Atomically write ``arrays`` (named by ``names``, else an unnamed list) in MXNet's NDArray-list format.

    ``np_shape`` picks MXNet 2.x's NumPy-shape (V3) arrays instead of the 1.x (V2) ones; see
    :func:`mxlite.mxnet_params.encode`, whose TypeError and ValueError this raises before touching ``path``.
    """
    data = mxnet_params.encode(arrays, names, np_shape)
    atomic_write(path, lambda f: f.write(data))


class ArraySpec:
    """What a file declares about one of its arrays, read from its header before any of its data.

    ``name`` is the name as stored; ``shape`` and ``dtype`` are what reading it would give (``ndim``
    and ``nbytes`` follow), so a caller can refuse a file before it allocates anything.
    """

    __slots__ = ("name", "shape", "dtype")

    def __init__(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.name, self.shape, self.dtype = name, tuple(int(n) for n in shape), np.dtype(dtype)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes the array occupies once read."""
        return math.prod(self.shape) * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"ArraySpec({self.name!r}, {self.shape}, {self.dtype})"


# Deflate cannot inflate more than 1032:1 (RFC 1951: one 258-byte match per 2 bits at best); a zip entry
# claiming more has a lying size field. The slack covers headers of tiny members.
_DEFLATE_MAX_RATIO = 1032
_DEFLATE_SLACK = 1024


def memory_limit() -> int:
    """Bytes a reader may allocate for one file's arrays: this machine's physical memory (2**62 if unknown)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 2**62


def describe_arrays(path: str | os.PathLike, *, data: bytes | None = None) -> dict[str, ArraySpec]:
    """Name, shape and dtype of every array of a file :func:`load_arrays` reads, without reading the arrays.

    For an ``.npz`` only the zip directory and each member's ``.npy`` header are read, and every header
    is checked against the zip's sizes (so a member cannot inflate to more than it declares); an
    MXNet file is parsed whole (its arrays are no larger than the file). Same arguments and errors as
    :func:`load_arrays`.
    """
    path = os.fspath(path)
    head = _head(path) if data is None else data[:8]
    if mxnet_params.looks_like_mxnet(head):
        return {name: ArraySpec(name, a.shape, a.dtype) for name, a in _mxnet_named(path, data).items()}
    with _npz(path, data, head) as (_, members):
        return {name: spec for name, (spec, _) in members.items()}


def load_arrays(path: str | os.PathLike, *, data: bytes | None = None, names: Iterable[str] | None = None,
                limit: int | None = None) -> dict[str, np.ndarray]:
    """Read the arrays of an ``.npz`` file written by :func:`save_arrays`, or of a named MXNet file.

    The format is told by the file's first bytes. MXNet names come back as saved (``arg:``/``aux:``
    prefixes included). Before any array of an ``.npz`` is allocated, every member's ``.npy`` header
    must agree with the zip's sizes (a member inflates to exactly what it declares), and the arrays
    to read must fit in ``limit`` bytes: a small compressed file cannot make the reader allocate
    gigabytes it does not announce (:func:`describe_arrays` lets a caller check shapes first).

    Args:
        path: the file. With ``data`` it is not opened at all, only named in errors.
        data: the file's whole content, already read (and verified) by the caller: these bytes are
            parsed, so what is returned is exactly what the caller checked. None reads ``path``.
        names: read only these arrays (names as stored; unknown names are ignored); None: all.
        limit: the most bytes the arrays read may declare; default :func:`memory_limit`.

    Raises:
        FileNotFoundError: no such file (``data`` None).
        ValueError: the file is truncated, corrupt, not an npz archive (e.g. a zip holding
            other files than ``.npy`` arrays), holds pickled objects (never unpickled), declares
            more than ``limit`` bytes, or is an MXNet file that cannot be read (see
            :func:`load_mxnet_arrays`) or holds an unnamed list.
    """
    path = os.fspath(path)
    wanted = None if names is None else set(names)
    head = _head(path) if data is None else data[:8]
    if mxnet_params.looks_like_mxnet(head):
        return {n: a for n, a in _mxnet_named(path, data).items() if wanted is None or n in wanted}
    with _npz(path, data, head) as (archive, members):
        chosen = {n: m for n, m in members.items() if wanted is None or n in wanted}
        total = sum(spec.nbytes for spec, _ in chosen.values())
        limit = memory_limit() if limit is None else limit
        if total > limit:
            raise ValueError(f"cannot read {path!r}: its arrays declare {total} bytes, more than the {limit} bytes "
                             "a load may allocate (this machine's memory, or the caller's limit)")
        try:
            return {name: _read_member(archive, info) for name, (_, info) in chosen.items()}
        except Exception as exc:  # noqa: BLE001 - a damaged member raises anything from BadZipFile to EOFError
            raise ValueError(f"cannot read {path!r} as an mxlite .npz file ({type(exc).__name__}: "
                             f"{_messages.quote(str(exc), 200)})") from exc


def _mxnet_named(path: str, data: bytes | None) -> dict[str, np.ndarray]:
    names, arrays = load_mxnet_arrays(path, data=data)
    if names is None and arrays:
        raise ValueError(f"cannot read {path!r} as named arrays: it is an MXNet NDArray file holding an unnamed "
                         f"list of {len(arrays)} arrays (mx.nd.save of a list); load it with mx.nd.load")
    return dict(zip(names or [], arrays))


@contextlib.contextmanager
def _npz(path: str, data: bytes | None, head: bytes) -> Iterator[tuple[zipfile.ZipFile, dict[str, Any]]]:
    """The open archive and its members, ``{array name: (ArraySpec, ZipInfo)}``, every header checked."""
    if head.startswith(b"\x93NUMPY"):
        raise ValueError(f"cannot read {path!r} as an mxlite .npz file: it holds a single ndarray, not an .npz archive "
                         "of named arrays (a .npy file)")
    if head.startswith(b"\x80") and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        raise ValueError(f"cannot read {path!r} as an mxlite .npz file: it holds pickled data, which is never "
                         "unpickled")
    try:
        archive = zipfile.ZipFile(path if data is None else io.BytesIO(data))
    except FileNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 - not a zip, or a damaged one
        hint = "" if head.startswith(b"PK") else "; nor is it an MXNet NDArray file (no list magic 0x112 at its start)"
        raise ValueError(f"cannot read {path!r} as an mxlite .npz file ({type(exc).__name__}: "
                         f"{_messages.quote(str(exc), 200)}){hint}") from exc
    with archive:
        members: dict[str, Any] = {}
        try:
            infos = archive.infolist()
            foreign = [i.filename for i in infos if not i.filename.endswith(".npy")]
            if foreign:
                raise ValueError(f"it is a zip archive but not an .npz of arrays: members "
                                 f"{_messages.listing(foreign, 5)} are not .npy files")
            for info in infos:
                name = info.filename[:-4]
                if name in members:
                    raise ValueError(f"member {_messages.quote(info.filename)} appears twice")
                members[name] = (_member_spec(archive, info), info)
        except ValueError as exc:
            raise ValueError(f"cannot read {path!r} as an mxlite .npz file: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - a damaged zip raises anything from BadZipFile to EOFError
            raise ValueError(f"cannot read {path!r} as an mxlite .npz file ({type(exc).__name__}: "
                             f"{_messages.quote(str(exc), 200)})") from exc
        yield archive, members


def _member_spec(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> ArraySpec:
    """A member's ``.npy`` header, checked against the zip's sizes (raises ValueError naming the member)."""
    what = f"member {_messages.quote(info.filename)}"
    if info.compress_type == zipfile.ZIP_DEFLATED:
        if info.file_size > _DEFLATE_MAX_RATIO * info.compress_size + _DEFLATE_SLACK:
            raise ValueError(f"{what} claims to inflate {info.compress_size} bytes to {info.file_size}, more than "
                             "deflate can; the file is damaged")
    elif info.compress_type == zipfile.ZIP_STORED:
        if info.file_size != info.compress_size:
            raise ValueError(f"{what} is stored with {info.compress_size} bytes but declares {info.file_size}; "
                             "the file is damaged")
    else:
        raise ValueError(f"{what} uses zip compression method {info.compress_type}; .npz files are stored or "
                         "deflated")
    with archive.open(info) as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"{what} is .npy format version {version[0]}.{version[1]}; 1.0 and 2.0 are read")
        header = f.tell()
    if dtype.hasobject:
        raise ValueError(f"Object arrays cannot be loaded: {what} holds Python objects (dtype {dtype}), which are "
                         "never unpickled")
    spec = ArraySpec(info.filename[:-4], shape, dtype)
    if header + spec.nbytes != info.file_size:
        raise ValueError(f"{what} is damaged: its header announces {spec.nbytes} bytes of data ({spec.shape} "
                         f"{spec.dtype}), the zip holds {info.file_size - header}")
    return spec


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    with archive.open(info) as f:
        return np.lib.format.read_array(f, allow_pickle=False)
