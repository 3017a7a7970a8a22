"""Gluon's Estimator (MXNet's ``gluon.contrib.estimator``): a training loop driven by event handlers.

``from mxlite.gluon.contrib.estimator import *`` gives :class:`Estimator`, :class:`BatchProcessor`, the
event mixins (``TrainBegin``, ``TrainEnd``, ``EpochBegin``, ``EpochEnd``, ``BatchBegin``, ``BatchEnd``) and
the handlers (``StoppingHandler``, ``MetricHandler``, ``ValidationHandler``, ``LoggingHandler``,
``CheckpointHandler``, ``EarlyStoppingHandler``, ``GradientUpdateHandler``, and mxlite's
``TrainingCurveHandler``), as in MXNet.
"""

from . import batch_processor, estimator, event_handler
from .batch_processor import BatchProcessor
from .estimator import Estimator
from .event_handler import (
    BatchBegin,
    BatchEnd,
    CheckpointHandler,
    EarlyStoppingHandler,
    EpochBegin,
    EpochEnd,
    GradientUpdateHandler,
    LoggingHandler,
    MetricHandler,
    StoppingHandler,
    TrainBegin,
    TrainEnd,
    TrainingCurveHandler,
    ValidationHandler,
)

__all__ = ["BatchBegin", "BatchEnd", "BatchProcessor", "CheckpointHandler", "EarlyStoppingHandler", "EpochBegin",
           "EpochEnd", "Estimator", "GradientUpdateHandler", "LoggingHandler", "MetricHandler", "StoppingHandler",
           "TrainBegin", "TrainEnd", "TrainingCurveHandler", "ValidationHandler", "batch_processor", "estimator",
           "event_handler"]
