"""Training throughput of mxlite against PyTorch eager: the same MLP, CNN and word LMs, device, batch and dtype.

Models (``--models mlp,cnn``; ``cnn_bn``, ``lstm_lm`` and ``gru_lm`` on request):

* ``mlp``: ``--layers`` hidden Dense layers of ``--hidden`` units with ReLU, then 10 outputs, on
  ``--input`` features (defaults 4 x 4096, input 4096, batch ``--batch`` 1024);
* ``cnn``: on ``--image`` x ``--image`` x 3 images, conv3x3(32, pad 1) -> relu -> maxpool 2 ->
  conv3x3(64, pad 1) -> relu -> maxpool 2 -> dense 128 (relu) -> dense 10, batch ``--cnn-batch``
  (default 256);
* ``cnn_bn``: the same with batch normalisation after each convolution (conv -> bn -> relu -> pool);
* ``lstm_lm``, ``gru_lm``: a word language model, embedding ``--lm-vocab`` x ``--lm-embed`` -> LSTM or
  GRU of ``--lm-layers`` layers of ``--lm-hidden`` units -> dense ``--lm-vocab`` on every step, over
  ``--lm-length`` steps of ``--lm-batch`` sequences (defaults 2000, 128, 2 x 256, 35 x 32: the PTB
  word-LM example's shape at a smaller vocabulary), zero begin states, the loss over every token.

Each model trains with softmax cross-entropy on one fixed random batch already on the device:

* mxlite on one device (``gpu(0)`` with ``--device gpu``, else ``cpu(0)``), with the Trainer
  over ``kvstore=None`` (no store), ``'device'`` and, on a GPU, ``'nccl'`` (world size 1;
  ``--kvstores`` picks);
* PyTorch eager, same layers (PyTorch's default init: only speed is compared), with
  ``torch.optim.SGD(momentum=0.9, foreach=True)`` (``Adam(foreach=True)`` with
  ``--optimizer adam``), when torch is installed.

Timing: ``--warmup`` steps, then ``--repeat`` runs of ``--steps`` steps; a run's clock is read
after a device synchronisation (``cupy.cuda.Device().synchronize()``,
``torch.cuda.synchronize()``; nothing on CPU). samples/s is ``batch * steps`` over the median run.
One more run of ``--steps`` steps synchronises after each section and gives its median time:
forward (with the loss), backward, and the optimizer step: for mxlite the two calls that make
``trainer.step``, ``allreduce_grads()`` (the gradient-sync machinery) and ``update()``; for
PyTorch ``optimizer.step()``. Hence the share of the step spent in ``trainer.step``, what the sync
machinery adds to the optimizer step (``allreduce_grads`` over ``update``, same steps), and
``trainer.step`` with 'device'/'nccl' against ``kvstore=None``. At world size 1 on one device the
Trainer builds no store and no bucket sync for any of the three (``Trainer._init_kvstore``).
The sanity check: mxlite's mean loss of the last timed step is below that of the first (the
model memorises its batch); it is printed and recorded.

``--graphs``: the step as CUDA graphs. mxlite runs the network and the loss block hybridized
(``hybridize(static_alloc=True, static_shape=True)``: the first call runs eagerly, the second captures,
later ones replay; ``trainer.step`` stays eager), over ``kvstore=None`` only; PyTorch runs the same step
eagerly and as one CUDA graph of the whole step (``torch.cuda.graph``, the optimizer with
``capturable=True`` for Adam; warm-up steps on a side stream first, as PyTorch's documentation on
whole-network capture does). Records then carry ``mode`` (``eager``/``graph``) and mxlite's
``captured`` (whether any CUDA graph was captured) and ``gemm_backend``: without nvmath-python
(cuBLAS that a graph can capture) mxlite runs eagerly, and a note says "nvmath-python missing".
``ratio_vs_torch`` is against PyTorch eager, ``ratio_vs_torch_graph`` against its CUDA graph. On
emulated GPUs (``MXLITE_EMULATE_GPUS``) this is a smoke test of the code path; PyTorch is skipped
wherever it has no CUDA.

``--dtype bfloat16``: mxlite holds no bfloat16 tensors (NumPy, and so its arrays, have no bfloat16
dtype; bf16 is only a gradient wire format, ``compression_params={"type": "bf16"}``), so mxlite is
skipped with a note saying so and PyTorch alone runs in bfloat16, beside float16.

Prints a table; ``--json PATH`` writes every record with the device name, library versions,
thread settings, date and command line. Defaults fit an H100 in under 3 minutes
(``PYTHONPATH=. python3 benchmarks/bench_train.py --device gpu --json train_gpu.json``). On a
2-core CPU, in under 2 minutes::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python3 benchmarks/bench_train.py \
        --device cpu --hidden 2048 --layers 4 --input 2048 --batch 256 --cnn-batch 128 \
        --steps 5 --repeat 5 --warmup 3

One thread per library: on a small shared VM, NumPy's OpenBLAS pool and PyTorch's OpenMP pool
(each as wide as the machine) slow each other down when their runs alternate, and step times
then vary several-fold between runs; single-threaded, runs agree within a few percent.
``--threads N`` sets both libraries to N threads (``mx.set_num_threads``, ``torch.set_num_threads``);
0 (the default) leaves each at its own default; ``--separate`` then runs each library in a child
process of its own, so that their thread pools do not meet (``--only`` runs one library), and
``--rounds K`` runs that pair K times, alternating which goes first, each mxlite ratio then being the
median of the K rounds' ratios (listed in the notes): on a shared VM whose speed drifts by 20% within
minutes, a ratio of two runs a minute apart says more than a ratio of two medians. Each record's
``run_spread_pct`` is the spread of its runs' times, (slowest - fastest) / median. The recurrent models
on a 2-core CPU, both settings::

    PYTHONPATH=. python3 benchmarks/bench_train.py --device cpu --models lstm_lm,gru_lm,mlp \
        --hidden 2048 --layers 4 --input 2048 --batch 256 --kvstores none --steps 5 --repeat 7 --threads 1
    (the same with --threads 0 --separate --rounds 3)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import mxlite as mx

MODELS = ("mlp", "cnn", "cnn_bn", "lstm_lm", "gru_lm")
LM_MODELS = ("lstm_lm", "gru_lm")
CLASSES = 10
# Thread-count variables of the BLAS/OpenMP pools behind NumPy and PyTorch on CPU (recorded in the JSON).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# Settings that change the precision of float32 GEMMs (recorded in the JSON; TF32 makes them faster).
PRECISION_VARIABLES = ("CUPY_TF32", "NVIDIA_TF32_OVERRIDE")
# Learning rates: the usual defaults of each rule; the fixed batch is memorised at either.
LEARNING_RATES = {"sgd": 0.01, "adam": 1e-3}


# -- the models ------------------------------------------------------------------------------------
def _lm_sizes(args: argparse.Namespace) -> tuple[int, int, int, int, int, int]:
    """(vocab, embed, hidden, layers, length, batch) of the word LMs (defaults where ``args`` lacks them)."""
    return (getattr(args, "lm_vocab", 2000), getattr(args, "lm_embed", 128), getattr(args, "lm_hidden", 256),
            getattr(args, "lm_layers", 2), getattr(args, "lm_length", 35), getattr(args, "lm_batch", 32))


def mxlite_model(model: str, args: argparse.Namespace) -> mx.nn.Block:
    """The mxlite network for ``model`` (one of :data:`MODELS`) at the sizes in ``args`` (not initialised)."""
    if model in LM_MODELS:  # tokens (T, N) -> logits (T, N, vocab); the layer's begin states are zeros
        vocab, embed, hidden, layers, _, _ = _lm_sizes(args)
        cell = mx.rnn.LSTM if model == "lstm_lm" else mx.rnn.GRU
        return mx.nn.Sequential(mx.nn.Embedding(vocab, embed), cell(hidden, num_layers=layers, input_size=embed),
                                mx.nn.Dense(vocab, flatten=False, in_units=hidden))
    if model == "mlp":
        net = mx.nn.Sequential(*[mx.nn.Dense(args.hidden, activation="relu") for _ in range(args.layers)])
        net.add(mx.nn.Dense(CLASSES))
        return net
    if model == "cnn_bn":
        return mx.nn.Sequential(
            mx.nn.Conv2D(32, 3, padding=1), mx.nn.BatchNorm(), mx.nn.Activation("relu"), mx.nn.MaxPool2D(2),
            mx.nn.Conv2D(64, 3, padding=1), mx.nn.BatchNorm(), mx.nn.Activation("relu"), mx.nn.MaxPool2D(2),
            mx.nn.Dense(128, activation="relu"), mx.nn.Dense(CLASSES))
    return mx.nn.Sequential(
        mx.nn.Conv2D(32, 3, padding=1, activation="relu"), mx.nn.MaxPool2D(2),
        mx.nn.Conv2D(64, 3, padding=1, activation="relu"), mx.nn.MaxPool2D(2),
        mx.nn.Dense(128, activation="relu"), mx.nn.Dense(CLASSES))


def torch_model(model: str, args: argparse.Namespace) -> Any:
    """The same architecture as :func:`mxlite_model` in ``torch.nn`` (PyTorch's default init)."""
    import torch  # noqa: PLC0415 - optional

    nn = torch.nn
    if model in LM_MODELS:
        vocab, embed, hidden, layers, _, _ = _lm_sizes(args)

        class WordLM(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.embedding = nn.Embedding(vocab, embed)
                self.rnn = (nn.LSTM if model == "lstm_lm" else nn.GRU)(embed, hidden, layers)
                self.decoder = nn.Linear(hidden, vocab)

            def forward(self, x: Any) -> Any:
                return self.decoder(self.rnn(self.embedding(x))[0])

        return WordLM()
    if model == "mlp":
        layers: list[Any] = []
        width = args.input
        for _ in range(args.layers):
            layers += [nn.Linear(width, args.hidden), nn.ReLU()]
            width = args.hidden
        return nn.Sequential(*layers, nn.Linear(width, CLASSES))
    side = args.image // 4
    if model == "cnn_bn":
        return nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * side * side, 128), nn.ReLU(), nn.Linear(128, CLASSES))
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * side * side, 128), nn.ReLU(), nn.Linear(128, CLASSES))


def make_batch(model: str, args: argparse.Namespace, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One random batch for ``model``: float inputs in ``args.dtype`` (float32 for bfloat16, which NumPy
    lacks) and int64 labels in [0, 10) (word LMs: int64 tokens and labels, ``(T, N)``)."""
    rng = np.random.default_rng(seed)
    if model in LM_MODELS:  # tokens and next-token labels, (T, N) int64
        vocab, _, _, _, length, batch = _lm_sizes(args)
        return (rng.integers(0, vocab, size=(length, batch)).astype(np.int64),
                rng.integers(0, vocab, size=(length, batch)).astype(np.int64))
    if model == "mlp":
        shape: tuple[int, ...] = (args.batch, args.input)
    else:
        shape = (args.cnn_batch, 3, args.image, args.image)
    x = rng.normal(size=shape).astype("float32" if args.dtype == "bfloat16" else args.dtype)
    return x, rng.integers(0, CLASSES, size=shape[0]).astype(np.int64)


# -- timing ----------------------------------------------------------------------------------------
class Setup:
    """One framework/configuration ready to train: what :func:`measure` times.

    Attributes:
        framework, model, config: names for the record.
        batch, params: samples per step and trainable parameters.
        step: one training step (forward, backward, optimizer); returns the loss tensor.
        parts: the same step cut into named sections, in order: ``forward`` (with the loss),
            ``backward``, then the optimizer step (mxlite: ``allreduce_grads`` and ``update``,
            the two calls ``trainer.step`` makes; PyTorch: ``optimizer_step``).
        sync: waits for the device (a no-op on CPU).
        extra: fields added to the record (mxlite: the kvstore and whether a gradient sync was built).
        losses: mxlite only: the loss tensors of the first and last timed step, read after timing.
        check: called after the warm-up; its fields join ``extra`` (mxlite with ``--graphs``: what was
            captured). ``parts`` of a step that is one CUDA graph is ``[("step", replay)]``: no sections.
        warmup: the fewest warm-up steps it needs (a hybridized block captures on its second call).
    """

    def __init__(self, framework: str, model: str, config: str, batch: int, params: int, step: Callable[[], Any],
                 parts: list[tuple[str, Callable[[], None]]], sync: Callable[[], None],
                 extra: dict[str, Any] | None = None, check: Callable[[], dict[str, Any]] | None = None,
                 warmup: int = 0) -> None:
        self.framework, self.model, self.config = framework, model, config
        self.batch, self.params = batch, params
        self.step, self.parts, self.sync = step, parts, sync
        self.extra = dict(extra or {})
        self.losses: list[Any] = []
        self.check, self.warmup = check, warmup


def warm_up(setup: Setup, steps: int) -> None:
    """Run ``steps`` untimed steps (at least ``setup.warmup``: kernel compilation, allocator pools, lazy set-up,
    graph capture), wait, then add what ``setup.check`` reports to the record's fields."""
    for _ in range(max(steps, setup.warmup)):
        setup.step()
    setup.sync()
    if setup.check is not None:
        setup.extra.update(setup.check())


def measure(setups: list[Setup], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Time every (warmed-up) setup: ``args.repeat`` runs of ``args.steps`` steps, then the sections.

    Setups are interleaved (run 1 of each, then run 2 of each, ...; likewise each sectioned step)
    so that drift of the machine's speed (other tenants, clock frequency) spreads over all of them
    instead of biasing whichever ran first. Every clock is read after ``sync``.
    """
    runs: list[list[float]] = [[] for _ in setups]
    for r in range(args.repeat):
        for s, out in zip(setups, runs):
            t0 = time.perf_counter()
            for i in range(args.steps):
                loss = s.step()
                if s.framework == "mxlite" and ((r == 0 and i == 0) or (r == args.repeat - 1 and i == args.steps - 1)):
                    s.losses.append(loss)
            s.sync()
            out.append(time.perf_counter() - t0)
    sections: list[dict[str, list[float]]] = [{name: [] for name, _ in s.parts} for s in setups]
    for _ in range(args.steps):
        for s, times in zip(setups, sections):
            s.sync()
            for name, part in s.parts:
                t0 = time.perf_counter()
                part()
                s.sync()
                times[name].append(time.perf_counter() - t0)
    return [_record(s, args, out, times) for s, out, times in zip(setups, runs, sections)]


def _record(s: Setup, args: argparse.Namespace, runs: list[float], times: dict[str, list[float]]) -> dict[str, Any]:
    """The record of one setup: throughput from the runs, median ms of each section and of the optimizer step."""
    per_step = statistics.median(runs) / args.steps
    names = list(times)
    opt_names = names[2:]  # everything after forward and backward is the optimizer step
    sectioned = len(names) > 1  # a step that is one CUDA graph has no sections
    opt = [sum(times[n][i] for n in opt_names) for i in range(args.steps)]
    whole = [sum(times[n][i] for n in names) for i in range(args.steps)]
    if not sectioned:
        times = {**times, "forward": [], "backward": []}
    rec = {"framework": s.framework, "model": s.model, "config": s.config, "optimizer": args.optimizer,
           "dtype": args.dtype, "batch": s.batch, "params": s.params, "steps": args.steps, "repeat": args.repeat,
           "warmup": args.warmup, "seconds_per_step": per_step, "samples_per_s": s.batch / per_step,
           "run_samples_per_s": [s.batch * args.steps / t for t in runs],
           "run_spread_pct": 100 * (max(runs) - min(runs)) / statistics.median(runs),
           **{f"{n}_ms": 1e3 * statistics.median(times[n]) if times[n] else None for n in times},
           "optimizer_step_ms": 1e3 * statistics.median(opt) if sectioned else None,
           "optimizer_step_share": statistics.median(o / w for o, w in zip(opt, whole)) if sectioned else None,
           **s.extra}
    if s.losses:
        first, last = (float(t.asnumpy().astype(np.float64).mean()) for t in (s.losses[0], s.losses[-1]))
        rec.update(loss_first=first, loss_last=last, loss_decreased=last < first)
    return rec


# -- mxlite ----------------------------------------------------------------------------------------
def _mx_sync(device: mx.Device) -> Callable[[], None]:
    if not device.is_gpu:
        return lambda: None
    cuda = device.xp.cuda
    return lambda: cuda.Device(device.device_id).synchronize()


def setup_mxlite(model: str, device: mx.Device, kvstore: str | None, args: argparse.Namespace,
                 graphs: bool = False) -> Setup:
    """``model`` built by mxlite on ``device``, trained by a Trainer over ``kvstore`` (SGD-momentum or Adam).

    The record's ``optimizer_step_ms`` is the time of ``trainer.step``, timed as its two calls
    ``allreduce_grads`` and ``update`` (``allreduce_grads_ms``, ``update_ms``); ``sync_built`` says
    whether the Trainer built a gradient sync (buckets over a communicator). ``graphs``: the network and
    the loss block hybridized as CUDA graphs (``static_alloc=True, static_shape=True``); the record then
    says whether anything was captured (``captured``, ``graph_count``), which library computes the GEMMs
    (``gemm_backend``: 'nvmath' can be captured, 'cupy' cannot) and the capture warnings' causes.
    """
    mx.random.seed(0)
    net = mxlite_model(model, args)
    if args.dtype != "float32":
        net.cast(args.dtype)
    net.initialize(mx.init.Xavier(), device=device)
    x_np, y_np = make_batch(model, args)
    batch = x_np.shape[1] if model in LM_MODELS else x_np.shape[0]  # LMs: sequences of (T, N)
    x, y = mx.array(x_np, device=device), mx.array(y_np, device=device)
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    with mx.autograd.record():  # first forward: deferred shapes become known, arenas are laid out
        loss_fn(net(x), y).backward()
    if graphs:
        net.hybridize(static_alloc=True, static_shape=True)
        loss_fn.hybridize(static_alloc=True, static_shape=True)
    opt_params = {"learning_rate": LEARNING_RATES[args.optimizer],
                  **({"momentum": 0.9} if args.optimizer == "sgd" else {})}
    trainer = mx.Trainer(net.collect_params(), args.optimizer, opt_params, kvstore=kvstore)

    def step() -> Any:
        with mx.autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(batch)
        return loss

    held: dict[str, Any] = {}

    def forward() -> None:
        with mx.autograd.record():
            held["loss"] = loss_fn(net(x), y)

    params = sum(int(np.prod(p.shape)) for p in net.collect_params().values())
    sync_built = any(sync is not None for _, sync in trainer._syncs.values())
    parts = [("forward", forward), ("backward", lambda: held["loss"].backward()),
             ("allreduce_grads", trainer.allreduce_grads), ("update", lambda: trainer.update(batch))]
    extra: dict[str, Any] = {"kvstore": kvstore, "sync_built": sync_built}
    if not graphs:
        return Setup("mxlite", model, f"kvstore={kvstore}", batch, params, step, parts, _mx_sync(device), extra=extra)
    caught: list[str] = []

    def watched() -> Any:  # the same step, keeping the capture warnings' causes
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            loss = step()
        caught.extend(str(w.message) for w in seen if str(w.message) not in caught)
        return loss

    def check() -> dict[str, Any]:
        info = net.graph_info() + loss_fn.graph_info()
        return {"captured": bool(info), "graph_count": len(info), "graph_launches": sum(i["launches"] for i in info),
                "capture_warnings": caught[:5]}

    backend, why = mx.device.blas.backend() if device.is_gpu else ("cpu", "a CPU device runs eagerly")
    extra.update(mode="graph", gemm_backend=backend, gemm_backend_why=why)
    return Setup("mxlite", model, f"graphs kvstore={kvstore}", batch, params, watched, parts, _mx_sync(device),
                 extra=extra, check=check, warmup=3)


# -- PyTorch ---------------------------------------------------------------------------------------
def setup_torch(model: str, device: mx.Device, args: argparse.Namespace, graph: bool = False) -> Setup:
    """``model`` in PyTorch eager on the same device, batch and dtype, with a ``foreach`` optimizer.

    Turns PyTorch's TF32 off (matmul and cuDNN), process-wide, so that float32 compares with float32.
    ``graph`` (a GPU only): the whole step (zeroed gradients, forward, loss, backward, optimizer step) as
    one CUDA graph, replayed per step; Adam with ``capturable=True`` (its step count on the device). As
    PyTorch documents for whole-network capture, three warm-up steps run on a side stream first (they
    create the optimizer's state and cuDNN/cuBLAS workspaces), then the capture.
    """
    import torch  # noqa: PLC0415 - optional

    torch.manual_seed(0)
    dev = torch.device(f"cuda:{device.device_id}" if device.is_gpu else "cpu")
    # float32 means float32: cuDNN convolutions would otherwise run in TF32 (PyTorch's default),
    # while CuPy's GEMMs (mxlite's convolutions too) stay in full float32 unless CUPY_TF32=1.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dtype = getattr(torch, args.dtype)
    net = torch_model(model, args).to(device=dev, dtype=dtype)
    x_np, y_np = make_batch(model, args)
    x, y = torch.from_numpy(x_np).to(dev), torch.from_numpy(y_np).to(dev)
    if x.is_floating_point():
        x = x.to(dtype)  # bfloat16: the batch is made in float32 (NumPy has no bfloat16)
    lr = LEARNING_RATES[args.optimizer]
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9, foreach=True)
    else:
        opt = torch.optim.Adam(net.parameters(), lr=lr, foreach=True, **({"capturable": True} if graph else {}))
    cross_entropy = torch.nn.CrossEntropyLoss()

    def loss_fn(out: Any, labels: Any) -> Any:  # LMs: every token of (T, N) is a sample
        return cross_entropy(out.reshape(-1, out.shape[-1]), labels.reshape(-1))

    def step() -> Any:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        return loss

    held: dict[str, Any] = {}

    def forward() -> None:
        opt.zero_grad(set_to_none=True)
        held["loss"] = loss_fn(net(x), y)

    sync = torch.cuda.synchronize if device.is_gpu else (lambda: None)
    params = sum(p.numel() for p in net.parameters())
    parts = [("forward", forward), ("backward", lambda: held["loss"].backward()), ("optimizer_step", opt.step)]
    batch = x_np.shape[1] if model in LM_MODELS else x_np.shape[0]
    if not graph:
        return Setup("torch", model, f"eager {args.optimizer} foreach", batch, params, step, parts, sync,
                     extra={"mode": "eager"})
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream(dev).wait_stream(side)
    whole = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(whole):
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()

    def replay() -> Any:
        whole.replay()
        return loss

    config = f"graph {args.optimizer}" + (" capturable" if args.optimizer == "adam" else "")
    return Setup("torch", model, config, batch, params, replay, [("step", replay)], sync, extra={"mode": "graph"})


def _torch_has_cuda() -> bool:
    import torch  # noqa: PLC0415 - optional

    return bool(torch.cuda.is_available())


def bf16_unsupported() -> str | None:
    """Why mxlite cannot train with bfloat16 weights, or None when it can (a bfloat16 array can be made)."""
    try:
        mx.np.zeros((1,), dtype="bfloat16")
    except (TypeError, ValueError) as exc:
        return (f"bfloat16 weights are not supported ({type(exc).__name__}: {exc}): mxlite's arrays take NumPy "
                "dtypes, which have no bfloat16; bf16 is a gradient wire format only (compression_params "
                "{'type': 'bf16'}); float16 weights with float32 master weights are")
    return None


def graph_notes(setups: list[Setup]) -> list[str]:
    """Notes on mxlite's ``--graphs`` setups that did not run as CUDA graphs: "nvmath-python missing" when
    the GEMMs go through CuPy (which a graph cannot capture), else the capture warnings."""
    notes = []
    for s in setups:
        if s.framework != "mxlite" or s.extra.get("mode") != "graph":
            continue
        if s.extra.get("gemm_backend") == "cupy":
            notes.append(f"mxlite {s.model}: nvmath-python missing ({s.extra['gemm_backend_why']}): the hybridized "
                         "network ran eagerly, not as CUDA graphs")
        elif not s.extra.get("captured"):
            causes = "; ".join(s.extra.get("capture_warnings", [])) or s.extra.get("gemm_backend_why") or "no warning"
            notes.append(f"mxlite {s.model}: no CUDA graph captured ({causes})")
    return notes


# -- report ----------------------------------------------------------------------------------------
def _compare(records: list[dict[str, Any]]) -> None:
    """Add to mxlite records: ``ratio_vs_torch`` (samples/s over PyTorch eager's; ``ratio_vs_torch_graph``
    over PyTorch's CUDA graph's, with ``--graphs``), ``sync_overhead_pct``
    (``allreduce_grads`` as a percentage of ``update``: what the sync machinery adds to the optimizer
    step, measured within the same steps) and ``step_vs_none_pct`` (``trainer.step`` against the
    kvstore=None setup of the same model; None for that setup).
    """
    torch_rate = {r["model"]: r["samples_per_s"] for r in records
                  if r["framework"] == "torch" and r.get("mode", "eager") == "eager"}
    graph_rate = {r["model"]: r["samples_per_s"] for r in records
                  if r["framework"] == "torch" and r.get("mode") == "graph"}
    bare = {r["model"]: r["optimizer_step_ms"] for r in records
            if r["framework"] == "mxlite" and r["kvstore"] is None}
    for r in records:
        if r["framework"] != "mxlite":
            continue
        r["ratio_vs_torch"] = r["samples_per_s"] / torch_rate[r["model"]] if r["model"] in torch_rate else None
        if r.get("round_ratios"):  # --separate --rounds: the median of ratios of runs close in time
            r["ratio_vs_torch"] = statistics.median(r["round_ratios"])
        if r["model"] in graph_rate:
            r["ratio_vs_torch_graph"] = r["samples_per_s"] / graph_rate[r["model"]]
        r["sync_overhead_pct"] = 100 * r["allreduce_grads_ms"] / r["update_ms"]
        base = bare.get(r["model"])
        r["step_vs_none_pct"] = (100 * (r["optimizer_step_ms"] - base) / base
                                 if base and r["kvstore"] is not None else None)


def _fmt(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def _print_table(records: list[dict[str, Any]]) -> None:
    print(f"{'model':<7} {'framework':<9} {'config':<20} {'params':>10} {'batch':>6} {'ms/step':>9} {'spread':>7} "
          f"{'samples/s':>10} {'mx/torch':>8} {'fwd ms':>8} {'bwd ms':>8} {'opt ms':>8} {'opt share':>9} "
          f"{'sync ms':>8} {'sync +%':>8} {'vs None':>8}")
    for r in records:
        print(f"{r['model']:<7} {r['framework']:<9} {r['config']:<20} {r['params']:>10} {r['batch']:>6} "
              f"{1e3 * r['seconds_per_step']:>9.2f} {r['run_spread_pct']:>6.0f}% {r['samples_per_s']:>10.0f} "
              f"{_fmt(r.get('ratio_vs_torch'), '.2f'):>8} {_fmt(r['forward_ms'], '.2f'):>8} "
              f"{_fmt(r['backward_ms'], '.2f'):>8} {_fmt(r['optimizer_step_ms'], '.2f'):>8} "
              f"{_fmt(r['optimizer_step_share'] and 100 * r['optimizer_step_share'], '.1f'):>8}% "
              f"{_fmt(r.get('allreduce_grads_ms'), '.3f'):>8} {_fmt(r.get('sync_overhead_pct'), '.2f'):>8} "
              f"{_fmt(r.get('step_vs_none_pct'), '+.1f'):>8}")
    print("opt ms: trainer.step = allreduce_grads + update (mxlite) or optimizer.step (torch), synchronised "
          "medians; sync ms: allreduce_grads; sync +%: allreduce_grads / update; vs None: trainer.step against "
          "the kvstore=None setup (%, between setups: includes run-to-run noise); spread: (slowest - fastest run) "
          "/ median run; mx/torch: samples/s over PyTorch eager's; a step that is one CUDA graph has no sections")
    for r in records:
        if r["framework"] == "mxlite" and r.get("mode") == "graph":
            against = (f", {r['ratio_vs_torch_graph']:.2f}x the samples/s of PyTorch's CUDA graph"
                       if "ratio_vs_torch_graph" in r else "")
            print(f"graphs {r['model']}: mxlite {'captured' if r['captured'] else 'NOT CAPTURED'} "
                  f"({r['graph_count']} graphs, GEMMs by {r['gemm_backend']}){against}")
    seen = set()
    for r in records:
        if r["framework"] == "mxlite" and r["model"] not in seen:
            seen.add(r["model"])
            verdict = "decreasing: ok" if r["loss_decreased"] else "NOT DECREASING"
            print(f"sanity {r['model']}: mxlite loss {r['loss_first']:.4f} -> {r['loss_last']:.4f} over the "
                  f"timed steps ({verdict})")


def device_name(device: mx.Device) -> str:
    """The GPU's name (CUDA device properties), or the CPU model with its core count."""
    if device.is_gpu:
        name = device.xp.cuda.runtime.getDeviceProperties(device.device_id)["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"cpu: {model} ({os.cpu_count()} logical cores)"


def versions() -> dict[str, Any]:
    """Versions of Python, NumPy, CuPy, PyTorch (its CUDA, its threads) and mxlite (None for a missing
    library), and the thread-count and TF32 environment variables (None when unset)."""
    out: dict[str, Any] = {"python": platform.python_version(), "numpy": np.__version__, "mxlite": mx.__version__,
                           "cupy": None, "torch": None, "torch_cuda": None, "torch_threads": None}
    try:
        import cupy  # noqa: PLC0415 - optional

        out["cupy"] = cupy.__version__
    except Exception:  # missing, or a CUDA install that fails at import
        pass
    try:
        import torch  # noqa: PLC0415 - optional

        out["torch"], out["torch_cuda"] = torch.__version__, torch.version.cuda
        out["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    out["thread_env"] = {v: os.environ.get(v) for v in THREAD_VARIABLES}
    out["mxlite_threads"] = mx.get_num_threads()
    from mxlite.device.mkl import status as host_blas  # noqa: PLC0415

    out["mxlite_host_blas"] = host_blas()  # MKL (the mkl extra) or NumPy's BLAS for the large CPU products
    out["precision_env"] = {v: os.environ.get(v) for v in PRECISION_VARIABLES}
    return out


def _separate_children(argv: list[str], rounds: int = 1) -> tuple[list[dict[str, Any]], list[str]]:
    """``--separate``: this benchmark once per library, each in a child process; their records and notes.

    Each library's thread pools then run alone in their process: NumPy's OpenBLAS threads and PyTorch's
    OpenMP threads both spin after each call and, sharing a process on a small machine, slow each other
    down at the default thread counts. The children run one after the other: mxlite then PyTorch, and with
    ``rounds`` > 1 that many times, the order swapped every other round (mxlite, PyTorch, PyTorch, mxlite,
    ...), so that a machine that drifts slower or faster during the run weighs on both alike. The rounds
    are merged by :func:`merge_rounds`.
    """
    import subprocess  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    records: list[dict[str, Any]] = []
    notes: list[str] = []
    script = os.path.abspath(__file__)
    plain = [a for a in argv if a != "--separate"]
    for flag in ("--json", "--rounds"):
        cut = [i for i, a in enumerate(plain) if a == flag]
        if cut:
            del plain[cut[0]:cut[0] + 2]
    plain = [a for a in plain if not a.startswith(("--json=", "--rounds="))]
    by_round: list[list[dict[str, Any]]] = []
    for k in range(rounds):
        mine: list[dict[str, Any]] = []
        for library in ("mxlite", "torch") if k % 2 == 0 else ("torch", "mxlite"):
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "records.json")
                done = subprocess.run([sys.executable, script, *plain, "--only", library, "--json", out],
                                      capture_output=True, text=True, check=False)
                if not os.path.isfile(out):
                    notes.append(f"{library} child failed: {done.stderr[-500:]}")
                    continue
                with open(out) as f:
                    report = json.load(f)
            mine += report["records"]
            notes += [n for n in report["notes"] if n not in notes]
        by_round.append(mine)
    records = merge_rounds(by_round)
    if rounds > 1:
        for r in records:
            if r.get("round_ratios"):
                shown = ", ".join(f"{x:.2f}" for x in r["round_ratios"])
                notes.append(f"{r['model']} {r['config']}: mx/torch by round {shown} (median "
                             f"{statistics.median(r['round_ratios']):.2f})")
    return records, notes


def merge_rounds(by_round: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One record per setup from several rounds of ``--separate`` children (``by_round[k]``: round k's records).

    Each setup (framework, model, config, mode) keeps the record of its median round (the lower median
    of an even count), with ``round_seconds_per_step``, every round's time, added. An mxlite record also
    gets ``round_ratios``: its samples/s over PyTorch eager's of the same round, for every round where
    both ran; :func:`_compare` then reports their median as ``ratio_vs_torch`` (ratios of runs close in
    time, not of two medians taken minutes apart). One round: the records as they are.
    """
    if len(by_round) == 1:
        return list(by_round[0])

    def key(r: dict[str, Any]) -> tuple:
        return r["framework"], r["model"], r["config"], r.get("mode", "eager")

    groups: dict[tuple, list[dict[str, Any]]] = {}
    for records in by_round:
        for r in records:
            groups.setdefault(key(r), []).append(r)
    merged = []
    for runs in groups.values():
        ordered = sorted(runs, key=lambda r: r["seconds_per_step"])
        chosen = dict(ordered[(len(ordered) - 1) // 2])
        chosen["round_seconds_per_step"] = [r["seconds_per_step"] for r in runs]
        merged.append(chosen)
    for r in merged:
        if r["framework"] != "mxlite":
            continue
        ratios = []
        for records in by_round:
            mine = [x for x in records if key(x) == key(r)]
            torch = [x for x in records if x["framework"] == "torch" and x["model"] == r["model"]
                     and x.get("mode", "eager") == "eager"]
            if mine and torch:
                ratios.append(mine[0]["samples_per_s"] / torch[0]["samples_per_s"])
        if ratios:
            r["round_ratios"] = ratios
    return merged


def apply_threads(count: int) -> None:
    """``count`` > 0: mxlite (BLAS and host kernels) and PyTorch (if installed) both on ``count`` threads."""
    if count <= 0:
        return
    mx.set_num_threads(count)
    try:
        import torch  # noqa: PLC0415 - optional
    except ImportError:
        return
    torch.set_num_threads(count)


def command_line(script: str, argv: list[str]) -> str:
    """The shell command that reproduces this run: ``python3 benchmarks/<script> <argv>``."""
    return shlex.join(["python3", f"benchmarks/{script}", *argv])


def add_model_arguments(parser: argparse.ArgumentParser, dtypes: tuple[str, ...] = ("float32", "float16")) -> None:
    """The model, batch, optimizer and precision options (shared with profile_step.py); ``dtypes``: the
    ``--dtype`` choices."""
    parser.add_argument("--hidden", type=int, default=4096, help="MLP hidden units")
    parser.add_argument("--layers", type=int, default=4, help="MLP hidden layers")
    parser.add_argument("--input", type=int, default=4096, help="MLP input features")
    parser.add_argument("--batch", type=int, default=1024, help="MLP batch")
    parser.add_argument("--image", type=int, default=32, help="CNN image side (a multiple of 4)")
    parser.add_argument("--cnn-batch", type=int, default=256, help="CNN batch")
    parser.add_argument("--lm-vocab", type=int, default=2000, help="word LMs: vocabulary")
    parser.add_argument("--lm-embed", type=int, default=128, help="word LMs: embedding width")
    parser.add_argument("--lm-hidden", type=int, default=256, help="word LMs: recurrent units per layer")
    parser.add_argument("--lm-layers", type=int, default=2, help="word LMs: recurrent layers")
    parser.add_argument("--lm-length", type=int, default=35, help="word LMs: steps per sequence (bptt)")
    parser.add_argument("--lm-batch", type=int, default=32, help="word LMs: sequences per batch")
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    parser.add_argument("--dtype", choices=list(dtypes), default="float32")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto")
    parser.add_argument("--models", default="mlp,cnn", help="comma-separated, from: mlp, cnn, cnn_bn")
    add_model_arguments(parser, ("float32", "float16", "bfloat16"))
    parser.add_argument("--graphs", action="store_true",
                        help="CUDA graphs: mxlite hybridized (static_alloc, static_shape; kvstore=None), PyTorch eager "
                             "and as one captured step")
    parser.add_argument("--steps", type=int, default=20, help="steps per timed run")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs (the median is reported)")
    parser.add_argument("--kvstores", default="none,device,nccl",
                        help="mxlite Trainer kvstores to run, from none, device, nccl ('nccl' on a GPU only)")
    parser.add_argument("--no-torch", action="store_true", help="skip PyTorch")
    parser.add_argument("--separate", action="store_true",
                        help="run mxlite and PyTorch in two child processes (their thread pools apart)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --separate: run the two children this many times, alternating which goes first, "
                             "and report each mxlite ratio as the median of the rounds' ratios")
    parser.add_argument("--only", choices=["mxlite", "torch"], help="run one library only")
    parser.add_argument("--threads", type=int, default=0,
                        help="threads for both libraries (mx.set_num_threads, torch.set_num_threads); 0: defaults")
    parser.add_argument("--json", help="write the records here")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every configuration ran, 1 when one failed (noted in the output)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        if m not in MODELS:
            parser.error(f"unknown model {m!r} in --models; choose from {', '.join(MODELS)}")
    if args.image % 4 or args.image <= 0:
        parser.error(f"--image must be a positive multiple of 4 (two 2x2 poolings), got {args.image}")
    if min(args.steps, args.repeat, args.hidden, args.layers, args.input, args.batch, args.cnn_batch) <= 0:
        parser.error("--steps, --repeat, --hidden, --layers, --input, --batch and --cnn-batch must be positive")
    if min(args.lm_vocab, args.lm_embed, args.lm_hidden, args.lm_layers, args.lm_length, args.lm_batch) <= 0:
        parser.error("the --lm-* sizes must be positive")
    if args.rounds < 1:
        parser.error(f"--rounds must be 1 or more, got {args.rounds}")
    if args.threads < 0:
        parser.error(f"--threads must be 0 (the libraries' defaults) or a positive count, got {args.threads}")
    apply_threads(args.threads)
    use_gpu = args.device == "gpu" or (args.device == "auto" and mx.num_gpus() > 0)
    device = mx.gpu(0) if use_gpu else mx.cpu(0)
    wanted = [k.strip() for k in args.kvstores.split(",") if k.strip()]
    if not wanted or any(k not in ("none", "device", "nccl") for k in wanted):
        parser.error(f"--kvstores takes none, device and nccl, got {args.kvstores!r}")
    kvstores: list[str | None] = [None if k == "none" else k for k in wanted if use_gpu or k != "nccl"]
    if args.graphs:
        kvstores = [None]  # the graphs compare the step itself: no store
    have_torch = not args.no_torch and versions()["torch"] is not None
    notes = [] if have_torch else ["PyTorch skipped (--no-torch or not installed)"]
    if have_torch and use_gpu and not _torch_has_cuda():
        have_torch = False
        notes.append("PyTorch skipped: it sees no CUDA device (emulated GPUs, or a CPU build of torch)")
    mxlite_skip = bf16_unsupported() if args.dtype == "bfloat16" else None
    if mxlite_skip:
        notes.append(f"mxlite skipped: {mxlite_skip}")
    records: list[dict[str, Any]] = []
    if args.separate and have_torch and args.only is None:
        records, notes = _separate_children(argv, args.rounds)
        models = []  # measured by the children
    for model in models:
        makers: list[tuple[str, Callable[[], Setup]]] = [
            (f"mxlite {model} kvstore={kv}",
             lambda kv=kv, model=model: setup_mxlite(model, device, kv, args, graphs=args.graphs))
            for kv in kvstores if args.only in (None, "mxlite") and not mxlite_skip]
        if have_torch and args.only in (None, "torch"):
            makers.append((f"torch {model}", lambda model=model: setup_torch(model, device, args)))
            if args.graphs and use_gpu:
                makers.append((f"torch {model} CUDA graph",
                               lambda model=model: setup_torch(model, device, args, graph=True)))
        if have_torch and args.graphs and not use_gpu:
            notes.append(f"torch {model} CUDA graph skipped: needs a GPU")
        setups = []
        for name, make in makers:
            try:  # build and warm up; a broken path is reported and must not hide the others
                setup = make()
                warm_up(setup, args.warmup)
                setups.append(setup)
            except Exception as exc:
                notes.append(f"{name} failed: {type(exc).__name__}: {exc}")
        notes += graph_notes(setups)
        records += measure(setups, args)
    _compare(records)
    print(f"device {device_name(device)}; {args.dtype}, optimizer {args.optimizer}, "
          f"{args.steps} steps x {args.repeat} runs after {args.warmup} warm-up steps")
    _print_table(records)
    for note in notes:
        print("note:", note)
    if args.json:
        meta = {"device": device_name(device), "device_kind": "gpu" if use_gpu else "cpu", **versions(),
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "command": command_line("bench_train.py", argv), "args": vars(args)}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "records": records, "notes": notes}, f, indent=2)
    return 1 if any("failed" in n for n in notes) else 0


if __name__ == "__main__":
    sys.exit(main())
