"""A rank of the multi-process tests (run by tests/test_dist.py under ``mpiexec -n N``).

Usage: ``python tests/dist_worker.py MODE OUT_DIR``

* ``train [VARIANT [DEVICE]]``: rank r seeds its own initial values (so rank 0's broadcast must fix the
  others), trains an MLP with ``kvstore='dist_sync'`` on its share of each batch for 8 steps and
  writes its parameters to ``OUT_DIR/rank{r}.npz``. Each rank passes its own share to
  ``step`` (MXNet's convention: the gradient summed over ranks is divided by it). VARIANT (see
  ``VARIANTS``): 'plain' (float64), 'on_store' (float64, ``update_on_kvstore=True``), '2bit'
  (float32, 2-bit compression), 'average' (float64, ``average_over_workers=True``). DEVICE 'gpu'
  trains on ``gpu(0)`` of each rank (GPU buffers over NCCL), else on ``cpu(0)``.
* ``mismatch``: rank 1 builds a wider first layer; each rank writes the error its Trainer
  raised to ``OUT_DIR/rank{r}.txt``.
* ``resume``: trains 6 steps straight (float32, Dropout, 2-bit compression, Adam), and again
  with a checkpoint saved at step 3 and loaded into a fresh net and Trainer; writes both
  results to ``OUT_DIR/rank{r}-straight.npz`` and ``OUT_DIR/rank{r}-resumed.npz``.
* ``debug CASE``: with ``MXLITE_DEBUG_COLLECTIVES=1`` set by the test, CASE 'shape' (rank 1
  all-reduces another shape), 'op' (rank 1 waits in a barrier while rank 0 all-reduces),
  'drift' (rank 1's parameter changes behind the Trainer's back) or 'clean' (3 good steps);
  each rank writes what it caught to ``OUT_DIR/rank{r}.txt``.
* ``soak STEPS``: trains STEPS steps with 'dist_sync' (float32, Adam, 2 buckets) and writes to
  ``OUT_DIR/rank{r}.json`` the resident memory, arena capacities and bucket count at step 100
  and at the end, and a digest of the final parameters.
* ``amp_overflow``: dynamic loss scaling on 2 ranks; at step 1 rank 1 alone puts an inf in its
  local gradient; each rank writes whether its parameters changed at each step and its loss
  scale to ``OUT_DIR/rank{r}.json``.
* ``stale VARIANT``: layer b is used on rank 1 only and ``step(ignore_stale_grad=True)`` runs
  ('plain' or 'on_store'); each rank writes its parameters to ``OUT_DIR/rank{r}.npz``.
* ``sizes``: before any step, with deferred parameters, writes what ``Trainer.num_workers`` and a
  'dist_sync' KVStore's ``rank``/``num_workers`` say to ``OUT_DIR/rank{r}.json``.
* ``sgd_step``: one SGD step (lr 0.1) of a single weight 1.0 whose gradient on rank r is
  2(r + 1), with ``step(2)``, summing (default) and averaging over workers, each also updating on
  the store; writes the weights to ``OUT_DIR/rank{r}.json``.
* ``collectives``: exercises MpiCommunicator's calls and writes what it saw to
  ``OUT_DIR/rank{r}.json``.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

import mxlite as mx
from mxlite.comm import MpiCommunicator

STEPS, BATCH = 8, 8


def batch(step: int):
    rng = np.random.default_rng(100 + step)
    return rng.normal(size=(BATCH, 6)), rng.integers(0, 5, size=BATCH)


# variant -> (dtype, extra Trainer arguments)
VARIANTS = {
    "plain": ("float64", {}),
    "on_store": ("float64", {"update_on_kvstore": True}),
    "2bit": ("float32", {"compression_params": {"type": "2bit", "threshold": 0.002}}),
    "average": ("float64", {"average_over_workers": True}),
}


def one_process_batch(variant: str, ranks: int = 2) -> int:
    """The batch size one process must pass to ``step`` to match ``ranks`` ranks each passing its share.

    MXNet's convention (the default) divides the sum over ranks by the local share ``BATCH // ranks``;
    ``average_over_workers`` divides it by ``BATCH``.
    """
    return BATCH if VARIANTS[variant][1].get("average_over_workers") else BATCH // ranks


def net_for(seed: int, devices, dtype: str = "float64"):
    mx.random.seed(seed)
    net = mx.nn.Sequential(mx.nn.Dense(16, activation="relu", in_units=6, dtype=dtype),
                           mx.nn.Dense(5, in_units=16, dtype=dtype))
    net.initialize(mx.init.Xavier(), device=devices)
    return net


def train(out: str, variant: str = "plain", device: str = "cpu") -> None:
    from mpi4py import MPI

    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    dtype, extra = VARIANTS[variant]
    net = net_for(rank, [mx.cpu(0) if device == "cpu" else mx.gpu(0)], dtype)
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01, "wd": 1e-3}, kvstore="dist_sync",
                         bucket_bytes=512, **extra)
    assert trainer.num_workers == size
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    share = BATCH // size
    for step in range(STEPS):
        x, y = batch(step)
        mine = slice(rank * share, (rank + 1) * share)
        with mx.autograd.record():
            here = net.collect_params()["0.weight"].list_device()[0]
            loss = loss_fn(net(mx.array(x[mine].astype(dtype), device=here)),
                           mx.array(y[mine].astype(dtype), device=here))
        loss.backward()
        trainer.step(share)
    if device == "gpu":  # GPU buffers travelled over NCCL, not through the host
        kinds = {type(comm).__name__ for comm, _ in trainer._syncs.values()}
        assert kinds == {"NcclCommunicator"}, kinds
    net.save_parameters(os.path.join(out, f"rank{rank}.npz"))


def mismatch(out: str) -> None:
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    mx.random.seed(0)
    net = mx.nn.Sequential(mx.nn.Dense(16 + rank, in_units=6), mx.nn.Dense(5, in_units=16 + rank))
    net.initialize(mx.init.Xavier(), device=[mx.cpu(0)])
    try:
        mx.Trainer(net.collect_params(), "sgd", kvstore="dist_sync")
        caught = "no error"
    except ValueError as exc:
        caught = str(exc)
    with open(os.path.join(out, f"rank{rank}.txt"), "w") as f:
        f.write(caught)


def resume(out: str) -> None:
    from mpi4py import MPI

    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()

    def setup(seed):
        mx.random.seed(seed + rank)  # each rank its own dropout stream
        net = mx.nn.Sequential(mx.nn.Dense(16, activation="relu", in_units=6), mx.nn.Dropout(0.2),
                               mx.nn.Dense(5, in_units=16))
        net.initialize(mx.init.Xavier(), device=[mx.cpu(0)])
        trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01}, kvstore="dist_sync",
                             compression_params={"type": "2bit", "threshold": 0.002})
        return net, trainer

    def run(net, trainer, first, last):
        loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
        share = BATCH // size
        for step in range(first, last):
            x, y = batch(step)
            mine = slice(rank * share, (rank + 1) * share)
            with mx.autograd.record():
                loss = loss_fn(net(mx.array(x[mine].astype("float32"))), mx.array(y[mine].astype("float32")))
            loss.backward()
            trainer.step(share)

    net, trainer = setup(0)
    run(net, trainer, 0, 6)
    net.save_parameters(os.path.join(out, f"rank{rank}-straight.npz"))
    net, trainer = setup(0)
    run(net, trainer, 0, 3)
    mx.checkpoint.save(os.path.join(out, "ckpt"), net, trainer, step=3)
    run(net, trainer, 3, 4)  # lost work
    net, trainer = setup(50)
    assert mx.checkpoint.load(os.path.join(out, "ckpt"), net, trainer) == 3
    run(net, trainer, 3, 6)
    net.save_parameters(os.path.join(out, f"rank{rank}-resumed.npz"))


def debug(out: str, case: str) -> None:
    comm = MpiCommunicator([mx.cpu(0)])
    r = comm.rank
    caught = "no error"
    try:
        if case == "shape":
            comm.allreduce([np.ones(4 + r, np.float32)])
        elif case == "op":
            comm.barrier() if r == 1 else comm.allreduce([np.ones(4, np.float32)])
        else:
            net = net_for(0, [mx.cpu(0)])
            trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="dist_sync")
            loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
            for step in range(3):
                x, y = batch(step)
                with mx.autograd.record():
                    loss = loss_fn(net(mx.array(x)), mx.array(y))
                loss.backward()
                if case == "drift" and step == 1 and r == 1:
                    w = net[1].bias
                    w.set_data(w.data().asnumpy() + 1e-12)
                trainer.step(BATCH)
    except ValueError as exc:
        caught = str(exc)
    with open(os.path.join(out, f"rank{r}.txt"), "w") as f:
        f.write(caught)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def soak(out: str, steps: str) -> None:
    import hashlib

    from mpi4py import MPI

    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    net = net_for(rank, [mx.cpu(0)], "float32")
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 1e-3}, kvstore="dist_sync",
                         bucket_bytes=256)
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    share = BATCH // size
    data = [batch(i) for i in range(16)]

    def footprint():
        arenas = sorted({(id(a), a.data_buf.size, a.grad_buf.size) for p in net.collect_params().values()
                         for a, _ in p.arena_slots()})
        buckets = sum(len(sync.buckets) for _, sync in trainer._syncs.values() if sync is not None)
        return {"rss": _rss_bytes(), "arenas": [a[1:] for a in arenas], "buckets": buckets}

    seen = {}
    for step in range(int(steps)):
        x, y = data[step % len(data)]
        mine = slice(rank * share, (rank + 1) * share)
        with mx.autograd.record():
            loss = loss_fn(net(mx.array(x[mine].astype("float32"))), mx.array(y[mine].astype("float32")))
        loss.backward()
        trainer.step(share)
        if step == 100:
            seen["early"] = footprint()
    seen["end"] = footprint()
    digest = hashlib.sha256()
    for _, p in sorted(net.collect_params().items()):
        digest.update(p.data().asnumpy().tobytes())
    seen["digest"] = digest.hexdigest()
    seen["final_loss"] = float(loss.asnumpy().mean())
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(seen, f)


def amp_overflow(out: str) -> None:
    from mpi4py import MPI

    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    net = net_for(rank, [mx.cpu(0)], "float32")
    # overlap=False: the inf is written after backward and must still go into the sum
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="dist_sync", overlap=False)
    mx.amp.init_trainer(trainer)
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    share = BATCH // size
    changed, scales = [], []
    for step in range(3):
        x, y = batch(step)
        mine = slice(rank * share, (rank + 1) * share)
        before = net[0].weight.data().asnumpy()
        with mx.autograd.record():
            loss = loss_fn(net(mx.array(x[mine].astype("float32"))), mx.array(y[mine].astype("float32")))
            with mx.amp.scale_loss(loss, trainer) as scaled:
                scaled.backward()
        if step == 1 and rank == 1:
            net[0].weight.grad()._data[0, 0] = np.inf
        trainer.step(share)
        changed.append(bool((net[0].weight.data().asnumpy() != before).any()))
        scales.append(trainer._amp_loss_scaler.loss_scale)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"changed": changed, "scales": scales, "weight": net[0].weight.data().asnumpy().tolist()}, f)


def stale(out: str, variant: str) -> None:
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    mx.random.seed(0)
    a, b = mx.nn.Dense(2, in_units=3), mx.nn.Dense(2, in_units=3)
    net = mx.nn.Sequential(a, b)
    net.initialize(mx.init.Xavier(), device=[mx.cpu(0)])
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="dist_sync",
                         update_on_kvstore=variant == "on_store")
    for _ in range(2):
        x = mx.array(np.ones((5, 3), np.float32))
        with mx.autograd.record():
            loss = a(x).sum() + (b(x).sum() if rank == 1 else 0)
        loss.backward()
        trainer.step(5, ignore_stale_grad=True)
    net.save_parameters(os.path.join(out, f"rank{rank}.npz"))


def sizes(out: str) -> None:
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    kv = mx.kv.create("dist_sync")
    seen = {"kv": [kv.rank, kv.num_workers]}
    net = mx.nn.Sequential(mx.nn.Dense(4), mx.nn.Dense(2))  # no in_units: deferred until the first forward
    net.initialize(mx.init.Xavier(), device=[mx.cpu(0)])
    seen["trainer"] = mx.Trainer(net.collect_params(), "sgd", kvstore="dist_sync").num_workers
    seen["trainer_kv"] = mx.Trainer(net.collect_params(), "sgd", kvstore=kv).num_workers
    seen["trainer_device"] = mx.Trainer(net.collect_params(), "sgd", kvstore="device").num_workers
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(seen, f)


def sgd_step(out: str) -> None:
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    seen = {}
    for name, extra in (("sum", {}), ("sum_on_store", {"update_on_kvstore": True}),
                        ("average", {"average_over_workers": True}),
                        ("average_on_store", {"average_over_workers": True, "update_on_kvstore": True})):
        layer = mx.nn.Dense(1, in_units=1, use_bias=False, dtype="float64")
        layer.initialize(mx.init.One(), device=[mx.cpu(0)])
        trainer = mx.Trainer(layer.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="dist_sync", **extra)
        x = mx.array(np.full((2, 1), rank + 1.0))
        with mx.autograd.record():
            loss = layer(x).sum()  # d loss / d w = 2 (rank + 1)
        loss.backward()
        trainer.step(2)
        seen[name] = float(layer.weight.data().asnumpy()[0, 0])
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(seen, f)


def collectives(out: str) -> None:
    comm = MpiCommunicator([mx.cpu(0), mx.cpu(1)])
    r = comm.rank
    a = [np.full(5, r + 1.0, np.float32), np.full(5, 10.0 * (r + 1), np.float32)]
    comm.allreduce(a)
    h = [np.full(3, 60000.0, np.float16), np.full(3, 1.0, np.float16)]
    comm.allreduce(h, average=True)
    b = [np.arange(4.0) * (r + 1), np.zeros(4)]
    comm.broadcast(b, root=1)
    gathered = comm.allgather(np.arange(r + 2, dtype=np.int64))
    comm.barrier()
    with open(os.path.join(out, f"rank{r}.json"), "w") as f:
        json.dump({"rank": r, "size": comm.size, "sum": [x.tolist() for x in a], "avg16": [x.tolist() for x in h],
                   "bcast": [x.tolist() for x in b], "gather": [g.tolist() for g in gathered]}, f)


if __name__ == "__main__":
    modes = {"train": train, "collectives": collectives, "mismatch": mismatch, "resume": resume, "debug": debug,
             "soak": soak, "amp_overflow": amp_overflow,
             "stale": stale, "sizes": sizes, "sgd_step": sgd_step}
    modes[sys.argv[1]](*sys.argv[2:])
