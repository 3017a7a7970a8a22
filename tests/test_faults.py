"""Fault handling and cross-rank agreement (``mxlite.comm.faults``, ``mxlite.comm.agree``).

* Real ``mpiexec -n 2`` jobs (tests/fault_worker.py) where rank 1 fails while rank 0 waits in an
  all-reduce: an uncaught exception, ``sys.exit(2)``, ``os._exit(3)`` and SIGTERM all end the job
  with a non-zero status well within the timeout, and the message names rank 1;
* the exception hook's text, its abort status, and its fall-back to Python's hook with one process;
* ``check_same_across_ranks``: the exact messages over real ranks (both ranks raise the same
  error) and over 3 threads standing in for ranks; one collective when the ranks agree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from mxlite.comm import faults
from mxlite.comm.agree import check_same_across_ranks
from tests import deadlines
from tests.mpi_helpers import ROOT, mpirun, needs_mpi

WORKER = os.path.join(ROOT, "tests", "fault_worker.py")


def _mpirun(*args: str, ranks: int = 2, **env_vars: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    result = mpirun(ranks, WORKER, *args, timeout=60, **env_vars)
    return result, time.monotonic() - start


# -- a failing rank ends the job ------------------------------------------------------------------

@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("mode, status, says", [
    ("raise", 1, ["mxlite rank 1 of {n} failed:", "RuntimeError: rank 1 fails on purpose before the all-reduce"]),
    ("sys_exit", 2, ["mxlite rank 1 of {n} exited with status 2"]),
    ("os_exit", 3, []),  # Hydra alone: a rank that leaves without MPI_Finalize ends the job (status 3 or 9)
    ("sigterm", None, []),  # Hydra alone (no handler is installed, see mxlite.comm.faults); mpich: 15
])
def test_a_failing_rank_ends_the_job_instead_of_hanging_it(mode, status, says, ranks):
    says = [text.format(n=ranks) for text in says]
    env = {}
    if mode == "os_exit":
        status = None  # Hydra reports the failed rank's status (3) or the SIGKILL (9) it sent another rank
        # Hydra now and then records an os._exit(3) as status 0 and leaves the other ranks waiting (mpich's
        # exit-code race, about 1 run in 30 with 3 ranks here): the collective timeout is what ends the job then.
        env["MXLITE_COLLECTIVE_TIMEOUT"] = "10"
    result, elapsed = _mpirun(mode, ranks=ranks, **env)
    output = result.stdout + result.stderr
    assert elapsed < deadlines.scaled(30), f"{mode}: took {elapsed:.1f} s\n{output}"
    assert result.returncode == status if status is not None else result.returncode != 0, output
    assert "rank 1 about to fail" in result.stdout
    assert "passed the all-reduce" not in result.stdout  # rank 0 never left it: it was killed there
    for text in says:
        assert text in output, output


@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize("mode, says", [
    ("sigkill", "mxlite rank 1 of 3 was killed by signal 9 (SIGKILL)"),
    ("os_exit", "mxlite rank 1 of 3 exited with status 3"),
    ("raise", "mxlite rank 1 of 3 failed:"),
    ("system_exit", "(rank 1 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 4)"),
])
def test_mxlite_launch_names_the_rank_that_failed(mode, says):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    start = time.monotonic()
    result = deadlines.run([sys.executable, "-m", "mxlite", "launch", "-n", "3", WORKER, mode], timeout=60, env=env,
                            cwd=ROOT)
    output = result.stdout + result.stderr
    assert time.monotonic() - start < deadlines.scaled(30), output
    assert result.returncode != 0, output
    assert says in output, output
    assert "passed the all-reduce" not in result.stdout


@pytest.mark.mpi
@needs_mpi
def test_a_hung_rank_ends_the_job_after_the_collective_timeout():
    start = time.monotonic()
    result = mpirun(3, WORKER, "hang", timeout=60, MXLITE_COLLECTIVE_TIMEOUT="2")
    elapsed = time.monotonic() - start
    output = result.stdout + result.stderr
    assert result.returncode != 0 and 2 <= elapsed < deadlines.scaled(20), (elapsed, output)
    assert "allreduce (call 1 of this communicator) did not complete within 2 s (MXLITE_COLLECTIVE_TIMEOUT)" \
        in output, output
    assert "mxlite rank 1 of 3:" not in output  # the hung rank is the one that does not report


@pytest.mark.parametrize("value", ["0", "-3", "soon"])
def test_a_bad_collective_timeout_is_named(monkeypatch, value):
    monkeypatch.setenv("MXLITE_COLLECTIVE_TIMEOUT", value)
    with pytest.raises(ValueError, match="MXLITE_COLLECTIVE_TIMEOUT must be a positive number of seconds"):
        faults.collective_timeout()


@pytest.mark.mpi
@needs_mpi
def test_a_job_without_failures_ends_as_usual():
    result, _ = _mpirun("clean")
    assert result.returncode == 0, result.stdout + result.stderr
    for rank in (0, 1):  # (the ranks' lines may interleave: look for each, not for lines)
        assert f"rank {rank} passed the all-reduce" in result.stdout, result.stdout
    assert "mxlite rank" not in result.stderr


def test_the_exception_hook_writes_rank_and_traceback_then_aborts(monkeypatch, capsys):
    aborted = []

    class World:
        def Get_rank(self):
            return 3

        def Get_size(self):
            return 8

        def Abort(self, status):
            aborted.append(status)

    monkeypatch.setattr(faults, "_world", lambda: World())
    try:
        raise KeyError("dense0.weight")
    except KeyError as exc:
        faults._excepthook(type(exc), exc, exc.__traceback__)
    err = capsys.readouterr().err
    assert err.startswith("mxlite rank 3 of 8 failed:\nTraceback (most recent call last):\n")
    assert 'raise KeyError("dense0.weight")' in err
    assert err.endswith("KeyError: 'dense0.weight'\n")
    assert aborted == [1]


def test_failure_message_is_one_block_with_the_whole_traceback():
    try:
        try:
            1 / 0  # noqa: B018
        except ZeroDivisionError as inner:
            raise ValueError("bad batch") from inner
    except ValueError as exc:
        text = faults.failure_message(0, 2, type(exc), exc, exc.__traceback__)
    lines = text.splitlines()
    assert lines[0] == "mxlite rank 0 of 2 failed:"
    assert "ZeroDivisionError: division by zero" in lines  # the cause is kept
    assert lines[-1] == "ValueError: bad batch"


def test_with_one_process_the_hook_is_pythons(monkeypatch):
    seen = []
    monkeypatch.setattr(faults, "_world", lambda: None)
    monkeypatch.setattr(faults, "_previous_hook", lambda *args: seen.append(args[0]))
    faults._excepthook(RuntimeError, RuntimeError("x"), None)
    assert seen == [RuntimeError]


@pytest.mark.parametrize("code, status", [(None, 0), (0, 0), (2, 2), (256 + 7, 7), (-1, 255), ("message", 1)])
def test_exit_status_follows_python(code, status):
    assert faults._status_of(code) == status


# -- agreement across ranks -----------------------------------------------------------------------

@pytest.mark.mpi
@needs_mpi
def test_both_ranks_raise_the_same_disagreement(tmp_path):
    result, _ = _mpirun("agree", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert seen[0] == seen[1]
    head = "ranks disagree on the Trainer's parameters: "
    assert seen[0] == {
        "same": None,
        "shape": head + "'dense0.weight' is {shape [4, 3], dtype float32} on rank 0 and "
                        "{shape [5, 3], dtype float32} on rank 1",
        "extra": head + "'dense1.weight' is {shape [2, 4], dtype float32} on rank 1 and missing on rank 0; "
                        "rank 0 has 2 entries and rank 1 has 3 entries",
        "order": head + "the same entries come in another order: entry 0 is 'dense0.weight' on rank 0 and "
                        "'dense0.bias' on rank 1",
        "key_order": None,  # descriptions compare as JSON values
    }


class _ThreadGroup:
    """Ranks played by threads: ``allgather`` meets at a barrier (times out instead of hanging)."""

    def __init__(self, size: int) -> None:
        self.size, self.collectives = size, 0
        self._barrier = threading.Barrier(size, timeout=10)
        self._slots: list = [None] * size

    def comm(self, rank: int):
        group = self

        class Comm:
            size = group.size

            def allgather(self, array):
                group._slots[rank] = np.array(array).reshape(-1)
                if group._barrier.wait() == 0:
                    group.collectives += 1
                out = list(group._slots)
                group._barrier.wait()
                return out

        return Comm()

    def run(self, entries_of) -> list:
        """What each rank's check_same_across_ranks raised (None: nothing)."""
        caught: list = [None] * self.size

        def rank_main(rank):
            try:
                check_same_across_ranks(self.comm(rank), "the buckets", entries_of(rank))
            except Exception as exc:  # noqa: BLE001 - recorded for the test
                caught[rank] = exc

        threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return caught


def _entries(shape0=(4, 3)):
    return [("w", {"shape": list(shape0), "dtype": "float32"}), ("b", {"shape": [4], "dtype": "float32"})]


def test_agreeing_ranks_cost_one_small_collective():
    group = _ThreadGroup(3)
    assert group.run(lambda r: _entries()) == [None] * 3
    assert group.collectives == 1


def test_every_rank_names_the_variants_and_their_ranks():
    group = _ThreadGroup(4)
    caught = group.run(lambda r: _entries((5, 3) if r in (1, 3) else (4, 3)))
    messages = {str(e) for e in caught}
    assert all(isinstance(e, ValueError) for e in caught) and len(messages) == 1
    assert messages.pop() == ("ranks disagree on the buckets: 'w' is {shape [4, 3], dtype float32} on ranks 0, 2 "
                              "and {shape [5, 3], dtype float32} on ranks 1, 3")
    assert group.collectives == 2  # the digests, then the texts


def test_a_name_listed_twice_and_unequal_counts():
    group = _ThreadGroup(3)
    caught = group.run(lambda r: _entries() + _entries()[:1] * (r == 2))
    assert str(caught[0]) == ("ranks disagree on the buckets: 'w' is listed 1 time on ranks 0, 1 and 2 times on "
                              "rank 2; ranks 0, 1 have 2 entries and rank 2 has 3 entries")


def test_one_process_returns_at_once():
    class Single:
        size = 1

        def allgather(self, array):
            raise AssertionError("no collective with one process")

    check_same_across_ranks(Single(), "anything", [("w", {"shape": [1]})])


def test_an_entry_that_is_not_json_is_rejected_before_any_collective():
    group = _ThreadGroup(2)
    with pytest.raises(TypeError, match=r"the description of 'w' is not JSON-able"):
        check_same_across_ranks(group.comm(0), "the buckets", [("w", {"dtype": np.float32})])
    with pytest.raises(TypeError, match=r"entry 0 must be a \(name, description\) pair"):
        check_same_across_ranks(group.comm(0), "the buckets", [(0, "x")])
    assert group.collectives == 0
