"""Checkpoints and resumes that cannot silently lose data or diverge.

* a Trainer resumed onto more (fewer, reordered) devices keeps its mirrors identical;
* two processes saving into one folder never delete or publish each other's staging;
* ranks that disagree on ``checkpoint.save``'s arguments, that hang before a checkpoint
  collective, or of which one fails to load: every rank gets the same error (real ``mpiexec``);
* hand-made trainer-state files with values the constructors refuse are refused at load;
* a bit flip anywhere in a checkpoint is caught by its SHA-256 manifest;
* a damaged ``latest`` is named and does not stop saves; files respect the umask; a failed save
  leaves no staging folder;
* re-initialising the model on other devices after the Trainer exists names the parameter.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import mxlite as mx
from mxlite.optimizer.updater import pack_states, unpack_states
from tests import deadlines
from tests.mpi_helpers import ROOT, mpirun, needs_mpi
from tests.training_helpers import random_backward

WORKER = os.path.join(ROOT, "tests", "resume_worker.py")
ONE, TWO = [mx.cpu(0)], [mx.cpu(0), mx.cpu(1)]


def _net(devices, seed=0):
    mx.random.seed(seed)
    net = mx.nn.Sequential(mx.nn.Dense(8, activation="relu", in_units=5), mx.nn.Dense(3, in_units=8))
    net.initialize(mx.init.Xavier(), device=devices)
    return net


def _train(net, trainer, devices, steps):
    for k in steps:
        random_backward(net, devices, np.random.default_rng(k), 4, 5, 3)
        trainer.step(4)


# -- 1. resume onto more devices --------------------------------------------------------------------

@pytest.mark.parametrize("optimizer", ["adam", "lamb", "sgd-nesterov-per-parameter"])
@pytest.mark.parametrize("before, after", [(ONE, TWO), (TWO, ONE), (TWO, TWO[::-1])],
                         ids=["one-to-two", "two-to-one", "two-reordered"])
def test_resume_onto_other_devices_keeps_the_mirrors_identical(tmp_path, optimizer, before, after):
    name, kwargs = (("sgd", {"learning_rate": 0.1, "momentum": 0.9, "nesterov": True}) if optimizer.startswith("sgd")
                    else (optimizer, {"learning_rate": 0.01}))
    net = _net(before)
    trainer = mx.Trainer(net.collect_params(), name, kwargs)
    _train(net, trainer, before, range(3))
    net.save_parameters(str(tmp_path / "p.npz"))
    trainer.save_states(tmp_path / "t.states")
    net2 = _net(after, seed=5)
    net2.load_parameters(str(tmp_path / "p.npz"))
    trainer2 = mx.Trainer(net2.collect_params(), name, kwargs)
    trainer2.load_states(tmp_path / "t.states")
    _train(net2, trainer2, after, range(3, 6))
    counts = trainer2.optimizer._all_index_update_counts
    for slot in range(len(after)):
        assert counts[slot] == counts[0], f"mirror {slot}'s update counts {counts[slot]} != mirror 0's {counts[0]}"
    assert max(counts[0].values()) == 6
    for key, p in net2.collect_params().items():
        mirrors = [d.asnumpy() for d in p.list_data()]
        for i, m in enumerate(mirrors[1:], 1):
            np.testing.assert_array_equal(m, mirrors[0], err_msg=f"{key}: mirror {i} diverged from mirror 0")


# -- 2. two processes saving into one folder --------------------------------------------------------

_CONCURRENT_SAVER = """
import os, sys
import numpy as np
import mxlite as mx
folder, offset, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
net = mx.nn.Sequential(mx.nn.Dense(64, in_units=64))
net.initialize(device=[mx.cpu(0)])
trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
bad = 0
for k in range(rounds):
    step = 2 * k + offset  # the two writers interleave their steps, and re-save each other's at times
    if k % 5 == 4:
        step = 2 * (k - 1)
    for p in net.collect_params().values():
        p.set_data(np.full(p.shape, step, np.float32))
    out = mx.checkpoint.save(folder, net, trainer, step=step, keep=3)
    names = set(os.listdir(out)) if os.path.isdir(out) else None  # the other writer may have pruned it
    if names is not None and not {"params.npz", "trainer-rank0.states", "meta-rank0.json"} <= names:
        bad += 1
        print("INCOMPLETE", out, sorted(names), flush=True)
print("DONE", bad, flush=True)
"""


def test_two_processes_saving_into_one_folder_never_publish_an_incomplete_checkpoint(tmp_path):
    script = tmp_path / "saver.py"
    script.write_text(_CONCURRENT_SAVER)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    folder = tmp_path / "ckpt"
    procs = [subprocess.Popen([sys.executable, str(script), str(folder), str(offset), "40"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env) for offset in (0, 1)]
    outputs = [p.communicate(timeout=deadlines.scaled(120))[0] for p in procs]
    for proc, out in zip(procs, outputs):
        assert proc.returncode == 0, out
        assert "DONE 0" in out, out
    assert not [n for n in os.listdir(folder) if n.startswith(".tmp-") or n.startswith(".old-")]
    steps = sorted(n for n in os.listdir(folder) if n.startswith("step-"))
    assert steps
    for name in steps:  # every published checkpoint is complete and loads with its own values
        step = int(name[len("step-"):])
        net = mx.nn.Sequential(mx.nn.Dense(64, in_units=64))
        net.initialize(device=[mx.cpu(0)])
        trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
        assert mx.checkpoint.load(folder, net, trainer, step=step) == step
        np.testing.assert_array_equal(net[0].weight.data().asnumpy(), np.full((64, 64), step, np.float32))
    assert mx.checkpoint.latest_step(folder) in [int(n[len("step-"):]) for n in steps]


def test_a_live_writers_staging_folder_is_left_alone_and_a_dead_ones_removed(tmp_path):
    net = _net(ONE)
    folder = tmp_path / "ckpt"
    mx.checkpoint.save(folder, net, None, step=1)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True)
        for name, pid in ((".tmp-step-00000002-aaaa", sleeper.pid), (".tmp-step-00000003-bbbb", int(dead.stdout))):
            os.mkdir(folder / name)
            (folder / name / "params.npz").write_bytes(b"half written")
            (folder / name / ".writer.json").write_text(json.dumps({"host": os.uname().nodename, "pid": pid}))
        mx.checkpoint.save(folder, net, None, step=4)
        left = sorted(os.listdir(folder))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert ".tmp-step-00000002-aaaa" in left  # its writer is alive
    assert ".tmp-step-00000003-bbbb" not in left  # its writer is dead


# -- 3, 4, 5. agreement between ranks (real mpiexec) -------------------------------------------------

@pytest.mark.mpi
@needs_mpi
def test_ranks_saving_another_step_get_the_same_error_naming_the_odd_rank(tmp_path):
    result = mpirun(2, WORKER, "odd_step", str(tmp_path), timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    errors = [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)]
    assert errors[0] == errors[1], errors
    assert "ranks disagree on the arguments of checkpoint.save" in errors[0]
    assert "'step' is 3 on rank 0 and 4 on rank 1" in errors[0]
    assert not (tmp_path / "ckpt").exists() or not [n for n in os.listdir(tmp_path / "ckpt") if n.startswith("step-")]


@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize("mode, what", [("hang_save", "allgather"), ("hang_barrier", "KVStore.barrier"),
                                        ("hang_nccl_id", "the NCCL unique id")])
def test_a_rank_hanging_before_a_checkpoint_collective_ends_the_job_after_the_timeout(tmp_path, mode, what):
    gpus = {}
    if mode == "hang_nccl_id":
        if mx.num_gpus() == 0:
            pytest.skip("needs a GPU per rank (real, or MXLITE_EMULATE_GPUS)")
        gpus = {"MXLITE_EMULATE_GPUS": "1"} if mx.device.devices._emulated_gpus() else {}
    start = time.monotonic()
    result = mpirun(2, WORKER, mode, str(tmp_path), timeout=60, MXLITE_COLLECTIVE_TIMEOUT="2", **gpus)
    elapsed = time.monotonic() - start
    output = result.stdout + result.stderr
    assert result.returncode == 124, output
    assert elapsed < deadlines.scaled(30), f"took {elapsed:.1f} s\n{output}"
    assert f"mxlite rank 0 of 2: {what}" in output and "did not complete within 2 s" in output, output
    assert "passed the" not in result.stdout


@pytest.mark.mpi
@needs_mpi
def test_one_rank_failing_to_load_makes_every_rank_raise_the_same_error(tmp_path):
    result = mpirun(2, WORKER, "load_fail", str(tmp_path), timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert reports[0]["error"] == reports[1]["error"], reports
    error = reports[0]["error"]
    assert error.startswith("ValueError: checkpoint.load failed on rank 1 of 2"), error
    assert "trainer-rank1.states" in error and "SHA-256" in error, error
    assert reports[0]["digest"] == reports[1]["digest"]  # rank 0 did not load alone: both start fresh alike


@pytest.mark.mpi
@needs_mpi
def test_a_rank_failing_to_write_fails_the_save_on_every_rank_and_publishes_nothing(tmp_path):
    result = mpirun(2, WORKER, "write_fail", str(tmp_path), timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert reports[0]["error"] == reports[1]["error"], reports
    assert reports[0]["error"].startswith("OSError: checkpoint.save failed on rank 1 of 2"), reports
    assert "No space left on device" in reports[0]["error"]
    assert reports[0]["left"] == [], reports  # no staging folder, no step, no latest


# -- 7. every byte of a checkpoint is checksummed ----------------------------------------------------

def _params_of(net):
    return {k: p.data().asnumpy().copy() for k, p in net.collect_params().items()}


@pytest.mark.parametrize("name", ["meta-rank0.json", "trainer-rank0.states", "params.npz", "manifest.json"])
def test_a_bit_flip_anywhere_in_a_checkpoint_is_refused_naming_the_file(tmp_path, name):
    net = _net(ONE)
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    _train(net, trainer, ONE, range(2))
    folder = mx.checkpoint.save(tmp_path, net, trainer, step=2)
    path = os.path.join(folder, name)
    original = open(path, "rb").read()
    net2 = _net(ONE, seed=9)
    trainer2 = mx.Trainer(net2.collect_params(), "adam", {"learning_rate": 0.01})
    before, random_before = _params_of(net2), mx.random.get_state()
    rng = np.random.default_rng(0)
    for position in rng.choice(len(original), size=12, replace=False):
        damaged = bytearray(original)
        damaged[position] ^= 1 << int(rng.integers(8))
        with open(path, "wb") as f:
            f.write(damaged)
        with pytest.raises(ValueError, match=name.replace(".", r"\.")):
            mx.checkpoint.load(tmp_path, net2, trainer2)
        for k, v in _params_of(net2).items():
            np.testing.assert_array_equal(v, before[k])
        assert mx.random.get_state() == random_before
    with open(path, "wb") as f:
        f.write(original)
    assert mx.checkpoint.load(tmp_path, net2, trainer2) == 2


# -- 9. a damaged latest ------------------------------------------------------------------------------

@pytest.mark.parametrize("content", [b"\xff\xfe\x00step", b"step-0000000x", b""])
def test_a_damaged_latest_is_named_lists_the_complete_steps_and_does_not_block_saves(tmp_path, content):
    net = _net(ONE)
    for step in (1, 2):
        mx.checkpoint.save(tmp_path, net, None, step=step)
    (tmp_path / "latest").write_bytes(content)
    with pytest.raises(ValueError, match=r"latest'.* is damaged.*steps \[1, 2\]"):
        mx.checkpoint.load(tmp_path, net)
    with pytest.raises(ValueError, match=r"latest'.* is damaged"):
        mx.checkpoint.latest_step(tmp_path)
    assert mx.checkpoint.load(tmp_path, net, step=1) == 1
    mx.checkpoint.save(tmp_path, net, None, step=3)  # a save replaces it
    assert mx.checkpoint.latest_step(tmp_path) == 3
    assert mx.checkpoint.load(tmp_path, net) == 3


def test_a_latest_naming_a_missing_step_is_named_with_the_complete_steps(tmp_path):
    net = _net(ONE)
    for step in (1, 2):
        mx.checkpoint.save(tmp_path, net, None, step=step)
    (tmp_path / "latest").write_text("step-00000009")
    with pytest.raises(FileNotFoundError, match=r"latest'.* names step-00000009, which is missing.*steps \[1, 2\]"):
        mx.checkpoint.load(tmp_path, net)


# -- 12. permissions and failed saves ---------------------------------------------------------------------

@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_files_and_folders_respect_the_umask(tmp_path, umask):
    net = _net(ONE)
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    old = os.umask(umask)
    try:
        folder = mx.checkpoint.save(tmp_path / "ckpt", net, trainer, step=1)
        net.save_parameters(str(tmp_path / "p.npz"))
        trainer.save_states(tmp_path / "t.states")
    finally:
        os.umask(old)
    files = [tmp_path / "p.npz", tmp_path / "t.states", tmp_path / "ckpt" / "latest"]
    files += [os.path.join(folder, n) for n in os.listdir(folder)]
    for path in files:
        assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask, path
    for path in (tmp_path / "ckpt", folder):
        assert os.stat(path).st_mode & 0o777 == 0o777 & ~umask, path


def test_a_save_that_fails_on_a_full_disk_removes_its_staging_folder(tmp_path, monkeypatch):
    net = _net(ONE)
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    mx.checkpoint.save(tmp_path, net, trainer, step=1)

    def full_disk(fname):
        raise OSError(errno.ENOSPC, "No space left on device", os.fspath(fname))

    monkeypatch.setattr(trainer, "save_states", full_disk)
    with pytest.raises(OSError, match="No space left"):
        mx.checkpoint.save(tmp_path, net, trainer, step=2)
    assert sorted(os.listdir(tmp_path)) == ["latest", "step-00000001"]
    assert mx.checkpoint.latest_step(tmp_path) == 1


# -- 10. the model re-initialised on other devices after the Trainer exists -----------------------------

def test_reinitialising_on_fewer_devices_after_the_trainer_names_the_parameter_and_cause():
    net = _net(TWO)
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    net.initialize(mx.init.Xavier(), device=ONE, force_reinit=True)
    with mx.autograd.record():
        loss = net(mx.array(np.ones((2, 5), np.float32))).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match=r"Parameter '0\.\w+' now lives on \[cpu\(0\)\].*initialised again"):
        trainer.step(2)


# -- 6. hand-made trainer-state files --------------------------------------------------------------------

def _edited_states(path, edit):
    states, optimizer_state, extra = unpack_states(open(path, "rb").read())
    edit(states, optimizer_state)
    return pack_states(states, optimizer_state, extra)


def _hyper(name, value):
    return lambda states, opt: opt["hyperparameters"].__setitem__(name, value)


def _cast(dtype):
    def edit(states, opt):
        m, v = states[0]
        states[0] = (m.astype(dtype), v)
    return edit


HAND_MADE = [
    ("lr-nan", _hyper("lr", float("nan")), r"learning_rate must be a finite number, got nan"),
    ("beta1=5", _hyper("beta1", 5), r"beta1 must lie in \[0, 1\), got 5"),
    ("rescale_grad=-1", _hyper("rescale_grad", -1), r"rescale_grad must be >= 0, got -1"),
    ("epsilon-str", _hyper("epsilon", "1e-8"), r"'epsilon' is '1e-8' \(str\)"),
    ("lazy_update-int", _hyper("lazy_update", 3), r"'lazy_update' is 3 \(int\)"),
    ("num_update<0", _hyper("num_update", -4), r"'num_update' must be an integer >= 0, got -4"),
    ("count<0", lambda states, opt: opt["update_counts"][0][1][0].__setitem__(1, -3), r"update counts must be >= 0"),
    ("int8", _cast(np.int8), r"'0\.bias' holds int8 values"),
    ("bool", _cast(np.bool_), r"'0\.bias' holds bool values"),
    ("complex", _cast(np.complex64), r"'0\.bias' holds complex64 values"),
    ("str", _cast(np.str_), r"'0\.bias' holds str\d* values"),
    ("nan-state", lambda states, opt: states[0][0].__setitem__(0, np.nan), r"'0\.bias' holds inf or NaN"),
    ("one-array", lambda states, opt: states.__setitem__(0, states[0][0]), r"'0\.bias' does not have the structure"),
    ("scheduler-nan", lambda states, opt: opt["lr_scheduler"]["state"].__setitem__("factor", float("nan")),
     r"'factor' of FactorScheduler is nan"),
    ("scheduler-count<0", lambda states, opt: opt["lr_scheduler"]["state"].__setitem__("count", -2),
     r"'count' of FactorScheduler is -2"),
    # counts that would restart or skip a bias correction on resume (N12)
    ("counts-mirror-3-only", lambda states, opt: opt["update_counts"][0].__setitem__(0, 3),
     r"mirrors \[3\] but not for mirror 0"),
    ("counts-mirrors-0-2", lambda states, opt: opt["update_counts"].append([2, opt["update_counts"][0][1]]),
     r"mirrors \[0, 2\]; a Trainer's state file holds mirrors 0\.\.k-1"),
    ("counts-mirror-twice", lambda states, opt: opt["update_counts"].append(list(opt["update_counts"][0])),
     r"given twice for mirror 0"),
    ("counts-index-twice", lambda states, opt: opt["update_counts"][0][1].append(list(opt["update_counts"][0][1][0])),
     r"mirror 0 are given twice for index 0"),
    ("counts-index-9", lambda states, opt: opt["update_counts"][0][1].append([9, 3]),
     r"indices \[9\], which are not parameter indices of this Trainer"),
    ("float16", _cast(np.float16), r"'0\.bias' holds float16 values; this Trainer keeps float32 states"),
    ("float64", _cast(np.float64), r"'0\.bias' holds float64 values; this Trainer keeps float32 states"),
]


@pytest.mark.parametrize("edit, match", [c[1:] for c in HAND_MADE], ids=[c[0] for c in HAND_MADE])
def test_hand_made_states_with_values_the_constructors_refuse_are_refused_before_anything_changes(
        tmp_path, edit, match):
    def make():
        net = _net(ONE)
        schedule = mx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.01)
        return net, mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01, "lr_scheduler": schedule})

    net, trainer = make()
    _train(net, trainer, ONE, range(3))
    trainer.save_states(tmp_path / "good.states")
    (tmp_path / "bad.states").write_bytes(_edited_states(tmp_path / "good.states", edit))
    net2, trainer2 = make()
    _train(net2, trainer2, ONE, range(1))
    trainer2.save_states(tmp_path / "before.states")
    with pytest.raises(ValueError, match=match) as caught:
        trainer2.load_states(tmp_path / "bad.states")
    assert "bad.states" in str(caught.value)
    trainer2.save_states(tmp_path / "after.states")
    assert (tmp_path / "after.states").read_bytes() == (tmp_path / "before.states").read_bytes()
    trainer2.load_states(tmp_path / "good.states")  # the untouched file still loads


def _deflated_states(path, member_elements):
    """A states file whose '0.bias' state array is replaced by a deflated zero array of ``member_elements``
    float32 values (about 64 KB of file per 64 MiB declared), every other member kept."""
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename == "0/0.npy":
                buf = io.BytesIO()
                np.save(buf, np.zeros(member_elements, np.float32))
                data = buf.getvalue()
            target.writestr(info.filename, data)
    return out.getvalue()


def test_a_states_file_inflating_past_the_models_size_is_refused_from_its_headers(tmp_path):
    # The trainer-state counterpart of N6: a small file declaring 64 MiB of state for a bias of a few
    # elements. The headers are read first and the arrays bounded by the Trainer's parameter sizes, so
    # the refusal names the bytes before anything is inflated (peak memory grows by far less than 64 MiB).
    import tracemalloc

    net = _net(ONE)
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    _train(net, trainer, ONE, range(1))
    trainer.save_states(tmp_path / "good.states")
    (tmp_path / "big.states").write_bytes(_deflated_states(tmp_path / "good.states", 1 << 24))
    assert (tmp_path / "big.states").stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"big\.states.*state arrays declare \d+ bytes, more than the \d+ bytes"):
            trainer.load_states(tmp_path / "big.states")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"the refusal allocated {peak >> 20} MiB first"
    trainer.load_states(tmp_path / "good.states")  # the untouched file still loads


def test_unpack_states_reads_only_the_arrays_its_manifest_names_and_bounds_them(tmp_path):
    net = _net(ONE)
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    _train(net, trainer, ONE, range(1))
    trainer.save_states(tmp_path / "good.states")
    data = (tmp_path / "good.states").read_bytes()
    states, _, _ = unpack_states(data)
    need = sum(a.nbytes for v in states.values() for a in (v if isinstance(v, tuple) else (v,)))
    assert unpack_states(data, limit=need)[0].keys() == states.keys()
    with pytest.raises(ValueError, match=rf"state arrays declare {need} bytes, more than the {need - 1} bytes"):
        unpack_states(data, limit=need - 1)
