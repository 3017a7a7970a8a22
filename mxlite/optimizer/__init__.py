"""Optimizers (``mx.optimizer``): update rules with MXNet 2.x semantics.

Each rule lives in its own module and registers itself by lower-case class name, so
``mx.optimizer.create('adamw', ...)`` finds it. The contract a rule implements is in
:mod:`mxlite.optimizer.optimizer`.
"""

from .adabelief import AdaBelief
from .adadelta import AdaDelta
from .adagrad import AdaGrad
from .adam import Adam
from .adamw import AdamW
from .dcasgd import DCASGD
from .ftml import FTML
from .ftrl import Ftrl
from .lamb import LAMB
from .lans import LANS
from .lars import LARS
from .nadam import Nadam
from .nag import NAG
from .optimizer import MultiPrecisionState, Optimizer, create, register, registered
from .rmsprop import RMSProp
from .sgd import SGD
from .sgld import SGLD
from .signum import Signum
from .updater import Updater, get_updater

__all__ = ["AdaBelief", "AdaDelta", "AdaGrad", "Adam", "AdamW", "DCASGD", "FTML", "Ftrl", "LAMB", "LANS", "LARS",
           "MultiPrecisionState", "NAG", "Nadam", "Optimizer", "RMSProp", "SGD", "SGLD", "Signum", "Updater", "create",
           "get_updater", "register", "registered"]
