"""Optimizers (``mx.optimizer``): update rules with MXNet 2.x semantics."""

from .adam import Adam
from .optimizer import Optimizer, create, register, registered
from .sgd import SGD
from .updater import Updater, get_updater

__all__ = ["Adam", "Optimizer", "SGD", "Updater", "create", "get_updater", "register", "registered"]
