"""MXNet 1.x's ``gluon.contrib.rnn``: the convolutional recurrent cells, ``VariationalDropoutCell`` and
``LSTMPCell``. They are :mod:`mxlite.gluon.rnn`'s classes (MXNet 2.x moved them there)."""

from ..rnn import (
    Conv1DGRUCell,
    Conv1DLSTMCell,
    Conv1DRNNCell,
    Conv2DGRUCell,
    Conv2DLSTMCell,
    Conv2DRNNCell,
    Conv3DGRUCell,
    Conv3DLSTMCell,
    Conv3DRNNCell,
    LSTMPCell,
    VariationalDropoutCell,
)

__all__ = ["Conv1DGRUCell", "Conv1DLSTMCell", "Conv1DRNNCell", "Conv2DGRUCell", "Conv2DLSTMCell", "Conv2DRNNCell",
           "Conv3DGRUCell", "Conv3DLSTMCell", "Conv3DRNNCell", "LSTMPCell", "VariationalDropoutCell"]
