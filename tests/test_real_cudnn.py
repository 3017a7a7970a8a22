"""mxlite's cuDNN graphs built against NVIDIA's frontend and libcudnn, without a GPU.

NVIDIA's cuDNN frontend (``nvidia-cudnn-frontend``) lowers a declared graph to libcudnn's backend at
``validate`` and ``build_operation_graph``; with a described device (``cudnn.create_device_properties`` from its
JSON form: the deviceless ahead-of-time path) neither needs a GPU. So every graph mxlite declares
(:mod:`mxlite.device.cudnn`: convolution forward, data and weight gradients, batch norm training and inference
forward and backward, in float32, float16 and bfloat16, 1-D to 3-D) is declared here by mxlite's own code and run
through the real stages up to the first one that needs a GPU. The emulated frontend must accept those graphs and
refuse every declaration the real one refuses (the batch norm without running statistics mxlite once declared
among them), and the host scalars go to ``execute`` in a form the real frontend reads.

libcudnn's engine library links the NVIDIA driver (``libcuda.so.1``), which a machine without a GPU lacks: the
checks run in a child process with a stand-in driver library on ``LD_LIBRARY_PATH`` (built here from
:data:`DRIVER_STUB`: a handful of entry points that all answer "no device"). Needs the ``real-libs`` extra
(``make test-real-libs``); skipped without it, except under ``MXLITE_REAL_LIBS=required``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from tests import real_libs

pytestmark = pytest.mark.real_libs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The symbols libcudnn_engines_runtime_compiled.so.9 (9.28) imports from the driver, plus the two the CUDA
# runtime asks first; each reports CUDA_ERROR_NO_DEVICE (100), so anything that needs a GPU fails as without one.
DRIVER_STUB = r"""
#define NO_DEVICE 100
int cuInit(unsigned flags) { return NO_DEVICE; }
int cuDriverGetVersion(int *version) { if (version) *version = 13000; return 0; }
int cuGetErrorString(int error, const char **text) { if (text) *text = "no CUDA device (driver stand-in)"; return 0; }
int cuModuleGetFunction(void) { return NO_DEVICE; }
int cuModuleLoadData(void) { return NO_DEVICE; }
int cuModuleUnload(void) { return NO_DEVICE; }
int cuTensorMapEncodeIm2col(void) { return NO_DEVICE; }
int cuTensorMapEncodeTiled(void) { return NO_DEVICE; }
"""

# An H100 SXM as libcudnn describes a device (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION): what the deviceless path
# plans for instead of querying a GPU.
H100 = {"maxGridSize": [2147483647, 65535, 65535], "maxBlockSize": [1024, 1024, 64], "regsPerBlock": 65536,
        "multiProcessorCount": 132, "smCountOrigin": 0, "warpSize": 32, "maxSharedMemoryPerBlock": 49152,
        "maxSharedMemoryPerBlockOptin": 232448, "oversizedSharedMemoryPerBlock": 0,
        "reservedSharedMemoryPerBlock": 1024, "maxRegistersPerSM": 65536, "maxCtasPerSM": 32,
        "maxThreadsPerBlock": 1024, "maxThreadsPerSM": 2048, "pciDeviceId": 0, "isTccDriver": 0,
        "supportCoopLaunch": 1, "smClockRateKHz": 1980000, "memClockRateKHz": 2619000, "memoryBusWidth": 5120,
        "l2CacheSize": 52428800, "deviceName": "NVIDIA H100 80GB HBM3", "deviceVer": 900, "driverVer": 13000,
        "cudaDeviceId": 0, "totalGlobalMem": 85520809984}

# The stages that need no GPU: every graph must pass them on the real frontend.
DEVICELESS = ("validate", "build_operation_graph")


# -- the graphs mxlite declares ---------------------------------------------------------------------------------
def _conv_out(x: tuple[int, ...], w: tuple[int, ...], pad: tuple[int, ...], stride: tuple[int, ...],
              dilation: tuple[int, ...]) -> tuple[int, ...]:
    return (x[0], w[0]) + tuple((s + 2 * p - (k - 1) * d - 1) // t + 1
                                for s, k, p, t, d in zip(x[2:], w[2:], pad, stride, dilation))


# (x, w, pad, stride, dilation): 1-D, 2-D with groups, asymmetric geometry, 3-D, 1x1 (tests/test_cudnn.py's cases)
CONVOLUTIONS = [
    ((2, 3, 11), (4, 3, 3), (1,), (2,), (2,)),
    ((2, 4, 7, 7), (6, 2, 3, 3), (1, 1), (2, 2), (1, 1)),
    ((2, 3, 9, 8), (5, 3, 3, 2), (2, 0), (1, 2), (2, 1)),
    ((1, 2, 5, 5, 4), (3, 2, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    ((2, 4, 6, 6), (4, 4, 1, 1), (0, 0), (1, 1), (1, 1)),
]
# (outer, C, inner): a 4-D image's (N, C, H*W), and a (N, C) batch of vectors
BATCH_NORMS = [(4, 3, 30), (8, 16, 1)]
DTYPES = ("float32", "float16", "bfloat16")


def mxlite_signatures() -> list[tuple[Any, ...]]:
    """Every graph signature the cases above make mxlite build, through mxlite's own key functions."""
    from mxlite.device import cudnn as dc  # noqa: PLC0415 - imported where the real or emulated cuDNN is chosen

    keys = []
    for dtype in DTYPES:
        for x, w, pad, stride, dilation in CONVOLUTIONS:
            y = _conv_out(x, w, pad, stride, dilation)
            keys += [dc._conv_key(op, x, w, y, dtype, pad, stride, dilation)
                     for op in ("conv_fprop", "conv_dgrad", "conv_wgrad")]
        for shape3 in BATCH_NORMS:
            keys += [dc._bn_key(op, shape3, dtype, 1e-3)
                     for op in ("batchnorm", "batchnorm_inference", "batchnorm_backward")]
    return keys


# -- declarations the real frontend refuses -------------------------------------------------------------------------
def _tensor(fe: Any, g: Any, name: str, dims: tuple[int, ...], dtype: Any = None, by_value: bool = False) -> Any:
    from mxlite.device.cudnn import _strides  # noqa: PLC0415

    return g.tensor(name=name, dim=list(dims), stride=_strides(dims), data_type=dtype or fe.data_type.FLOAT,
                    is_pass_by_value=by_value)


def _outputs(fe: Any, *tensors: Any) -> None:
    for t in tensors:
        if t is not None:
            t.set_output(True).set_data_type(fe.data_type.FLOAT)


def _batchnorm_without_running_statistics(fe: Any, g: Any) -> None:
    """The training batch norm mxlite declared before: no running statistics, no momentum."""
    _outputs(fe, *g.batchnorm(input=_tensor(fe, g, "x", (4, 3, 30, 1)), scale=_tensor(fe, g, "s", (1, 3, 1, 1)),
                              bias=_tensor(fe, g, "b", (1, 3, 1, 1)), in_running_mean=None, in_running_var=None,
                              epsilon=_tensor(fe, g, "eps", (1, 1, 1, 1), by_value=True), momentum=None))


def _batchnorm(fe: Any, g: Any, scale_dims: tuple[int, ...] = (1, 3, 1, 1), eps_by_value: bool = True) -> None:
    stats = {role: _tensor(fe, g, role, (1, 3, 1, 1)) for role in ("b", "rm", "rv")}
    _outputs(fe, *g.batchnorm(input=_tensor(fe, g, "x", (4, 3, 30, 1)), scale=_tensor(fe, g, "s", scale_dims),
                              bias=stats["b"], in_running_mean=stats["rm"], in_running_var=stats["rv"],
                              epsilon=_tensor(fe, g, "eps", (1, 1, 1, 1), by_value=eps_by_value),
                              momentum=_tensor(fe, g, "m", (1, 1, 1, 1), by_value=True)))


def _convolution(fe: Any, g: Any, x: tuple[int, ...], w: tuple[int, ...], y: tuple[int, ...]) -> None:
    from mxlite.device.cudnn import _strides  # noqa: PLC0415

    out = g.conv_fprop(image=_tensor(fe, g, "x", x), weight=_tensor(fe, g, "w", w), padding=[1, 1], stride=[1, 1],
                       dilation=[1, 1])
    out.set_output(True).set_dim(list(y)).set_stride(_strides(y)).set_data_type(fe.data_type.FLOAT)


REFUSED = {
    "batch norm without running statistics": _batchnorm_without_running_statistics,
    "batch norm scale of other dims": lambda fe, g: _batchnorm(fe, g, scale_dims=(1, 4, 1, 1)),
    "batch norm epsilon in device memory": lambda fe, g: _batchnorm(fe, g, eps_by_value=False),
    "convolution output of wrong dims": lambda fe, g: _convolution(fe, g, (2, 3, 8, 8), (4, 3, 3, 3), (2, 4, 7, 7)),
    "convolution channels not a whole number of groups":
        lambda fe, g: _convolution(fe, g, (2, 4, 8, 8), (6, 3, 3, 3), (2, 6, 8, 8)),
}


# -- the child process: runs the stages on the real (or, with --emulated, the emulated) frontend -------------------
def _outcome(run: Any) -> str:
    try:
        run()
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"
    return "ok"


def _report(emulated: bool) -> dict[str, Any]:
    """Stages reached by each of mxlite's graphs, and the outcome of each refused declaration."""
    from mxlite.device import cudnn as dc  # noqa: PLC0415

    if emulated:
        from mxlite._emulation import fakecudnn as fe  # noqa: PLC0415
        options: dict[str, Any] = {}
    else:
        import cudnn as fe  # noqa: PLC0415 - NVIDIA's frontend

        assert "mxlite" not in fe.__file__, "the emulated frontend shadows NVIDIA's"
        options = {"device_property": fe.create_device_properties(json.dumps(H100))}
    graphs = {}
    for key in mxlite_signatures():
        builder = dc._declare(fe, key, **options)
        reached: list[str] = []
        stop = "ok"
        for step in dc._BUILD_STEPS if not emulated else DEVICELESS:
            stop = _outcome(lambda step=step, graph=builder.graph: dc._build(fe, graph, (step,)))
            if stop != "ok":
                break
            reached.append(step)
        graphs[repr(key)] = {"reached": reached, "stopped": stop}
    refused = {}
    for name, declare in REFUSED.items():
        g = fe.pygraph(io_data_type=fe.data_type.FLOAT, intermediate_data_type=fe.data_type.FLOAT,
                       compute_data_type=fe.data_type.FLOAT, **options)
        refused[name] = _outcome(lambda g=g, declare=declare: (declare(fe, g), dc._build(fe, g, DEVICELESS)))
    report = {"graphs": graphs, "refused": refused, "version": getattr(fe, "__version__", "?")}
    if not emulated:
        report["backend"] = fe.backend_version()
        report["operands"] = _operand_forms(fe, dc, options)
    return report


def _operand_forms(fe: Any, dc: Any, options: dict[str, Any]) -> dict[str, str]:
    """How the real frontend's ``execute`` reads a variant-pack operand (``pygraph._describe``, applied to every
    buffer before any GPU work): a NumPy array, and the form mxlite's ``_execute`` gives host scalars."""
    builder = dc._declare(fe, dc._bn_key("batchnorm", (4, 3, 30), "float32", 1e-3), **options)
    dc._build(fe, builder.graph, DEVICELESS)
    uid = builder.uids["eps"]
    mxlite_form = dc._scalar_operands(builder.uids, builder.host)[uid]
    return {"numpy array": _outcome(lambda: builder.graph._describe(builder.host["eps"], uid)),
            "mxlite's operand": _outcome(lambda: builder.graph._describe(mxlite_form, uid)),
            "mxlite's operand type": type(mxlite_form).__name__}


# -- the parent: the tests --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def driver_stub(tmp_path_factory) -> str:
    """A folder holding the stand-in ``libcuda.so.1``."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        real_libs.missing("cudnn", "no C compiler to build the driver stand-in")
    folder = tmp_path_factory.mktemp("driver_stub")
    source = folder / "cuda_stub.c"
    source.write_text(DRIVER_STUB)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(folder / "libcuda.so.1"), str(source)], check=True)
    return str(folder)


def _child(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def real(driver_stub) -> dict[str, Any]:
    """The report of NVIDIA's frontend and libcudnn (skipped, or failed where required, when they are missing)."""
    env = {k: v for k, v in os.environ.items() if k != "MXLITE_EMULATE_GPUS"}
    env["MXLITE_EMULATE_GPUS"] = "0"
    env["LD_LIBRARY_PATH"] = driver_stub + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    real_libs.probe("cudnn", f"import json, cudnn; cudnn.create_device_properties(json.dumps({H100!r}))", env=env)
    return _child([], env)


@pytest.fixture(scope="module")
def emulated() -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return _child(["--emulated"], env)


def test_every_graph_mxlite_builds_passes_the_real_frontend_up_to_the_gpu(real):
    """Each graph validates and lowers to libcudnn's operation graph; the convolutions are also planned. What stops
    each one is printed (on this machine, the first step that needs a GPU)."""
    assert len(real["graphs"]) == len(DTYPES) * (3 * len(CONVOLUTIONS) + 3 * len(BATCH_NORMS))
    for key, outcome in real["graphs"].items():
        assert tuple(outcome["reached"][:2]) == DEVICELESS, (key, outcome)
        if "conv_" in key:
            assert "create_execution_plans" in outcome["reached"], (key, outcome)
    stops = sorted({o["stopped"].split(":")[0] + ": " + o["stopped"].split(":", 1)[-1][:60]
                    for o in real["graphs"].values()})
    print(f"cuDNN frontend {real['version']}, libcudnn {real['backend']}; stopped at: {stops}")


def test_the_emulated_frontend_accepts_the_same_graphs(emulated):
    assert len(emulated["graphs"]) == len(mxlite_signatures())
    for key, outcome in emulated["graphs"].items():
        assert tuple(outcome["reached"]) == DEVICELESS, (key, outcome)


def test_the_emulated_frontend_refuses_what_the_real_one_refuses(real, emulated):
    for name, outcome in real["refused"].items():
        assert outcome != "ok", f"the real frontend now accepts {name}: drop the case or find one it refuses"
        assert emulated["refused"][name] != "ok", (name, outcome)
    # mxlite's old training batch norm: the compiled binding's TypeError on both, at validate
    for report in (real, emulated):
        assert report["refused"]["batch norm without running statistics"].startswith("TypeError: batchnorm()")


def test_host_scalars_reach_execute_in_a_form_the_real_frontend_reads(real):
    forms = real["operands"]
    assert forms["numpy array"] == "RuntimeError: NumPy only supports stream=None.", forms
    assert forms["mxlite's operand"] == "ok" and forms["mxlite's operand type"] == "int", forms


def test_the_emulated_frontend_refuses_a_numpy_scalar_as_the_real_one_does():
    from mxlite._emulation import fakecudnn as fe

    t = fe.Tensor(name="eps", data_type=fe.data_type.FLOAT, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1],
                  is_pass_by_value=True, uid=1)
    with pytest.raises(RuntimeError, match="NumPy only supports stream=None"):
        fe._host_scalar(np.array([1e-3], np.float32), t, "execute")
    value = np.array([1e-3], np.float32)
    assert fe._host_scalar(int(value.ctypes.data), t, "execute") == np.float32(1e-3)


if __name__ == "__main__":
    print(json.dumps(_report(emulated="--emulated" in sys.argv)))
