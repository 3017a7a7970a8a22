"""Sharded optimizer states (ZeRO-1): ``Trainer(shard_optimizer_states=True)``.

* the same numbers: 50 steps sharded equal 50 steps unsharded, bit for bit for SGD with momentum,
  Adam, AdamW and float16 with master weights, to float32 rounding for LAMB and LARS (their norms
  add partial sums over the shards), on 2 and 3 CPU devices, 2 emulated GPUs with the 'nccl' store,
  2 MPI ranks (``mpiexec -n 2``) of 1 and 2 CPU devices, of 1 emulated GPU (NCCL) and of 2
  (host-staged over MPI); every mirror ends identical;
* each device keeps the states of its slice only (its buffers' length), the slices tile the arena,
  balanced and aligned; the owned pieces of every bucket map to the data slices;
* the piece collectives (``reduce_to_owners``, ``gather_from_owners``) give ``allreduce``'s bits;
  on the emulated NCCL a sharded step's ring bytes equal the unsharded step's (padding aside) with
  0 host synchronisations, and its optimizer states take 1/N of the memory;
* fp16 wire, AMP skip-on-overflow, ``check_finite``, ``allreduce_grads()`` then ``update()``,
  ``ignore_stale_grad`` and an arena that grows after training started (the states re-shard) keep
  the unsharded numbers; ``update_on_kvstore``, ``partial_sync``, error-feedback codecs and rules
  without a fused update are refused with a message;
* ``save_states`` gathers the states into the per-parameter file: sharded and unsharded files hold
  the same states, and either loads into a sharded or unsharded Trainer on any number of devices
  (re-sharding) and continues bit for bit; ``mx.checkpoint`` saves and resumes sharded training,
  also over 2 MPI ranks.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import mxlite as mx
from mxlite import comm
from mxlite.comm.buckets import _owned_pieces
from mxlite.optimizer import states_archive
from tests.mpi_helpers import ROOT, mpirun_ok, needs_mpi
from tests.test_shard_collectives import _gpu_io
from tests.zero_worker import BATCH, CASES, NORM_RULES, build, mirrors, run, state_lengths, train

WORKER = os.path.join(ROOT, "tests", "zero_worker.py")
HULL = 496 + 48 + 192 + 16  # build()'s slots
needs_two_gpus = pytest.mark.skipif(mx.num_gpus() < 2, reason="needs 2 GPUs (or the emulation)")


def _cpus(n):
    return [mx.cpu(i) for i in range(n)]


def _check_same(plain, sharded, case, exact=True):
    """Sharded values equal the unsharded ones (bits, or float32 rounding for norm rules), every mirror alike."""
    for name, values in sharded.items():
        for m, value in enumerate(values):
            assert value.tobytes() == values[0].tobytes(), f"{name}: mirror {m} differs from mirror 0"
            want = plain[name][m]
            if case in NORM_RULES or not exact:
                np.testing.assert_allclose(value, want, rtol=2e-5, atol=2e-6, err_msg=name)
            else:
                assert value.tobytes() == want.tobytes(), f"{case}: {name} mirror {m}"


def _check_slices(trainer, devices):
    """Each sharded updater holds states for its slice only; the slices tile [0, HULL), balanced and aligned."""
    shards = sorted(u.shard for u in trainer._arena_updaters.values() if u.shard is not None)
    assert shards[0][0] == 0 and shards[-1][1] == HULL and len(shards) == devices
    assert all(a[1] == b[0] for a, b in zip(shards, shards[1:]))
    assert all(start % 16 == 0 for start, _ in shards)
    lengths = [end - start for start, end in shards]
    assert max(lengths) - min(lengths) <= 16
    assert state_lengths(trainer) == sorted(lengths)


# -- the same numbers --------------------------------------------------------------------------------------
@pytest.mark.parametrize("devices", [2, 3])
@pytest.mark.parametrize("case", [*CASES, "lars"])
def test_cpu_devices_train_sharded_to_the_unsharded_numbers(devices, case):
    plain, _ = train(_cpus(devices), "device", False, case)
    sharded, trainer = train(_cpus(devices), "device", True, case)
    _check_same(mirrors(plain), mirrors(sharded), case)
    _check_slices(trainer, devices)


def test_one_bucket_for_the_whole_arena_shards_alike():
    plain, _ = train(_cpus(2), "device", False, "adam", steps=10, bucket_bytes=2**20)
    sharded, trainer = train(_cpus(2), "device", True, "adam", steps=10, bucket_bytes=2**20)
    _check_same(mirrors(plain), mirrors(sharded), "adam")
    assert len(next(iter(trainer._syncs.values()))[1].buckets) == 1


@pytest.mark.gpu
@needs_two_gpus
@pytest.mark.parametrize("case", [*CASES, "lars"])
def test_two_gpus_over_nccl_train_sharded_to_the_unsharded_numbers(case):
    gpus = [mx.gpu(0), mx.gpu(1)]
    plain, _ = train(gpus, "nccl", False, case)
    sharded, trainer = train(gpus, "nccl", True, case)
    assert type(next(iter(trainer._syncs.values()))[0]).__name__ == "NcclCommunicator"
    # real NCCL's reduce may add in another order than its allReduce: bits on the emulation only
    _check_same(mirrors(plain), mirrors(sharded), case, exact=bool(mx.device.devices._emulated_gpus()))
    _check_slices(trainer, 2)


@pytest.mark.gpu
@needs_two_gpus
@pytest.mark.parametrize("codec", ["fp16", "bf16"])
def test_half_precision_wires_reduce_onto_the_owners(codec):
    gpus = [mx.gpu(0), mx.gpu(1)]
    args = {"compression_params": {"type": codec}}
    plain, _ = train(gpus, "device", False, "adam", steps=20, **args)
    sharded, _ = train(gpus, "device", True, "adam", steps=20, **args)
    _check_same(mirrors(plain), mirrors(sharded), "adam", exact=bool(mx.device.devices._emulated_gpus()))


# -- MPI: mpiexec -n 2 -----------------------------------------------------------------------------------
def _mpi_train(tmp_path, kind, count):
    env = {"MXLITE_EMULATE_GPUS": str(count)} if kind == "gpu" else {}
    mpirun_ok(2, WORKER, "train", str(tmp_path), kind, str(count), timeout=600, **env)
    arrays = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(2)]
    info = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for case in CASES:
        for rank in range(2):
            for key, value in arrays[rank].items():
                if not key.startswith(f"{case}-True-"):
                    continue
                want = arrays[rank][key.replace("-True-", "-False-")]
                assert value.tobytes() == arrays[0][key].tobytes(), f"rank {rank} differs from rank 0: {key}"
                if case in NORM_RULES:
                    np.testing.assert_allclose(value, want, rtol=2e-5, atol=2e-6, err_msg=key)
                else:
                    assert value.tobytes() == want.tobytes(), key
        lengths = info[0]["lengths"][case] + info[1]["lengths"][case]
        assert sum(lengths) == HULL and len(lengths) == 2 * count
    return info


@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize("count", [1, 2])
def test_two_ranks_of_cpu_devices_train_sharded_to_the_unsharded_numbers(tmp_path, count):
    info = _mpi_train(tmp_path, "cpu", count)
    assert info[0]["comm"] == "MpiCommunicator"


@pytest.mark.mpi
@pytest.mark.gpu
@needs_mpi
@pytest.mark.parametrize("count, carrier", [(1, "NcclCommunicator"), (2, "MpiCommunicator")])
def test_two_ranks_of_emulated_gpus_train_sharded_to_the_unsharded_numbers(tmp_path, count, carrier):
    if not mx.device.devices._emulated_gpus():
        pytest.skip("compares bits with the emulated NCCL and sets the emulated GPUs per rank")
    info = _mpi_train(tmp_path, "gpu", count)
    assert info[0]["comm"] == carrier  # several GPUs per process: host-staged over MPI


@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize("kind, count", [("cpu", 2), pytest.param("gpu", 1, marks=pytest.mark.gpu)])
def test_two_ranks_gather_sharded_states_and_resume_a_sharded_checkpoint(tmp_path, kind, count):
    if kind == "gpu" and not mx.device.devices._emulated_gpus():
        pytest.skip("sets one emulated GPU per rank")
    env = {"MXLITE_EMULATE_GPUS": str(count)} if kind == "gpu" else {}
    mpirun_ok(2, WORKER, "states", str(tmp_path), kind, str(count), timeout=600, **env)
    for rank in range(2):
        plain = states_archive.unpack((tmp_path / f"False-rank{rank}.states").read_bytes(), states_archive.TRAINER)
        sharded = states_archive.unpack((tmp_path / f"True-rank{rank}.states").read_bytes(), states_archive.TRAINER)
        assert sorted(plain[0]) == sorted(sharded[0]) == [0, 1, 2, 3]
        for index, state in plain[0].items():
            assert [a.tobytes() for a in state] == [a.tobytes() for a in sharded[0][index]], index
        assert plain[1]["update_counts"] == sharded[1]["update_counts"]
        straight = dict(np.load(tmp_path / f"rank{rank}-straight.npz"))
        resumed = dict(np.load(tmp_path / f"rank{rank}-resumed.npz"))
        assert all(straight[k].tobytes() == resumed[k].tobytes() for k in straight)
    # the checkpoint keeps the gathered states once, in rank 0's file; rank 1's says where they are
    folder = tmp_path / "ckpt" / "step-00000003"
    files = [states_archive.unpack((folder / f"trainer-rank{r}.states").read_bytes(), states_archive.TRAINER)
             for r in range(2)]
    assert sorted(files[0][0]) == [0, 1, 2, 3] and files[1][0] == {} and files[1][3]["states_elsewhere"]
    assert json.loads((folder / "meta-rank1.json").read_text())["trainer_states_in"] == "trainer-rank0.states"
    assert set(json.loads((folder / "manifest.json").read_text())["files"]) >= {"trainer-rank0.states",
                                                                                "trainer-rank1.states"}
    net = build(_cpus(2))
    trainer = mx.Trainer(net.collect_params(), "adam", dict(CASES["adam"][1]), kvstore="device")
    with pytest.raises(ValueError, match="holds no parameter states .* load the checkpoint with mx.checkpoint.load"):
        trainer.load_states(folder / "trainer-rank1.states")
    trainer.load_states(folder / "trainer-rank0.states")  # whole states: they load on their own


# -- slices, pieces and the piece collectives ----------------------------------------------------------------
@pytest.mark.parametrize("devices", [2, 3, 4])
def test_every_bucket_element_goes_to_the_owner_of_its_data(devices):
    _, trainer = train(_cpus(devices), "device", True, "sgd", steps=1, bucket_bytes=300)
    sync = next(iter(trainer._syncs.values()))[1]
    layout = sync.layouts[0]
    assert layout.bounds == [(a, b) for a, b in comm.shard_bounds(HULL, devices)]
    for bucket in sync.buckets:
        covered = []
        for start, end, owner in bucket.pieces:
            covered.extend(range(start, end))
            for g in range(start, end):  # the element's data offset lies in its owner's slice
                at = bucket.start[0] + g
                param = next(p for p in bucket.params
                             if p.arena_slots()[0][1].grad_offset <= at < p.arena_slots()[0][1].grad_offset
                             + p.arena_slots()[0][1].span)
                slot = param.arena_slots()[0][1]
                d = slot.offset + at - slot.grad_offset
                lo, hi = layout.bounds[owner]
                assert lo <= d < hi
        assert covered == list(range(bucket.end[0] - bucket.start[0]))  # the pieces tile the bucket, in order
        assert _owned_pieces(bucket, layout) == bucket.pieces


def _pieces_case(length, parts, seed):
    rng = np.random.default_rng(seed)
    cuts = sorted(set(rng.integers(0, length + 1, size=5).tolist()) | {0, length})
    return [(a, b, int(rng.integers(0, parts))) for a, b in zip(cuts, cuts[1:])]


def _check_pieces(c, to_device, to_host, length, dtype="float32"):
    parts = c.contributions
    rng = np.random.default_rng(length)
    src = [(rng.normal(size=length) * 10.0 ** rng.uniform(-3, 3, size=length)).astype(dtype) for _ in range(parts)]
    pieces = _pieces_case(length, parts, length)
    want = to_device(src)
    c.allreduce(want).wait()
    want = to_host(want)
    bufs = to_device(src)
    c.reduce_to_owners(bufs, pieces).wait()
    got = to_host(bufs)
    for start, end, owner in pieces:
        assert got[owner][start:end].tobytes() == want[owner][start:end].tobytes()
        for j in range(parts):
            if j != owner:
                assert got[j][start:end].tobytes() == src[j][start:end].tobytes()  # untouched
    c.gather_from_owners(bufs, pieces).wait()
    for j, value in enumerate(to_host(bufs)):
        assert value.tobytes() == want[j].tobytes()


@pytest.mark.parametrize("devices", [1, 2, 3])
@pytest.mark.parametrize("length", [0, 5, 100, 1000])
def test_local_piece_collectives_are_the_allreduce(devices, length):
    copy = lambda xs: [x.copy() for x in xs]  # noqa: E731
    _check_pieces(comm.LocalCommunicator(_cpus(devices)), copy, copy, length)
    _check_pieces(comm.LocalCommunicator(_cpus(devices)), copy, copy, length, "float16")


def test_piece_collectives_reject_pieces_outside_the_buffer():
    c = comm.LocalCommunicator(_cpus(2))
    with pytest.raises(ValueError, match=r"piece \(3, 9, owner 0\) does not lie in a buffer of 8 elements"):
        c.reduce_to_owners([np.zeros(8), np.zeros(8)], [(3, 9, 0)])
    with pytest.raises(ValueError, match=r"owner 2\) does not lie .* with an owner in 0..1"):
        c.gather_from_owners([np.zeros(8), np.zeros(8)], [(0, 4, 2)])


@pytest.mark.gpu
@needs_two_gpus
@pytest.mark.parametrize("carrier", ["local", "nccl"])
def test_gpu_piece_collectives_are_the_allreduce(carrier):
    if carrier == "nccl" and not mx.device.devices._emulated_gpus():
        pytest.skip("real NCCL's reduce may add in another order than its allReduce")
    gpus = [mx.gpu(0), mx.gpu(1)]
    c = comm.LocalCommunicator(gpus) if carrier == "local" else comm.NcclCommunicator(gpus)
    for length in (5, 100, 1000):
        _check_pieces(c, *_gpu_io(gpus), length)


@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize("count", [1, 2])
def test_mpi_piece_collectives_are_the_allreduce(tmp_path, count):
    mpirun_ok(2, WORKER, "pieces", str(tmp_path), "cpu", str(count))
    for rank in range(2):
        found = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert found and all(all(checks) for checks in found.values()), found


# -- counted on the emulated GPUs ----------------------------------------------------------------------------
def _emulation():
    if not mx.device.devices._emulated_gpus():
        pytest.skip("counts what the emulated GPUs do")
    from mxlite._emulation import install

    return install


def _counted_step(install, shard, case="adam"):
    gpus = [mx.gpu(0), mx.gpu(1)]
    name, kwargs, dtype = CASES[case]
    net = build(gpus, dtype)
    trainer = mx.Trainer(net.collect_params(), name, dict(kwargs), kvstore="nccl", bucket_bytes=600,
                         shard_optimizer_states=shard)
    run(net, trainer, gpus, 0, 2, dtype)
    for d in gpus:
        with d.use():
            d.xp.cuda.get_current_stream().synchronize()
    install.reset_counters()
    run(net, trainer, gpus, 2, 3, dtype)
    counters = install.counters()
    states = [sum(u.state_nbytes for u in trainer._arena_updaters.values() if u.arena.device == d) for d in gpus]
    return counters, states, trainer


@pytest.mark.gpu
@needs_two_gpus
@pytest.mark.parametrize("case", ["adam", "fp16", "lamb"])
def test_a_sharded_step_moves_the_allreduces_bytes_without_host_syncs_on_half_the_state_memory(case):
    install = _emulation()
    plain, plain_states, _ = _counted_step(install, False, case)
    sharded, sharded_states, trainer = _counted_step(install, True, case)
    itemsize = np.dtype(CASES[case][2]).itemsize
    for g in (0, 1):
        ring = {k: v for k, v in sharded[g]["nccl_ring_bytes"].items() if v}
        assert set(ring) <= {"reduce", "bcast", "allGather", "allReduce"}
        table = ring.pop("allReduce", 0.0)  # LAMB: one (entries x 2) float64 table of norm sums per step
        assert table == (2 * (2 - 1) / 2 * 8 * 2 * 4 if case == "lamb" else 0.0)  # ring: 2 (n-1)/n of 4 x 2 doubles
        # the reduce moves the gradient buckets' bytes, the all-gather the slices' (HULL: no padding here)
        assert sum(ring.values()) == plain[g]["nccl_ring_bytes"]["allReduce"] == itemsize * HULL
        assert sharded[g]["host_syncs"] == plain[g]["host_syncs"] == 0
        assert sharded[g]["d2h_bytes"] == 0
    half = itemsize == 2
    per_element = 4 * (2 + half)  # Adam's moments, and float32 master weights for float16
    assert plain_states == [per_element * HULL] * 2
    assert sharded_states == [per_element * (end - start) for start, end in comm.shard_bounds(HULL, 2)]
    assert sum(sharded_states) == plain_states[0]


# -- the rest of the Trainer keeps working -----------------------------------------------------------------------
def _loss_scaled_run(devices, shard, overflow_at):
    net = build(devices, "float16")
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9}, kvstore="device",
                         bucket_bytes=600, shard_optimizer_states=shard)
    mx.amp.init_trainer(trainer, mx.amp.LossScaler(init_scale=1024.0))
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    scales, changed = [], []
    for step in range(6):
        x, y = (a.astype("float16") for a in _batch(step))
        if step == overflow_at:
            x[1, 0] = np.inf  # only the second device's half of the batch overflows
        before = net[0].weight.data().asnumpy().copy()
        xs, ys = mx.split_and_load(x, devices), mx.split_and_load(y, devices)
        with mx.autograd.record():
            losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
            with mx.amp.scale_loss(losses, trainer) as scaled:
                mx.autograd.backward(scaled)
        trainer.step(BATCH)
        scales.append(trainer._amp_loss_scaler.loss_scale)
        changed.append(not np.array_equal(before, net[0].weight.data().asnumpy()))
    return mirrors(net), scales, changed


def _setup(devices, shard, optimizer="adam", **args):
    net = build(devices)
    trainer = mx.Trainer(net.collect_params(), optimizer, {"learning_rate": 0.01}, kvstore="device",
                         bucket_bytes=600, shard_optimizer_states=shard, **args)
    return net, trainer


def _backward(net, devices, x, y):
    xs, ys = mx.split_and_load(x, devices), mx.split_and_load(y, devices)
    with mx.autograd.record():
        losses = [mx.loss.SoftmaxCrossEntropyLoss()(net(a), b) for a, b in zip(xs, ys)]
    mx.autograd.backward(losses)


def _batch(step):
    rng = np.random.default_rng(500 + step)
    return rng.standard_normal((BATCH, 13)).astype(np.float32), rng.integers(0, 5, BATCH).astype(np.float32)


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_loss_scaling_skips_a_step_that_overflowed_on_one_device_only():
    plain = _loss_scaled_run(_cpus(2), False, overflow_at=2)
    sharded = _loss_scaled_run(_cpus(2), True, overflow_at=2)
    assert sharded[1] == plain[1] == [1024.0, 1024.0, 512.0, 512.0, 512.0, 512.0]
    assert sharded[2] == plain[2] == [True, True, False, True, True, True]
    _check_same(plain[0], sharded[0], "fp16")


def test_check_finite_names_the_parameter_and_writes_nothing():
    devices = _cpus(2)
    net, trainer = _setup(devices, True, check_finite=True)
    run(net, trainer, devices, 0, 1, "float32")
    before = mirrors(net)
    x, y = _batch(0)
    x[BATCH - 1, :] = np.nan  # the second device's half
    _backward(net, devices, x, y)
    with pytest.raises(FloatingPointError, match=r"the gradient of Parameter '0\.\w+' holds inf or NaN"):
        trainer.step(BATCH)
    after = mirrors(net)
    assert all(a.tobytes() == b.tobytes() for k in before for a, b in zip(before[k], after[k]))


def test_allreduce_grads_then_update_gives_every_mirror_the_sums():
    results = []
    for shard in (False, True):
        devices = _cpus(3)
        net, trainer = _setup(devices, shard, "adamw")
        grads = []
        for step in range(3):
            _backward(net, devices, *_batch(step))
            trainer.allreduce_grads()  # e.g. to clip by the global norm before updating
            grads.append({k: [g.asnumpy() for g in p.list_grad()] for k, p in net.collect_params().items()})
            trainer.update(BATCH)
        results.append((mirrors(net), grads))
    (plain, plain_grads), (sharded, sharded_grads) = results
    _check_same(plain, sharded, "adamw")
    for a, b in zip(plain_grads, sharded_grads):
        assert all(x.tobytes() == y.tobytes() for k in a for x, y in zip(a[k], b[k]))


def test_stale_parameters_are_skipped_on_every_shard():
    results = []
    for shard in (False, True):
        devices = _cpus(2)
        net, trainer = _setup(devices, shard)
        for step in range(4):
            x, _ = _batch(step)
            xs = mx.split_and_load(x, devices)
            with mx.autograd.record():  # the second layer is used at even steps only
                losses = [(net(a) if step % 2 == 0 else net[0](a)).sum() for a in xs]
            mx.autograd.backward(losses)
            trainer.step(BATCH, ignore_stale_grad=True)
        results.append(mirrors(net))
    _check_same(results[0], results[1], "adam")


def _grown_run(shard, devices):
    """Trains 3 steps, then a layer joins the model and the Trainer (the arena grows), 3 more steps."""
    net, trainer = _setup(devices, shard)
    for step in range(6):
        if step == 3:
            net.add(mx.nn.Dense(5, in_units=5))
            net.initialize(mx.init.Xavier(), device=devices)
            trainer._params = list(dict.fromkeys([*trainer._params, *net.collect_params().values()]))
            trainer._optimizer.param_dict = dict(enumerate(trainer._params))
        run(net, trainer, devices, step, step + 1, "float32")
    return mirrors(net), trainer


@pytest.mark.parametrize("devices", [2, 3])
def test_states_re_shard_when_the_arena_grows_after_training_started(devices):
    plain, _ = _grown_run(False, _cpus(devices))
    sharded, trainer = _grown_run(True, _cpus(devices))
    _check_same(plain, sharded, "adam")
    assert sum(state_lengths(trainer)) == HULL + 32 + 16  # the new layer's slots joined the slices


@pytest.mark.parametrize("args, message", [
    ({"update_on_kvstore": True}, "cannot be combined with update_on_kvstore=True"),
    ({"partial_sync": True}, "cannot be combined with partial_sync"),
    ({"compression_params": {"type": "2bit", "threshold": 0.5}}, "cannot be combined with '2bit' compression"),
    ({"optimizer": "sgld"}, "needs an optimizer with a fused update; SGLD has none"),
])
def test_what_cannot_shard_is_refused_with_a_message(args, message):
    net = build(_cpus(2))
    args = dict(args)
    optimizer = args.pop("optimizer", "adam")
    with pytest.raises(ValueError, match=message):
        mx.Trainer(net.collect_params(), optimizer, kvstore="device", shard_optimizer_states=True, **args)


def test_one_device_has_nothing_to_shard():
    plain, _ = train(_cpus(1), "device", False, "adam", steps=5)
    sharded, trainer = train(_cpus(1), "device", True, "adam", steps=5)
    _check_same(mirrors(plain), mirrors(sharded), "adam")
    assert all(u.shard is None for u in trainer._arena_updaters.values())


# -- saving and loading ---------------------------------------------------------------------------------------
def _trained(devices, shard, steps, states=None, params=None, case="adam"):
    name, kwargs, dtype = CASES[case]
    net = build(devices, dtype)
    if params is not None:
        net.load_parameters(params, device=devices)
    trainer = mx.Trainer(net.collect_params(), name, dict(kwargs), kvstore="device", bucket_bytes=600,
                         shard_optimizer_states=shard)
    if states is not None:
        trainer.load_states(states)
    first = 0 if states is None else 5
    run(net, trainer, devices, first, first + steps, dtype)
    return net, trainer


@pytest.mark.parametrize("case", ["adam", "fp16", "lamb"])
def test_sharded_states_save_as_whole_parameters_and_load_onto_any_layout(tmp_path, case):
    net, trainer = _trained(_cpus(2), True, 5, case=case)
    trainer.save_states(tmp_path / "sharded.states")
    net.save_parameters(str(tmp_path / "p.npz"))
    _, plain_trainer = _trained(_cpus(2), False, 5, case=case)
    plain_trainer.save_states(tmp_path / "plain.states")
    files = [states_archive.unpack((tmp_path / f).read_bytes(), states_archive.TRAINER) for f in
             ("plain.states", "sharded.states")]
    for index, state in files[0][0].items():  # the same per-parameter layout and values
        leaves = states_archive.state_arrays(state)
        other = states_archive.state_arrays(files[1][0][index])
        if case in NORM_RULES:
            for a, b in zip(leaves, other):
                np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)
        else:
            assert [a.tobytes() for a in leaves] == [b.tobytes() for b in other], index
    params = str(tmp_path / "p.npz")
    for devices in (2, 3):
        # resumed from the sharded file: sharded on 2 or 3 devices (re-sharding) equals unsharded
        plain, _ = _trained(_cpus(devices), False, 4, tmp_path / "sharded.states", params, case)
        sharded, _ = _trained(_cpus(devices), True, 4, tmp_path / "sharded.states", params, case)
        _check_same(mirrors(plain), mirrors(sharded), case)
    # and the reverse: an unsharded file into a sharded Trainer
    plain, _ = _trained(_cpus(3), False, 4, tmp_path / "plain.states", params, case)
    sharded, _ = _trained(_cpus(3), True, 4, tmp_path / "plain.states", params, case)
    _check_same(mirrors(plain), mirrors(sharded), case)


def test_a_sharded_run_resumes_from_save_states_bit_for_bit(tmp_path):
    straight, _ = _trained(_cpus(2), True, 9)
    net, trainer = _trained(_cpus(2), True, 5)
    trainer.save_states(tmp_path / "s.states")
    net.save_parameters(str(tmp_path / "p.npz"))
    resumed, _ = _trained(_cpus(2), True, 4, tmp_path / "s.states", str(tmp_path / "p.npz"))
    _check_same(mirrors(straight), mirrors(resumed), "adam")


def _from_checkpoint(folder, count, shard):
    net = build(_cpus(count))
    trainer = mx.Trainer(net.collect_params(), "adam", dict(CASES["adam"][1]), kvstore="device", bucket_bytes=600,
                         shard_optimizer_states=shard)
    assert mx.checkpoint.load(folder, net, trainer) == 5
    run(net, trainer, _cpus(count), 5, 9, "float32")
    return mirrors(net)


def test_checkpoints_resume_sharded_training_and_load_onto_other_devices(tmp_path):
    devices = _cpus(2)
    net, trainer = _trained(devices, True, 5)
    mx.checkpoint.save(tmp_path / "ckpt", net, trainer, step=5)
    run(net, trainer, devices, 5, 9, "float32")
    _check_same(mirrors(net), _from_checkpoint(tmp_path / "ckpt", 2, True), "adam")
    # 3 devices split each batch otherwise: sharded and unsharded resume alike there
    _check_same(_from_checkpoint(tmp_path / "ckpt", 3, False), _from_checkpoint(tmp_path / "ckpt", 3, True), "adam")


@pytest.mark.parametrize("case", ["sgd", "adam", "adamw", "fp16"])
def test_the_numpy_twins_update_slices_alike(monkeypatch, case):
    from mxlite.optimizer import _fused

    monkeypatch.setattr(_fused, "compiled_on_cpu", lambda: False)  # MXLITE_CPU_KERNELS=numpy's path
    plain, _ = train(_cpus(3), "device", False, case, steps=10)
    sharded, _ = train(_cpus(3), "device", True, case, steps=10)
    _check_same(mirrors(plain), mirrors(sharded), case)


def test_norm_rules_on_the_numpy_twins_are_refused_sharded(monkeypatch):
    from mxlite.optimizer import _fused

    monkeypatch.setattr(_fused, "compiled_on_cpu", lambda: False)
    with pytest.raises(ValueError, match="sharded optimizer states with LAMB need the fused kernels"):
        train(_cpus(2), "device", True, "lamb", steps=1)
