"""Many GPUs per node: each rank on ``gpu(local_rank)``, the local rank from MPI's node split.

* 4 MPI ranks, each with two emulated GPUs visible, in two simulated nodes of two ranks
  (``tests/local_rank_worker.py``): rank r has local rank r % 2, ``mx.gpu_devices()`` is
  ``[gpu(r % 2)]``, ``kv.local_rank`` agrees, its NCCL communicator runs on that GPU, and the
  four ranks end with the same parameters;
* without the simulated split all 4 ranks share this machine, so the real shared-memory split
  gives local ranks 0..3, and ``mx.gpu_devices()`` on a rank without a GPU of its own raises;
* ``mxlite launch --hosts/--hostfile/--ppn`` passes the placement on in MPICH's and Open MPI's
  spellings, and ``-n`` defaults to hosts x ppn.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

import mxlite as mx
from mxlite.cli import launch
from tests.mpi_helpers import ROOT, mpirun_ok, needs_mpi

WORKER = os.path.join(ROOT, "tests", "local_rank_worker.py")


def _gpu_env() -> dict[str, str]:
    if mx.device.devices._emulated_gpus() == 0:
        pytest.skip("runs on emulated GPUs (MXLITE_EMULATE_GPUS)")
    return {"MXLITE_EMULATE_GPUS": "2"}


@needs_mpi
@pytest.mark.mpi
@pytest.mark.gpu
def test_four_ranks_on_two_nodes_each_use_their_local_gpu(tmp_path):
    mpirun_ok(4, WORKER, str(tmp_path), timeout=300, MXLITE_TEST_RANKS_PER_NODE="2", **_gpu_env())
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    for r, info in enumerate(ranks):
        assert info["rank"] == r and info["size"] == 4 and info["num_workers"] == 4
        assert info["local_rank"] == r % 2 and info["local"] == [r % 2, 2], info
        assert info["devices"] == [f"gpu({r % 2})"], info
        assert info["comm_devices"] == [f"gpu({r % 2})"], info
    params = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(4)]
    for r in range(1, 4):
        for k in params[0]:
            np.testing.assert_array_equal(params[r][k], params[0][k], err_msg=f"rank {r} differs in {k}")


@needs_mpi
@pytest.mark.mpi
@pytest.mark.gpu
def test_the_real_node_split_sees_every_rank_of_this_machine(tmp_path):
    code = ("import json, sys, mxlite as mx; from mxlite.comm.mpi import local_rank_and_size;"
            "lr, ls = local_rank_and_size();"
            "from mpi4py import MPI; r = MPI.COMM_WORLD.Get_rank();"
            "err = '';\n"
            "try:\n    d = [str(x) for x in mx.gpu_devices()]\n"
            "except mx.DeviceUnavailableError as e:\n    d, err = None, str(e)\n"
            f"json.dump({{'local': [lr, ls], 'devices': d, 'error': err}}, open(r'{tmp_path}/r%d.json' % r, 'w'))")
    mpirun_ok(3, "-c", code, **_gpu_env())
    seen = [json.loads((tmp_path / f"r{r}.json").read_text()) for r in range(3)]
    assert [s["local"] for s in seen] == [[0, 3], [1, 3], [2, 3]]
    assert seen[0]["devices"] == ["gpu(0)"] and seen[1]["devices"] == ["gpu(1)"]
    assert seen[2]["devices"] is None and "local rank 2 has no GPU" in seen[2]["error"]


def test_one_process_sees_every_gpu():
    assert mx.gpu_devices() == [mx.gpu(i) for i in range(mx.num_gpus())]


def test_single_process_kvstore_has_local_rank_zero():
    assert mx.kv.create("device").local_rank == 0


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return str(path)


def test_launch_places_processes_with_mpich_spelling(script, tmp_path):
    cmd = launch.launch_command(None, script, ["--x"], hosts="a,b", ppn=8, flavour="mpich")
    assert cmd[1:3] == ["-n", "16"]
    assert cmd[3:9] == ["-hosts", "a,b", "-ppn", "8", sys.executable, "-m"]
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a:8\nb:8\n")
    cmd = launch.launch_command(16, script, hostfile=str(hostfile), ppn=8, flavour="mpich")
    assert cmd[3:7] == ["-f", str(hostfile), "-ppn", "8"]


def test_launch_places_processes_with_open_mpi_spelling(script, tmp_path):
    cmd = launch.launch_command(None, script, hosts=["a", "b"], ppn=4, flavour="openmpi")
    assert cmd[1:3] == ["-n", "8"]
    assert cmd[3:7] == ["--host", "a:4,b:4", "--map-by", "ppr:4:node"]
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a slots=4\n")
    assert launch.launch_command(4, script, hostfile=str(hostfile), flavour="openmpi")[3:5] == [
        "--hostfile", str(hostfile)]


def test_launch_without_placement_is_unchanged(script):
    cmd = launch.launch_command(2, script)
    as_root = launch.root_options(launch.mpi_flavour(cmd[0]))  # Open MPI as root: --allow-run-as-root
    assert cmd[1:] == ["-n", "2", *as_root, sys.executable, "-m", "mxlite.cli.rank", script]


@pytest.mark.parametrize("kwargs, message", [
    ({"processes": None}, "-n is needed"), ({"processes": None, "hosts": "a"}, "-n is needed"),
    ({"processes": 9, "hosts": "a,b", "ppn": 4}, "more than 2 host"), ({"processes": 2, "ppn": 0}, "--ppn"),
    ({"processes": 2, "hosts": ""}, "at least one host")])
def test_launch_rejects_bad_placement(script, kwargs, message):
    with pytest.raises(ValueError, match=message):
        launch.launch_command(script=script, flavour="mpich", **kwargs)


def test_launch_detects_this_mpiexec_flavour():
    try:
        mpiexec = launch.find_mpiexec()
    except FileNotFoundError:
        pytest.skip("no mpiexec")
    assert launch.mpi_flavour(mpiexec) in ("mpich", "openmpi")


def test_cli_launch_needs_n_or_hosts_and_ppn(script, capsys):
    from mxlite import cli  # noqa: PLC0415

    with pytest.raises(SystemExit):
        cli.main(["launch", script])
    assert "-n is required" in capsys.readouterr().err



# -- which mpiexec: the one of the MPI library mpi4py loads -------------------------------------------
def _fake_mpiexec(folder, banner):
    """An executable ``folder/mpiexec`` whose ``--version`` prints ``banner``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mpiexec"
    path.write_text(f"#!/bin/sh\necho '{banner}'\n")
    path.chmod(0o755)
    return str(path)


OPEN_MPI_BANNER = "mpiexec (Open MPI) 4.1.5"
MPICH_BANNER = "HYDRA build details:\n    Version: 4.2.0"


@pytest.fixture
def fake_mpis(tmp_path, monkeypatch):
    """A Python without an mpiexec beside it, an Open MPI mpiexec first on PATH, and an MPICH one in
    the prefix of the library mpi4py is made to load (``lib/libmpi.so.12``)."""
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python" / "bin" / "python3"))
    openmpi = _fake_mpiexec(tmp_path / "openmpi" / "bin", OPEN_MPI_BANNER)
    mpich = _fake_mpiexec(tmp_path / "mpich" / "bin", MPICH_BANNER)
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / "openmpi" / "bin"), "/usr/bin", "/bin"]))

    def library(version):
        info = {"version": version, "libraries": [str(tmp_path / "mpich" / "lib" / "libmpi.so.12")], "mpicc": None,
                "mpiexec": None}
        monkeypatch.setattr(launch, "_mpi_library", lambda python: info)

    return openmpi, mpich, library


def test_find_mpiexec_takes_the_launcher_of_mpi4pys_library(fake_mpis):
    openmpi, mpich, library = fake_mpis
    library("MPICH Version:      4.2.0\nMPICH Release date: ...")
    assert launch.find_mpiexec() == mpich  # in the library's prefix, although Open MPI's comes first on PATH
    library("Open MPI v4.1.5, package: Open MPI ...")
    assert launch.find_mpiexec() == openmpi


def test_find_mpiexec_refuses_a_launcher_of_another_mpi(fake_mpis, tmp_path, monkeypatch):
    _, _, library = fake_mpis
    library("Open MPI v5.0.3, package: Open MPI ...")
    monkeypatch.setenv("PATH", str(tmp_path / "mpich" / "bin"))
    with pytest.raises(FileNotFoundError, match=r"Open MPI v5\.0\.3.*\(openmpi\).*mpich/bin/mpiexec \(mpich\)"):
        launch.find_mpiexec()


def test_find_mpiexec_without_mpi4py_takes_the_first_found(fake_mpis, monkeypatch):
    openmpi, _, _ = fake_mpis
    monkeypatch.setattr(launch, "_mpi_library", lambda python: None)  # mpi4py cannot be asked
    assert launch.find_mpiexec() == openmpi


def test_this_machines_mpiexec_matches_mpi4pys_library():
    pytest.importorskip("mpi4py")
    try:
        mpiexec = launch.find_mpiexec()
    except FileNotFoundError:
        pytest.skip("no mpiexec")
    library = launch._mpi_library(sys.executable)
    assert library is not None and launch._library_flavour(library["version"]) in (launch.mpi_flavour(mpiexec), None)


@pytest.mark.parametrize("flavour", ["openmpi", "mpich"])
def test_root_gets_open_mpis_allow_run_as_root(script, monkeypatch, flavour):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    cmd = launch.launch_command(2, script, flavour=flavour)
    assert ("--allow-run-as-root" in cmd) == (flavour == "openmpi")
    assert cmd[1:3] == ["-n", "2"] and cmd[-3:] == ["-m", "mxlite.cli.rank", script]
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "--allow-run-as-root" not in launch.launch_command(2, script, flavour="openmpi")
