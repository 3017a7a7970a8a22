"""Dynamic loss scaling for half-precision training (MXNet's ``mx.amp``).

    net.cast("float16")                        # mxlite does not rewrite ops: cast the network
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    mx.amp.init_trainer(trainer)               # float32 master weights, a LossScaler
    with mx.autograd.record():
        loss = loss_fn(net(x), y)
        with mx.amp.scale_loss(loss, trainer) as scaled:
            mx.autograd.backward(scaled)
    trainer.step(batch_size)                   # skipped (nothing written) when a gradient overflowed

The loss is multiplied by the loss scale before backward, so small float16 gradients do not
flush to zero; the Trainer divides it out again through the optimizer's ``rescale_grad``. After
the gradients are summed (so every mirror and every rank sees the same values and takes the
same decision), a step whose gradients hold inf or NaN is skipped and the scale is divided by
``scale_factor``; after ``scale_window`` good steps in a row it is multiplied by it (up to
``max_scale``). MXNet applies a new scale one step late; mxlite applies it at the next step,
as PyTorch's GradScaler does.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from .device.copy import as_host

__all__ = ["LossScaler", "all_gradients_finite", "gradients_finite", "init", "init_trainer", "scale_loss", "unscale"]

_log = logging.getLogger(__name__)


class LossScaler:
    """Dynamic loss scale (defaults as MXNet: 2**16, halved on overflow, doubled after 2000 good steps).

    Args:
        init_scale: the first loss scale.
        scale_factor: divide by it on overflow, multiply by it after ``scale_window`` good steps.
        scale_window: good steps in a row before the scale grows.
        max_scale: the scale never grows above this.
        min_scale: the scale never falls below this.

    Raises:
        ValueError: a non-positive scale, a factor <= 1, or a window < 1 (names the argument).
    """

    def __init__(self, init_scale: float = 2.0**16, scale_factor: float = 2.0, scale_window: int = 2000,
                 max_scale: float = 2.0**24, min_scale: float = 1.0) -> None:
        for name, value in (("init_scale", init_scale), ("max_scale", max_scale), ("min_scale", min_scale)):
            if not value > 0:
                raise ValueError(f"LossScaler: {name} must be > 0, got {value!r}")
        if not scale_factor > 1:
            raise ValueError(f"LossScaler: scale_factor must be > 1, got {scale_factor!r}")
        if int(scale_window) < 1:
            raise ValueError(f"LossScaler: scale_window must be >= 1, got {scale_window!r}")
        self._loss_scale = float(init_scale)
        self.scale_factor, self.scale_window = float(scale_factor), int(scale_window)
        self.max_scale, self.min_scale = float(max_scale), float(min_scale)
        self._unskipped = 0

    @property
    def loss_scale(self) -> float:
        """The factor the next loss is multiplied by."""
        return self._loss_scale

    def has_overflow(self, params: Sequence[Any]) -> bool:
        """Whether any gradient of ``params`` (first mirror) holds inf/NaN; updates the scale.

        Call it once per step, after the gradients are summed. It reads one flag per device
        (:func:`all_gradients_finite`: one host synchronisation and one byte each), whatever the
        number of parameters.
        """
        overflow = not all_gradients_finite([p for p in params if p.grad_req != "null"])
        self.update(overflow)
        return overflow

    def update(self, overflow: bool) -> None:
        """Apply one step's outcome: shrink the scale on overflow, grow it after a run of good steps."""
        if overflow:
            self._loss_scale = max(self.min_scale, self._loss_scale / self.scale_factor)
            self._unskipped = 0
            _log.info("AMP: decreasing loss scale to %f", self._loss_scale)
            return
        self._unskipped += 1
        if self._unskipped == self.scale_window:
            self._unskipped = 0
            self._loss_scale = min(self.max_scale, self._loss_scale * self.scale_factor)
            _log.info("AMP: increasing loss scale to %f", self._loss_scale)

    def state_dict(self) -> dict[str, float | int]:
        """The scale and the count of good steps, for resuming bit for bit."""
        return {"loss_scale": self._loss_scale, "unskipped": self._unskipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s values. ValueError (nothing changed) when malformed."""
        try:
            scale, unskipped = float(state["loss_scale"]), int(state["unskipped"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"LossScaler.load_state_dict: malformed state {state!r}") from exc
        if not scale > 0 or unskipped < 0:
            raise ValueError(f"LossScaler.load_state_dict: invalid state {state!r}")
        self._loss_scale, self._unskipped = scale, unskipped


def _finite_runs(params: Sequence[Any]) -> dict[Any, list[Any]]:
    """Per device: the raw arrays whose finiteness decides for ``params`` (first mirrors' gradients).

    Dense gradients that lie next to each other in an arena's gradient buffer (the usual case: a
    model's gradients are one run, in reverse registration order) are checked as one slice, the
    alignment padding between them included (it is zero and stays zero); row-sparse gradients,
    and gradients outside an arena, are checked one by one.
    """
    per_device: dict[Any, list[Any]] = {}
    spans: dict[int, tuple[Any, Any, list[tuple[int, int]]]] = {}  # id(arena) -> (arena, device, [(start, end)])
    for param in params:
        grad, device = param.list_grad()[0], param.list_device()[0]
        slots = param.arena_slots() if hasattr(param, "arena_slots") and not hasattr(grad, "indices") else []
        slot = slots[0][1] if slots else None
        if slot is None or slot.grad_offset is None or slot.grad is None or slot.grad is not grad:
            values = grad.data.array if hasattr(grad, "indices") else grad.array  # row-sparse: its rows
            per_device.setdefault(device, []).append(values)
            continue
        arena = slots[0][0]
        spans.setdefault(id(arena), (arena, device, []))[2].append((slot.grad_offset, slot.grad_offset + slot.span))
    for arena, device, ranges in spans.values():
        ranges.sort()
        merged = [list(ranges[0])]
        for start, end in ranges[1:]:
            if start == merged[-1][1]:
                merged[-1][1] = end
            else:
                merged.append([start, end])
        per_device.setdefault(device, []).extend(arena.grad_buf[start:end] for start, end in merged)
    return per_device


def all_gradients_finite(params: Sequence[Any]) -> bool:
    """Whether every gradient of ``params`` (first mirror) is free of inf and NaN: one flag read per device.

    The check runs on the devices, over each contiguous run of gradients at once; each device's
    answer is one boolean reduced there and read by the host (one synchronisation, one byte).
    """
    finite = True
    for device, arrays in _finite_runs(params).items():
        with device.use():
            xp = device.xp
            flags = [xp.isfinite(a).all() for a in arrays]
            flag = flags[0] if len(flags) == 1 else xp.stack(flags).all()
            finite = bool(as_host(flag)) and finite
    return finite


def gradients_finite(params: Sequence[Any]) -> list[bool]:
    """Per parameter, whether its first mirror's gradient holds no inf or NaN.

    The checks run on each gradient's device; the answers come to the host in one transfer per
    device, whatever the number of parameters. (Also the Trainer's ``check_finite``.)
    """
    per_device: dict[Any, list[Any]] = {}
    where = []
    for param in params:
        grad, device = param.list_grad()[0], param.list_device()[0]
        values = grad.data.array if hasattr(grad, "indices") else grad.array  # row-sparse: its rows
        with device.use():
            per_device.setdefault(device, []).append(device.xp.isfinite(values).all())
        where.append((device, len(per_device[device]) - 1))
    host = {}
    for device, flags in per_device.items():
        with device.use():
            host[device] = as_host(device.xp.stack(flags))
    return [bool(host[device][i]) for device, i in where]


def init(target_dtype: str = "float16", **kwargs: Any) -> None:
    """Accepted for MXNet compatibility; mxlite does not rewrite operators.

    Train in half precision by casting the network (``net.cast('float16')``) and calling
    :func:`init_trainer`, which keeps float32 master weights.

    Raises:
        ValueError: ``target_dtype`` is not 'float16' or 'bfloat16'.
    """
    if target_dtype not in ("float16", "bfloat16"):
        raise ValueError(f"amp.init: target_dtype must be 'float16' or 'bfloat16', got {target_dtype!r}")


def init_trainer(trainer: Any, loss_scaler: LossScaler | None = None) -> None:
    """Give ``trainer`` dynamic loss scaling and float32 master weights (``multi_precision``).

    Raises:
        ValueError: the trainer updates on the kvstore or uses ``partial_sync`` (the overflow
            decision must be taken on summed gradients, before any update), or uses an
            error-feedback compression ('2bit', 'topk', 'threshold').
    """
    if trainer._update_on_kvstore_arg or trainer._partial_sync:
        raise ValueError("amp.init_trainer: dynamic loss scaling needs the gradients summed before the update; "
                         "create the Trainer with update_on_kvstore=False and without partial_sync")
    kind = (trainer._compression_params or {}).get("type") if isinstance(trainer._compression_params, dict) else None
    if kind in ("2bit", "topk", "threshold"):
        raise ValueError(f"amp.init_trainer: dynamic loss scaling cannot be combined with {kind!r} compression: "
                         "its error-feedback residuals would keep gradients at the old loss scale whenever the scale "
                         "changes; use the 'fp16' or 'bf16' wire, or no compression")
    trainer._amp_loss_scaler = loss_scaler if loss_scaler is not None else LossScaler()
    trainer._amp_original_scale = trainer._scale
    trainer.optimizer.multi_precision = True


@contextlib.contextmanager
def scale_loss(loss: Any, trainer: Any) -> Iterator[Any]:
    """Yield ``loss`` (or each loss of a list) times the loss scale; the trainer divides it out.

    Raises:
        RuntimeError: :func:`init_trainer` was not called on ``trainer``.
    """
    scaler = trainer._amp_loss_scaler
    if scaler is None:
        raise RuntimeError("amp.scale_loss: the trainer has no loss scaler; call mx.amp.init_trainer(trainer) first")
    trainer._scale = trainer._amp_original_scale / scaler.loss_scale
    if isinstance(loss, (list, tuple)):
        yield [item * scaler.loss_scale for item in loss]
    else:
        yield loss * scaler.loss_scale


def unscale(trainer: Any) -> None:
    """Divide every gradient by the loss scale now (e.g. before clipping), and stop dividing at the step.

    Raises:
        RuntimeError: :func:`init_trainer` was not called on ``trainer``.
    """
    scaler = trainer._amp_loss_scaler
    if scaler is None:
        raise RuntimeError("amp.unscale: the trainer has no loss scaler; call mx.amp.init_trainer(trainer) first")
    inverse = 1.0 / scaler.loss_scale
    for param in trainer._params:
        if param.grad_req == "null":
            continue
        for device, grad in zip(param.list_device(), param.list_grad()):
            values = grad.data.array if hasattr(grad, "indices") else grad.array
            with device.use():
                values *= values.dtype.type(inverse)
    trainer._scale = trainer._amp_original_scale
