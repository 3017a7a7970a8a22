"""Gluon's model zoo (``mx.gluon.model_zoo``): predefined networks, as in Apache MXNet.

``from mxlite.gluon.model_zoo import vision; net = vision.get_model('resnet18_v1', classes=10)``
builds the same architecture as MXNet's ``gluon.model_zoo.vision``, with the same constructor
arguments, defaults and parameter names. ``pretrained=True`` loads MXNet's own pretrained weight files
from ``root`` (default ``~/.mxnet/models``), downloading them from MXNet's repository when they are
missing (:mod:`~mxlite.gluon.model_zoo.model_store`).
"""

from . import model_store, vision

__all__ = ["model_store", "vision"]
