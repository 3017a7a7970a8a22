"""One MPI rank of tests/test_rank_agreement.py (``mpiexec -n 2``): what every rank must agree on.

Usage: ``python tests/rank_agreement_worker.py MODE OUT_DIR``; each mode writes ``OUT_DIR/rank{r}.json``.

Captured steps (one emulated GPU per rank, kvstore 'dist_sync' over NCCL; an eager twin of the captured
network trains beside it and both must hold the same bits after every step):

* ``uneven``: every fifth step, rank 1's batch is smaller (an uneven last batch), so its step's signature
  changes while rank 0 replays its captured step (``update_on_kvstore=False``: each rank divides by its own batch).
* ``clear``: rank 1 calls ``mx.device.graphs.clear()`` at step 8 (its step graph is dropped, rank 0's lives);
  the ranks agree to capture again at their next agreement (every ``_graphs.AGREE_EVERY`` = 5 steps here).

Disagreements (CPU devices over MPI): each case is run in turn and every rank records the error it got.

* ``settings``: Trainers that differ across ranks in ``shard_optimizer_states``, the optimizer, its learning
  rate, another hyper-parameter, or a parameter's ``grad_req`` (also with sharded states); then ranks that each
  freeze another layer after two steps (``grad_req='null'``), with and without sharded states.
* ``lr_alone``: rank 0 alone calls ``set_learning_rate`` at step 3 (the rank that finds it raises, which ends
  the job); ``lr_together``: both ranks do, and both change the momentum at step 6; ``lr_last``: rank 0 alone
  calls it before the last step, then every rank saves a checkpoint.
* ``batch``: rank 1 passes a smaller batch size once (every rank keeps dividing by the first step's, as MXNet's
  store; with ``update_on_kvstore=False`` each rank divides by its own), then the ranks pass different batch
  sizes at the first step.
* ``save_alone``: with sharded states, rank 0 alone calls ``save_states`` (``if rank == 0:``) while rank 1
  goes on training.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import warnings

import numpy as np

import mxlite as mx
from mxlite.comm.mpi import mpi_module

STEPS = 20


def _mlp(in_units: int = 12) -> mx.nn.HybridSequential:
    net = mx.nn.HybridSequential()
    net.add(mx.nn.Dense(16, activation="relu", in_units=in_units), mx.nn.Dense(5, in_units=16))
    return net


def _write(out_dir: str, rank: int, result: dict) -> None:
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


# -- captured steps -----------------------------------------------------------------------------------------
def _captured_pair(device):
    nets, trainers = [], []
    for graphed in (False, True):
        mx.random.seed(3)
        net = _mlp()
        net.initialize(mx.init.Xavier(), device=device)
        if graphed:
            net.hybridize(static_alloc=True, static_shape=True)
        nets.append(net)
        # update_on_kvstore=False: each rank divides by its own batch size (else every rank keeps the first's)
        trainers.append(mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05, "momentum": 0.9},
                                   kvstore="dist_sync", bucket_bytes=512, update_on_kvstore=False))
    return nets, trainers


def captured(mode: str, out_dir: str) -> None:
    from mxlite.device import graphs as device_graphs  # noqa: PLC0415
    from mxlite.gluon import _graphs  # noqa: PLC0415

    _graphs.AGREE_EVERY = 5
    rank = mpi_module().COMM_WORLD.Get_rank()
    device = mx.gpu(0)
    nets, trainers = _captured_pair(device)
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    rng = np.random.default_rng(100 + rank)
    replays = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the blocks' notices (new shapes, dropped graphs)
        for step in range(STEPS):
            batch = 4 if mode == "uneven" and rank == 1 and step % 5 == 4 else 6
            if mode == "clear" and rank == 1 and step == 8:
                device_graphs.clear()
            x = mx.array(rng.standard_normal((batch, 12)).astype(np.float32), device=device)
            y = mx.array(rng.integers(0, 5, batch).astype(np.float32), device=device)
            for which in (1, 0):
                with mx.autograd.record():
                    loss = loss_fn(nets[which](x), y)
                loss.backward()
                trainers[which].step(batch)
            for pe, pg in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
                assert pe.data(device).asnumpy().tobytes() == pg.data(device).asnumpy().tobytes(), (step, pe.label)
            replays.append(trainers[1]._step_graphs.replays)
    _write(out_dir, rank, {"replays": replays})


# -- disagreements ------------------------------------------------------------------------------------------
def _cpu_net(grad_req_frozen: bool = False):
    mx.random.seed(1)
    net = _mlp(in_units=6)
    net.initialize(mx.init.Xavier(), device=[mx.cpu(0)])
    if grad_req_frozen:
        net[0].weight.grad_req = "null"
    return net


def _train(net, trainer, steps: int, rank: int, on_step=None) -> None:
    rng = np.random.default_rng(7 + rank)
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    for step in range(steps):
        if on_step is not None:
            on_step(step)
        x = mx.array(rng.standard_normal((4, 6)).astype(np.float32))
        y = mx.array(rng.integers(0, 5, 4).astype(np.float32))
        with mx.autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(4)


SETTINGS = {  # case -> (Trainer arguments of rank 0, of rank 1, rank 1's grad_req frozen)
    "sharding": (("adam", {}, {"shard_optimizer_states": True}), ("adam", {}, {}), False),
    "optimizer": (("adam", {}, {}), ("sgd", {}, {}), False),
    "learning_rate": (("adam", {"learning_rate": 0.01}, {}), ("adam", {"learning_rate": 0.02}, {}), False),
    "momentum": (("sgd", {"momentum": 0.9}, {}), ("sgd", {"momentum": 0.8}, {}), False),
    "grad_req": (("adam", {}, {}), ("adam", {}, {}), True),
    "grad_req_sharded": (("adam", {}, {"shard_optimizer_states": True}),
                         ("adam", {}, {"shard_optimizer_states": True}), True),
}


def settings(out_dir: str) -> None:
    rank = mpi_module().COMM_WORLD.Get_rank()
    errors = {}
    for case, (mine0, mine1, frozen) in SETTINGS.items():
        optimizer, params, kwargs = mine0 if rank == 0 else mine1
        try:
            net = _cpu_net(frozen and rank == 1)
            trainer = mx.Trainer(net.collect_params(), optimizer, params, kvstore="dist_sync", **kwargs)
            _train(net, trainer, 3, rank)
            errors[case] = None
        except ValueError as exc:
            errors[case] = str(exc)
    for shard in (False, True):  # every rank freezes a layer after two steps, but not the same one
        net = _cpu_net()
        trainer = mx.Trainer(net.collect_params(), "adam", {}, kvstore="dist_sync", shard_optimizer_states=shard)

        def freeze(step, net=net):
            if step == 2:
                net[rank].weight.grad_req = "null"

        try:
            _train(net, trainer, 4, rank, freeze)
            errors[f"frozen_later_{shard}"] = None
        except ValueError as exc:
            errors[f"frozen_later_{shard}"] = str(exc)
    _write(out_dir, rank, {"errors": errors})


def learning_rates(mode: str, out_dir: str) -> None:
    rank = mpi_module().COMM_WORLD.Get_rank()
    net = _cpu_net()
    params = {"learning_rate": 0.1}
    if mode == "lr_together":
        params["momentum"] = 0.9
    trainer = mx.Trainer(net.collect_params(), "sgd", params, kvstore="dist_sync")

    def change(step):
        if step == (9 if mode == "lr_last" else 3) and (rank == 0 or mode == "lr_together"):
            trainer.set_learning_rate(0.05)
        if step == 6 and mode == "lr_together":
            trainer.optimizer.momentum = 0.5  # another hyper-parameter, changed by every rank together

    try:
        _train(net, trainer, 10, rank, change)
        if mode == "lr_last":  # the job ends with a checkpoint: no later step would hear rank 0's change
            mx.checkpoint.save(os.path.join(out_dir, "ckpt"), net, trainer, 10)
    except ValueError as exc:  # the rank that finds the disagreement: the uncaught error ends the job
        _write(out_dir, rank, {"error": str(exc)})
        raise
    _write(out_dir, rank, {"error": None, "weights": [p.data().asnumpy().tolist() for p in
                                                      net.collect_params().values()]})


def _batch_run(rank: int, batches: list[int], **trainer_args) -> dict:
    """Train the CPU MLP with this rank's ``batches`` (one a step): its weights, the warnings and the error got."""
    net = _cpu_net()
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore="dist_sync", **trainer_args)
    rng = np.random.default_rng(7 + rank)
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    error = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for batch in batches:
                x = mx.array(rng.standard_normal((batch, 6)).astype(np.float32))
                y = mx.array(rng.integers(0, 5, batch).astype(np.float32))
                with mx.autograd.record():
                    loss = loss_fn(net(x), y)
                loss.backward()
                trainer.step(batch)
        except ValueError as exc:
            error = str(exc)
    return {"weights": [p.data().asnumpy().tolist() for p in net.collect_params().values()], "error": error,
            "warnings": [str(w.message) for w in caught if "batch_size" in str(w.message)]}


def batch_sizes(out_dir: str) -> None:
    """Rank 1 steps once with a smaller batch (step 2), by default and with update_on_kvstore=False; then the
    ranks pass different batch sizes at the first step."""
    rank = mpi_module().COMM_WORLD.Get_rank()
    uneven = [6, 6, 4 if rank == 1 else 6, 6]
    _write(out_dir, rank, {"default": _batch_run(rank, uneven),
                           "local": _batch_run(rank, uneven, update_on_kvstore=False),
                           "first": _batch_run(rank, [6 if rank == 0 else 4, 6])})


def save_alone(out_dir: str) -> None:
    rank = mpi_module().COMM_WORLD.Get_rank()
    net = _cpu_net()
    trainer = mx.Trainer(net.collect_params(), "adam", {}, kvstore="dist_sync", shard_optimizer_states=True)
    _train(net, trainer, 2, rank)
    if rank == 0:
        try:
            trainer.save_states(os.path.join(out_dir, "states"))
        except RuntimeError as exc:
            _write(out_dir, rank, {"error": str(exc)})
            raise
    _train(net, trainer, 2, rank)  # rank 1 goes on with its training: it never calls save_states


def main(mode: str, out_dir: str) -> None:
    try:
        if mode in ("uneven", "clear"):
            captured(mode, out_dir)
        elif mode == "settings":
            settings(out_dir)
        elif mode in ("lr_alone", "lr_together", "lr_last"):
            learning_rates(mode, out_dir)
        elif mode == "save_alone":
            save_alone(out_dir)
        elif mode == "batch":
            batch_sizes(out_dir)
        else:
            raise ValueError(f"unknown mode {mode!r}")
    except Exception:
        traceback.print_exc()
        raise


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
