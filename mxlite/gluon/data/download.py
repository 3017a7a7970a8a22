"""Downloading data files with a SHA-1 check (Gluon's ``gluon.utils.download`` and ``check_sha1``).

The datasets in :mod:`mxlite.gluon.data.vision` fetch their files with :func:`download` from
``$MXNET_GLUON_REPO`` (default ``https://apache-mxnet.s3-accelerate.dualstack.amazonaws.com/``),
the repository MXNet's Gluon uses, so a local mirror works by pointing that variable at it
(``file:///data/mirror/`` included).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

from tqdm import tqdm

from ...formats.archive import current_umask

__all__ = ["check_sha1", "download", "repo_file_url"]

_DEFAULT_REPO = "https://apache-mxnet.s3-accelerate.dualstack.amazonaws.com/"


def check_sha1(filename: str, sha1_hash: str) -> bool:
    """Whether the SHA-1 of the file's contents is ``sha1_hash`` (40 hex digits, any case).

    Raises:
        FileNotFoundError: ``filename`` does not exist.
    """
    sha1 = hashlib.sha1()
    with open(filename, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha1.update(chunk)
    return sha1.hexdigest() == sha1_hash.lower()


def repo_file_url(namespace: str, filename: str) -> str:
    """URL of ``filename`` in ``namespace`` of the Gluon data repository (``$MXNET_GLUON_REPO``)."""
    repo = os.environ.get("MXNET_GLUON_REPO", _DEFAULT_REPO)
    if not repo.endswith("/"):
        repo += "/"
    return f"{repo}{namespace}/{filename}"


def download(url: str, path: str | None = None, overwrite: bool = False, sha1_hash: str | None = None,
             retries: int = 5, verify_ssl: bool = True, progress: bool = True) -> str:
    """Download ``url`` to a file and return the file's path (Gluon's ``download``).

    The data is written to a temporary file next to the target and renamed into place only
    when complete (and, with ``sha1_hash``, only when its SHA-1 matches), so an interrupted
    download never leaves a partial file under the final name. A progress bar (tqdm) shows the
    bytes received when the server gives the size.

    Args:
        url: an ``http(s)://`` or ``file://`` URL.
        path: the target file, or an existing directory to put it in (default: the URL's file
            name in the current directory).
        overwrite: download even when the file exists (and matches ``sha1_hash``).
        sha1_hash: the expected SHA-1 (40 hex digits); an existing file that does not match is
            downloaded again.
        retries: attempts after the first one failed, an integer >= 0.
        verify_ssl: check the server's certificate.
        progress: show the progress bar.

    Raises:
        ValueError: ``retries`` < 0.
        OSError: every attempt failed (the message names the URL and the last error), or the
            downloaded data does not have ``sha1_hash``.
    """
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be an integer >= 0, got {retries!r}")
    name = url.split("/")[-1]
    if path is None:
        fname = name
    else:
        path = os.path.expanduser(path)
        fname = os.path.join(path, name) if os.path.isdir(path) else path
    if not overwrite and os.path.exists(fname) and (sha1_hash is None or check_sha1(fname, sha1_hash)):
        return fname
    dirname = os.path.dirname(os.path.abspath(fname))
    os.makedirs(dirname, exist_ok=True)
    context: Any = None
    if not verify_ssl:
        context = ssl._create_unverified_context()  # noqa: S323 - the caller asked for it
    last: Exception | None = None
    for attempt in range(retries + 1):
        try:
            _fetch(url, fname, dirname, sha1_hash, context, progress)
            return fname
        except (urllib.error.URLError, OSError) as exc:
            last = exc
            if isinstance(exc, _HashMismatch):
                break
            if attempt < retries:
                time.sleep(min(2.0**attempt * 0.1, 2.0))
    raise OSError(f"download of {url} to {fname} failed after {retries + 1} attempt(s): {last}") from last


class _HashMismatch(OSError):
    """The downloaded data does not have the expected SHA-1."""


def _fetch(url: str, fname: str, dirname: str, sha1_hash: str | None, context: Any, progress: bool) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".download-", dir=dirname)
    os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600; the file should be as a plain open() makes it
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, context=context) as response:  # noqa: S310
            total = response.headers.get("Content-Length") if hasattr(response, "headers") else None
            with tqdm(total=int(total) if total else None, unit="B", unit_scale=True, unit_divisor=1024,
                      desc=os.path.basename(fname), disable=not progress, leave=False) as bar:
                while True:
                    chunk = response.read(1 << 20)
                    if not chunk:
                        break
                    out.write(chunk)
                    bar.update(len(chunk))
        if sha1_hash is not None and not check_sha1(tmp, sha1_hash):
            raise _HashMismatch(f"the data downloaded from {url} does not have SHA-1 {sha1_hash}; the file may be "
                                "corrupted or the mirror out of date")
        shutil.move(tmp, fname)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
