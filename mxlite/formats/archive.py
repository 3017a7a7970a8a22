"""Safe, atomic file formats: NumPy ``.npz`` archives read with ``allow_pickle=False``, and MXNet's
binary NDArray-list files (what ``mx.nd.save`` and 1.x ``save_parameters`` write; :mod:`.mxnet_params`).

Writers go to a temporary file in the destination folder, fsync it and rename it over the
target, so a crash during a save leaves the previous file intact. Readers load everything into
memory and report a damaged or foreign file as a :class:`ValueError` naming the file, before
any caller has changed state. Readers tell the two formats apart by the file's first bytes (a zip
archive starts with ``PK``; an MXNet file with its u64 list magic 0x112), not by its name.

Readers also take the file's bytes (``data=``) in place of reading ``path``: a caller that has
already read and verified a file (``mx.checkpoint.load`` against its SHA-256 manifest) parses
exactly those bytes, and ``path`` only names the file in errors.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from collections.abc import Callable, Mapping
from typing import IO

import numpy as np

from ..device.copy import as_host  # re-exported: device-to-host reads live in the device layer
from . import mxnet_params

__all__ = ["atomic_write", "fsync_dir", "current_umask", "file_sha256", "save_arrays", "load_arrays", "as_host",
           "is_mxnet_file", "load_mxnet_arrays", "save_mxnet_arrays"]


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


def fsync_dir(folder: str | os.PathLike) -> None:
    """fsync a folder, so that renames and new entries in it survive a crash (best effort)."""
    try:
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


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


def load_arrays(path: str | os.PathLike, *, data: bytes | None = None) -> dict[str, np.ndarray]:
    """Read every array of an ``.npz`` file written by :func:`save_arrays`, or of a named MXNet file.

    The format is told by the file's first bytes. MXNet names come back as saved (``arg:``/``aux:``
    prefixes included).

    Args:
        path: the file. With ``data`` it is not opened at all, only named in errors.
        data: the file's whole content, already read (and verified) by the caller: these bytes are
            parsed, so what is returned is exactly what the caller checked. None reads ``path``.

    Raises:
        FileNotFoundError: no such file (``data`` None).
        ValueError: the file is truncated, corrupt, not an npz archive (e.g. a zip holding
            other files than ``.npy`` arrays), holds pickled objects (never unpickled), or is an
            MXNet file that cannot be read (see :func:`load_mxnet_arrays`) or holds an unnamed list.
    """
    path = os.fspath(path)
    head = _head(path) if data is None else data[:8]
    if mxnet_params.looks_like_mxnet(head):
        names, arrays = load_mxnet_arrays(path, data=data)
        if names is None and arrays:
            raise ValueError(f"cannot read {path!r} as named arrays: it is an MXNet NDArray file holding an unnamed "
                             f"list of {len(arrays)} arrays (mx.nd.save of a list); load it with mx.nd.load")
        return dict(zip(names or [], arrays))
    try:
        loaded = np.load(path if data is None else io.BytesIO(data), allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise ValueError(f"holds a single {type(loaded).__name__}, not an .npz archive of named arrays")
        with loaded as archive:
            # NpzFile hands back raw bytes for members that are not .npy arrays: refuse such zips.
            foreign = [n for n in archive.zip.namelist() if not n.endswith(".npy")]
            if foreign:
                raise ValueError(f"it is a zip archive but not an .npz of arrays: members {foreign[:5]} are not "
                                 ".npy files")
            return {name: archive[name] for name in archive.files}
    except FileNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged zip raises anything from BadZipFile to NotImplementedError
        hint = "" if head.startswith(b"PK") else "; nor is it an MXNet NDArray file (no list magic 0x112 at its start)"
        raise ValueError(f"cannot read {path!r} as an mxlite .npz file ({type(exc).__name__}: {exc}){hint}") from exc
