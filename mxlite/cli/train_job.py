"""The main job: data-parallel training on the embedded UCI digits dataset.

``mxlite train`` (what ``make train`` runs) trains an MLP or a small CNN on every visible GPU,
else on two virtual CPU devices, shows a progress bar with loss and samples/s, prints the
held-out accuracy, and writes to ``--out``: ``model.npz`` (the parameters), ``history.json``
(loss and accuracies per epoch) and ``training.png`` (their plot).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import IO, Any

import numpy as np
from tqdm import tqdm

from .. import autograd, datasets
from .. import initializer as init
from ..device import Device, _hostcuda, cpu, gpu, gpu_devices, kernels, threads
from ..gluon import loss, metric, nn
from ..gluon.data import ArrayDataset, DataLoader
from ..gluon.progress import accuracy_limits  # noqa: F401 - part of the job's API
from ..gluon.progress import plot_history as _plot
from ..gluon.trainer import Trainer
from ..gluon.utils import split_and_load
from ..ops import random
from ..optimizer import registered as _registered_optimizers

DEFAULT_LR = {"adam": 3e-3, "sgd": 0.1}  # tuned on this dataset: >= 95% held-out in 20 epochs


@dataclass
class History:
    """Per-epoch figures of a run."""

    train_loss: list[float] = field(default_factory=list)
    train_acc: list[float] = field(default_factory=list)
    test_acc: list[float] = field(default_factory=list)
    samples_per_s: list[float] = field(default_factory=list)


def parse_devices(spec: str) -> list[Device]:
    """Devices from a spec: 'auto' (every GPU, else cpu:2), 'gpu:all', 'cpu:N' or 'gpu:0,1'.

    Raises:
        ValueError: malformed spec; DeviceUnavailableError: GPUs asked for but unavailable.
    """
    spec = spec.strip().lower()
    if spec == "auto":
        return gpu_devices() or [cpu(0), cpu(1)]
    kind, _, rest = spec.partition(":")
    if kind not in ("cpu", "gpu") or not rest:
        raise ValueError(f"--devices must look like 'gpu:all', 'cpu:2' or 'gpu:0,1', got {spec!r}")
    if kind == "gpu" and rest == "all":
        found = gpu_devices()
        if not found:
            gpu(0)  # raises DeviceUnavailableError explaining why
        return found
    try:
        numbers = [int(i) for i in rest.split(",")]
    except ValueError:
        raise ValueError(f"--devices must look like 'gpu:all', 'cpu:2' or 'gpu:0,1', got {spec!r}") from None
    if kind == "cpu" and "," not in rest:
        if numbers[0] < 1:
            raise ValueError(f"--devices cpu:N needs N >= 1, got {numbers[0]}")
        return [cpu(i) for i in range(numbers[0])]
    if min(numbers) < 0:
        raise ValueError(f"--devices: device numbers must be >= 0, got {spec!r}")
    make = cpu if kind == "cpu" else gpu
    return [make(i) for i in numbers]


MODEL_DESCRIPTIONS = {
    "mlp": "MLP 64-128-64-10 (ReLU)",
    "cnn": "CNN: 2 conv 3x3 (16, 32 channels), max-pool, dense 64-10",
}


def build_model(name: str) -> nn.Block:
    """'mlp': 64-128-64-10 with ReLU; 'cnn': two 3x3 conv layers on the 8x8 image, then 2 dense."""
    net = nn.Sequential()
    if name == "mlp":
        net.add(nn.Dense(128, activation="relu"), nn.Dense(64, activation="relu"), nn.Dense(10))
    elif name == "cnn":
        net.add(nn.Lambda(lambda x: x.reshape(x.shape[0], 1, 8, 8)),
                nn.Conv2D(16, 3, padding=1, activation="relu"),
                nn.Conv2D(32, 3, padding=1, activation="relu"),
                nn.MaxPool2D(2),
                nn.Flatten(),
                nn.Dense(64, activation="relu"),
                nn.Dense(10))
    else:
        raise ValueError(f"--model must be 'mlp' or 'cnn', got {name!r}")
    return net


def evaluate(net: nn.Block, x: np.ndarray, y: np.ndarray, devices: list[Device], batch_size: int) -> float:
    """Accuracy of ``net`` on ``(x, y)``, batches split over ``devices``."""
    acc = metric.Accuracy()
    for start in range(0, len(x), batch_size):
        xb, yb = x[start:start + batch_size], y[start:start + batch_size]
        used = devices[: max(1, min(len(devices), len(xb)))]
        xs = split_and_load(xb, used, even_split=False)
        ys = split_and_load(yb, used, even_split=False)
        acc.update(ys, [net(part) for part in xs])
    return acc.get()[1]


def run(args: argparse.Namespace, *, progress_file: IO[str] | None = None) -> History:
    """Train as configured by ``args`` (see :func:`add_arguments`); returns the history.

    ``progress_file``: where the progress bar goes (default: standard error).
    """
    random.seed(args.seed)
    devices = parse_devices(args.devices)
    x_train, y_train, x_test, y_test = datasets.train_test_split_digits(test_fraction=0.2, seed=args.seed)
    net = build_model(args.model)
    net.initialize(init.Xavier(), device=devices)
    lr = args.lr if args.lr is not None else DEFAULT_LR.get(args.optimizer, 0.01)
    trainer = Trainer(net.collect_params(), args.optimizer, {"learning_rate": lr})
    loss_fn = loss.SoftmaxCrossEntropyLoss()
    loader = DataLoader(ArrayDataset(x_train, y_train), batch_size=args.batch_size, shuffle=True,
                        seed=args.seed, last_batch="keep")
    print(f"mxlite train: {MODEL_DESCRIPTIONS[args.model]} ('{args.model}') on the UCI digits (8x8), "
          f"{len(devices)} device(s) {devices}, {len(x_train)} train / {len(x_test)} held-out samples, "
          f"{args.optimizer} lr={lr}, batch {args.batch_size}, {args.epochs} epoch(s)")
    if any(not d.is_gpu for d in devices):
        build_cpu_kernels_first(quiet=args.quiet, progress_file=progress_file)
    history = History()
    for epoch in range(1, args.epochs + 1):
        train_acc, total_loss, seen = metric.Accuracy(), 0.0, 0
        start = time.perf_counter()
        # The bar is advanced by hand after each step, then refreshed with the new loss: iterating
        # tqdm(loader) would count batches lazily, so each set_postfix refresh showed a stale 0/N.
        bar = tqdm(total=len(loader), desc=f"epoch {epoch:3d}/{args.epochs}", unit="batch", leave=False,
                   disable=args.quiet, dynamic_ncols=True, file=progress_file)
        for xb, yb in loader:
            n = xb.shape[0]
            used = devices[: min(len(devices), n)]
            xs = split_and_load(xb, used, even_split=False)
            ys = split_and_load(yb, used, even_split=False)
            with autograd.record():
                outputs = [net(x) for x in xs]
                losses = [loss_fn(o, y) for o, y in zip(outputs, ys)]
            autograd.backward(losses)
            trainer.step(n, ignore_stale_grad=len(used) < len(devices))
            train_acc.update(ys, outputs)
            total_loss += sum(float(v.sum().item()) for v in losses)
            seen += n
            bar.update(1)
            bar.set_postfix(loss=f"{total_loss / seen:.4f}", samples_s=f"{seen / (time.perf_counter() - start):.0f}")
        bar.close()
        elapsed = time.perf_counter() - start
        with autograd.predict_mode():
            test_acc = evaluate(net, x_test, y_test, devices, args.batch_size)
        history.train_loss.append(total_loss / seen)
        history.train_acc.append(train_acc.get()[1])
        history.test_acc.append(test_acc)
        history.samples_per_s.append(seen / elapsed)
        if not args.quiet:
            print(f"epoch {epoch:3d}: loss {total_loss / seen:.4f}  train acc {train_acc.get()[1]:.4f}  "
                  f"held-out acc {test_acc:.4f}  {seen / elapsed:,.0f} samples/s")
    if history.test_acc:
        final = history.test_acc[-1]
        print(f"held-out accuracy: {final:.4f}")
    else:  # --epochs 0: the initialised model, untrained
        with autograd.predict_mode():
            final = evaluate(net, x_test, y_test, devices, args.batch_size)
        print(f"no epochs run: saving the untrained model; held-out accuracy {final:.4f}")
    title = f"{args.model} on {', '.join(str(d) for d in devices)}: held-out accuracy {final:.2%}"
    _write_outputs(args.out, net, history, vars(args), title)
    print(f"load it with: {load_hint(args.model, args.out)}")
    return history


def build_cpu_kernels_first(quiet: bool = False, progress_file: IO[str] | None = None) -> None:
    """Build the CPU devices' kernels that are not in the build cache yet, before the first step, saying so (a
    line, a progress bar over the files, the time it took): otherwise the first batch would wait for g++ in
    silence and the progress bar's rate would include it. Nothing to do once built (the cache is per machine),
    with ``MXLITE_CPU_KERNELS=numpy``, or without g++ (the first step then warns and runs the NumPy twins)."""
    todo = kernels.cpu_kernels_to_build()
    if not todo:
        return
    jobs = min(len(todo), threads.cores())
    print(f"building mxlite's CPU kernels: {len(todo)} file(s) with g++, {jobs} at a time (once per machine, "
          f"about a minute on 2 cores; cached in {_hostcuda.cache_dir()}; mxlite build-kernels does it ahead)",
          flush=True)
    start = time.perf_counter()
    bar = tqdm(total=len(todo), desc="CPU kernels", unit="file", leave=False, disable=quiet, dynamic_ncols=True,
               file=progress_file)
    results = kernels.build_cpu_kernels(todo, jobs, done=lambda *_: bar.update(1))
    bar.close()
    failed = sorted(f for f, failure in results.items() if failure is not None)
    print(f"built the CPU kernels in {time.perf_counter() - start:.0f} s"
          + (f"; {', '.join(failed)} did not build: their NumPy twins run" if failed else ""), flush=True)


def load_hint(model: str, out: str) -> str:
    """Python that loads the saved model, runnable as it stands (after any or no import of mxlite)."""
    return (f"import mxlite.cli.train_job as job; net = job.build_model({model!r}); "
            f"net.load_parameters({os.path.join(out, 'model.npz')!r})")


def check_out(out: str) -> None:
    """Make sure the results can be written to ``out`` (created if missing) before any training: a probe file is
    written there and removed.

    Raises:
        ValueError: ``out`` cannot be created or written, naming it and why.
    """
    try:
        os.makedirs(out, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".mxlite-probe-"):
            pass
    except OSError as exc:
        raise ValueError(f"--out {out}: cannot write the results there ({type(exc).__name__}: "
                         f"{exc.strerror or exc})") from None


def _write_outputs(out: str, net: nn.Block, history: History, config: dict[str, Any], title: str = "") -> None:
    os.makedirs(out, exist_ok=True)
    net.save_parameters(os.path.join(out, "model.npz"))
    with open(os.path.join(out, "history.json"), "w") as f:
        json.dump({"config": config, **asdict(history)}, f, indent=2)
    plot = os.path.join(out, "training.png")
    if _plot(history, plot, title):
        print(f"wrote {out}/model.npz, {out}/history.json and {plot}")
    else:
        print(f"wrote {out}/model.npz and {out}/history.json (install matplotlib, e.g. "
              "pip install 'mxlite[train]', for the plot)")


def _int_at_least(minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value
    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0 or not np.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def _optimizer_name(text: str) -> str:
    name = text.lower()
    if name not in _registered_optimizers():
        raise argparse.ArgumentTypeError(f"unknown optimizer {text!r}; choose from "
                                         f"{', '.join(_registered_optimizers())}")
    return name


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``mxlite train`` (give the parser ``ArgumentDefaultsHelpFormatter`` to show defaults)."""
    parser.add_argument("--devices", default="auto",
                        help="'auto' (every GPU, else cpu:2), 'gpu:all', 'cpu:N' or 'gpu:0,1'")
    parser.add_argument("--epochs", type=_int_at_least(0), default=20,
                        help="passes over the training set (0: save the initialised model)")
    parser.add_argument("--batch-size", type=_int_at_least(1), default=64,
                        help="samples per step, all devices together")
    parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp",
                        help="; ".join(f"{k}: {v}" for k, v in MODEL_DESCRIPTIONS.items()))
    parser.add_argument("--optimizer", type=_optimizer_name, default="adam", help="a registered optimizer name")
    parser.add_argument("--lr", type=_positive_float, default=None,
                        help="learning rate (None: tuned per optimizer, " +
                        ", ".join(f"{k} {v:g}" for k, v in DEFAULT_LR.items()) + ", else 0.01)")
    parser.add_argument("--seed", type=_int_at_least(0), default=0, help="seed of the data split, order and init")
    parser.add_argument("--out", default="out", help="folder for model.npz, history.json, training.png")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or per-epoch lines")
