"""The Estimator: Gluon's ready-made training loop (MXNet's ``gluon.contrib.estimator.Estimator``).

``fit`` runs epochs of ``fit_batch`` (forward, loss, backward on each device) and calls the event handlers
around every batch and epoch; the default handlers step the trainer (``GradientUpdateHandler``), update the
metrics (``MetricHandler``), validate (``ValidationHandler``), stop (``StoppingHandler``) and log with a
progress bar (``LoggingHandler``). ``evaluate`` runs the validation loop alone.
"""

from __future__ import annotations

import copy
import logging
import sys
import warnings
from typing import Any

from ....device import Device, cpu, gpu, num_gpus
from ...data import DataLoader
from ...loss import Loss
from ...metric import Loss as LossMetric
from ...trainer import Trainer
from .batch_processor import BatchProcessor
from .event_handler import (
    BatchBegin,
    BatchEnd,
    EpochBegin,
    EpochEnd,
    EventHandler,
    GradientUpdateHandler,
    LoggingHandler,
    MetricHandler,
    StoppingHandler,
    TrainBegin,
    TrainEnd,
    ValidationHandler,
    _check_event_handlers,
)
from .utils import _check_handler_metric_ref, _check_metrics, _suggest_metric_for_loss

__all__ = ["Estimator"]


class Estimator:
    """Trains and evaluates a Gluon model with event handlers (MXNet's ``Estimator``).

    ``est = Estimator(net, loss, train_metrics=mx.metric.Accuracy(), trainer=trainer, device=mx.gpu(0))``,
    then ``est.fit(train_loader, val_loader, epochs=10)``.

    Args:
        net: the model. Initialised on ``device`` with ``initializer`` unless every parameter already is.
        loss: a ``gluon.loss.Loss``.
        train_metrics: an EvalMetric or a list (default: accuracy for softmax cross-entropy, and the mean loss).
            Their names get the prefix ``'training '``.
        val_metrics: the same for validation (default: copies of the training metrics, named
            ``'validation ...'``).
        initializer: the initializer of a net not yet initialised (warns, and is not used, for one that is).
        trainer: a ``gluon.Trainer`` over the net's parameters (default: SGD at learning rate 0.001, with a
            warning).
        device: a Device or a list of them: the batch is split over them (default: the devices of an
            initialised net; else ``gpu(0)`` when there is a GPU, else ``cpu()``).
        context: MXNet 1.x's name of ``device``.
        val_net: the model to validate (default: ``net``), usually sharing ``net``'s parameters.
        val_loss: the validation loss (default: ``loss``).
        batch_processor: an object with ``fit_batch`` and ``evaluate_batch`` (default: :class:`BatchProcessor`).

    Attributes:
        logger: a ``logging.Logger`` of this Estimator writing INFO and above to standard output; add handlers
            to it to log elsewhere (``est.logger.addHandler(logging.FileHandler(path))``).
        device (also ``context``): the list of devices; ``max_epoch``/``max_batch``: the run's length, set by
            ``fit``; ``evaluations``: how many times ``evaluate`` has run.

    Raises:
        ValueError: a ``loss`` that is not a Loss, metrics that are not EvalMetrics, a ``trainer`` that is not a
            Trainer, a ``batch_processor`` without both methods, devices that are not Devices or not available,
            ``device`` and ``context`` naming different devices, or an initialised net whose parameters are on
            other devices than ``device``.
    """

    def __init__(self, net: Any, loss: Loss, train_metrics: Any = None, val_metrics: Any = None,
                 initializer: Any = None, trainer: Trainer | None = None, device: Any = None, context: Any = None,
                 val_net: Any = None, val_loss: Loss | None = None, batch_processor: Any = None) -> None:
        self.net = net
        self.loss = self._check_loss(loss)
        self._train_metrics = _check_metrics(train_metrics)
        self._val_metrics = _check_metrics(val_metrics)
        self._add_default_training_metrics()
        self._add_validation_metrics()
        self.val_loss = self.loss if val_loss is None else self._check_loss(val_loss)
        self.val_net = self.net if val_net is None else val_net
        self.logger = logging.Logger(name="Estimator", level=logging.INFO)
        self.logger.addHandler(logging.StreamHandler(sys.stdout))
        self.device = self._check_devices(_one_of(device, context))
        self._initialize(initializer)
        self.trainer = self._check_trainer(trainer)
        self.batch_processor = self._check_batch_processor(batch_processor)
        self.max_epoch: int | None = None
        self.max_batch: int | None = None
        self.batch_axis = 0
        self.evaluations = 0
        self.train_data: Any = None
        self.val_data: Any = None

    # -- construction checks ------------------------------------------------------------------
    @staticmethod
    def _check_loss(loss: Any) -> Loss:
        if not isinstance(loss, Loss):
            raise ValueError(f"Estimator: loss must be a gluon.loss.Loss, got {loss!r}")
        return loss

    @property
    def context(self) -> list[Device]:
        """MXNet 1.x's name of :attr:`device`: the devices the batches are split over."""
        return self.device

    def _check_devices(self, devices: Any) -> list[Device]:
        """The devices as a list; the default when None. Raises ValueError (see the class)."""
        if devices is None:
            return self._default_devices()
        if isinstance(devices, Device):
            devices = [devices]
        if not isinstance(devices, (list, tuple)) or not devices or not all(isinstance(d, Device) for d in devices):
            raise ValueError("Estimator: device must be a Device or a non-empty list of Devices, such as mx.cpu() "
                             f"or [mx.gpu(0), mx.gpu(1)]; got {devices!r}")
        devices = list(devices)
        gpus = num_gpus()
        missing = [d for d in devices if d.is_gpu and d.device_id >= gpus]
        if missing:
            available = ", ".join(["cpu()"] + [str(gpu(i)) for i in range(gpus)])
            raise ValueError(f"Estimator: {', '.join(map(str, missing))} is not available; use one of {available}")
        self._check_net_devices(devices)
        return devices

    def _default_devices(self) -> list[Device]:
        placed = self._net_devices()
        if placed:
            return placed
        gpus = num_gpus()
        if gpus > 1:
            warnings.warn(f"Estimator: {gpus} GPUs found and gpu(0) alone is used; give device=[mx.gpu(0), "
                          "mx.gpu(1), ...] to train on several", UserWarning, stacklevel=4)
        return [gpu(0)] if gpus else [cpu()]

    def _net_devices(self) -> list[Device] | None:
        """The devices of the net's parameters when every one is initialised, else None."""
        params = list(self.net.collect_params().values())
        try:
            devices = [param.list_device() for param in params]
        except RuntimeError:  # a parameter not initialised
            return None
        return list(devices[0]) if devices else None

    def _check_net_devices(self, devices: list[Device]) -> None:
        placed = self._net_devices()
        if placed is not None and set(placed) != set(devices):
            raise ValueError(f"Estimator: the net's parameters are on {placed} but device={devices}: give the "
                             "devices the net was initialised on, or move it with net.reset_device(...)")

    def _initialize(self, initializer: Any) -> None:
        if self._net_devices() is None:
            self.net.initialize(init=initializer, device=self.device)
        elif initializer is not None:
            warnings.warn("Network already fully initialized, skipping initialization: the initializer given to "
                          "the Estimator is not used (net.initialize(init=..., force_reinit=True) re-initialises)",
                          UserWarning, stacklevel=3)

    def _check_trainer(self, trainer: Any) -> Trainer:
        if trainer is None:
            warnings.warn("No trainer specified, default SGD optimizer with learning rate 0.001 is used.",
                          UserWarning, stacklevel=3)
            return Trainer(self.net.collect_params(), "sgd", {"learning_rate": 0.001})
        if not isinstance(trainer, Trainer):
            raise ValueError(f"Estimator: trainer must be a gluon.Trainer, got {trainer!r}")
        return trainer

    @staticmethod
    def _check_batch_processor(batch_processor: Any) -> Any:
        if batch_processor is None:
            return BatchProcessor()
        lacking = [m for m in ("fit_batch", "evaluate_batch") if not callable(getattr(batch_processor, m, None))]
        if lacking:
            raise ValueError(f"Estimator: batch_processor {batch_processor!r} lacks {' and '.join(lacking)}(): a "
                             "batch processor needs fit_batch() and evaluate_batch() (subclass BatchProcessor)")
        return batch_processor

    # -- metrics --------------------------------------------------------------------------------
    def _add_default_training_metrics(self) -> None:
        if not self._train_metrics:
            suggested = _suggest_metric_for_loss(self.loss)
            self._train_metrics = [suggested] if suggested is not None else []
            self._train_metrics.append(LossMetric(self.loss.name.rstrip("0123456789")))
        for metric in self._train_metrics:
            if not metric.name.startswith("training "):
                metric.name = "training " + metric.name

    def _add_validation_metrics(self) -> None:
        if not self._val_metrics:
            self._val_metrics = [copy.deepcopy(metric) for metric in self._train_metrics]
        for metric in self._val_metrics:
            if metric.name.startswith("training "):
                metric.name = "validation " + metric.name[len("training "):]
            elif not metric.name.startswith("validation "):
                metric.name = "validation " + metric.name

    @property
    def train_metrics(self) -> list[Any]:
        """The training metrics (names start with ``'training '``)."""
        return self._train_metrics

    @property
    def val_metrics(self) -> list[Any]:
        """The validation metrics (names start with ``'validation '``)."""
        return self._val_metrics

    # -- loops ----------------------------------------------------------------------------------
    def evaluate(self, val_data: DataLoader, batch_axis: int = 0, event_handlers: Any = None) -> None:
        """Run ``val_net`` over ``val_data`` and update the validation metrics (reset first).

        Besides ``event_handlers``, a MetricHandler and a LoggingHandler over the validation metrics are added
        unless one of each is given.

        Args:
            val_data: a ``gluon.data.DataLoader`` of (data, label) batches.
            batch_axis: the axis along which a batch is split over the devices.
            event_handlers: an EventHandler or a list of them.

        Raises:
            ValueError: ``val_data`` is not a DataLoader; handlers that are not EventHandlers or refer to metrics
                the Estimator does not update.
        """
        _check_loader("evaluate", "val_data", val_data)
        self.val_data = val_data
        self.batch_axis = batch_axis
        for metric in self.val_metrics:
            metric.reset()
        handlers = self._prepare_default_validation_handlers(event_handlers)
        _, epoch_begin, batch_begin, batch_end, epoch_end, _ = self._categorize_handlers(handlers)
        for handler in epoch_begin:
            handler.epoch_begin(self)
        for batch in val_data:
            for handler in batch_begin:
                handler.batch_begin(self, batch=batch)
            _, label, pred, loss = self.batch_processor.evaluate_batch(self, batch, batch_axis)
            for handler in batch_end:
                handler.batch_end(self, batch=batch, pred=pred, label=label, loss=loss)
        for handler in epoch_end:
            handler.epoch_end(self)
        self.evaluations += 1

    def fit(self, train_data: DataLoader, val_data: DataLoader | None = None, epochs: int | None = None,
            event_handlers: Any = None, batches: int | None = None, batch_axis: int = 0) -> None:
        """Train for ``epochs`` passes over ``train_data``, or for ``batches`` batches (give exactly one).

        Besides ``event_handlers``, the defaults are added unless one of the kind is given: StoppingHandler,
        GradientUpdateHandler, MetricHandler and LoggingHandler over the training metrics, and a
        ValidationHandler after every epoch when ``val_data`` is given. Handlers run in ascending priority.

        Args:
            train_data: a ``gluon.data.DataLoader`` of (data, label) batches.
            val_data: a DataLoader to validate on after every epoch.
            epochs, batches: the length of the run (positive integers, one of them).
            event_handlers: an EventHandler or a list of them.
            batch_axis: the axis along which a batch is split over the devices.

        Raises:
            ValueError: a loader that is not a DataLoader, an epoch that yields no batch, not exactly one of
                ``epochs``/``batches`` or one that is not a positive integer, handlers that are not
                EventHandlers or refer to metrics the Estimator does not update.
        """
        _check_loader("fit", "train_data", train_data)
        if val_data is not None:
            _check_loader("fit", "val_data", val_data)
        self._check_run_length(epochs, batches)
        self.max_epoch, self.max_batch, self.batch_axis = epochs, batches, batch_axis
        self.train_data = train_data
        handlers = self._prepare_default_handlers(val_data, event_handlers)
        train_begin, epoch_begin, batch_begin, batch_end, epoch_end, train_end = self._categorize_handlers(handlers)
        for handler in train_begin:
            handler.train_begin(self)
        while True:
            for handler in epoch_begin:
                handler.epoch_begin(self)
            self._run_epoch(train_data, batch_begin, batch_end, batch_axis)
            if any([handler.epoch_end(self) for handler in epoch_end]):  # every handler runs, then any stops
                break
        for handler in train_end:
            handler.train_end(self)

    def _run_epoch(self, train_data: DataLoader, batch_begin: list, batch_end: list, batch_axis: int) -> None:
        """One pass over ``train_data``, stopping early when a batch_end handler returns True."""
        ran = 0
        for batch in train_data:
            ran += 1
            for handler in batch_begin:
                handler.batch_begin(self, batch=batch)
            _, label, pred, loss = self.batch_processor.fit_batch(self, batch, batch_axis)
            if any([handler.batch_end(self, batch=batch, pred=pred, label=label, loss=loss) for handler in batch_end]):
                return
        if ran == 0:
            raise ValueError("Estimator.fit: train_data yielded no batch (an empty dataset, or last_batch='discard' "
                             "with fewer samples than one batch): nothing to train on")

    @staticmethod
    def _check_run_length(epochs: Any, batches: Any) -> None:
        if (not epochs) == (not batches):
            raise ValueError("Estimator.fit: give exactly one of epochs= and batches= (the run's length), got "
                             f"epochs={epochs!r}, batches={batches!r}")
        for name, value in (("epochs", epochs), ("batches", batches)):
            if value and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"Estimator.fit: {name} must be a positive integer, got {value!r}")

    # -- handlers -------------------------------------------------------------------------------
    def _prepare_default_handlers(self, val_data: Any, event_handlers: Any) -> list[EventHandler]:
        handlers = _check_event_handlers(event_handlers)
        added: list[EventHandler] = [StoppingHandler(self.max_epoch, self.max_batch)]
        if not _has(handlers, GradientUpdateHandler):
            added.append(GradientUpdateHandler())
        if not _has(handlers, MetricHandler):
            added.append(MetricHandler(metrics=self.train_metrics))
        if not _has(handlers, ValidationHandler) and val_data is not None:
            added.append(ValidationHandler(val_data=val_data, eval_fn=self.evaluate))
        if not _has(handlers, LoggingHandler):
            added.append(LoggingHandler(metrics=self.train_metrics))
        return self._merge_handlers(handlers, added, self.train_metrics + self.val_metrics)

    def _prepare_default_validation_handlers(self, event_handlers: Any) -> list[EventHandler]:
        handlers = _check_event_handlers(event_handlers)
        added: list[EventHandler] = []
        if not _has(handlers, MetricHandler):
            added.append(MetricHandler(metrics=self.val_metrics))
        if not _has(handlers, LoggingHandler):
            added.append(LoggingHandler(metrics=self.val_metrics))
        return self._merge_handlers(handlers, added, self.val_metrics)

    @staticmethod
    def _merge_handlers(given: list[EventHandler], added: list[EventHandler], known: list[Any]) -> list[EventHandler]:
        """The user's handlers then the defaults, sorted by priority (a stable sort: ties keep that order).

        When both are present, every handler must refer to metrics among ``known`` (the defaults update only
        those), as MXNet checks.
        """
        if given and added:
            for handler in given + added:
                _check_handler_metric_ref(handler, known)
        return sorted(given + added, key=lambda handler: getattr(handler, "priority", 0))

    @staticmethod
    def _categorize_handlers(event_handlers: list[EventHandler]) -> tuple[list, list, list, list, list, list]:
        """The handlers of each event: (train_begin, epoch_begin, batch_begin, batch_end, epoch_end, train_end)."""
        kinds = (TrainBegin, EpochBegin, BatchBegin, BatchEnd, EpochEnd, TrainEnd)
        return tuple([h for h in event_handlers if isinstance(h, kind)] for kind in kinds)  # type: ignore[return-value]


def _one_of(device: Any, context: Any) -> Any:
    """``device``, or MXNet 1.x's ``context``; both only when they agree."""
    if device is None:
        return context
    if context is not None and _as_list(device) != _as_list(context):
        raise ValueError(f"Estimator: device={device!r} and context={context!r} disagree; give one of them "
                         "(context is MXNet 1.x's name of device)")
    return device


def _as_list(devices: Any) -> list[Any]:
    return list(devices) if isinstance(devices, (list, tuple)) else [devices]


def _has(handlers: list[EventHandler], kind: type) -> bool:
    return any(isinstance(handler, kind) for handler in handlers)


def _check_loader(method: str, name: str, data: Any) -> None:
    if not isinstance(data, DataLoader):
        raise ValueError(f"Estimator.{method}: {name} must be a gluon.data.DataLoader, got {type(data).__name__}; "
                         "wrap arrays in gluon.data.ArrayDataset and a DataLoader (an io.DataIter is not accepted)")
