"""Learning-rate schedules (``mx.lr_scheduler``, Apache MXNet master semantics).

A scheduler is a callable ``num_update -> lr``. The :class:`~mxlite.optimizer.Optimizer`
counts updates per parameter index, increments the count *before* reading the rate (so the
first update asks for ``num_update = 1``), and calls ``scheduler(num_update)`` with the
largest count. At construction the Optimizer also assigns ``scheduler.base_lr =
learning_rate``.

Schedules:

* :class:`FactorScheduler`: multiply by ``factor`` every ``step`` updates (stateful).
* :class:`MultiFactorScheduler`: multiply by ``factor`` at each listed update (stateful).
* :class:`PolyScheduler`: polynomial decay from ``base_lr`` to ``final_lr``.
* :class:`CosineScheduler`: half-cosine decay from ``base_lr`` to ``final_lr``.
* :class:`ExponentialDecay`: Apache SINGA's ``init_value * decay_rate ** (step / decay_steps)``.

The first four take MXNet's optional warm-up (``warmup_steps``, ``warmup_begin_lr``,
``warmup_mode``); see :class:`LRScheduler`.

Every schedule has ``state_dict()`` / ``load_state_dict(d)`` returning and taking a dict of
JSON-serialisable values (class name, arguments, and position), so a resumed run continues
at the same point of the schedule: build the scheduler with the same arguments, build the
Optimizer (which overwrites ``base_lr``), then call ``load_state_dict``.

Where mxlite differs from MXNet (each one turns a crash or a silent non-decay into an
error at construction, or makes a resumed query agree with the uninterrupted run):

* argument errors raise ``ValueError``/``TypeError`` naming the argument and the value
  (MXNet uses bare ``assert`` for types and for an empty step list);
* ``FactorScheduler``/``MultiFactorScheduler`` reject ``factor < 0`` (MXNet would make the
  rate negative, i.e. ascend the loss, or hide it behind ``stop_factor_lr``);
* ``PolyScheduler``/``CosineScheduler`` reject ``warmup_steps >= max_update`` (MXNet divides
  by zero at ``num_update == max_update`` or never decays) and ``PolyScheduler`` rejects
  ``pwr < 0`` (MXNet raises ``ZeroDivisionError`` at ``max_update``);
* ``PolyScheduler``/``CosineScheduler`` past ``max_update`` return the rate at
  ``max_update`` (``final_lr`` for ``pwr > 0``). MXNet returns whatever rate it computed
  last, which is the same value after an uninterrupted run, but is the stale ``base_lr``
  when the first query already lies past ``max_update``.
"""

from __future__ import annotations

import inspect
import logging
import math
import numbers
from typing import Any

__all__ = [
    "LRScheduler",
    "FactorScheduler",
    "MultiFactorScheduler",
    "PolyScheduler",
    "CosineScheduler",
    "ExponentialDecay",
]

_LOG = logging.getLogger(__name__)

_WARMUP_MODES = ("linear", "constant")
_COUNTERS = ("count", "cur_step_ind", "warmup_steps", "max_update", "max_steps")  # integers >= 0 in a state


def _as_int(name: str, value: Any) -> int:
    """``value`` as a Python int; TypeError naming ``name`` for a non-integer (MXNet asserts int)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r} of type {type(value).__name__}")
    return int(value)


def _real(name: str, value: Any, *, positive: bool = False) -> float:
    """``value`` when it is a finite real number >= 0 (> 0 with ``positive``); errors name the argument."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} of type {type(value).__name__}")
    if not (value > 0 if positive else value >= 0):
        raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'}, got {value}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    return value


def _check_count(num_update: Any) -> None:
    """A schedule is asked for a number of updates: a finite real number >= 0 (the Optimizer passes ints)."""
    if isinstance(num_update, bool) or not isinstance(num_update, numbers.Real):
        raise TypeError(f"num_update must be a number of updates (an int >= 0), got {num_update!r} of type "
                        f"{type(num_update).__name__}")
    if not num_update >= 0 or not math.isfinite(num_update):
        raise ValueError(f"num_update must be a finite number of updates >= 0, got {num_update}")


def _plain(value: Any) -> Any:
    """A JSON-serialisable copy of ``value`` (NumPy scalars become Python numbers, lists are copied)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    return value


def _check_factor(factor: float) -> None:
    """A decay factor lies in [0, 1]: MXNet rejects > 1; mxlite also rejects < 0 (a negative rate)."""
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real):
        raise TypeError(f"factor must be a real number, got {factor!r} of type {type(factor).__name__}")
    if factor > 1.0:
        raise ValueError(f"factor must be no more than 1 to make the rate decrease, got {factor}")
    if not factor >= 0.0:
        raise ValueError(f"factor must be >= 0 (a negative factor makes the learning rate negative), got {factor}")


class _Schedule:
    """State save/restore shared by every schedule: the instance's attributes are its state."""

    base_lr: float

    def __call__(self, num_update: int) -> float:
        raise NotImplementedError(f"{type(self).__name__} must override __call__")

    def state_dict(self) -> dict[str, Any]:
        """The schedule's arguments and position as a dict of JSON-serialisable values.

        Holds ``"type"`` (the class name) and one entry per attribute: the arguments, the
        current ``base_lr`` and any counters (``count``, ``cur_step_ind``).
        """
        state = {"type": type(self).__name__}
        state.update({key: _plain(value) for key, value in vars(self).items()})
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` of the same class, so the schedule continues from there.

        Raises:
            ValueError: the dict comes from another class, or its keys differ from this
                schedule's (lists the missing and the unexpected ones).
        """
        kind = state.get("type")
        if kind != type(self).__name__:
            raise ValueError(f"state_dict is for {kind!r}, cannot load it into {type(self).__name__}; "
                             f"save and load with the same scheduler class")
        expected = set(vars(self))
        given = set(state) - {"type"}
        if given != expected:
            raise ValueError(f"state_dict keys do not match {type(self).__name__}: "
                             f"missing {sorted(expected - given)}, unexpected {sorted(given - expected)}")
        self._check_loaded(state)
        for key in expected:
            value = state[key]
            setattr(self, key, list(value) if isinstance(value, (list, tuple)) else value)

    def _check_loaded(self, state: dict[str, Any]) -> None:
        """ValueError unless ``state`` holds values of the kinds this schedule holds, that its constructor accepts."""
        for key, current in vars(self).items():
            value = state[key]
            if isinstance(current, bool):
                ok = isinstance(value, bool)
            elif isinstance(current, str):
                ok = isinstance(value, str)
            elif isinstance(current, (list, tuple)):
                ok = isinstance(value, list) and all(isinstance(v, numbers.Real) and not isinstance(v, bool)
                                                     and math.isfinite(v) for v in value)
            elif key in _COUNTERS:
                ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0
            elif isinstance(current, numbers.Real):
                ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
            else:
                ok = True
            if not ok:
                raise ValueError(f"state_dict entry {key!r} of {type(self).__name__} is {value!r}; it must be "
                                 + ("an integer >= 0" if key in _COUNTERS else
                                    f"of type {type(current).__name__}, finite"))
        if "base_lr" in state and not state["base_lr"] >= 0:
            raise ValueError(f"state_dict entry 'base_lr' of {type(self).__name__} must be >= 0, "
                             f"got {state['base_lr']}")
        params = inspect.signature(type(self).__init__).parameters
        aliases = {"pwr": "power", "init_value": "base_lr", "base_lr": "warmup_final_lr"}
        kwargs = {}
        for name in params:
            source = aliases.get(name, name)
            source = source if source in state else name
            if name != "self" and source in state:
                kwargs[name] = state[source]
        try:
            type(self)(**kwargs)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"state_dict holds a value {type(self).__name__}(...) refuses: {exc}") from exc


class LRScheduler(_Schedule):
    """Base class of MXNet schedules: holds ``base_lr`` and the optional warm-up.

    For ``num_update < warmup_steps`` a subclass returns :meth:`get_warmup_lr`:

    * ``'linear'``:   ``lr = warmup_begin_lr + (warmup_final_lr - warmup_begin_lr) * num_update / warmup_steps``
    * ``'constant'``: ``lr = warmup_begin_lr``

    where ``warmup_final_lr`` is ``base_lr`` as given to the constructor.

    Warning:
        As in MXNet, ``warmup_final_lr`` is fixed at construction: the Optimizer's
        ``base_lr = learning_rate`` assignment does not move it, so when the two differ the
        rate jumps from the warm-up target to ``learning_rate`` at ``warmup_steps``. Pass the
        same value to both.

    Args:
        base_lr: the rate the schedule starts from after warm-up (default 0.01).
        warmup_steps: number of updates that use the warm-up rate (0 disables it).
        warmup_begin_lr: warm-up rate at ``num_update = 0``; must not exceed ``base_lr``.
        warmup_mode: ``'linear'`` (ramp to ``base_lr``) or ``'constant'`` (hold ``warmup_begin_lr``).

    Raises:
        TypeError: ``warmup_steps`` not an integer.
        ValueError: ``warmup_begin_lr > base_lr``, ``warmup_steps < 0`` or an unknown ``warmup_mode``.
    """

    def __init__(self, base_lr: float = 0.01, warmup_steps: int = 0, warmup_begin_lr: float = 0,
                 warmup_mode: str = "linear") -> None:
        self.base_lr = _real("base_lr", base_lr)
        self.warmup_steps = _as_int("warmup_steps", warmup_steps)
        self.warmup_final_lr = base_lr
        self.warmup_begin_lr = _real("warmup_begin_lr", warmup_begin_lr)
        # Same order of checks as MXNet: begin vs final rate, step count, mode.
        if self.warmup_begin_lr > self.warmup_final_lr:
            raise ValueError(f"base_lr ({base_lr}) has to be higher than warmup_begin_lr ({warmup_begin_lr}); "
                             f"lower warmup_begin_lr or raise base_lr")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps has to be positive or 0, got {warmup_steps}")
        if warmup_mode not in _WARMUP_MODES:
            raise ValueError(f"warmup_mode must be one of {_WARMUP_MODES}, got {warmup_mode!r}")
        self.warmup_mode = warmup_mode

    def get_warmup_lr(self, num_update: int) -> float:
        """The warm-up rate at ``num_update`` (see the class docstring for the formulas).

        Raises:
            ValueError: ``num_update >= warmup_steps`` (outside the warm-up), or an unknown mode.
        """
        _check_count(num_update)
        if num_update >= self.warmup_steps:
            raise ValueError(f"get_warmup_lr: num_update ({num_update}) must be below warmup_steps "
                             f"({self.warmup_steps})")
        if self.warmup_mode == "linear":
            # begin + (final - begin) * n / W, in MXNet's order of operations
            increase = (self.warmup_final_lr - self.warmup_begin_lr) * float(num_update) / float(self.warmup_steps)
            return self.warmup_begin_lr + increase
        if self.warmup_mode == "constant":
            return self.warmup_begin_lr
        raise ValueError(f"warmup_mode must be one of {_WARMUP_MODES}, got {self.warmup_mode!r}")

    def __call__(self, num_update: int) -> float:
        """The learning rate for update number ``num_update``.

        ``num_update`` is the largest number of updates applied to any one weight
        (``max_i k_i`` when weight ``i`` has been updated ``k_i`` times).
        """
        raise NotImplementedError(f"{type(self).__name__} must override __call__")


class FactorScheduler(LRScheduler):
    """Multiply the rate by ``factor`` every ``step`` updates, never going below ``stop_factor_lr``.

    The rule is MXNet's and is stateful: on each call after warm-up, ::

        while num_update > count + step:
            count   += step
            base_lr *= factor
            if base_lr < stop_factor_lr: base_lr = stop_factor_lr

    and the call returns ``base_lr``. Without clamping this is, for ``num_update >= 1``, ::

        lr = base_lr * factor ** floor((num_update - 1) / step)

    so the first decay applies at ``num_update = step + 1`` (MXNet's docstring writes
    ``floor(num_update / step)``, which is one update early). ``count`` starts at 0, not at
    ``warmup_steps``: decays that fall inside the warm-up are applied at once when it ends.
    The ``while`` makes a fresh scheduler asked for a late ``num_update`` (a resumed run)
    agree with one stepped through every update; asking for an earlier ``num_update``
    afterwards does not undo decays. Each change is logged at INFO level.

    Note:
        As in MXNet, ``base_lr`` is the running rate, and clamping can raise it: a
        ``base_lr`` already below ``stop_factor_lr`` is lifted to ``stop_factor_lr`` at the
        first decay.

    Args:
        step: updates between decays (>= 1).
        factor: multiplier per decay, in [0, 1].
        stop_factor_lr: floor of the rate (default 1e-8).
        base_lr, warmup_steps, warmup_begin_lr, warmup_mode: see :class:`LRScheduler`.

    Raises:
        ValueError: ``step < 1``, ``factor > 1`` or ``factor < 0`` (mxlite; MXNet accepts it), and
            the :class:`LRScheduler` errors.
    """

    def __init__(self, step: int, factor: float = 1, stop_factor_lr: float = 1e-8, base_lr: float = 0.01,
                 warmup_steps: int = 0, warmup_begin_lr: float = 0, warmup_mode: str = "linear") -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        step = _as_int("step", step)
        if step < 1:
            raise ValueError(f"step must be greater or equal than 1 update, got {step}")
        _check_factor(factor)
        self.step = step
        self.factor = factor
        self.stop_factor_lr = _real("stop_factor_lr", stop_factor_lr)
        self.count = 0

    def __call__(self, num_update: int) -> float:
        _check_count(num_update)
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        # A while, not an if: a resumed run may ask for an update several steps ahead.
        while num_update > self.count + self.step:
            self.count += self.step
            self.base_lr *= self.factor
            if self.base_lr < self.stop_factor_lr:
                self.base_lr = self.stop_factor_lr
                _LOG.info("Update[%d]: now learning rate arrived at %0.5e, will not change in the future",
                          num_update, self.base_lr)
            else:
                _LOG.info("Update[%d]: Change learning rate to %0.5e", num_update, self.base_lr)
        return self.base_lr


class MultiFactorScheduler(LRScheduler):
    """Multiply the rate by ``factor`` once for each listed update that has been passed.

    After warm-up, with ``k`` the number of entries ``s`` of ``step`` with ``s < num_update``, ::

        lr = base_lr * factor ** k

    so the rate changes at ``num_update = step[i] + 1``. The rule is MXNet's and is
    stateful: ``cur_step_ind`` indexes the next entry to pass and ``count`` holds the last
    entry passed; each call advances past every entry below ``num_update`` (multiplying
    ``base_lr`` by ``factor`` each time and logging at INFO level), so decays are never
    undone by a smaller ``num_update`` later.

    Args:
        step: strictly increasing list of update numbers, each >= 1.
        factor: multiplier per listed update, in [0, 1].
        base_lr, warmup_steps, warmup_begin_lr, warmup_mode: see :class:`LRScheduler`.

    Raises:
        TypeError: ``step`` not a list or tuple.
        ValueError: empty ``step``, an entry not above the previous one, an entry < 1,
            ``factor > 1`` or ``factor < 0`` (mxlite; MXNet accepts it), and the
            :class:`LRScheduler` errors.
    """

    def __init__(self, step: list[int], factor: float = 1, base_lr: float = 0.01, warmup_steps: int = 0,
                 warmup_begin_lr: float = 0, warmup_mode: str = "linear") -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if not isinstance(step, (list, tuple)):
            raise TypeError(f"step must be a list of update numbers, got {step!r} of type {type(step).__name__}")
        if len(step) < 1:
            raise ValueError("step must list at least one update number, got []")
        for i, s in enumerate(step):
            _as_int(f"step[{i}]", s)
            if i != 0 and step[i] <= step[i - 1]:
                raise ValueError(f"step must be a strictly increasing list, got {list(step)} "
                                 f"(step[{i}] = {step[i]} <= step[{i - 1}] = {step[i - 1]})")
            if s < 1:
                raise ValueError(f"step entries must be greater or equal than 1 update, got step[{i}] = {s}")
        _check_factor(factor)
        self.step = list(step)
        self.cur_step_ind = 0
        self.factor = factor
        self.count = 0

    def __call__(self, num_update: int) -> float:
        _check_count(num_update)
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        # Pass every listed update below num_update (several at once when resuming).
        while self.cur_step_ind < len(self.step) and num_update > self.step[self.cur_step_ind]:
            self.count = self.step[self.cur_step_ind]
            self.cur_step_ind += 1
            self.base_lr *= self.factor
            _LOG.info("Update[%d]: Change learning rate to %0.5e", num_update, self.base_lr)
        return self.base_lr


def _check_max_update(max_update: Any, warmup_steps: int) -> int:
    max_update = _as_int("max_update", max_update)
    if max_update < 1:
        raise ValueError(f"max_update (maximum number of updates) must be strictly positive, got {max_update}")
    if warmup_steps >= max_update:
        raise ValueError(f"max_update ({max_update}) must exceed warmup_steps ({warmup_steps}): the decay runs "
                         f"over the max_update - warmup_steps updates after warm-up")
    return max_update


class _DecayToFinal(LRScheduler):
    """Shared shape of Poly and Cosine: after warm-up, decay from ``base_lr`` to ``final_lr``
    over ``max_steps = max_update - warmup_steps`` updates, then hold ``final_lr``.

    Subclasses give ``_decayed(done)``, the rate ``done`` updates after warm-up.
    """

    def __init__(self, max_update: int, base_lr: float = 0.01, final_lr: float = 0, warmup_steps: int = 0,
                 warmup_begin_lr: float = 0, warmup_mode: str = "linear") -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        self.max_update = _check_max_update(max_update, self.warmup_steps)
        self.base_lr_orig = self.base_lr
        self.final_lr = _real("final_lr", final_lr)
        self.max_steps = self.max_update - self.warmup_steps

    def _decayed(self, done: int) -> float:
        raise NotImplementedError

    def __call__(self, num_update: int) -> float:
        _check_count(num_update)
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        self.base_lr = self._decayed(min(num_update, self.max_update) - self.warmup_steps)
        return self.base_lr


class PolyScheduler(_DecayToFinal):
    """Polynomial decay from ``base_lr`` to ``final_lr`` over ``max_update`` updates.

    With ``max_steps = max_update - warmup_steps``, for ``warmup_steps <= num_update <= max_update``::

        lr = final_lr + (base_lr - final_lr) * (1 - (num_update - warmup_steps) / max_steps) ** pwr

    and for ``num_update > max_update`` the value at ``max_update`` (``final_lr`` when
    ``pwr > 0``). Each call stores the rate in ``base_lr``; the decay itself starts from
    the constructor's ``base_lr`` (kept as ``base_lr_orig``).

    Warning:
        As in MXNet, the decay ignores the Optimizer's ``base_lr = learning_rate``
        assignment: it always starts from the ``base_lr`` given here. Pass the same value
        to both.

    Args:
        max_update: update at which the rate reaches ``final_lr`` (> ``warmup_steps``).
        base_lr: starting rate (default 0.01).
        pwr: power of the decay (>= 0; default 2).
        final_lr: rate from ``max_update`` on (default 0).
        warmup_steps, warmup_begin_lr, warmup_mode: see :class:`LRScheduler`.

    Raises:
        TypeError: ``max_update`` not an integer.
        ValueError: ``max_update < 1``, ``max_update <= warmup_steps``, ``pwr < 0``, and the
            :class:`LRScheduler` errors.
    """

    def __init__(self, max_update: int, base_lr: float = 0.01, pwr: float = 2, final_lr: float = 0,
                 warmup_steps: int = 0, warmup_begin_lr: float = 0, warmup_mode: str = "linear") -> None:
        if isinstance(pwr, numbers.Real) and not isinstance(pwr, bool) and pwr < 0:
            raise ValueError(f"pwr must be >= 0 (a negative power grows without bound), got {pwr}")
        _real("pwr", pwr)
        super().__init__(max_update, base_lr, final_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        self.power = pwr

    def _decayed(self, done: int) -> float:
        # final + (orig - final) * (1 - done / max_steps) ** pwr, in MXNet's order of operations
        return self.final_lr + (self.base_lr_orig - self.final_lr) * \
            pow(1 - float(done) / float(self.max_steps), self.power)


class CosineScheduler(_DecayToFinal):
    """Half-cosine decay from ``base_lr`` to ``final_lr`` over ``max_update`` updates.

    With ``max_steps = max_update - warmup_steps``, for ``warmup_steps <= num_update <= max_update``::

        lr = final_lr + (base_lr - final_lr) * (1 + cos(pi * (num_update - warmup_steps) / max_steps)) / 2

    and ``final_lr`` for ``num_update > max_update``. Each call stores the rate in
    ``base_lr``; the decay itself starts from the constructor's ``base_lr`` (kept as
    ``base_lr_orig``).

    Warning:
        As in MXNet, the decay ignores the Optimizer's ``base_lr = learning_rate``
        assignment: it always starts from the ``base_lr`` given here. Pass the same value
        to both.

    Args:
        max_update: update at which the rate reaches ``final_lr`` (> ``warmup_steps``).
        base_lr: starting rate (default 0.01).
        final_lr: rate from ``max_update`` on (default 0).
        warmup_steps, warmup_begin_lr, warmup_mode: see :class:`LRScheduler`.

    Raises:
        TypeError: ``max_update`` not an integer.
        ValueError: ``max_update < 1``, ``max_update <= warmup_steps``, and the
            :class:`LRScheduler` errors.
    """

    def _decayed(self, done: int) -> float:
        # final + (orig - final) * (1 + cos(pi * done / max_steps)) / 2, in MXNet's order of operations
        return self.final_lr + (self.base_lr_orig - self.final_lr) * \
            (1 + math.cos(math.pi * done / self.max_steps)) / 2


class ExponentialDecay(_Schedule):
    """Apache SINGA's exponential decay (``singa.opt.ExponentialDecay``)::

        lr = init_value * decay_rate ** (step / decay_steps)      (staircase=False)
        lr = init_value * decay_rate ** (step // decay_steps)     (staircase=True)

    Stateless: the value depends only on ``step`` (the ``num_update`` the Optimizer
    passes, which starts at 1; SINGA's own counter starts at 0). ``base_lr`` is the same
    number as ``init_value``, so the Optimizer's ``base_lr = learning_rate`` assignment
    sets the starting rate. Computed in float64 (SINGA computes in a float32 tensor).
    ``decay_rate > 1`` grows the rate, as in SINGA.

    Args:
        init_value: rate at step 0.
        decay_steps: steps per factor of ``decay_rate`` (> 0).
        decay_rate: multiplier per ``decay_steps`` steps (> 0).
        staircase: use the whole number of elapsed ``decay_steps`` periods (a step function).

    Raises:
        ValueError: ``decay_steps <= 0`` or ``decay_rate <= 0``.
    """

    def __init__(self, init_value: float, decay_steps: float, decay_rate: float, staircase: bool = False) -> None:
        _real("decay_steps", decay_steps, positive=True)
        _real("decay_rate", decay_rate, positive=True)
        self.base_lr = _real("init_value", init_value)
        self.decay_steps = decay_steps
        self.decay_rate = decay_rate
        self.staircase = bool(staircase)

    @property
    def init_value(self) -> float:
        """The rate at step 0 (SINGA's name for ``base_lr``)."""
        return self.base_lr

    @init_value.setter
    def init_value(self, value: float) -> None:
        self.base_lr = value

    def __call__(self, num_update: int) -> float:
        _check_count(num_update)
        if self.staircase:
            exponent = float(num_update // self.decay_steps)   # whole periods elapsed
        else:
            exponent = num_update / self.decay_steps           # fractional periods
        return float(self.base_lr) * float(self.decay_rate) ** exponent
