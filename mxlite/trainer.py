"""Trainer: applies an optimizer to a set of Parameters mirrored on several devices (Gluon's).

Purpose: after ``autograd.backward`` has filled every mirror's gradient, ``step(batch_size)``
sums each parameter's gradients over its mirrors, rescales by ``1 / batch_size`` and applies
the same update to every mirror, so mirrors stay identical.

Behaviour:

* ``step`` = ``allreduce_grads()`` + ``update(batch_size)``. ``allreduce_grads`` replaces
  every mirror's gradient by the sum over mirrors (the sum is computed once, in device order,
  and copied out, so all mirrors hold bit-identical sums); ``update`` runs the optimizer on
  each mirror with that mirror's own optimizer state.
* The optimizer's ``rescale_grad`` becomes ``scale / batch_size`` at each step, where
  ``scale`` is the ``rescale_grad`` given in ``optimizer_params`` (default 1).
* A mirror whose gradient backward has not written since the last step is *stale*: ``step``
  raises naming the parameter and device, unless ``ignore_stale_grad=True`` (then stale
  parameters are skipped).
* Parameters of a fused rule (``mxlite/optimizer/_fused_rules.py``: every built-in rule on
  float32/float16 weights) are updated by one fused update per (arena, device mirror), with
  states laid out like the arena; other rules, float64 weights and row-sparse gradients take
  the per-parameter path.
* ``save_states``/``load_states`` write and read the optimizer (hyperparameters, update counts,
  scheduler position) and every parameter's state in a safe ``.npz`` format; a run resumed
  from them continues bit for bit.

The gradient sum here is per parameter; the communicator layer replaces it without changing
this interface.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from . import comm as _comm
from . import optimizer as _opt
from . import sparse
from ._serialization import atomic_write
from .comm.base import Communicator
from .comm.buckets import DEFAULT_BUCKET_BYTES, GradientSync
from .nn.parameter import Parameter
from .optimizer._arena import ArenaUpdater, fused_rule
from .optimizer._fused_rules import from_structure
from .optimizer.optimizer import MultiPrecisionState
from .optimizer.updater import pack_states, unpack_states

__all__ = ["Trainer"]

_KVSTORE_TYPES = ("local", "device", "nccl", "dist_sync", "dist_sync_device", "dist_device_sync", "dist_async")


class Trainer:
    """Applies an optimizer to Parameters (Gluon's ``Trainer``).

    Args:
        params: a dict of name -> Parameter (as from ``collect_params()``; sorted by name, as
            Gluon does) or a list of Parameters. A parameter present twice is used once.
        optimizer: a registered name ('sgd', 'adam', ...) or an Optimizer instance.
        optimizer_params: keyword arguments of the optimizer (only with a name).
        kvstore: gradient-sync strategy name. 'device' (default), 'local' and 'nccl' reduce over
            this process's devices; 'dist_sync' (and 'dist_sync_device', 'dist_device_sync')
            also over every process started by ``mpiexec``/``mxlite launch`` (MPI; NCCL for
            GPUs). None reduces over local devices like 'device'.
        compression_params, update_on_kvstore: accepted for Gluon compatibility.
        bucket_bytes: (mxlite) gradients travel in buckets of at most this many bytes
            (a larger parameter travels alone); see :mod:`mxlite.comm.buckets`.
        overlap: (mxlite) reduce each bucket during backward as soon as it is complete.

    Raises:
        ValueError: empty params, a non-Parameter entry, optimizer_params with an instance,
            or an unknown kvstore name.
    """

    def __init__(self, params: Mapping[str, Parameter] | Iterable[Parameter], optimizer: Any,
                 optimizer_params: dict[str, Any] | None = None, kvstore: Any = "device",
                 compression_params: dict[str, Any] | None = None, update_on_kvstore: bool | None = None, *,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, overlap: bool = True) -> None:
        if isinstance(params, Mapping):
            param_list = [params[k] for k in sorted(params)]
        elif isinstance(params, (list, tuple)):
            param_list = list(params)
        else:
            raise ValueError(f"params must be a dict of Parameters (e.g. net.collect_params()) or a list, "
                             f"got {type(params).__name__}")
        self._params: list[Parameter] = []
        seen: set[int] = set()
        for p in param_list:
            if not isinstance(p, Parameter):
                raise ValueError(f"Trainer expects Parameters, got {type(p).__name__}: {p!r}")
            if id(p) not in seen:
                seen.add(id(p))
                self._params.append(p)
        if not self._params:
            raise ValueError("Trainer needs at least one Parameter")
        if isinstance(kvstore, str) and kvstore not in _KVSTORE_TYPES:
            raise ValueError(f"unknown kvstore {kvstore!r}; known: {', '.join(_KVSTORE_TYPES)} or None")
        self._kvstore_type = kvstore
        self._bucket_bytes, self._overlap = int(bucket_bytes), bool(overlap)
        self._syncs: dict[tuple[Any, ...], tuple[Communicator, GradientSync | None]] = {}  # devices -> sync
        self._synced_params: set[int] = set()  # id() of parameters covered by a GradientSync
        self._num_workers = 1
        self._compression_params = compression_params
        self._update_on_kvstore = update_on_kvstore
        optimizer_params = dict(optimizer_params or {})
        if isinstance(optimizer, _opt.Optimizer) and optimizer_params:
            raise ValueError("optimizer_params must be None when optimizer is an Optimizer instance")
        self._scale = float(optimizer_params.get("rescale_grad", 1.0))
        param_dict = dict(enumerate(self._params))
        if isinstance(optimizer, _opt.Optimizer):
            optimizer.param_dict = param_dict
            self._optimizer = optimizer
            self._scale = optimizer.rescale_grad
        else:
            self._optimizer = _opt.create(optimizer, param_dict=param_dict, **optimizer_params)
        self._states: dict[tuple[int, int], Any] = {}  # (param index, mirror number) -> state
        self._arena_updaters: dict[tuple[int, int], ArenaUpdater] = {}  # (id(arena), mirror) -> fused state
        self._loaded: dict[int, Any] = {}  # param index -> state read by load_states (host arrays)
        self._applied: set[tuple[int, int]] = set()  # (index, mirror) that received its loaded state
        if all(p.is_initialized for p in self._params if p.grad_req != "null"):
            # Start in sync (rank 0's values) and hook the buckets before the first backward;
            # parameters initialised later (deferred) join at their first step.
            self._ensure_sync()

    # -- hyperparameters ------------------------------------------------------------------
    @property
    def optimizer(self) -> _opt.Optimizer:
        """The optimizer instance."""
        return self._optimizer

    @property
    def learning_rate(self) -> float:
        """The optimizer's current learning rate."""
        return self._optimizer.learning_rate

    def set_learning_rate(self, lr: float) -> None:
        """Set the optimizer's learning rate (UserWarning is raised if a scheduler is set)."""
        self._optimizer.set_learning_rate(lr)

    @property
    def num_workers(self) -> int:
        """Processes taking part in the gradient sum (1 unless a 'dist_*' kvstore runs under MPI)."""
        return self._num_workers

    # -- the step -------------------------------------------------------------------------
    def step(self, batch_size: int, ignore_stale_grad: bool = False) -> None:
        """Sum gradients over mirrors, then update every mirror; see the module docstring.

        Args:
            batch_size: samples that produced the gradients (the gradient is divided by it).
            ignore_stale_grad: skip, instead of rejecting, parameters whose gradient is stale.

        Raises:
            ValueError: batch_size <= 0.
            UserWarning: a stale gradient (names the parameter and device), as MXNet raises.
        """
        self._check_batch_size(batch_size)
        self.allreduce_grads()
        self.update(batch_size, ignore_stale_grad)

    def allreduce_grads(self) -> None:
        """Replace every mirror's gradient by the sum over its mirrors (and, 'dist_*', over processes).

        Dense gradients travel in buckets (see :mod:`mxlite.comm.buckets`), most of them already
        reduced during backward when ``overlap`` is on; row-sparse gradients are summed per
        parameter.

        Raises:
            NotImplementedError: row-sparse gradients with a 'dist_*' kvstore (not yet supported).
        """
        self._ensure_sync()
        for _, sync in self._syncs.values():
            if sync is not None:
                sync.allreduce_grads()
        for param in self._params:
            if param.grad_req == "null" or not param.is_initialized or id(param) in self._synced_params:
                continue
            if param.grad_stype == "row_sparse":
                if self._num_workers > 1:
                    raise NotImplementedError(f"Parameter '{param.label}' has a row-sparse gradient: summing those "
                                              "across processes is not supported yet; use sparse_grad=False")
                if len(param.list_device()) > 1:
                    _sum_row_sparse_into_all(param)

    def _ensure_sync(self) -> None:
        """Build a communicator and bucket plan per device list for the initialised dense parameters."""
        groups: dict[tuple[Any, ...], list[Parameter]] = {}
        for param in self._params:
            if param.grad_req == "null" or not param.is_initialized or param.grad_stype != "default":
                continue
            groups.setdefault(tuple(param.list_device()), []).append(param)
        for devices, params in groups.items():
            if devices in self._syncs and all(id(p) in self._synced_params for p in params):
                continue
            comm = self._syncs[devices][0] if devices in self._syncs else self._communicator(list(devices))
            self._broadcast_from_root(comm, [p for p in params if id(p) not in self._synced_params])
            needed = comm.size > 1 or len(devices) > 1
            sync = GradientSync(comm, params, self._bucket_bytes, self._overlap) if needed else None
            self._syncs[devices] = (comm, sync)
            self._synced_params.update(id(p) for p in params)

    def _communicator(self, devices: list[Any]) -> Communicator:
        kind = self._kvstore_type if isinstance(self._kvstore_type, str) else "device"
        comm = _comm.create(kind, devices)
        self._num_workers = max(self._num_workers, comm.size)
        return comm

    @staticmethod
    def _broadcast_from_root(comm: Communicator, params: list[Parameter]) -> None:
        """Every process starts from rank 0's values (one process: nothing to do)."""
        if comm.size == 1:
            return
        for p in params:
            comm.broadcast([d._data for d in p.list_data()], root=0)

    def update(self, batch_size: int, ignore_stale_grad: bool = False) -> None:
        """Apply the optimizer to every mirror with its (already summed) gradient."""
        self._check_batch_size(batch_size)
        # Each worker passes its own batch size; the gradient is averaged over workers.
        self._optimizer.rescale_grad = self._scale / (batch_size * self._num_workers)
        opt = self._optimizer
        groups: dict[tuple[int, int], tuple[Any, list[tuple[int, Any]]]] = {}  # -> (arena, [(index, slot)])
        for index, param in enumerate(self._params):
            if param.grad_req == "null":
                continue
            param._materialize()  # a deferred parameter forward never used; raises if its shape is unknown
            devices = param.list_device()
            stale = [d for d in devices if not param._fresh(d)]
            if stale:
                if ignore_stale_grad:
                    continue
                raise UserWarning(
                    f"Gradient of Parameter '{param.label}' on device {stale[0]} has not been updated by "
                    "backward since the last step; this could mean a bug in your model that made it only use "
                    "a subset of the Parameters for this iteration. Call step with ignore_stale_grad=True to "
                    "suppress this and update only the parameters with fresh gradients"
                )
            if param.grad_stype == "default" and fused_rule(opt, param.dtype) is not None:
                for mirror, (arena, slot) in enumerate(param._arena_slots()):
                    groups.setdefault((id(arena), mirror), (arena, []))[1].append((index, slot))
            else:
                self._update_per_parameter(index, param)
            param._mark_stale()
        # One fused update per (arena, mirror): every parameter of the arena in one launch.
        for key, (arena, entries) in groups.items():
            updater = self._arena_updaters.get(key)
            if updater is None:
                updater = self._arena_updaters[key] = ArenaUpdater(opt, arena, key[1])
            for index, slot in entries:
                if index in self._loaded and (index, key[1]) not in self._applied:
                    updater.set_state(slot, *from_structure(updater.state_names, self._loaded[index]))
                    self._applied.add((index, key[1]))
            updater.step(entries)
        opt._set_current_device(0)

    def _update_per_parameter(self, index: int, param: Parameter) -> None:
        """The optimizer's own rule on each mirror (rules or dtypes without a fused kernel)."""
        opt = self._optimizer
        for slot_no, (data, grad) in enumerate(zip(param.list_data(), param.list_grad())):
            opt._set_current_device(slot_no)
            key = (index, slot_no)
            weight = data._data
            if key not in self._states:
                with data.device.use():
                    if index in self._loaded:
                        self._states[key] = _copy_state(self._loaded[index], data.device)
                        self._applied.add(key)
                    else:
                        self._states[key] = opt.create_state(index, weight)
            # A row-sparse gradient goes through as it is: rules with lazy_update touch only its rows.
            raw_grad = grad if isinstance(grad, sparse.RowSparseTensor) else grad._data
            with data.device.use():
                opt.update(index, weight, raw_grad, self._states[key])

    # -- saving and loading optimizer states ----------------------------------------------
    def save_states(self, fname: str | os.PathLike) -> None:
        """Save the optimizer and every parameter's optimizer state to ``fname``.

        The file is an ``.npz`` archive in the :mod:`mxlite.optimizer.updater` layout (never
        pickled): the optimizer's hyperparameters, per-device update counts and scheduler
        position; each parameter's state (mirror 0's: every mirror holds the same state); and
        the parameters' names and shapes, checked on load. It is written to a temporary file,
        fsynced and renamed, so a crash during the save leaves the previous file intact.
        """
        states = {}
        for index, param in enumerate(self._params):
            state = self._saved_state(index, param)
            if state is not None:
                states[index] = state
        extra = {"trainer_params": [[p.label, list(p.shape) if p.shape else None] for p in self._params]}
        data = pack_states(states, self._optimizer.state_dict(), extra)
        atomic_write(fname, lambda f: f.write(data))

    def load_states(self, fname: str | os.PathLike) -> None:
        """Restore a :meth:`save_states` file; continuing then matches the saved run bit for bit.

        Everything is checked before anything changes: the file must be a state file of a
        Trainer with the same parameters (names and shapes) and the same optimizer and
        scheduler classes. States move to each mirror at its next update; parameters absent
        from the file start from fresh states.

        Raises:
            FileNotFoundError: no such file.
            ValueError: a damaged or foreign file, or one that does not fit this Trainer
                (the message names the file and what differs).
        """
        fname = os.fspath(fname)
        with open(fname, "rb") as f:
            data = f.read()
        try:
            states, optimizer_state, extra = unpack_states(data)
            if optimizer_state is None or not isinstance(extra, dict) or "trainer_params" not in extra:
                raise ValueError("it is not a Trainer.save_states file (no optimizer or parameter section)")
            self._check_saved_params(extra["trainer_params"], states)
            self._optimizer.load_state_dict(optimizer_state)  # validates before changing anything
        except ValueError as exc:
            raise ValueError(f"cannot load trainer states from {fname!r}: {exc}") from exc
        self._states.clear()
        self._arena_updaters.clear()
        self._loaded, self._applied = states, set()

    def _saved_state(self, index: int, param: Parameter) -> Any:
        """Mirror 0's state of parameter ``index`` (host arrays), or None when it has none yet."""
        if index in self._loaded and (index, 0) not in self._applied:
            return self._loaded[index]
        if (index, 0) in self._states:
            return self._states[(index, 0)]
        if not param.is_initialized or param.grad_req == "null":
            return None
        arena, slot = param._arena_slots()[0]
        updater = self._arena_updaters.get((id(arena), 0))
        return updater.get_state(slot) if updater is not None else None

    def _check_saved_params(self, saved: Any, states: dict[Any, Any]) -> None:
        names = [p.label for p in self._params]
        try:
            saved_names = [entry[0] for entry in saved]
            saved_shapes = [tuple(entry[1]) if entry[1] is not None else None for entry in saved]
        except (TypeError, IndexError) as exc:
            raise ValueError(f"malformed parameter section ({exc})") from exc
        if saved_names != names:
            missing = [n for n in names if n not in saved_names]
            unexpected = [n for n in saved_names if n not in names]
            raise ValueError(f"it was saved for other parameters: missing {missing}, unexpected {unexpected}"
                             + ("" if missing or unexpected else " (same names, another order)"))
        for index, state in states.items():
            if not isinstance(index, int) or not 0 <= index < len(self._params):
                raise ValueError(f"state index {index!r} is not a parameter index")
            param = self._params[index]
            shape = tuple(param.shape) if param.shape and all(param.shape) else saved_shapes[index]
            for leaf in _state_arrays(state):
                if shape is not None and tuple(leaf.shape) != shape:
                    raise ValueError(f"the state of parameter {param.label!r} has shape {tuple(leaf.shape)}, "
                                     f"the parameter has shape {shape}")

    @staticmethod
    def _check_batch_size(batch_size: int) -> None:
        if not batch_size or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive number, got {batch_size!r}")


def _state_arrays(state: Any) -> list[Any]:
    """The array leaves of a (nested) optimizer state."""
    if isinstance(state, (tuple, list)):
        return [leaf for part in state for leaf in _state_arrays(part)]
    return [state] if hasattr(state, "shape") else []


def _copy_state(state: Any, device: Any) -> Any:
    """A copy of a host state on ``device`` (each mirror gets its own arrays)."""
    if isinstance(state, MultiPrecisionState):
        return MultiPrecisionState(*(_copy_state(s, device) for s in state))
    if isinstance(state, (tuple, list)):
        return type(state)(_copy_state(s, device) for s in state)
    if hasattr(state, "shape"):
        with device.use():
            return device.xp.array(np.asarray(state))
    return state


def _sum_row_sparse_into_all(param: Parameter) -> None:
    """Sum row-sparse gradients over mirrors; every mirror's gradient becomes the sum."""
    mirrors = param.list_data()
    home = mirrors[0].device
    total = mirrors[0]._grad
    for leaf in mirrors[1:]:
        total = sparse.add_any(total, _row_sparse_to(leaf._grad, home), param.shape)
    for leaf in mirrors:
        leaf._grad = _row_sparse_to(total, leaf.device)


def _row_sparse_to(rs: sparse.RowSparseTensor, device: Any) -> sparse.RowSparseTensor:
    return sparse.RowSparseTensor(rs.data.copyto(device), rs.indices.copyto(device), rs.shape)
