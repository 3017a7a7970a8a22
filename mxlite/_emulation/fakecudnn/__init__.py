"""``cudnn`` on the emulated GPUs: the part of NVIDIA's cuDNN frontend (``nvidia-cudnn-frontend``) mxlite calls.

Installed as ``cudnn`` by :func:`mxlite._emulation.install.install_cudnn` (tests ask for it; the emulation alone
does not install it, so emulated GPUs run mxlite's GEMM path unless a test wants this one). Follows the frontend's
Python graph API as of 1.32.0 (``cudnn.pygraph`` and its builders' parameter names, the enums, ``create_handle``,
``set_stream``): a graph is declared with tensors of explicit dims and strides, validated, lowered
(``build_operation_graph``), planned (``create_execution_plans``, ``check_support``, ``build_plans``) and then
executed any number of times with a variant pack (tensor, uid or name -> device address) and a workspace of at
least ``get_workspace_size()`` bytes, on the handle's stream.

Emulated ops, one per graph: ``conv_fprop``, ``conv_dgrad``, ``conv_wgrad`` (4-D and 5-D tensors, groups inferred
from the filter's channels, cross-correlation), ``batchnorm`` (with running statistics and a momentum, which the
1.32 binding requires), ``batchnorm_inference`` and ``batchnorm_backward``; data FLOAT, HALF or BFLOAT16, compute
FLOAT. Arithmetic is NumPy in float64, rounded once to each output's type.

As strict as the library where tests/test_real_cudnn.py compared the two (the real frontend and libcudnn build and
validate graphs without a GPU): ``batchnorm`` without ``in_running_mean``, ``in_running_var`` and ``momentum``
fails at ``validate`` with the binding's ``TypeError``; a NumPy array given to ``execute`` for a pass-by-value
scalar fails with NumPy's ``RuntimeError`` (the frontend reads buffer objects through ``__dlpack__(stream=-1)``;
a host scalar goes as its address, an int). Stricter than the library: every stage must run in order (the 1.32
frontend would build an unbuilt graph on ``execute``), outputs a later op needs must be declared with ``set_dim``
(dgrad, wgrad), fused graphs and ``peer_stats`` raise ``cudnnGraphNotSupportedError``, and the usual rules of the
emulated GPUs hold: the current device must be the handle's, every address must lie in a live allocation of that
device, and accesses are checked against the stream order (a workspace counts as written).
"""

from __future__ import annotations

import ctypes
import enum
import itertools
import math
import operator
from typing import Any

import numpy as np

from ..fakecupy import _core, _counters, _memory, _state, _streams
from ..fakecupy._errors import EmulatedGPUError as _EmulatedGPUError
from ..fakecupy.cuda._reduce import bf16_to_f32 as _bf16_to_f32
from ..fakecupy.cuda._reduce import f32_to_bf16 as _f32_to_bf16

__version__ = "1.32.0"
__all__ = ["Handle", "Tensor", "backend_version", "create_handle", "cudnnGraphNotSupportedError",
           "data_type", "destroy_handle", "get_stream", "heur_mode", "norm_forward_phase", "pygraph", "set_stream"]


class data_type(enum.Enum):  # noqa: N801 - the frontend's name
    """``cudnn.data_type`` (the members mxlite's calls may meet)."""

    NOT_SET = 0
    FLOAT = 1
    DOUBLE = 2
    HALF = 3
    INT8 = 4
    INT32 = 5
    UINT8 = 7
    BFLOAT16 = 10
    INT64 = 11
    BOOLEAN = 12


class heur_mode(enum.Enum):  # noqa: N801
    """``cudnn.heur_mode``."""

    A = 0
    B = 1
    FALLBACK = 2
    OPENSOURCE = 3


class norm_forward_phase(enum.Enum):  # noqa: N801
    """``cudnn.norm_forward_phase``."""

    NOT_SET = 0
    INFERENCE = 1
    TRAINING = 2


class _ConvolutionMode(enum.Enum):
    """``cudnn._compiled_module.convolution_mode`` (not exported by ``cudnn`` itself)."""

    CONVOLUTION = 0
    CROSS_CORRELATION = 1


class cudnnGraphNotSupportedError(Exception):  # noqa: N801, N818 - the frontend's name
    """The graph is valid but no engine runs it (here: it is outside what the emulation covers)."""


def backend_version() -> int:
    """The emulated cuDNN backend's version number (9.10.0)."""
    return 91000


# -- handles ---------------------------------------------------------------------------------------------
class Handle:
    """A cuDNN handle: the device it was made on and the stream its work runs on (0: the legacy stream)."""

    def __init__(self, backend_handle: int | None, ordinal: int | None = None, stream: int | None = None) -> None:
        self.backend_handle = backend_handle
        self._ordinal = ordinal
        self.stream = stream

    def __repr__(self) -> str:
        return f"cudnn.Handle(backend_handle={self.backend_handle!r}, cuda:{self._ordinal})"


_handle_ids = itertools.count(1)


def create_handle() -> Handle:
    """A handle bound to the current device, running on the legacy stream until :func:`set_stream`."""
    device_id = _state.check_device_id(_state.current_device_id())
    return Handle(0xCD00_0000_0000 + next(_handle_ids) * 0x100, device_id, 0)


def _live(handle: Any, what: str) -> Handle:
    if not isinstance(handle, Handle):
        raise TypeError(f"{what} expects a cudnn.Handle (from cudnn.create_handle()), got {type(handle).__name__}")
    if handle.backend_handle is None:
        raise RuntimeError(f"{what}: the handle was destroyed")
    return handle


def set_stream(handle: Handle, stream: int) -> None:
    """Run the handle's later work on the stream with address ``stream`` (``cupy.cuda.Stream.ptr``)."""
    h = _live(handle, "cudnn.set_stream")
    stream = operator.index(stream)
    _streams.stream_from_ptr(stream, h._ordinal)
    h.stream = stream


def get_stream(handle: Handle) -> int:
    """The address of the handle's stream."""
    return _live(handle, "cudnn.get_stream").stream


def destroy_handle(handle: Handle) -> None:
    """Release the handle; later use raises."""
    _live(handle, "cudnn.destroy_handle")
    handle.backend_handle = None
    handle.stream = None


# -- tensors ---------------------------------------------------------------------------------------------
_STORAGE = {data_type.FLOAT: np.dtype(np.float32), data_type.HALF: np.dtype(np.float16),
            data_type.BFLOAT16: np.dtype(np.uint16), data_type.DOUBLE: np.dtype(np.float64)}
_IO = (data_type.FLOAT, data_type.HALF, data_type.BFLOAT16)


class Tensor:
    """A tensor of a graph: dims, strides (in elements), data type, uid; virtual unless marked as an output."""

    def __init__(self, name: str = "", data_type: Any = None, dim: list[int] | None = None,
                 stride: list[int] | None = None, is_virtual: bool = False, is_pass_by_value: bool = False, *,
                 uid: int = 0, owner: pygraph | None = None) -> None:
        self._graph = owner
        self.name, self.dim, self.data_type = name, list(dim or []), data_type
        self.stride = None if stride is None else list(stride)
        self.is_virtual, self.is_pass_by_value, self.uid = is_virtual, is_pass_by_value, uid

    def _mutable(self) -> None:
        if self._graph._stage:
            raise RuntimeError(f"tensor {self.name!r}: the graph is already validated; declare tensors before "
                               "validate()")

    def set_output(self, value: bool) -> Tensor:
        """Mark as an output (a buffer of the variant pack) or back to virtual."""
        self._mutable()
        self.is_virtual = not value
        return self

    def set_data_type(self, dtype: Any) -> Tensor:
        """Set the data type (a ``cudnn.data_type``)."""
        self._mutable()
        self.data_type = dtype
        return self

    def set_dim(self, dim: list[int]) -> Tensor:
        """Set the dims."""
        self._mutable()
        self.dim = [int(d) for d in dim]
        return self

    def set_stride(self, stride: list[int]) -> Tensor:
        """Set the strides, in elements."""
        self._mutable()
        self.stride = [int(s) for s in stride]
        return self

    def set_uid(self, uid: int) -> Tensor:
        """Set the uid the variant pack may key this tensor by."""
        self._mutable()
        self._graph._take_uid(uid, self)
        return self

    def set_name(self, name: str) -> Tensor:
        """Set the name."""
        self.name = name
        return self

    def get_dim(self) -> list[int]:
        return list(self.dim)

    def get_stride(self) -> list[int]:
        return list(self.stride or [])

    def get_uid(self) -> int:
        return self.uid

    def get_name(self) -> str:
        return self.name

    def get_data_type(self) -> Any:
        return self.data_type

    def __repr__(self) -> str:
        return (f"Tensor(name={self.name!r}, dim={self.dim}, stride={self.stride}, data_type={self.data_type}, "
                f"is_virtual={self.is_virtual}, uid={self.uid})")


def _row_major(dim: list[int]) -> list[int]:
    out, step = [], 1
    for d in reversed(dim):
        out.append(step)
        step *= d
    return out[::-1]


# -- the graph -------------------------------------------------------------------------------------------
_CONV_ATTRS = ("padding", "pre_padding", "post_padding", "stride", "dilation", "convolution_mode")
# Workspace each op asks for, in bytes: small, fixed, and never zero, so that a caller that forgets it is caught.
_WORKSPACE = {"conv_fprop": 1024, "conv_dgrad": 2048, "conv_wgrad": 4096, "batchnorm": 512,
              "batchnorm_inference": 256, "batchnorm_backward": 768}
_STAGES = ("declared", "validated", "lowered", "planned", "supported", "built")
_STEP = {"validated": "validate", "lowered": "build_operation_graph", "planned": "create_execution_plans",
         "supported": "check_support", "built": "build_plans"}  # the call that reaches each stage


class _Node:
    def __init__(self, op: str, inputs: dict[str, Tensor], params: dict[str, Any], outputs: dict[str, Tensor]) -> None:
        self.op, self.inputs, self.params, self.outputs = op, inputs, params, outputs


class pygraph:  # noqa: N801 - the frontend's name
    """A cuDNN operation graph (the frontend's ``cudnn.pygraph``).

    Args:
        name: a label.
        io_data_type: default data type of declared tensors.
        intermediate_data_type: default data type of virtual tensors (defaults to ``io_data_type``).
        compute_data_type: the arithmetic's type (defaults to ``io_data_type``); only FLOAT is emulated.
        handle: the handle plans are built with (optional here).
    """

    def __init__(self, name: str = "test_graph", io_data_type: Any = None, intermediate_data_type: Any = None,
                 compute_data_type: Any = None, handle: Any = None, sm_count: Any = None, sm_version: Any = None,
                 kernel_cache: Any = None, device_property: Any = None, is_dynamic_shape_enabled: bool = False,
                 is_override_shape_enabled: bool = False, cuda_graph_retention: Any = None, **kwargs: Any) -> None:
        self.name = name
        self.io_data_type = io_data_type
        self.intermediate_data_type = intermediate_data_type or io_data_type
        self.compute_data_type = compute_data_type or io_data_type
        self._handle = None if handle is None else _live(handle, "cudnn.pygraph")
        self._tensors: list[Tensor] = []
        self._uids: dict[int, Tensor] = {}
        self._nodes: list[_Node] = []
        self._stage = 0  # index into _STAGES

    # -- declaring ------------------------------------------------------------------------------------
    def _take_uid(self, uid: int, tensor: Tensor) -> None:
        uid = operator.index(uid)
        holder = self._uids.get(uid)
        if holder is not None and holder is not tensor:
            raise ValueError(f"uid {uid} is already assigned to tensor {holder.name!r}")
        self._uids.pop(tensor.uid, None)
        tensor.uid = uid
        self._uids[uid] = tensor

    def _new_uid(self) -> int:
        return next(u for u in itertools.count(1) if u not in self._uids)

    def tensor(self, dim: list[int], stride: list[int] | None = None, data_type: Any = None, is_virtual: bool = False,
               is_pass_by_value: bool = False, ragged_offset: Any = None, reordering_type: Any = None,
               name: str = "", uid: int | None = None, **kwargs: Any) -> Tensor:
        """Declare a tensor of ``dim`` with ``stride`` (elements; row-major when None)."""
        if self._stage:
            raise RuntimeError("cudnn.pygraph.tensor: the graph is already validated")
        if ragged_offset is not None:
            raise cudnnGraphNotSupportedError("ragged tensors are not emulated")
        dim = [operator.index(d) for d in dim]
        t = Tensor(name=name or f"tensor_{len(self._tensors)}", dim=dim,
                   stride=list(stride) if stride is not None else None,
                   data_type=data_type if data_type not in (None, _data_type_not_set()) else
                   (self.intermediate_data_type if is_virtual else self.io_data_type),
                   is_virtual=is_virtual, is_pass_by_value=is_pass_by_value, owner=self)
        if t.stride is None:
            t.stride = _row_major(dim)
        self._take_uid(self._new_uid() if uid in (None, -1) else uid, t)
        self._tensors.append(t)
        return t

    def tensor_like(self, template: Tensor, name: str = "", is_virtual: bool = False) -> Tensor:
        """A new tensor with ``template``'s dims, strides and data type (a graph tensor; the frontend also takes
        DLPack objects, which the emulation does not)."""
        if not isinstance(template, Tensor):
            raise TypeError("the emulated cudnn.pygraph.tensor_like takes a graph tensor, got "
                            f"{type(template).__name__}")
        return self.tensor(dim=template.dim, stride=template.stride, data_type=template.data_type,
                           is_virtual=is_virtual, is_pass_by_value=template.is_pass_by_value, name=name)

    def _own(self, t: Any, op: str, port: str) -> Tensor:
        if not isinstance(t, Tensor) or t._graph is not self:
            raise TypeError(f"{op}: {port} must be a tensor of this graph, got {t!r}")
        return t

    def _output(self, node_name: str, port: str, dtype: Any = None) -> Tensor:
        t = self.tensor(dim=[], data_type=dtype or self.intermediate_data_type, is_virtual=True,
                        name=f"{node_name}::{port}")
        t.stride = None
        return t

    def _add(self, op: str, inputs: dict[str, Any], params: dict[str, Any], outputs: tuple[str, ...],
             name: str) -> dict[str, Tensor]:
        if self._stage:
            raise RuntimeError(f"cudnn.pygraph.{op}: the graph is already validated")
        node_name = name or f"{op}_{len(self._nodes)}"
        ins = {port: self._own(t, op, port) for port, t in inputs.items() if t is not None}
        outs = {port: self._output(node_name, port) for port in outputs}
        self._nodes.append(_Node(op, ins, params, outs))
        return outs

    def _conv(self, op: str, a: Any, b: Any, ports: tuple[str, str], out: str, padding: Any, pre_padding: Any,
              post_padding: Any, stride: Any, dilation: Any, convolution_mode: Any, compute_data_type: Any,
              name: str) -> Tensor:
        if padding is not None and (pre_padding is not None or post_padding is not None):
            raise TypeError(f"{op}: give padding, or pre_padding and post_padding, not both")
        pre = pre_padding if padding is None else padding
        post = post_padding if padding is None else padding
        params = {"pre_padding": None if pre is None else [int(v) for v in pre],
                  "post_padding": None if post is None else [int(v) for v in post],
                  "stride": None if stride is None else [int(v) for v in stride],
                  "dilation": None if dilation is None else [int(v) for v in dilation],
                  "convolution_mode": convolution_mode or _ConvolutionMode.CROSS_CORRELATION,
                  "compute_data_type": compute_data_type}
        outs = self._add(op, {ports[0]: a, ports[1]: b}, params, (out,), name)
        if op == "conv_fprop":  # the frontend infers fprop's output dims; dgrad's and wgrad's need set_dim
            x, w = a.dim, b.dim
            sp = len(x) - 2
            pre_, post_ = params["pre_padding"] or [0] * sp, params["post_padding"] or [0] * sp
            st, dl = params["stride"] or [1] * sp, params["dilation"] or [1] * sp
            if len(w) == len(x) and len(pre_) == len(post_) == len(st) == len(dl) == sp:
                outs[out].dim = [x[0], w[0]] + [
                    (x[i + 2] + pre_[i] + post_[i] - (w[i + 2] - 1) * dl[i] - 1) // st[i] + 1 for i in range(sp)]
                outs[out].stride = _row_major(outs[out].dim)
        return outs[out]

    def conv_fprop(self, image: Tensor, weight: Tensor, padding: Any = None, pre_padding: Any = None,
                   post_padding: Any = None, stride: Any = None, dilation: Any = None, convolution_mode: Any = None,
                   compute_data_type: Any = None, name: str = "") -> Tensor:
        """Y = image (*) weight (cross-correlation); padding on both sides, or pre_/post_padding."""
        return self._conv("conv_fprop", image, weight, ("image", "weight"), "Y", padding, pre_padding, post_padding,
                          stride, dilation, convolution_mode, compute_data_type, name)

    def conv_dgrad(self, loss: Tensor, filter: Tensor, padding: Any = None, pre_padding: Any = None,  # noqa: A002
                   post_padding: Any = None, stride: Any = None, dilation: Any = None, convolution_mode: Any = None,
                   compute_data_type: Any = None, name: str = "") -> Tensor:
        """DX, the image's gradient for the output gradient ``loss``; declare its dims with ``set_dim``."""
        return self._conv("conv_dgrad", loss, filter, ("loss", "filter"), "DX", padding, pre_padding, post_padding,
                          stride, dilation, convolution_mode, compute_data_type, name)

    def conv_wgrad(self, image: Tensor, loss: Tensor, padding: Any = None, pre_padding: Any = None,
                   post_padding: Any = None, stride: Any = None, dilation: Any = None, convolution_mode: Any = None,
                   compute_data_type: Any = None, name: str = "") -> Tensor:
        """DW, the filter's gradient; declare its dims with ``set_dim``."""
        return self._conv("conv_wgrad", image, loss, ("image", "loss"), "DW", padding, pre_padding, post_padding,
                          stride, dilation, convolution_mode, compute_data_type, name)

    def batchnorm(self, input: Tensor, scale: Tensor, bias: Tensor, in_running_mean: Any,  # noqa: A002
                  in_running_var: Any, epsilon: Any, momentum: Any, peer_stats: Any = None,
                  compute_data_type: Any = None, name: str = "") -> list[Any]:
        """Training batch norm: ``[Y, mean, inv_var, next_running_mean, next_running_var]``.

        ``next_running_mean = (1 - momentum) * in_running_mean + momentum * mean``, and the same for the variance
        with the batch's unbiased variance (cuDNN's convention). The declaration takes None for the running
        statistics and momentum (the last two outputs are then None), but :meth:`validate` refuses it as the
        1.32 binding does."""
        ins = {"input": input, "scale": scale, "bias": bias, "epsilon": epsilon, "in_running_mean": in_running_mean,
               "in_running_var": in_running_var, "momentum": momentum}
        running = in_running_mean is not None and in_running_var is not None
        ports = ("Y", "mean", "inv_var") + (("next_running_mean", "next_running_var") if running else ())
        outs = self._add("batchnorm", ins, {"peer_stats": list(peer_stats or []),
                                            "compute_data_type": compute_data_type}, ports, name)
        outs["Y"].dim, outs["Y"].stride = list(input.dim), _row_major(input.dim)
        for port in ports[1:]:
            outs[port].dim = [1 if i != 1 else d for i, d in enumerate(input.dim)]
            outs[port].stride = _row_major(outs[port].dim)
        return [outs["Y"], outs["mean"], outs["inv_var"], outs.get("next_running_mean"), outs.get("next_running_var")]

    def batchnorm_inference(self, input: Tensor, mean: Tensor, inv_variance: Tensor, scale: Tensor,  # noqa: A002
                            bias: Tensor, compute_data_type: Any = None, name: str = "") -> Tensor:
        """Y = (input - mean) * inv_variance * scale + bias."""
        outs = self._add("batchnorm_inference", {"input": input, "mean": mean, "inv_variance": inv_variance,
                                                 "scale": scale, "bias": bias},
                         {"compute_data_type": compute_data_type}, ("Y",), name)
        outs["Y"].dim, outs["Y"].stride = list(input.dim), _row_major(input.dim)
        return outs["Y"]

    def batchnorm_backward(self, grad: Tensor, input: Tensor, scale: Tensor, mean: Tensor,  # noqa: A002
                           inv_variance: Tensor, peer_stats: Any = None, compute_data_type: Any = None,
                           name: str = "") -> list[Tensor]:
        """``[DX, DScale, DBias]`` of training batch norm (batch statistics ``mean``, ``inv_variance``)."""
        outs = self._add("batchnorm_backward", {"grad": grad, "input": input, "scale": scale, "mean": mean,
                                                "inv_variance": inv_variance},
                         {"peer_stats": list(peer_stats or []), "compute_data_type": compute_data_type},
                         ("DX", "DScale", "DBias"), name)
        outs["DX"].dim, outs["DX"].stride = list(input.dim), _row_major(input.dim)
        for port in ("DScale", "DBias"):
            outs[port].dim, outs[port].stride = list(scale.dim), _row_major(scale.dim)
        return [outs["DX"], outs["DScale"], outs["DBias"]]

    # -- the stages -----------------------------------------------------------------------------------
    def _advance(self, stage: str) -> None:
        want = _STAGES.index(stage)
        if self._stage != want - 1:
            raise RuntimeError(f"cudnn graph {self.name!r}: {_STEP[stage]}() must follow "
                               f"{_STEP[_STAGES[want - 1]]}(), but the graph is {_STAGES[self._stage]}")
        self._stage = want

    def validate(self) -> None:
        """Check every declaration: ranks, strides, data types, the ops' shapes. Raises ValueError naming it."""
        if self._stage:
            raise RuntimeError(f"cudnn graph {self.name!r} is already validated")
        if not self._nodes:
            raise ValueError(f"cudnn graph {self.name!r} has no operation")
        for node in self._nodes:
            _VALIDATE[node.op](self, node)
        for t in self._tensors:
            if t.is_pass_by_value:
                continue
            if t.stride is None and t.dim:
                t.stride = _row_major(t.dim)  # an output given set_dim alone is row-major
            if t.stride is None or len(t.stride) != len(t.dim):
                raise ValueError(f"tensor {t.name!r}: dims {t.dim} and strides {t.stride} differ in length "
                                 "(declare the output's dims and strides with set_dim/set_stride)")
            if any(d < 1 for d in t.dim) or any(s < 1 for s in t.stride):
                raise ValueError(f"tensor {t.name!r}: dims {t.dim} and strides {t.stride} must be >= 1")
            if t.data_type not in _STORAGE:
                raise ValueError(f"tensor {t.name!r}: data type {t.data_type} is not emulated")
        self._stage = 1

    def build_operation_graph(self) -> None:
        """Lower the validated graph."""
        self._advance("lowered")

    def create_execution_plans(self, heuristics: list[Any] | None = None) -> None:
        """Rank engines by ``heuristics`` (a list of ``heur_mode``)."""
        if not heuristics or not all(isinstance(h, heur_mode) for h in heuristics):
            raise TypeError(f"create_execution_plans takes a non-empty list of cudnn.heur_mode, got {heuristics!r}")
        self._advance("planned")

    def check_support(self) -> None:
        """Raise ``cudnnGraphNotSupportedError`` when no engine runs the graph."""
        self._advance("supported")
        if len(self._nodes) != 1:
            raise cudnnGraphNotSupportedError(f"cudnn graph {self.name!r}: {len(self._nodes)} operations; the "
                                              "emulation runs one operation per graph (no fusion)")
        node = self._nodes[0]
        compute = node.params.get("compute_data_type") or self.compute_data_type
        if compute is not data_type.FLOAT:
            raise cudnnGraphNotSupportedError(f"{node.op}: compute data type {compute} (only FLOAT is emulated)")
        if node.params.get("peer_stats"):
            raise cudnnGraphNotSupportedError(f"{node.op}: peer_stats are not emulated")

    def build_plans(self, policy: Any = None, ctx: Any = None) -> None:
        """Build the chosen plan."""
        self._advance("built")

    def get_workspace_size(self, handle: Any = None, override_uids: Any = None, override_shapes: Any = None,
                           override_strides: Any = None) -> int:
        """Bytes of device workspace ``execute`` needs."""
        if self._stage < _STAGES.index("built"):
            raise RuntimeError(f"cudnn graph {self.name!r}: get_workspace_size needs build_plans() first")
        return _WORKSPACE[self._nodes[0].op]

    # -- running --------------------------------------------------------------------------------------
    def _uid_of(self, key: Any) -> int:
        if isinstance(key, Tensor):
            if key._graph is not self:
                raise ValueError(f"variant pack: tensor {key.name!r} belongs to another graph")
            return key.uid
        if isinstance(key, str):
            found = [t for t in self._tensors if t.name == key]
            if len(found) != 1:
                raise ValueError(f"variant pack: no single tensor is named {key!r}")
            return found[0].uid
        return operator.index(key)

    def execute(self, tensor_dict: dict[Any, Any], workspace: Any = None, handle: Any = None, override_uids: Any = None,
                override_shapes: Any = None, override_strides: Any = None, tensor_uids: Any = None) -> None:
        """Run the built plan on the handle's stream: ``tensor_dict`` maps each non-virtual tensor (or its uid or
        name) to a device address (pass-by-value scalars: a host address, an int); ``workspace`` is the address of
        at least :meth:`get_workspace_size` bytes. The ``override_*`` and ``tensor_uids`` forms are not emulated."""
        node = self._nodes[0] if self._nodes else None
        what = f"cudnn {node.op if node else 'graph'} {self.name!r}"
        if any(v is not None for v in (override_uids, override_shapes, override_strides, tensor_uids)):
            raise NotImplementedError(f"{what}: override_uids/shapes/strides and tensor_uids are not emulated")
        if self._stage != len(_STAGES) - 1:
            raise RuntimeError(f"{what}: execute needs a built plan (validate, build_operation_graph, "
                               f"create_execution_plans, check_support, build_plans); the graph is "
                               f"{_STAGES[self._stage]}")
        h = _live(handle if handle is not None else self._handle, "cudnn.pygraph.execute")
        if self._handle is None and handle is None:
            raise RuntimeError(f"{what}: no handle (give one to pygraph() or execute())")
        device_id = _state.current_device_id()
        if device_id != h._ordinal:
            raise _EmulatedGPUError(f"{what}: the handle belongs to gpu({h._ordinal}) but gpu({device_id}) is current")
        pack = {self._uid_of(k): v for k, v in tensor_dict.items() if k is not None}
        arrays: dict[str, np.ndarray] = {}
        reads: list[Any] = []
        writes: list[Any] = []
        produced = {id(t) for t in node.outputs.values()}
        for port, t in list(node.inputs.items()) + list(node.outputs.items()):
            if t.is_virtual:
                raise cudnnGraphNotSupportedError(f"{what}: {port} ({t.name!r}) is virtual; mark it set_output(True)")
            if t.uid not in pack:
                raise ValueError(f"{what}: the variant pack is missing a buffer for tensor uid {t.uid} ({t.name!r})")
            if t.is_pass_by_value:
                arrays[port] = _host_scalar(pack[t.uid], t, what)
                continue
            view, rng = _device_view(pack[t.uid], t, device_id, f"{what}: {port} ({t.name!r})")
            arrays[port] = view
            (writes if id(t) in produced else reads).append(rng)
        size = _WORKSPACE[node.op]
        if workspace is None or operator.index(workspace) == 0:
            raise _EmulatedGPUError(f"{what}: no workspace, but the plan needs {size} bytes (get_workspace_size())")
        try:
            allocation, offset = _memory.resolve(operator.index(workspace), size, device_id)
        except _EmulatedGPUError as exc:
            raise _EmulatedGPUError(f"{what}: the workspace must hold get_workspace_size() = {size} bytes of "
                                   f"gpu({device_id}) memory: {exc}") from None
        writes.append((allocation, offset, offset + size))
        for i, a in enumerate(writes[:-1]):
            for b in reads + writes[i + 1:]:
                if a[0] is b[0] and a[1] < b[2] and b[1] < a[2]:
                    raise _EmulatedGPUError(f"{what}: an output overlaps another buffer of the call in {a[0]!r}")
        stream = _streams.stream_from_ptr(h.stream, device_id)
        capture = None
        if _streams.active_captures:
            from ..fakecupy import _graph  # noqa: PLC0415 - only under capture

            capture = _graph.issue(stream, what)
        compute = _COMPUTE[node.op]

        def run() -> None:
            compute(node, arrays)

        _core.check_access(stream, reads, writes, what)
        _core.record_access(stream, reads, writes)
        run()
        if capture is not None:
            capture.add(f"cudnn.{node.op}", run, reads, writes)
        else:
            _counters.counters[device_id].kernel_launches[f"cudnn.{node.op}"] += 1


def _data_type_not_set() -> data_type:
    return data_type.NOT_SET


def _span(t: Tensor) -> int:
    return 1 + sum((d - 1) * s for d, s in zip(t.dim, t.stride))


def _device_view(ptr: Any, t: Tensor, device_id: int, what: str) -> tuple[np.ndarray, tuple[Any, int, int]]:
    try:
        ptr = operator.index(ptr)
    except TypeError:
        raise TypeError(f"{what}: the emulated frontend takes device addresses (int), got "
                        f"{type(ptr).__name__}") from None
    storage = _STORAGE[t.data_type]
    nbytes = _span(t) * storage.itemsize
    if ptr % storage.itemsize:
        raise _EmulatedGPUError(f"{what}: address {ptr:#x} is not aligned to its {storage.itemsize}-byte elements")
    try:
        allocation, offset = _memory.resolve(ptr, nbytes, device_id)
    except _EmulatedGPUError as exc:
        raise _EmulatedGPUError(f"{what}: dims {t.dim}, strides {t.stride} need {nbytes} bytes: {exc}") from None
    view = np.ndarray(tuple(t.dim), storage, buffer=allocation.block.buf, offset=offset,
                      strides=tuple(s * storage.itemsize for s in t.stride))
    return view, (allocation, offset, offset + nbytes)


def _host_scalar(value: Any, t: Tensor, what: str) -> np.ndarray:
    storage = _STORAGE.get(t.data_type)
    if storage is None:
        raise ValueError(f"{what}: pass-by-value {t.name!r} has data type {t.data_type}")
    if hasattr(value, "__dlpack__"):  # the frontend reads a buffer object through __dlpack__(stream=-1)
        if isinstance(value, np.ndarray):
            raise RuntimeError(f"{what}: pass-by-value {t.name!r}: NumPy only supports stream=None. (the frontend "
                               "reads a NumPy array through __dlpack__(stream=-1); pass its host address, "
                               "numpy_array.ctypes.data)")
        raise TypeError(f"{what}: the emulated frontend takes pass-by-value {t.name!r} as a host address (int), got "
                        f"{type(value).__name__}")
    ptr = operator.index(value)
    try:
        allocation, _ = _memory.resolve(ptr, storage.itemsize)
    except _EmulatedGPUError:
        allocation = None
    if allocation is not None:
        raise _EmulatedGPUError(f"{what}: pass-by-value {t.name!r} ({ptr:#x}) points into device memory "
                               f"({allocation!r}); pass a host address (numpy_array.ctypes.data)")
    return np.frombuffer(ctypes.string_at(ptr, storage.itemsize), storage)[0].copy()


# -- validation per op -------------------------------------------------------------------------------------
def _check_io(node: _Node, ports: tuple[str, ...]) -> None:
    for port in ports:
        t = node.inputs.get(port) or node.outputs.get(port)
        if t.data_type not in _IO:
            raise ValueError(f"{node.op}: {port} ({t.name!r}) has data type {t.data_type}; convolution and batch "
                             "norm data is FLOAT, HALF or BFLOAT16")


def _conv_geometry(node: _Node) -> tuple[list[int], ...]:
    first = node.inputs["image"] if "image" in node.inputs else node.outputs["DX"]
    sp = len(first.dim) - 2
    p = node.params
    pre, post = p["pre_padding"] or [0] * sp, p["post_padding"] or [0] * sp
    stride, dilation = p["stride"] or [1] * sp, p["dilation"] or [1] * sp
    if not len(pre) == len(post) == len(stride) == len(dilation) == sp:
        raise ValueError(f"{node.op}: padding {pre}/{post}, stride {stride} and dilation {dilation} need one value "
                         f"per spatial axis ({sp})")
    if min(stride + dilation) < 1 or min(pre + post) < 0:
        raise ValueError(f"{node.op}: stride {stride} and dilation {dilation} must be >= 1, padding >= 0")
    return pre, post, stride, dilation


def _validate_conv(graph: pygraph, node: _Node) -> None:
    if node.op == "conv_fprop":
        x, w, y = node.inputs["image"], node.inputs["weight"], node.outputs["Y"]
    elif node.op == "conv_dgrad":
        y, w, x = node.inputs["loss"], node.inputs["filter"], node.outputs["DX"]
    else:
        x, y, w = node.inputs["image"], node.inputs["loss"], node.outputs["DW"]
    if node.params["convolution_mode"] is not _ConvolutionMode.CROSS_CORRELATION:
        raise ValueError(f"{node.op}: only CROSS_CORRELATION is emulated")
    out = next(iter(node.outputs.values()))
    for t in [t for t in (x, w, y) if t is not out] + [out]:
        if t is out and not t.dim:
            raise ValueError(f"{node.op}: the output {t.name!r} has no dims; declare them with set_dim (cuDNN does "
                             "not infer a gradient's dims)")
        if len(t.dim) not in (4, 5):
            raise ValueError(f"{node.op}: {t.name!r} has dims {t.dim}; convolutions take 4-D or 5-D tensors "
                             "(a 1-D convolution is a 2-D one with height 1)")
    if not len(x.dim) == len(w.dim) == len(y.dim):
        raise ValueError(f"{node.op}: image {x.dim}, filter {w.dim} and output {y.dim} differ in rank")
    _check_io(node, tuple(node.inputs) + tuple(node.outputs))
    if len({x.data_type, w.data_type, y.data_type}) != 1:
        raise ValueError(f"{node.op}: image, filter and output data types differ: {x.data_type}, {w.data_type}, "
                         f"{y.data_type}")
    pre, post, stride, dilation = _conv_geometry(node)
    n, c, *spatial = x.dim
    co, cg, *kernel = w.dim
    if c % cg or co % (c // cg):
        raise ValueError(f"{node.op}: image channels {c} and filter {w.dim} give no whole number of groups")
    want = [n, co] + [(s + a + b - (k - 1) * d - 1) // t + 1
                      for s, a, b, k, d, t in zip(spatial, pre, post, kernel, dilation, stride)]
    if y.dim != want:
        raise ValueError(f"{node.op}: image {x.dim} and filter {w.dim} with padding {pre}/{post}, stride {stride}, "
                         f"dilation {dilation} give output dims {want}, but the output is declared {y.dim}")


def _validate_bn(graph: pygraph, node: _Node) -> None:
    x = node.inputs["input"]
    if len(x.dim) < 3:
        raise ValueError(f"{node.op}: input {x.dim} needs (N, C, ...) dims")
    stats = [1 if i != 1 else d for i, d in enumerate(x.dim)]
    data_ports = ("input", "Y") if node.op != "batchnorm_backward" else ("grad", "input", "DX")
    _check_io(node, data_ports)
    for port in data_ports:
        t = node.inputs.get(port) or node.outputs.get(port)
        if t.dim != x.dim:
            raise ValueError(f"{node.op}: {port} dims {t.dim} differ from the input's {x.dim}")
    for port, t in list(node.inputs.items()) + list(node.outputs.items()):
        if port in data_ports or port in ("epsilon", "momentum"):
            continue
        if t.dim != stats or t.data_type is not data_type.FLOAT:
            raise ValueError(f"{node.op}: {port} ({t.name!r}) must be FLOAT with dims {stats}, got {t.data_type} "
                             f"{t.dim}")
    if node.op != "batchnorm":
        return
    missing = [port for port in ("in_running_mean", "in_running_var", "epsilon", "momentum") if port not in node.inputs]
    if missing:  # what the 1.32 frontend's compiled binding raises when the graph is lowered
        raise TypeError(f"batchnorm(): incompatible function arguments: {', '.join(missing)} given as None (the "
                        "binding has no default for the running statistics, epsilon and momentum)")
    for port in ("epsilon", "momentum"):
        t = node.inputs[port]
        if not t.is_pass_by_value or any(d != 1 for d in t.dim):
            raise ValueError(f"batchnorm: {port} ({t.name!r}) must be a pass-by-value tensor of dims all 1")


_VALIDATE = {"conv_fprop": _validate_conv, "conv_dgrad": _validate_conv, "conv_wgrad": _validate_conv,
             "batchnorm": _validate_bn, "batchnorm_inference": _validate_bn, "batchnorm_backward": _validate_bn}


# -- the arithmetic: float64, rounded once per output -----------------------------------------------------------
def _read(a: np.ndarray) -> np.ndarray:
    return _bf16_to_f32(np.ascontiguousarray(a)).astype(np.float64) if a.dtype == np.uint16 else a.astype(np.float64)


def _write(dst: np.ndarray, value: np.ndarray) -> None:
    dst[...] = _f32_to_bf16(value.astype(np.float32)) if dst.dtype == np.uint16 else value.astype(dst.dtype)


def _windows(a: np.ndarray, kernel: list[int], stride: list[int], dilation: list[int], out: list[int]) -> np.ndarray:
    """(N, C, *P) -> view (N, C, *K, *O) with ``[n, c, *k, *o] = a[n, c, *(o*stride + k*dilation)]``."""
    sn, sc, *ssp = a.strides
    shape = (*a.shape[:2], *kernel, *out)
    strides = (sn, sc, *(s * d for s, d in zip(ssp, dilation)), *(s * t for s, t in zip(ssp, stride)))
    return np.lib.stride_tricks.as_strided(a, shape=shape, strides=strides, writeable=False)


def _conv_parts(node: _Node, x_dim: list[int], w_dim: list[int], y_dim: list[int]) -> tuple[Any, ...]:
    pre, post, stride, dilation = _conv_geometry(node)
    n, c, *_ = x_dim
    co, cg, *kernel = w_dim
    return pre, post, stride, dilation, n, c, co, cg, kernel, c // cg, list(y_dim[2:])


def _cols(xd: np.ndarray, pre: list[int], post: list[int], parts: tuple[Any, ...]) -> np.ndarray:
    *_, stride, dilation, n, c, co, cg, kernel, groups, out = parts
    xpad = np.pad(xd, [(0, 0), (0, 0)] + list(zip(pre, post)))
    win = _windows(xpad, kernel, stride, dilation, out)  # (N, C, *K, *O)
    return win.reshape(n, groups, cg * math.prod(kernel), math.prod(out))


def _compute_conv(node: _Node, arrays: dict[str, np.ndarray]) -> None:
    if node.op == "conv_fprop":
        x, w, y = arrays["image"], arrays["weight"], arrays["Y"]
    elif node.op == "conv_dgrad":
        y, w, x = arrays["loss"], arrays["filter"], arrays["DX"]
    else:
        x, y, w = arrays["image"], arrays["loss"], arrays["DW"]
    parts = _conv_parts(node, list(x.shape), list(w.shape), list(y.shape))
    pre, post, stride, dilation, n, c, co, cg, kernel, groups, out = parts
    w_mat_shape = (groups, co // groups, cg * math.prod(kernel))
    if node.op == "conv_fprop":
        res = np.matmul(_read(w).reshape(w_mat_shape), _cols(_read(x), pre, post, parts))  # (N, G, Co/G, L)
        _write(y, res.reshape(y.shape))
    elif node.op == "conv_wgrad":
        g = _read(y).reshape(n, groups, co // groups, math.prod(out))
        res = np.matmul(g, _cols(_read(x), pre, post, parts).transpose(0, 1, 3, 2)).sum(axis=0)
        _write(w, res.reshape(w.shape))
    else:
        g = _read(y).reshape(n, groups, co // groups, math.prod(out))
        dcols = np.matmul(_read(w).reshape(w_mat_shape).transpose(0, 2, 1), g)  # (N, G, Cg*K, L)
        dcols = dcols.reshape(n, c, *kernel, *out)
        padded = [s + a + b for s, a, b in zip(x.shape[2:], pre, post)]
        gpad = np.zeros((n, c, *padded))
        for tap in np.ndindex(*kernel):
            index = (slice(None), slice(None)) + tuple(slice(k * d, k * d + t * (o - 1) + 1, t)
                                                       for k, d, t, o in zip(tap, dilation, stride, out))
            gpad[index] += dcols[(slice(None), slice(None), *tap)]
        crop = (slice(None), slice(None)) + tuple(slice(a, a + s) for a, s in zip(pre, x.shape[2:]))
        _write(x, gpad[crop])


def _stat_axes(x: np.ndarray) -> tuple[int, ...]:
    return (0,) + tuple(range(2, x.ndim))


def _compute_bn(node: _Node, arrays: dict[str, np.ndarray]) -> None:
    x = _read(arrays["input"])
    axes = _stat_axes(x)
    scale = _read(arrays["scale"])
    if node.op == "batchnorm":
        eps = float(arrays["epsilon"])
        mean = x.mean(axis=axes, keepdims=True)
        inv = 1.0 / np.sqrt(np.square(x - mean).mean(axis=axes, keepdims=True) + eps)
        _write(arrays["Y"], (x - mean) * inv * scale + _read(arrays["bias"]))
        _write(arrays["mean"], mean)
        _write(arrays["inv_var"], inv)
        momentum, count = float(arrays["momentum"]), x.size // x.shape[1]
        unbiased = np.square(x - mean).sum(axis=axes, keepdims=True) / max(count - 1, 1)
        for port, stat in (("mean", mean), ("var", unbiased)):
            _write(arrays[f"next_running_{port}"],
                   (1 - momentum) * _read(arrays[f"in_running_{port}"]) + momentum * stat)
    elif node.op == "batchnorm_inference":
        mean, inv = _read(arrays["mean"]), _read(arrays["inv_variance"])
        _write(arrays["Y"], (x - mean) * inv * scale + _read(arrays["bias"]))
    else:
        g = _read(arrays["grad"])
        mean, inv = _read(arrays["mean"]), _read(arrays["inv_variance"])
        count = x.size // x.shape[1]
        xhat = (x - mean) * inv
        dbias = g.sum(axis=axes, keepdims=True)
        dscale = (g * xhat).sum(axis=axes, keepdims=True)
        _write(arrays["DX"], scale * inv * (g - dbias / count - xhat * dscale / count))
        _write(arrays["DScale"], dscale)
        _write(arrays["DBias"], dbias)


_COMPUTE = {"conv_fprop": _compute_conv, "conv_dgrad": _compute_conv, "conv_wgrad": _compute_conv,
            "batchnorm": _compute_bn, "batchnorm_inference": _compute_bn, "batchnorm_backward": _compute_bn}
