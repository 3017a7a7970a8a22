"""The whole training step as one CUDA graph with one GPU per process: the buckets' all-reduces join the update.

Two real MPI ranks (``mpiexec -n 2``), one emulated GPU each, kvstore 'dist_sync' (NCCL): a hybridized network
trains bit for bit as an eager one while, from its fourth step on, every step is three graph launches (forward,
backward, and the Trainer's step holding the NCCL all-reduces and the fused update), with no collective issued
from the host and no host synchronisation. A rank whose step cannot be captured makes every rank keep its
collectives eager (tests/graph_step_worker.py runs each rank).
"""

from __future__ import annotations

import json
import os

import pytest
from mpi_helpers import mpirun_ok, needs_mpi

import mxlite as mx

pytestmark = [pytest.mark.gpu, pytest.mark.mpi, needs_mpi]

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "graph_step_worker.py")
STEPS = 20


def _run(tmp_path, model, overlap, fail_on=None, **env):
    if mx.device.devices._emulated_gpus() == 0:
        pytest.skip("counts come from the GPU emulation (one emulated GPU per rank)")
    args = [WORKER, model, "1" if overlap else "0", str(tmp_path)] + ([str(fail_on)] if fail_on is not None else [])
    mpirun_ok(2, *args, timeout=240, MXLITE_EMULATE_GPUS="1", **env)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.parametrize("model, overlap, buckets, env", [
    ("mlp", True, 2, {}),
    ("mlp", False, 2, {}),
    ("cnn_bn", True, 1, {"MXLITE_COLLECTIVE_TIMEOUT": "120"}),  # the watchdog watches each replay's collectives
])
def test_a_replayed_step_holds_the_all_reduce_and_is_bit_identical_to_eager(tmp_path, model, overlap, buckets, env):
    ranks = _run(tmp_path, model, overlap, **env)
    # With overlap the first backward after the blocks' capture still reduces from its hooks; the next step is
    # the warm-up of the step with its collectives, the one after it is captured.
    first_replay = 4 if overlap else 3
    for rank in ranks:
        assert rank["warnings"] == []
        assert rank["replays"] == STEPS - first_replay
        assert rank["step_graphs"] == [f"Trainer.step {'Adam' if model == 'mlp' else 'SGD'} (1 arena update(s) "
                                       "with its gradient all-reduce)"]
        for step, counts in enumerate(rank["counts"][first_replay:], first_replay):
            assert counts["graph_launches"] == 3, (step, counts)  # forward, backward, step
            assert counts["host_collectives"] == 0 and counts["nccl_calls"] == buckets, (step, counts)
            assert counts["host_syncs"] == 0 and counts["d2h_copies"] == 0, (step, counts)
            assert counts["kernel_launches"] == 2, (step, counts)  # the loss, which stays eager
            assert counts["h2d_copies"] == 1, (step, counts)  # the optimizer's per-parameter table
    # eagerly, one call from the host per bucket, and two small all-gathers: the first step's batch size and
    # whether the collectives join the step (not yet: the blocks are captured at step 1)
    assert ranks[0]["counts"][0]["host_collectives"] == buckets + 2


def test_a_rank_that_cannot_capture_keeps_every_ranks_collectives_eager(tmp_path):
    ranks = _run(tmp_path, "mlp", True, fail_on=1)
    notice = "mxlite: Trainer.step runs eagerly (its blocks are captured as CUDA graphs, the step is not): "
    assert ranks[0]["warnings"] == [notice + "another rank could not capture its step (the ranks run their "
                                              "collectives alike)"]
    assert ranks[1]["warnings"] == [notice + "a read of GPU data by the host (asnumpy, item, float(), Python control "
                                              "flow on values, a metric)"]
    for rank in ranks:  # from then on the collectives overlap backward again, issued from the host
        assert all(c["host_collectives"] == 2 for c in rank["counts"][4:])
    # rank 0 still captures its update alone; rank 1, whose every step capture fails, runs it eagerly
    assert ranks[0]["step_graphs"] == ["Trainer.step Adam (1 arena update(s))"] and ranks[0]["replays"] == STEPS - 5
    assert ranks[1]["step_graphs"] == [] and ranks[1]["replays"] == 0
