"""A growing fault suite: hypothesis fuzzes public constructors and loaders and classifies each outcome.

Every case ends in one of four outcomes:

* ``clear error``: an exception of a documented type whose message names the culprit (the
  argument, or the file);
* ``unclear error``: any other exception, or one whose message names nothing;
* ``silent wrong``: accepted, but the result is wrong (a NaN or negative learning rate, NaN
  weights after one update, a load that changed values it should have refused);
* ``hang``: no answer within :data:`LIMIT_S` seconds.

Each test asserts 0 silent-wrong outcomes and 0 hangs for its own cases; the last test prints the
counts of the whole run (``python -m pytest tests/test_fuzz_faults.py -s -q``) and writes them to
``$MXLITE_FUZZ_COUNTS`` when that is set. Add a fuzzer here for every new public constructor or loader.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import json
import math
import os
import signal
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mxlite as mx
from mxlite.optimizer import lr_scheduler as lrs

LIMIT_S = 10
CLEAR_TYPES = (ValueError, TypeError, FileNotFoundError, RuntimeError, UserWarning)
COUNTS: collections.Counter[str] = collections.Counter()
EXAMPLES = settings(max_examples=80, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Values a user (or a damaged file) might pass: numbers of every kind, strings, None, containers. Finite
# floats stay within ±1e6: a learning rate of 1e38 overflows float32 weights by arithmetic, not by a missing check.
VALUES = st.one_of(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
    st.integers(min_value=-10, max_value=10),
    st.sampled_from([0, 1, -1, 0.5, 1.0, 2.0, 1e-8, float("nan"), float("inf"), -float("inf"), True, False, None,
                     "0.1", "x", "", [], [1], (3,), (3, 3), {}]),
)


class _Hang(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    def on_alarm(signum: int, frame: Any) -> None:
        raise _Hang(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def classify(area: str, run: Callable[[], str | None], names: list[str]) -> str:
    """Run one case; count and return its outcome. ``run`` returns a problem text when it was silently wrong."""
    try:
        with _time_limit(LIMIT_S), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            problem = run()
        outcome = "silent wrong" if problem else "accepted"
    except _Hang:
        outcome = "hang"
    except CLEAR_TYPES as exc:
        text = str(exc)
        outcome = "clear error" if any(n in text for n in names) else "unclear error"
    except Exception:  # noqa: BLE001 - anything else is an unclear error by definition
        outcome = "unclear error"
    COUNTS[outcome] += 1
    COUNTS[f"{area}: {outcome}"] += 1
    return outcome


def _finite_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# -- optimizer constructors --------------------------------------------------------------------------

def _arguments(klass: type) -> list[str]:
    names: list[str] = []
    for k in klass.__mro__:
        init = k.__dict__.get("__init__")
        if init is not None:
            names += [n for n, p in inspect.signature(init).parameters.items()
                      if n not in ("self", "kwargs", "param_dict", "lr_scheduler", "param_idx2name") and n not in names
                      and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return names


RULES = {name: mx.optimizer.optimizer._REGISTRY[name] for name in mx.optimizer.registered()}


def _one_update(opt: Any) -> str | None:
    bad = {k: v for k, v in vars(opt).items() if isinstance(v, float) and not math.isfinite(v)}
    if bad:
        return f"non-finite hyperparameters {bad}"
    weight = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    grad = np.full((2, 3), 0.1, np.float32)
    state = opt.create_state(0, weight)
    opt.update(0, weight, grad, state)
    if not np.all(np.isfinite(weight)):
        return f"NaN/inf weights after one update: {weight}"
    return None


@EXAMPLES
@given(rule=st.sampled_from(sorted(RULES)), data=st.data())
def test_fuzz_optimizer_constructors(rule, data):
    names = _arguments(RULES[rule])
    name = data.draw(st.sampled_from(names))
    value = data.draw(VALUES)
    outcome = classify("optimizers", lambda: _one_update(mx.optimizer.create(rule, **{name: value})), [name])
    assert outcome not in ("silent wrong", "hang"), f"{rule}({name}={value!r}): {outcome}"


# -- schedulers ---------------------------------------------------------------------------------------

SCHEDULES: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "factor": (lrs.FactorScheduler, {"step": 2, "factor": 0.5}),
    "multifactor": (lrs.MultiFactorScheduler, {"step": [2, 4], "factor": 0.5}),
    "poly": (lrs.PolyScheduler, {"max_update": 10, "pwr": 2}),
    "cosine": (lrs.CosineScheduler, {"max_update": 10}),
    "exponential": (lrs.ExponentialDecay, {"init_value": 0.1, "decay_steps": 2, "decay_rate": 0.5}),
}


def _run_schedule(make: Callable[..., Any], kwargs: dict[str, Any], count: Any) -> str | None:
    schedule = make(**kwargs)
    for n in (1, 2, 3, 5, 8, 13, 40):
        lr = schedule(n)
        if not _finite_number(lr) or lr < 0:
            return f"rate {lr!r} at update {n}"
    if count is not None:
        lr = schedule(count)
        if not _finite_number(lr) or lr < 0:
            return f"rate {lr!r} at update {count!r}"
    return None


@EXAMPLES
@given(kind=st.sampled_from(sorted(SCHEDULES)), data=st.data())
def test_fuzz_scheduler_constructors_and_calls(kind, data):
    make, base = SCHEDULES[kind]
    names = [n for n in inspect.signature(make.__init__).parameters if n != "self"]
    name = data.draw(st.sampled_from(names))
    kwargs = dict(base, **{name: data.draw(VALUES)})
    count = data.draw(st.one_of(st.none(), VALUES))
    outcome = classify("schedulers", lambda: _run_schedule(make, kwargs, count), [name, "num_update"])
    assert outcome not in ("silent wrong", "hang"), f"{kind}({kwargs}) called with {count!r}: {outcome}"


# -- layers ---------------------------------------------------------------------------------------------

LAYERS: dict[str, tuple[Callable[..., Any], dict[str, Any], tuple[int, ...]]] = {
    "dense": (mx.nn.Dense, {"units": 3}, (2, 4)),
    "conv2d": (mx.nn.Conv2D, {"channels": 2, "kernel_size": 3}, (1, 1, 6, 6)),
    "maxpool": (mx.nn.MaxPool2D, {}, (1, 1, 6, 6)),
    "dropout": (mx.nn.Dropout, {"rate": 0.5}, (2, 4)),
    "batchnorm": (mx.nn.BatchNorm, {}, (2, 3, 4, 4)),
    "layernorm": (mx.nn.LayerNorm, {}, (2, 4)),
    "embedding": (mx.nn.Embedding, {"input_dim": 5, "output_dim": 2}, (2, 3)),
}
LAYER_ARGUMENTS = {
    "dense": ["units", "in_units"], "conv2d": ["channels", "kernel_size", "strides", "padding", "dilation", "groups"],
    "maxpool": ["pool_size", "strides", "padding"], "dropout": ["rate"], "batchnorm": ["momentum", "epsilon"],
    "layernorm": ["epsilon"], "embedding": ["input_dim", "output_dim"],
}


def _run_layer(kind: str, kwargs: dict[str, Any], name: str) -> str | None:
    make, _, shape = LAYERS[kind]
    layer = make(**kwargs)
    layer.initialize(device=[mx.cpu(0)])
    x = np.abs(np.random.default_rng(0).standard_normal(shape)).astype(np.float32) % 5
    if kind == "embedding":
        x = np.floor(x).astype(np.float32)
    try:
        with mx.autograd.record():
            y = layer(mx.array(x))
    except (ValueError, TypeError) as exc:  # a forward refusing the input the arguments imply is fine ...
        if kind in ("dense", "embedding", "dropout", "batchnorm", "layernorm") and name != "in_units":
            raise RuntimeError(f"accepted at construction, failed at the first forward: {exc}") from None
        return None  # ... for convolutions, pools and in_units, whose valid input depends on the arguments
    if not np.all(np.isfinite(y.asnumpy())):
        return "non-finite output from finite input"
    return None


@EXAMPLES
@given(kind=st.sampled_from(sorted(LAYERS)), data=st.data())
def test_fuzz_layer_constructors(kind, data):
    name = data.draw(st.sampled_from(LAYER_ARGUMENTS[kind]))
    kwargs = dict(LAYERS[kind][1], **{name: data.draw(VALUES)})
    outcome = classify("layers", lambda: _run_layer(kind, kwargs, name), [name])
    assert outcome not in ("silent wrong", "hang"), f"{kind}({kwargs}): {outcome}"


# -- metric updates ------------------------------------------------------------------------------------------

@EXAMPLES
@given(metric=st.sampled_from(["acc", "ce", "loss"]), labels=st.integers(0, 6), rows=st.integers(0, 6),
       classes=st.integers(1, 4))
def test_fuzz_metric_updates(metric, labels, rows, classes):
    def run() -> str | None:
        m = mx.metric.create(metric)
        y = mx.array(np.arange(labels, dtype=np.float32) % classes)
        p = mx.array(np.full((rows, classes), 1.0 / classes, np.float32))
        m.update([y], [p])
        _, value = m.get()
        if metric != "loss" and labels != rows:
            return f"{labels} labels for {rows} rows accepted: {value}"
        return None

    outcome = classify("metrics", run, ["label", "shape", "rows"])
    assert outcome not in ("silent wrong", "hang"), f"{metric}: {labels} labels, {rows}x{classes}: {outcome}"


# -- loaders: checkpoints and trainer states with damaged bytes ---------------------------------------------------

def _model(seed: int = 0) -> tuple[Any, Any]:
    mx.random.seed(seed)
    net = mx.nn.Sequential(mx.nn.Dense(6, in_units=4), mx.nn.Dense(2, in_units=6))
    net.initialize(mx.init.Xavier(), device=[mx.cpu(0)])
    trainer = mx.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01})
    return net, trainer


def _values(net: Any, trainer: Any, path: str) -> tuple[dict[str, np.ndarray], bytes]:
    trainer.save_states(path)
    with open(path, "rb") as f:
        return {k: p.data().asnumpy().copy() for k, p in net.collect_params().items()}, f.read()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    net, trainer = _model()
    with mx.autograd.record():
        loss = net(mx.array(np.ones((2, 4), np.float32))).sum()
    loss.backward()
    trainer.step(2)
    step_folder = mx.checkpoint.save(folder / "ckpt", net, trainer, step=1)
    trainer.save_states(folder / "plain.states")
    files = {name: (os.path.join(step_folder, name)) for name in os.listdir(step_folder)}
    files["latest"] = str(folder / "ckpt" / "latest")
    originals = {name: open(path, "rb").read() for name, path in files.items()}
    good = _values(net, trainer, str(folder / "probe.states"))
    return folder, files, originals, good


def _damage(data: bytes, draw: Any) -> bytes:
    out = bytearray(data)
    how = draw(st.sampled_from(["flip", "truncate", "append", "zero"]))
    if how == "flip" and out:
        at = draw(st.integers(0, len(out) - 1))
        out[at] ^= 1 << draw(st.integers(0, 7))
    elif how == "truncate":
        del out[draw(st.integers(0, len(out))):]
    elif how == "append":
        out += draw(st.binary(min_size=1, max_size=16))
    elif out:
        at = draw(st.integers(0, len(out) - 1))
        out[at: at + 8] = bytes(len(out[at: at + 8]))
    return bytes(out)


@EXAMPLES
@given(data=st.data())
def test_fuzz_checkpoint_loads_with_damaged_files(saved, data):
    folder, files, originals, (good_params, good_states) = saved
    name = data.draw(st.sampled_from(sorted(files)))
    damaged = _damage(originals[name], data.draw)
    with open(files[name], "wb") as f:
        f.write(damaged)
    net, trainer = _model(seed=7)
    before = _values(net, trainer, str(folder / "before.states"))

    def run() -> str | None:
        try:
            mx.checkpoint.load(folder / "ckpt", net, trainer)
        except CLEAR_TYPES:
            after = _values(net, trainer, str(folder / "after.states"))
            if after[1] != before[1] or any(not np.array_equal(after[0][k], v) for k, v in before[0].items()):
                raise AssertionError("a failed load changed the model or trainer") from None
            raise
        params, states = _values(net, trainer, str(folder / "after.states"))
        if states != good_states or any(not np.array_equal(params[k], v) for k, v in good_params.items()):
            return f"{name} damaged, load succeeded with other values"
        return None

    try:
        outcome = classify("checkpoint load", run, [name, os.path.basename(files[name])])
    finally:
        with open(files[name], "wb") as f:
            f.write(originals[name])
    assert outcome not in ("silent wrong", "hang"), f"{name} damaged: {outcome}"


@EXAMPLES
@given(data=st.data())
def test_fuzz_trainer_state_loads_with_damaged_bytes(saved, data):
    folder, _, _, (_, good_states) = saved
    original = open(folder / "plain.states", "rb").read()
    path = folder / "damaged.states"
    path.write_bytes(_damage(original, data.draw))
    net, trainer = _model(seed=7)
    net.load_parameters  # noqa: B018 - the weights do not matter here

    def run() -> str | None:
        trainer.load_states(path)
        trainer.save_states(folder / "reloaded.states")
        if (folder / "reloaded.states").read_bytes() != original:
            # Damage the zip does not see (its unused fields) leaves the same states; anything else is wrong.
            return "damaged trainer states accepted with other values"
        return None

    outcome = classify("trainer states load", run, ["damaged.states"])
    assert outcome not in ("silent wrong", "hang"), outcome


def test_fuzz_outcome_counts():
    """Print the counts of every fuzz case run above (``-s`` shows them); 0 silent wrong, 0 hangs."""
    totals = {k: v for k, v in sorted(COUNTS.items())}
    print("\nfuzz outcomes:", json.dumps(totals, indent=1))
    if os.environ.get("MXLITE_FUZZ_COUNTS"):
        with open(os.environ["MXLITE_FUZZ_COUNTS"], "w") as f:
            json.dump(totals, f, indent=1)
    assert COUNTS["silent wrong"] == 0 and COUNTS["hang"] == 0, totals
