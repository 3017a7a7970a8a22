"""One MPI rank of the fault suite's cases across ranks (tests/test_fuzz_faults.py), under ``mpiexec -n 2``.

Usage: ``python tests/fuzz_faults_worker.py SURFACE CASES OUT_DIR``

* SURFACE ``captured``: one emulated GPU per rank, kvstore 'dist_sync' over NCCL, a hybridized MLP
  (``static_alloc=True, static_shape=True``) whose Trainer step is captured with its all-reduces, trained beside
  an eager twin; each case perturbs the ranks at drawn steps (a smaller batch on one rank,
  ``mx.device.graphs.clear()`` on one rank, hyper-parameters changed on one rank or on all, NumPy scalars as batch
  sizes and values). After every step the captured network must hold the eager twin's bits.
* SURFACE ``sharded``: CPU devices over MPI, ``shard_optimizer_states``: Trainers whose settings differ across
  ranks (sharding on one rank only, the optimizer, the learning rate, a parameter's ``grad_req``/``lr_mult``/
  ``wd_mult``), ``save_states`` called on rank 0 only or on every rank, and a BatchNorm model trained sharded
  beside an unsharded twin (every parameter, running statistics included, must hold the twin's bits).

CASES is a JSON file holding the list of ``[index, case]`` pairs to run (drawn by hypothesis in the test, the same
on every rank). Each rank appends one JSON line per case it finished to ``OUT_DIR/rank{r}.jsonl``: ``{"case":
index, "outcome": "accepted" | "problem" | "raised", "type", "message", "problem", "digest"}`` (``digest``: a
SHA-256 of the trained parameters, or of the states file written, which every rank must share).

After each case the ranks meet (an all-gather on a communicator of this script's own, polled with a deadline). A
rank whose case raised waits :data:`AFTER_ERROR_S` seconds for the others; one that does not come is waiting
elsewhere (the error it would have met ends the job: the uncaught error is raised again, as a user's script
would, and mxlite's fault handling ends the job). When every rank came, the next case runs if every rank trained
on or every rank raised the same error of mxlite's; otherwise the job stops (status :data:`STOPPED`), and the test
runs the cases left in a new job.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import mxlite as mx
from mxlite.comm.mpi import mpi_module
from tests.deadlines import scaled

AFTER_ERROR_S = 1.0  # seconds (scaled by the machine's load) a rank whose case raised waits for the others
AFTER_CASE_S = 60.0  # seconds (scaled) a rank whose case ended waits for the others to end theirs
STOPPED = 3  # exit status of a job stopped after a case that may have left the ranks' collectives unpaired
NUMPY_TYPES: dict[str, Callable[[Any], Any]] = {"float": float, "float32": np.float32, "float64": np.float64,
                                                "int": int, "int64": np.int64, "int32": np.int32}


class _Problem(Exception):
    """A case's result is wrong (the message says how); recorded as a problem, not as an error."""


# -- the ranks' bookkeeping ------------------------------------------------------------------------------------
def _meet(comm: Any, index: int, error: BaseException | None, seconds: float) -> np.ndarray | None:
    """Every rank's ``[case, raised, digest of its error]`` once every rank ended case ``index``, or None when some
    rank did not end it within ``seconds``."""
    text = f"{type(error).__name__}: {error}" if error is not None else ""
    said = int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "little")
    mine = np.array([index, int(error is not None), said], np.int64)
    rows = np.empty((comm.Get_size(), 3), np.int64)
    request = comm.Iallgather(mine, rows)
    deadline = time.monotonic() + seconds
    while not request.Test():
        if time.monotonic() > deadline:
            return None
        time.sleep(0.002)
    if (rows[:, 0] != index).any():
        raise RuntimeError(f"the ranks ended other cases: {rows[:, 0].tolist()}")
    return rows


def _may_go_on(rows: np.ndarray, error: BaseException | None) -> bool:
    """Whether the next case may run in this job: every rank trained on, or every rank refused alike (the same
    error, raised by mxlite, such as a Trainer's settings that differ across ranks); an error of the emulated
    GPUs, or ranks that ended the case differently, may leave collectives that no longer pair."""
    if not rows[:, 1].any():
        return True
    return bool(rows[:, 1].all()) and len(set(rows[:, 2].tolist())) == 1 and type(error).__name__ != "EmulatedGPUError"


def _record(path: str, entry: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")


def _digest(arrays: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _params_digest(net: Any) -> str:
    """The digest of what the Trainer updates (every rank holds the same); a BatchNorm's running statistics, each
    rank's own, are left out."""
    return _digest([d.asnumpy() for p in net.collect_params().values() if p.grad_req != "null" for d in p.list_data()])


def run_cases(run_one: Callable[[dict[str, Any], int], str], cases: list[tuple[int, dict[str, Any]]],
              out_dir: str) -> None:
    """Run every case in turn on this rank, record its outcome, and meet the other ranks after it."""
    world = mpi_module().COMM_WORLD
    rank, meeting = world.Get_rank(), world.Dup()
    path = os.path.join(out_dir, f"rank{rank}.jsonl")
    for index, case in cases:
        entry: dict[str, Any] = {"case": index, "outcome": "accepted", "type": None, "message": "", "problem": None,
                                 "digest": None}
        error: BaseException | None = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the blocks' notices (new shapes, dropped graphs)
                entry["digest"] = run_one(case, rank)
        except _Problem as exc:
            entry.update(outcome="problem", problem=str(exc))
        except Exception as exc:  # noqa: BLE001 - recorded, then raised again when the job cannot go on
            entry.update(outcome="raised", type=type(exc).__name__, message=str(exc))
            error = exc
        _record(path, entry)
        seconds = scaled(AFTER_ERROR_S if error else AFTER_CASE_S)
        rows = _meet(meeting, index, error, seconds)
        if rows is None:
            if error is not None:
                raise error  # the others wait elsewhere: this uncaught error ends the job, as in a user's script
            raise RuntimeError(f"rank {rank} ended case {index}; another rank did not within {seconds:.0f} s")
        if not _may_go_on(rows, error):
            if error is not None:
                traceback.print_exception(error)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(STOPPED)  # every rank came, some raised: their next collectives might not pair


# -- captured steps -----------------------------------------------------------------------------------------
def _mlp() -> Any:
    net = mx.nn.HybridSequential()
    net.add(mx.nn.Dense(16, activation="relu", in_units=12), mx.nn.Dense(5, in_units=16))
    return net


CAPTURED_OPTIMIZERS = {"sgd": {"learning_rate": 0.05, "momentum": 0.9}, "adam": {"learning_rate": 0.01}}


def _captured_pair(case: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """An eager MLP and its hybridized twin (same start), each with a 'dist_sync' Trainer of the case's settings."""
    nets, trainers = [], []
    for graphed in (False, True):
        mx.random.seed(3)
        net = _mlp()
        net.initialize(mx.init.Xavier(), device=mx.gpu(0))
        if graphed:
            net.hybridize(static_alloc=True, static_shape=True)
        nets.append(net)
        hyper = dict(CAPTURED_OPTIMIZERS[case["optimizer"]])
        trainers.append(mx.Trainer(net.collect_params(), case["optimizer"], hyper, kvstore="dist_sync",
                                   bucket_bytes=case["bucket_bytes"], overlap=case["overlap"]))
    return nets, trainers


def _set_hyper_parameter(trainer: Any, name: str, value: Any) -> None:
    if name == "lr":
        trainer.set_learning_rate(value)
    else:
        setattr(trainer.optimizer, name, value)


def _apply_events(events: list[dict[str, Any]], step: int, rank: int, trainers: list[Any]) -> int | None:
    """Apply this rank's events of ``step``; return the batch size an uneven-batch event sets (else None)."""
    from mxlite.device import graphs as device_graphs  # noqa: PLC0415

    batch = None
    for event in events:
        if event["step"] != step or event["rank"] not in ("all", rank):
            continue
        if event["kind"] == "uneven":
            batch = event["batch"]
        elif event["kind"] == "clear":
            device_graphs.clear()
        else:
            value = NUMPY_TYPES[event["type"]](event["value"])
            for trainer in trainers:
                _set_hyper_parameter(trainer, event["name"], value)
    return batch


def captured_case(case: dict[str, Any], rank: int) -> str:
    """Train the captured MLP beside its eager twin under the case's events; their bits must match at every step."""
    from mxlite.device import graphs as device_graphs  # noqa: PLC0415
    from mxlite.gluon import _graphs  # noqa: PLC0415

    _graphs.AGREE_EVERY = case["agree_every"]
    device_graphs.clear()  # every rank alike: the previous case's graphs
    nets, trainers = _captured_pair(case)
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    rng = np.random.default_rng(100 + rank)
    as_batch = NUMPY_TYPES[case["batch_types"][rank]]
    device = mx.gpu(0)
    drift = []
    for step in range(case["steps"]):
        batch = _apply_events(case["events"], step, rank, trainers) or 6
        x = mx.array(rng.standard_normal((batch, 12)).astype(np.float32), device=device)
        y = mx.array(rng.integers(0, 5, batch).astype(np.float32), device=device)
        for which in (1, 0):
            with mx.autograd.record():
                loss = loss_fn(nets[which](x), y)
            loss.backward()
            trainers[which].step(as_batch(batch))
        for eager, graphed in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
            if eager.data(device).asnumpy().tobytes() != graphed.data(device).asnumpy().tobytes():
                drift.append(f"step {step}: {graphed.label} of the captured network differs from the eager one's")
    if drift:  # said after the last step: the other ranks' collectives need this rank's to the end
        raise _Problem(drift[0])
    return _params_digest(nets[1])


# -- sharded states ------------------------------------------------------------------------------------------
def _cpu_devices(count: int) -> list[Any]:
    return [mx.cpu(i) for i in range(count)]


def _bn_model(devices: list[Any]) -> Any:
    mx.random.seed(5)
    net = mx.nn.Sequential(mx.nn.Dense(8, in_units=6), mx.nn.BatchNorm(in_channels=8), mx.nn.Dense(3, in_units=8))
    net.initialize(mx.init.Xavier(), device=devices)
    return net


def _train_step(nets: list[Any], trainers: list[Any], devices: list[Any], rng: Any) -> None:
    x = (rng.standard_normal((4 * len(devices), 6)) * np.arange(1, 4 * len(devices) + 1)[:, None]).astype(np.float32)
    y = rng.integers(0, 3, 4 * len(devices)).astype(np.float32)
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    for net, trainer in zip(nets, trainers):
        xs, ys = mx.split_and_load(mx.array(x), devices), mx.split_and_load(mx.array(y), devices)
        with mx.autograd.record():
            losses = [loss_fn(net(a), b) for a, b in zip(xs, ys)]
        mx.autograd.backward(losses)
        trainer.step(len(x))


def _bn_case(case: dict[str, Any], rank: int) -> str:
    """A BatchNorm model trained sharded beside an unsharded twin: every mirror of every parameter (the running
    statistics included, each device's own) must hold the twin's bits after every step."""
    devices = _cpu_devices(case["devices"])
    nets = [_bn_model(devices) for _ in range(2)]
    trainers = [mx.Trainer(net.collect_params(), case["optimizer"], {"learning_rate": 0.01}, kvstore="dist_sync",
                           shard_optimizer_states=shard) for net, shard in zip(nets, (False, True))]
    rng = np.random.default_rng(3 + rank)
    drift = []
    for step in range(case["steps"]):
        _train_step(nets, trainers, devices, rng)
        for plain, sharded in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
            drift += [f"step {step}: {sharded.label} on {d} differs from the unsharded twin's" for d in devices
                      if plain.data(d).asnumpy().tobytes() != sharded.data(d).asnumpy().tobytes()]
    if drift:  # said after the last step, as in captured_case
        raise _Problem(drift[0])
    return _params_digest(nets[1])


def _settings_case(case: dict[str, Any], rank: int, out_dir: str) -> str:
    """A Trainer with this rank's settings, two steps, the case's ``save_states`` calls, and one more step."""
    mine = case["ranks"][rank]
    devices = _cpu_devices(case["devices"])
    net = _bn_model(devices)
    if mine["edit"] is not None:
        index, attribute, value = mine["edit"]
        setattr(list(net.collect_params().values())[index], attribute, value)
    lr = NUMPY_TYPES[mine["lr_type"]](mine["lr"])
    trainer = mx.Trainer(net.collect_params(), mine["optimizer"], {"learning_rate": lr}, kvstore="dist_sync",
                         shard_optimizer_states=mine["shard"])
    rng = np.random.default_rng(3 + rank)
    for _ in range(2):
        _train_step([net], [trainer], devices, rng)
    digest = None
    if case["save"] == "all" or (case["save"] == "rank0" and rank == 0):
        path = os.path.join(out_dir, f"case-states-rank{rank}")
        trainer.save_states(path)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    _train_step([net], [trainer], devices, rng)  # the training goes on (a rank that did not save is here first)
    return digest if case["save"] == "all" else _params_digest(net)


def sharded_case(case: dict[str, Any], rank: int, out_dir: str) -> str:
    from mxlite.gluon import _trainer_states  # noqa: PLC0415

    _trainer_states.SAVE_WAIT = 2.0  # seconds a lone save_states waits for the other ranks (60 s by default)
    return _bn_case(case, rank) if case["kind"] == "bn" else _settings_case(case, rank, out_dir)


def main(surface: str, cases_path: str, out_dir: str) -> None:
    with open(cases_path) as f:
        cases = [(index, case) for index, case in json.load(f)]
    if surface == "captured":
        run_cases(captured_case, cases, out_dir)
    elif surface == "sharded":
        run_cases(lambda case, rank: sharded_case(case, rank, out_dir), cases, out_dir)
    else:
        raise ValueError(f"unknown surface {surface!r}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
