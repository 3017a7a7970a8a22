"""Parameter: a learnable tensor mirrored on every device it was initialised on.

Each mirror is a view into its device's flat arena (see :mod:`mxlite.store`): data in
registration order, gradient in reverse order. All mirrors start with identical values (the
initializer runs once on the host) and the Trainer keeps them identical.

Shapes may be partly unknown (``-1`` or ``0`` entries) with ``allow_deferred_init=True``:
``initialize`` then only records the request, and the owning layer completes it during the
first forward pass once the input shape is known (``Dense(10)`` without ``in_units``).

Gradients read between backward and the Trainer's step are the sums when the Trainer overlaps its
all-reduce with backward (the default): on GPUs those sums may still be running when backward returns,
so ``grad``, ``list_grad``, ``data``, ``list_data`` and ``zero_grad`` first make each device's current
stream wait for them (:func:`mxlite.comm.buckets.wait_for_reductions`; nothing to wait for costs one test).
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import initializer as _init
from ..autograd.tensor import Tensor
from ..comm.buckets import wait_for_reductions
from ..device import Device, as_device, cpu, current_device
from ..formats import _messages
from ..formats.archive import describe_arrays, load_arrays, save_arrays
from ..formats.mxnet_params import strip_arg_aux_prefixes
from ..ops import sparse
from ..store import Arena, ParameterStore, Slot

__all__ = ["Parameter", "ParameterDict", "Constant", "DeferredInitializationError"]

_GRAD_REQS = ("write", "add", "null")


class DeferredInitializationError(RuntimeError):
    """A parameter's initialisation was deferred and has not happened yet (no forward pass)."""


def _normalize_shape(shape: Any) -> tuple[int, ...] | None:
    if shape is None:
        return None
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    return tuple(-1 if int(n) <= 0 else int(n) for n in shape)


def _device_list(device: Device | str | Sequence[Device] | None) -> list[Device]:
    if device is None:
        devices = [current_device()]
    elif isinstance(device, (Device, str)):
        devices = [as_device(device)]
    else:
        devices = [as_device(d) for d in device]
    if not devices:
        raise ValueError("device list is empty")
    seen: set[Device] = set()
    dups = [d for d in devices if d in seen or seen.add(d)]  # type: ignore[func-returns-value]
    if dups:
        raise ValueError(f"duplicate devices in {devices}: {sorted(set(map(str, dups)))}; each device may appear once")
    return devices


class Parameter:
    """A learnable parameter with one mirror per device (Gluon's ``Parameter``).

    Args:
        name: short name (``'weight'``); the name a Block collects it under is longer
            (``'0.weight'``) and is what error messages and checkpoints use.
        grad_req: 'write', 'add' (accumulate across backward calls) or 'null' (no gradient).
        shape: int or tuple; entries <= 0 are unknown until deferred initialisation.
        dtype: element dtype (default float32).
        lr_mult, wd_mult: multipliers of the optimizer's learning rate and weight decay.
        init: this parameter's own initializer (wins over the one given to Block.initialize).
        allow_deferred_init: allow ``initialize`` before the shape is complete.
        differentiable: False makes grad_req 'null'.
        grad_stype: 'default' (dense, in the arena) or 'row_sparse' (e.g. sparse embeddings).

    Raises:
        ValueError: unknown grad_req or grad_stype.
    """

    def __init__(self, name: str = "weight", grad_req: str = "write", shape: Any = None, dtype: Any = np.float32,
                 lr_mult: float = 1.0, wd_mult: float = 1.0, init: Any = None, allow_deferred_init: bool = False,
                 differentiable: bool = True, stype: str = "default", grad_stype: str = "default") -> None:
        if not differentiable:
            grad_req = "null"
        if grad_req not in _GRAD_REQS:
            raise ValueError(f"Parameter {name!r}: grad_req must be one of {_GRAD_REQS}, got {grad_req!r}")
        if grad_stype not in ("default", "row_sparse"):
            raise ValueError(f"Parameter {name!r}: grad_stype must be 'default' or 'row_sparse', got {grad_stype!r}")
        if stype != "default":
            raise ValueError(f"Parameter {name!r}: only stype='default' weights are supported, got {stype!r}")
        self.name = name
        self._path: str | None = None  # the name a Block collected it under
        self._grad_req = grad_req
        self._shape = _normalize_shape(shape)
        self.dtype = np.dtype(dtype)
        self.lr_mult = lr_mult
        self.wd_mult = wd_mult
        self.init = init
        self.allow_deferred_init = allow_deferred_init
        self._differentiable = differentiable
        self._stype = stype
        self._grad_stype = grad_stype
        self._slots: dict[Device, tuple[Arena, Slot]] = {}
        self._store: ParameterStore | None = None
        self._deferred: tuple[Any, bool, list[Device], ParameterStore] | None = None

    # -- naming and attributes ------------------------------------------------------------
    @property
    def label(self) -> str:
        """The name used in messages: the collected name if known, else ``name``."""
        return self._path or self.name

    def __repr__(self) -> str:
        return f"Parameter {self.label} (shape={self.shape}, dtype={self.dtype})"

    @property
    def shape(self) -> tuple[int, ...] | None:
        """The shape; unknown entries are -1 until deferred initialisation."""
        return self._shape

    @shape.setter
    def shape(self, new_shape: Any) -> None:
        new_shape = _normalize_shape(new_shape)
        if self._shape is None or new_shape is None:
            self._shape = new_shape
            return
        if len(self._shape) != len(new_shape) or any(
            a != -1 and b != -1 and a != b for a, b in zip(self._shape, new_shape)
        ):
            raise ValueError(
                f"Parameter '{self.label}': expected shape {self._shape} is incompatible with given shape {new_shape}"
            )
        self._shape = tuple(b if a == -1 else a for a, b in zip(self._shape, new_shape))

    def _shape_known(self) -> bool:
        return self._shape is not None and all(n > 0 for n in self._shape)

    @property
    def grad_req(self) -> str:
        """'write', 'add' or 'null'; changing it after initialisation keeps the values."""
        return self._grad_req

    @grad_req.setter
    def grad_req(self, req: str) -> None:
        if req not in _GRAD_REQS:
            raise ValueError(f"Parameter '{self.label}': grad_req must be one of {_GRAD_REQS}, got {req!r}")
        if not self._differentiable:
            req = "null"
        old, self._grad_req = self._grad_req, req
        if not self._slots or old == req:
            return
        if (old == "null") != (req == "null"):  # gradient buffer appears or disappears: re-slot
            self._reslot(list(self._slots), self.dtype)
        else:
            for _, slot in self._slots.values():
                slot.data.grad_req = req

    @property
    def grad_stype(self) -> str:
        """Storage of the gradient: 'default' or 'row_sparse'."""
        return self._grad_stype

    @property
    def _grad(self) -> list[Any] | None:
        """MXNet's private gradient list: None when there are no gradients (grad_req 'null' or uninitialised)."""
        return self.list_grad() if self._slots and self._grad_req != "null" else None

    @property
    def is_initialized(self) -> bool:
        """True once the mirrors exist (False while initialisation is deferred)."""
        return bool(self._slots)

    # -- initialisation -------------------------------------------------------------------
    def initialize(self, init: Any = None, device: Any = None, default_init: Any = None,
                   force_reinit: bool = False, *, store: ParameterStore | None = None, defer: bool = False,
                   ctx: Any = None) -> None:
        """Create one mirror per device, all with the same initial values.

        Args:
            init: initializer for this call (wins over ``self.init``).
            device: a Device or a list of distinct Devices (default: the current device).
            default_init: used when neither ``init`` nor ``self.init`` is given, with
                MXNet's name rules (``bias`` -> zeros, ...). Default ``Uniform()``.
            force_reinit: re-initialise even if already initialised.
            store: the ParameterStore whose arenas hold the mirrors (Block.initialize passes
                one per model; a private store otherwise).
            defer: allocate at first use even if the shape is known (Block.initialize uses it
                so that a model's arena order is the order of first use in forward).

        Raises:
            ValueError: duplicate devices, or an unknown shape without ``allow_deferred_init``.

        ``ctx`` is MXNet 1.x's name of ``device``.
        """
        devices = _device_list(device if ctx is None else ctx)
        if self._slots and not force_reinit:
            warnings.warn(f"Parameter '{self.label}' is already initialized, ignoring; "
                          "set force_reinit=True to re-initialize", stacklevel=2)
            return
        if init is not None:
            chosen, own = _init.create(init), True
        elif self.init is not None:
            chosen, own = _init.create(self.init), True
        else:
            chosen, own = _init.create(default_init) or _init.Uniform(), False
        store = store or self._store or ParameterStore()
        if not self._shape_known() or (defer and not self._slots):
            if not self._shape_known() and not self.allow_deferred_init:
                raise ValueError(
                    f"cannot initialize Parameter '{self.label}': its shape {self._shape} is not fully known "
                    "(set allow_deferred_init=True to defer initialisation to the first forward pass)"
                )
            self._deferred = (chosen, own, devices, store)
            return
        self._init_impl(self._initial_values(chosen, own), devices, store)

    def _initial_values(self, initializer: _init.Initializer, own: bool) -> np.ndarray:
        values = np.zeros(self._shape, dtype=np.float64)
        (initializer.init_weight if own else initializer)(self.label, values)
        return values.astype(self.dtype)

    def _init_impl(self, values: np.ndarray, devices: list[Device], store: ParameterStore) -> None:
        if self._slots:
            if list(self._slots) == devices and all(s.shape == values.shape for _, s in self._slots.values()):
                self.set_data(values)
                return
            self._release()
        self._store = store
        self._deferred = None
        for dev in devices:
            self._allocate(dev, store, values)

    def _load_uninitialized(self, value: np.ndarray, devices: list[Device], store: ParameterStore) -> None:
        """Initialise from a loaded ``value`` (its shape completes a deferred one); on failure nothing changes:
        the shape, the deferred initialisation and the slots made so far are restored or released."""
        saved = self._shape, self._deferred, self._store
        try:
            self.shape = value.shape
            deferred = self._deferred
            self._init_impl(value.astype(self.dtype), deferred[2] if deferred else devices,
                            deferred[3] if deferred else (self._store or store))
        except BaseException:
            self._release()
            self._shape, self._deferred, self._store = saved
            raise

    def _allocate(self, dev: Device, store: ParameterStore, values: Any) -> None:
        arena = store.arena(dev, self.dtype)
        dense_grad = self._grad_req != "null" and self._grad_stype == "default"
        slot = arena.add(self, self._shape, with_grad=dense_grad)
        slot.data[...] = values
        leaf = slot.data
        if dense_grad:
            leaf.grad, leaf.grad_req = slot.grad, self._grad_req
        elif self._grad_req != "null":
            leaf.attach_grad(self._grad_req, stype="row_sparse")
        self._slots[dev] = (arena, slot)

    def _release(self) -> None:
        for arena, slot in self._slots.values():
            arena.remove(slot)
        self._slots = {}

    def _reslot(self, devices: list[Device], dtype: Any) -> None:
        values = self._first_mirror().asnumpy().astype(dtype)
        store = self._store or ParameterStore()
        self._release()
        self.dtype = np.dtype(dtype)
        for dev in devices:
            self._allocate(dev, store, values)

    def _finish_deferred_init(self) -> None:
        """Complete a deferred initialisation once the shape is known (called by layers)."""
        if self._slots:
            return
        if self._deferred is None:
            raise self._uninitialized_error()
        if not self._shape_known():
            raise ValueError(f"cannot finish initializing Parameter '{self.label}': shape {self._shape} still unknown")
        chosen, own, devices, store = self._deferred
        self._init_impl(self._initial_values(chosen, own), devices, store)

    def _uninitialized_error(self) -> RuntimeError:
        if self._deferred is not None:
            return DeferredInitializationError(
                f"Parameter '{self.label}' has not been initialized yet because initialization was deferred "
                "(its shape is not known); pass one batch through the network before accessing it"
            )
        return RuntimeError(
            f"Parameter '{self.label}' has not been initialized; call net.initialize() "
            "(or param.initialize()) before using it"
        )

    # -- access ---------------------------------------------------------------------------
    def _materialize(self) -> None:
        """Finish a pending deferred initialisation whose shape is known; else raise."""
        if not self._slots:
            if self._deferred is not None and self._shape_known():
                self._finish_deferred_init()
            else:
                raise self._uninitialized_error()

    def _check_and_get(self, device: Device | None, what: str) -> tuple[Arena, Slot]:
        self._materialize()
        if device is None:
            if len(self._slots) == 1:
                return next(iter(self._slots.values()))
            device = current_device()
        device = as_device(device)
        found = self._slots.get(device)
        if found is None:
            raise RuntimeError(
                f"Parameter '{self.label}' was not initialized on {device}; its {what} lives on "
                f"{list(self._slots)}"
            )
        return found

    def _first_mirror(self) -> Tensor:
        self._materialize()
        return next(iter(self._slots.values()))[1].data

    def data(self, device: Device | str | None = None, ctx: Device | str | None = None) -> Tensor:
        """The mirror on ``device`` (default: the only device, else the current device).

        Its ``.grad`` may be read as :meth:`grad` (the sums of an overlapped all-reduce are waited for).

        Raises:
            RuntimeError: not initialised, or not initialised on ``device`` (lists where it is).
        """
        wait_for_reductions(reading=False)
        return self._check_and_get(device if ctx is None else ctx, "data")[1].data

    def list_data(self) -> list[Tensor]:
        """Every mirror, in the order of ``list_device()`` (their ``.grad`` readable as :meth:`grad`'s)."""
        wait_for_reductions(reading=False)
        self._materialize()
        return [slot.data for _, slot in self._slots.values()]

    def grad(self, device: Device | str | None = None, ctx: Device | str | None = None) -> Any:
        """The gradient buffer on ``device`` (a Tensor, or a RowSparseTensor for sparse grads).

        Between backward and the step, with the Trainer's default ``overlap=True``, it holds the sum over
        devices (and processes) of every bucket backward completed: on GPUs the device's current stream
        first waits for the sums still running, so reads on it see them (see docs/mxnet-differences.md for
        when a mirror still holds its own gradient there).

        Raises:
            RuntimeError: not initialised, not on ``device``, or ``grad_req='null'``.

        Warns:
            UserWarning: once per process, when the gradients are this process's own because the Trainer's
                step runs their all-reduce inside its CUDA graph (one GPU per process; see docs/graphs.md).
        """
        wait_for_reductions()
        slot = self._check_and_get(device if ctx is None else ctx, "gradient")[1]
        if self._grad_req == "null":
            raise RuntimeError(f"Parameter '{self.label}' has no gradient because grad_req='null'")
        return slot.data.grad

    def list_grad(self) -> list[Any]:
        """Every mirror's gradient, in the order of ``list_device()`` (as :meth:`grad`: sums in flight waited for)."""
        wait_for_reductions()
        self._materialize()
        if self._grad_req == "null":
            raise RuntimeError(f"Parameter '{self.label}' has no gradient because grad_req='null'")
        return [slot.data.grad for _, slot in self._slots.values()]

    def list_device(self) -> list[Device]:
        """The devices holding a mirror (also pending devices of a deferred initialisation)."""
        if self._slots:
            return list(self._slots)
        if self._deferred is not None:
            return list(self._deferred[2])
        raise self._uninitialized_error()

    list_ctx = list_device

    def set_data(self, data: Any) -> None:
        """Write ``data`` (Tensor or array of the parameter's shape) into every mirror.

        On a deferred parameter, ``data`` fixes the shape and completes initialisation.

        Raises:
            TypeError: ``data`` is not numeric (names the parameter).
            ValueError: shape mismatch (names the parameter and both shapes).
        """
        if not isinstance(data, Tensor) and not hasattr(data, "__cuda_array_interface__"):
            given = type(data).__name__
            data = np.asarray(data)
            if not (np.issubdtype(data.dtype, np.number) or data.dtype == np.bool_):
                raise TypeError(f"Parameter '{self.label}': set_data needs a Tensor or a numeric array, "
                                f"got {given} of dtype {data.dtype}")
        shape = tuple(data.shape)
        if not self._slots and self._deferred is not None:
            self.shape = shape
        self._materialize()
        if shape != self._shape:
            raise ValueError(f"Parameter '{self.label}': cannot set data of shape {shape}, expected {self._shape}")
        if isinstance(data, Tensor):
            host = data.asnumpy()
        else:
            host = data.get() if hasattr(data, "__cuda_array_interface__") else np.asarray(data)
        for _, slot in self._slots.values():
            slot.data[...] = host.astype(self.dtype, copy=False)

    def _reduce(self) -> Tensor:
        """The value as one Tensor on cpu(0) (MXNet's helper for saving; every mirror holds the same value)."""
        return Tensor(self._first_mirror().asnumpy().copy(), cpu(0))

    def _load_init(self, data: Any, device: Any = None, cast_dtype: bool = False,
                   dtype_source: str = "current") -> None:
        """Load ``data`` (MXNet's helper behind ``load_parameters``): set it, or initialise with it on ``device``.

        Raises:
            ValueError: shape mismatch, or a dtype mismatch without ``cast_dtype``, or a bad ``dtype_source``.
        """
        if dtype_source not in ("current", "saved"):
            raise ValueError(f"dtype_source must be 'current' or 'saved', got {dtype_source!r}")
        value = data.asnumpy() if hasattr(data, "asnumpy") else np.asarray(data)
        if value.dtype != self.dtype:
            if not cast_dtype:
                raise ValueError(f"Parameter '{self.label}': dtype {self.dtype} in the model, {value.dtype} loaded "
                                 "(pass cast_dtype=True to convert)")
            if dtype_source == "saved":
                self.cast(value.dtype)
            value = value.astype(self.dtype)
        if self.is_initialized or self._deferred is not None:
            self.set_data(value)
        else:
            self.shape = value.shape
            self._init_impl(value, _device_list(device), self._store or ParameterStore())

    def zero_grad(self) -> None:
        """Set every mirror's gradient to zero (no-op for grad_req='null'), after the sums still in flight."""
        if self._grad_req == "null":
            return
        wait_for_reductions(reading=False)
        for _, slot in self._slots.values():
            g = slot.data.grad
            if isinstance(g, sparse.RowSparseTensor):
                slot.data.grad = sparse.zeros(self._shape, self.dtype, slot.data.device)
            else:
                with slot.data.device.use():
                    g.array[...] = 0

    def reset_device(self, device: Any) -> None:
        """Move the mirrors to ``device`` (a Device or list), keeping the current values."""
        devices = _device_list(device)
        if self._slots:
            self._reslot(devices, self.dtype)
        elif self._deferred is not None:
            chosen, own, _, store = self._deferred
            self._deferred = (chosen, own, devices, store)
        else:
            raise self._uninitialized_error()

    reset_ctx = reset_device

    def cast(self, dtype: Any) -> None:
        """Change the dtype of every mirror (values are converted; gradients restart at zero)."""
        dtype = np.dtype(dtype)
        if self._slots and dtype != self.dtype:
            self._reslot(list(self._slots), dtype)
        else:
            self.dtype = dtype

    def _fresh(self, device: Device) -> bool:
        """Whether backward wrote this mirror's gradient since the last ``_mark_stale``."""
        return self._slots[device][1].data.fresh_grad

    def _mark_stale(self) -> None:
        for _, slot in self._slots.values():
            slot.data.fresh_grad = False

    def arena_slots(self) -> list[tuple[Arena, Slot]]:
        """``(arena, slot)`` of each device mirror, in device order: where the parameter's data and
        gradient live in the flat arenas (:mod:`mxlite.store`). The Trainer, the gradient buckets and
        the fused update find the parameter's place in the arena buffers through it; empty before
        initialisation."""
        return list(self._slots.values())


class Constant(Parameter):
    """A parameter that never changes (grad_req 'null'), initialised to ``value``."""

    def __init__(self, value: Any, name: str = "const") -> None:
        value = np.asarray(value.asnumpy() if isinstance(value, Tensor) else value)
        if value.dtype == np.float64:
            value = value.astype(np.float32)
        super().__init__(name, grad_req="null", shape=value.shape, dtype=value.dtype,
                         init=_init.Constant(value), differentiable=False)
        self.value = value


class ParameterDict(dict):
    """Parameters by name, with Gluon 1.x's ``ParameterDict`` methods (what ``collect_params()`` returns).

    A ``dict`` (name -> :class:`Parameter`) that also initialises, moves, zeroes, saves and loads
    all of its parameters at once, and creates parameters with :meth:`get`. ``collect_params()`` also resolves
    MXNet 2.x's fused ``'rnn_param'`` of each recurrent layer by name (``params['lstm0.rnn_param']``), a view
    of the per-gate parameters it lists (:class:`~mxlite.gluon.rnn.rnn_layer.FusedRNNParam`).
    """

    def __init__(self, *args: Any, prefix: str = "", shared: ParameterDict | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._prefix = prefix
        self._shared = shared
        self._owner: Any = None  # the Block whose own parameters this holds (Block.params)
        # Views reachable by name but not listed (an RNN layer's fused 'rnn_param', MXNet 2.x's layout of the
        # weights this dict lists one by one): so iterating, saving or training sees every weight once
        self._aliases: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        try:
            return super().__getitem__(name)
        except KeyError:
            if name in self._aliases:
                return self._aliases[name]
            raise

    @property
    def prefix(self) -> str:
        """Prefix of the names of parameters created by :meth:`get` (Gluon 1.x)."""
        return self._prefix

    def get(self, name: str, default: Any = None, **kwargs: Any) -> Any:  # type: ignore[override]
        """The parameter called ``name``; with keyword arguments (``shape=``, ``init=`` ...), created when absent.

        ``params.get('weight', shape=(3, 4))`` is Gluon 1.x's way to declare a parameter in a Block's
        ``__init__``: the new parameter is registered on the Block owning this dict, so it is collected,
        initialised and passed to ``hybrid_forward`` by name.

        Raises:
            ValueError: an existing parameter whose shape or dtype contradicts the keyword arguments.
        """
        if name in self:
            param = self[name]
            want = _normalize_shape(kwargs.get("shape"))
            if want is not None and param.shape is not None and len(want) == len(param.shape) and any(
                    a != b and a != -1 and b != -1 for a, b in zip(want, param.shape)):
                raise ValueError(f"ParameterDict.get: parameter {name!r} exists with shape {param.shape}, "
                                 f"asked for {want}")
            return param
        if self._shared is not None and name in self._shared:
            param = self._shared[name]
        elif not kwargs:
            return default
        else:
            kwargs.setdefault("allow_deferred_init", True)
            param = Parameter(name, **kwargs)
        if self._owner is not None:
            setattr(self._owner, name, param)
        self[name] = param
        return param

    def get_constant(self, name: str, value: Any = None) -> Constant:
        """The constant called ``name``, created from ``value`` when absent."""
        if name not in self:
            if value is None:
                raise KeyError(f"no constant {name!r} and no value to create it")
            const = Constant(value, name)
            if self._owner is not None:
                setattr(self._owner, name, const)
            self[name] = const
        return self[name]

    def initialize(self, init: Any = None, device: Any = None, verbose: bool = False, force_reinit: bool = False,
                   ctx: Any = None) -> None:
        """Initialise every parameter on ``device`` (``ctx``), as :meth:`Block.initialize` does.

        Raises:
            ValueError: duplicate devices, or an unknown shape on a parameter that cannot defer.
        """
        devices = _device_list(device if ctx is None else ctx)
        default = _init.create(init) if init is not None else _init.Uniform()
        params = list(dict.fromkeys(self.values()))  # a Parameter shared under several names: once
        # Parameters added after a first initialize join the model's existing arenas.
        store = next((p._store for p in params if p._store is not None), None) or ParameterStore()
        todo = [p for p in params if force_reinit or not p.is_initialized]
        # If any shape must wait for the first batch, every parameter waits: the arena then
        # holds them in order of first use in forward, so gradients lie in backward's order.
        defer = any(not p._shape_known() for p in todo)
        for param in todo:
            param.initialize(None, devices, default_init=default, force_reinit=force_reinit,
                             store=param._store or store, defer=defer)

    def zero_grad(self) -> None:
        """Zero every parameter's gradient."""
        for param in self.values():
            param.zero_grad()

    def reset_device(self, device: Any = None, ctx: Any = None) -> None:
        """Move every parameter to ``device`` (``ctx``; a Device or list), keeping values."""
        for param in self.values():
            param.reset_device(device if ctx is None else ctx)

    reset_ctx = reset_device

    def list_device(self) -> list[Device]:
        """The devices holding any parameter's mirrors, each once, in order of first appearance."""
        devices: list[Device] = []
        for param in self.values():
            devices += [d for d in param.list_device() if d not in devices]
        return devices

    list_ctx = list_device

    def setattr(self, name: str, value: Any) -> None:
        """Set attribute ``name`` (``grad_req``, ``lr_mult``, ``wd_mult`` ...) of every parameter to ``value``."""
        for param in self.values():
            setattr(param, name, value)

    def update(self, other: Any = (), **kwargs: Any) -> None:  # type: ignore[override]
        """Add ``other``'s parameters.

        Raises:
            ValueError: a name already present with a different Parameter object.
        """
        items = dict(other, **kwargs)
        clash = [k for k, v in items.items() if k in self and self[k] is not v]
        if clash:
            raise ValueError(f"ParameterDict.update: names {clash} already hold different Parameters")
        super().update(items)

    def select(self, pattern: str) -> ParameterDict:
        """The parameters whose names match the regular expression ``pattern`` (``re.match``)."""
        regex = re.compile(pattern)
        return ParameterDict({k: v for k, v in self.items() if regex.match(k)}, prefix=self._prefix)

    def save(self, filename: Any, strip_prefix: str = "") -> None:
        """Write every parameter's value (first mirror) to ``filename`` (``.npz``, atomic), names without
        ``strip_prefix``.

        Raises:
            ValueError: a name that does not start with ``strip_prefix``.
        """
        arrays = {}
        for name, param in self.items():
            if strip_prefix and not name.startswith(strip_prefix):
                raise ValueError(f"ParameterDict.save: name {name!r} does not start with strip_prefix "
                                 f"{strip_prefix!r}")
            arrays[name[len(strip_prefix):]] = param._first_mirror().asnumpy()
        save_arrays(filename, arrays)

    def load(self, filename: Any, device: Any = None, allow_missing: bool = False, ignore_extra: bool = False,
             restore_prefix: str = "", cast_dtype: bool = False, dtype_source: str = "current",
             ctx: Any = None) -> None:
        """Load values written by :meth:`save` (or ``save_parameters``); all-or-nothing.

        ``filename`` may also be a file MXNet wrote (its binary NDArray-list format, told by the first
        bytes); as in MXNet, ``arg:``/``aux:`` name prefixes are removed before ``restore_prefix`` is added.

        Raises:
            ValueError: names missing from the file (unless ``allow_missing``), names not in this dict
                (unless ``ignore_extra``), shape or dtype mismatches (every problem listed at once),
                all found from the file's array headers before any array is read.
        """
        plan = plan_load(filename, self, restore_prefix=restore_prefix, allow_missing=allow_missing,
                         ignore_extra=ignore_extra, cast_dtype=cast_dtype, dtype_source=dtype_source,
                         owner="this ParameterDict")
        apply_load(plan, _device_list(device if ctx is None else ctx))

    # MXNet 2.x's collect_params() returns a plain dict, printed on one line: {'0.weight': Parameter ...}
    __repr__ = dict.__repr__
    __str__ = dict.__repr__


def _missing_names(params: dict[str, Parameter], loaded: Any) -> list[str]:
    """Names of ``params`` absent from ``loaded`` whose Parameter is not there under another name either.

    A file saved with ``deduplicate=True`` holds a shared Parameter once, under its first name; every
    other name of it then loads the same value (as MXNet's ``load_parameters``).
    """
    present = {id(p) for n, p in params.items() if n in loaded}
    return [n for n, p in params.items() if n not in loaded and id(p) not in present]


# -- loading parameter files (Block.load_parameters, ParameterDict.load, mx.checkpoint.load) ----------------------

def plan_load(filename: Any, params: dict[str, Parameter], *, data: bytes | None = None, restore_prefix: str = "",
              allow_missing: bool = False, ignore_extra: bool = False, cast_dtype: bool = False,
              dtype_source: str = "current", owner: str = "the model") -> list[tuple[Parameter, np.ndarray]]:
    """Check a parameter file against ``params`` and read what they need, changing nothing: [(parameter, value)].

    The file's array headers (names, shapes, dtypes) are checked first, so a file that does not fit is
    refused before any of its arrays is allocated (a small compressed ``.npz`` cannot make this
    allocate what the model does not hold); then only the arrays of ``params`` are read. ``data``: the
    file's bytes, already read and verified by the caller (``filename`` then only names it). A value
    comes back in the parameter's dtype unless ``dtype_source='saved'``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: an unreadable file, or mismatches, every problem listed at once: names missing from
            the file (unless ``allow_missing``), names ``params`` lack (unless ``ignore_extra``), shapes,
            a zero-size dimension offered for a dimension still unknown (deferred initialisation), dtypes
            (unless ``cast_dtype``).
    """
    if dtype_source not in ("current", "saved"):
        raise ValueError(f"dtype_source must be 'current' or 'saved', got {dtype_source!r}")

    def named(entries: dict[str, Any]) -> dict[str, Any]:
        return {restore_prefix + k: v for k, v in strip_arg_aux_prefixes(entries, filename).items()}

    specs = named(describe_arrays(filename, data=data))
    _check_loadable(filename, params, specs, allow_missing, ignore_extra, cast_dtype, owner)
    loaded = named(load_arrays(filename, data=data, names={specs[n].name for n in params if n in specs}))
    changed = [n for n in params if n in specs and (n not in loaded or loaded[n].shape != specs[n].shape
                                                    or loaded[n].dtype != specs[n].dtype)]
    if changed:
        raise ValueError(f"cannot load parameters from {os.fspath(filename)!r}: the file changed while it was read "
                         f"({_messages.listing(changed)} differ from their headers)")
    plan = []
    for name, param in params.items():
        if name in loaded:
            value = loaded[name]
            if value.dtype != param.dtype and dtype_source == "current":
                value = value.astype(param.dtype)
            plan.append((param, value))
    return plan


def plan_from_arrays(filename: Any, params: dict[str, Parameter], arrays: dict[str, np.ndarray], *,
                     allow_missing: bool = False, ignore_extra: bool = False, cast_dtype: bool = False,
                     dtype_source: str = "current", owner: str = "the model") -> list[tuple[Parameter, np.ndarray]]:
    """:func:`plan_load` for values already in memory (``Block.load_dict``, a file whose names needed
    translating first): the same checks and errors, ``filename`` only names the source in them."""
    if dtype_source not in ("current", "saved"):
        raise ValueError(f"dtype_source must be 'current' or 'saved', got {dtype_source!r}")
    _check_loadable(filename, params, arrays, allow_missing, ignore_extra, cast_dtype, owner)
    plan = []
    for name, param in params.items():
        if name in arrays:
            value = np.asarray(arrays[name])
            if value.dtype != param.dtype and dtype_source == "current":
                value = value.astype(param.dtype)
            plan.append((param, value))
    return plan


def _check_loadable(filename: Any, params: dict[str, Parameter], entries: dict[str, Any], allow_missing: bool,
                    ignore_extra: bool, cast_dtype: bool, owner: str) -> None:
    """Raise the ValueError of :func:`plan_load` for ``entries`` (anything with ``shape``, ``ndim``, ``dtype``)."""
    problems: list[str] = []
    missing = _missing_names(params, entries)  # a deduplicated file names a shared Parameter once
    extra = [n for n in entries if n not in params]
    if missing and not allow_missing:
        problems.append(f"missing from the file: {_messages.listing(missing, 20)} (pass allow_missing=True to skip "
                        "them)")
    if extra and not ignore_extra:
        problems.append(f"not in {owner}: {_messages.listing(extra, 20)} (pass ignore_extra=True to skip them)")
    for name, param in params.items():
        if name not in entries:
            continue
        entry, shape = entries[name], param.shape
        if shape is not None and (len(shape) != entry.ndim or any(
                a != -1 and a != b for a, b in zip(shape, entry.shape))):
            problems.append(f"{name!r}: shape {tuple(shape)} in {owner}, {entry.shape} in the file")
        elif shape is not None and any(a == -1 and b <= 0 for a, b in zip(shape, entry.shape)):
            problems.append(f"{name!r}: the file holds shape {entry.shape}; a zero-size dimension cannot fill the "
                            f"unknown dimension of {tuple(shape)} in {owner} (deferred initialisation)")
        elif entry.dtype != param.dtype and not cast_dtype:
            problems.append(f"{name!r}: dtype {param.dtype} in {owner}, {entry.dtype} in the file "
                            "(pass cast_dtype=True to convert)")
    if problems:
        raise ValueError(f"cannot load parameters from {os.fspath(filename)!r}: " + "; ".join(problems))


def apply_load(plan: list[tuple[Parameter, np.ndarray]], devices: list[Device]) -> None:
    """Apply what :func:`plan_load` checked; an uninitialised parameter is initialised on ``devices`` (or on
    those of its deferred initialisation), and one whose initialisation fails is left as it was."""
    store = ParameterStore()  # one arena set for every parameter initialised here, as initialize() does
    for param, value in plan:
        if value.dtype != param.dtype:
            param.cast(value.dtype)
        if param.is_initialized:
            param.set_data(value)
        else:
            param._load_uninitialized(value, devices, store)
