"""Clipping the summed gradients with one GPU per process while the blocks and the update run as CUDA graphs.

Two real MPI ranks (``mpiexec -n 2``), one emulated GPU each, kvstore 'dist_sync' (NCCL). MXNet's way to clip
over devices, ``allreduce_grads()``, the clip, then ``update()``, clips the sums: every rank computes the same
norm at every step, captured training stays bit-identical to eager, and the update is still replayed as a
graph. A clip between ``backward`` and ``step`` reads each process's own gradient once the step's graph sums
them, and a warning says so (docs/graphs.md; tests/grad_reads_overlap_worker.py runs each rank).
"""

from __future__ import annotations

import json
import os

import pytest
from mpi_helpers import mpirun_ok, needs_mpi

import mxlite as mx

pytestmark = [pytest.mark.gpu, pytest.mark.mpi, needs_mpi]

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grad_reads_overlap_worker.py")


def _run(tmp_path, mode):
    if mx.device.devices._emulated_gpus() == 0:
        pytest.skip("runs one emulated GPU per rank")
    mpirun_ok(2, WORKER, mode, str(tmp_path), timeout=240, MXLITE_EMULATE_GPUS="1")
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


def test_allreduce_grads_then_clip_then_update_clips_the_sums_on_every_rank(tmp_path):
    ranks = _run(tmp_path, "sums")
    assert ranks[0]["norms"] == ranks[1]["norms"] and len(ranks[0]["norms"]) == 8
    assert all(n > 0.5 for n in ranks[0]["norms"])  # every step clipped
    for rank in ranks:
        assert rank["replays"] >= 5, rank  # the update is captured and replayed (warm-up, capture, replays)
        assert rank["warnings"] == []


def test_a_clip_before_a_captured_step_that_sums_is_told_it_reads_this_process_gradient(tmp_path):
    ranks = _run(tmp_path, "step")
    for rank in ranks:
        assert rank["replays"] >= 4, rank  # the step, its all-reduce included, is replayed
        assert len(rank["warnings"]) == 1 and "this process's own, not yet summed" in rank["warnings"][0], rank
        assert "trainer.allreduce_grads() first" in rank["warnings"][0]
    assert ranks[0]["norms"][:2] == ranks[1]["norms"][:2]  # the first steps overlap: the clip reads the sums
