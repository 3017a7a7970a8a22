"""The Optimizer base class (MXNet 2.x ``mx.optimizer.Optimizer`` semantics) and its registry.

Conventions shared by every rule:

* effective gradient ``G = clip(rescale_grad * g, ±clip_gradient) + wd_eff * w`` (rules with
  decoupled weight decay, such as AdamW, leave out the ``wd_eff * w`` term);
* per-parameter ``lr_eff = lr * lr_mult`` and ``wd_eff = wd * wd_mult``; the multiplier comes
  from ``set_lr_mult``/``set_wd_mult`` when the index is listed there, else from
  ``param_dict[index].lr_mult/wd_mult``, else 1 (MXNet checks ``param_dict`` first; see
  :meth:`Optimizer._get_lr`);
* each index has its own update count starting at ``begin_num_update``; it is incremented
  *before* the learning rate is read, and ``num_update`` is the largest count. Every device
  mirror has its own count table (``set_current_mirror``), as MXNet's
  ``_all_index_update_counts``.

The rule contract (what a file ``mxlite/optimizer/<rule>.py`` implements)
------------------------------------------------------------------------

A rule subclasses :class:`Optimizer`, calls ``super().__init__(learning_rate=..., **kwargs)``
first (the base validates the shared arguments), validates its own, and implements two
hooks on raw NumPy/CuPy arrays:

``_create_state(index, weight) -> state``
    The rule's state for one weight: ``None``, an array, or a (nested) tuple of arrays,
    created with ``weight``'s array module and dtype. Rules written against MXNet's name may
    override ``create_state(index, weight)`` instead: the class is then set up so that the
    method serves as its ``_create_state`` (see :meth:`Optimizer.__init_subclass__`). Define
    one of the two, not both.

``step(index, weight, grad, state, count) -> None``
    Update ``weight`` and ``state`` in place. ``grad`` is a dense array that belongs to the
    caller (a Parameter's gradient buffer): never write into it. ``count`` is this index's
    update count, already incremented; read ``self._get_lr(index)``/``self._get_wd(index)``
    inside ``step`` and use ``self._effective_grad`` for rescale, clip and weight decay.

Everything else comes from the base class and must not be overridden by a rule:

* :meth:`create_state` (the Trainer's entry point) and :meth:`create_state_multi_precision`
  (the Updater's): with ``multi_precision=True`` and a float16 (or bfloat16) weight they
  return ``MultiPrecisionState(master, state)`` where ``master`` is a float32 copy of the
  weight and ``state`` the rule's state created *on the master*; a float16 weight without
  ``multi_precision`` warns once per optimizer and keeps float16 state.
* :meth:`update` / :meth:`update_multi_precision`: count the update, then run ``step`` —
  on the master with a float32 copy of the gradient when the state is a
  :class:`MultiPrecisionState` (the weight then receives ``master.astype(weight.dtype)``),
  and only on the rows present in a row-sparse gradient when the rule has
  ``lazy_update=True`` (rows are gathered from the weight and from every state array shaped
  like it, ``step`` runs on them, and they are scattered back; so only element-wise rules
  may offer ``lazy_update``). A row-sparse gradient without ``lazy_update`` is densified.
* :meth:`state_dict` / :meth:`load_state_dict`: hyperparameters (every public attribute
  holding a JSON value), multipliers, update counts and the scheduler's state, as JSON.
"""

from __future__ import annotations

import copy
import inspect
import math
import numbers
import warnings
from typing import Any, NamedTuple

import numpy as np

from ..autograd.tensor import Tensor
from ..ops.sparse import RowSparseTensor

__all__ = ["Optimizer", "MultiPrecisionState", "register", "create", "registered"]

_REGISTRY: dict[str, type[Optimizer]] = {}


def register(klass: type[Optimizer]) -> type[Optimizer]:
    """Register an optimizer class under its lower-case name (for :func:`create`)."""
    name = klass.__name__.lower()
    if name in _REGISTRY and _REGISTRY[name] is not klass:
        warnings.warn(f"optimizer {name!r} is being overridden by {klass.__module__}.{klass.__name__}", stacklevel=2)
    _REGISTRY[name] = klass
    return klass


def registered() -> list[str]:
    """Names of every registered optimizer."""
    return sorted(_REGISTRY)


def create(name: str | Optimizer, **kwargs: Any) -> Optimizer:
    """Instantiate a registered optimizer by case-insensitive name.

    Raises:
        ValueError: unknown name (lists the registered ones).
    """
    if isinstance(name, Optimizer):
        if kwargs:
            raise ValueError("optimizer_params must be empty when an Optimizer instance is given")
        return name
    if not isinstance(name, str) or name.lower() not in _REGISTRY:
        raise ValueError(f"unknown optimizer {name!r}; registered: {', '.join(registered())}")
    return _REGISTRY[name.lower()](**kwargs)


def _check_nonneg(name: str, value: float | None) -> None:
    """None, or a finite real number >= 0; the errors name the argument and the value."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}: {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def _check_real(name: str, value: Any, *, low: float | None = None, high: float | None = None,
                low_inclusive: bool = True, high_inclusive: bool = False, none_ok: bool = False, why: str = "") -> None:
    """A finite real number (not a bool, not a str) within the given bounds; None too with ``none_ok``.

    The same check serves construction and :meth:`Optimizer.load_state_dict`. Errors name the
    argument and the value: TypeError for a non-number, ValueError for NaN, inf or out of range
    (``epsilon must be > 0, got nan``; ``rho must lie in [0, 1), got 1.0``).
    """
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number{' or None' if none_ok else ''}, "
                        f"got {type(value).__name__}: {value!r}")
    if low is not None and high is not None:
        ok = (low <= value if low_inclusive else low < value) and (value <= high if high_inclusive else value < high)
        text = f"lie in {'[' if low_inclusive else '('}{low:g}, {high:g}{']' if high_inclusive else ')'}"
    elif low is not None:
        ok = low <= value if low_inclusive else low < value
        text = f"be {'>=' if low_inclusive else '>'} {low:g}"
    else:
        ok, text = value == value, "be a number"
    if not ok:
        raise ValueError(f"{name} must {text}{' or None' if none_ok else ''}{why}, got {value}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")


def _check_momentum(value: float, name: str = "momentum") -> None:
    """A momentum (a decay factor) must lie in [0, 1).

    MXNet does not check it; mxlite rejects values >= 1 because the momentum buffer then
    never forgets a gradient (1) or grows geometrically (> 1), and negative values.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}: {value!r}")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must lie in [0, 1), got {value}")


def _is_low_precision(dtype: Any) -> bool:
    """float16, or a bfloat16 dtype (recognised by name: NumPy has none of its own)."""
    return dtype == np.float16 or getattr(dtype, "name", "") == "bfloat16"


class MultiPrecisionState(NamedTuple):
    """State of a half-precision weight under ``multi_precision``: ``(master, state)``.

    ``master`` is the float32 copy the rule updates; ``state`` the rule's own state, created
    on the master (so in float32). Indexing as ``state[0]``/``state[1]`` matches MXNet.
    """

    master: Any
    state: Any


class Optimizer:
    """Base class of update rules; see the module docstring for the rule contract.

    Args:
        learning_rate: step size; None (the default) keeps the scheduler's ``base_lr``, or
            means 0.01 without a scheduler (MXNet 2.x). A value differing from the scheduler's
            ``base_lr`` overrides it, with a UserWarning. Rules have their own defaults (as in
            MXNet, e.g. ``SGD`` 0.1, ``Adam`` 0.001), which do override a scheduler's ``base_lr``.
        wd: L2 weight decay coefficient (>= 0).
        rescale_grad: gradient multiplier (the Trainer sets it to ``1 / batch_size``).
        clip_gradient: clip ``rescale_grad * g`` to ``[-clip_gradient, clip_gradient]``; > 0 or None.
        lr_scheduler: callable ``num_update -> lr``.
        begin_num_update: initial update count (an integer >= 0).
        multi_precision: keep float32 master weights (and state) for float16/bfloat16 weights.
        param_dict: ``{index: Parameter}`` giving lr_mult / wd_mult.
        aggregate_num, use_fused_step: accepted for MXNet compatibility (``aggregate_num`` an integer >= 0,
            an integral float, or ``np.inf`` for all tensors; mxlite's fused update takes every tensor anyway).

    Raises:
        TypeError: learning_rate or wd is not a real number.
        ValueError: negative, infinite or NaN learning_rate or wd, clip_gradient <= 0 (or
            NaN), or a negative or non-integer begin_num_update (each names the argument and
            the value).
    """

    def __init__(self, learning_rate: float | None = None, wd: float = 0.0, rescale_grad: float = 1.0,
                 clip_gradient: float | None = None, lr_scheduler: Any = None, begin_num_update: int = 0,
                 multi_precision: bool = False, param_dict: dict[int, Any] | None = None,
                 aggregate_num: int | None = None, use_fused_step: bool | None = None) -> None:
        _check_nonneg("learning_rate", learning_rate)
        _check_nonneg("wd", wd)
        _check_real("rescale_grad", rescale_grad, low=0)
        _check_real("clip_gradient", clip_gradient, low=0, low_inclusive=False, none_ok=True)
        if isinstance(begin_num_update, bool) or not isinstance(begin_num_update, numbers.Integral) \
                or begin_num_update < 0:
            raise ValueError(f"begin_num_update must be an integer >= 0, got {begin_num_update!r}")
        if learning_rate is None and lr_scheduler is None:
            learning_rate = 0.01
        self.lr = learning_rate
        self.wd = wd
        self.rescale_grad = rescale_grad
        self.clip_gradient = clip_gradient
        self.lr_scheduler = lr_scheduler
        if lr_scheduler is not None and learning_rate is not None \
                and getattr(lr_scheduler, "base_lr", learning_rate) != learning_rate:
            warnings.warn("learning rate from lr_scheduler has been overwritten by learning_rate in optimizer",
                          UserWarning, stacklevel=2)
            lr_scheduler.base_lr = learning_rate
        self.begin_num_update = int(begin_num_update)
        self.num_update = int(begin_num_update)
        # One count table per device mirror (MXNet's _all_index_update_counts): every mirror
        # applies the same update, so each must see the same count sequence.
        self._all_index_update_counts: dict[int, dict[Any, int]] = {0: {}}
        self._index_update_count = self._all_index_update_counts[0]
        # The counts a mirror that appears after load_state_dict starts from (a run resumed onto
        # more devices): the saved mirror 0's, since every mirror applied the same updates.
        self._resumed_counts: dict[Any, int] = {}
        self.multi_precision = bool(multi_precision)
        self.param_dict = dict(param_dict or {})
        self.lr_mult: dict[Any, float] = {}
        self.wd_mult: dict[Any, float] = {}
        # MXNet's own tests pass aggregate_num=np.inf ("aggregate every tensor"): an infinite float, or a float
        # holding a whole number, is accepted as MXNet accepts it (and kept as given).
        number = isinstance(aggregate_num, numbers.Real) and not isinstance(aggregate_num, (bool, np.bool_))
        if aggregate_num is not None and (not number or aggregate_num < 0 or (
                not isinstance(aggregate_num, numbers.Integral)
                and not (math.isinf(aggregate_num) or float(aggregate_num).is_integer()))):
            raise TypeError(f"aggregate_num must be an integer >= 0, an integral float, infinity (all tensors) or "
                            f"None, got {type(aggregate_num).__name__}: {aggregate_num!r}")
        self.aggregate_num = (int(aggregate_num or 0) if aggregate_num is None or not math.isinf(aggregate_num)
                              else aggregate_num)
        if use_fused_step is not None and not isinstance(use_fused_step, (bool, np.bool_)):
            raise TypeError(f"use_fused_step must be a bool or None, got {type(use_fused_step).__name__}: "
                            f"{use_fused_step!r}")
        self.use_fused_step = use_fused_step
        # MXNet sets this from npx.is_np_array() (whether the updater hands it mx.np arrays); mxlite's updater
        # takes either face, so it is informational, and an optimizer without it (MXNet 1.x's) still works.
        self.allow_np_array = True
        self._warned_low_precision = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Give every subclass its own multi-precision-aware ``create_state``.

        A class body that defines ``create_state`` (MXNet's hook name) has that function
        become the class's ``_create_state``. Each class's ``create_state`` calls the
        ``_create_state`` visible from that class, so a hook calling
        ``super().create_state(...)`` reaches the parent's hook, not itself again.

        Raises:
            TypeError: the class body defines both ``create_state`` and ``_create_state``.
        """
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("create_state")
        if own is not None and not getattr(own, "_mxlite_entry", False):
            if "_create_state" in cls.__dict__:
                raise TypeError(f"{cls.__name__} defines both create_state and _create_state; define only "
                                f"_create_state(index, weight) (the base class provides create_state)")
            cls._create_state = own
        cls.create_state = _create_state_entry(cls)

    # -- learning rate --------------------------------------------------------------------
    @property
    def learning_rate(self) -> float:
        """The current learning rate (the scheduler's value at ``num_update`` when set).

        Raises:
            ValueError: the scheduler returned something other than a finite number >= 0 (names the
                scheduler, the value and the update).
        """
        if self.lr_scheduler is not None:
            checked, self._checked_rate = getattr(self, "_checked_rate", None), None
            if checked is not None and checked[0] == self.num_update:  # asked by _update_count just now
                return checked[1]
            return self._scheduled_rate(self.num_update)
        return self.lr

    def _scheduled_rate(self, num_update: int) -> float:
        """The scheduler's rate at ``num_update``, checked: a finite real number >= 0."""
        rate = self.lr_scheduler(num_update)
        if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not (math.isfinite(rate) and rate >= 0):
            scheduler = getattr(self.lr_scheduler, "__name__", None) or type(self.lr_scheduler).__name__
            raise ValueError(f"the lr_scheduler ({scheduler}) returned {rate!r} at update {num_update}; a learning "
                             "rate must be a finite number >= 0. Nothing was updated")
        return rate

    def set_learning_rate(self, lr: float) -> None:
        """Set the learning rate. Raises UserWarning when a scheduler controls it (MXNet).

        Raises:
            TypeError: ``lr`` is not a real number (None included). ValueError: NaN, infinite or negative.
        """
        if self.lr_scheduler is not None:
            raise UserWarning("LRScheduler of the optimizer has already been defined; "
                              "set_learning_rate would be overridden by it")
        if lr is None:
            raise TypeError("learning_rate must be a real number, got None")
        _check_nonneg("learning_rate", lr)
        self.lr = lr

    def set_lr_mult(self, args_lr_mult: dict[Any, float]) -> None:
        """Per-index learning-rate multipliers (override the Parameters' lr_mult)."""
        self.lr_mult = dict(args_lr_mult)

    def set_wd_mult(self, args_wd_mult: dict[Any, float]) -> None:
        """Per-index weight-decay multipliers (override the Parameters' wd_mult)."""
        self.wd_mult = dict(args_wd_mult)

    def set_current_mirror(self, slot: int) -> None:
        """Select the update-count table of device mirror number ``slot`` (MXNet's ``_set_current_context``).

        Each device mirror keeps its own update counts, so a rule with bias correction sees the same
        step on every device; the Trainer and the updaters select the mirror before updating it.
        """
        table = self._all_index_update_counts.get(slot)
        if table is None:
            table = self._all_index_update_counts[slot] = dict(getattr(self, "_resumed_counts", {}))
        self._index_update_count = table

    def _update_count(self, index: Any) -> int:
        count = self._index_update_count.get(index, self.begin_num_update) + 1
        if self.lr_scheduler is not None:  # refuse a bad scheduled rate before anything is counted (or written);
            num_update = max(count, self.num_update)  # the rate read next (one scheduler call, as before)
            self._checked_rate = (num_update, self._scheduled_rate(num_update))
        self._index_update_count[index] = count
        self.num_update = max(count, self.num_update)
        return count

    def _get_lr(self, index: Any) -> float:
        """``learning_rate * multiplier``; ``set_lr_mult`` wins over ``param_dict`` (MXNet: the reverse)."""
        lr = self.learning_rate
        if index in self.lr_mult:
            return lr * self.lr_mult[index]
        if index in self.param_dict:
            return lr * self.param_dict[index].lr_mult
        return lr

    def _get_wd(self, index: Any) -> float:
        """``wd * multiplier``; ``set_wd_mult`` wins over ``param_dict`` (MXNet: the reverse)."""
        if index in self.wd_mult:
            return self.wd * self.wd_mult[index]
        if index in self.param_dict:
            return self.wd * self.param_dict[index].wd_mult
        return self.wd

    def _effective_grad(self, xp: Any, grad: Any, weight: Any, wd: float) -> Any:
        """``clip(rescale_grad * g, ±clip_gradient) + wd * w`` (a new array)."""
        g = grad * self.rescale_grad
        if self.clip_gradient is not None:
            g = xp.clip(g, -self.clip_gradient, self.clip_gradient)
        if wd:
            g = g + wd * weight
        return g

    # -- states ---------------------------------------------------------------------------
    def _create_state(self, index: Any, weight: Any) -> Any:
        """The rule's state for ``weight`` (raw array); None when stateless. Rules override this."""
        return None

    def create_state(self, index: Any, weight: Any) -> Any:
        """State for one weight (raw array), multi-precision aware; the Trainer calls this.

        Returns the rule's ``_create_state(index, weight)``, or
        ``MultiPrecisionState(master, _create_state(index, master))`` for a float16/bfloat16
        weight with ``multi_precision=True``. A half-precision weight without
        ``multi_precision`` warns once per optimizer (as MXNet warns) and keeps its dtype.

        ``weight`` may be a raw NumPy/CuPy array or an mxlite Tensor (MXNet's NDArray); for a
        Tensor every array of the state is a Tensor on the weight's device, as MXNet returns
        NDArrays, and :meth:`update` accepts it back.
        """
        return self._new_state(Optimizer._create_state, index, weight)

    create_state._mxlite_entry = True  # type: ignore[attr-defined]

    def create_state_multi_precision(self, index: Any, weight: Any) -> Any:
        """MXNet's name for the multi-precision-aware :meth:`create_state` (the Updater calls it)."""
        return self.create_state(index, weight)

    def _new_state(self, hook: Any, index: Any, weight: Any) -> Any:
        _check_dense_weight(self, index, weight)
        if isinstance(weight, Tensor):
            with weight.device.use():
                return _wrap_state(self._new_state(hook, index, weight.array), weight.device)
        if _is_low_precision(weight.dtype):
            if self.multi_precision:
                master = weight.astype(np.float32)
                return MultiPrecisionState(master, hook(self, index, master))
            if not getattr(self, "_warned_low_precision", False):
                self._warned_low_precision = True
                warnings.warn(f"{type(self).__name__}: accumulating with {weight.dtype} in the optimizer can lead "
                              "to poor accuracy or slow convergence; consider multi_precision=True",
                              UserWarning, stacklevel=4)
        return hook(self, index, weight)

    # -- the update -----------------------------------------------------------------------
    def update(self, indices: Any, weights: Any, grads: Any, states: Any) -> None:
        """Apply the rule to one index or to lists of them (updated in place).

        Weights, gradients and state arrays are raw NumPy/CuPy arrays or mxlite Tensors
        (MXNet's NDArrays, e.g. from :meth:`create_state` of a Tensor), in any mix. Each index's
        count is incremented before its learning rate is read. A
        :class:`MultiPrecisionState` routes the step through the float32 master; a
        :class:`~mxlite.ops.sparse.RowSparseTensor` gradient updates only its rows when the rule
        has ``lazy_update=True`` and is densified otherwise.

        Raises:
            TypeError: a row-sparse weight (MXNet's sparse weights; mxlite's are dense).
        """
        if not isinstance(indices, (list, tuple)):
            indices, weights, grads, states = [indices], [weights], [grads], [states]
        for index, weight in zip(indices, weights):
            _check_dense_weight(self, index, weight)
        for index, weight, grad, state in zip(indices, weights, grads, states):
            count = self._update_count(index)
            if isinstance(weight, Tensor):
                with weight.device.use():
                    self._apply(index, weight.array, _raw(grad), _unwrap_state(state), count)
            else:
                self._apply(index, weight, _raw(grad), _unwrap_state(state), count)

    def update_multi_precision(self, indices: Any, weights: Any, grads: Any, states: Any) -> None:
        """MXNet's name for the update of states from :meth:`create_state_multi_precision`.

        Same as :meth:`update`, which already dispatches on the state's type.
        """
        self.update(indices, weights, grads, states)

    def _apply(self, index: Any, weight: Any, grad: Any, state: Any, count: int) -> None:
        rows = None
        if isinstance(grad, RowSparseTensor):
            if getattr(self, "lazy_update", False):
                rows, grad = grad.indices.array, grad.data.array
            else:
                grad = grad.tostype("default").array
        target, inner = weight, state
        if isinstance(state, MultiPrecisionState):
            target, inner = state.master, state.state
            grad = grad.astype(np.float32)
        if rows is None:
            self.step(index, target, grad, inner, count)
        else:
            target_rows, inner_rows = target[rows], _take_rows(inner, rows, target.shape)
            self.step(index, target_rows, grad, inner_rows, count)
            target[rows] = target_rows
            _put_rows(inner, inner_rows, rows, target.shape)
        if target is not weight:
            if rows is None:
                weight[...] = target.astype(weight.dtype)
            else:
                weight[rows] = target[rows].astype(weight.dtype)

    def step(self, index: Any, weight: Any, grad: Any, state: Any, count: int) -> None:
        """Update ``weight`` (and ``state``) in place; ``count`` is this index's update count."""
        raise NotImplementedError(f"{type(self).__name__} must implement step(index, weight, grad, state, count)")

    # -- save / restore -------------------------------------------------------------------
    def _hyperparameter_names(self) -> list[str]:
        skip = {"param_dict", "lr_scheduler", "lr_mult", "wd_mult"}
        return sorted(k for k, v in vars(self).items()
                      if not k.startswith("_") and k not in skip and _is_json_value(v))

    def state_dict(self) -> dict[str, Any]:
        """Hyperparameters, multipliers, update counts and scheduler state as JSON values.

        Holds ``"type"`` (the class name), ``"hyperparameters"`` (every public attribute whose
        value is a JSON number, string, bool, None or a list of them, e.g. ``lr``, ``wd``,
        ``num_update``, ``momentum``), ``"lr_mult"``/``"wd_mult"`` and ``"update_counts"``
        (lists of pairs, so integer keys stay integers) and ``"lr_scheduler"`` (None, or the
        scheduler's class name and its ``state_dict()`` when it has one). ``param_dict`` is
        not saved: it holds the Parameters themselves.
        """
        sched = self.lr_scheduler
        return {
            "type": type(self).__name__,
            "hyperparameters": {k: _plain(getattr(self, k)) for k in self._hyperparameter_names()},
            "lr_mult": [[k, float(v)] for k, v in self.lr_mult.items()],
            "wd_mult": [[k, float(v)] for k, v in self.wd_mult.items()],
            "update_counts": [[slot, [[i, int(c)] for i, c in table.items()]]
                              for slot, table in self._all_index_update_counts.items()],
            "lr_scheduler": None if sched is None else {
                "type": type(sched).__name__,
                "state": sched.state_dict() if hasattr(sched, "state_dict") else None},
        }

    def check_state_dict(self, state: dict[str, Any]) -> None:
        """Raise the ValueError :meth:`load_state_dict` would raise for ``state``, changing nothing.

        For callers that must check several files before changing anything (checkpoints).
        """
        trial = copy.copy(self)  # load_state_dict only rebinds attributes of the optimizer ...
        trial.lr_scheduler = copy.deepcopy(self.lr_scheduler)  # ... but changes the scheduler in place
        trial.load_state_dict(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` into this optimizer (all or nothing).

        Build the optimizer (and its scheduler) with the same classes first; this restores
        every value so that further updates continue the saved run exactly.

        Raises:
            ValueError: a different optimizer or scheduler class, different hyperparameter
                names, or malformed entries.
        """
        try:
            kind, hyper = state["type"], dict(state["hyperparameters"])
            lr_mult = {_key(k): float(v) for k, v in state["lr_mult"]}
            wd_mult = {_key(k): float(v) for k, v in state["wd_mult"]}
            tables = [(int(slot), [(_key(i), int(c)) for i, c in table]) for slot, table in state["update_counts"]]
            saved_sched = state["lr_scheduler"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed optimizer state: {type(exc).__name__}: {exc}") from exc
        counts = _count_tables(tables)
        if kind != type(self).__name__:
            raise ValueError(f"optimizer state is for {kind!r}, cannot load it into {type(self).__name__}; "
                             f"build a {kind} optimizer before loading")
        expected = set(self._hyperparameter_names())
        if set(hyper) != expected:
            raise ValueError(f"optimizer state hyperparameters do not match {type(self).__name__}: "
                             f"missing {sorted(expected - set(hyper))}, unexpected {sorted(set(hyper) - expected)}")
        self._check_loaded(hyper, lr_mult, wd_mult, counts)
        if 0 not in counts:
            counts[0] = {}
        sched = self.lr_scheduler
        if (saved_sched is None) != (sched is None) or (
                saved_sched is not None and saved_sched.get("type") != type(sched).__name__):
            raise ValueError(f"optimizer state was saved with lr_scheduler "
                             f"{None if saved_sched is None else saved_sched.get('type')!r}, this optimizer has "
                             f"{None if sched is None else type(sched).__name__!r}; build it with the same scheduler")
        if saved_sched is not None and saved_sched.get("state") is not None:
            sched.load_state_dict(saved_sched["state"])  # validates before changing anything
        for k, v in hyper.items():
            setattr(self, k, tuple(v) if isinstance(getattr(self, k), tuple) else v)
        self.lr_mult, self.wd_mult = lr_mult, wd_mult
        self._all_index_update_counts = counts
        self._index_update_count = counts[0]
        self._resumed_counts = dict(counts[0])  # for mirrors the saved run did not have

    def _check_loaded(self, hyper: dict[str, Any], lr_mult: dict[Any, float], wd_mult: dict[Any, float],
                      counts: dict[int, dict[Any, int]]) -> None:
        """ValueError unless loaded values pass the checks construction applies (before anything changes).

        Each hyperparameter must have the kind of value it has now (a bool stays a bool, a number a
        number or None); the values then go through the class's own constructor, so a state file
        can never hold what ``Optimizer(...)`` refuses (a NaN rate, ``beta1 = 5``, a negative
        ``rescale_grad``). Update counts must be integers >= 0 and multipliers finite numbers.
        """
        for name, value in hyper.items():
            current = getattr(self, name)
            if isinstance(current, bool):
                ok = isinstance(value, bool)
            elif isinstance(current, str):
                ok = isinstance(value, str)
            elif isinstance(current, (list, tuple)):
                ok = isinstance(value, list)
            else:
                ok = value is None or (isinstance(value, numbers.Real) and not isinstance(value, bool))
            if not ok:
                raise ValueError(f"hyperparameter {name!r} is {value!r} ({type(value).__name__}); "
                                 f"{type(self).__name__} holds a {type(current).__name__} there")
        for name in ("num_update", "begin_num_update"):
            value = hyper.get(name, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"hyperparameter {name!r} must be an integer >= 0, got {value!r}")
        for slot, table in counts.items():
            if slot < 0 or any(c < 0 for c in table.values()):
                raise ValueError(f"update counts must be >= 0 for mirrors >= 0, got mirror {slot}: {table}")
        if counts and 0 not in counts:  # state_dict always holds mirror 0: new mirrors resume from its counts
            raise ValueError(f"update counts are given for mirrors {sorted(counts)} but not for mirror 0, which "
                             "every saved optimizer holds (mirrors added on resume start from its counts)")
        for what, mults in (("lr_mult", lr_mult), ("wd_mult", wd_mult)):
            bad = {k: v for k, v in mults.items() if not math.isfinite(v)}
            if bad:
                raise ValueError(f"{what} must hold finite numbers, got {bad}")
        kwargs = self._constructor_arguments(hyper)
        if kwargs is not None:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    type(self)(**kwargs)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"a hyperparameter is one {type(self).__name__}(...) refuses: {exc}") from exc

    def _constructor_arguments(self, hyper: dict[str, Any]) -> dict[str, Any] | None:
        """``hyper`` as keyword arguments of this class's constructor; None when it cannot be built from them."""
        accepted: dict[str, inspect.Parameter] = {}
        for klass in type(self).__mro__:
            init = klass.__dict__.get("__init__")
            if init is None:
                continue
            params = inspect.signature(init).parameters
            accepted.update({k: p for k, p in params.items() if k != "self" and k not in accepted
                             and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)})
            if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
                break
        kwargs = {}
        for name, value in hyper.items():
            arg = "learning_rate" if name == "lr" else name
            if arg in accepted:
                kwargs[arg] = tuple(value) if isinstance(getattr(self, name), tuple) else value
        required = [k for k, p in accepted.items() if p.default is p.empty and k not in kwargs]
        return None if required else kwargs

    def __repr__(self) -> str:
        return f"{type(self).__name__}(learning_rate={self.learning_rate}, wd={self.wd})"


def _create_state_entry(owner: type[Optimizer]) -> Any:
    """``owner.create_state``: the multi-precision wrapper around ``owner._create_state``."""
    def create_state(self: Optimizer, index: Any, weight: Any) -> Any:
        return self._new_state(owner._create_state, index, weight)

    create_state.__doc__ = Optimizer.create_state.__doc__
    create_state.__qualname__ = f"{owner.__qualname__}.create_state"
    create_state.__module__ = owner.__module__
    create_state._mxlite_entry = True  # type: ignore[attr-defined]
    return create_state


Optimizer.register = staticmethod(register)  # type: ignore[attr-defined]  # MXNet's Optimizer.register
Optimizer.create_optimizer = staticmethod(create)  # type: ignore[attr-defined]  # and create_optimizer


def _check_dense_weight(opt: Optimizer, index: Any, weight: Any) -> None:
    """Refuse a row-sparse weight, which the rules would update only in part (MXNet's sparse weights)."""
    if isinstance(weight, RowSparseTensor):
        raise TypeError(f"{type(opt).__name__}: the weight of index {index!r} is row_sparse; mxlite updates dense "
                        "weights only (row_sparse gradients are fine): pass weight.tostype('default')")


def _raw(x: Any) -> Any:
    """The array behind a Tensor; anything else (a raw array, a RowSparseTensor) as it is."""
    return x.array if isinstance(x, Tensor) else x


def _wrap_state(state: Any, device: Any) -> Any:
    """``state`` with every raw array leaf wrapped in a Tensor on ``device`` (the same storage)."""
    if isinstance(state, MultiPrecisionState):
        return MultiPrecisionState(*(_wrap_state(s, device) for s in state))
    if isinstance(state, (tuple, list)):
        return type(state)(_wrap_state(s, device) for s in state)
    if isinstance(state, Tensor) or not (hasattr(state, "shape") and hasattr(state, "dtype")):
        return state
    return Tensor(state, device)


def _unwrap_state(state: Any) -> Any:
    """``state`` with every Tensor leaf replaced by its array (updates in place reach the Tensors)."""
    if isinstance(state, MultiPrecisionState):
        return MultiPrecisionState(*(_unwrap_state(s) for s in state))
    if isinstance(state, (tuple, list)):
        return type(state)(_unwrap_state(s) for s in state)
    return _raw(state)


def _take_rows(state: Any, rows: Any, shape: tuple[int, ...]) -> Any:
    """The rows ``rows`` of every weight-shaped array in a (nested) state; other leaves unchanged."""
    if isinstance(state, (tuple, list)):
        return type(state)(_take_rows(s, rows, shape) for s in state)
    if getattr(state, "shape", None) == shape:
        return state[rows]
    return state


def _put_rows(state: Any, values: Any, rows: Any, shape: tuple[int, ...]) -> None:
    """Write rows taken by :func:`_take_rows` (and updated in place) back into ``state``."""
    if isinstance(state, (tuple, list)):
        for s, v in zip(state, values):
            _put_rows(s, v, rows, shape)
    elif getattr(state, "shape", None) == shape:
        state[rows] = values


def _is_json_value(v: Any) -> bool:
    if v is None or isinstance(v, (bool, numbers.Real, str)):
        return True
    return isinstance(v, (list, tuple)) and all(_is_json_value(x) for x in v)


def _plain(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def _count_tables(tables: list[tuple[int, list[tuple[Any, int]]]]) -> dict[int, dict[Any, int]]:
    """The ``update_counts`` of a state dict as {mirror: {index: count}}; a mirror or index given twice is refused.

    Raises:
        ValueError: e.g. "update counts are given twice for mirror 0".
    """
    counts: dict[int, dict[Any, int]] = {}
    for slot, table in tables:
        if slot in counts:
            raise ValueError(f"update counts are given twice for mirror {slot}")
        counts[slot] = dict(table)
        if len(counts[slot]) != len(table):
            twice = sorted({repr(i) for i, _ in table if sum(1 for j, _ in table if j == i) > 1})
            raise ValueError(f"update counts of mirror {slot} are given twice for index {', '.join(twice)}")
    return counts


def _key(k: Any) -> Any:
    if isinstance(k, bool) or not isinstance(k, (int, str)):
        raise ValueError(f"an index must be an int or a str, got {k!r}")
    return k


def _xp(arr: Any) -> Any:
    return np if isinstance(arr, np.ndarray) else __import__("cupy")
