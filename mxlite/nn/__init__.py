"""Gluon layers and the Block/Parameter machinery (``mx.nn``, also ``mx.gluon.nn``)."""

from .basic_layers import Activation, BatchNorm, Dense, Dropout, Embedding, Flatten, Lambda, LayerNorm
from .block import Block, HybridBlock, HybridSequential, Sequential
from .conv_layers import AvgPool2D, Conv2D, GlobalAvgPool2D, GlobalMaxPool2D, MaxPool2D
from .parameter import Constant, DeferredInitializationError, Parameter

__all__ = [
    "Activation", "AvgPool2D", "BatchNorm", "Block", "Constant", "Conv2D", "DeferredInitializationError",
    "Dense", "Dropout", "Embedding", "Flatten", "GlobalAvgPool2D", "GlobalMaxPool2D", "HybridBlock",
    "HybridSequential", "Lambda", "LayerNorm", "MaxPool2D", "Parameter", "Sequential",
]
