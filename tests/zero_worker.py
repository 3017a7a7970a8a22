"""Sharded optimizer states (ZeRO-1): the training runs the tests compare, and a rank of the MPI tests.

:func:`train` trains a small MLP whose parameters straddle shard boundaries, sharded or not, on
this process's devices and (under ``mpiexec``) over every process, each process taking its share
of a global batch and each device its share of that. tests/test_sharded_states.py calls it in
process (CPU devices, emulated GPUs) and runs this file under ``mpiexec -n 2``:

Usage: ``python tests/zero_worker.py MODE OUT_DIR KIND DEVICES``

* ``train``: KIND 'cpu' or 'gpu', DEVICES per rank; for every case of :data:`CASES`, trains
  unsharded and sharded with ``kvstore='dist_sync'`` and writes every parameter (each mirror) to
  ``OUT_DIR/rank{r}.npz`` as ``{case}-{sharded}-{name}-{mirror}``, and to ``OUT_DIR/rank{r}.json``
  the communicator used and the length of every sharded updater's state buffers.
* ``states``: Adam, 6 steps unsharded and sharded, then ``save_states`` of each into
  ``OUT_DIR/{sharded}-rank{r}.states`` (the sharded file is gathered from both ranks); then a
  ``checkpoint.save`` at step 3 of a sharded run, loaded into a fresh sharded net and Trainer, and
  trained on: its parameters go to ``OUT_DIR/rank{r}-resumed.npz`` beside the straight run's
  (``OUT_DIR/rank{r}-straight.npz``).
* ``pieces``: ``reduce_to_owners`` and ``gather_from_owners`` of an MpiCommunicator over DEVICES
  devices against its ``allreduce`` (see :func:`main_pieces`).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

import mxlite as mx

BATCH = 24
# case -> (optimizer, its arguments, parameter dtype)
CASES = {
    "sgd": ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}, "float32"),
    "adam": ("adam", {"learning_rate": 0.01, "wd": 1e-3}, "float32"),
    "adamw": ("adamw", {"learning_rate": 0.01, "wd": 0.01}, "float32"),
    "lamb": ("lamb", {"learning_rate": 0.01, "wd": 0.01}, "float32"),
    "fp16": ("adam", {"learning_rate": 0.01, "multi_precision": True}, "float16"),
}
NORM_RULES = ("lamb", "lars")  # per-parameter norms: their shards add partial sums (float32 rounding differs)


def build(devices, dtype: str = "float32", seed: int = 3):
    """Dense(37) over 13 inputs and Dense(5): slots of 496, 48, 192 and 16 elements (752 in all), so that the
    shards of 2, 3 or 4 devices cut the first weight and others."""
    mx.random.seed(seed)
    net = mx.nn.Sequential(mx.nn.Dense(37, activation="relu", in_units=13), mx.nn.Dense(5, in_units=37))
    net.initialize(mx.init.Xavier(), device=devices)
    if dtype != "float32":
        net.cast(dtype)
    return net


def batch(step: int, dtype: str):
    rng = np.random.default_rng(1000 + step)
    return rng.standard_normal((BATCH, 13)).astype(dtype), rng.integers(0, 5, BATCH).astype(dtype)


def run(net, trainer, devices, first: int, last: int, dtype: str, rank: int = 0, size: int = 1) -> None:
    """Steps ``first`` to ``last - 1``: this process's share of each global batch, split over its devices."""
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    share = BATCH // size
    for step in range(first, last):
        x, y = batch(step, dtype)
        mine = slice(rank * share, (rank + 1) * share)
        xs, ys = mx.split_and_load(x[mine], devices), mx.split_and_load(y[mine], devices)
        with mx.autograd.record():
            losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
        mx.autograd.backward(losses)
        trainer.step(share)


def train(devices, kvstore: str, shard: bool, case: str, steps: int = 50, bucket_bytes: int = 600, rank: int = 0,
          size: int = 1, **trainer_args):
    """(net, trainer) after ``steps`` steps of ``case`` (:data:`CASES`, or 'lars')."""
    name, kwargs, dtype = CASES.get(case, ("lars", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}, "float32"))
    net = build(devices, dtype)
    trainer = mx.Trainer(net.collect_params(), name, dict(kwargs), kvstore=kvstore, bucket_bytes=bucket_bytes,
                         shard_optimizer_states=shard, **trainer_args)
    run(net, trainer, devices, 0, steps, dtype, rank, size)
    return net, trainer


def mirrors(net) -> dict[str, list[np.ndarray]]:
    """Every parameter's value on every device mirror (host copies)."""
    return {name: [d.asnumpy() for d in p.list_data()] for name, p in net.collect_params().items()}


def state_lengths(trainer) -> list[int]:
    """The length of every sharded updater's state buffers (each holds only its slice)."""
    return sorted(len(next(iter(u.shard_states().values()))) for u in trainer._arena_updaters.values()
                  if u.shard is not None)


def _devices(kind: str, count: int):
    return [mx.cpu(i) if kind == "cpu" else mx.gpu(i) for i in range(count)]


def main_train(out: str, kind: str, count: int) -> None:
    from mpi4py import MPI

    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    devices = _devices(kind, count)
    arrays, info = {}, {"lengths": {}}
    for case in CASES:
        for shard in (False, True):
            net, trainer = train(devices, "dist_sync", shard, case, rank=rank, size=size)
            for name, values in mirrors(net).items():
                for m, value in enumerate(values):
                    arrays[f"{case}-{shard}-{name}-{m}"] = value
            info["comm"] = type(next(iter(trainer._syncs.values()))[0]).__name__
            if shard:
                info["lengths"][case] = state_lengths(trainer)
    np.savez(os.path.join(out, f"rank{rank}.npz"), **arrays)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(info, f)


def main_states(out: str, kind: str, count: int) -> None:
    from mpi4py import MPI

    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    devices = _devices(kind, count)
    for shard in (False, True):
        _, trainer = train(devices, "dist_sync", shard, "adam", steps=6, rank=rank, size=size)
        trainer.save_states(os.path.join(out, f"{shard}-rank{rank}.states"))

    def fresh():
        net = build(devices)
        return net, mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01, "wd": 1e-3},
                               kvstore="dist_sync", bucket_bytes=600, shard_optimizer_states=True)

    net, trainer = fresh()
    run(net, trainer, devices, 0, 6, "float32", rank, size)
    np.savez(os.path.join(out, f"rank{rank}-straight.npz"), **{k: v[0] for k, v in mirrors(net).items()})
    net, trainer = fresh()
    run(net, trainer, devices, 0, 3, "float32", rank, size)
    mx.checkpoint.save(os.path.join(out, "ckpt"), net, trainer, step=3)
    net, trainer = fresh()
    assert mx.checkpoint.load(os.path.join(out, "ckpt"), net, trainer) == 3
    run(net, trainer, devices, 3, 6, "float32", rank, size)
    np.savez(os.path.join(out, f"rank{rank}-resumed.npz"), **{k: v[0] for k, v in mirrors(net).items()})


def main_pieces(out: str, kind: str, count: int) -> None:
    """The piece collectives of an MpiCommunicator against its allreduce: ``OUT_DIR/rank{r}.json`` says, per
    (length, dtype), whether each owner's pieces hold the allreduce's bits, the other buffers' pieces are
    untouched, and every buffer equals the allreduce after ``gather_from_owners``."""
    from mxlite.comm import MpiCommunicator

    c = MpiCommunicator(_devices(kind, count))
    found = {}
    for length in (0, 5, 100, 1000):
        for dtype in ("float32", "float16"):
            rng = np.random.default_rng([length, 7])  # the same pieces on every rank
            cuts = sorted(set(rng.integers(0, length + 1, size=6).tolist()) | {0, length})
            pieces = [(a, b, int(rng.integers(0, c.contributions))) for a, b in zip(cuts, cuts[1:])]
            src = [np.random.default_rng([length, c.rank, j]).normal(size=length).astype(dtype) for j in range(count)]
            want = [x.copy() for x in src]
            c.allreduce(want)
            bufs = [x.copy() for x in src]
            c.reduce_to_owners(bufs, pieces)
            mine = range(c.rank * count, (c.rank + 1) * count)
            owners_ok = all(bufs[o - c.rank * count][a:b].tobytes() == want[0][a:b].tobytes()
                            for a, b, o in pieces if o in mine)
            others_ok = all(bufs[j][a:b].tobytes() == src[j][a:b].tobytes()
                            for a, b, o in pieces for j in range(count) if c.rank * count + j != o)
            c.gather_from_owners(bufs, pieces)
            gathered_ok = all(b.tobytes() == want[0].tobytes() for b in bufs)
            found[f"{length}-{dtype}"] = [owners_ok, others_ok, gathered_ok]
    with open(os.path.join(out, f"rank{c.rank}.json"), "w") as f:
        json.dump(found, f)


if __name__ == "__main__":
    mode, out_dir, device_kind, per_rank = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    {"train": main_train, "states": main_states, "pieces": main_pieces}[mode](out_dir, device_kind, per_rank)
