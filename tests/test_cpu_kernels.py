"""CPU devices run the fused optimizer kernels compiled for the host: the same results as the NumPy twins.

``kernels/optimizers.cu`` built by g++ with one thread per block (the serial build of
``mxlite.device._hostcuda``) is what a CPU device's :class:`~mxlite.optimizer._arena.ArenaUpdater` runs by
default. Every elementwise rule must give the NumPy twin's weights and states bit for bit (same
float32 operations in the same order, vectorised), in float32 and in float16 with and without
float32 master weights, with NaN and infinite gradients and weights too; LAMB and LARS too, whose twins
sum the norms in the serial kernel's order (``_fused.serial_norm``). This is the propagation rule of
docs/design.md: R1, a term a zero hyperparameter switches off is absent (``wd = 0``: the weight never
enters the gradient, the states or a trust ratio), and R2, both CPU modes give the same bits. Then the
``MXLITE_CPU_KERNELS`` switch: ``numpy`` never builds, ``compiled`` raises when it cannot build,
``auto`` falls back to the twins with one warning.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mxlite as mx
from mxlite.device import _hostcuda
from mxlite.device import kernels as _kernels
from mxlite.optimizer import _fused
from mxlite.optimizer._arena import ArenaUpdater
from mxlite.store import Arena
from tests.test_fused_chunks import _flat, make_updater
from tests.test_fused_rules import FUSED
from tests.test_optimizer_rules_a import _rule_id

SHAPES = [(5, 13), (1,), (40,), (3, 3, 3), (70001,)]  # the last one spans two blocks of CHUNK elements
# Where special weights go (slot, flat positions of inf, -inf, NaN): slots 1 and 3 stay finite, so a
# norm rule's other parameters show that one parameter's infinity stays in that parameter.
SPECIAL_WEIGHTS = {0: (3, 17, 64), 2: (0, 1, 39), 4: (5, 65536, 70000)}
# Rules whose states never read the weight with wd = 0 (R1): FTRL's z and LARS's trust ratio read it by definition.
STATES_FREE_OF_W = {"sgd", "nag", "adam", "adamw", "nadam", "adabelief", "rmsprop", "adagrad", "adadelta", "signum",
                    "lamb"}


def _run(name, kwargs, dtype, mode, monkeypatch, *, setting="full", multi_precision=False, special=False, steps=4,
         special_weights=False, rule_states=False):
    """``steps`` fused updates over one arena with ``MXLITE_CPU_KERNELS=mode``: (weights, flat states).

    ``special``: NaN and infinite gradients; ``special_weights``: inf, -inf and NaN weights
    (:data:`SPECIAL_WEIGHTS`); ``rule_states``: the states without the float32 master weights.
    """
    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, mode)
    rng = np.random.default_rng(7)
    updater, slots = make_updater(name, kwargs, setting, dtype, SHAPES, rng, multi_precision)
    if special_weights:
        for s, where in SPECIAL_WEIGHTS.items():
            slots[s].data._data.reshape(-1)[list(where)] = [np.inf, -np.inf, np.nan]  # masters copy them
    entries = list(enumerate(slots))
    for _ in range(steps):
        for slot in slots:
            g = rng.normal(size=slot.shape)
            if special:  # a NaN, infinities and a huge value in every gradient
                flat = g.reshape(-1)
                flat[rng.integers(0, flat.size, 4)] = [np.nan, np.inf, -np.inf, 1e30]
            slot.grad._data[...] = g
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's invalid-value warnings of the twin
            updater.step(entries)
    states = []
    for slot in slots:
        state = updater.get_state(slot)
        states += _flat(state.state if rule_states and hasattr(state, "master") else state)
    return [s.data._data.copy() for s in slots], states


DTYPES = {"float32": (np.float32, False), "float16-master": (np.float16, True), "float16": (np.float16, False)}


def _bits(a: np.ndarray) -> np.ndarray:
    """The bits of a float array, every NaN made one NaN (a NaN's payload is not part of the rule, its place is)."""
    a = np.asarray(a)
    return np.where(np.isnan(a), np.array(np.nan, a.dtype), a).view(f"u{a.dtype.itemsize}")


@pytest.mark.parametrize("setting", ["plain", "full"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("entry", FUSED, ids=[_rule_id(e) for e in FUSED])
def test_compiled_cpu_update_is_bit_identical_to_the_twin(entry, dtype, setting, monkeypatch):
    name, kwargs, _ = entry
    np_dtype, mp = DTYPES[dtype]
    compiled = _run(name, kwargs, np_dtype, "compiled", monkeypatch, setting=setting, multi_precision=mp)
    twin = _run(name, kwargs, np_dtype, "numpy", monkeypatch, setting=setting, multi_precision=mp)
    moved = False
    for a, b in zip(compiled[0], twin[0], strict=True):
        assert a.tobytes() == b.tobytes()
    for a, b in zip(compiled[1], twin[1], strict=True):
        assert a.tobytes() == b.tobytes()
    moved = any(np.any(a != 0) for a in compiled[1]) or moved
    assert moved or not compiled[1], "the states should have moved"


@pytest.mark.parametrize("entry", FUSED, ids=[_rule_id(e) for e in FUSED])
def test_compiled_cpu_update_keeps_nan_and_inf_as_the_twin(entry, monkeypatch):
    """NaN-keeping clamps and signs, written as selects for the vectorised loop, give the twin's values."""
    name, kwargs, _ = entry
    compiled = _run(name, kwargs, np.float32, "compiled", monkeypatch, special=True, steps=2)
    twin = _run(name, kwargs, np.float32, "numpy", monkeypatch, special=True, steps=2)
    for a, b in zip(compiled[0] + compiled[1], twin[0] + twin[1], strict=True):
        np.testing.assert_array_equal(a, b)  # NaN where the twin has NaN, equal elsewhere
    assert any(np.isnan(a).any() for a in compiled[0]), "the NaN gradients should reach some weight"


@pytest.mark.parametrize("setting", ["plain", "full"], ids=["wd0", "wd>0"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("entry", FUSED, ids=[_rule_id(e) for e in FUSED])
def test_compiled_cpu_update_follows_the_twin_on_infinite_and_nan_weights(entry, dtype, setting, monkeypatch):
    """R1 and R2 over inf, -inf and NaN weights: both CPU modes give the same bits (weights, masters, states),
    and with wd = 0 the states of rules that read no weight stay finite and an infinity stays itself."""
    name, kwargs, _ = entry
    np_dtype, mp = DTYPES[dtype]
    runs = {mode: _run(name, kwargs, np_dtype, mode, monkeypatch, setting=setting, multi_precision=mp, steps=2,
                       special_weights=True) for mode in ("compiled", "numpy")}
    for a, b in zip(runs["compiled"][0] + runs["compiled"][1], runs["numpy"][0] + runs["numpy"][1], strict=True):
        np.testing.assert_array_equal(_bits(a), _bits(b))
    if setting == "plain" and name.lower() in STATES_FREE_OF_W:  # wd = 0: the weight enters no state
        _, states = _run(name, kwargs, np_dtype, "compiled", monkeypatch, setting=setting, multi_precision=mp,
                         steps=2, special_weights=True, rule_states=True)
        assert all(np.isfinite(s).all() for s in states), "a state read a non-finite weight although wd = 0"
        if name.lower() != "lamb" and "clip_weights" not in kwargs:  # w - lr*finite: the infinity stays
            w = runs["compiled"][0][0].reshape(-1)
            assert (w[3], w[17]) == (np.inf, -np.inf) and np.isnan(w[64])


# -- the switch -------------------------------------------------------------------------------------
@pytest.fixture
def fresh_build_state():
    """Forget which builds were tried (they are cached per process), before and after the test."""
    caches = (_kernels._host_build_failure, _kernels._host_module, _kernels._warn_twins_once)
    for c in caches:
        c.cache_clear()
    yield
    for c in caches:
        c.cache_clear()


def _one_adam_step(monkeypatch, mode):
    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, mode)
    arena = Arena(mx.cpu(0), np.float32)
    slot = arena.add(0, (10,))
    slot.data._data[...] = 1.0
    slot.grad._data[...] = 0.5
    ArenaUpdater(mx.optimizer.create("adam", learning_rate=0.1), arena, 0).step([(0, slot)])
    return slot.data._data.copy()


def test_numpy_mode_never_builds(monkeypatch, fresh_build_state):
    def no_build(*args, **kwargs):
        raise AssertionError("MXLITE_CPU_KERNELS=numpy must not build the host kernels")

    monkeypatch.setattr(_kernels, "_host_module", no_build)
    w = _one_adam_step(monkeypatch, "numpy")
    np.testing.assert_allclose(w, 0.9, rtol=1e-6)  # Adam's first step moves by lr


def test_compiled_mode_raises_when_it_cannot_build(monkeypatch, fresh_build_state):
    monkeypatch.setenv("MXLITE_HOSTCUDA_CXX", "no-such-compiler-here")
    with pytest.raises(_hostcuda.HostCudaSetupError, match="no-such-compiler-here"):
        _one_adam_step(monkeypatch, "compiled")


def test_auto_mode_falls_back_to_the_twins_with_one_warning(monkeypatch, fresh_build_state):
    monkeypatch.setenv("MXLITE_HOSTCUDA_CXX", "no-such-compiler-here")
    with pytest.warns(RuntimeWarning, match="NumPy twins.*no-such-compiler-here"):
        w = _one_adam_step(monkeypatch, "auto")
    np.testing.assert_allclose(w, 0.9, rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process, not once per step
        _one_adam_step(monkeypatch, "auto")


@pytest.mark.parametrize("failure, expected", [
    (_hostcuda.HostCudaBuildError("g++ failed to compile optimizers.cu for the host (hostcuda):\n"
                                  "optimizers.cu:12:3: note: in expansion of macro\n"
                                  "optimizers.cu:12:5: error: 'x' was not declared in this scope\n"
                                  "optimizers.cu:13:1: error: a later error"),
     r"g\+\+ failed to compile optimizers.cu for the host \(hostcuda\): optimizers.cu:12:5: error: 'x' was not "
     r"declared in this scope\. MXLITE_CPU_KERNELS=compiled raises the whole error;"),
    (_hostcuda.HostCudaError("cannot build optimizers.cu in the host build cache /x: [Errno 13] Permission denied"),
     r"host build cache /x: \[Errno 13\] Permission denied\. MXLITE_CPU_KERNELS=compiled raises the whole error;"),
    (_hostcuda.HostCudaSetupError("the host CUDA build needs the C++ compiler 'g++'"),
     r"needs the C\+\+ compiler 'g\+\+'\. The compiled kernels need g\+\+ and pip install 'mxlite\[cpu\]';"),
    (OSError(), r"slower\): OSError\. MXLITE_CPU_KERNELS=compiled raises the whole error;"),
], ids=["build-error", "cache", "setup", "no-message"])
def test_auto_mode_warning_says_why_the_build_failed(failure, expected, monkeypatch, fresh_build_state):
    """The fallback warning names the build's own error (g++'s first error, not just "g++ failed"), and
    suggests g++ and the cpu extra only when one of them is what is missing."""
    class Broken:
        def compile(self):
            raise failure

    monkeypatch.setattr(_kernels, "_host_module", lambda *args: Broken())
    with pytest.warns(RuntimeWarning, match=expected):
        w = _one_adam_step(monkeypatch, "auto")
    np.testing.assert_allclose(w, 0.9, rtol=1e-6)
    with pytest.raises(type(failure)):
        _one_adam_step(monkeypatch, "compiled")


def test_bad_mode_is_named(monkeypatch):
    with pytest.raises(ValueError, match="MXLITE_CPU_KERNELS must be one of auto, compiled, numpy, got 'fast'"):
        _one_adam_step(monkeypatch, "fast")


def test_cpu_launches_use_one_thread_per_block(monkeypatch):
    """The CPU Launcher runs the kernel as the host build requires: block 1, one block per chunk."""
    calls = []
    real = _kernels.get_kernel

    def spy(filename, name, device, all_names):
        kernel = real(filename, name, device, all_names)

        def launch(grid, block, args, *rest, **kw):
            calls.append((name, grid, block))
            return kernel(grid, block, args, *rest, **kw)
        return launch

    monkeypatch.setattr(_kernels, "get_kernel", spy)  # what every KernelFile launches through
    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, "compiled")
    arena = Arena(mx.cpu(0), np.float32)
    slots = [arena.add(0, (_fused.CHUNK + 5,)), arena.add(1, (3,))]
    ArenaUpdater(mx.optimizer.create("lamb"), arena, 0).step(list(enumerate(slots)))
    assert calls == [("lamb_phase1<float>", (3,), (1,)), ("lamb_phase2<float>", (3,), (1,))]


def test_info_says_how_cpu_devices_update(monkeypatch, capsys):
    from mxlite import cli

    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, "auto")
    cli.info()
    assert "CPU optimizer update: compiled kernels (serial host build by" in capsys.readouterr().out
    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, "numpy")
    assert _kernels.cpu_kernels_status() == "NumPy twins (MXLITE_CPU_KERNELS=numpy)"
    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, "auto")
    monkeypatch.setenv("MXLITE_HOSTCUDA_CXX", "no-such-compiler-here")
    assert _kernels.cpu_kernels_status().startswith("NumPy twins: the host CUDA build needs the C++ compiler")
    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, "compiled")
    assert _kernels.cpu_kernels_status().startswith("unavailable (MXLITE_CPU_KERNELS=compiled)")


@pytest.mark.parametrize("mode", ["compiled", "numpy"])
def test_empty_parameters_first_or_alone_in_an_arena(monkeypatch, mode):
    """A zero-size parameter as an arena's first (or only) slot gets views and survives a fused step."""
    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, mode)
    arena = Arena(mx.cpu(0), np.float32)
    empty = arena.add(0, (0, 4))
    assert empty.data._data.shape == (0, 4) and empty.grad._data.shape == (0, 4)
    updater = ArenaUpdater(mx.optimizer.create("adam", learning_rate=0.1), arena, 0)
    updater.step([(0, empty)])  # an arena holding only an empty parameter
    full = arena.add(1, (3,))
    full.data._data[...] = 1.0
    full.grad._data[...] = 0.5
    updater.step([(0, empty), (1, full)])
    np.testing.assert_allclose(full.data._data, 0.9, rtol=1e-6)
