"""Safe, atomic file formats: NumPy ``.npz`` archives read with ``allow_pickle=False``.

Writers go to a temporary file in the destination folder, fsync it and rename it over the
target, so a crash during a save leaves the previous file intact. Readers load everything into
memory and report a damaged or foreign file as a :class:`ValueError` naming the file, before
any caller has changed state.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Mapping
from typing import IO

import numpy as np

from ._copy import as_host  # re-exported: device-to-host reads live in the device layer

__all__ = ["atomic_write", "fsync_dir", "current_umask", "file_sha256", "save_arrays", "load_arrays", "as_host"]


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


def load_arrays(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read every array of an ``.npz`` file written by :func:`save_arrays`.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is truncated, corrupt, not an npz archive (e.g. a zip holding
            other files than ``.npy`` arrays), or holds pickled objects (never unpickled).
    """
    path = os.fspath(path)
    try:
        loaded = np.load(path, allow_pickle=False)
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
        raise ValueError(f"cannot read {path!r} as an mxlite .npz file ({type(exc).__name__}: {exc})") from exc
