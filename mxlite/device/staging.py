"""Folders written by a process that may die: durable writes, and the rule that says a staging folder is abandoned.

Two parts of mxlite publish a folder by building it under a staging name and renaming it into
place: checkpoints (``mxlite/checkpoint.py``) and the host kernel build cache
(``mxlite/device/_hostcuda/build.py``). A writer killed midway (SIGKILL, the out-of-memory killer, a
cancelled CI job) leaves its staging folder behind; a later writer removes it when its writer is
known to be dead (:func:`abandoned`), and never a live writer's. What is published is made durable
first (:func:`fsync_file`, :func:`fsync_dir`), so a crash or power loss leaves either no folder or a
complete one under the final name.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["FOREIGN_HOST_AGE", "abandoned", "fsync_dir", "fsync_file", "pid_alive"]

FOREIGN_HOST_AGE = 24 * 3600.0  # seconds before another host's staging folder counts as abandoned


def pid_alive(pid: Any) -> bool:
    """Whether process ``pid`` exists on this host (a malformed pid: False; another user's process: True)."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def abandoned(this_host: bool, pid: Any, age: float) -> bool:
    """Whether a staging folder of writer ``pid`` is abandoned: on this host when that process no longer
    exists, on another host (whose processes cannot be asked) once it is :data:`FOREIGN_HOST_AGE` old.

    Args:
        this_host: whether the writer ran on this host.
        pid: the writer's process id.
        age: seconds since the folder (or its writer record) was last written.
    """
    return not pid_alive(pid) if this_host else age > FOREIGN_HOST_AGE


def fsync_file(path: str | os.PathLike) -> None:
    """fsync a file already written and closed, so its bytes survive a crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
