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

On the emulated GPUs, an error the double raises where a real GPU would not raise counts as what the GPU would
do: a race or a use after free (wrong bytes, silently) as ``silent wrong``, collectives that would never meet as
``hang`` (:func:`_emulated_kind`). Cases across two MPI ranks run several to a job of
tests/fuzz_faults_worker.py (:func:`_run_rank_cases`) and are classified from every rank's record: also
``silent wrong`` when the ranks end with different parameters, ``crash`` when the job ended while a rank was
in the case and no rank said why.

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


# -- reads of the gradients between backward and step, while the overlapped all-reduce runs -----------------------
#
# Two emulated GPUs in one process, the Trainer's default overlap=True (each bucket summed while backward goes
# on); at a drawn step, after a drawn point, the gradients are read as users read them. Every read must give the
# summed gradients of a twin trained with overlap=False and trainer.allreduce_grads() (bit for bit), and the
# weights must stay the twin's. An error the emulated GPUs raise for a race (a read of a buffer the all-reduce
# still writes) is what a real GPU would return silently: counted silent wrong.

GRAD_READS = ["grad", "list_grad", "data_grad", "clip_fetched_before", "clip_fetched_after", "zero_grad", "norm"]
GRAD_READ_POINTS = ["right after backward", "after another parameter's read", "after an op on gpu(0)"]
_OVERLAP_BATCH = 4


def _expect(outcome: str, allowed: tuple[str, ...], case: str) -> None:
    """Fail the test unless ``outcome`` is one of ``allowed`` (the cases of the sections below)."""
    assert outcome in allowed, f"{case}: {outcome}"


def _emulated_kind(message: str) -> str | None:
    """The outcome a real GPU would give where the emulated one raised ``message``: a race or a use after free reads
    or writes wrong bytes silently ("silent wrong"), collectives that do not meet wait forever ("hang")."""
    if "would wait for a collective that never starts" in message or "mismatched NCCL collectives" in message:
        return "hang"
    if " race on " in message or "use after free" in message:
        return "silent wrong"
    return None


def _two_gpus() -> list[Any]:
    return [mx.gpu(0), mx.gpu(1)]


def _overlap_model(overlap: bool, bucket_bytes: int) -> tuple[Any, Any]:
    mx.random.seed(5)
    net = mx.nn.Sequential(mx.nn.Dense(8, in_units=6, activation="relu"), mx.nn.Dense(4, in_units=8))
    net.initialize(mx.init.Xavier(), device=_two_gpus())
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5}, bucket_bytes=bucket_bytes,
                         overlap=overlap)
    return net, trainer


def _overlap_backward(net: Any, step: int) -> None:
    x = np.random.default_rng(step).standard_normal((_OVERLAP_BATCH, 6)).astype(np.float32)
    with mx.autograd.record():
        losses = [(net(part) ** 2).sum() for part in mx.split_and_load(x, _two_gpus())]
    mx.autograd.backward(losses)


def _read_gradients(net: Any, read: str, which: int, device: int, fetched: list[Any], max_norm: float) -> list[Any]:
    """What one user's read of the gradients gives, as NumPy arrays (or one norm)."""
    params = list(net.collect_params().values())
    param, dev = params[which % len(params)], mx.gpu(device)
    if read == "grad":
        return [param.grad(dev).asnumpy()]
    if read == "list_grad":
        return [g.asnumpy() for g in param.list_grad()]
    if read == "data_grad":
        return [param.data(dev).grad.asnumpy()]
    if read in ("clip_fetched_before", "clip_fetched_after"):
        grads = fetched if read == "clip_fetched_before" else [p.grad(d) for p in params for d in _two_gpus()]
        norm = mx.gluon.utils.clip_global_norm(grads, max_norm)
        return [np.array(norm)] + [g.asnumpy() for g in grads]
    if read == "zero_grad":
        net.collect_params().zero_grad()
        return [g.asnumpy() for p in params for g in p.list_grad()]
    return [np.array(sum(float((p.grad(dev) ** 2).sum().asscalar()) for p in params))]  # "norm"


def _overlap_reads_case(read: str, point: str, at_step: int, steps: int, which: int, device: int,
                        bucket_bytes: int, max_norm: float) -> str | None:
    net, trainer = _overlap_model(True, bucket_bytes)
    twin, twin_trainer = _overlap_model(False, bucket_bytes)
    fetched = [p.grad(d) for p in net.collect_params().values() for d in _two_gpus()]
    twin_fetched = [p.grad(d) for p in twin.collect_params().values() for d in _two_gpus()]
    for step in range(steps):
        _overlap_backward(net, step)
        _overlap_backward(twin, step)
        twin_trainer.allreduce_grads()
        if step == at_step:
            if point == "after another parameter's read":
                list(net.collect_params().values())[(which + 1) % 4].grad(mx.gpu(1 - device)).asnumpy()
            elif point == "after an op on gpu(0)":
                (mx.nd.ones((3,), ctx=mx.gpu(0)) * 2).sum().asscalar()
            got = _read_gradients(net, read, which, device, fetched, max_norm)
            expected = _read_gradients(twin, read, which, device, twin_fetched, max_norm)
            if [g.tobytes() for g in got] != [e.tobytes() for e in expected]:
                return f"step {step}: {read} {point} read other values than the summed gradients"
        trainer.step(_OVERLAP_BATCH)
        twin_trainer.update(_OVERLAP_BATCH)
    for p, q in zip(net.collect_params().values(), twin.collect_params().values()):
        if [d.asnumpy().tobytes() for d in p.list_data()] != [d.asnumpy().tobytes() for d in q.list_data()]:
            return f"{p.label} differs from the twin's after {steps} steps"
    return None


def _classify_emulated(area: str, run: Callable[[], str | None], names: list[str]) -> str:
    """:func:`classify`, where an error the emulated GPUs raise in place of a real GPU's silent race or deadlock
    counts as that outcome (:func:`_emulated_kind`)."""

    def watched() -> str | None:
        try:
            return run()
        except Exception as exc:  # noqa: BLE001 - re-raised unless the emulation stood in for a silent fault
            kind = _emulated_kind(str(exc))
            if kind == "hang":
                raise _Hang(str(exc)) from exc
            if kind == "silent wrong":
                return f"the emulated GPU raised {type(exc).__name__}: {str(exc)[:300]}"
            raise

    return classify(area, watched, names)


@pytest.mark.gpu
@pytest.mark.requires_gpus(2)
@settings(max_examples=40, deadline=None, derandomize=True)
@given(read=st.sampled_from(GRAD_READS), point=st.sampled_from(GRAD_READ_POINTS), at_step=st.integers(0, 2),
       which=st.integers(0, 3), device=st.integers(0, 1), bucket_bytes=st.sampled_from([64, 256, 1 << 20]),
       max_norm=st.sampled_from([0.01, 1.0, 1e6]))
def test_fuzz_gradient_reads_during_overlapped_all_reduce(read, point, at_step, which, device, bucket_bytes,
                                                           max_norm):
    outcome = _classify_emulated(
        "gradient reads during overlap",
        lambda: _overlap_reads_case(read, point, at_step, at_step + 1, which, device, bucket_bytes, max_norm), [])
    _expect(outcome, ("accepted",), f"{read} {point} at step {at_step}, buckets of {bucket_bytes} B")


# -- ops on the second GPU while the first is the current device -------------------------------------------------
#
# A drawn op family with drawn operands (1-D and empty shapes included) runs on cpu(0) and on gpu(1) inside
# `with mx.gpu(0):`, forward and, when drawn, backward. Accepted: every result and gradient on gpu(1) and equal to
# the CPU's (and to NumPy's, for the products and linear algebra NumPy has); a clear error: the CPU refuses the
# same operands with the same error, which names the op or the argument. An error on the GPU alone (a temporary
# made on the current GPU instead of the operands') is unclear; values the CPU refuses but the GPU returns, or
# results on another device, are silent wrong.

def _uniform(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape)


def _spd_batch(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    """Symmetric positive definite matrices of ``shape`` (..., n, n), also when empty."""
    a = _uniform(seed, shape)
    return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])


def _without_gradient(result: Any) -> Any:
    """A result that has no gradient (a sign, indices, a mask), as float32: backward's heads are the float64 ones."""
    return result.astype("float32")


def _indexing_family(name: str, draw: Any) -> tuple[dict[str, np.ndarray], Callable[..., Any], Any]:
    """Operands (name -> array; floats get gradients), the op on Tensors, and NumPy's result as a function (None:
    no reference)."""
    def size(lo: int, hi: int) -> int:
        return draw(st.integers(lo, hi))

    seed = draw(st.integers(0, 99))
    if name == "take":
        n, m, k, mode = size(1, 3), size(0, 3), size(0, 3), draw(st.sampled_from(["clip", "wrap"]))
        ids = np.array([draw(st.integers(-n - 1, n + 1)) for _ in range(k)], np.float32)
        return {"x": _uniform(seed, (n, m)), "ids": ids}, lambda t: mx.nd.take(t["x"], t["ids"], mode=mode), None
    if name == "pick":
        n, m, mode = size(0, 3), size(1, 3), draw(st.sampled_from(["clip", "wrap"]))
        index = np.array([draw(st.integers(-1, m)) for _ in range(n)], np.float32)
        return ({"x": _uniform(seed, (n, m)), "index": index},
                lambda t: mx.nd.pick(t["x"], t["index"], axis=1, mode=mode), None)
    if name == "embedding":
        vocab, dim, rows, cols = size(1, 4), size(1, 3), size(0, 2), size(1, 3)
        ids = np.array([[draw(st.integers(0, vocab - 1)) for _ in range(cols)] for _ in range(rows)], np.float32)
        return ({"w": _uniform(seed, (vocab, dim)), "ids": ids.reshape(rows, cols)},
                lambda t: mx.nd.Embedding(t["ids"], t["w"], vocab, dim), None)
    if name == "sequence_mask":
        steps, batch, width, axis = size(1, 3), size(1, 3), size(0, 2), draw(st.sampled_from([0, 1]))
        lengths = np.array([draw(st.integers(0, steps)) for _ in range(batch)], np.float32)
        shape = (steps, batch, width) if axis == 0 else (batch, steps, width)
        value = draw(st.sampled_from([0.0, -3.0]))
        return ({"x": _uniform(seed, shape), "lengths": lengths},
                lambda t: mx.nd.SequenceMask(t["x"], t["lengths"], use_sequence_length=True, value=value, axis=axis),
                None)
    if name == "gather_nd":
        n, m, k = size(1, 3), size(1, 3), size(0, 3)
        idx = np.array([[draw(st.integers(0, n - 1)) for _ in range(k)], [draw(st.integers(0, m - 1))
                                                                           for _ in range(k)]], np.float32)
        x = _uniform(seed, (n, m))
        return {"x": x, "idx": idx.reshape(2, k)}, lambda t: mx.nd.gather_nd(t["x"], t["idx"]), None
    if name == "one_hot":
        depth, k = size(1, 4), size(0, 3)
        ids = np.array([draw(st.integers(-1, depth)) for _ in range(k)], np.float32)
        return {"ids": ids}, lambda t: mx.nd.one_hot(t["ids"], depth), None
    if name == "where":
        shape = tuple(draw(st.lists(st.integers(0, 3), min_size=1, max_size=2)))
        cond, x, y = _uniform(seed, shape), _uniform(seed + 1, shape), _uniform(seed + 2, shape)
        cond = cond.astype(np.float32)
        return ({"cond": cond, "x": x, "y": y}, lambda t: mx.np.where(t["cond"] > 0, t["x"], t["y"]),
                lambda: np.where(cond > 0, x, y))
    if name == "sort":
        shape, axis = (size(0, 3), size(0, 3)), draw(st.sampled_from([0, 1, -1]))
        ascend = draw(st.booleans())
        return ({"x": _uniform(seed, shape)},
                lambda t: [mx.nd.sort(t["x"], axis=axis, is_ascend=ascend), mx.nd.argsort(t["x"], axis=axis)], None)
    # topk
    n, m = size(0, 3), size(1, 3)
    k, kind = size(1, m), draw(st.sampled_from(["value", "indices", "mask", "both"]))

    def topk(t: dict[str, Any]) -> list[Any]:
        out = mx.nd.topk(t["x"], k=k, ret_typ=kind)
        return [out[0], _without_gradient(out[1])] if kind == "both" else [
            out if kind == "value" else _without_gradient(out)]

    return {"x": _uniform(seed, (n, m))}, topk, None


def _algebra_family(name: str, draw: Any) -> tuple[dict[str, np.ndarray], Callable[..., Any], Any]:
    """As :func:`_indexing_family`, for products (NumPy's 1-D rules) and linear algebra (square, possibly empty)."""
    seed = draw(st.integers(0, 99))
    if name == "matmul":
        k, n, m, b = (draw(st.integers(0, 3)) for _ in range(4))
        a_shape = draw(st.sampled_from([(k,), (n, k), (b, n, k)]))
        b_shape = draw(st.sampled_from([(k,), (k, m), (b, k, m)]))
        face = draw(st.sampled_from(["np.matmul", "@", "np.dot"]))
        a, c = _uniform(seed, a_shape), _uniform(seed + 1, b_shape)
        if face == "np.dot" and len(b_shape) == 3:
            c = _uniform(seed + 1, (k, m))  # np.dot contracts another axis of a 3-D right operand
        ops = {"np.matmul": (mx.np.matmul, np.matmul), "@": (lambda x, y: x @ y, np.matmul),
               "np.dot": (mx.np.dot, np.dot)}
        mine, numpy = ops[face]
        return {"a": a, "b": c}, lambda t: mine(t["a"], t["b"]), lambda: numpy(a, c)
    n, batch = draw(st.integers(0, 3)), draw(st.sampled_from([(), (2,), (0,)]))
    spd = _spd_batch(seed, batch + (n, n))
    if name == "inv":
        return {"a": spd}, lambda t: mx.np.linalg.inv(t["a"]), lambda: np.linalg.inv(spd)
    if name == "det":
        return {"a": spd}, lambda t: mx.np.linalg.det(t["a"]), lambda: np.linalg.det(spd)
    if name == "slogdet":
        return ({"a": spd}, lambda t: [mx.np.linalg.slogdet(t["a"])[1], _without_gradient(
            mx.np.linalg.slogdet(t["a"])[0])], lambda: list(np.linalg.slogdet(spd))[::-1])
    if name == "solve":
        rhs = _uniform(seed + 1, batch + (n, 2))
        return {"a": spd, "b": rhs}, lambda t: mx.np.linalg.solve(t["a"], t["b"]), lambda: np.linalg.solve(spd, rhs)
    if name == "cholesky":
        return {"a": spd}, lambda t: mx.np.linalg.cholesky(t["a"]), lambda: np.linalg.cholesky(spd)
    if name == "eigh":
        return {"a": spd}, lambda t: mx.np.linalg.eigh(t["a"])[0], lambda: np.linalg.eigh(spd)[0]
    rect = _uniform(seed, batch + (n, draw(st.integers(0, 3))))
    if name == "svd":
        return {"a": rect}, lambda t: mx.np.linalg.svd(t["a"])[1], lambda: np.linalg.svd(rect)[1]
    order = draw(st.sampled_from([None, "fro", 1, 2, np.inf]))
    return ({"a": rect}, lambda t: mx.np.linalg.norm(t["a"], ord=order, axis=(-2, -1)),
            lambda: np.linalg.norm(rect, ord=order, axis=(-2, -1)))


INDEXING_OPS = ["take", "pick", "embedding", "sequence_mask", "gather_nd", "one_hot", "where", "sort", "topk"]
ALGEBRA_OPS = ["matmul", "inv", "det", "slogdet", "solve", "cholesky", "eigh", "svd", "norm"]


def _op_results(device: Any, operands: dict[str, np.ndarray], op: Callable[..., Any], backward: bool,
                numpy_face: bool) -> list[Any]:
    """``op``'s results and, with ``backward``, its float operands' gradients (for a head gradient of ones);
    the operands are ``mx.np`` arrays with ``numpy_face``, else ``mx.nd`` arrays."""
    if numpy_face:
        tensors = {k: mx.np.array(v, dtype=v.dtype, device=device) for k, v in operands.items()}
    else:
        tensors = {k: mx.nd.array(v, dtype=v.dtype, ctx=device) for k, v in operands.items()}
    floats = [k for k, v in operands.items() if v.dtype == np.float64]
    if backward:
        for k in floats:
            tensors[k].attach_grad()
    with mx.autograd.record() if backward else contextlib.nullcontext():
        out = op(tensors)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    if backward:
        heads = [o for o in outs if o.dtype == np.float64]
        mx.autograd.backward(heads, [mx.nd.ones_like(h) for h in heads])
        outs += [tensors[k].grad for k in floats]
    return outs


def _second_gpu_values(outs: list[Any]) -> list[np.ndarray]:
    """The results as NumPy arrays, after checking each lives on gpu(1), its data included."""
    values = []
    for i, value in enumerate(outs):
        if value.device != mx.gpu(1) or value.array.device.id != 1:
            raise _WrongDevice(f"result {i} is on {value.device} (its data on GPU {value.array.device.id})")
        values.append(value.asnumpy())
    return values


class _WrongDevice(Exception):
    """A result (or gradient) of an op on gpu(1) that lives on another device."""


def _same_values(got: list[np.ndarray], expected: list[Any]) -> str | None:
    if len(got) != len(expected):
        return f"{len(got)} results, {len(expected)} expected"
    for i, (g, e) in enumerate(zip(got, expected)):
        e = np.asarray(e)
        if g.shape != e.shape or not np.allclose(g.astype(np.float64), e.astype(np.float64), rtol=1e-6, atol=1e-9):
            return f"result {i}: {g.dtype}{g.shape} {g.ravel()[:4]}, expected {e.dtype}{e.shape} {e.ravel()[:4]}"
    return None


class _Unexplained(Exception):
    """An error no argument explains (an op that fails on one device only, or refuses what NumPy accepts)."""


def _numpy_reference(numpy: Callable[[], Any] | None) -> tuple[list[Any] | None, Exception | None]:
    if numpy is None:
        return None, None
    try:
        reference = numpy()
    except ValueError as exc:  # np.linalg.LinAlgError too
        return None, exc
    return (reference if isinstance(reference, list) else [reference]), None


def _second_gpu_case(name: str, operands: dict[str, np.ndarray], op: Callable[..., Any],
                     numpy: Callable[[], Any] | None, backward: bool) -> str | None:
    numpy_face = name not in INDEXING_OPS or name == "where"
    reference, numpy_error = _numpy_reference(numpy)
    try:
        expected = [o.asnumpy() for o in _op_results(mx.cpu(0), operands, op, backward, numpy_face)]
        cpu_error = None
    except CLEAR_TYPES as exc:
        if reference is not None:
            raise _Unexplained(f"{name} refuses operands NumPy accepts: {exc}") from None
        expected, cpu_error = None, exc
    with mx.gpu(0):
        try:
            got = _second_gpu_values(_op_results(mx.gpu(1), operands, op, backward, numpy_face))
        except _WrongDevice as exc:
            return f"{name} on gpu(1): {exc}"
        except Exception as exc:
            if cpu_error is not None and type(exc) is type(cpu_error) and \
                    str(exc).replace("gpu(1)", "cpu(0)") == str(cpu_error):
                raise  # the operands' own refusal, as on the CPU: classified by its message
            raise _Unexplained(f"{name} fails on gpu(1) only: {type(exc).__name__}: {exc}") from None
        if mx.current_device() != mx.gpu(0):
            return f"{name} changed the current device to {mx.current_device()}"
    if cpu_error is not None:
        return f"{name} on gpu(1) accepted what the CPU refuses ({cpu_error})"
    if numpy_error is not None:
        return f"{name} gave a result where NumPy refuses the operands ({numpy_error})"
    if reference is not None:
        problem = _same_values(got[:len(reference)], reference)
        if problem:
            return f"{name}: {problem} (NumPy's)"
    problem = _same_values(got, expected)
    return f"{name} on gpu(1): {problem} (the CPU's)" if problem else None


def _random_on_second_gpu(kind: str, shape: tuple[int, ...]) -> str | None:
    dev = mx.gpu(1)
    with mx.gpu(0):
        draws = {"np.uniform": lambda: mx.np.random.uniform(-1, 2, size=shape, device=dev),
                 "np.normal": lambda: mx.np.random.normal(size=shape, device=dev),
                 "np.randint": lambda: mx.np.random.randint(0, 3, size=shape, device=dev),
                 "nd.uniform": lambda: mx.nd.random.uniform(-1, 2, shape=shape, ctx=dev),
                 "nd.normal": lambda: mx.nd.random.normal(0, 1, shape=shape, ctx=dev),
                 "shuffle": lambda: mx.random.shuffle(mx.np.arange(int(np.prod(shape)), device=dev))}
        try:
            value = _second_gpu_values([draws[kind]()])[0]
        except _WrongDevice as exc:
            return f"random {kind}: {exc}"
    if kind.endswith("uniform") and value.size and not (value.min() >= -1 and value.max() < 2):
        return f"random {kind} outside [-1, 2): {value}"
    if kind.endswith("randint") and not set(np.unique(value)) <= {0, 1, 2}:
        return f"random {kind} outside 0..2: {value}"
    if kind == "shuffle" and not np.array_equal(np.sort(value), np.arange(value.size)):
        return f"shuffle lost values: {value}"
    return None


@pytest.mark.gpu
@pytest.mark.requires_gpus(2)
@settings(max_examples=100, deadline=None, derandomize=True)
@given(name=st.sampled_from(INDEXING_OPS + ALGEBRA_OPS + ["random"]), backward=st.booleans(), data=st.data())
def test_fuzz_ops_on_the_second_gpu_under_the_first(name, backward, data):
    if name == "random":
        kind = data.draw(st.sampled_from(["np.uniform", "np.normal", "np.randint", "nd.uniform", "nd.normal",
                                          "shuffle"]))
        shape = tuple(data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=2)))
        outcome = _classify_emulated("ops on a second GPU", lambda: _random_on_second_gpu(kind, shape), [kind])
        _expect(outcome, ("accepted",), f"random {kind} {shape}")
        return
    family = _indexing_family if name in INDEXING_OPS else _algebra_family
    operands, op, numpy = family(name, data.draw)
    if name in ("one_hot", "eigh"):
        backward = False  # integer-valued; eigh has no gradient (as in MXNet: NotImplementedError says so)
    names = [f"{name}:", "shape", "axis", "ord=", "singular", "dimension"]
    outcome = _classify_emulated("ops on a second GPU",
                                 lambda: _second_gpu_case(name, operands, op, numpy, backward), names)
    shapes = {k: v.shape for k, v in operands.items()}
    _expect(outcome, ("accepted", "clear error"), f"{name} {shapes} backward={backward}")


# -- across ranks: captured steps, sharded states (two MPI processes, tests/fuzz_faults_worker.py) ----------------
#
# Hypothesis draws a batch of cases and one MPI job runs them in turn (each launch costs seconds); every rank records
# each case's outcome. A case is classified from the ranks' records: accepted when every rank trained to the
# expected bits (the captured step equal to eager, sharded training equal to unsharded, the same parameters on
# every rank); a clear error when each rank that raised names the difference and the ranks; an error the emulation
# raises where a GPU's collectives would never meet, or a job that does not end, is a hang. A case that ends the
# job (the documented answer to a hyper-parameter changed on one rank, or to a lone sharded save_states: the rank
# that finds it raises, and its uncaught error stops the others) is followed by a new job for the cases left.

FUZZ_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_faults_worker.py")
RANK_JOB_LIMIT_S = 120  # seconds for one job of cases, on a quiet machine (scaled by the load)
RANK_JOBS = 4  # jobs at most per test: one per case that ends the job, and a hang's


def _drawn(strategy: st.SearchStrategy, count: int) -> list[Any]:
    """Up to ``count`` examples of ``strategy``, the same on every run: cases for one child job to run together."""
    from hypothesis import Phase

    drawn: list[Any] = []

    @settings(max_examples=count, derandomize=True, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(case: Any) -> None:
        drawn.append(case)

    collect()
    return drawn


def _rank_job(surface: str, cases: list[tuple[int, dict]], folder: Any, env: dict[str, str],
              ) -> tuple[dict[int, list[dict | None]], int | None]:
    """Run ``cases`` in one MPI job: ({case index: [rank 0's record or None, rank 1's]}, the job's exit status or
    None when it ran past its deadline)."""
    import subprocess

    from tests.mpi_helpers import mpirun

    for name in ("rank0.jsonl", "rank1.jsonl"):
        (folder / name).unlink(missing_ok=True)
    (folder / "cases.json").write_text(json.dumps(cases))
    try:
        result = mpirun(2, FUZZ_WORKER, surface, str(folder / "cases.json"), str(folder), timeout=RANK_JOB_LIMIT_S,
                        **env)
        status: int | None = result.returncode
        (folder / "job.log").write_text(result.stdout + result.stderr)
    except subprocess.TimeoutExpired as exc:
        status = None
        (folder / "job.log").write_text(f"{exc.output or ''}{exc.stderr or ''}")
    records: dict[int, list[dict | None]] = {}
    for rank in range(2):
        path = folder / f"rank{rank}.jsonl"
        for line in path.read_text().splitlines() if path.exists() else []:
            entry = json.loads(line)
            records.setdefault(entry["case"], [None, None])[rank] = entry
    return records, status


def _ranks_outcome(records: list[dict | None], expected: list[str] | None, job_ended: bool,
                   same_on_every_rank: bool = True) -> str:
    """One case's outcome from the ranks' records (None: the rank never ended it), ``expected`` naming what a clear
    error must name (None: no difference, the case must train); ``job_ended``: the job ended in this case (not by
    its deadline); ``same_on_every_rank``: every rank must end with the same digest."""
    if not job_ended and None in records:
        return "hang"
    present = [r for r in records if r is not None]
    kinds = [_emulated_kind(r["message"]) for r in present if r["outcome"] == "raised"]
    if "hang" in kinds:
        return "hang"
    if "silent wrong" in kinds or any(r["outcome"] == "problem" for r in present):
        return "silent wrong"
    raised = [r for r in present if r["outcome"] == "raised"]
    if raised:
        return "clear error" if all(_names_the_difference(r, expected) for r in raised) else "unclear error"
    if None in records:
        return "crash"  # the job ended while a rank was in this case, and no rank said why
    if same_on_every_rank and len({r["digest"] for r in present}) > 1:
        return "silent wrong"  # the ranks trained (or saved) different values
    return "silent wrong" if expected is not None else "accepted"


def _names_the_difference(record: dict, expected: list[str] | None) -> bool:
    """Whether a rank's error is a clear one: of a documented type, short, naming the difference and both ranks."""
    text = record["message"]
    return (expected is not None and record["type"] in {t.__name__ for t in CLEAR_TYPES}
            and len(text) <= MESSAGE_LIMIT and any(n in text for n in expected) and "rank 0" in text
            and "rank 1" in text)


def _run_rank_cases(area: str, surface: str, cases: list[dict], expectations: list[list[str] | None], folder: Any,
                    env: dict[str, str], same_on_every_rank: Callable[[dict], bool]) -> dict[int, str]:
    """Run and classify every case (in as few jobs as it takes: a job goes on after the case that ended the last
    one); count each outcome under ``area``, and the cases left when :data:`RANK_JOBS` jobs were spent.
    ``same_on_every_rank(case)``: whether the ranks must end that case with the same digest."""
    from tests.fuzz_faults_worker import STOPPED

    outcomes: dict[int, str] = {}
    todo = list(enumerate(cases))
    for _ in range(RANK_JOBS):
        if not todo:
            break
        records, status = _rank_job(surface, todo, folder, env)
        left: list[tuple[int, dict]] = []
        for position, (index, case) in enumerate(todo):
            ranks = records.get(index, [None, None])
            alike = same_on_every_rank(case)
            if None not in ranks:
                outcomes[index] = _ranks_outcome(ranks, expectations[index], False, alike)
                continue
            if ranks == [None, None] and status == STOPPED:  # stopped after the previous case: run on
                left = todo[position:]
                break
            outcomes[index] = _ranks_outcome(ranks, expectations[index], status is not None, alike)
            left = todo[position + 1:]
            break
        todo = left
    for outcome in outcomes.values():
        COUNTS[outcome] += 1
        COUNTS[f"{area}: {outcome}"] += 1
    if len(outcomes) < len(cases):
        COUNTS[f"{area}: not run"] += len(cases) - len(outcomes)
    return outcomes


def _rank_case_report(cases: list[dict], outcomes: dict[int, str], folder: Any) -> str:
    """The cases that went wrong, one a line with its outcome, then the end of the last job's output."""
    wrong = [f"{outcomes.get(i, 'not run')}: {json.dumps(c)}" for i, c in enumerate(cases)
             if outcomes.get(i) not in ("accepted", "clear error")]
    log = folder / "job.log"
    return "\n".join(wrong) + "\nthe last job's output ends:\n" + (log.read_text()[-3000:] if log.exists() else "")


# captured steps: the hyper-parameters each optimizer starts with, and the values the events set
CAPTURED_HYPER = {"sgd": {"lr": 0.05, "momentum": 0.9, "wd": 0.0}, "adam": {"lr": 0.01, "beta1": 0.9, "wd": 0.0}}
HYPER_VALUES = {"lr": [0.05, 0.02, 0.01], "momentum": [0.9, 0.5], "beta1": [0.9, 0.8], "wd": [0.0, 1e-3]}
# The first step at which one rank's own batch size or graphs.clear() is fuzzed: any, since the ranks agree on the
# step at which their collectives join the captured step (a batch size from step 1: the first step's is agreed,
# a difference there is a clear error, see tests/test_rank_agreement.py).
EARLIEST_LONE_CAPTURE_EVENT = 0


@st.composite
def _captured_cases(draw: Any) -> dict[str, Any]:
    """A captured-step case: the optimizer and Trainer settings, and the events of each kind at drawn steps."""
    optimizer, steps = draw(st.sampled_from(sorted(CAPTURED_HYPER))), draw(st.integers(7, 10))

    def event(kind: str) -> dict[str, Any]:
        rank = draw(st.sampled_from([0, 1] if kind == "uneven" else [0, 1, "all"]))
        # a rank's own smaller batch or graphs.clear() from the first step the ranks agree on (see
        # test_an_uneven_batch_on_one_rank_before_the_ranks_first_agree for the steps before it)
        first = max(EARLIEST_LONE_CAPTURE_EVENT, int(kind == "uneven")) if kind != "hyper" and rank != "all" else 0
        out = {"kind": kind, "step": draw(st.integers(first, steps - 3)), "rank": rank}
        if kind == "uneven":
            out["batch"] = draw(st.integers(1, 5))
        elif kind == "hyper":
            name = draw(st.sampled_from(sorted(CAPTURED_HYPER[optimizer])))
            # on one rank, mostly its value as another type (no difference, unless float32 rounds it)
            same = rank != "all" and draw(st.integers(0, 2)) > 0
            out.update(name=name, value=CAPTURED_HYPER[optimizer][name] if same else draw(st.sampled_from(
                HYPER_VALUES[name])), type=draw(st.sampled_from(["float", "float32", "float64"])))
        return out

    kinds = ["uneven"] * draw(st.integers(0, 1)) + ["clear"] * draw(st.integers(0, 1)) + ["hyper"] * draw(
        st.integers(1, 2))
    return {"optimizer": optimizer, "steps": steps, "events": [event(kind) for kind in kinds],
            "overlap": draw(st.booleans()), "bucket_bytes": draw(st.sampled_from([256, 4096])),
            "agree_every": draw(st.sampled_from([3, 5, 100])),
            "batch_types": [draw(st.sampled_from(["int", "int64", "int32"])) for _ in range(2)]}


def _captured_expectation(case: dict[str, Any]) -> list[str] | None:
    """The names a clear error must give when the ranks' hyper-parameters differ at some step; None if they never do
    (a value equal on every rank, as Python numbers, is no difference, whatever its type)."""
    from tests.fuzz_faults_worker import NUMPY_TYPES

    values = [dict(CAPTURED_HYPER[case["optimizer"]]) for _ in range(2)]
    for step in range(case["steps"]):
        for event in case["events"]:
            if event["kind"] == "hyper" and event["step"] == step:
                for rank in (0, 1) if event["rank"] == "all" else (event["rank"],):
                    values[rank][event["name"]] = float(NUMPY_TYPES[event["type"]](event["value"]))
        differ = [f"'optimizer.{name}'" for name in values[0] if values[0][name] != values[1][name]]
        if differ:
            return differ
    return None


def _planned(cases: list[dict], expectations: list[list[str] | None], terminal: Callable[[Any], bool],
             ) -> tuple[list[dict], list[list[str] | None]]:
    """The cases to run: those that leave the job running first, then one that ends it (the last drawn)."""
    goes_on = [(c, e) for c, e in zip(cases, expectations) if not terminal(e)]
    ends = [(c, e) for c, e in zip(cases, expectations) if terminal(e)][-1:]
    return [c for c, _ in goes_on + ends], [e for _, e in goes_on + ends]


@pytest.mark.mpi
@pytest.mark.gpu
def test_fuzz_captured_steps_across_ranks(tmp_path):
    from tests.mpi_helpers import MPIEXEC

    if MPIEXEC is None:
        pytest.skip("needs mpi4py and its MPI's mpiexec")
    if not mx.device.devices._emulated_gpus():
        pytest.skip("sets one emulated GPU per rank")
    drawn = _drawn(_captured_cases(), 14)
    cases, expectations = _planned(drawn, [_captured_expectation(c) for c in drawn], lambda e: e is not None)
    # Every step divides the summed gradient by the first step's batch size (MXNet's store keeps that factor): after
    # an uneven batch on one rank the ranks' weights stay alike.
    outcomes = _run_rank_cases("captured steps across ranks", "captured", cases, expectations, tmp_path,
                               {"MXLITE_EMULATE_GPUS": "1"}, lambda case: True)
    assert all(outcomes.get(i) in ("accepted", "clear error") for i in range(len(cases))), \
        _rank_case_report(cases, outcomes, tmp_path)
    assert any(e is not None for e in expectations) and any(e is None for e in expectations), expectations


@pytest.mark.mpi
@pytest.mark.gpu
@pytest.mark.parametrize("event", [{"kind": "uneven", "step": 1, "rank": 0, "batch": 4},
                                   {"kind": "clear", "step": 2, "rank": 0}], ids=["uneven", "clear"])
def test_an_uneven_batch_on_one_rank_before_the_ranks_first_agree(tmp_path, event):
    """A smaller batch at step 1 (or ``graphs.clear()`` at step 2) on one rank: that rank captures its blocks a step
    after the other. The ranks agree on the step at which their all-reduces join the captured step, so neither
    starts the step's agreement (an all-gather) while the other still sums its gradients eagerly (an all-reduce):
    on a GPU the two collectives would not pair (the emulation raises instead of hanging)."""
    from tests.mpi_helpers import MPIEXEC

    if MPIEXEC is None:
        pytest.skip("needs mpi4py and its MPI's mpiexec")
    if not mx.device.devices._emulated_gpus():
        pytest.skip("sets one emulated GPU per rank")
    case = {"optimizer": "sgd", "steps": 5, "events": [event],
            "overlap": True, "bucket_bytes": 4096, "agree_every": 100, "batch_types": ["int", "int"]}
    records, status = _rank_job("captured", [(0, case)], tmp_path, {"MXLITE_EMULATE_GPUS": "1"})
    ranks = records.get(0, [None, None])
    assert _ranks_outcome(ranks, None, status is not None, same_on_every_rank=False) == "accepted", ranks


# sharded states: each rank's Trainer settings, which may differ
SHARDED_OPTIMIZERS = ["sgd", "adam", "adamw"]
PARAMETER_EDITS = [("grad_req", "null"), ("grad_req", "add"), ("lr_mult", 2.0), ("wd_mult", 0.0)]
_BN_LABELS = ["0.weight", "0.bias", "1.gamma", "1.beta", "1.running_mean", "1.running_var", "2.weight", "2.bias"]


@st.composite
def _sharded_cases(draw: Any) -> dict[str, Any]:
    """A BatchNorm model trained sharded beside an unsharded twin, or each rank's Trainer settings (the second
    rank's drawn anew, field by field, one time in three) and who calls save_states."""
    devices = draw(st.integers(1, 2))
    if draw(st.integers(0, 3)) == 0:
        return {"kind": "bn", "devices": devices, "optimizer": draw(st.sampled_from(SHARDED_OPTIMIZERS)),
                "steps": draw(st.integers(1, 3))}

    def field(name: str) -> Any:
        return {"shard": st.booleans(), "optimizer": st.sampled_from(SHARDED_OPTIMIZERS),
                "lr": st.sampled_from([0.01, 0.02]), "lr_type": st.sampled_from(["float", "float32", "float64"]),
                "edit": st.one_of(st.none(), st.tuples(st.integers(0, 7), st.sampled_from(PARAMETER_EDITS)).map(
                    lambda e: [e[0], *e[1]]))}[name]

    first = {name: draw(field(name)) for name in ("shard", "optimizer", "lr", "lr_type", "edit")}
    second = {name: draw(field(name)) if draw(st.integers(0, 2)) == 0 else value for name, value in first.items()}
    return {"kind": "settings", "devices": devices, "ranks": [first, second],
            "save": draw(st.sampled_from([None, "rank0", "all"]))}


def _parameter_description(edit: list | None) -> dict[str, tuple]:
    """Each parameter's (grad_req, lr_mult, wd_mult) after a rank's ``edit`` (what the Trainer compares)."""
    described = {label: ("null" if "running" in label else "write", 1.0, 1.0) for label in _BN_LABELS}
    if edit is not None:
        index, attribute, value = edit
        grad_req, lr_mult, wd_mult = described[_BN_LABELS[index]]
        described[_BN_LABELS[index]] = {"grad_req": (value, lr_mult, wd_mult), "lr_mult": (grad_req, value, wd_mult),
                                        "wd_mult": (grad_req, lr_mult, value)}[attribute]
    return described


def _sharded_expectation(case: dict[str, Any]) -> list[str] | None:
    """What a clear error must name: a setting that differs across ranks, else a lone sharded save_states; None
    where the case must train (and save) alike on every rank."""
    from tests.fuzz_faults_worker import NUMPY_TYPES

    if case["kind"] == "bn":
        return None
    first, second = case["ranks"]
    names = [f"'{name}'" for name, key in (("shard_optimizer_states", "shard"), ("optimizer", "optimizer"))
             if first[key] != second[key]]
    if float(NUMPY_TYPES[first["lr_type"]](first["lr"])) != float(NUMPY_TYPES[second["lr_type"]](second["lr"])):
        names.append("'optimizer.lr'")
    described = [_parameter_description(r["edit"]) for r in (first, second)]
    names += [f"'{label}'" for label in _BN_LABELS if described[0][label] != described[1][label]]
    if not names and first["shard"] and case["save"] == "rank0":
        return ["Trainer.save_states is a collective call"]
    return names or None


@pytest.mark.mpi
def test_fuzz_sharded_states_across_ranks_that_disagree(tmp_path):
    from tests.mpi_helpers import MPIEXEC

    if MPIEXEC is None:
        pytest.skip("needs mpi4py and its MPI's mpiexec")
    drawn = _drawn(_sharded_cases(), 16)
    cases, expectations = _planned(drawn, [_sharded_expectation(c) for c in drawn],
                                   lambda e: e == ["Trainer.save_states is a collective call"])
    outcomes = _run_rank_cases("sharded states across ranks", "sharded", cases, expectations, tmp_path, {},
                               lambda case: True)
    assert all(outcomes.get(i) in ("accepted", "clear error") for i in range(len(cases))), \
        _rank_case_report(cases, outcomes, tmp_path)
    kinds = {"bn" if c["kind"] == "bn" else "differ" if e else "alike" for c, e in zip(cases, expectations)}
    assert kinds == {"bn", "differ", "alike"} and expectations[-1] == ["Trainer.save_states is a collective call"]


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
