"""Recurrent layers and cells (``mx.gluon.rnn``): ``RNN``, ``LSTM``, ``GRU`` and their cells, MXNet Gluon's API."""

from .rnn_cell import (
    GRUCell,
    HybridRecurrentCell,
    HybridSequentialRNNCell,
    LSTMCell,
    RecurrentCell,
    RNNCell,
    SequentialRNNCell,
)
from .rnn_layer import GRU, LSTM, RNN

__all__ = ["GRU", "GRUCell", "HybridRecurrentCell", "HybridSequentialRNNCell", "LSTM", "LSTMCell", "RNN", "RNNCell",
           "RecurrentCell", "SequentialRNNCell"]
