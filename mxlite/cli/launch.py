"""``mxlite launch -n N script.py [args]``: start N processes of a training script under MPI.

A thin wrapper around ``mpiexec -n N <this python> -m mxlite.cli.rank script.py args``: the
``mpich`` wheel (the ``mpi`` extra) puts an ``mpiexec`` next to this Python, so no system set-up
is needed; a system MPI or Slurm's ``srun`` works the same when run directly.

Each rank runs the script under mpi4py's runner (``-m mpi4py``), which aborts the whole job when
a rank ends with any unhandled exception, including a bare ``raise SystemExit(n)`` that
:mod:`mxlite.comm.faults` cannot see, inside :mod:`mxlite.cli.rank`, which names the rank when it
is killed by a signal or exits with an error status (mpiexec alone names a process id).

The script creates its Trainer with a ``'dist_sync'`` kvstore; each process then trains on its
own share of the data; gradients are summed over processes (MXNet's convention, see README).

Several nodes: ``mxlite launch --hosts node1,node2 --ppn 8 train.py`` (or ``--hostfile FILE``) runs
8 processes on each node (``-n`` defaults to hosts x ppn), passed on as MPICH/Intel MPI's
``-hosts``/``-f``/``-ppn`` or Open MPI's ``--host h:slots``/``--hostfile``/``--map-by ppr:N:node``,
whichever ``mpiexec --version`` names. Each process then trains on ``gpu(local_rank)``
(``mx.gpu_devices()``, ``kv.local_rank``), its rank among the processes of its node.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence

__all__ = ["find_mpiexec", "launch_command", "launch", "mpi_flavour"]


def find_mpiexec() -> str:
    """The ``mpiexec`` next to this Python (the mpich wheel), else the first on PATH.

    Raises:
        FileNotFoundError: none found (the message says how to install one).
    """
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("mpiexec")
    if found is None:
        raise FileNotFoundError("mpiexec not found: pip install 'mxlite[mpi]' (mpi4py and the mpich wheel), "
                                "or put a system MPI's mpiexec on PATH")
    return found


def mpi_flavour(mpiexec: str) -> str:
    """'openmpi' or 'mpich' (MPICH, Intel MPI and other Hydra launchers), from ``mpiexec --version``."""
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
        text = (out.stdout + out.stderr).lower()
    except (OSError, subprocess.SubprocessError):
        text = ""
    return "openmpi" if "open mpi" in text or "open-mpi" in text or "openrte" in text else "mpich"


def _placement(flavour: str, hosts: Sequence[str] | None, hostfile: str | None, ppn: int | None) -> list[str]:
    """The mpiexec options that put ``ppn`` processes on each of ``hosts`` (or the hosts of ``hostfile``)."""
    if flavour == "openmpi":
        out = []
        if hosts:
            out += ["--host", ",".join(f"{h}:{ppn}" if ppn else h for h in hosts)]
        if hostfile:
            out += ["--hostfile", hostfile]
        if ppn:
            out += ["--map-by", f"ppr:{ppn}:node"]
        return out
    out = []
    if hosts:
        out += ["-hosts", ",".join(hosts)]
    if hostfile:
        out += ["-f", hostfile]
    if ppn:
        out += ["-ppn", str(ppn)]
    return out


def launch_command(processes: int | None, script: str, args: Sequence[str] = (), *,
                   hosts: Sequence[str] | str | None = None, hostfile: str | None = None, ppn: int | None = None,
                   flavour: str | None = None) -> list[str]:
    """The mpiexec command line that runs ``script`` in ``processes`` processes.

    Args:
        processes: total processes (None: ``len(hosts) * ppn``, which then must both be given).
        hosts: node names (a list or a comma-separated string) to place processes on.
        hostfile: a file of node names in the MPI launcher's own format.
        ppn: processes per node (one per GPU: 8 on an HGX node).
        flavour: 'mpich' or 'openmpi' (default: asked of ``mpiexec --version`` when placement is given).

    Raises:
        ValueError: ``processes`` < 1 or missing without hosts and ppn, ``ppn`` < 1, both hosts and a
            hostfile, an unknown flavour, or more processes than hosts x ppn.
        FileNotFoundError: no mpiexec, no such script or hostfile.
    """
    if isinstance(hosts, str):
        hosts = [h.strip() for h in hosts.split(",") if h.strip()]
    if hosts is not None and not hosts:
        raise ValueError("--hosts needs at least one host name")
    if hosts and hostfile:
        raise ValueError("give either --hosts or --hostfile, not both")
    if ppn is not None and ppn < 1:
        raise ValueError(f"--ppn must be at least 1, got {ppn}")
    if processes is None:
        if not (hosts and ppn):
            raise ValueError("-n is needed unless --hosts and --ppn give the number of processes")
        processes = len(hosts) * ppn
    if processes < 1:
        raise ValueError(f"-n must be at least 1, got {processes}")
    if hosts and ppn and processes > len(hosts) * ppn:
        raise ValueError(f"-n {processes} is more than {len(hosts)} host(s) x {ppn} processes per host")
    if hostfile is not None and not os.path.isfile(hostfile):
        raise FileNotFoundError(f"hostfile {hostfile!r} not found")
    if not os.path.isfile(script):
        raise FileNotFoundError(f"training script {script!r} not found")
    mpiexec = find_mpiexec()
    placement: list[str] = []
    if hosts or hostfile or ppn:
        flavour = flavour or mpi_flavour(mpiexec)
        if flavour not in ("mpich", "openmpi"):
            raise ValueError(f"unknown MPI flavour {flavour!r}; 'mpich' or 'openmpi'")
        placement = _placement(flavour, hosts, hostfile, ppn)
    return [mpiexec, "-n", str(processes), *placement, sys.executable, "-m", "mxlite.cli.rank", script, *args]


def launch(processes: int | None, script: str, args: Sequence[str] = (), *, hosts: Sequence[str] | str | None = None,
           hostfile: str | None = None, ppn: int | None = None) -> int:
    """Run the script under MPI and return mpiexec's exit status (arguments as :func:`launch_command`)."""
    return subprocess.call(launch_command(processes, script, args, hosts=hosts, hostfile=hostfile, ppn=ppn))
