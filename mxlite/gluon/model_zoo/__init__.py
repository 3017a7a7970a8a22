"""Gluon's model zoo (``mx.gluon.model_zoo``): predefined networks, as in Apache MXNet.

``from mxlite.gluon.model_zoo import vision; net = vision.get_model('resnet18_v1', classes=10)``
builds the same architecture as MXNet's ``gluon.model_zoo.vision``, with the same constructor
arguments, defaults and parameter names. Pretrained weights are not available: ``pretrained=True``
raises :class:`mxlite.gluon.model_zoo.vision.PretrainedUnavailableError`.
"""

from . import vision

__all__ = ["vision"]
