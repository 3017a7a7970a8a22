"""The real NVRTC compiles every kernel variant mxlite may launch, each as a module of its own, as a GPU would.

On a GPU mxlite compiles a kernel variant the first time it is launched, alone (mxlite/device/kernels.py), so each
variant's module is what a first training step waits for. tests/nvrtc_sweep.py hands NVRTC exactly what CuPy would
(the source of ``kernel_source(file)``, CuPy's and mxlite's options, one name expression) for sm_90, the H100 and
H200, over ``os.cpu_count()`` worker processes of a fresh interpreter with the real CuPy (no emulation). Checked:
every registered variant compiles and its name resolves; each module holds its own variant and no other (explicit
instantiations back in a ``.cu`` file would put every variant into every module); and each module compiles within
the first-use budget. The per-module seconds are written as JSON (``$MXLITE_NVRTC_TIMES``, else a temporary file)
and printed as a table (``pytest -s``). Every variant (165 modules, about 90 CPU-seconds) under ``make
test-real-libs`` (``MXLITE_REAL_LIBS=required``) or with ``MXLITE_NVRTC_SWEEP=all``; elsewhere (CI) the first variant
of each kernel (43 modules, about 25 CPU-seconds): the other variants differ in their template types only, and
``nvcc --ptx`` compiles every one of them in tests/test_project.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from mxlite.cli.compile_kernels import registered_kernels
from tests import nvrtc_sweep
from tests.real_libs import probe, required

pytestmark = pytest.mark.real_libs

HERE = os.path.dirname(os.path.abspath(__file__))
SWEEP = os.path.join(HERE, "nvrtc_sweep.py")
TIMES_ENV = "MXLITE_NVRTC_TIMES"

# NVRTC CPU-seconds one module may take: what a first launch of any variant may wait (the slowest took 4.7 s on
# a 2-core AMD EPYC with NVRTC 13.5; optimizers.cu as one module of all its variants took 59 s).
FIRST_USE_BUDGET_S = 15.0
# The first step's modules of each kind: an Adam step, a convolution, a norm, a recurrent layer, compression.
FIRST_USE = ("adam_update<float>", "sgd_update<float>", "im2col<float>", "col2im<float>", "max_pool_forward<float>",
             "batch_norm_forward<float, float>", "batch_norm_backward<float, float>", "lstm_forward<float>",
             "lstm_backward<float>", "gru_forward<float>", "quantize_2bit<float>", "to_wire<float, f16_wire>")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every registered variant compiled alone by the real NVRTC: the sweep's JSON, its table and its wall time."""
    probe("nvrtc", "from cupy.cuda import compiler; print(compiler._get_nvrtc_version())")
    path = os.environ.get(TIMES_ENV) or str(tmp_path_factory.mktemp("nvrtc") / "nvrtc_times.json")
    env = {k: v for k, v in os.environ.items() if k != "MXLITE_EMULATE_GPUS"}  # the real CuPy
    proc = subprocess.run([sys.executable, SWEEP, "--json", path, *([] if _every_variant() else ["--sample"])],
                          capture_output=True, text=True, env=env, timeout=1800)
    print(proc.stdout, f"per-module seconds in {path}", sep="\n")
    if not os.path.exists(path):
        pytest.fail(f"the NVRTC sweep wrote no {path} (exit status {proc.returncode}): {proc.stderr[-3000:]}")
    with open(path) as f:
        data = json.load(f)
    return {"proc": proc, "meta": data["meta"], "modules": {r["names"][0]: r for r in data["modules"]}}


def _every_variant() -> bool:
    return required() or os.environ.get("MXLITE_NVRTC_SWEEP", "") == "all"


def test_every_registered_variant_compiles_alone_and_resolves(sweep):
    modules, names = sweep["modules"], registered_kernels()
    if not _every_variant():
        names = {f: nvrtc_sweep.sample(ns) for f, ns in names.items()}
    expected = {(f, n) for f, ns in names.items() for n in ns}
    assert {(r["file"], n) for n, r in modules.items()} == expected
    failed = {n: r["error"][-500:] for n, r in modules.items() if "error" in r}
    assert not failed, failed
    for name, r in modules.items():
        assert r["names"] == [name]
        assert list(r["mapping"]) == [name] and r["mapping"][name], f"{name} did not resolve: {r['mapping']}"
    assert sweep["proc"].returncode == 0, sweep["proc"].stderr[-3000:]
    assert f"NVRTC {sweep['meta']['nvrtc']}, sm_90" in sweep["proc"].stdout


def test_each_module_holds_its_own_variant_only(sweep):
    """The cubin of ``adam_update<float>`` has no ``sgd_update`` nor ``adam_update<__half>``: explicit
    instantiations in a ``.cu`` file would put every variant of the file into each of its modules. (A plain
    ``__global__`` function, not a template, is compiled into every module of its file: compression.cu's five and
    random.cu's ``philox_advance``.)"""
    modules = sweep["modules"]
    assert modules["adam_update<float>"]["foreign_variants"] == []
    assert "adam_update<__half>" not in modules or modules["adam_update<__half>"]["foreign_variants"] == []
    crowded = {n: [v for v in r["foreign_variants"] if "<" in v][:3] for n, r in modules.items()}
    assert not {n: v for n, v in crowded.items() if v}, "modules holding other template variants"
    for name, r in modules.items():
        assert all(modules[v]["file"] == r["file"] and "<" not in v for v in r["foreign_variants"]), name


def test_every_module_compiles_within_the_first_use_budget(sweep):
    """NVRTC's CPU-seconds per module (its wall time on an idle machine; CPU time does not grow when CI's cores
    are shared): a first launch of any variant, in particular the first Adam step, convolution, norm, recurrent
    layer and compression, waits at most FIRST_USE_BUDGET_S."""
    modules = sweep["modules"]
    for name in FIRST_USE:
        assert modules[name]["cpu_seconds"] <= FIRST_USE_BUDGET_S, (name, modules[name]["cpu_seconds"])
    slow = {n: round(r["cpu_seconds"], 1) for n, r in modules.items() if r["cpu_seconds"] > FIRST_USE_BUDGET_S}
    assert not slow, f"modules over the {FIRST_USE_BUDGET_S} s first-use budget: {slow}"
