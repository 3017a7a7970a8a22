"""Convolutional recurrent cells (MXNet Gluon's ``Conv1D/2D/3D`` ``RNNCell``, ``LSTMCell``, ``GRUCell``).

A convolutional cell is its dense counterpart with both projections made convolutions (Shi et al.
2015, ConvLSTM): the input projection ``i2h`` a convolution of the step's input with
``i2h_kernel``, ``i2h_pad`` and ``i2h_dilate`` (stride 1), the recurrent projection ``h2h`` a
convolution of the hidden state with an odd ``h2h_kernel`` padded to keep the state's size. Gates
stack on the channel axis in MXNet's order (LSTM ``i, f, c, o``; GRU ``r, z, n``) and follow the
dense cells' formulas (:mod:`mxlite.gluon.rnn._steps`).

Shapes (channels-first layouts ``NCW``/``NCHW``/``NCDHW``; the channels-last ones ``NWC``/``NHWC``/
``NDHWC`` move ``C`` last everywhere, weights included):

* ``input_shape``: one sample's step without the batch axis, ``(C, *S)``; ``C`` may be 0 or -1 to be
  inferred (from the first step, or ``infer_shape``).
* state(s): ``(N, hidden_channels, *S')`` with ``S'`` the input convolution's output size,
  ``(S + 2*i2h_pad - i2h_dilate*(i2h_kernel - 1) - 1) + 1`` per axis; the output is the new hidden state.
* ``i2h_weight (G*hidden_channels, C, *i2h_kernel)``, ``h2h_weight (G*hidden_channels, hidden_channels,
  *h2h_kernel)``, ``i2h_bias``/``h2h_bias (G*hidden_channels,)``, ``G`` the number of gates (1, 4, 3).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ... import ops
from ...autograd.tensor import Tensor
from ...ops import nn_ops
from ..nn.basic_layers import _int_arg, _ready
from ..nn.conv_nd_layers import _channels_last, _to_channels_first, _to_channels_last
from ..parameter import Parameter
from . import _steps
from .rnn_cell import RecurrentCell, _act

__all__ = ["Conv1DRNNCell", "Conv2DRNNCell", "Conv3DRNNCell", "Conv1DLSTMCell", "Conv2DLSTMCell",
           "Conv3DLSTMCell", "Conv1DGRUCell", "Conv2DGRUCell", "Conv3DGRUCell"]


def _spec(layer: str, name: str, value: Any, nd: int, low: int) -> tuple[int, ...]:
    """An int or ``nd`` ints (each >= ``low``) as an ``nd``-tuple; errors name the cell and the argument."""
    values = tuple(value) if isinstance(value, (tuple, list)) else (value,) * nd
    if len(values) != nd:
        raise ValueError(f"{layer}: {name} must be an int or a tuple of {nd} ints, got {value!r}")
    return tuple(_int_arg(layer, name, v, low) for v in values)


class _ConvRecurrentCell(RecurrentCell):
    """Shared body of the convolutional cells: arguments, parameters, state shapes and the two convolutions."""

    _nd = 2
    _gates = 1
    _num_states = 1

    def __init__(self, input_shape: Sequence[int], hidden_channels: int, i2h_kernel: Any, h2h_kernel: Any,
                 i2h_pad: Any, i2h_dilate: Any, h2h_dilate: Any, i2h_weight_initializer: Any,
                 h2h_weight_initializer: Any, i2h_bias_initializer: Any, h2h_bias_initializer: Any,
                 conv_layout: str, activation: str | Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        layer, nd = type(self).__name__, self._nd
        self._layout = conv_layout
        self._channels_last = _channels_last(layer, conv_layout, nd)
        self._hidden = _int_arg(layer, "hidden_channels", hidden_channels)
        shape = tuple(input_shape) if isinstance(input_shape, (tuple, list)) else None
        if shape is None or len(shape) != nd + 1:
            raise ValueError(f"{layer}: input_shape must be one step of one sample, {nd + 1} sizes in the layout "
                             f"{conv_layout!r} without N, got {input_shape!r}")
        channels = shape[-1] if self._channels_last else shape[0]
        spatial = shape[:-1] if self._channels_last else shape[1:]
        in_channels = 0 if isinstance(channels, (int, np.integer)) and channels < 0 else channels
        in_channels = _int_arg(layer, "input_shape's channel count", in_channels, low=0)
        spatial = tuple(_int_arg(layer, "input_shape", s, low=1) for s in spatial)
        self._i2h_kernel = _spec(layer, "i2h_kernel", i2h_kernel, nd, 1)
        self._h2h_kernel = _spec(layer, "h2h_kernel", h2h_kernel, nd, 1)
        if any(k % 2 == 0 for k in self._h2h_kernel):
            raise ValueError(f"{layer}: h2h_kernel must be odd on every axis (the state keeps its size), "
                             f"got {self._h2h_kernel}")
        self._i2h_pad = _spec(layer, "i2h_pad", i2h_pad, nd, 0)
        self._i2h_dilate = _spec(layer, "i2h_dilate", i2h_dilate, nd, 1)
        self._h2h_dilate = _spec(layer, "h2h_dilate", h2h_dilate, nd, 1)
        self._h2h_pad = tuple(d * (k - 1) // 2 for d, k in zip(self._h2h_dilate, self._h2h_kernel))
        out = tuple(s + 2 * p - d * (k - 1) for s, k, p, d in zip(spatial, self._i2h_kernel, self._i2h_pad,
                                                                  self._i2h_dilate))
        if any(o < 1 for o in out):
            raise ValueError(f"{layer}: i2h_kernel {self._i2h_kernel} (dilated {self._i2h_dilate}, padded "
                             f"{self._i2h_pad}) does not fit the input's spatial size {spatial}")
        self._state_shape = (out + (self._hidden,)) if self._channels_last else ((self._hidden,) + out)
        self._activation = _act(layer, activation)
        width = self._gates * self._hidden
        self.i2h_weight = Parameter("i2h_weight", shape=self._weight_shape(in_channels, self._i2h_kernel),
                                    init=i2h_weight_initializer, allow_deferred_init=True)
        self.h2h_weight = Parameter("h2h_weight", shape=self._weight_shape(self._hidden, self._h2h_kernel),
                                    init=h2h_weight_initializer, allow_deferred_init=True)
        self.i2h_bias = Parameter("i2h_bias", shape=(width,), init=i2h_bias_initializer, allow_deferred_init=True)
        self.h2h_bias = Parameter("h2h_bias", shape=(width,), init=h2h_bias_initializer, allow_deferred_init=True)

    def _weight_shape(self, in_channels: int, kernel: tuple[int, ...]) -> tuple[int, ...]:
        width = self._gates * self._hidden
        return (width,) + kernel + (in_channels,) if self._channels_last else (width, in_channels) + kernel

    def state_info(self, batch_size: int = 0) -> list[dict[str, Any]]:
        """``[{'shape': (batch_size, *state_shape), '__layout__': conv_layout}]``, two entries for LSTM."""
        return [{"shape": (batch_size,) + self._state_shape, "__layout__": self._layout}
                for _ in range(self._num_states)]

    def infer_shape(self, i: int, x: Tensor, is_bidirect: bool) -> None:
        """Set ``i2h_weight``'s input channels from ``x`` (a step ``(N, *input_shape)`` or a sequence with
        one more axis before them), as MXNet 2.x; ``i`` and ``is_bidirect`` are accepted and unused."""
        step = x.shape[-(self._nd + 1):]
        channels = step[-1] if self._channels_last else step[0]
        self.i2h_weight.shape = self._weight_shape(channels, self._i2h_kernel)

    def _conv(self, x: Tensor, weight: Tensor, bias: Tensor, pad: tuple[int, ...], dilate: tuple[int, ...]
              ) -> Tensor:
        if self._channels_last:
            y = nn_ops.conv(_to_channels_first(x), _to_channels_first(weight), bias, stride=(1,) * self._nd,
                            padding=pad, dilation=dilate)
            return _to_channels_last(y)
        return nn_ops.conv(x, weight, bias, stride=(1,) * self._nd, padding=pad, dilation=dilate)

    def _projections(self, inputs: Tensor, states: list[Tensor]) -> tuple[Tensor, Tensor]:
        """``(i2h, h2h)``: the two convolutions (biases added), after checking the input and the states.

        Raises:
            ValueError: ``inputs`` of the wrong rank or channels, or states of the wrong number or shapes.
        """
        layer, nd = type(self).__name__, self._nd
        if inputs.ndim != nd + 2:
            raise ValueError(f"{layer}: one step's input must have {nd + 2} axes ({self._layout}), got shape "
                             f"{inputs.shape}")
        channels = inputs.shape[-1] if self._channels_last else inputs.shape[1]
        known = self.i2h_weight.shape[-1] if self._channels_last else self.i2h_weight.shape[1]
        if not known:
            self.i2h_weight.shape = self._weight_shape(channels, self._i2h_kernel)
        elif known != channels:
            raise ValueError(f"{layer}: Parameter 'i2h_weight' has shape {self.i2h_weight.shape}, so the cell "
                             f"expects {known} input channels, but the input has {channels} (shape {inputs.shape})")
        expected = [tuple(info["shape"]) for info in self.state_info(inputs.shape[0])]
        if len(states) != len(expected) or any(s.shape != e for s, e in zip(states, expected)):
            raise ValueError(f"{layer}: expected states of shapes {expected}, got {[s.shape for s in states]} (the "
                             "state size follows input_shape: check it matches the input)")
        wi, wh, bi, bh = (_ready(p, inputs) for p in (self.i2h_weight, self.h2h_weight, self.i2h_bias,
                                                      self.h2h_bias))
        i2h = self._conv(inputs, wi, bi, self._i2h_pad, self._i2h_dilate)
        h2h = self._conv(states[0], wh, bh, self._h2h_pad, self._h2h_dilate)
        return i2h, h2h

    @property
    def _channel_axis(self) -> int:
        return -1 if self._channels_last else 1

    def _extra_repr(self) -> str:
        shape = self.i2h_weight.shape
        channels = shape[-1] if self._channels_last else shape[1]
        return f"{channels or None} -> {shape[0]}, {self._layout}"


class _ConvRNN(_ConvRecurrentCell):
    def forward(self, inputs: Tensor, states: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """One step: ``h' = activation(i2h(x) + h2h(h))``; returns ``(h', [h'])``."""
        i2h, h2h = self._projections(inputs, states)
        h = self._activation(ops.add(i2h, h2h))
        return h, [h]


class _ConvLSTM(_ConvRecurrentCell):
    _gates, _num_states = 4, 2

    def forward(self, inputs: Tensor, states: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """One step of the LSTM update on the summed convolutions; returns ``(h', [h', c'])``."""
        i2h, h2h = self._projections(inputs, states)
        h, c = _steps.lstm_gates(ops.add(i2h, h2h), states[1], self._activation, axis=self._channel_axis)
        return h, [h, c]


class _ConvGRU(_ConvRecurrentCell):
    _gates = 3

    def forward(self, inputs: Tensor, states: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """One step of the GRU update (``r`` multiplies the recurrent ``n`` projection); returns ``(h', [h'])``."""
        i2h, h2h = self._projections(inputs, states)
        h = _steps.gru_gates(i2h, h2h, states[0], self._activation, axis=self._channel_axis)
        return h, [h]


_DOC = """{kind} cell over {nd}-D convolutions ({layouts}), MXNet Gluon's ``{name}``; see the module docstring.

    Args:
        input_shape: one step of one sample without N, e.g. ``{example}`` for {first}; the channel count
            may be 0 or -1 (inferred).
        hidden_channels: channels of the hidden state (and of each gate).
        i2h_kernel, h2h_kernel: kernel sizes (ints or {nd}-tuples); ``h2h_kernel`` must be odd.
        i2h_pad, i2h_dilate, h2h_dilate: padding and dilation of the input convolution, dilation of the
            recurrent one (its padding keeps the state's size).
        i2h_weight_initializer, h2h_weight_initializer, i2h_bias_initializer, h2h_bias_initializer:
            initialisers (biases default to zeros).
        conv_layout: {layouts}.
        activation: 'tanh' (default) or another activation name, or a callable.

    Raises:
        TypeError, ValueError: bad sizes, an even ``h2h_kernel``, a kernel larger than the padded input,
            or another layout (at construction); input or states that do not fit (at the step).
    """


def _make(name: str, base: type, nd: int, kind: str) -> type:
    first, last = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}[nd]
    ones, zeros = (1,) * nd, (0,) * nd

    def __init__(self: Any, input_shape: Sequence[int], hidden_channels: int, i2h_kernel: Any, h2h_kernel: Any,
                 i2h_pad: Any = zeros, i2h_dilate: Any = ones, h2h_dilate: Any = ones,
                 i2h_weight_initializer: Any = None, h2h_weight_initializer: Any = None,
                 i2h_bias_initializer: Any = "zeros", h2h_bias_initializer: Any = "zeros",
                 conv_layout: str = first, activation: str | Callable[[Tensor], Tensor] = "tanh") -> None:
        base.__init__(self, input_shape, hidden_channels, i2h_kernel, h2h_kernel, i2h_pad, i2h_dilate, h2h_dilate,
                      i2h_weight_initializer, h2h_weight_initializer, i2h_bias_initializer, h2h_bias_initializer,
                      conv_layout, activation)

    example = "(C, " + ", ".join("DHW"[3 - nd:]) + ")"
    doc = _DOC.format(kind=kind, nd=nd, name=name, first=first, example=example,
                      layouts=f"'{first}' (default) or '{last}'")
    return type(name, (base,), {"__init__": __init__, "__doc__": doc, "_nd": nd, "__module__": __name__})


Conv1DRNNCell = _make("Conv1DRNNCell", _ConvRNN, 1, "Elman RNN")
Conv2DRNNCell = _make("Conv2DRNNCell", _ConvRNN, 2, "Elman RNN")
Conv3DRNNCell = _make("Conv3DRNNCell", _ConvRNN, 3, "Elman RNN")
Conv1DLSTMCell = _make("Conv1DLSTMCell", _ConvLSTM, 1, "LSTM (states [h, c])")
Conv2DLSTMCell = _make("Conv2DLSTMCell", _ConvLSTM, 2, "LSTM (states [h, c])")
Conv3DLSTMCell = _make("Conv3DLSTMCell", _ConvLSTM, 3, "LSTM (states [h, c])")
Conv1DGRUCell = _make("Conv1DGRUCell", _ConvGRU, 1, "GRU")
Conv2DGRUCell = _make("Conv2DGRUCell", _ConvGRU, 2, "GRU")
Conv3DGRUCell = _make("Conv3DGRUCell", _ConvGRU, 3, "GRU")
