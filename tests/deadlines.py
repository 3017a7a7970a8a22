"""Deadlines for the tests' child processes that follow the machine, and a report of where a late child stood.

A deadline written for a quiet machine (``timeout=60``) is multiplied by :func:`scale`: 1 on a quiet machine,
more when other work keeps the cores busy (the load average per core this process may use, plus one), so the same
test passes beside six busy processes on two cores. :func:`run` is ``subprocess.run`` with that deadline which,
when it still runs out, first asks every Python process of the child's group for its threads' stacks (the child
runs with ``PYTHONFAULTHANDLER``: ``SIGABRT`` prints them) and raises ``subprocess.TimeoutExpired`` with them in
its output, instead of a bare "timed out".
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

MAX_SCALE = 8.0


def scale() -> float:
    """How much slower than a quiet machine this one runs now: ``1 + load average / cores``, at most
    :data:`MAX_SCALE` (and 1 where the load cannot be read)."""
    try:
        load = os.getloadavg()[0]
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return 1.0
    return min(MAX_SCALE, max(1.0, 1.0 + load / max(cores, 1) - 0.5))


def scaled(seconds: float) -> float:
    """``seconds`` (a deadline for a quiet machine) times :func:`scale`."""
    return seconds * scale()


def run(argv: list[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, capture_output=True, text=True, **kwargs)`` with ``timeout`` scaled; a child still
    running at the deadline has its Python stacks dumped to its stderr, then the whole group is killed, and
    ``subprocess.TimeoutExpired`` carries what it had written."""
    env = dict(kwargs.pop("env", None) or os.environ, PYTHONFAULTHANDLER="1")
    deadline = scaled(timeout)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        out, err = _stop_with_stacks(proc)
        raise subprocess.TimeoutExpired(argv, deadline, output=out,
                                        stderr=f"{err}\n[deadlines] still running after {deadline:.0f} s "
                                               f"(x{deadline / timeout:.1f} for the machine's load); the Python "
                                               "stacks above show where it stood") from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _stop_with_stacks(proc: subprocess.Popen) -> tuple[str, str]:
    try:
        os.killpg(proc.pid, signal.SIGABRT)  # faulthandler prints every thread's stack, then the process dies
        return proc.communicate(timeout=10)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        pass
    finally:
        time.sleep(0.1)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.communicate()
