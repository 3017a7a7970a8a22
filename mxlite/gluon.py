"""Gluon's spelling of the public API: ``mx.gluon.nn``, ``mx.gluon.loss``, ``mx.gluon.Trainer`` ...

Every name here is the same object as its top-level counterpart.
"""

from types import SimpleNamespace

from . import data, loss, metric, nn
from .nn import Block, Constant, HybridBlock, Parameter
from .parallel import split_and_load, split_data
from .trainer import Trainer

utils = SimpleNamespace(split_and_load=split_and_load, split_data=split_data)

__all__ = ["Block", "Constant", "HybridBlock", "Parameter", "Trainer", "data", "loss", "metric", "nn", "utils"]
