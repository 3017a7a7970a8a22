"""Tensor: an array on one device, with define-by-run autograd.

A :class:`Tensor` wraps one NumPy (CPU device) or CuPy (GPU device) array. Inside
``autograd.record()`` every primitive op (the op library, :mod:`mxlite.ops`) that consumes a tensor
needing a gradient attaches a :class:`_Node` to its result (:func:`op_result`): the parents and a
closure computing the parents' gradients from the result's gradient (micrograd's shape, with the
backward beside the forward in each op).

This module is the engine: Tensor's data, device, gradient buffer, faces and ``backward``. The op
library stands above it and completes the class at import: Tensor's operators and op methods
(``x + y``, ``x.sum()``, ``x.reshape(...)``, ``x.to(device)``) are attached by ``mxlite/ops/_methods.py``,
and row-sparse gradients are handled through the functions ``mxlite/ops/sparse.py`` registers here
(:func:`register_row_sparse`). So nothing here imports an op.

``backward`` walks the graph in dependency order (Kahn's algorithm): a tensor is processed
once every consumer has sent its gradient. A leaf's gradient is written (``grad_req='write'``)
or added (``'add'``) into its ``grad`` buffer *in place*, so a parameter's gradient stays a
view into its flat arena; then the leaf's ready-hooks run. Leaves therefore become final in the
order backward produces them, which is what the communication layer overlaps with. A recorded
result given a buffer by ``attach_grad`` (MXNet 2.x) gets a copy of its gradient on the way.

``autograd.grad`` (returned gradients, ``create_graph`` for higher orders) is :mod:`.higher_order`:
it walks the same nodes, with each op's differentiable backward where the pass must be recorded.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from .. import device as _device
from ..device.copy import copy_between
from . import _state

Array = Any  # numpy.ndarray or cupy.ndarray
BackwardFn = Callable[[Array], Sequence[Array | None]]

_GRAD_REQS = ("write", "add", "null")
# The running backward pass (per thread): ids of the leaves whose gradient an op may write in place.
_pass = threading.local()


class _Node:
    """How a recorded result was made: its parents and the closure giving their gradients.

    ``call`` is the op's call, ``(function, args, kwargs)``, kept by the ops' ``_op`` decorator
    (None for ops without one): :mod:`.higher_order` reads the op's arguments from it when it
    differentiates the backward pass itself (``autograd.grad(..., create_graph=True)``).
    """

    __slots__ = ("parents", "backward", "op", "call")

    def __init__(self, op: str, parents: tuple[Tensor, ...], backward: BackwardFn) -> None:
        self.op = op
        self.parents = parents
        self.backward = backward
        self.call: tuple[Callable, tuple, dict] | None = None


def recorded_op(t: Tensor) -> tuple[str, tuple[Tensor, ...], tuple[Callable, tuple, dict] | None] | None:
    """How ``t`` was made under ``record()``, read-only, for tools that walk the graph (``HybridBlock.export``):
    ``(op name, parent tensors, (function, args, kwargs) or None)``; None for a leaf or an unrecorded result."""
    node = t._node
    return None if node is None else (node.op, node.parents, node.call)


def describe(x: object) -> str:
    """A short description of ``x`` for error messages: ``float32[2, 3]@cpu(0)`` for a Tensor, else its type's name."""
    if isinstance(x, Tensor):
        return f"{x.dtype}{list(x.shape)}@{x.device}"
    return type(x).__name__


class Tensor:
    """An n-dimensional array on one device, recording operations for autograd.

    Build tensors with :func:`mxlite.array`, :func:`mxlite.zeros` and friends rather than
    this constructor, which wraps an existing NumPy/CuPy array without copying.

    Attributes:
        shape, dtype, ndim, size: as NumPy's.
        device: the :class:`~mxlite.Device` holding the data.
        grad: the gradient buffer after :meth:`attach_grad`, else ``None``.
    """

    __slots__ = ("_data", "_device", "_grad", "_grad_req", "_node", "_fresh_grad", "_hooks", "__weakref__")
    __array_priority__ = 1000.0  # make ``ndarray + Tensor`` dispatch to Tensor.__radd__

    def __init__(self, data: Array, device: _device.Device | None = None) -> None:
        self._data = data
        self._device = device if device is not None else _device.device_of(data)
        self._grad: Any = None
        self._grad_req = "null"
        self._node: _Node | None = None
        self._fresh_grad = False
        self._hooks: list[Callable[[Tensor], None]] | None = None

    # -- basic properties -----------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """Shape as a tuple of ints."""
        return tuple(self._data.shape)

    @property
    def dtype(self) -> np.dtype:
        """NumPy dtype of the elements."""
        return self._data.dtype

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return self._data.ndim

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(self._data.size)

    @property
    def device(self) -> _device.Device:
        """The device holding this tensor."""
        return self._device

    @property
    def stype(self) -> str:
        """Storage type: always ``'default'`` (dense) for a Tensor."""
        return "default"

    @property
    def array(self) -> Array:
        """The NumPy (CPU device) or CuPy (GPU) array holding this tensor's values: no copy.

        Writing into it changes the tensor without autograd seeing it; the layers above the tensor
        floor (arenas, optimizers, communicators) read and write parameters and gradients through it.
        """
        return self._data

    def rebind(self, array: Array) -> None:
        """Make this tensor view ``array`` (same shape and dtype, on its device) instead of its current one.

        The object stays the same, so every reference to it (a Parameter's, a recorded graph's) sees
        the new array: the flat arenas call this when they grow into a larger buffer.

        Raises:
            ValueError: ``array`` has another shape or dtype.
        """
        if tuple(array.shape) != self.shape or array.dtype != self.dtype:
            raise ValueError(f"rebind: a tensor of shape {self.shape} and dtype {self.dtype} cannot view an array "
                             f"of shape {tuple(array.shape)} and dtype {array.dtype}")
        self._data = array

    @property
    def grad(self) -> Any:
        """Gradient buffer (a Tensor, or a RowSparseTensor for sparse gradients), or None.

        Assigning replaces the buffer backward writes into (a Tensor or RowSparseTensor of this
        tensor's shape, or None); a Parameter uses it to give its mirrors buffers in a flat arena.
        """
        return self._grad

    @grad.setter
    def grad(self, buffer: Any) -> None:
        if buffer is not None and tuple(buffer.shape) != self.shape:
            raise ValueError(f"a gradient buffer of shape {tuple(buffer.shape)} cannot hold the gradient of a "
                             f"tensor of shape {self.shape}")
        self._grad = buffer

    @property
    def grad_req(self) -> str:
        """How backward stores this leaf's gradient: 'write', 'add' or 'null' (settable).

        Raises:
            ValueError: setting another value.
        """
        return self._grad_req

    @grad_req.setter
    def grad_req(self, req: str) -> None:
        if req not in _GRAD_REQS:
            raise ValueError(f"grad_req must be one of {_GRAD_REQS}, got {req!r}")
        self._grad_req = req

    @property
    def fresh_grad(self) -> bool:
        """Whether backward has written this leaf's gradient since the flag was last cleared (settable).

        The Trainer reads it to find parameters whose gradient is stale (MXNet's ``_fresh_grad``).
        """
        return self._fresh_grad

    @fresh_grad.setter
    def fresh_grad(self, value: bool) -> None:
        self._fresh_grad = bool(value)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        body = np.array2string(self.asnumpy(), separator=", ", precision=6)
        return f"tensor({body}, device={self._device}, dtype={self.dtype})"

    # -- conversion -----------------------------------------------------------------------
    def asnumpy(self) -> np.ndarray:
        """A NumPy copy of the data (blocking on GPU: it waits for the device's current stream)."""
        if self._device.is_gpu:
            with self._device.use():
                return self._data.get()
        return np.array(self._data, copy=True)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """NumPy's conversion hook: ``np.asarray(tensor)`` (a host copy; GPU tensors are copied to the host)."""
        out = self.asnumpy()
        return out.astype(dtype) if dtype is not None else out

    def item(self) -> Any:
        """The single element as a Python scalar. Raises ValueError unless size == 1."""
        if self.size != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        return self.asnumpy().reshape(-1)[0].item()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        return bool(self.item())

    def __index__(self) -> int:
        return int(self.item())

    def all(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        """Whether every element (along ``axis``) is true, as a bool tensor (MXNet 2.x's ``ndarray.all``)."""
        with self._device.use():
            return Tensor(self._device.xp.asarray(self._data.all(axis=axis, keepdims=keepdims)), self._device)

    def any(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        """Whether some element (along ``axis``) is true, as a bool tensor (MXNet 2.x's ``ndarray.any``)."""
        with self._device.use():
            return Tensor(self._device.xp.asarray(self._data.any(axis=axis, keepdims=keepdims)), self._device)

    def wait_to_read(self) -> None:
        """Block until the data is computed (synchronises the device's stream on GPU)."""
        if self._device.is_gpu:
            with self._device.use():
                self._device.xp.cuda.get_current_stream().synchronize()

    # -- DLPack ---------------------------------------------------------------------------
    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        if stream is None:
            return self._data.__dlpack__(**kwargs)
        return self._data.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._data.__dlpack_device__()

    # -- autograd -------------------------------------------------------------------------
    def attach_grad(self, grad_req: str = "write", stype: str | None = None) -> None:
        """Allocate a zero gradient buffer that backward writes this tensor's gradient into.

        On a leaf (a tensor not computed inside ``record()``, or computed from tensors needing no
        gradient) this makes it a variable of later recordings. On a recorded result, as in MXNet 2.x,
        the graph stays: backward writes the gradient reaching this tensor into the buffer and goes on
        to its inputs (:meth:`detach` makes a new leaf instead; :meth:`drop_grad` undoes this).

        Args:
            grad_req: 'write' (backward overwrites the buffer), 'add' (accumulates) or
                'null' (no gradient).
            stype: None/'default' for a dense buffer, 'row_sparse' for a sparse one.

        Raises:
            ValueError: unknown grad_req or stype; TypeError: integer tensors have no gradient.
        """
        if grad_req not in _GRAD_REQS:
            raise ValueError(f"grad_req must be one of {_GRAD_REQS}, got {grad_req!r}")
        if grad_req != "null" and not np.issubdtype(self.dtype, np.floating):
            raise TypeError(f"attach_grad: {self.dtype} tensors cannot have gradients")
        if grad_req == "null":
            self._grad = None
        elif stype in (None, "default"):
            with self._device.use():  # on this tensor's GPU, not the current one
                self._grad = _face(self)(self._device.xp.zeros_like(self._data), self._device)
        elif stype == "row_sparse":
            self._grad = _row_sparse_gradients().zeros(self.shape, self.dtype, self._device)
        else:
            raise ValueError(f"stype must be 'default' or 'row_sparse', got {stype!r}")
        self._grad_req = grad_req

    def drop_grad(self) -> None:
        """Forget the gradient buffer (MXNet 2.x's ``drop_grad``): ``grad`` becomes None, ``grad_req`` 'null'.

        A leaf then receives no gradient at all; a recorded result still passes the gradients reaching
        it on to its inputs, without keeping them. Does nothing on a tensor without a buffer.
        """
        self._grad = None
        self._grad_req = "null"

    def _requires_grad(self) -> bool:
        return self._node is not None or self._grad_req != "null"

    def add_ready_hook(self, hook: Callable[[Tensor], None]) -> None:
        """Call ``hook(self)`` each time backward has finished writing this leaf's gradient.

        The gradient is final when the hook runs (every consumer has sent its part), so gradient
        synchronisation can start on it while backward goes on (the buckets' overlap).
        """
        if self._hooks is None:
            self._hooks = []
        self._hooks.append(hook)

    def detach(self) -> Tensor:
        """A tensor sharing this one's data, outside any graph (with this one's face, ``mx.nd`` or not)."""
        return _face(self)(self._data, self._device)

    def backward(self, out_grad: Tensor | None = None, retain_graph: bool = False, train_mode: bool = True) -> None:
        """Compute gradients of this tensor w.r.t. every leaf it depends on.

        ``out_grad`` defaults to ones (so a non-scalar head means the gradient of its sum).
        """
        backward([self], None if out_grad is None else [out_grad], retain_graph, train_mode)

    # -- copies between devices -----------------------------------------------------------
    @property
    def context(self) -> _device.Device:
        """MXNet 1.x's name of :attr:`device`."""
        return self._device

    ctx = context

    def copy(self) -> Tensor:
        """A copy of the data on the same device, outside any graph (MXNet's ``copy``)."""
        with self._device.use():
            return _face(self)(self._data.copy(), self._device)

    def asscalar(self) -> Any:
        """The single element as a NumPy scalar of this tensor's dtype (MXNet's ``asscalar``).

        Raises:
            ValueError: the tensor does not have exactly one element.
        """
        if self.size != 1:
            raise ValueError(f"asscalar() needs a tensor with one element, got shape {self.shape}")
        return self.asnumpy().reshape(-1)[0]

    def tolist(self) -> Any:
        """The data as nested Python lists."""
        return self.asnumpy().tolist()

    def copyto(self, other: Tensor | _device.Device) -> Tensor:
        """Copy into ``other``'s buffer (a Tensor of the same shape, or a RowSparseTensor, which takes the
        non-zero rows) or onto a device.

        Raises:
            ValueError: shape mismatch with the destination tensor.
        """
        if isinstance(other, Tensor):
            if other.shape != self.shape:
                raise ValueError(f"copyto: shape mismatch, source {self.shape} vs destination {other.shape}")
            other[...] = self
            return other
        if getattr(other, "stype", None) == "row_sparse":  # a RowSparseTensor destination takes our non-zero rows
            return _row_sparse_gradients().from_dense(self._data, self._device).copyto(other)
        dev = _device.as_device(other)
        return _face(self)(copy_between(self._data, self._device, dev, copy=True), dev)

    # -- faces: mx.nd (MXNet 1.x NDArray) and mx.np (2.x ndarray) --------------------------------
    def as_nd_ndarray(self) -> Tensor:
        """This array with ``mx.nd``'s face (MXNet 1.x ``NDArray``): its ``reshape`` method takes MXNet's
        codes (0, -1, -2, -3, -4, ``reverse=``). Shares the data and the gradient; an ``mx.nd`` array
        returns itself."""
        return self if type(self) is NDTensor else _face_view(self, NDTensor)

    def as_np_ndarray(self) -> Tensor:
        """This array with ``mx.np``'s face (MXNet 2.x ``ndarray``): NumPy's ``reshape``. Shares the data
        and the gradient; an array that already has that face returns itself."""
        return _face_view(self, Tensor) if type(self) is NDTensor else self

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, Tensor):
            value = copy_between(value._data, value._device, self._device, copy=False)
        elif isinstance(value, np.ndarray) and self._device.is_gpu:
            value = copy_between(value, _device.cpu(0), self._device, copy=False)
        with self._device.use():
            self._data[index_key(key, self._device)] = value


def index_key(key: Any, device: _device.Device) -> Any:
    """An index into an array on ``device``: Tensors replaced by their arrays, index arrays (Tensors of another
    device, NumPy arrays for a GPU) copied onto ``device``, float index arrays (``mx.nd.array([0, 2])``) made int64.

    Call it with ``device`` current (inside ``device.use()``): the conversions it makes are work on that device.
    """
    def one(k: Any) -> Any:
        if isinstance(k, Tensor):
            k = copy_between(k._data, k._device, device, copy=False)
        elif isinstance(k, np.ndarray) and k.ndim and device.is_gpu:
            k = copy_between(k, _device.cpu(0), device, copy=False)
        dtype = getattr(k, "dtype", None)
        if dtype is not None and getattr(k, "ndim", 0) and np.issubdtype(dtype, np.floating):
            k = k.astype(np.int64)
        return k

    return tuple(one(k) for k in key) if isinstance(key, tuple) else one(key)


# -- the mx.nd face ----------------------------------------------------------------------------
# An array made by ``mx.nd`` is an NDTensor: a Tensor whose methods follow MXNet 1.x's NDArray where
# they differ from 2.x's ``mx.np`` ndarray (``reshape`` takes MXNet's codes; fluent methods). The face
# is the class, so it costs nothing per element and one class check per op: ``op_result`` gives an op's
# output the face of its inputs, so it survives arithmetic, layers and autograd (a gradient buffer has its
# array's face). A thin subclass rather than a flag: the methods that differ are simply overridden, where
# a flag would need each of them to test it. The op library attaches the methods that differ (``reshape``,
# ``argmax``, the comparisons, ...), as it attaches Tensor's (mxlite/ops/_methods.py).
class NDTensor(Tensor):
    """A :class:`Tensor` with ``mx.nd``'s face (MXNet 1.x ``NDArray``), as the ``mx.nd`` functions make.

    Differs from a plain Tensor (``mx.np``'s face) only where MXNet 1.x's NDArray differs from 2.x's
    ndarray: :meth:`reshape` takes MXNet's codes and ``reverse=``, comparisons and logic (``==``, ``>``,
    ``~``, ``&``, ...) give 1 and 0 in the operands' dtype, an op result is never 0-d (``x[0]`` of a 1-D
    array has shape ``(1,)``), and MXNet 1.x's fluent methods that a Tensor lacks are there
    (``x.softmax(axis=1)`` is ``mx.nd.softmax(x, axis=1)``). Ops with an NDTensor
    operand give NDTensors, and so does a Block given one. ``isinstance(x, Tensor)`` holds;
    :meth:`Tensor.as_np_ndarray` and :meth:`Tensor.as_nd_ndarray` switch faces without a copy.
    """

    __slots__ = ()

    # mx.nd's functions by name, for fluent methods (filled by mxlite.arrays.nd, which stands above this floor)
    fluent: dict[str, Callable[..., Any]] = {}

    def __getattr__(self, name: str) -> Any:
        # Only reached for names a Tensor lacks: MXNet 1.x's fluent methods (x.softmax(), x.split(2), ...).
        fn = NDTensor.fluent.get(name)
        if fn is None or name.startswith("_"):
            raise AttributeError(f"'NDArray' (mx.nd array) object has no attribute {name!r}")
        return functools.partial(fn, self)


NDTensor.__hash__ = object.__hash__  # type: ignore[assignment]


def _face(t: Tensor) -> type[Tensor]:
    """The class a new array derived from ``t`` gets: NDTensor for an mx.nd array, else Tensor."""
    return NDTensor if t.__class__ is NDTensor else Tensor


def _face_view(t: Tensor, cls: type[Tensor]) -> Tensor:
    """``t``'s data with the face ``cls`` and ``t``'s place in autograd (MXNet's shallow copy).

    While recording, the view is an identity op of ``t``; otherwise it shares ``t``'s node, gradient
    buffer and ``grad_req``, so a gradient reaching it reaches ``t``'s gradient buffer.
    """
    if _state.is_recording() and t._requires_grad():
        out = op_result("as_" + ("nd" if cls is NDTensor else "np") + "_ndarray", t._data, t._device, (t,),
                        lambda g: (g,))
        out.__class__ = cls
        return out
    out = cls(t._data, t._device)
    out._node, out._grad, out._grad_req, out._hooks = t._node, t._grad, t._grad_req, t._hooks
    return out


# -- graph construction -----------------------------------------------------------------------
def op_result(op: str, data: Array, device: _device.Device, parents: tuple[Tensor, ...],
              backward_fn: BackwardFn) -> Tensor:
    """Wrap ``data`` as an op's output, recording a node when some parent needs a gradient: how every op of
    the op library makes its result (``backward_fn`` maps the output's raw gradient to one raw gradient, or
    None, per parent).

    The output has the ``mx.nd`` face (:class:`NDTensor`) when any parent has it, else it is a plain Tensor.
    """
    cls = Tensor
    for p in parents:
        if p.__class__ is NDTensor:
            cls = NDTensor
            break
    out = cls(data, device)
    if _state._FLAGS.recording:  # the flag itself: this runs once per op
        for p in parents:
            if p._node is not None or p._grad_req != "null":  # p._requires_grad(), inlined
                out._node = _Node(op, parents, backward_fn)
                break
    return out


def unbroadcast(grad: Array, shape: tuple[int, ...]) -> Array:
    """Sum ``grad`` down to ``shape``, undoing NumPy broadcasting."""
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    if extra:
        grad = grad.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if axes:
        grad = grad.sum(axis=axes, keepdims=True)
    return grad.reshape(shape)


# -- backward ---------------------------------------------------------------------------------
def backward(
    heads: Tensor | Sequence[Tensor],
    head_grads: Sequence[Tensor | None] | None = None,
    retain_graph: bool = False,
    train_mode: bool = True,
) -> None:
    """Back-propagate from ``heads`` (e.g. one loss per device) into every leaf's ``grad``.

    Each head's graph is independent when heads live on different devices; they are
    processed together. Leaves with ``grad_req='write'`` get the gradient of this pass,
    ``'add'`` accumulate it.

    Raises:
        ValueError: a head was not recorded (no ``autograd.record()``), or head/head_grads
            lengths or shapes disagree.
    """
    heads, head_grads = _check_heads("backward", heads, head_grads)

    # Count, for every tensor reachable from the heads, how many consumers will send it a gradient.
    pending: dict[int, int] = {}
    nodes: dict[int, Tensor] = {}
    stack = list(heads)
    for h in heads:
        nodes[id(h)] = h
    while stack:
        t = stack.pop()
        if t._node is None:
            continue
        for p in t._node.parents:
            if p._node is None and p._grad_req == "null":  # p._requires_grad(), inlined
                continue
            key = id(p)
            pending[key] = pending.get(key, 0) + 1
            if key not in nodes:
                nodes[key] = p
                stack.append(p)

    # Leaves that get exactly one gradient in this pass and overwrite a dense buffer: the op producing
    # that gradient may compute it straight into the buffer (grad_out), saving the copy into the arena.
    direct = {key for key, t in nodes.items() if t._node is None and pending.get(key) == 1
              and t._grad_req == "write" and isinstance(t._grad, Tensor)}
    direct.difference_update(id(h) for h in heads)
    grads: dict[int, Array] = {}
    for h, hg in zip(heads, head_grads):
        _accumulate(grads, h, _head_grad(h, hg))

    ready = [h for h in dict.fromkeys(heads) if pending.get(id(h), 0) == 0]
    outer, _pass.direct = getattr(_pass, "direct", None), direct
    try:
        _run_pass(ready, grads, pending, train_mode, retain_graph)
    finally:
        _pass.direct = outer


def _check_heads(where: str, heads: Tensor | Sequence[Tensor], head_grads: Any) -> tuple[list[Tensor], list[Any]]:
    """``heads`` and ``head_grads`` as lists of the same length, each head checked to be a recorded Tensor."""
    if isinstance(heads, Tensor):
        heads = [heads]
    heads = list(heads)
    if isinstance(head_grads, Tensor):
        head_grads = [head_grads]
    head_grads = [None] * len(heads) if head_grads is None else list(head_grads)
    if len(head_grads) != len(heads):
        raise ValueError(f"{where}: {len(heads)} heads but {len(head_grads)} head_grads")
    for i, (h, hg) in enumerate(zip(heads, head_grads)):
        if not isinstance(h, Tensor):
            raise TypeError(f"{where}: head {i} is a {type(h).__name__}, not a Tensor")
        if not h._requires_grad():
            raise ValueError(
                f"{where}: head {i} ({describe(h)}) is not part of a recorded graph; "
                "compute it inside `with autograd.record():` from tensors with attach_grad() "
                "(to differentiate a graph twice, pass retain_graph=True the first time)"
            )
        if hg is not None and tuple(hg.shape) != h.shape:
            raise ValueError(f"{where}: head_grad shape {tuple(hg.shape)} != head shape {h.shape}")
    return heads, head_grads


def _head_grad(h: Tensor, hg: Any) -> Array:
    """The raw gradient a pass starts from at head ``h``: ``hg``'s array, or ones."""
    if hg is None:
        with h._device.use():
            return h._device.xp.ones_like(h._data)
    return hg._data if isinstance(hg, Tensor) else hg


def _run_pass(ready: list[Tensor], grads: dict[int, Array], pending: dict[int, int], train_mode: bool,
              retain_graph: bool) -> None:
    """Process tensors in dependency order from ``ready`` (see :func:`backward`).

    Work on a GPU tensor runs inside its device's context; a CPU device has none to enter, and skipping
    the ``with`` there is a good part of the engine's time per node.
    """
    with _state._scope(False, train_mode):
        while ready:
            t = ready.pop()
            g = grads.pop(id(t), None)
            node = t._node
            dev = t._device
            on_gpu = dev.device_type != "cpu"
            if node is None or t._grad_req != "null":  # a leaf, or a recorded result given a buffer by attach_grad
                if on_gpu:
                    with dev.use():
                        _write_leaf_grad(t, g)
                else:
                    _write_leaf_grad(t, g)
                if node is None:
                    continue
            if g is None:
                parent_grads = [None] * len(node.parents)
            elif on_gpu:
                with dev.use():
                    parent_grads = node.backward(g)
            else:
                parent_grads = node.backward(g)
            if not retain_graph:
                t._node = None
            for p, pg in zip(node.parents, parent_grads):
                if p._node is None and p._grad_req == "null":  # p._requires_grad(), inlined
                    continue
                key = id(p)
                if pg is not None:
                    if p._device.device_type != "cpu":
                        with p._device.use():
                            _accumulate(grads, p, pg)
                    else:
                        _accumulate(grads, p, pg)
                left = pending[key] - 1
                pending[key] = left
                if left == 0:
                    ready.append(p)


def grad_out(t: Tensor, dtype: Any) -> Array | None:
    """The array an op's backward may compute ``t``'s gradient into (``out=``), or None.

    Only while ``backward`` runs, and only for a leaf with ``grad_req='write'`` whose dense, C-contiguous
    gradient buffer has ``dtype`` and that receives exactly one gradient in this pass (one consumer): its
    gradient buffer (for a Parameter, the view of the arena). An op that writes there must return that very
    array as the gradient; the engine then skips the copy into the buffer.
    """
    direct = getattr(_pass, "direct", None)
    if not direct or id(t) not in direct:
        return None
    buf = t._grad._data
    if buf.dtype != dtype or not buf.flags.c_contiguous:
        return None
    return buf


def _accumulate(grads: dict[int, Array], t: Tensor, g: Any) -> None:
    key = id(t)
    if key in grads:
        prev = grads[key]
        if _is_sparse(prev) or _is_sparse(g):
            grads[key] = _row_sparse_gradients().add(prev, g, t.shape)
        else:
            grads[key] = prev + g
    else:
        grads[key] = g


def _is_sparse(g: Any) -> bool:
    return hasattr(g, "indices") and hasattr(g, "stype")


# -- row-sparse gradients ------------------------------------------------------------------------
class RowSparseGradients(NamedTuple):
    """What the engine does with row-sparse gradients (``Embedding(sparse_grad=True)``, ``attach_grad(stype=
    'row_sparse')``), whose type, ``RowSparseTensor``, is the op library's (:mod:`mxlite.ops.sparse`): that
    module stands above this one and registers these functions at import (:func:`register_row_sparse`).

    Attributes:
        zeros: ``zeros(shape, dtype, device)``, an empty row-sparse buffer.
        from_dense: ``from_dense(array, device)``, the rows of a raw dense array holding any non-zero.
        add: ``add(a, b, shape)``, the sum of two gradients, each a raw dense array or row-sparse
            (row-sparse when both are, else a raw dense array).
    """

    zeros: Callable[[tuple[int, ...], Any, _device.Device], Any]
    from_dense: Callable[[Array, _device.Device], Any]
    add: Callable[[Any, Any, tuple[int, ...]], Any]


_row_sparse: list[RowSparseGradients] = []  # the registered functions (one entry)


def register_row_sparse(functions: RowSparseGradients) -> None:
    """Give the engine the row-sparse gradient functions (``mxlite.ops.sparse`` calls this once, at import)."""
    _row_sparse[:] = [functions]


def _row_sparse_gradients() -> RowSparseGradients:
    if not _row_sparse:
        raise RuntimeError("row-sparse gradients need mxlite.ops.sparse, which registers them at import "
                           "(import mxlite, not mxlite.autograd alone)")
    return _row_sparse[0]


def _write_leaf_grad(t: Tensor, g: Any) -> None:
    """Store a leaf's final gradient of this pass according to its grad_req, in place."""
    req = t._grad_req
    if req == "null" or g is None:
        return
    buf = t._grad
    if getattr(buf, "stype", None) == "row_sparse":
        row_sparse = _row_sparse_gradients()
        rs = g if _is_sparse(g) else row_sparse.from_dense(g, t._device)
        t._grad = rs if req == "write" else row_sparse.add(buf, rs, t.shape)
    else:
        if _is_sparse(g):
            g = g.dense_array()
        if g is buf._data:  # the op wrote it in place (grad_out)
            pass
        elif req == "write":
            buf._data[...] = g.astype(buf.dtype, copy=False)
        else:
            buf._data += g.astype(buf.dtype, copy=False)
    t._fresh_grad = True
    if t._hooks:
        for hook in t._hooks:
            hook(t)
