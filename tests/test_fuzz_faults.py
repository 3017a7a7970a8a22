"""A growing fault suite: hypothesis fuzzes public constructors, loaders, settings and lifecycles and
classifies each outcome.

Every case ends in one of these outcomes:

* ``accepted``: it worked, and the result is right;
* ``clear error``: an exception of a documented type whose message names the culprit (the
  argument, the file, the variable) in at most :data:`MESSAGE_LIMIT` characters;
* ``unclear error``: any other exception, one whose message names nothing, or a message longer
  than :data:`MESSAGE_LIMIT` characters;
* ``silent wrong``: accepted, but the result is wrong (a NaN or negative learning rate, NaN
  weights after one update, a load that changed values it should have refused, a non-finite
  gradient that vanished, a setting silently ignored);
* ``hang``: no answer within :data:`LIMIT_S` seconds (:data:`PROCESS_LIMIT_S` for a child process);
* for cases run in a child process of their own (:func:`classify_process`: what a SIGALRM cannot
  interrupt, or what would kill pytest): ``crash`` (killed by a signal, or no answer), ``exit hang``
  (answered, then did not exit) and ``residue`` (processes of its group left alive);
* ``resource`` (counted beside the outcome): a refusal that first allocated far more than its input.

Each test asserts 0 silent-wrong outcomes, 0 hangs (and 0 crashes, exit hangs, residues) for its
own cases; the last test prints the counts of the whole run (``python -m pytest
tests/test_fuzz_faults.py -s -q``) and writes them to ``$MXLITE_FUZZ_COUNTS`` when that is set. Add
a fuzzer here for every new public constructor or loader. ``-m slow`` adds the whole DataLoader
lifecycle grid.
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
CLEAR_TYPES = (ValueError, TypeError, FileNotFoundError, RuntimeError, UserWarning, FloatingPointError)
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
        outcome = "clear error" if any(n in text for n in names) and len(text) <= MESSAGE_LIMIT else "unclear error"
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
    # aggregate_num=inf is MXNet's "aggregate every tensor" (its own tests pass it): a count, not arithmetic.
    bad = {k: v for k, v in vars(opt).items() if isinstance(v, float) and not math.isfinite(v)
           and not (k == "aggregate_num" and v == math.inf)}
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


# -- processes: crashes, exit hangs and leftovers (the DataLoader's workers) -------------------------------------
#
# A SIGALRM cannot interrupt a join at interpreter exit, and a crash would kill pytest itself: these cases run
# in a child process of their own session. The child prints one JSON answer line; the runner classifies from
# (status, answer, whether the process group outlived it).

PROCESS_LIMIT_S = 20


def classify_process(area: str, script: str, names: list[str], limit: float = PROCESS_LIMIT_S) -> str:
    """Run ``script`` in a child process and count its outcome.

    The script ends by printing ``{"outcome": "accepted" | "raised", "type": ..., "message": ...,
    "problem": ...}`` (see :data:`_ANSWER`). Outcomes: ``crash`` (killed by a signal), ``exit hang``
    (answered, then did not exit within ``limit``), ``hang`` (no answer), ``residue`` (processes of
    its group alive after it ended), ``silent wrong`` (``problem`` set), else as :func:`classify`.
    """
    from tests.test_hardening import run_python

    result = run_python(script, limit)
    lines = [line for line in result["out"].splitlines() if line.startswith("{")]
    answer = json.loads(lines[-1]) if lines else None
    if result["rc"] is None:
        outcome = "exit hang" if answer is not None else "hang"
    elif result["rc"] < 0 or answer is None:
        outcome = "crash"
    elif result["leftovers"]:
        outcome = "residue"
    elif answer.get("problem"):
        outcome = "silent wrong"
    elif answer["outcome"] == "accepted":
        outcome = "accepted"
    else:
        message = answer["message"]
        outcome = "clear error" if any(n in message for n in names) and len(message) <= MESSAGE_LIMIT \
            else "unclear error"
    COUNTS[outcome] += 1
    COUNTS[f"{area}: {outcome}"] += 1
    return outcome


MESSAGE_LIMIT = 1000  # characters: a longer message (a name quoted whole) is an unclear error
_ANSWER = """
import json as _json
def _answer(outcome, exc=None, problem=None):
    print(_json.dumps({"outcome": outcome, "type": type(exc).__name__ if exc else None,
                       "message": str(exc) if exc else "", "problem": problem}), flush=True)
"""

_LOADER_DATASETS = {
    # what sample i does: every dataset has 6 samples
    "ok": "return np.array([i], np.float32)",
    "stuck": "if i >= 1:\n            time.sleep(3600)\n        return np.array([i], np.float32)",  # a hung read
    "raises": "if i == 2:\n            raise KeyError('sample 2 is broken')\n        return np.array([i], np.float32)",
    "sigkill": "if i == 2:\n            os.kill(os.getpid(), signal.SIGKILL)\n        return np.array([i], np.float32)",
    "exit": "if i == 2:\n            os._exit(3)\n        return np.array([i], np.float32)",
}
_LOADER_LOOPS = {
    "break": "for batch in loader:\n        break",
    "all": "list(loader)",
    "abandon": "it = iter(loader)\n    next(it)\n    del it",
}
_LOADER_AFTER = {"exit": "", "again": "run()", "close": "loader.close()"}
# what a clear error names, per dataset (a timeout for a stuck read, the worker's death, the dataset's own error)
_LOADER_SAYS = {"stuck": ["timeout="], "raises": ["sample 2 is broken"], "sigkill": ["worker process died"],
                "exit": ["worker process died"], "ok": []}


def _loader_script(dataset: str, loop: str, after: str, threads: bool, workers: int, prefetch: int) -> str:
    return _ANSWER + f"""
import os, signal, time
import numpy as np
from mxlite.gluon.data import DataLoader

class Data:
    def __len__(self):
        return 6

    def __getitem__(self, i):
        {_LOADER_DATASETS[dataset]}

loader = DataLoader(Data(), batch_size=1, num_workers={workers}, prefetch={prefetch}, thread_pool={threads},
                    timeout=1)

def run():
    {_LOADER_LOOPS[loop]}

try:
    run()
    {_LOADER_AFTER[after] or "pass"}
    _answer("accepted")
except Exception as exc:
    _answer("raised", exc)
"""


def _loader_cases() -> list[tuple[str, str, str, bool]]:
    cases = []
    for dataset in sorted(_LOADER_DATASETS):
        for loop in sorted(_LOADER_LOOPS):
            for after in sorted(_LOADER_AFTER):
                for threads in (False, True):
                    if threads and dataset in ("sigkill", "exit"):
                        continue  # a worker thread that kills its process kills the program: nothing to handle
                    cases.append((dataset, loop, after, threads))
    return cases


LOADER_CASES = _loader_cases()


def _check_loader_case(dataset: str, loop: str, after: str, threads: bool, workers: int, prefetch: int) -> str:
    script = _loader_script(dataset, loop, after, threads, workers, prefetch)
    outcome = classify_process("dataloader lifecycle", script, _LOADER_SAYS[dataset])
    assert outcome not in ("silent wrong", "hang", "exit hang", "crash", "residue"), \
        f"{dataset}/{loop}/{after} threads={threads} workers={workers} prefetch={prefetch}: {outcome}"
    return outcome


@settings(max_examples=6, deadline=None, derandomize=True)
@given(case=st.sampled_from(LOADER_CASES), workers=st.integers(1, 4), prefetch=st.integers(1, 8))
def test_fuzz_dataloader_lifecycle(case, workers, prefetch):
    # A few drawn cases in every run; the whole grid runs with -m slow.
    _check_loader_case(*case, workers, prefetch)


@pytest.mark.slow
@pytest.mark.parametrize("case", LOADER_CASES, ids=["-".join(map(str, c)) for c in LOADER_CASES])
def test_fuzz_dataloader_lifecycle_whole_grid(case):
    _check_loader_case(*case, 2, 3)


# -- non-finite values: gradients through compression, learning-rate schedules ----------------------------------------

def _nonfinite_step(kind: str, guard: str, bad: float, where: int) -> str | None:
    """SGD on a 3-element weight over two CPU devices; device 1's gradient element ``where`` is ``bad`` at step 0.

    The rule of docs/reliability.md: check_finite refuses the step (FloatingPointError, nothing written), AMP
    skips it (nothing written), and with neither the non-finite value reaches the weight; in every case the
    following steps train every element (the residual is not poisoned).
    """
    devices = [mx.cpu(0), mx.cpu(1)]
    net = mx.nn.Dense(1, in_units=3, use_bias=False)
    net.initialize(mx.init.Constant(1.0), device=devices)
    compression = {"none": None, "2bit": {"type": "2bit", "threshold": 0.5},
                   "threshold": {"type": "threshold", "threshold": 0.5}, "topk": {"type": "topk", "ratio": 0.34}}[kind]
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, compression_params=compression,
                         check_finite=guard == "check_finite")
    if guard == "amp":
        mx.amp.init_trainer(trainer, mx.amp.LossScaler(init_scale=1.0))  # scale 1: the gradients as they are
    before = net.weight.data().asnumpy().copy()
    for step in range(3):
        row = [1.0, 1.0, 1.0]
        if step == 0:
            row[where] = bad
        xs = [mx.nd.array([[1.0, 1.0, 1.0]], device=devices[0]), mx.nd.array([row], device=devices[1])]
        with mx.autograd.record():
            losses = [net(x).sum() for x in xs]
        mx.autograd.backward(losses)
        try:
            trainer.step(1)
        except FloatingPointError:
            if guard != "check_finite" or step != 0:
                raise
            if not np.array_equal(net.weight.data().asnumpy(), before):
                return "a refused step wrote the weight"
            continue
        weight = net.weight.data().asnumpy().ravel()
        if step == 0:
            if guard == "check_finite":
                return "check_finite did not see the non-finite gradient"
            if guard == "amp" and not np.array_equal(weight, before.ravel()):
                return "AMP did not skip the step with a non-finite gradient"
            if guard == "none" and np.isfinite(weight[where]):
                return "a non-finite gradient vanished (the weight stayed finite)"
            if guard == "none":
                return None  # the weight is non-finite now, as without compression: nothing more to see
    weight = net.weight.data().asnumpy().ravel()
    if guard != "none" and not (np.isfinite(weight).all() and weight[where] < before.ravel()[where]):
        return f"element {where} froze or drifted after the non-finite step: {weight}"
    return None


@settings(max_examples=40, deadline=None, derandomize=True)
@given(kind=st.sampled_from(["none", "2bit", "threshold", "topk"]), guard=st.sampled_from(["check_finite", "amp",
       "none"]), bad=st.sampled_from([float("nan"), float("inf"), -float("inf")]), where=st.integers(0, 2))
def test_fuzz_non_finite_gradients_through_compression(kind, guard, bad, where):
    if guard == "amp" and kind != "none":
        guard = "check_finite"  # amp.init_trainer refuses error-feedback compression (residuals at the old scale)
    outcome = classify("non-finite gradients", lambda: _nonfinite_step(kind, guard, bad, where), ["gradient"])
    assert outcome not in ("silent wrong", "hang"), f"{kind}, {guard}, {bad} at {where}: {outcome}"


@settings(max_examples=20, deadline=None, derandomize=True)
@given(rate=st.sampled_from([float("nan"), float("inf"), -float("inf"), -1.0, "0.1", None, True, [0.1]]),
       devices=st.integers(1, 2), rule=st.sampled_from(["sgd", "adam", "rmsprop"]))
def test_fuzz_schedules_returning_bad_rates(rate, devices, rule):
    def run() -> str | None:
        devs = [mx.cpu(i) for i in range(devices)]
        net = mx.nn.Dense(2, in_units=3)
        net.initialize(device=devs)
        trainer = mx.Trainer(net.collect_params(), rule, {"learning_rate": 0.1, "lr_scheduler": lambda n: rate})
        before = net.weight.data().asnumpy().copy()
        with mx.autograd.record():
            losses = [net(mx.nd.ones((1, 3), device=d)).sum() for d in devs]
        mx.autograd.backward(losses)
        try:
            trainer.step(devices)
        except ValueError:
            if not np.array_equal(net.weight.data().asnumpy(), before) or trainer._optimizer.num_update != 0:
                return "a refused step changed the weights or the update count"
            raise
        return f"a rate of {rate!r} was applied"

    outcome = classify("learning-rate schedules", run, ["lr_scheduler"])
    assert outcome not in ("silent wrong", "hang"), f"{rule} with a schedule returning {rate!r}: {outcome}"


# -- hand-made files (structure, not bytes) ------------------------------------------------------------------------

def _zip_of(path: str, members: dict[str, bytes], deflate: bool = False) -> None:
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def _npy(array: np.ndarray, shape: tuple[int, ...] | None = None) -> bytes:
    """The .npy bytes of ``array``, its header announcing ``shape`` when given (a header that lies)."""
    import io

    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": array.dtype.str, "fortran_order": False,
                                              "shape": array.shape if shape is None else shape})
    out.write(np.ascontiguousarray(array).tobytes())
    return out.getvalue()


_W, _B = np.ones((3, 4), np.float32), np.zeros(3, np.float32)
FILE_EDITS: dict[str, tuple[Callable[[str], None], str, list[str]]] = {
    # name -> (write the file, how it is loaded, what a clear refusal names)
    "list gap": (lambda p: _zip_of(p, {"list:0.npy": _npy(_B), "list:5.npy": _npy(_B)}), "nd", ["list:1"]),
    "list not a number": (lambda p: _zip_of(p, {"list:0.npy": _npy(_B), "list:x.npy": _npy(_B)}), "nd", ["list:x"]),
    "list leading zero": (lambda p: _zip_of(p, {"list:0.npy": _npy(_B), "list:01.npy": _npy(_B)}), "nd",
                          ["list:01"]),
    "list and dict mixed": (lambda p: _zip_of(p, {"list:0.npy": _npy(_B), "dict:a.npy": _npy(_B)}), "nd",
                            ["dict:a"]),
    "header larger than the zip": (lambda p: _zip_of(p, {"weight.npy": _npy(_W, (3000, 4)), "bias.npy": _npy(_B)}),
                                   "model", ["weight.npy"]),
    "header smaller than the zip": (lambda p: _zip_of(p, {"weight.npy": _npy(_W, (2, 4)), "bias.npy": _npy(_B)}),
                                    "model", ["weight.npy"]),
    "deflated 2**24 elements": (lambda p: _zip_of(p, {"weight.npy": _npy(np.zeros(2**24, np.float32)),
                                                      "bias.npy": _npy(_B)}, deflate=True), "model", ["16777216"]),
    "zero-size for a deferred shape": (lambda p: _zip_of(p, {"weight.npy": _npy(np.zeros((3, 0), np.float32)),
                                                             "bias.npy": _npy(_B)}), "deferred", ["(3, 0)"]),
    "another shape": (lambda p: _zip_of(p, {"weight.npy": _npy(np.ones((4, 3), np.float32)), "bias.npy": _npy(_B)}),
                      "model", ["'weight'"]),
    "a member twice": (lambda p: _zip_of(p, {"weight.npy": _npy(_W), "bias.npy": _npy(_B)}) or _append(p, "bias.npy"),
                       "model", ["bias.npy"]),
}


def _append(path: str, name: str) -> None:
    import zipfile

    with warnings.catch_warnings(), zipfile.ZipFile(path, "a") as zf:
        warnings.simplefilter("ignore")  # "Duplicate name"
        zf.writestr(name, _npy(_B))


def _load_edited(path: str, how: str) -> str | None:
    """Load the edited file; a refusal must leave the model as it was, and allocate little (tracemalloc)."""
    import tracemalloc

    if how == "nd":
        mx.nd.load(path)
        return "an edited list file loaded"
    net = mx.nn.Dense(3) if how == "deferred" else mx.nn.Dense(3, in_units=4)
    net.initialize(mx.init.Constant(0.5))
    before = None if how == "deferred" else net.weight.data().asnumpy().copy()
    tracemalloc.start()
    try:
        net.load_parameters(path)
    except ValueError:
        peak = tracemalloc.get_traced_memory()[1]
        if peak > 16 << 20:
            COUNTS["resource"] += 1  # counted apart: a refusal that first allocated far more than the file
            raise RuntimeError(f"the refusal allocated {peak >> 20} MiB first") from None
        if before is not None and not np.array_equal(net.weight.data().asnumpy(), before):
            return "a failed load changed the weight"
        if how == "deferred" and net(mx.nd.ones((2, 4))).shape != (2, 3):
            return "a failed load lost the deferred initialisation"
        raise
    finally:
        tracemalloc.stop()
    return "an edited parameter file loaded"


@pytest.mark.parametrize("edit", sorted(FILE_EDITS))
def test_fuzz_hand_made_files(tmp_path, edit):
    write, how, says = FILE_EDITS[edit]
    path = str(tmp_path / "edited.npz")
    write(path)
    outcome = classify("hand-made files", lambda: _load_edited(path, how), says)
    assert outcome == "clear error", f"{edit}: {outcome}"


def test_fuzz_colliding_dict_keys(tmp_path):
    path = tmp_path / "keys.npz"
    for fmt in ("npz", "mxnet"):
        outcome = classify("hand-made files", lambda fmt=fmt: mx.nd.save(str(path), {1: mx.nd.ones(2),
                                                                                   "1": mx.nd.zeros(2)}, format=fmt),
                           ["'1'"])
        assert outcome == "clear error" and not path.exists(), f"{fmt}: {outcome}"


# -- the kernel build cache: damaged entries, killed builds (in child processes: a SIGBUS would kill pytest) ------
#
# A tiny module is built once into a template cache; each case copies it, damages one file (or kills a build
# midway), then builds and runs the module in a fresh process. Accepted only with the right result and nothing
# left behind; crash = killed by a signal (the SIGBUS of a truncated library); residue = staging or set-aside
# folders left in the cache.

CACHE_FILES = ["module.so", "unit.cpp", "entry.json", "cuda_host.h", "cuda_host.h.gch", "runtime.o"]
CACHE_DAMAGE = ["truncate", "flip", "zero-page", "delete"]
CACHE_CASES = [(f, d) for f in CACHE_FILES for d in CACHE_DAMAGE] + [("build", f"kill-{t}") for t in (10, 18, 26, 34)]


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory):
    from mxlite.device import _hostcuda
    from tests.test_hardening import TINY_BUILD, run_python

    try:
        _hostcuda.compiler()
        _hostcuda.cuda_include_dirs()
    except _hostcuda.HostCudaError as exc:
        pytest.skip(f"no host build here: {exc}")
    template = tmp_path_factory.mktemp("kernel-cache") / "cache"
    result = run_python(TINY_BUILD, 120, MXLITE_HOSTCUDA_CACHE=str(template))
    assert result["rc"] == 0, result["err"]
    return template


def _damage_cache_file(path: str, how: str) -> None:
    data = bytearray(open(path, "rb").read())
    if how == "truncate":
        data = data[: len(data) // 3]
    elif how == "flip":
        data[len(data) // 2] ^= 0x04
    elif how == "zero-page":
        start = (len(data) // 2) & ~4095
        data[start: start + 4096] = bytes(len(data[start: start + 4096]))
    if how == "delete":
        os.unlink(path)
        return
    with open(path + ".new", "wb") as f:  # a new inode, as a copy or a full disk leaves it
        f.write(bytes(data))
    os.replace(path + ".new", path)


def _check_cache_case(built_cache: Any, tmp_path: Any, file: str, how: str) -> str:
    import shutil
    import subprocess
    import sys
    import time

    from tests.test_hardening import ROOT, TINY_BUILD, _env, run_python

    cache = tmp_path / "cache"
    if how.startswith("kill-"):  # a build killed after N tenths of a second (it takes about 3 s, start-up included)
        proc = subprocess.Popen([sys.executable, "-c", TINY_BUILD], cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=_env(MXLITE_HOSTCUDA_CACHE=str(cache)),
                                start_new_session=True)
        time.sleep(int(how[5:]) / 10)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    else:
        shutil.copytree(built_cache, cache)
        module = next(n for n in os.listdir(cache) if not n.startswith(("support-", ".")))
        if file in ("cuda_host.h", "cuda_host.h.gch", "runtime.o"):
            shutil.rmtree(cache / module)  # the support files are read only when a module is built
            folder = next(n for n in os.listdir(cache) if n.startswith("support-"))
        else:
            folder = module
        _damage_cache_file(str(cache / folder / file), how)
    result = run_python(TINY_BUILD, PROCESS_LIMIT_S, MXLITE_HOSTCUDA_CACHE=str(cache))
    lines = [line for line in result["out"].splitlines() if line.startswith("{")]
    left = [n for n in os.listdir(cache) if n.startswith(".")] if cache.is_dir() else []
    if result["rc"] is None:
        outcome = "hang"
    elif result["rc"] < 0:
        outcome = "crash"
    elif result["rc"] != 0 or not lines:
        outcome = "unclear error"  # the module builds with a working compiler: any error is unexplained
    elif json.loads(lines[-1])["x"] != [1.0] * 5:
        outcome = "silent wrong"
    elif left or result["leftovers"]:
        outcome = "residue"
    else:
        outcome = "accepted"
    COUNTS[outcome] += 1
    COUNTS[f"kernel cache: {outcome}"] += 1
    return outcome


@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.sampled_from(CACHE_CASES))
def test_fuzz_kernel_cache_damage(built_cache, tmp_path_factory, case):
    # A few drawn cases in every run; the whole grid runs with -m slow.
    outcome = _check_cache_case(built_cache, tmp_path_factory.mktemp("case"), *case)
    assert outcome == "accepted", f"{case}: {outcome}"


@pytest.mark.slow
@pytest.mark.parametrize("case", CACHE_CASES, ids=["-".join(c) for c in CACHE_CASES])
def test_fuzz_kernel_cache_damage_whole_grid(built_cache, tmp_path, case):
    assert _check_cache_case(built_cache, tmp_path, *case) == "accepted", case


# -- non-finite weights: both CPU modes must agree (R1, R2 of docs/design.md) ----------------------------------------

def _fused_entries() -> list[tuple[str, dict, Any]]:
    from tests.test_fused_rules import FUSED

    return FUSED


def _special_weights_run(entry: tuple, dtype: Any, mp: bool, wd: float, where: list[int], mode: str,
                         monkeypatch: Any) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """Two fused steps from weights holding inf, -inf and NaN at ``where``: (weights, states, states without master)."""
    from mxlite.device import kernels
    from mxlite.optimizer._arena import ArenaUpdater
    from mxlite.store import Arena
    from tests.test_fused_chunks import _flat

    name, kwargs, _ = entry
    monkeypatch.setenv(kernels.CPU_KERNELS_ENV, mode)
    rng = np.random.default_rng(len(where))
    arena = Arena(mx.cpu(0), dtype)
    slot = arena.add(0, (300,))
    w = rng.uniform(-1, 1, 300)
    w[where] = [np.inf, -np.inf, np.nan][: len(where)]
    slot.data._data[...] = w
    updater = ArenaUpdater(mx.optimizer.create(name, **dict(kwargs, wd=wd), multi_precision=mp), arena, 0)
    for _ in range(2):
        slot.grad._data[...] = rng.normal(size=300)
        updater.step([(0, slot)])
    state = updater.get_state(slot)
    inner = state.state if hasattr(state, "master") else state
    return slot.data._data.copy(), _flat(state), _flat(inner)


def _bits(a: np.ndarray) -> bytes:
    return np.where(np.isnan(a), np.array(np.nan, a.dtype), a).tobytes()


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entry=st.sampled_from(_fused_entries()), dtype=st.sampled_from(["float32", "float16", "float16-master"]),
       wd=st.sampled_from([0.0, 1e-3]), where=st.lists(st.integers(0, 299), min_size=1, max_size=3, unique=True))
def test_fuzz_non_finite_weights_in_both_cpu_modes(monkeypatch, entry, dtype, wd, where):
    from mxlite.device import kernels
    from mxlite.optimizer import _fused

    if kernels._host_build_failure(_fused._KERNEL_FILE, _fused.all_kernel_names()) is not None:
        pytest.skip("the compiled CPU kernels do not build here")  # built before the alarm: a build can take 10 s
    np_dtype, mp = (np.float16, True) if dtype == "float16-master" else (np.dtype(dtype), False)

    def run() -> str | None:
        compiled = _special_weights_run(entry, np_dtype, mp, wd, where, "compiled", monkeypatch)
        twin = _special_weights_run(entry, np_dtype, mp, wd, where, "numpy", monkeypatch)
        if any(_bits(a) != _bits(b) for a, b in zip([compiled[0], *compiled[1]], [twin[0], *twin[1]], strict=True)):
            COUNTS["disagreement"] += 1  # counted apart: the two implementations that must agree did not
            return "the compiled kernels and the NumPy twins disagree"
        free_of_w = entry[0].lower() not in ("ftrl", "lars")  # their states read the weight by definition
        if wd == 0 and free_of_w and not all(np.isfinite(s).all() for s in compiled[2]):
            return "a non-finite weight reached the states although wd = 0"
        return None

    outcome = classify("non-finite weights", run, [])
    assert outcome == "accepted", f"{entry[0]}{entry[1]} {dtype} wd={wd} at {where}: {outcome}"


# -- hand-made trainer states (structure, not bytes), and another model's Trainer -----------------------------------

def _counts(opt: dict) -> list:
    return opt["update_counts"]


STATE_EDITS: dict[str, tuple[Callable[[dict, dict], None], list[str]]] = {
    # name -> (edit the unpacked states and optimizer state in place, what a clear refusal names)
    "counts for mirror 7 only": (lambda st_, opt: _counts(opt)[0].__setitem__(0, 7), ["mirrors [7]"]),
    "counts for mirrors 0 and 2": (lambda st_, opt: _counts(opt).append([2, _counts(opt)[0][1]]), ["mirrors [0, 2]"]),
    "counts for mirror 0 twice": (lambda st_, opt: _counts(opt).append(list(_counts(opt)[0])), ["mirror 0"]),
    "counts for index 99": (lambda st_, opt: _counts(opt)[0][1].append([99, 1]), ["[99]"]),
    "counts negative": (lambda st_, opt: _counts(opt)[0][1][0].__setitem__(1, -1), ["update counts"]),
    "states as float16": (lambda st_, opt: st_.__setitem__(0, tuple(a.astype(np.float16) for a in st_[0])),
                          ["float16"]),
    "states as float64": (lambda st_, opt: st_.__setitem__(0, tuple(a.astype(np.float64) for a in st_[0])),
                          ["float64"]),
    "a state of another shape": (lambda st_, opt: st_.__setitem__(0, tuple(a[:2] for a in st_[0])), ["shape"]),
    "a state array missing": (lambda st_, opt: st_.__setitem__(0, st_[0][:1]), ["structure"]),
    "a state of another parameter": (lambda st_, opt: st_.__setitem__(0, st_[1]), ["shape"]),
}


@pytest.mark.parametrize("edit", sorted(STATE_EDITS))
def test_fuzz_hand_made_trainer_states(saved, tmp_path, edit):
    from mxlite.optimizer.updater import pack_states, unpack_states

    folder, _, _, _ = saved
    states, optimizer_state, extra = unpack_states((folder / "plain.states").read_bytes())
    change, says = STATE_EDITS[edit]
    change(states, optimizer_state)
    path = tmp_path / "edited.states"
    path.write_bytes(pack_states(states, optimizer_state, extra))
    net, trainer = _model(seed=7)
    before = _values(net, trainer, str(tmp_path / "before.states"))

    def run() -> str | None:
        try:
            trainer.load_states(path)
        except ValueError:
            if _values(net, trainer, str(tmp_path / "after.states"))[1] != before[1]:
                return "a failed load changed the trainer"
            raise
        return "an edited states file loaded"

    outcome = classify("hand-made trainer states", run, says)
    assert outcome == "clear error", f"{edit}: {outcome}"


@pytest.mark.parametrize("call", ["save", "load"])
def test_fuzz_checkpoint_with_another_models_trainer(saved, tmp_path, call):
    folder, _, _, _ = saved
    net, _ = _model()
    _, other_trainer = _model(seed=3)

    def run() -> str | None:
        if call == "save":
            mx.checkpoint.save(tmp_path / "ckpt", net, other_trainer, step=1)
        else:
            mx.checkpoint.load(folder / "ckpt", net, other_trainer)
        return f"checkpoint.{call} accepted another model's Trainer"

    outcome = classify("checkpoint trainer", run, ["not net's", "'0.weight'"])
    assert outcome == "clear error", f"{call}: {outcome}"


# -- settings: every MXLITE_* variable -------------------------------------------------------------------------------

def _settings_probes() -> dict[str, tuple[Callable[[], Any], Callable[[str], Any]]]:
    """variable -> (read it as mxlite does, the documented meaning of a value: what the read must give, or
    _REFUSED when a ValueError naming the variable is the documented answer)."""
    import shutil

    from mxlite.comm import debug, faults
    from mxlite.device import _hostcuda, devices, kernels
    from mxlite.device._hostcuda import launch

    def flag(text: str) -> Any:
        value = text.strip().lower()
        return True if value in ("1", "true", "yes", "on") else False if value in ("", "0", "false", "no", "off") \
            else _REFUSED

    def seconds(text: str) -> Any:
        try:
            value = float(text)
        except ValueError:
            return None if not text.strip() else _REFUSED
        return _REFUSED if not value > 0 else None if math.isinf(value) else value

    def gpus(text: str) -> Any:
        try:
            value = int(text)
        except ValueError:
            return 0 if not text.strip() else _REFUSED
        return value if 0 <= value <= 16 else _REFUSED

    def mode(text: str) -> Any:
        value = text.strip().lower() or "auto"
        return value if value in ("auto", "compiled", "numpy") else _REFUSED

    def seed(text: str) -> Any:
        if not text.strip():
            return _hostcuda.DEFAULT_SEED
        try:
            value = int(text.strip(), 0)
        except ValueError:
            return _REFUSED
        return value if -(2**63) <= value < 2**64 else _REFUSED

    def compiler(text: str) -> Any:
        return shutil.which(text.strip() or "g++") or _REFUSED

    def cache(text: str) -> Any:
        return text.strip() or os.path.join(os.path.expanduser("~"), ".cache", "mxlite", "hostcuda")

    return {
        "MXLITE_DEBUG_COLLECTIVES": (debug.enabled, flag),
        "MXLITE_COLLECTIVE_TIMEOUT": (faults.collective_timeout, seconds),
        "MXLITE_EMULATE_GPUS": (devices._emulated_gpus, gpus),
        "MXLITE_CPU_KERNELS": (kernels._cpu_mode, mode),
        "MXLITE_HOSTCUDA_SEED": (launch._default_seed, seed),
        "MXLITE_HOSTCUDA_CXX": (_hostcuda.compiler, compiler),
        "MXLITE_HOSTCUDA_CACHE": (_hostcuda.cache_dir, cache),
    }


_REFUSED = object()
SETTING_VALUES = ["", "0", "1", "2", "true", "yes", "on", "off", " 1 ", "-1", "inf", "nan", "x", "TRUE", "Numpy",
                  "/no/such/path"]


@pytest.mark.parametrize("variable", ["MXLITE_DEBUG_COLLECTIVES", "MXLITE_COLLECTIVE_TIMEOUT", "MXLITE_EMULATE_GPUS",
                                      "MXLITE_CPU_KERNELS", "MXLITE_HOSTCUDA_SEED", "MXLITE_HOSTCUDA_CXX",
                                      "MXLITE_HOSTCUDA_CACHE"])
def test_fuzz_settings(monkeypatch, variable):
    read, meaning = _settings_probes()[variable]
    for value in SETTING_VALUES:
        monkeypatch.setenv(variable, value)
        expected = meaning(value)

        def run(expected: Any = expected, value: str = value) -> str | None:
            got = read()
            if expected is _REFUSED:
                return f"{variable}={value!r} was accepted as {got!r}"
            return None if got == expected else f"{variable}={value!r} read as {got!r}, documented {expected!r}"

        outcome = classify("settings", run, [variable])
        assert outcome in ("accepted", "clear error"), f"{variable}={value!r}: {outcome}"
        assert (outcome == "clear error") == (expected is _REFUSED), f"{variable}={value!r}: {outcome}"


def test_fuzz_outcome_counts():
    """Print the counts of every fuzz case run above (``-s`` shows them); 0 silent wrong, hangs, crashes, exit
    hangs, residues and refusals that allocated first."""
    totals = {k: v for k, v in sorted(COUNTS.items())}
    print("\nfuzz outcomes:", json.dumps(totals, indent=1))
    if os.environ.get("MXLITE_FUZZ_COUNTS"):
        with open(os.environ["MXLITE_FUZZ_COUNTS"], "w") as f:
            json.dump(totals, f, indent=1)
    assert all(COUNTS[k] == 0 for k in ("silent wrong", "hang", "crash", "exit hang", "residue", "resource",
                                        "disagreement")), totals
