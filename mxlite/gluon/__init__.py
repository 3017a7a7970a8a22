"""Gluon: blocks, parameters, layers, losses, metrics, data loading and the Trainer (MXNet's ``mxnet.gluon``).

Laid out as MXNet's ``python/mxnet/gluon/``: ``block.py`` (Block, HybridBlock), ``parameter.py``
(Parameter, ParameterDict), ``trainer.py`` (Trainer), ``loss.py``, ``metric.py``, ``utils.py``
(split_and_load, clip_global_norm, download), ``symbol_block.py`` (SymbolBlock, which runs MXNet's
exported graphs), and the packages ``nn``, ``rnn``, ``data``,
``model_zoo`` and ``contrib`` (1.x's contributed layers and the Estimator). The Trainer is the one
place that ties a model's parameters to an optimizer and to gradient synchronisation. ``mx.nn``,
``mx.loss``, ``mx.Trainer`` ... are the same objects.
"""

from . import (
    _export,  # noqa: F401 - registers Block.export's tracer
    block,
    contrib,
    data,
    loss,
    metric,
    model_zoo,
    nn,
    parameter,
    rnn,
    symbol_block,
    trainer,
    utils,
)
from .block import Block, HybridBlock
from .parameter import Constant, Parameter, ParameterDict
from .symbol_block import SymbolBlock
from .trainer import Trainer
from .utils import clip_global_norm, split_and_load, split_data

__all__ = ["Block", "Constant", "HybridBlock", "Parameter", "ParameterDict", "Trainer", "block", "clip_global_norm",
           "contrib", "data", "loss", "metric", "model_zoo", "nn", "parameter", "rnn", "split_and_load", "split_data",
           "SymbolBlock", "symbol_block", "trainer", "utils"]
