"""What the multi-process tests share: the mpiexec to use, a skip mark, and a runner."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests import deadlines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The mpiexec of the MPI library mpi4py loads (a launcher of another MPI starts singletons that never
# meet), with Open MPI's --allow-run-as-root when the tests run as root (lent GPU machines, containers).
try:
    import mpi4py  # noqa: F401

    from mxlite.cli.launch import find_mpiexec, mpi_flavour, root_options

    MPIEXEC: str | None = find_mpiexec()
    MPIEXEC_OPTIONS = root_options(mpi_flavour(MPIEXEC))
    _WHY_NOT = ""
except (ImportError, FileNotFoundError) as exc:  # pragma: no cover - CI installs the mpi extra
    MPIEXEC, MPIEXEC_OPTIONS = None, []
    _WHY_NOT = f": {exc}"

needs_mpi = pytest.mark.skipif(MPIEXEC is None,
                               reason=f"needs mpi4py and its MPI's mpiexec (pip install 'mxlite[mpi]'){_WHY_NOT}")


def mpirun(n: int, *args: str, timeout: float = 120, **env_vars: str) -> subprocess.CompletedProcess:
    """``mpiexec -n N python ARGS`` from the repository root, the checkout on PYTHONPATH; no status check.
    ``timeout``: for a quiet machine, scaled by its load (tests/deadlines.py, which reports where a late job
    stood)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env_vars)
    return deadlines.run([MPIEXEC, *MPIEXEC_OPTIONS, "-n", str(n), sys.executable, *args], timeout, env=env, cwd=ROOT)


def mpirun_ok(n: int, *args: str, timeout: float = 120, **env_vars: str) -> subprocess.CompletedProcess:
    """:func:`mpirun`, asserting that the job ended with status 0 (its output in the message)."""
    result = mpirun(n, *args, timeout=timeout, **env_vars)
    assert result.returncode == 0, result.stdout + result.stderr
    return result
