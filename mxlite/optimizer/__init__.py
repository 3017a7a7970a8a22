"""Optimizers (``mx.optimizer``): update rules with MXNet 2.x semantics.

Each rule lives in its own module and registers itself by lower-case class name, so
``mx.optimizer.create('adamw', ...)`` finds it. The contract a rule implements is in
:mod:`mxlite.optimizer.optimizer`.
"""

from .adadelta import AdaDelta
from .adagrad import AdaGrad
from .adam import Adam
from .adamw import AdamW
from .ftrl import Ftrl
from .lamb import LAMB
from .lars import LARS
from .nag import NAG
from .optimizer import MultiPrecisionState, Optimizer, create, register, registered
from .rmsprop import RMSProp
from .sgd import SGD
from .signum import Signum
from .updater import Updater, get_updater

__all__ = ["AdaDelta", "AdaGrad", "Adam", "AdamW", "Ftrl", "LAMB", "LARS", "MultiPrecisionState", "NAG",
           "Optimizer", "RMSProp", "SGD", "Signum", "Updater", "create", "get_updater", "register", "registered"]
