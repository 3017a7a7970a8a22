"""``mxlite launch -n N script.py [args]``: start N processes of a training script under MPI.

A thin wrapper around ``mpiexec -n N <this python> -m mxlite.cli.rank script.py args``, with the
mpiexec of the MPI library mpi4py loads (:func:`find_mpiexec`): the ``mpich`` wheel (the ``mpi``
extra) puts one next to this Python, so no system set-up is needed; a system MPI or Slurm's
``srun`` works the same when run directly. As root, Open MPI's launcher gets ``--allow-run-as-root``.

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

import functools
import json
import os
import subprocess
import sys
from collections.abc import Sequence

__all__ = ["find_mpiexec", "launch_command", "launch", "mpi_flavour"]


# What mpi4py loads, asked of a fresh Python (importing mpi4py.MPI here would initialise MPI in this process).
_MPI_LIBRARY_QUERY = """
import json, os, sys
import mpi4py
mpi4py.rc.initialize = False
mpi4py.rc.finalize = False
from mpi4py import MPI
libraries = []
try:
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if line.strip() else ""
            if os.path.basename(path).startswith(("libmpi.", "libmpi_", "libmpich")) and path not in libraries:
                libraries.append(path)
except OSError:
    pass
config = mpi4py.get_config()
print(json.dumps({"version": MPI.Get_library_version(), "libraries": libraries,
                  "mpicc": config.get("mpicc"), "mpiexec": config.get("mpiexec")}))
"""


def _library_flavour(version: str) -> str | None:
    """'openmpi' or 'mpich' (MPICH and its Hydra-launched derivatives) from ``MPI.Get_library_version()``."""
    text = version.lower()
    if "open mpi" in text:
        return "openmpi"
    if any(name in text for name in ("mpich", "intel(r) mpi", "mvapich", "cray mpich")):
        return "mpich"
    return None


@functools.lru_cache(maxsize=4)
def _mpi_library(python: str) -> dict[str, object] | None:
    """The MPI library ``python``'s mpi4py loads: ``version``, ``libraries`` (paths), ``mpicc``, ``mpiexec``
    (mpi4py's build configuration; empty for the binary wheels), or None when that cannot be asked."""
    try:
        out = subprocess.run([python, "-c", _MPI_LIBRARY_QUERY], capture_output=True, text=True, timeout=60)
        return json.loads(out.stdout) if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def _candidates(library: dict[str, object] | None) -> list[str]:
    """Where an mpiexec may be, best first: beside this Python, in the prefix of the MPI library mpi4py
    loads, beside mpi4py's configured mpicc/mpiexec, then every ``mpiexec`` on PATH."""
    dirs = [os.path.dirname(sys.executable)]
    if library:
        dirs += [os.path.join(os.path.dirname(os.path.dirname(str(lib))), "bin") for lib in library["libraries"]]
        dirs += [os.path.dirname(str(library[k])) for k in ("mpiexec", "mpicc") if library.get(k)]
    dirs += os.environ.get("PATH", "").split(os.pathsep)
    found: list[str] = []
    for d in dirs:
        path = os.path.join(d, "mpiexec") if d else ""
        if path and os.path.isfile(path) and os.access(path, os.X_OK) and os.path.realpath(path) not in {
                os.path.realpath(f) for f in found}:
            found.append(path)
    return found


def find_mpiexec() -> str:
    """The ``mpiexec`` of the MPI library that mpi4py loads.

    mpi4py is asked (in a child Python, without initialising MPI) which library it loads
    (``MPI.Get_library_version()``, and the library's path); the first mpiexec of the same flavour
    (Open MPI or MPICH, from ``mpiexec --version``) is taken, looking beside this Python (the mpich
    wheel), in that library's prefix, beside mpi4py's configured ``mpicc``, then on PATH. A launcher of
    the other flavour would start N singletons that never meet. Without mpi4py, the first mpiexec
    found in that order.

    Raises:
        FileNotFoundError: no mpiexec, or none of the flavour mpi4py's library needs (the message names
            the library and the launchers found, and says how to install one).
    """
    library = _mpi_library(sys.executable)
    candidates = _candidates(library)
    if not candidates:
        raise FileNotFoundError("mpiexec not found: pip install 'mxlite[mpi]' (mpi4py and the mpich wheel), "
                                "or put a system MPI's mpiexec on PATH")
    wanted = _library_flavour(str(library["version"])) if library else None
    if wanted is None:
        return candidates[0]
    flavours = {path: mpi_flavour(path) for path in candidates}
    for path in candidates:
        if flavours[path] == wanted:
            return path
    first_line = str(library["version"]).strip().splitlines()[0] if library else ""
    raise FileNotFoundError(
        f"mpi4py loads {first_line!r} ({wanted}), but the mpiexec found are of another MPI: "
        f"{', '.join(f'{p} ({f})' for p, f in flavours.items())}; put that MPI's mpiexec on PATH, or install "
        "mpi4py for the MPI you have (pip install 'mxlite[mpi]' brings mpi4py and the mpich wheel together)")


def mpi_flavour(mpiexec: str) -> str:
    """'openmpi' or 'mpich' (MPICH, Intel MPI and other Hydra launchers), from ``mpiexec --version``."""
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
        text = (out.stdout + out.stderr).lower()
    except (OSError, subprocess.SubprocessError):
        text = ""
    return "openmpi" if "open mpi" in text or "open-mpi" in text or "openrte" in text else "mpich"


def root_options(flavour: str) -> list[str]:
    """Open MPI's ``--allow-run-as-root`` when this process runs as root (containers, lent GPU machines):
    Open MPI's mpiexec refuses root without it; MPICH's does not ask. (Used by the tests and benchmarks too.)"""
    is_root = hasattr(os, "geteuid") and os.geteuid() == 0
    return ["--allow-run-as-root"] if is_root and flavour == "openmpi" else []


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
        flavour: 'mpich' or 'openmpi' (default: asked of ``mpiexec --version`` when placement is given or
            this process is root: Open MPI then gets ``--allow-run-as-root``, which it requires of root).

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
    as_root: list[str] = []
    if hosts or hostfile or ppn or (hasattr(os, "geteuid") and os.geteuid() == 0):
        flavour = flavour or mpi_flavour(mpiexec)
        if flavour not in ("mpich", "openmpi"):
            raise ValueError(f"unknown MPI flavour {flavour!r}; 'mpich' or 'openmpi'")
        placement = _placement(flavour, hosts, hostfile, ppn)
        as_root = root_options(flavour)
    return [mpiexec, "-n", str(processes), *placement, *as_root, sys.executable, "-m", "mxlite.cli.rank", script, *args]


def launch(processes: int | None, script: str, args: Sequence[str] = (), *, hosts: Sequence[str] | str | None = None,
           hostfile: str | None = None, ppn: int | None = None) -> int:
    """Run the script under MPI and return mpiexec's exit status (arguments as :func:`launch_command`)."""
    return subprocess.call(launch_command(processes, script, args, hosts=hosts, hostfile=hostfile, ppn=ppn))
