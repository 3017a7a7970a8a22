"""Gluon: blocks, parameters, layers, losses, metrics, data loading and the Trainer (MXNet's ``mxnet.gluon``).

Laid out as MXNet's ``python/mxnet/gluon/``: ``block.py`` (Block, HybridBlock), ``parameter.py``
(Parameter, ParameterDict), ``trainer.py`` (Trainer), ``loss.py``, ``metric.py``, ``utils.py``
(split_and_load, clip_global_norm, download), and the packages ``nn``, ``rnn``, ``data`` and
``model_zoo``. The Trainer is the one place that ties a model's parameters to an optimizer and
to gradient synchronisation. ``mx.nn``, ``mx.loss``, ``mx.Trainer`` ... are the same objects.
"""

from . import block, data, loss, metric, model_zoo, nn, parameter, rnn, trainer, utils
from .block import Block, HybridBlock
from .parameter import Constant, Parameter, ParameterDict
from .trainer import Trainer
from .utils import clip_global_norm, split_and_load, split_data

__all__ = ["Block", "Constant", "HybridBlock", "Parameter", "ParameterDict", "Trainer", "block", "clip_global_norm",
           "data", "loss", "metric", "model_zoo", "nn", "parameter", "rnn", "split_and_load", "split_data", "trainer",
           "utils"]
