"""The Estimator's event handlers (MXNet's ``gluon.contrib.estimator.event_handler``).

A handler subclasses the mixins of the events it handles (:class:`TrainBegin`, :class:`EpochBegin`,
:class:`BatchBegin`, :class:`BatchEnd`, :class:`EpochEnd`, :class:`TrainEnd`) and overrides their methods, each
called with the Estimator (``batch_end`` also with ``batch=``, ``pred=``, ``label=``, ``loss=``). A
``batch_end`` or ``epoch_end`` that returns True stops the training. Handlers run in ascending ``priority``
(a handler without one counts as 0; equal priorities keep the order they were given in, the user's handlers
before the defaults): ``GradientUpdateHandler`` -2000, ``MetricHandler`` and ``ValidationHandler`` -1000,
``LoggingHandler`` last (infinity), as in MXNet. ``TrainingCurveHandler`` (1000) is mxlite's.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import IO, Any

import numpy as np

from ...metric import CompositeEvalMetric, EvalMetric
from ...metric import Loss as LossMetric
from ...progress import CurvePanel, accuracy_limits, plot_curves, progress_bar
from ...utils import split_and_load
from .utils import _check_metrics, _improvement_op, _worst

__all__ = ["BatchBegin", "BatchEnd", "CheckpointHandler", "EarlyStoppingHandler", "EpochBegin", "EpochEnd",
           "EventHandler", "GradientUpdateHandler", "LoggingHandler", "MetricHandler", "StoppingHandler",
           "TrainBegin", "TrainEnd", "TrainingCurveHandler", "ValidationHandler"]


class EventHandler:
    """Base of every event handler: what the Estimator accepts in ``event_handlers``."""


def _check_event_handlers(handlers: Any) -> list[EventHandler]:
    """``handlers`` as a new list: one handler, a list of them, or None.

    Raises:
        ValueError: anything that is not an EventHandler, naming it.
    """
    if isinstance(handlers, EventHandler):
        return [handlers]
    handlers = list(handlers or [])
    wrong = [h for h in handlers if not isinstance(h, EventHandler)]
    if wrong:
        raise ValueError(f"event_handlers must be an EventHandler or a list of them, got {wrong!r} among them")
    return handlers


class TrainBegin(EventHandler):
    """Mixin of a handler called once when ``fit`` begins."""

    def train_begin(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        """Called before the first epoch."""


class TrainEnd(EventHandler):
    """Mixin of a handler called once when ``fit`` ends."""

    def train_end(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        """Called after the last epoch."""


class EpochBegin(EventHandler):
    """Mixin of a handler called when each epoch (and each ``evaluate``) begins."""

    def epoch_begin(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        """Called before the epoch's first batch."""


class EpochEnd(EventHandler):
    """Mixin of a handler called when each epoch (and each ``evaluate``) ends."""

    def epoch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        """Called after the epoch's last batch; returning True stops the training."""
        return False


class BatchBegin(EventHandler):
    """Mixin of a handler called before each batch; ``batch=`` is the batch."""

    def batch_begin(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        """Called before the batch is processed."""


class BatchEnd(EventHandler):
    """Mixin of a handler called after each batch with ``batch=``, ``pred=``, ``label=`` and ``loss=``
    (the last three: one entry per device)."""

    def batch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        """Called after the batch is processed; returning True stops the training."""
        return False


class StoppingHandler(TrainBegin, BatchEnd, EpochEnd):
    """Stops the training after ``estimator.max_epoch`` epochs or ``estimator.max_batch`` batches (read when
    training begins; ``fit`` sets them from ``epochs=``/``batches=``). Added by ``fit`` to every run.

    Args:
        max_epoch, max_batch: the limits until training begins (None: no limit).
    """

    def __init__(self, max_epoch: int | None = None, max_batch: int | None = None) -> None:
        self.max_epoch = max_epoch
        self.max_batch = max_batch
        self.current_batch = 0
        self.current_epoch = 0
        self.stop_training = False

    def train_begin(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        """Take the limits from the Estimator and reset the counts."""
        self.max_epoch = estimator.max_epoch
        self.max_batch = estimator.max_batch
        self.current_batch = 0
        self.current_epoch = 0
        self.stop_training = False

    def batch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        """Count the batch; True once ``max_batch`` batches have run."""
        self.current_batch += 1
        if self.current_batch == self.max_batch:
            self.stop_training = True
        return self.stop_training

    def epoch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        """Count the epoch; True once ``max_epoch`` epochs have run (or the batch limit was reached)."""
        self.current_epoch += 1
        if self.current_epoch == self.max_epoch:
            self.stop_training = True
        return self.stop_training


class MetricHandler(EpochBegin, BatchEnd):
    """Resets ``metrics`` when an epoch begins and updates them after each batch: a ``metric.Loss`` with the
    batch's losses, any other metric with its labels and predictions.

    Args:
        metrics: an EvalMetric or a list of them.
        priority: default -1000, so that other handlers see the batch's values.

    Raises:
        ValueError: ``metrics`` is not a metric or a list of metrics.
    """

    def __init__(self, metrics: Any, priority: float = -1000) -> None:
        self.metrics = _check_metrics(metrics)
        self.priority = priority

    def epoch_begin(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        """Reset every metric."""
        for metric in self.metrics:
            metric.reset()

    def batch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        """Update every metric with the batch's ``loss``, or ``label`` and ``pred``."""
        for metric in self.metrics:
            if isinstance(metric, LossMetric):
                metric.update(0, kwargs["loss"])
            else:
                metric.update(kwargs["label"], kwargs["pred"])
        return False


class ValidationHandler(TrainBegin, BatchEnd, EpochEnd):
    """Evaluates the model on ``val_data`` every ``epoch_period`` epochs and/or every ``batch_period`` batches.

    Args:
        val_data: the validation DataLoader.
        eval_fn: called as ``eval_fn(val_data=, batch_axis=, event_handlers=)``; usually ``estimator.evaluate``.
        epoch_period: epochs between evaluations (default 1; None or 0: never at an epoch's end).
        batch_period: batches between evaluations (default None: never after a batch).
        priority: default -1000, so that the validation metrics are fresh for the handlers after it.
        event_handlers: handlers given to ``eval_fn`` for the evaluation.

    Raises:
        ValueError: a period that is not a positive integer (or None).
    """

    def __init__(self, val_data: Any, eval_fn: Callable[..., Any], epoch_period: int | None = 1,
                 batch_period: int | None = None, priority: float = -1000, event_handlers: Any = None) -> None:
        _check_period("ValidationHandler", "epoch_period", epoch_period)
        _check_period("ValidationHandler", "batch_period", batch_period)
        self.val_data = val_data
        self.eval_fn = eval_fn
        self.epoch_period = epoch_period
        self.batch_period = batch_period
        self.current_batch = 0
        self.current_epoch = 0
        self.priority = priority
        self.event_handlers = event_handlers

    def train_begin(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        """Reset the counts."""
        self.current_batch = 0
        self.current_epoch = 0

    def batch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        """Count the batch; evaluate when ``batch_period`` batches have run since the last time."""
        self.current_batch += 1
        if self.batch_period and self.current_batch % self.batch_period == 0:
            self._evaluate(estimator)
        return False

    def epoch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        """Count the epoch; evaluate when ``epoch_period`` epochs have run since the last time."""
        self.current_epoch += 1
        if self.epoch_period and self.current_epoch % self.epoch_period == 0:
            self._evaluate(estimator)
        return False

    def _evaluate(self, estimator: Any) -> None:
        self.eval_fn(val_data=self.val_data, batch_axis=estimator.batch_axis, event_handlers=self.event_handlers)


class LoggingHandler(TrainBegin, TrainEnd, EpochBegin, EpochEnd, BatchBegin, BatchEnd):
    """Logs the optimizer, the metrics and timings to ``estimator.logger``, and shows a progress bar.

    With ``log_interval='epoch'`` it logs when each epoch begins and ends; with an integer ``k`` also after
    every ``k``-th batch (``[Epoch e][Batch b][Samples n] time/interval: ...``, the batch counted from 0).
    During an epoch logged per epoch, a tqdm bar over its batches (as ``mxlite train`` shows) gives the
    metrics' running values and samples/s; it is cleared when the epoch ends.

    Args:
        log_interval: ``'epoch'`` or a positive number of batches.
        metrics: the metrics to report (names starting with 'training' mark a training run; others are
            reported as a validation).
        priority: default infinity: after every other handler has updated its state.
        progress_bar: None (default) shows the bar when logging per epoch and ``progress_file`` is a terminal;
            True always; False never.
        progress_file: where the bar is drawn (default: standard error).

    Raises:
        ValueError: another ``log_interval``.
    """

    def __init__(self, log_interval: int | str = "epoch", metrics: Any = None, priority: float = np.inf,
                 progress_bar: bool | None = None, progress_file: IO[str] | None = None) -> None:
        per_batch = isinstance(log_interval, (int, np.integer)) and not isinstance(log_interval, bool)
        if not (per_batch and log_interval > 0) and log_interval != "epoch":
            raise ValueError("LoggingHandler: log_interval must be 'epoch' or a positive integer, got "
                             f"{log_interval!r}")
        self.log_interval = int(log_interval) if per_batch else log_interval
        self.metrics = _check_metrics(metrics)
        self.priority = priority
        self.progress_bar = progress_bar
        self.progress_file = progress_file
        self.batch_index = 0
        self.current_epoch = 0
        self.processed_samples = 0
        self.log_interval_time = 0.0
        self.train_start = self.epoch_start = self.batch_start = time.time()
        self._bar: Any = None
        self._epoch_samples = 0

    def train_begin(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        """Log the optimizer, its learning rate and the length of the run; reset the counts."""
        self.train_start = time.time()
        trainer = estimator.trainer
        estimator.logger.info("Training begin: using optimizer %s with current learning rate %.4f ",
                              type(trainer.optimizer).__name__, trainer.learning_rate)
        if estimator.max_epoch:
            estimator.logger.info("Train for %d epochs.", estimator.max_epoch)
        else:
            estimator.logger.info("Train for %d batches.", estimator.max_batch)
        self.current_epoch = 0
        self.batch_index = 0
        self.processed_samples = 0
        self.log_interval_time = 0.0

    def train_end(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        """Log the total time, the epochs run and the metrics' final values."""
        self._close_bar()
        elapsed = time.time() - self.train_start
        estimator.logger.info(f"Train finished using total {elapsed:.0f}s with {self.current_epoch} epochs. "
                              + self._metric_text())

    def batch_begin(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        """Start the batch's clock."""
        self.batch_start = time.time()

    def batch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        """Count the batch's samples; log every ``log_interval`` batches; advance the bar."""
        samples = _batch_samples(kwargs.get("batch"), getattr(estimator, "batch_axis", 0))
        self.processed_samples += samples
        self._epoch_samples += samples
        if isinstance(self.log_interval, int):
            self.log_interval_time += time.time() - self.batch_start
            if self.batch_index % self.log_interval == 0:
                estimator.logger.info(f"[Epoch {self.current_epoch}][Batch {self.batch_index}]"
                                      f"[Samples {self.processed_samples}] "
                                      f"time/interval: {self.log_interval_time:.3f}s " + self._metric_text())
                self.log_interval_time = 0.0
        self.batch_index += 1
        self._advance_bar()
        return False

    def epoch_begin(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        """Log the epoch's start (with the learning rate) or the validation's; open the bar."""
        self.epoch_start = time.time()
        self._epoch_samples = 0
        training = self._is_training()
        if training:
            estimator.logger.info("[Epoch %d] Begin, current learning rate: %.4f", self.current_epoch,
                                  estimator.trainer.learning_rate)
        else:
            estimator.logger.info("Validation Begin")
        self._open_bar(estimator, training)

    def epoch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        """Close the bar; log the epoch's time and the metrics; count the epoch."""
        self._close_bar()
        elapsed = time.time() - self.epoch_start
        estimator.logger.info(f"[Epoch {self.current_epoch}] Finished in {elapsed:.3f}s, " + self._metric_text())
        self.current_epoch += 1
        self.batch_index = 0
        return False

    def _is_training(self) -> bool:
        # The Estimator names its training metrics 'training ...' (MXNet's convention).
        return any("training" in _metric_name(m) for m in self.metrics)

    def _metric_text(self) -> str:
        return ", ".join(f"{_metric_name(m)}: {_metric_value(m):.4f}" for m in self.metrics)

    def _bar_disabled(self) -> bool | None:
        if self.progress_bar is None:
            return None if self.log_interval == "epoch" else True
        return not self.progress_bar

    def _open_bar(self, estimator: Any, training: bool) -> None:
        self._close_bar()
        data = getattr(estimator, "train_data" if training else "val_data", None)
        desc = f"epoch {self.current_epoch}" if training else "validation"
        bar = progress_bar(_length(data), desc, file=self.progress_file, disable=self._bar_disabled())
        self._bar = None if bar.disable else bar  # off a terminal: no metric values to format every batch

    def _advance_bar(self) -> None:
        if self._bar is None:
            return
        rate = self._epoch_samples / max(time.time() - self.epoch_start, 1e-9)
        postfix = {_metric_name(m): f"{_metric_value(m):.4f}" for m in self.metrics}
        postfix["samples/s"] = f"{rate:.0f}"
        self._bar.update(1)
        self._bar.set_postfix(postfix)  # redraws with this batch's count and values (as mxlite train's bar)
        if self._bar.total is not None and self._bar.n >= self._bar.total:
            self._close_bar()  # before the handlers after the last batch (validation) print

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class CheckpointHandler(TrainBegin, BatchEnd, EpochEnd):
    """Saves the parameters and the trainer's states every ``epoch_period`` epochs or ``batch_period`` batches,
    and optionally the best ones; resumes from the latest checkpoint in ``model_dir``.

    Files are ``{model_prefix}-epoch{E}batch{B}.params`` and ``.states`` (MXNet's names: ``E`` counts epochs
    from 0; ``B`` is the number of batches trained for a checkpoint at an epoch's end, the batch's index for a
    checkpoint after a batch), ``{model_prefix}-best.params``/``.states`` for the best. Parameters are
    written with ``save_parameters`` (mxlite's ``.npz``; ``load_parameters`` reads it), states with
    ``trainer.save_states``. After the first batch, ``{model_prefix}-symbol.json`` holds the architecture in
    MXNet's format: the net's forward on that batch, traced by ``export`` (for any net: mxlite cannot tell a
    hybridized one); a net whose operations MXNet's format cannot hold gets a log line saying why instead.

    Args:
        model_dir: the folder (created if missing).
        model_prefix: the start of every file name.
        monitor: the metric that decides the best checkpoint (one of the Estimator's).
        verbose: 1 logs every save.
        save_best: keep the best checkpoint by ``monitor`` too.
        mode: 'min', 'max' or 'auto' (larger is better for accuracies and F1, smaller otherwise).
        epoch_period, batch_period: how often to save (None or 0: never on that event).
        max_checkpoints: how many periodic checkpoints to keep (the oldest are deleted; the best is not counted).
        resume_from_checkpoint: at the start of ``fit``, load the latest checkpoint of ``model_dir`` and train
            only the epochs (batches) that remain; the run must count what its checkpoints count (``epochs=``
            with ``epoch_period``, ``batches=`` with ``batch_period``).

    Raises:
        ValueError: ``save_best`` without a metric to monitor; a period or ``max_checkpoints`` that is not a
            positive integer (or None).
    """

    def __init__(self, model_dir: str, model_prefix: str = "model", monitor: EvalMetric | None = None,
                 verbose: int = 0, save_best: bool = False, mode: str = "auto", epoch_period: int | None = 1,
                 batch_period: int | None = None, max_checkpoints: int = 5,
                 resume_from_checkpoint: bool = False) -> None:
        if save_best and not isinstance(monitor, EvalMetric):
            raise ValueError("CheckpointHandler: save_best=True needs monitor=, one of estimator.train_metrics or "
                             f"estimator.val_metrics; got {monitor!r}")
        _check_period("CheckpointHandler", "epoch_period", epoch_period)
        _check_period("CheckpointHandler", "batch_period", batch_period)
        _check_period("CheckpointHandler", "max_checkpoints", max_checkpoints)
        os.makedirs(model_dir, exist_ok=True)
        self.model_dir = model_dir
        self.model_prefix = model_prefix
        self.monitor = monitor
        self.verbose = verbose
        self.save_best = save_best
        self.epoch_period = epoch_period
        self.batch_period = batch_period
        self.max_checkpoints = max_checkpoints
        self.resume_from_checkpoint = resume_from_checkpoint
        self.current_batch = 0
        self.current_epoch = 0
        self.trained_epoch = -1
        self.trained_batch = -1
        self.saved_checkpoints: list[str] = []
        if save_best:
            self.monitor_op = _improvement_op(mode, monitor, "CheckpointHandler")
            self.best = _worst(self.monitor_op)

    def train_begin(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        """Reset the counts and the best value; resume from the latest checkpoint when asked to.

        Raises:
            ValueError: resuming a run whose checkpoints count other steps than it trains by, or one that
                has already trained its epochs (batches).
            FileNotFoundError: the latest checkpoint's ``.states`` file is missing.
        """
        self.current_epoch = 0
        self.current_batch = 0
        self.saved_checkpoints = []
        if self.save_best:
            self.best = _worst(self.monitor_op)
        if self.resume_from_checkpoint:
            self._check_resume_periods(estimator)
            self._resume(estimator)

    def batch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        """Save after every ``batch_period``-th batch."""
        if self.current_batch == 0:
            self._save_symbol(estimator, kwargs.get("batch"))
        if self.batch_period and (self.current_batch + 1) % self.batch_period == 0:
            self._save_checkpoint(estimator)
        self.current_batch += 1
        return False

    def epoch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        """Save after every ``epoch_period``-th epoch."""
        if self.epoch_period and (self.current_epoch + 1) % self.epoch_period == 0:
            self._save_checkpoint(estimator)
        self.current_epoch += 1
        return False

    def _checkpoint_numbers(self, estimator: Any) -> tuple[int, int]:
        if self.trained_epoch < 0:
            return self.current_epoch, self.current_batch
        epoch = self.current_epoch + self.trained_epoch + 1
        # An epoch-end checkpoint counts batches trained, a batch checkpoint the batch's index.
        batch = self.current_batch + self.trained_batch + (0 if estimator.max_epoch else 1)
        return epoch, batch

    def _save_checkpoint(self, estimator: Any) -> None:
        epoch, batch = self._checkpoint_numbers(estimator)
        prefix = f"{self.model_prefix}-epoch{epoch}batch{batch}"
        self._save_params_and_trainer(estimator, prefix)
        self.saved_checkpoints.append(prefix)
        while len(self.saved_checkpoints) > self.max_checkpoints:
            self._remove_checkpoint(self.saved_checkpoints.pop(0))
        if self.verbose > 0:
            estimator.logger.info("[Epoch %d] CheckpointHandler: trained total %d batches, saving model at %s with "
                                  "prefix: %s", self.current_epoch, self.current_batch + 1, self.model_dir, prefix)
        if self.save_best:
            self._save_if_best(estimator)

    def _save_if_best(self, estimator: Any) -> None:
        name, value = self.monitor.get()
        if math.isnan(value):
            warnings.warn(f"CheckpointHandler: the monitored metric {name!r} has no value yet, so no best model "
                          "is saved; monitor one of estimator.train_metrics or estimator.val_metrics",
                          RuntimeWarning, stacklevel=2)
            return
        if not self.monitor_op(value, self.best):
            if self.verbose > 0:
                estimator.logger.info("[Epoch %d] CheckpointHandler: %s did not improve from %0.5f, skipping "
                                      "updating best model", self.current_epoch, name, self.best)
            return
        prefix = f"{self.model_prefix}-best"
        self._save_params_and_trainer(estimator, prefix)
        if self.verbose > 0:
            estimator.logger.info("[Epoch %d] CheckpointHandler: %s improved from %0.5f to %0.5f, updating best "
                                  "model at %s with prefix: %s", self.current_epoch, name, self.best, value,
                                  self.model_dir, prefix)
        self.best = value

    def _save_symbol(self, estimator: Any, batch: Any) -> None:
        """Write ``{model_prefix}-symbol.json``: the net's forward on the first batch, traced by ``export``; when
        the net cannot be exported, log why and go on training."""
        symbol_file = os.path.join(self.model_dir, self.model_prefix + "-symbol.json")
        export = getattr(estimator.net, "export", None)
        reason = "the net has no export()"
        if callable(export) and isinstance(batch, (list, tuple)) and batch:
            try:
                data = split_and_load(batch[0], estimator.device[:1], batch_axis=estimator.batch_axis)[0]
                with tempfile.TemporaryDirectory(dir=self.model_dir) as folder:
                    written = export(os.path.join(folder, "net"), inputs=data)[0]
                    os.replace(written, symbol_file)
                return
            except (NotImplementedError, TypeError, ValueError) as exc:
                reason = f"{type(exc).__name__}: {exc}"
        estimator.logger.info("CheckpointHandler: the model architecture (%s) is not saved: %s; the .params files "
                              "load into the model built by its constructor (load_parameters)", symbol_file, reason)

    def _save_params_and_trainer(self, estimator: Any, prefix: str) -> None:
        estimator.net.save_parameters(os.path.join(self.model_dir, prefix + ".params"))
        estimator.trainer.save_states(os.path.join(self.model_dir, prefix + ".states"))

    def _remove_checkpoint(self, prefix: str) -> None:
        for suffix in (".params", ".states"):
            path = os.path.join(self.model_dir, prefix + suffix)
            if os.path.exists(path):
                os.remove(path)

    def _check_resume_periods(self, estimator: Any) -> None:
        if estimator.max_batch and (not self.batch_period or self.epoch_period):
            raise ValueError("CheckpointHandler: resume_from_checkpoint with fit(batches=...) needs checkpoints by "
                             f"batch only: give batch_period and epoch_period=None (got epoch_period="
                             f"{self.epoch_period}, batch_period={self.batch_period})")
        if estimator.max_epoch and (not self.epoch_period or self.batch_period):
            raise ValueError("CheckpointHandler: resume_from_checkpoint with fit(epochs=...) needs checkpoints by "
                             f"epoch only: give epoch_period and batch_period=None (got epoch_period="
                             f"{self.epoch_period}, batch_period={self.batch_period})")

    def _find_checkpoints(self) -> list[tuple[int, int]]:
        """(epoch, batch) of every checkpoint in ``model_dir``, oldest first.

        Raises:
            ValueError: a file named like a checkpoint whose numbers cannot be read, naming it.
        """
        start = f"{self.model_prefix}-epoch"
        pattern = re.compile(re.escape(start) + r"(\d+)batch(\d+)\.params")
        found = []
        for name in os.listdir(self.model_dir):
            if not (name.startswith(start) and name.endswith(".params")):
                continue
            match = pattern.fullmatch(name)
            if match is None:
                raise ValueError(f"CheckpointHandler: cannot read the epoch and batch of {name!r} in "
                                 f"{self.model_dir}: checkpoints are named "
                                 f"{self.model_prefix}-epoch<epoch>batch<batch>.params")
            found.append((int(match.group(1)), int(match.group(2))))
        return sorted(found)

    def _resume(self, estimator: Any) -> None:
        found = self._find_checkpoints()
        if not found:
            self.trained_epoch = self.trained_batch = -1
            length = f"{estimator.max_batch} batches" if estimator.max_batch else f"{estimator.max_epoch} epochs"
            estimator.logger.info("CheckpointHandler: No checkpoint found, training from scratch for %s", length)
            return
        self.trained_epoch, self.trained_batch = found[-1]
        self.saved_checkpoints = [f"{self.model_prefix}-epoch{e}batch{b}" for e, b in found]
        remaining = self._shorten_run(estimator)
        prefix = os.path.join(self.model_dir, self.saved_checkpoints[-1])
        for path in (prefix + ".params", prefix + ".states"):
            if not os.path.exists(path):
                raise FileNotFoundError(f"CheckpointHandler: cannot resume: {path} is missing")
        estimator.net.load_parameters(prefix + ".params", device=estimator.device)
        estimator.trainer.load_states(prefix + ".states")
        estimator.logger.warning("CheckpointHandler: Checkpoint resumed from epoch %d batch %d, continue to train "
                                 "for %s", self.trained_epoch, self.trained_batch, remaining)

    def _shorten_run(self, estimator: Any) -> str:
        """Lower the Estimator's epoch (batch) count by what the checkpoint trained; the remaining run."""
        if estimator.max_epoch:
            if self.trained_epoch >= estimator.max_epoch - 1:
                raise ValueError(f"CheckpointHandler: the checkpoint in {self.model_dir} has trained epoch "
                                 f"{self.trained_epoch}, the last of fit(epochs={estimator.max_epoch}): nothing is "
                                 "left to train; give more epochs, or resume_from_checkpoint=False to start over")
            estimator.max_epoch -= self.trained_epoch + 1
            return f"{estimator.max_epoch} epochs"
        if self.trained_batch >= estimator.max_batch - 1:
            raise ValueError(f"CheckpointHandler: the checkpoint in {self.model_dir} has trained batch "
                             f"{self.trained_batch}, the last of fit(batches={estimator.max_batch}): nothing is left "
                             "to train; give more batches, or resume_from_checkpoint=False to start over")
        estimator.max_batch -= self.trained_batch + 1
        return f"{estimator.max_batch} batches"


class EarlyStoppingHandler(TrainBegin, EpochEnd, TrainEnd):
    """Stops the training when ``monitor`` has not improved for ``patience`` epochs.

    Args:
        monitor: the metric to watch (one of the Estimator's, not a CompositeEvalMetric).
        min_delta: the least change that counts as an improvement.
        patience: epochs without improvement to wait before stopping (0: stop at the first).
        mode: 'min', 'max' or 'auto' (larger is better for accuracies and F1, smaller otherwise).
        baseline: the value to improve on (default: none; the first epoch's value is the first best).

    Raises:
        ValueError: ``monitor`` is not an EvalMetric, or is a CompositeEvalMetric.
    """

    def __init__(self, monitor: EvalMetric, min_delta: float = 0, patience: int = 0, mode: str = "auto",
                 baseline: float | None = None) -> None:
        if not isinstance(monitor, EvalMetric):
            raise ValueError("EarlyStoppingHandler: monitor must be one of estimator.train_metrics or "
                             f"estimator.val_metrics, got {monitor!r}")
        if isinstance(monitor, CompositeEvalMetric):
            raise ValueError("EarlyStoppingHandler: monitor cannot be a CompositeEvalMetric; give one of its metrics")
        self.monitor = monitor
        self.baseline = baseline
        self.patience = patience
        self.monitor_op = _improvement_op(mode, monitor, "EarlyStoppingHandler")
        self.min_delta = abs(min_delta) if self.monitor_op(1.0, 0.0) else -abs(min_delta)
        self.wait = 0
        self.stopped_epoch = 0
        self.current_epoch = 0
        self.stop_training = False
        self.best = _worst(self.monitor_op)

    def train_begin(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        """Reset the counts; the best value starts at ``baseline`` (or the worst possible)."""
        self.wait = 0
        self.stopped_epoch = 0
        self.current_epoch = 0
        self.stop_training = False
        self.best = self.baseline if self.baseline is not None else _worst(self.monitor_op)

    def epoch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        """Compare the monitored value with the best; True once ``patience`` epochs passed without improving."""
        name, value = self.monitor.get()
        if math.isnan(value):
            warnings.warn(f"EarlyStoppingHandler: the monitored metric {name!r} has no value; monitor one of "
                          "estimator.train_metrics or estimator.val_metrics", RuntimeWarning, stacklevel=2)
        elif self.monitor_op(value - self.min_delta, self.best):
            self.best = value
            self.wait = 0
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.stopped_epoch = self.current_epoch
                self.stop_training = True
        self.current_epoch += 1
        return self.stop_training

    def train_end(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        """Log the early stop, if there was one."""
        if self.stop_training:
            estimator.logger.info("[Epoch %d] EarlyStoppingHandler: early stopping due to %s not improving",
                                  self.stopped_epoch, self.monitor.get()[0])


class GradientUpdateHandler(BatchEnd):
    """Steps the trainer after each batch, normalising by the batch size (the losses' first dimension).

    Args:
        priority: default -2000: the update comes before every other handler.
    """

    def __init__(self, priority: float = -2000) -> None:
        self.priority = priority

    def batch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        """``estimator.trainer.step(batch size)``.

        Raises:
            ValueError: a loss without a batch dimension (a scalar), naming its shape.
        """
        loss = kwargs["loss"]
        losses = loss if isinstance(loss, (list, tuple)) else [loss]
        scalar = [tuple(value.shape) for value in losses if not value.shape]
        if scalar:
            raise ValueError("GradientUpdateHandler: each loss must hold one value per sample to give the batch "
                             f"size, got a loss of shape {scalar[0]}")
        estimator.trainer.step(sum(int(value.shape[0]) for value in losses))
        return False


class TrainingCurveHandler(TrainBegin, EpochBegin, EpochEnd, TrainEnd):
    """Records every metric's value per epoch and, when training ends, plots the training curves to ``path``
    (the figure ``mxlite train`` draws: losses on the left, other metrics on the right; needs matplotlib).

    Validation metrics get a value for the epochs that ran a validation, NaN (a gap) for the others.
    ``history`` holds the values: ``{metric name: [value per epoch]}``. An mxlite addition.

    Args:
        path: the PNG file to write (its folder must exist).
        metrics: the metrics to follow (default: every training and validation metric of the Estimator).
        title: the figure's title.
        priority: default 1000: after the validation of the epoch.
    """

    def __init__(self, path: str, metrics: Any = None, title: str = "", priority: float = 1000) -> None:
        self.path = path
        self.metrics = _check_metrics(metrics)
        self.title = title
        self.priority = priority
        self.history: dict[str, list[float]] = {}
        self._followed: list[tuple[str, EvalMetric]] = []  # (its name in history, the metric)
        self._evaluations_at_epoch_begin = 0

    def train_begin(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        """Start a new history over the metrics to follow."""
        metrics = self.metrics or list(estimator.train_metrics) + list(estimator.val_metrics)
        self._followed = list(zip(_unique_names([_metric_name(m) for m in metrics]), metrics))
        self.history = {name: [] for name, _ in self._followed}

    def epoch_begin(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        """Note how many validations have run, to tell whether this epoch runs one."""
        self._evaluations_at_epoch_begin = estimator.evaluations

    def epoch_end(self, estimator: Any, *args: Any, **kwargs: Any) -> bool:
        """Append each metric's value (NaN for a validation metric of an epoch without validation)."""
        validated = estimator.evaluations > self._evaluations_at_epoch_begin
        validation = {id(m) for m in estimator.val_metrics}
        for name, metric in self._followed:
            fresh = validated or id(metric) not in validation
            self.history[name].append(_metric_value(metric) if fresh else math.nan)
        return False

    def train_end(self, estimator: Any, *args: Any, **kwargs: Any) -> None:
        """Write the plot (a warning, and no file, without matplotlib)."""
        if self._panels() and not self.plot(self.path):
            warnings.warn(f"TrainingCurveHandler: {self.path} not written: install matplotlib (pip install "
                          "'mxlite[train]') for the plot", UserWarning, stacklevel=2)

    def plot(self, path: str) -> bool:
        """Draw the recorded curves to ``path``; False (nothing written) without matplotlib or without metrics."""
        panels = self._panels()
        return bool(panels) and plot_curves(path, panels, self.title)

    def _panels(self) -> list[CurvePanel]:
        """Losses on the left, the other metrics on the right (on the accuracy axis when all are accuracies)."""
        loss_names = {name for name, metric in self._followed if isinstance(metric, LossMetric)}
        losses = {n: v for n, v in self.history.items() if n in loss_names}
        others = {n: v for n, v in self.history.items() if n not in loss_names}
        panels = [CurvePanel("loss", losses)] if losses else []
        if others:
            limits = accuracy_limits([x for v in others.values() for x in v]) if self._all_accuracy(others) else None
            panels.append(CurvePanel("accuracy" if limits else "metrics", others, ylim=limits))
        return panels

    @staticmethod
    def _all_accuracy(curves: dict[str, list[float]]) -> bool:
        return all("acc" in name.lower() for name in curves)


def _check_period(who: str, what: str, value: Any) -> None:
    """Refuse a period that is neither None nor a non-negative integer (0 means never, as None)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{who}: {what} must be a positive integer or None, got {value!r}")


def _unique_names(names: list[str]) -> list[str]:
    """``names`` with a repeated name numbered from its second use ('training accuracy (2)')."""
    out: list[str] = []
    for name in names:
        out.append(name if name not in out else f"{name} ({sum(n == name for n in names[:len(out)]) + 1})")
    return out


def _metric_name(metric: EvalMetric) -> str:
    name = metric.get()[0]
    return name if isinstance(name, str) else ", ".join(name)


def _metric_value(metric: EvalMetric) -> float:
    value = metric.get()[1]
    return float(value if np.isscalar(value) else np.mean(value))


def _batch_samples(batch: Any, batch_axis: int) -> int:
    data = batch[0] if isinstance(batch, (list, tuple)) and batch else batch
    shape = getattr(data, "shape", None)
    if not shape:
        return 0
    return int(shape[batch_axis if -len(shape) <= batch_axis < len(shape) else 0])


def _length(data: Any) -> int | None:
    try:
        return len(data)
    except TypeError:
        return None
