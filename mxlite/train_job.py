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
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from . import autograd, datasets, init, loss, metric, nn, random
from .data import ArrayDataset, DataLoader
from .device import Device, cpu, gpu, gpu_devices
from .parallel import split_and_load
from .trainer import Trainer

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
    if kind == "cpu" and "," not in rest:
        count = int(rest)
        if count < 1:
            raise ValueError(f"--devices cpu:N needs N >= 1, got {count}")
        return [cpu(i) for i in range(count)]
    make = cpu if kind == "cpu" else gpu
    return [make(int(i)) for i in rest.split(",")]


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


def run(args: argparse.Namespace) -> History:
    """Train as configured by ``args`` (see :func:`add_arguments`); returns the history."""
    from tqdm import tqdm  # noqa: PLC0415 - only the job needs it

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
    print(f"mxlite train: {args.model} on {len(devices)} device(s) {devices}, {len(x_train)} train / "
          f"{len(x_test)} held-out samples, {args.optimizer} lr={lr}, batch {args.batch_size}")
    history = History()
    for epoch in range(1, args.epochs + 1):
        train_acc, total_loss, seen = metric.Accuracy(), 0.0, 0
        start = time.perf_counter()
        bar = tqdm(loader, desc=f"epoch {epoch:3d}/{args.epochs}", unit="batch", leave=False,
                   disable=args.quiet, dynamic_ncols=True)
        for xb, yb in bar:
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
            bar.set_postfix(loss=f"{total_loss / seen:.4f}", samples_s=f"{seen / (time.perf_counter() - start):.0f}")
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
    print(f"held-out accuracy: {history.test_acc[-1]:.4f}")
    _write_outputs(args.out, net, history, vars(args))
    return history


def _write_outputs(out: str, net: nn.Block, history: History, config: dict[str, Any]) -> None:
    os.makedirs(out, exist_ok=True)
    net.save_parameters(os.path.join(out, "model.npz"))
    with open(os.path.join(out, "history.json"), "w") as f:
        json.dump({"config": config, **asdict(history)}, f, indent=2)
    plot = os.path.join(out, "training.png")
    if _plot(history, plot):
        print(f"wrote {out}/model.npz, {out}/history.json and {plot}")
    else:
        print(f"wrote {out}/model.npz and {out}/history.json (install matplotlib, e.g. "
              "pip install 'mxlite[train]', for the plot)")


def _plot(history: History, path: str) -> bool:
    try:
        import matplotlib  # noqa: PLC0415 - optional

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return False
    epochs = np.arange(1, len(history.train_loss) + 1)
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(epochs, history.train_loss, marker="o")
    ax_loss.set(title="training loss", xlabel="epoch", ylabel="softmax cross-entropy")
    ax_acc.plot(epochs, history.train_acc, marker="o", label="train")
    ax_acc.plot(epochs, history.test_acc, marker="s", label="held-out")
    ax_acc.set(title="accuracy", xlabel="epoch", ylabel="accuracy", ylim=(0, 1.01))
    ax_acc.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``mxlite train``."""
    parser.add_argument("--devices", default="auto",
                        help="'auto' (every GPU, else cpu:2), 'gpu:all', 'cpu:N' or 'gpu:0,1' (default auto)")
    parser.add_argument("--epochs", type=int, default=20, help="passes over the training set (default 20)")
    parser.add_argument("--batch-size", type=int, default=64, help="samples per step, all devices together")
    parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    parser.add_argument("--optimizer", default="adam", help="a registered optimizer name (default adam)")
    parser.add_argument("--lr", type=float, default=None, help="learning rate (default: tuned per optimizer)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="out", help="folder for model.npz, history.json, training.png")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or per-epoch lines")
