"""mx.checkpoint.load: what it reads, and the error a job of another size sees.

* every file (the metadata, the manifest, the parameters, the trainer states) is read once: the
  bytes hashed against the manifest are the bytes parsed;
* a checkpoint saved by another number of processes is refused with that reason, naming both
  numbers, before any other file (a missing trainer file of a rank, ...) is complained about;
  hand-made in one process, and for real between ``mpiexec -n 2`` and one process.
"""

from __future__ import annotations

import builtins
import collections
import json
import os
import shutil

import numpy as np
import pytest

import mxlite as mx
from mxlite.formats.archive import file_sha256
from tests.mpi_helpers import mpirun, needs_mpi


def _setup(seed=0):
    mx.random.seed(seed)
    net = mx.nn.Sequential(mx.nn.Dense(4, in_units=3))
    net.initialize(mx.init.Xavier(), device=[mx.cpu(0)])
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    with mx.autograd.record():
        loss = net(mx.np.array(np.ones((2, 3), np.float32))).sum()
    loss.backward()
    trainer.step(2)
    return net, trainer


def _params(net):
    return {k: p.data().asnumpy().copy() for k, p in net.collect_params().items()}


def _count_opens(monkeypatch):
    """Count the files opened (by base name) through ``open`` from now on."""
    opened: collections.Counter[str] = collections.Counter()
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)):
            opened[os.path.basename(os.fspath(file))] += 1
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    return opened


# -- read once ----------------------------------------------------------------------------------------

def test_the_metadata_and_manifest_are_read_once_per_load(tmp_path, monkeypatch):
    net, trainer = _setup()
    mx.checkpoint.save(tmp_path, net, trainer, step=5)
    net2, trainer2 = _setup(seed=3)
    opened = _count_opens(monkeypatch)
    assert mx.checkpoint.load(tmp_path, net2, trainer2) == 5
    monkeypatch.undo()
    assert opened["meta-rank0.json"] == 1, opened
    assert opened["manifest.json"] == 1, opened
    for k, v in _params(net).items():
        np.testing.assert_array_equal(_params(net2)[k], v)


def test_the_parameters_and_trainer_states_are_read_once_per_load(tmp_path, monkeypatch):
    net, trainer = _setup()
    mx.checkpoint.save(tmp_path, net, trainer, step=5)
    net2, trainer2 = _setup(seed=3)
    opened = _count_opens(monkeypatch)
    mx.checkpoint.load(tmp_path, net2, trainer2)
    monkeypatch.undo()
    assert opened["params.npz"] == 1 and opened["trainer-rank0.states"] == 1, opened


def test_metadata_rewritten_with_the_same_meaning_is_refused_naming_it(tmp_path):
    net, trainer = _setup()
    folder = mx.checkpoint.save(tmp_path, net, trainer, step=1)
    path = os.path.join(folder, "meta-rank0.json")
    original = open(path, "rb").read()
    assert b'"rank": 0' in original
    for damaged in (original.replace(b'"rank": 0', b'"rank":0 '), original + b"\n"):  # same size, other size
        with open(path, "wb") as f:
            f.write(damaged)
        with pytest.raises(ValueError, match=r"meta-rank0\.json' is damaged"):
            mx.checkpoint.load(tmp_path, *_setup(seed=3))


# -- another number of processes ----------------------------------------------------------------------

def _reseal(folder):
    """Rewrite a checkpoint's manifest to match its files and list every file there (a hand-made checkpoint)."""
    path = os.path.join(folder, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    manifest["files"] = {}
    for name in sorted(os.listdir(folder)):
        if name != "manifest.json":
            digest, size = file_sha256(os.path.join(folder, name))
            manifest["files"][name] = {"sha256": digest, "bytes": size}
    manifest["self_sha256"] = mx.checkpoint._self_digest(manifest["step"], manifest["files"])
    with open(path, "w") as f:
        json.dump(manifest, f)


def _as_if_saved_by_two(folder):
    """Turn a one-process checkpoint into what two processes would have saved (rank 1 a copy of rank 0)."""
    for rank in (0, 1):
        with open(os.path.join(folder, "meta-rank0.json")) as f:
            meta = json.load(f)
        meta.update(world_size=2, rank=rank)
        with open(os.path.join(folder, f"meta-rank{rank}.json"), "w") as f:
            json.dump(meta, f)
    if os.path.exists(os.path.join(folder, "trainer-rank0.states")):
        shutil.copy(os.path.join(folder, "trainer-rank0.states"), os.path.join(folder, "trainer-rank1.states"))
    _reseal(folder)


@pytest.mark.parametrize("saved_with_trainer", [True, False])
@pytest.mark.parametrize("load_with_trainer", [True, False])
def test_a_checkpoint_of_two_processes_loaded_by_one_names_both_world_sizes(tmp_path, saved_with_trainer,
                                                                            load_with_trainer):
    net, trainer = _setup()
    folder = mx.checkpoint.save(tmp_path, net, trainer if saved_with_trainer else None, step=7)
    _as_if_saved_by_two(folder)
    net2, trainer2 = _setup(seed=3)
    before, random_before = _params(net2), mx.random.get_state()
    with pytest.raises(ValueError, match=r"step-00000007' was saved by 2 processes and this job has 1: load it "
                                         r"with 2"):
        mx.checkpoint.load(tmp_path, net2, trainer2 if load_with_trainer else None)
    for k, v in _params(net2).items():
        np.testing.assert_array_equal(v, before[k])
    assert mx.random.get_state() == random_before


def test_a_manifest_listing_the_metadata_of_odd_ranks_is_named_damaged(tmp_path):
    net, _ = _setup()
    folder = mx.checkpoint.save(tmp_path, net, None, step=1)
    os.rename(os.path.join(folder, "meta-rank0.json"), os.path.join(folder, "meta-rank1.json"))
    _reseal(folder)
    with pytest.raises(ValueError, match=r"manifest\.json' is damaged: it lists the metadata of ranks \[1\]"):
        mx.checkpoint.load(tmp_path, net)


_WORKER = """
import json, os, sys
import numpy as np
import mxlite as mx
from mpi4py import MPI

rank = MPI.COMM_WORLD.Get_rank()
one, two, out = sys.argv[1:4]
net = mx.nn.Sequential(mx.nn.Dense(4, in_units=3))
net.initialize(mx.init.Xavier(), device=[mx.cpu(0)])
trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
try:
    mx.checkpoint.load(one, net, trainer)  # saved by one process, without a trainer
    caught = "no error"
except Exception as exc:
    caught = f"{type(exc).__name__}: {exc}"
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump(caught, f)
mx.checkpoint.save(two, net, None, step=4)
"""


@pytest.mark.mpi
@needs_mpi
def test_a_job_of_another_size_is_told_both_sizes_for_real(tmp_path):
    net, trainer = _setup()
    mx.checkpoint.save(tmp_path / "one", net, None, step=3)
    (tmp_path / "worker.py").write_text(_WORKER)
    result = mpirun(2, str(tmp_path / "worker.py"), str(tmp_path / "one"), str(tmp_path / "two"), str(tmp_path),
                    timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    errors = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert errors[0] == errors[1], errors
    assert errors[0].startswith("ValueError: checkpoint.load failed on rank 0 of 2: ValueError: checkpoint "), errors
    assert "was saved by 1 process and this job has 2: load it with 1" in errors[0], errors
    assert "not listed" not in errors[0], errors
    with pytest.raises(ValueError, match="was saved by 2 processes and this job has 1: load it with 2"):
        mx.checkpoint.load(tmp_path / "two", net, trainer)
