"""One rank of ``mxlite launch``: runs the training script as a child and reports how it ended.

``mxlite launch -n N script.py`` starts ``python -m mxlite.cli.rank script.py args`` N times under
``mpiexec``. Each of these runs ``python -m mpi4py script.py args`` as a child process (which
inherits the MPI launcher's environment, so it is the MPI rank) and waits for it. When the
child dies from a signal (SIGKILL, the OOM killer, a segfault) or leaves with a non-zero status
without having said why, the wrapper prints ``mxlite rank R of N ...`` naming the rank, then
exits with the same status, and the launcher ends the whole job. mpiexec alone names only a
process id, often of a rank it killed itself while cleaning up.

The child is tied to the wrapper (Linux ``PR_SET_PDEATHSIG``): when the launcher kills the
wrapper, the child dies too, so no rank outlives the job.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the launcher's own cleanup has to do
        pass


def _rank_and_size() -> tuple[str, str]:
    for rank_var, size_var in (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                               ("PMIX_RANK", "PMIX_SIZE")):
        if rank_var in os.environ:
            return os.environ[rank_var], os.environ.get(size_var, "?")
    return "?", "?"


def describe(returncode: int) -> str | None:
    """How a child that ended with ``returncode`` (``subprocess`` convention) failed; None for success."""
    if returncode == 0:
        return None
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by signal {-returncode} ({name})"
    return f"exited with status {returncode}"


def main(argv: list[str]) -> int:
    """Run ``argv`` (script and arguments) under ``python -m mpi4py``; returns its status (128+signal if killed)."""
    if not argv:
        print("usage: python -m mxlite.cli.rank script.py [args]", file=sys.stderr)
        return 2
    # close_fds=False: the launcher's connection (e.g. Hydra's PMI_FD) must reach the rank
    child = subprocess.Popen([sys.executable, "-m", "mpi4py", *argv], preexec_fn=_die_with_parent, close_fds=False)
    for sig in (signal.SIGTERM, signal.SIGINT):  # pass the launcher's requests on to the rank
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    returncode = child.wait()
    how = describe(returncode)
    if how is not None:
        rank, size = _rank_and_size()
        print(f"mxlite rank {rank} of {size} {how}", file=sys.stderr, flush=True)
        time.sleep(0.2)  # let the launcher forward the line before it tears the job down
    return 128 - returncode if returncode < 0 else returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
