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

This first version sums gradients and updates per parameter; the communicator and fused
update layers replace its internals without changing this interface.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from . import optimizer as _opt
from . import sparse
from .autograd.tensor import Tensor, _transfer
from .nn.parameter import Parameter
from .optimizer._arena import ArenaUpdater, fused_rule

__all__ = ["Trainer"]

_KVSTORE_TYPES = ("local", "device", "nccl", "dist_sync", "dist_sync_device", "dist_device_sync", "dist_async")


class Trainer:
    """Applies an optimizer to Parameters (Gluon's ``Trainer``).

    Args:
        params: a dict of name -> Parameter (as from ``collect_params()``; sorted by name, as
            Gluon does) or a list of Parameters. A parameter present twice is used once.
        optimizer: a registered name ('sgd', 'adam', ...) or an Optimizer instance.
        optimizer_params: keyword arguments of the optimizer (only with a name).
        kvstore: gradient-sync strategy name; 'device' (default) and 'local' reduce within
            this process. None means no store.
        compression_params, update_on_kvstore: accepted for Gluon compatibility.

    Raises:
        ValueError: empty params, a non-Parameter entry, optimizer_params with an instance,
            or an unknown kvstore name.
    """

    def __init__(self, params: Mapping[str, Parameter] | Iterable[Parameter], optimizer: Any,
                 optimizer_params: dict[str, Any] | None = None, kvstore: Any = "device",
                 compression_params: dict[str, Any] | None = None, update_on_kvstore: bool | None = None) -> None:
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
        """Replace every mirror's gradient by the sum of the gradients over its mirrors."""
        for param in self._params:
            if param.grad_req == "null" or not param.is_initialized:
                continue
            if len(param.list_device()) == 1:
                continue
            if param.grad_stype == "row_sparse":
                _sum_row_sparse_into_all(param)
            else:
                _sum_into_all(param.list_grad())

    def update(self, batch_size: int, ignore_stale_grad: bool = False) -> None:
        """Apply the optimizer to every mirror with its (already summed) gradient."""
        self._check_batch_size(batch_size)
        self._optimizer.rescale_grad = self._scale / batch_size
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
                    self._states[key] = opt.create_state(index, weight)
            # A row-sparse gradient goes through as it is: rules with lazy_update touch only its rows.
            raw_grad = grad if isinstance(grad, sparse.RowSparseTensor) else grad._data
            with data.device.use():
                opt.update(index, weight, raw_grad, self._states[key])

    @staticmethod
    def _check_batch_size(batch_size: int) -> None:
        if not batch_size or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive number, got {batch_size!r}")


def _sum_into_all(grads: list[Any]) -> None:
    """Sum dense gradient Tensors in device order and copy the sum into each of them."""
    first = grads[0]
    with first.device.use():
        total = first._data.copy()
        for g in grads[1:]:
            total += _transfer(g._data, g.device, first.device, copy=False)
    for g in grads:
        g._assign(Tensor(total, first.device))


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
