"""Recurrent cells (Gluon's ``gluon.rnn.RNNCell``, ``LSTMCell``, ``GRUCell``, ``SequentialRNNCell``).

A cell computes one time step: ``output, new_states = cell(x_t, states)`` with ``x_t`` of shape
``(N, C)`` and each state ``(N, H)``. ``unroll`` runs it over a sequence. Parameters are named and
shaped as MXNet's: ``i2h_weight (G*H, C)``, ``h2h_weight (G*H, H)``, ``i2h_bias``, ``h2h_bias``
``(G*H,)`` with the gates stacked in MXNet's order (LSTM ``i, f, c, o``; GRU ``r, z, n``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import ndarray as _nd
from ..autograd import nn_ops, ops
from ..autograd.tensor import Tensor
from ..nn.basic_layers import _activation, _int_arg, _ready
from ..nn.block import Block
from ..nn.parameter import Parameter
from . import _steps

__all__ = ["RecurrentCell", "HybridRecurrentCell", "RNNCell", "LSTMCell", "GRUCell", "SequentialRNNCell",
           "HybridSequentialRNNCell"]


def _act(layer: str, value: str | Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    if callable(value):
        return value
    fn = _activation(value)
    if fn is None:
        raise ValueError(f"{layer}: activation must be named, got None")
    return fn


def _make_states(info: list[dict[str, Any]], func: Callable[..., Tensor] | None, kwargs: dict[str, Any]
                 ) -> list[Tensor]:
    """One array per entry of ``info`` made by ``func(shape=..., **kwargs)`` (default: zeros)."""
    func = func or _nd.zeros
    states = []
    for entry in info:
        args = {k: v for k, v in entry.items() if not k.startswith("__")}
        args.update(kwargs)
        states.append(func(**args))
    return states


class RecurrentCell(Block):
    """Base of recurrent cells: ``state_info``, ``begin_state``, ``unroll`` and ``reset``.

    Subclasses implement ``forward(inputs, states) -> (output, new_states)`` and ``state_info``.
    """

    def __init__(self, prefix: str | None = None, params: Any = None) -> None:
        super().__init__(prefix, params)

    def reset(self) -> None:
        """Reset before re-using the cell for another graph (nothing to reset in mxlite; kept for Gluon)."""
        for child in self._children.values():
            if isinstance(child, RecurrentCell):
                child.reset()

    def state_info(self, batch_size: int = 0) -> list[dict[str, Any]]:
        """Shape and layout of each state: ``[{'shape': (batch_size, H), '__layout__': 'NC'}, ...]``."""
        raise NotImplementedError

    def begin_state(self, batch_size: int = 0, func: Callable[..., Tensor] | None = None, **kwargs: Any
                    ) -> list[Tensor]:
        """Initial states: ``func(shape=(batch_size, H), **kwargs)`` for each (default ``mx.nd.zeros``).

        ``kwargs`` go to ``func``: ``ctx=``/``device=`` and ``dtype=`` for the default.
        """
        return _make_states(self.state_info(batch_size), func, kwargs)

    def _begin_like(self, x: Tensor) -> list[Tensor]:
        return self.begin_state(x.shape[0], device=x.device, dtype=x.dtype)

    def __call__(self, inputs: Any, states: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(inputs, np.ndarray):
            inputs = _nd.array(inputs)
        if states is None:
            states = self._begin_like(inputs)
        return super().__call__(inputs, _steps.as_state_list(states), *args, **kwargs)

    def unroll(self, length: int, inputs: Tensor | Sequence[Tensor], begin_state: Sequence[Tensor] | None = None,
               layout: str = "NTC", merge_outputs: bool | None = None, valid_length: Tensor | None = None
               ) -> tuple[Tensor | list[Tensor], list[Tensor]]:
        """Run the cell over ``length`` steps.

        Args:
            length: number of time steps.
            inputs: one array with the time axis where ``layout`` puts it ('NTC': ``(N, T, C)``,
                'TNC': ``(T, N, C)``), or a list of ``length`` arrays ``(N, C)``.
            begin_state: initial states (default zeros on the inputs' device).
            layout: 'NTC' or 'TNC'.
            merge_outputs: stack the outputs into one array along the time axis; ``None`` keeps
                the form of ``inputs``.
            valid_length: optional ``(N,)`` lengths: outputs past a sample's length are zero and
                its final states are those at its last valid step (MXNet's behaviour).

        Returns:
            ``(outputs, states)``.

        Raises:
            ValueError: bad ``layout``, or ``inputs`` whose time axis is not ``length`` long.
        """
        if layout not in ("NTC", "TNC"):
            raise ValueError(f"{type(self).__name__}.unroll: layout must be 'NTC' or 'TNC', got {layout!r}")
        axis = layout.index("T")
        self.reset()
        if isinstance(inputs, np.ndarray):
            inputs = _nd.array(inputs)
        if isinstance(inputs, Tensor):
            if inputs.shape[axis] != length:
                raise ValueError(f"unroll: inputs have {inputs.shape[axis]} steps on axis {axis} (layout {layout}), "
                                 f"but length={length}")
            steps = [ops.squeeze(s, axis=axis) for s in ops.split(inputs, length, axis=axis)]
            merge = True if merge_outputs is None else merge_outputs
        else:
            steps = list(inputs)
            if len(steps) != length:
                raise ValueError(f"unroll: got {len(steps)} inputs for length={length}")
            merge = False if merge_outputs is None else merge_outputs
        states = list(begin_state) if begin_state is not None else self._begin_like(steps[0])
        mask_data = None
        if valid_length is not None:
            lengths = valid_length.asnumpy() if isinstance(valid_length, Tensor) else np.asarray(valid_length)
            mask_data = np.arange(length)[:, None] < lengths.reshape(1, -1)  # (T, N)
        outputs = []
        for t, x in enumerate(steps):
            out, new_states = self(x, states)
            if mask_data is not None:
                keep = _nd.array(mask_data[t].reshape(-1, 1), device=x.device, dtype=out.dtype)
                out = ops.multiply(out, keep)
                new_states = [ops.add(ops.multiply(n, keep), ops.multiply(o, ops.subtract(1.0, keep)))
                              for n, o in zip(new_states, states)]
            outputs.append(out)
            states = new_states
        if merge:
            return ops.stack(outputs, axis=axis), states
        return outputs, states


HybridRecurrentCell = RecurrentCell  # Gluon's hybridizable base: the same class in mxlite


class _GatedCell(RecurrentCell):
    """A cell with MXNet's four parameters for ``gates`` stacked gates of ``hidden_size`` each."""

    _gates = 1
    _num_states = 1

    def __init__(self, hidden_size: int, i2h_weight_initializer: Any, h2h_weight_initializer: Any,
                 i2h_bias_initializer: Any, h2h_bias_initializer: Any, input_size: int, dtype: Any = np.float32
                 ) -> None:
        super().__init__()
        name = type(self).__name__
        self._hidden_size = _int_arg(name, "hidden_size", hidden_size)
        self._input_size = _int_arg(name, "input_size", input_size, low=0)
        width = self._gates * self._hidden_size
        self.i2h_weight = Parameter("i2h_weight", shape=(width, input_size), init=i2h_weight_initializer,
                                    dtype=dtype, allow_deferred_init=True)
        self.h2h_weight = Parameter("h2h_weight", shape=(width, hidden_size), init=h2h_weight_initializer,
                                    dtype=dtype, allow_deferred_init=True)
        self.i2h_bias = Parameter("i2h_bias", shape=(width,), init=i2h_bias_initializer, dtype=dtype,
                                  allow_deferred_init=True)
        self.h2h_bias = Parameter("h2h_bias", shape=(width,), init=h2h_bias_initializer, dtype=dtype,
                                  allow_deferred_init=True)

    def state_info(self, batch_size: int = 0) -> list[dict[str, Any]]:
        return [{"shape": (batch_size, self._hidden_size), "__layout__": "NC"} for _ in range(self._num_states)]

    def _weights(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        if x.ndim != 2:
            raise ValueError(f"{type(self).__name__}: inputs must be (N, C) for one step, got shape {x.shape}")
        if not self.i2h_weight.is_initialized:
            self.i2h_weight.shape = (self._gates * self._hidden_size, x.shape[1])
        params = (self.i2h_weight, self.h2h_weight, self.i2h_bias, self.h2h_bias)
        return tuple(_ready(p, x) for p in params)  # type: ignore[return-value]

    def _check_states(self, states: list[Tensor], x: Tensor) -> None:
        if len(states) != self._num_states:
            raise ValueError(f"{type(self).__name__} takes {self._num_states} state(s), got {len(states)}")
        for s in states:
            if s.shape != (x.shape[0], self._hidden_size):
                raise ValueError(f"{type(self).__name__}: a state has shape {s.shape}, expected "
                                 f"{(x.shape[0], self._hidden_size)}")

    def _extra_repr(self) -> str:
        shape = self.i2h_weight.shape
        return f"{shape[1] if shape and shape[1] > 0 else None} -> {self._gates * self._hidden_size}"


class RNNCell(_GatedCell):
    """Elman RNN cell: ``h' = activation(W_i x + b_i + W_h h + b_h)``; output is ``h'``.

    Args:
        hidden_size: number of units in the state.
        activation: 'tanh' (default), 'relu', 'sigmoid', 'softrelu', 'softsign', or a callable.
        i2h_weight_initializer, h2h_weight_initializer: weight initializers (default: the global one).
        i2h_bias_initializer, h2h_bias_initializer: bias initializers (default zeros).
        input_size: input features; 0 infers them from the first step.

    Raises:
        ValueError / TypeError: bad sizes or an unknown activation.
    """

    def __init__(self, hidden_size: int, activation: str | Callable[[Tensor], Tensor] = "tanh",
                 i2h_weight_initializer: Any = None, h2h_weight_initializer: Any = None,
                 i2h_bias_initializer: Any = "zeros", h2h_bias_initializer: Any = "zeros", input_size: int = 0,
                 prefix: str | None = None, params: Any = None) -> None:
        super().__init__(hidden_size, i2h_weight_initializer, h2h_weight_initializer, i2h_bias_initializer,
                         h2h_bias_initializer, input_size)
        self._activation = _act("RNNCell", activation)

    def forward(self, inputs: Tensor, states: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        wi, wh, bi, bh = self._weights(inputs)
        self._check_states(states, inputs)
        h = _steps.rnn_step(nn_ops.fully_connected(inputs, wi, bi), states[0], wh, bh, self._activation)
        return h, [h]


class _ActivatedGatedCell(_GatedCell):
    """A gated cell with MXNet's ``activation`` and ``recurrent_activation`` arguments (LSTM, GRU)."""

    def __init__(self, hidden_size: int, i2h_weight_initializer: Any = None, h2h_weight_initializer: Any = None,
                 i2h_bias_initializer: Any = "zeros", h2h_bias_initializer: Any = "zeros", input_size: int = 0,
                 prefix: str | None = None, params: Any = None, activation: Any = "tanh",
                 recurrent_activation: Any = "sigmoid") -> None:
        super().__init__(hidden_size, i2h_weight_initializer, h2h_weight_initializer, i2h_bias_initializer,
                         h2h_bias_initializer, input_size)
        self._activation = _act(type(self).__name__, activation)
        self._recurrent_activation = _act(type(self).__name__, recurrent_activation)


class LSTMCell(_ActivatedGatedCell):
    """LSTM cell (gates ``i, f, c, o``): states ``[h, c]``, output ``h'``.

    ``c' = sigmoid(f) * c + sigmoid(i) * tanh(g)``, ``h' = sigmoid(o) * tanh(c')`` (``activation``
    replaces tanh, ``recurrent_activation`` sigmoid).

    Args:
        hidden_size, i2h/h2h initializers, input_size: as :class:`RNNCell`.
        activation, recurrent_activation: names or callables (default 'tanh', 'sigmoid').
    """

    _gates = 4
    _num_states = 2

    def forward(self, inputs: Tensor, states: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        wi, wh, bi, bh = self._weights(inputs)
        self._check_states(states, inputs)
        h, c = _steps.lstm_step(nn_ops.fully_connected(inputs, wi, bi), states[0], states[1], wh, bh,
                                self._activation, self._recurrent_activation)
        return h, [h, c]


class GRUCell(_ActivatedGatedCell):
    """GRU cell (gates ``r, z, n``, MXNet's formulation): state ``[h]``, output ``h'``.

    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) * n + z * h``.

    Args: as :class:`LSTMCell`.
    """

    _gates = 3

    def forward(self, inputs: Tensor, states: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        wi, wh, bi, bh = self._weights(inputs)
        self._check_states(states, inputs)
        h = _steps.gru_step(nn_ops.fully_connected(inputs, wi, bi), states[0], wh, bh, self._activation,
                            self._recurrent_activation)
        return h, [h]


class SequentialRNNCell(RecurrentCell):
    """Stacks cells: each cell's output is the next one's input; the states are the cells' concatenated."""

    def __init__(self, prefix: str | None = None, params: Any = None) -> None:
        super().__init__(prefix, params)
        self._cells: list[RecurrentCell] = []

    def add(self, cell: RecurrentCell) -> None:
        """Append ``cell`` to the stack.

        Raises:
            TypeError: ``cell`` is not a recurrent cell.
        """
        if not isinstance(cell, RecurrentCell):
            raise TypeError(f"SequentialRNNCell.add takes a recurrent cell, got {type(cell).__name__}")
        self.register_child(cell, str(len(self._cells)))
        self._cells.append(cell)

    def __len__(self) -> int:
        return len(self._cells)

    def __getitem__(self, i: int) -> RecurrentCell:
        return self._cells[i]

    def state_info(self, batch_size: int = 0) -> list[dict[str, Any]]:
        return [info for cell in self._cells for info in cell.state_info(batch_size)]

    def forward(self, inputs: Tensor, states: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        if not self._cells:
            raise ValueError("SequentialRNNCell has no cells; add some with .add(cell)")
        expected = len(self.state_info())
        if len(states) != expected:
            raise ValueError(f"SequentialRNNCell takes {expected} states (its cells' together), got {len(states)}")
        at, next_states = 0, []
        for cell in self._cells:
            n = len(cell.state_info())
            inputs, new = cell(inputs, states[at:at + n])
            next_states.extend(new)
            at += n
        return inputs, next_states


HybridSequentialRNNCell = SequentialRNNCell
