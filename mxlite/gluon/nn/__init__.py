"""Gluon layers and the Block/Parameter machinery (``mx.nn``, also ``mx.gluon.nn``)."""

from ..block import Block, HybridBlock, HybridSequential, Sequential
from ..parameter import Constant, DeferredInitializationError, Parameter, ParameterDict
from .activations import ELU, GELU, SELU, LeakyReLU, PReLU, SiLU, Swish
from .attention import MultiHeadAttention, PositionwiseFFN, TransformerDecoderLayer, TransformerEncoderLayer
from .basic_layers import (
    Activation,
    BatchNorm,
    Concatenate,
    Dense,
    Dropout,
    Embedding,
    Flatten,
    HybridConcatenate,
    HybridLambda,
    Identity,
    Lambda,
    LayerNorm,
)
from .conv_layers import (
    AvgPool2D,
    Conv2D,
    GlobalAvgPool2D,
    GlobalMaxPool2D,
    MaxPool2D,
    PixelShuffle1D,
    PixelShuffle2D,
    PixelShuffle3D,
    ReflectionPad2D,
)
from .conv_nd_layers import (
    AvgPool1D,
    AvgPool3D,
    Conv1D,
    Conv1DTranspose,
    Conv2DTranspose,
    Conv3D,
    Conv3DTranspose,
    GlobalAvgPool1D,
    GlobalAvgPool3D,
    GlobalMaxPool1D,
    GlobalMaxPool3D,
    MaxPool1D,
    MaxPool3D,
)
from .norm_layers import GroupNorm, InstanceNorm, SyncBatchNorm

__all__ = [
    "Activation", "AvgPool2D", "BatchNorm", "Block", "Constant", "Conv2D", "DeferredInitializationError",
    "Dense", "Dropout", "Embedding", "Flatten", "GlobalAvgPool2D", "GlobalMaxPool2D", "HybridBlock",
    "HybridSequential", "Lambda", "LayerNorm", "MaxPool2D", "Parameter", "Sequential",
    "AvgPool1D", "AvgPool3D", "Conv1D", "Conv1DTranspose", "Conv2DTranspose", "Conv3D", "Conv3DTranspose",
    "GlobalAvgPool1D", "GlobalAvgPool3D", "GlobalMaxPool1D", "GlobalMaxPool3D", "MaxPool1D", "MaxPool3D",
    "ELU", "GELU", "SELU", "HybridLambda", "Identity", "LeakyReLU", "PReLU", "ParameterDict", "SiLU", "Swish",
    "GroupNorm", "InstanceNorm", "Concatenate", "HybridConcatenate", "PixelShuffle1D", "PixelShuffle2D",
    "PixelShuffle3D", "ReflectionPad2D", "SyncBatchNorm", "MultiHeadAttention", "PositionwiseFFN",
    "TransformerEncoderLayer", "TransformerDecoderLayer",
]
