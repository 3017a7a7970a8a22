"""cuDNN through NVIDIA's Python frontend (``nvidia-cudnn-frontend``), where a user has it.

Purpose: CuPy 14 no longer binds cuDNN; NVIDIA's own Python package for it is the cuDNN frontend
(``import cudnn``), a graph API: an operation is declared once with its tensors' dims, strides and
data types, planned and built, then executed any number of times on new addresses. On a real GPU
with the frontend installed (``pip install 'mxlite[cudnn12]'`` or ``[cudnn13]``), convolution
(forward, data and weight gradients) and batch norm (training and inference forward, training
backward) run through it; everywhere else mxlite's own GEMM and kernel path runs
(docs/design.md, "Where convolution, pooling and batch norm run").

Prerequisites: ``import cudnn`` succeeds, ``cudnn.create_handle()`` finds libcudnn and a GPU, the
device is a real GPU; on the emulated GPUs only when the emulated frontend is installed
(:func:`mxlite._emulation.install.install_cudnn`, which tests do). ``MXLITE_CUDNN=off`` turns the
path off (``auto``, the default: use it when available).

Behaviour: one graph per (device, op, shapes, data type, geometry), built on first use and kept
(:func:`stats` counts builds and executions). A graph is declined when anything goes wrong while it is
declared, validated, planned or built: cuDNN's ``cudnnGraphNotSupportedError``, but also the
``TypeError`` a frontend binding raises for arguments it does not take, or a ``RuntimeError`` from
libcudnn. A declined signature warns once (naming the graph and the cause), is remembered, and runs
mxlite's own GEMM and kernel path: a cuDNN problem never stops a step. Each execution takes its
workspace from CuPy's pool on the current stream, and the device's cuDNN handle is bound to the current
stream first, so the work is ordered like every other op of the step. Layouts are NCHW (NCDHW),
C-contiguous, described with explicit strides; data float32, float16 or bfloat16; the arithmetic float32
(the frontend's compute type FLOAT). Host scalars (batch norm's epsilon and momentum) are pass-by-value
tensors, handed to ``execute`` as the address of a float32 in host memory (the frontend reads a NumPy
array through ``__dlpack__(stream=-1)``, which NumPy refuses).

Warnings: a 1-D convolution runs as a 2-D one of height 1 (cuDNN's convolutions take 4-D and 5-D
tensors). Pooling is not offered by the frontend's Python API (no ``resample`` builder as of 1.32.0):
it always runs mxlite's kernels. Training batch norm is declared with running statistics and a momentum,
which the 1.32 frontend's binding requires; cuDNN's updated running statistics go to scratch buffers and
mxlite updates the layer's own from the batch statistics, with MXNet's formula (the biased variance;
:mod:`mxlite.ops._cudnn_ops`). Every graph declared here is built and validated against NVIDIA's
frontend and libcudnn without a GPU in ``tests/test_real_cudnn.py`` (``make test-real-libs``), and
:mod:`mxlite._emulation.fakecudnn` refuses what the real frontend refuses.
"""

from __future__ import annotations

import collections
import sys
import threading
import warnings
from typing import Any

import numpy as np

from . import env

__all__ = ["CUDNN_ENV", "available", "batch_norm_backward", "batch_norm_backward_plan", "batch_norm_forward",
           "batch_norm_plan", "clear", "conv_data_grad", "conv_forward", "conv_plans", "conv_weight_grad", "eligible",
           "setting", "stats", "status"]

CUDNN_ENV = "MXLITE_CUDNN"
_DTYPES = {"float32": "FLOAT", "float16": "HALF", "bfloat16": "BFLOAT16"}
_HEURISTICS = ("A", "FALLBACK")  # heuristic modes tried in order (NVIDIA's samples use A, then FALLBACK)

_lock = threading.RLock()
_plans: dict[tuple[Any, ...], Any] = {}  # signature -> _Plan, or None when cuDNN declined it
_handles: dict[tuple[int, int], Any] = {}  # (device id, id(frontend module)) -> handle
_handle_errors: dict[tuple[int, int], str] = {}
_counts: collections.Counter[str] = collections.Counter()
_warned: set[tuple[Any, ...]] = set()  # (signature, cause) pairs already reported as declined
_import_failed = False  # `import cudnn` failed once: not tried again on every convolution (clear() retries)


def setting() -> str:
    """``MXLITE_CUDNN``: ``auto`` (default: use cuDNN where available) or ``off``.

    Raises:
        ValueError: any other value.
    """
    return env.choice(CUDNN_ENV, ("auto", "off"), "auto")


def _frontend() -> Any:
    """The ``cudnn`` module, or None when it does not import."""
    global _import_failed
    module = sys.modules.get("cudnn")
    if module is not None or _import_failed:
        return module
    try:
        import cudnn  # noqa: PLC0415 - optional dependency (the cudnn12/cudnn13 extras)
    except Exception:  # ImportError, or a broken install raising at import
        _import_failed = True  # a failed import is not cached by Python: searching the path costs every call
        return None
    return cudnn


def _emulated(module: Any) -> bool:
    return module.__name__.startswith("mxlite._emulation")


def status(device: Any) -> str:
    """Why ``device`` does or does not run cuDNN: ``"available"`` or the reason (for ``mxlite info`` and tests)."""
    if not getattr(device, "is_gpu", False):  # first: CPU devices' batch norms ask on every call
        return "not a GPU"
    if setting() == "off":
        return f"off ({CUDNN_ENV}=off)"
    fe = _frontend()
    if fe is None:
        return "nvidia-cudnn-frontend is not installed (pip install 'mxlite[cudnn12]' or '[cudnn13]')"
    cupy_emulated = sys.modules.get("cupy") is not None and _emulated(sys.modules["cupy"])
    if cupy_emulated != _emulated(fe):
        return ("the GPUs are emulated and the emulated cuDNN frontend is not installed" if cupy_emulated
                else "the emulated cuDNN frontend is installed but the GPUs are real")
    try:
        _handle(fe, device)
    except RuntimeError as exc:
        return str(exc)
    return "available"


def available(device: Any) -> bool:
    """Whether cuDNN runs ``device``'s convolutions and batch norms (see :func:`status` for why not)."""
    return status(device) == "available"


def eligible(*arrays: Any) -> bool:
    """Whether arrays of these dtypes go to cuDNN: all float32, all float16 or all bfloat16."""
    names = {a.dtype.name for a in arrays}
    return len(names) == 1 and next(iter(names)) in _DTYPES


def _handle(fe: Any, device: Any) -> Any:
    """The device's cuDNN handle, made once (RuntimeError naming the cause when libcudnn or the GPU is missing)."""
    key = (device.device_id, id(fe))
    with _lock:
        if key in _handles:
            return _handles[key]
        if key in _handle_errors:
            raise RuntimeError(_handle_errors[key])
        try:
            with device.use():
                handle = fe.create_handle()
        except Exception as exc:  # libcudnn not found, no driver, ...
            _handle_errors[key] = f"cudnn.create_handle() failed on {device}: {type(exc).__name__}: {exc}"
            raise RuntimeError(_handle_errors[key]) from None
        _handles[key] = handle
        return handle


def stats() -> dict[str, int]:
    """Counts since :func:`clear`: ``builds``, ``declined`` (graphs that run mxlite's path instead), and executions
    per op."""
    return dict(_counts)


def clear() -> None:
    """Forget every built graph, handle and count (tests; a new frontend module or emulation)."""
    global _import_failed
    with _lock:
        _import_failed = False
        _plans.clear()
        _handles.clear()
        _handle_errors.clear()
        _counts.clear()
        _warned.clear()


class _Plan:
    """A built graph: its tensors' uids by role, the workspace it needs, the host scalars it reads (one float32
    each, kept here so their addresses stay valid), and what it is (for messages)."""

    __slots__ = ("graph", "uids", "workspace", "host", "handle", "op", "what")

    def __init__(self, graph: Any, uids: dict[str, int], workspace: int, host: dict[str, np.ndarray],
                 handle: Any, op: str, what: str) -> None:
        self.graph, self.uids, self.workspace, self.host = graph, uids, workspace, host
        self.handle, self.op, self.what = handle, op, what


def _strides(dims: tuple[int, ...]) -> list[int]:
    """C-contiguous strides, in elements."""
    out, step = [], 1
    for d in reversed(dims):
        out.append(step)
        step *= d
    return out[::-1]


class _Builder:
    """Declares one graph: tensors with explicit dims, strides, data types and uids.

    ``graph_options`` go to ``cudnn.pygraph``: ``handle=`` at run time; the tests give ``device_property=`` to
    build mxlite's graphs against the real frontend without a GPU.
    """

    def __init__(self, fe: Any, io: str, **graph_options: Any) -> None:
        dt = fe.data_type
        self.fe = fe
        self.graph = fe.pygraph(io_data_type=getattr(dt, io), intermediate_data_type=dt.FLOAT,
                                compute_data_type=dt.FLOAT, **graph_options)
        self.uids: dict[str, int] = {}
        self.host: dict[str, np.ndarray] = {}

    def _uid(self, role: str) -> int:
        self.uids[role] = len(self.uids) + 1
        return self.uids[role]

    def input(self, role: str, dims: tuple[int, ...], dtype: str) -> Any:
        """A device tensor of ``dims`` (C-contiguous) and cuDNN data type name ``dtype``."""
        return self.graph.tensor(name=role, dim=list(dims), stride=_strides(dims),
                                 data_type=getattr(self.fe.data_type, dtype), uid=self._uid(role))

    def scalar(self, role: str, value: float = 0.0) -> Any:
        """A float32 host scalar, passed by value: cuDNN reads it from host memory at each execution (its value can
        change between executions, :func:`_execute`'s ``scalars``)."""
        self.host[role] = np.array([value], dtype=np.float32)
        return self.graph.tensor(name=role, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=self.fe.data_type.FLOAT,
                                 is_pass_by_value=True, uid=self._uid(role))

    def output(self, role: str, t: Any, dims: tuple[int, ...], dtype: str) -> None:
        t.set_output(True).set_dim(list(dims)).set_stride(_strides(dims)).set_data_type(
            getattr(self.fe.data_type, dtype)).set_uid(self._uid(role))


# The stages that turn a declared graph into a runnable plan, in order. The first two need libcudnn but no GPU.
_BUILD_STEPS = ("validate", "build_operation_graph", "create_execution_plans", "check_support", "build_plans")


def _build(fe: Any, graph: Any, steps: tuple[str, ...] = _BUILD_STEPS) -> None:
    """Run ``steps`` of :data:`_BUILD_STEPS` on a declared graph (exceptions propagate)."""
    for step in steps:
        if step == "create_execution_plans":
            graph.create_execution_plans([getattr(fe.heur_mode, m) for m in _HEURISTICS])
        else:
            getattr(graph, step)()


def _declare(fe: Any, key: tuple[Any, ...], **graph_options: Any) -> _Builder:
    """The declared (not yet validated) graph of signature ``key``: ``(op, ...)`` as :func:`_conv` and
    :func:`_bn` make it."""
    declare = _declare_conv if key[0].startswith("conv_") else _declare_bn
    return declare(fe, key, **graph_options)


def _describe(key: tuple[Any, ...]) -> str:
    return f"cuDNN {key[0]} {key[1:]}"


def _plan(device: Any, key: tuple[Any, ...]) -> _Plan | None:
    """The built graph for ``key`` on ``device`` (declared and built on first use); None if it is declined."""
    full = (device.device_id,) + key
    with _lock:
        if full in _plans:
            return _plans[full]
        fe = _frontend()
        handle = _handle(fe, device)
        what = _describe(key)
        try:
            with device.use():
                b = _declare(fe, key, handle=handle)
                _build(fe, b.graph)
                workspace = int(b.graph.get_workspace_size())
        except Exception as exc:  # noqa: BLE001 - whatever the frontend raises, mxlite's own path runs the op
            _decline(full, device, what, exc)
            return None
        plan = _Plan(b.graph, b.uids, workspace, b.host, handle, key[0], what)
        _plans[full] = plan
        _counts["builds"] += 1
        return plan


def _decline(full: tuple[Any, ...], device: Any, what: str, exc: Exception) -> None:
    """Remember ``full`` as declined and warn once per signature and cause."""
    _plans[full] = None
    _counts["declined"] += 1
    cause = f"{type(exc).__name__}: {exc}".strip()
    if (full, cause) not in _warned:
        _warned.add((full, cause))
        first_line = cause.splitlines()[0][:400]
        warnings.warn(f"{what} on {device} is not run by cuDNN ({first_line}); mxlite's own kernels run it. "
                      f"{CUDNN_ENV}=off turns cuDNN off.", RuntimeWarning, stacklevel=4)


def _scalar_operands(uids: dict[str, int], host: dict[str, np.ndarray]) -> dict[int, int]:
    """The variant-pack entries of the host scalars: uid -> the address of the float32 (cuDNN copies the value
    during ``execute``; the frontend would read an array object through ``__dlpack__(stream=-1)``)."""
    return {uids[role]: int(value.ctypes.data) for role, value in host.items()}


def _execute(device: Any, plan: _Plan, buffers: dict[str, Any], scalars: dict[str, float] | None = None) -> None:
    """Run ``plan`` on the current stream with ``buffers`` (role -> CuPy array), the host ``scalars`` of this call
    (role -> value; the others keep their declared value) and a fresh pooled workspace."""
    import cupy  # noqa: PLC0415 - GPUs only

    fe = _frontend()
    with device.use():
        stream = cupy.cuda.get_current_stream()
        pack = {plan.uids[role]: a.data.ptr for role, a in buffers.items()}
        workspace = cupy.empty((max(plan.workspace, 1),), dtype=cupy.uint8)
        with _lock:  # one handle per device: its stream binding, the host scalars and the execution go together
            for role, value in (scalars or {}).items():
                plan.host[role][0] = value
            pack.update(_scalar_operands(plan.uids, plan.host))
            fe.set_stream(handle=plan.handle, stream=stream.ptr)
            try:
                plan.graph.execute(pack, workspace.data.ptr, handle=plan.handle)
            except Exception as exc:
                shapes = {role: tuple(a.shape) for role, a in buffers.items()}
                raise RuntimeError(f"{plan.what} on {device}: execution failed for {shapes}: "
                                   f"{type(exc).__name__}: {exc}") from exc
    _counts[plan.op] += 1


# -- convolution -----------------------------------------------------------------------------------------------
def _as_4d(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A 1-D convolution's (N, C, W) as cuDNN's (N, C, 1, W); 2-D and 3-D shapes unchanged."""
    return shape[:2] + (1,) + shape[2:] if len(shape) == 3 else shape


def _geometry(pad: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> tuple[list[int], ...]:
    if len(pad) == 1:
        return [0, pad[0]], [1, stride[0]], [1, dilation[0]]
    return list(pad), list(stride), list(dilation)


def _conv_key(op: str, x_shape: tuple[int, ...], w_shape: tuple[int, ...], y_shape: tuple[int, ...], dtype: str,
              pad: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> tuple[Any, ...]:
    return (op, tuple(x_shape), tuple(w_shape), tuple(y_shape), dtype, tuple(pad), tuple(stride), tuple(dilation))


def _declare_conv(fe: Any, key: tuple[Any, ...], **graph_options: Any) -> _Builder:
    op, x_shape, w_shape, y_shape, dtype, pad, stride, dilation = key
    io = _DTYPES[dtype]
    xs, ws, ys = _as_4d(x_shape), _as_4d(w_shape), _as_4d(y_shape)
    padding, strides, dilations = _geometry(pad, stride, dilation)
    b = _Builder(fe, io, **graph_options)
    geom = {"padding": padding, "stride": strides, "dilation": dilations}
    if op == "conv_fprop":
        y = b.graph.conv_fprop(image=b.input("x", xs, io), weight=b.input("w", ws, io), **geom)
        b.output("y", y, ys, io)
    elif op == "conv_dgrad":
        dx = b.graph.conv_dgrad(loss=b.input("dy", ys, io), filter=b.input("w", ws, io), **geom)
        b.output("dx", dx, xs, io)
    else:
        dw = b.graph.conv_wgrad(image=b.input("x", xs, io), loss=b.input("dy", ys, io), **geom)
        b.output("dw", dw, ws, io)
    return b


def _conv(op: str, device: Any, x_shape: tuple[int, ...], w_shape: tuple[int, ...], y_shape: tuple[int, ...],
          dtype: str, pad: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> _Plan | None:
    return _plan(device, _conv_key(op, x_shape, w_shape, y_shape, dtype, pad, stride, dilation))


def conv_plans(device: Any, x_shape: tuple[int, ...], w_shape: tuple[int, ...], y_shape: tuple[int, ...],
               dtype: str, pad: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]) -> bool:
    """Build (once) the forward, data-gradient and weight-gradient graphs of one convolution; False when cuDNN
    declines any of them (then the whole convolution runs the GEMM path)."""
    return all(_conv(op, device, x_shape, w_shape, y_shape, dtype, pad, stride, dilation) is not None
               for op in ("conv_fprop", "conv_dgrad", "conv_wgrad"))


def conv_forward(device: Any, x: Any, w: Any, y_shape: tuple[int, ...], pad: tuple[int, ...],
                 stride: tuple[int, ...], dilation: tuple[int, ...]) -> Any:
    """The convolution (cross-correlation) of C-contiguous ``x`` (N, C, *S) by ``w`` (C_out, C/groups, *K):
    a new (N, C_out, *O) array. Raises RuntimeError naming the op and shapes when cuDNN fails."""
    import cupy  # noqa: PLC0415

    plan = _conv("conv_fprop", device, x.shape, w.shape, y_shape, x.dtype.name, pad, stride, dilation)
    with device.use():
        y = cupy.empty(y_shape, dtype=x.dtype)
    _execute(device, plan, {"x": x, "w": w, "y": y})
    return y


def conv_data_grad(device: Any, dy: Any, w: Any, x_shape: tuple[int, ...], pad: tuple[int, ...],
                   stride: tuple[int, ...], dilation: tuple[int, ...]) -> Any:
    """The input's gradient (a new array of ``x_shape``) for the C-contiguous output gradient ``dy``."""
    import cupy  # noqa: PLC0415

    plan = _conv("conv_dgrad", device, x_shape, w.shape, dy.shape, dy.dtype.name, pad, stride, dilation)
    with device.use():
        dx = cupy.empty(x_shape, dtype=dy.dtype)
    _execute(device, plan, {"dy": dy, "w": w, "dx": dx})
    return dx


def conv_weight_grad(device: Any, x: Any, dy: Any, w_shape: tuple[int, ...], pad: tuple[int, ...],
                     stride: tuple[int, ...], dilation: tuple[int, ...], out: Any = None) -> Any:
    """The filter's gradient (``w_shape``), written into ``out`` (C-contiguous, ``x``'s dtype) when given."""
    import cupy  # noqa: PLC0415

    plan = _conv("conv_wgrad", device, x.shape, w_shape, dy.shape, x.dtype.name, pad, stride, dilation)
    if out is None:
        with device.use():
            out = cupy.empty(w_shape, dtype=x.dtype)
    _execute(device, plan, {"x": x, "dy": dy, "dw": out})
    return out


# -- batch norm ------------------------------------------------------------------------------------------------
def _bn_dims(shape3: tuple[int, int, int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(outer, C, inner) as cuDNN's 4-D (outer, C, inner, 1), and the (1, C, 1, 1) of the per-channel arrays."""
    outer, c, inner = shape3
    return (outer, c, inner, 1), (1, c, 1, 1)


def batch_norm_plan(device: Any, shape3: tuple[int, int, int], dtype: str, eps: float, training: bool) -> bool:
    """Build (once) the forward graph (training or inference) and, for training, the backward graph of batch norm
    over ``shape3`` (outer, C, inner); False when cuDNN declines one (then the kernels run)."""
    return (_bn("batchnorm" if training else "batchnorm_inference", device, shape3, dtype, eps) is not None
            and (not training or batch_norm_backward_plan(device, shape3, dtype)))


def batch_norm_backward_plan(device: Any, shape3: tuple[int, int, int], dtype: str) -> bool:
    """Build (once) training batch norm's backward graph; False when cuDNN declines it."""
    return _bn("batchnorm_backward", device, shape3, dtype, 0.0) is not None


def _bn_key(op: str, shape3: tuple[int, int, int], dtype: str, eps: float) -> tuple[Any, ...]:
    return (op, tuple(shape3), dtype, float(eps) if op == "batchnorm" else None)


def _declare_bn(fe: Any, key: tuple[Any, ...], **graph_options: Any) -> _Builder:
    op, shape3, dtype, eps = key
    io = _DTYPES[dtype]
    xs, cs = _bn_dims(shape3)
    b = _Builder(fe, io, **graph_options)
    g = b.graph

    def stats(*roles: str) -> list[Any]:
        return [b.input(role, cs, "FLOAT") for role in roles]

    if op == "batchnorm":
        scale, bias, running_mean, running_var = stats("scale", "bias", "running_mean", "running_var")
        # the 1.32 binding requires the running statistics and the momentum (None is refused at validate)
        y, mean, inv, next_mean, next_var = g.batchnorm(
            input=b.input("x", xs, io), scale=scale, bias=bias, in_running_mean=running_mean,
            in_running_var=running_var, epsilon=b.scalar("eps", eps), momentum=b.scalar("momentum"))
        b.output("y", y, xs, io)
        for role, t in (("mean", mean), ("inv_std", inv), ("next_mean", next_mean), ("next_var", next_var)):
            b.output(role, t, cs, "FLOAT")
    elif op == "batchnorm_inference":
        mean, inv, scale, bias = stats("mean", "inv_std", "scale", "bias")
        y = g.batchnorm_inference(input=b.input("x", xs, io), mean=mean, inv_variance=inv, scale=scale, bias=bias)
        b.output("y", y, xs, io)
    else:
        dy, x = b.input("dy", xs, io), b.input("x", xs, io)
        scale, mean, inv = stats("scale", "mean", "inv_std")
        dx, dscale, dbias = g.batchnorm_backward(grad=dy, input=x, scale=scale, mean=mean, inv_variance=inv)
        b.output("dx", dx, xs, io)
        b.output("dscale", dscale, cs, "FLOAT")
        b.output("dbias", dbias, cs, "FLOAT")
    return b


def _bn(op: str, device: Any, shape3: tuple[int, int, int], dtype: str, eps: float) -> _Plan | None:
    return _plan(device, _bn_key(op, shape3, dtype, eps))


def batch_norm_forward(device: Any, x: Any, shape3: tuple[int, int, int], scale: Any, bias: Any, eps: float,
                       mean: Any, inv_std: Any, training: bool, running_mean: Any = None, running_var: Any = None,
                       momentum: float = 0.9) -> Any:
    """Batch norm of C-contiguous ``x`` viewed as (outer, C, inner), float32 (C,) ``scale`` and ``bias``.

    Training: batch statistics, written into the float32 (C,) ``mean`` and ``inv_std`` (1/sqrt(var + eps), the
    biased variance); the graph also reads the float32 (C,) ``running_mean`` and ``running_var`` and ``momentum``
    (MXNet's: the weight of the old running value), whose update cuDNN writes to scratch buffers: the caller
    updates the running statistics (module docstring). Inference: ``mean`` and ``inv_std`` are read. Returns the
    output, a new array like ``x``.

    Raises:
        ValueError: training without ``running_mean`` and ``running_var``.
    """
    import cupy  # noqa: PLC0415

    op = "batchnorm" if training else "batchnorm_inference"
    plan = _bn(op, device, shape3, x.dtype.name, eps)
    buffers = {"x": x, "scale": scale, "bias": bias, "mean": mean, "inv_std": inv_std}
    scalars = None
    with device.use():
        buffers["y"] = y = cupy.empty(x.shape, dtype=x.dtype)
        if training:
            if running_mean is None or running_var is None:
                raise ValueError("cuDNN's training batch norm reads the running mean and variance: pass running_mean "
                                 "and running_var")
            scratch = cupy.empty((2, shape3[1]), dtype=cupy.float32)
            buffers.update(running_mean=running_mean, running_var=running_var, next_mean=scratch[0],
                           next_var=scratch[1])
            scalars = {"momentum": 1.0 - float(momentum)}  # cuDNN weighs the batch's statistic by its momentum
    _execute(device, plan, buffers, scalars)
    return y


def batch_norm_backward(device: Any, dy: Any, x: Any, shape3: tuple[int, int, int], scale: Any, mean: Any,
                        inv_std: Any, dscale: Any, dbias: Any) -> Any:
    """Training batch norm's gradients: returns the input's (a new array like ``x``), writes the float32 (C,)
    ``dscale`` and ``dbias``. ``mean`` and ``inv_std`` are the forward's batch statistics."""
    import cupy  # noqa: PLC0415

    plan = _bn("batchnorm_backward", device, shape3, x.dtype.name, 0.0)
    with device.use():
        dx = cupy.empty(x.shape, dtype=x.dtype)
    _execute(device, plan, {"dy": dy, "x": x, "scale": scale, "mean": mean, "inv_std": inv_std, "dx": dx,
                            "dscale": dscale, "dbias": dbias})
    return dx
