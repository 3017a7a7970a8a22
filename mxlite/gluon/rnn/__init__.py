"""Recurrent layers and cells (``mx.gluon.rnn``): ``RNN``, ``LSTM``, ``GRU``, their cells and the cell
wrappers (``SequentialRNNCell``, ``BidirectionalCell``, ``DropoutCell``, ``ZoneoutCell``, ``ResidualCell``,
``VariationalDropoutCell``), MXNet Gluon's API. ``rnn_cell.dynamic_unroll`` is reachable as in MXNet."""

from . import rnn_cell as rnn_cell  # mx.gluon.rnn.rnn_cell.dynamic_unroll, as MXNet
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
           "BidirectionalCell", "VariationalDropoutCell", "LSTMPCell"]
