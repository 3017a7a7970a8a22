"""Recurrent layers and cells (``mx.gluon.rnn``): ``RNN``, ``LSTM``, ``GRU``, their cells and the cell
wrappers (``SequentialRNNCell``, ``BidirectionalCell``, ``DropoutCell``, ``ZoneoutCell``, ``ResidualCell``,
``VariationalDropoutCell``) and the convolutional cells (``Conv1DLSTMCell`` ... ``Conv3DGRUCell``), MXNet
Gluon's API. ``rnn_cell.dynamic_unroll`` is reachable as in MXNet."""

from . import conv_rnn_cell as conv_rnn_cell
from . import rnn_cell as rnn_cell  # mx.gluon.rnn.rnn_cell.dynamic_unroll, as MXNet
from .conv_rnn_cell import (
    Conv1DGRUCell,
    Conv1DLSTMCell,
    Conv1DRNNCell,
    Conv2DGRUCell,
    Conv2DLSTMCell,
    Conv2DRNNCell,
    Conv3DGRUCell,
    Conv3DLSTMCell,
    Conv3DRNNCell,
)
from .rnn_cell import (
    BidirectionalCell,
    DropoutCell,
    GRUCell,
    HybridRecurrentCell,
    HybridSequentialRNNCell,
    LSTMCell,
    LSTMPCell,
    ModifierCell,
    RecurrentCell,
    ResidualCell,
    RNNCell,
    SequentialRNNCell,
    VariationalDropoutCell,
    ZoneoutCell,
)
from .rnn_layer import GRU, LSTM, RNN

__all__ = ["GRU", "GRUCell", "HybridRecurrentCell", "HybridSequentialRNNCell", "LSTM", "LSTMCell", "RNN", "RNNCell",
           "RecurrentCell", "SequentialRNNCell", "DropoutCell", "ModifierCell", "ZoneoutCell", "ResidualCell",
           "BidirectionalCell", "VariationalDropoutCell", "LSTMPCell", "Conv1DRNNCell", "Conv2DRNNCell",
           "Conv3DRNNCell", "Conv1DLSTMCell", "Conv2DLSTMCell", "Conv3DLSTMCell", "Conv1DGRUCell", "Conv2DGRUCell",
           "Conv3DGRUCell"]
