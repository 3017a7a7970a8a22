"""Recurrent cells and cell wrappers: MXNet Gluon 2.x's ``gluon.rnn`` cell list.

A cell computes one time step: ``output, new_states = cell(x_t, states)`` with ``x_t`` of shape
``(N, C)`` and each state ``(N, H)``. ``unroll`` runs it over a sequence. Parameters are named and
shaped as MXNet's: ``i2h_weight (G*H, C)``, ``h2h_weight (G*H, H)``, ``i2h_bias``, ``h2h_bias``
``(G*H,)`` with the gates stacked in MXNet's order (LSTM ``i, f, c, o``; GRU ``r, z, n``).

Cells: :class:`RNNCell`, :class:`LSTMCell`, :class:`GRUCell`, :class:`LSTMPCell`. Containers and
wrappers: :class:`SequentialRNNCell` (stacks cells), :class:`BidirectionalCell` (a forward and a
backward cell, unroll only), :class:`DropoutCell`, and the modifier cells (:class:`ModifierCell`)
:class:`ZoneoutCell`, :class:`ResidualCell`, :class:`VariationalDropoutCell`, which wrap a base
cell whose parameters then appear under ``base_cell.`` in ``collect_params()`` (MXNet 2.x naming:
``'base_cell.i2h_weight'``, ``'l_cell.h2h_bias'``, ``'1.base_cell.i2h_bias'``).

``unroll(length, inputs, begin_state, layout, merge_outputs, valid_length)`` follows MXNet:
``merge_outputs=None`` returns a list of ``length`` arrays, except with ``valid_length`` (one
array); ``valid_length`` zeroes the outputs past each sample's length and returns each sample's
states after its last valid step. Dropout and zoneout act only while training (inside
``autograd.record()``, or ``autograd.train_mode()``); in predict mode they are the identity.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ... import ops
from ...arrays import nd as _nd
from ...autograd.tensor import Tensor
from ...ops import nn_ops
from ..block import Block
from ..nn.basic_layers import _activation, _int_arg, _ready, _real_arg
from ..parameter import Parameter
from . import _steps

__all__ = ["RecurrentCell", "HybridRecurrentCell", "RNNCell", "LSTMCell", "GRUCell", "SequentialRNNCell",
           "HybridSequentialRNNCell", "DropoutCell", "ModifierCell", "ZoneoutCell", "ResidualCell",
           "BidirectionalCell", "VariationalDropoutCell", "LSTMPCell"]

_Seq = Tensor | list[Tensor]  # one array with a time axis, or one array per step


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


# -- sequence helpers (MXNet's _format_sequence, SequenceMask, SequenceReverse) ----------------------
def _check_layout(name: str, layout: Any) -> int:
    if layout not in ("NTC", "TNC"):
        raise ValueError(f"{name}.unroll: layout must be 'NTC' or 'TNC', got {layout!r}")
    return layout.index("T")


def _format_sequence(name: str, length: int | None, inputs: Any, layout: str, merge: bool | None
                     ) -> tuple[_Seq, int, int]:
    """``inputs`` as one array (``merge`` True) or a list of steps (``merge`` False); None keeps the form.

    Returns ``(inputs, time_axis, batch_size)``.

    Raises:
        TypeError: ``inputs`` is neither an array nor a list of arrays.
        ValueError: the number of steps is not ``length``, or an array without a time axis.
    """
    axis = _check_layout(name, layout)
    if isinstance(inputs, np.ndarray):
        inputs = _nd.array(inputs)
    if isinstance(inputs, Tensor):
        if inputs.ndim < 3:
            raise ValueError(f"{name}.unroll: inputs as one array must have a batch, a time and a feature axis "
                             f"(layout {layout}), got shape {inputs.shape}")
        if length is not None and inputs.shape[axis] != length:
            raise ValueError(f"{name}.unroll: inputs have {inputs.shape[axis]} steps on axis {axis} (layout "
                             f"{layout}), but length={length}")
        batch = inputs.shape[layout.index("N")]
        if merge is False:
            steps = inputs.shape[axis]
            inputs = [ops.squeeze(s, axis=axis) for s in ops.split(inputs, steps, axis=axis)]
        return inputs, axis, batch
    if not isinstance(inputs, (list, tuple)):
        raise TypeError(f"{name}.unroll: inputs must be an array or a list of arrays, got {type(inputs).__name__}")
    steps_list = [_nd.array(s) if isinstance(s, np.ndarray) else s for s in inputs]
    if not steps_list or not all(isinstance(s, Tensor) for s in steps_list):
        raise TypeError(f"{name}.unroll: inputs must be a non-empty list of arrays")
    if length is not None and len(steps_list) != length:
        raise ValueError(f"{name}.unroll: got {len(steps_list)} inputs for length={length}")
    batch = steps_list[0].shape[0]
    if merge is True:
        return ops.stack(steps_list, axis=axis), axis, batch
    return steps_list, axis, batch


def _lengths(name: str, valid_length: Any, batch: int, length: int) -> np.ndarray:
    """``valid_length`` as int64 ``(batch,)`` on the host.

    Raises:
        ValueError: wrong shape, a non-integer entry, or an entry outside ``[0, length]``.
    """
    arr = valid_length.asnumpy() if hasattr(valid_length, "asnumpy") else np.asarray(valid_length)
    if arr.shape != (batch,):
        raise ValueError(f"{name}.unroll: valid_length must have shape ({batch},) (one length per sample), "
                         f"got {arr.shape}")
    if arr.size and (not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr))):
        raise ValueError(f"{name}.unroll: valid_length must hold whole numbers, got {arr.tolist()}")
    if arr.size and (arr.min() < 0 or arr.max() > length):
        raise ValueError(f"{name}.unroll: valid_length entries must lie in [0, length={length}], got {arr.tolist()}")
    return arr.astype(np.int64)


def _where_rows(keep: np.ndarray, a: Tensor, b: Any) -> Tensor:
    """Row ``i`` of ``a`` where ``keep[i]``, else row ``i`` of ``b`` (a tensor or a scalar)."""
    cond = _nd.array(keep.reshape((-1,) + (1,) * (a.ndim - 1)).astype(np.float32), device=a.device)
    return ops.where(cond, a, b)


def _mask_sequence(data: _Seq, lengths: np.ndarray, axis: int, merge: bool) -> _Seq:
    """Zero the steps past each sample's length (MXNet's ``SequenceMask``); returns ``data``'s form."""
    if isinstance(data, Tensor):
        steps = data.shape[axis]
        t = np.arange(steps).reshape((steps, 1) if axis == 0 else (1, steps))
        keep = t < (lengths.reshape(1, -1) if axis == 0 else lengths.reshape(-1, 1))
        cond = _nd.array(keep.reshape(keep.shape + (1,) * (data.ndim - 2)).astype(np.float32), device=data.device)
        masked = ops.where(cond, data, 0.0)
        if merge:
            return masked
        return [ops.squeeze(s, axis=axis) for s in ops.split(masked, steps, axis=axis)]
    out = [x if bool(np.all(lengths > t)) else _where_rows(lengths > t, x, 0.0) for t, x in enumerate(data)]
    return ops.stack(out, axis=axis) if merge else out


def _reverse_steps(steps: list[Tensor], lengths: np.ndarray | None) -> list[Tensor]:
    """The steps in reverse; with ``lengths`` only each sample's first ``lengths[i]`` steps are reversed
    and the padding stays in place (MXNet's ``SequenceReverse``)."""
    n_steps = len(steps)
    if lengths is None or bool(np.all(lengths == n_steps)):
        return steps[::-1]
    t = np.arange(n_steps)[:, None]
    src = np.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)  # (T, N): the step each output reads
    stacked = ops.stack(steps, axis=0)
    dev = stacked.device
    rows = _nd.array(src, device=dev, dtype=np.int64)
    cols = _nd.array(np.broadcast_to(np.arange(src.shape[1]), src.shape).copy(), device=dev, dtype=np.int64)
    gathered = ops.getitem(stacked, (rows, cols))
    return [ops.squeeze(s, axis=0) for s in ops.split(gathered, n_steps, axis=0)]


def _first_step(inputs: _Seq) -> Tensor:
    return inputs if isinstance(inputs, Tensor) else inputs[0]


@contextlib.contextmanager
def _unmodified(cell: RecurrentCell) -> Iterator[None]:
    """Let a modifier cell drive its base cell directly for a moment."""
    old = cell._modified
    cell._modified = False
    try:
        yield
    finally:
        cell._modified = old


def _has_bidirectional(cell: RecurrentCell) -> bool:
    if isinstance(cell, BidirectionalCell):
        return True
    if isinstance(cell, SequentialRNNCell):
        return any(_has_bidirectional(c) for c in cell._cells)
    return False


def _rate(layer: str, name: str, value: Any) -> float:
    return float(_real_arg(layer, name, value, low=0, high=1, high_inclusive=True))


def _keep_mask(rate: float, like: Tensor) -> Tensor:
    """A dropout mask of ``like``'s shape: nonzero where an element is kept (all ones outside training)."""
    ones = _nd.ones(like.shape, device=like.device, dtype=like.dtype)
    return nn_ops.dropout(ones, rate)


class RecurrentCell(Block):
    """Base of recurrent cells: ``state_info``, ``begin_state``, ``unroll``, ``reset`` and ``infer_shape``.

    Subclasses implement ``forward(inputs, states) -> (output, new_states)`` and ``state_info``.
    """

    _modified = False  # True while a modifier cell wraps this cell

    def __init__(self, prefix: str | None = None, params: Any = None) -> None:
        super().__init__(prefix, params)
        self._modified = False

    def reset(self) -> None:
        """Reset before re-using the cell for another sequence (clears zoneout / variational dropout masks)."""
        for child in self._children.values():
            if isinstance(child, RecurrentCell):
                child.reset()

    def state_info(self, batch_size: int = 0) -> list[dict[str, Any]]:
        """Shape and layout of each state: ``[{'shape': (batch_size, H), '__layout__': 'NC'}, ...]``."""
        raise NotImplementedError

    def _check_unmodified(self) -> None:
        if self._modified:
            raise RuntimeError(f"{type(self).__name__} is wrapped by a modifier cell (ZoneoutCell, ResidualCell, "
                               "VariationalDropoutCell, ...): call the modifier cell instead")

    def begin_state(self, batch_size: int = 0, func: Callable[..., Tensor] | None = None, **kwargs: Any
                    ) -> list[Tensor]:
        """Initial states: ``func(shape=(batch_size, H), **kwargs)`` for each (default ``mx.nd.zeros``).

        ``kwargs`` go to ``func``: ``ctx=``/``device=`` and ``dtype=`` for the default.

        Raises:
            RuntimeError: the cell is wrapped by a modifier cell (call the modifier's ``begin_state``).
        """
        self._check_unmodified()
        return _make_states(self.state_info(batch_size), func, kwargs)

    def infer_shape(self, i: int, x: Tensor, is_bidirect: bool) -> None:
        """Fix the input size of the parameters before ``initialize()`` (MXNet 2.x's ``infer_shape``).

        Args:
            i: the cell's position in a stack: 0 takes ``x``'s last axis as the input size, later
                positions the hidden (or projection) size of the layer below.
            x: a sample input (any shape whose last axis is the features).
            is_bidirect: the layer below is bidirectional (its output is twice as wide).

        Cells without parameters do nothing; mxlite also infers the shapes at the first step.
        """

    def _begin_like(self, x: Tensor) -> list[Tensor]:
        return self.begin_state(x.shape[0], device=x.device, dtype=x.dtype)

    def __call__(self, inputs: Any, states: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(inputs, np.ndarray):
            inputs = _nd.array(inputs)
        if states is None:
            states = self._begin_like(inputs)
        return super().__call__(inputs, _steps.as_state_list(states), *args, **kwargs)

    def unroll(self, length: int, inputs: Tensor | Sequence[Tensor], begin_state: Sequence[Tensor] | None = None,
               layout: str = "NTC", merge_outputs: bool | None = None, valid_length: Any = None
               ) -> tuple[Tensor | list[Tensor], list[Tensor]]:
        """Run the cell over ``length`` steps.

        Args:
            length: number of time steps.
            inputs: one array with the time axis where ``layout`` puts it ('NTC': ``(N, T, C)``,
                'TNC': ``(T, N, C)``), or a list of ``length`` arrays ``(N, C)``.
            begin_state: initial states (default zeros on the inputs' device, in their dtype).
            layout: 'NTC' or 'TNC'.
            merge_outputs: True stacks the outputs into one array along the time axis, False
                returns a list of ``length`` arrays ``(N, H)``; None (MXNet's default) gives a list,
                or one array when ``valid_length`` is given.
            valid_length: optional ``(N,)`` whole numbers in ``[0, length]``: outputs past a
                sample's length are zero and its final states are those after its last valid step
                (a length of 0 gives the begin states).

        Returns:
            ``(outputs, states)``.

        Raises:
            ValueError: bad ``layout``, inputs whose time axis is not ``length`` long, or a bad
                ``valid_length``. TypeError: inputs neither an array nor a list of arrays.
        """
        name = type(self).__name__
        self.reset()
        steps, axis, batch = _format_sequence(name, length, inputs, layout, False)
        states = (_steps.as_state_list(begin_state) if begin_state is not None
                  else self._begin_like(steps[0]))
        lengths = _lengths(name, valid_length, batch, length) if valid_length is not None else None
        outputs = []
        for t, x in enumerate(steps):
            out, new_states = self(x, states)
            if lengths is not None and not bool(np.all(lengths > t)):
                keep = lengths > t
                out = _where_rows(keep, out, 0.0)
                new_states = [_where_rows(keep, n, o) for n, o in zip(new_states, states)]
            outputs.append(out)
            states = list(new_states)
        merge = (lengths is not None) if merge_outputs is None else merge_outputs
        if merge:
            return ops.stack(outputs, axis=axis), states
        return outputs, states


HybridRecurrentCell = RecurrentCell  # Gluon's hybridizable base: the same class in mxlite


class _GatedCell(RecurrentCell):
    """A cell with MXNet's four parameters for ``gates`` stacked gates of ``hidden_size`` each.

    ``recurrent_size`` is the width of the state fed back into ``h2h_weight`` (the hidden size,
    or the projection size of :class:`LSTMPCell`).
    """

    _gates = 1
    _num_states = 1

    def __init__(self, hidden_size: int, i2h_weight_initializer: Any, h2h_weight_initializer: Any,
                 i2h_bias_initializer: Any, h2h_bias_initializer: Any, input_size: int, dtype: Any = np.float32,
                 recurrent_size: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        name = type(self).__name__
        self._hidden_size = _int_arg(name, "hidden_size", hidden_size)
        self._input_size = _int_arg(name, "input_size", input_size, low=0)
        self._recurrent_size = self._hidden_size if recurrent_size is None else recurrent_size
        width = self._gates * self._hidden_size
        self.i2h_weight = Parameter("i2h_weight", shape=(width, input_size), init=i2h_weight_initializer,
                                    dtype=dtype, allow_deferred_init=True)
        self.h2h_weight = Parameter("h2h_weight", shape=(width, self._recurrent_size), init=h2h_weight_initializer,
                                    dtype=dtype, allow_deferred_init=True)
        self.i2h_bias = Parameter("i2h_bias", shape=(width,), init=i2h_bias_initializer, dtype=dtype,
                                  allow_deferred_init=True)
        self.h2h_bias = Parameter("h2h_bias", shape=(width,), init=h2h_bias_initializer, dtype=dtype,
                                  allow_deferred_init=True)

    def state_info(self, batch_size: int = 0) -> list[dict[str, Any]]:
        return [{"shape": (batch_size, self._hidden_size), "__layout__": "NC"} for _ in range(self._num_states)]

    def infer_shape(self, i: int, x: Tensor, is_bidirect: bool) -> None:
        """Set ``i2h_weight``'s input size: ``x.shape[-1]`` when ``i == 0``, else the output width of
        the layer below (this cell's hidden / projection size, doubled when ``is_bidirect``).

        Raises:
            ValueError: ``i`` negative, or a size that contradicts an already known shape.
        """
        i = _int_arg(type(self).__name__, "i", i, low=0)
        in_size = x.shape[-1] if i == 0 else self._recurrent_size * (2 if is_bidirect else 1)
        self.i2h_weight.shape = (self._gates * self._hidden_size, in_size)

    def _weights(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        if x.ndim != 2:
            raise ValueError(f"{type(self).__name__}: inputs must be (N, C) for one step, got shape {x.shape}")
        if not self.i2h_weight.is_initialized:
            self.i2h_weight.shape = (self._gates * self._hidden_size, x.shape[1])
        params = (self.i2h_weight, self.h2h_weight, self.i2h_bias, self.h2h_bias)
        return tuple(_ready(p, x) for p in params)  # type: ignore[return-value]

    def _check_states(self, states: list[Tensor], x: Tensor) -> None:
        expected = [tuple(info["shape"]) for info in self.state_info(x.shape[0])]
        if len(states) != len(expected):
            raise ValueError(f"{type(self).__name__} takes {len(expected)} state(s), got {len(states)}")
        for s, shape in zip(states, expected):
            if s.shape != shape:
                raise ValueError(f"{type(self).__name__}: a state has shape {s.shape}, expected {shape}")

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
                         h2h_bias_initializer, input_size, prefix=prefix, params=params)
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
                         h2h_bias_initializer, input_size, prefix=prefix, params=params)
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


class LSTMPCell(_GatedCell):
    """LSTM cell with a projected recurrent state (LSTMP, Sak et al. 2014): states ``[r, c]``, output ``r'``.

    The gates are an LSTM's (``i, f, c, o``, sigmoid/tanh) computed from ``W_i x + b_i + W_h r + b_h``;
    ``c' = f * c + i * g``, ``h' = o * tanh(c')`` and the output and fed-back state is the projection
    ``r' = W_hr h'`` (no bias).

    Parameters (MXNet's names and order): ``i2h_weight (4H, C)``, ``h2h_weight (4H, P)``,
    ``h2r_weight (P, H)``, ``i2h_bias (4H,)``, ``h2h_bias (4H,)``.

    Args:
        hidden_size: ``H``, units of the cell state.
        projection_size: ``P``, units of the output and the recurrent state.
        i2h_weight_initializer, h2h_weight_initializer, h2r_weight_initializer: weight initializers.
        i2h_bias_initializer, h2h_bias_initializer: bias initializers (default zeros).
        input_size: input features; 0 infers them from the first step.

    Raises:
        TypeError / ValueError: a size that is not a positive integer.
    """

    _gates = 4
    _num_states = 2

    def __init__(self, hidden_size: int, projection_size: int, i2h_weight_initializer: Any = None,
                 h2h_weight_initializer: Any = None, h2r_weight_initializer: Any = None,
                 i2h_bias_initializer: Any = "zeros", h2h_bias_initializer: Any = "zeros", input_size: int = 0,
                 prefix: str | None = None, params: Any = None) -> None:
        proj = _int_arg("LSTMPCell", "projection_size", projection_size)
        super().__init__(hidden_size, i2h_weight_initializer, h2h_weight_initializer, i2h_bias_initializer,
                         h2h_bias_initializer, input_size, recurrent_size=proj, prefix=prefix, params=params)
        self._projection_size = proj
        self.h2r_weight = Parameter("h2r_weight", shape=(proj, self._hidden_size), init=h2r_weight_initializer,
                                    allow_deferred_init=True)
        for name in ("i2h_bias", "h2h_bias"):  # MXNet's order: i2h_weight, h2h_weight, h2r_weight, biases
            self._reg_params.move_to_end(name)

    def state_info(self, batch_size: int = 0) -> list[dict[str, Any]]:
        """``[r: (batch_size, P), c: (batch_size, H)]``, layout 'NC'."""
        return [{"shape": (batch_size, self._projection_size), "__layout__": "NC"},
                {"shape": (batch_size, self._hidden_size), "__layout__": "NC"}]

    def forward(self, inputs: Tensor, states: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """One step: ``(r', [r', c'])``.

        Raises:
            ValueError: inputs not ``(N, C)`` or states of the wrong number or shapes.
        """
        wi, wh, bi, bh = self._weights(inputs)
        wr = _ready(self.h2r_weight, inputs)
        self._check_states(states, inputs)
        h, c = _steps.lstm_step(nn_ops.fully_connected(inputs, wi, bi), states[0], states[1], wh, bh)
        r = nn_ops.fully_connected(h, wr, None)
        return r, [r, c]

    def _extra_repr(self) -> str:
        return f"{super()._extra_repr()} -> {self._projection_size}"


class SequentialRNNCell(RecurrentCell):
    """Stacks cells: each cell's output is the next one's input; the states are the cells' concatenated.

    Parameters are named by position: ``'0.i2h_weight'``, ``'1.base_cell.h2h_bias'``, ``'2.l_cell.i2h_bias'``.
    ``unroll`` unrolls each cell over the whole sequence in turn (as MXNet), so a
    :class:`BidirectionalCell` may be one of the cells; stepping (``cell(x, states)``) may not.
    """

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

    def begin_state(self, batch_size: int = 0, func: Callable[..., Tensor] | None = None, **kwargs: Any
                    ) -> list[Tensor]:
        """The cells' initial states, concatenated in stack order (arguments as :meth:`RecurrentCell.begin_state`).

        Raises:
            RuntimeError: this stack is wrapped by a modifier cell.
        """
        self._check_unmodified()
        return [s for cell in self._cells for s in cell.begin_state(batch_size, func, **kwargs)]

    def infer_shape(self, i: int, x: Tensor, is_bidirect: bool) -> None:
        """Call each cell's ``infer_shape`` with its position in this stack (``x`` for the first).

        ``is_bidirect`` is not passed down: inside a stack a cell's input is the cell below's own
        output (MXNet's ``HybridSequentialRNNCell`` behaviour).
        """
        for j, cell in enumerate(self._cells):
            cell.infer_shape(j, x, False)

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

    def unroll(self, length: int, inputs: Tensor | Sequence[Tensor], begin_state: Sequence[Tensor] | None = None,
               layout: str = "NTC", merge_outputs: bool | None = None, valid_length: Any = None
               ) -> tuple[Tensor | list[Tensor], list[Tensor]]:
        """Unroll every cell over the sequence in turn; arguments and result as :meth:`RecurrentCell.unroll`.

        The last cell decides the form of the outputs for ``merge_outputs=None``.

        Raises:
            ValueError: no cells, a wrong number of begin states, or as :meth:`RecurrentCell.unroll`.
        """
        name = type(self).__name__
        if not self._cells:
            raise ValueError("SequentialRNNCell has no cells; add some with .add(cell)")
        self.reset()
        inputs, _, batch = _format_sequence(name, length, inputs, layout, None)
        first = _first_step(inputs)
        states = (_steps.as_state_list(begin_state) if begin_state is not None
                  else self.begin_state(batch, device=first.device, dtype=first.dtype))
        expected = len(self.state_info())
        if len(states) != expected:
            raise ValueError(f"{name}.unroll: takes {expected} begin states (its cells' together), got {len(states)}")
        at, next_states = 0, []
        last = len(self._cells) - 1
        for i, cell in enumerate(self._cells):
            n = len(cell.state_info())
            inputs, new = cell.unroll(length, inputs, begin_state=states[at:at + n], layout=layout,
                                      merge_outputs=merge_outputs if i == last else None, valid_length=valid_length)
            next_states.extend(new)
            at += n
        return inputs, next_states


HybridSequentialRNNCell = SequentialRNNCell


class DropoutCell(RecurrentCell):
    """Dropout on the input, as a cell without states: ``cell(x, states) -> (dropout(x), states)``.

    Drops while training only (inside ``autograd.record()``); in predict mode it is the identity.
    ``unroll`` of one array (or with ``merge_outputs=True``) drops the whole sequence at once and
    returns ``(outputs, begin_state or [])``; a list of steps is dropped step by step. As in MXNet,
    ``valid_length`` is ignored (nothing is masked).

    Args:
        rate: probability of zeroing an element, in ``[0, 1]``; survivors are scaled by ``1/(1-rate)``.
        axes: axes along which one mask value is shared (of the array the mask is drawn for:
            one step ``(N, C)``, or the whole sequence when unrolled as one array).

    Raises:
        TypeError / ValueError: ``rate`` not a number in ``[0, 1]``, ``axes`` not integers.
    """

    def __init__(self, rate: float, axes: Sequence[int] = (), prefix: str | None = None, params: Any = None
                 ) -> None:
        super().__init__(prefix, params)
        self._rate = _rate("DropoutCell", "rate", rate)
        axes = (axes,) if isinstance(axes, (int, np.integer)) else tuple(axes)
        if not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in axes):
            raise TypeError(f"DropoutCell: axes must be a tuple of integers, got {axes!r}")
        self._axes = tuple(int(a) for a in axes)

    def state_info(self, batch_size: int = 0) -> list[dict[str, Any]]:
        """No states: ``[]``."""
        return []

    def forward(self, inputs: Tensor, states: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """``(dropout(inputs), states)``; dropout only while training."""
        if self._rate > 0:
            inputs = nn_ops.dropout(inputs, self._rate, self._axes)
        return inputs, states

    def unroll(self, length: int, inputs: Tensor | Sequence[Tensor], begin_state: Sequence[Tensor] | None = None,
               layout: str = "NTC", merge_outputs: bool | None = None, valid_length: Any = None
               ) -> tuple[Tensor | list[Tensor], list[Tensor]]:
        """Dropout over ``length`` steps; ``merge_outputs=None`` keeps the form of ``inputs``.

        Raises:
            ValueError / TypeError: as :meth:`RecurrentCell.unroll`.
        """
        self.reset()
        inputs, _, _ = _format_sequence(type(self).__name__, length, inputs, layout, merge_outputs)
        states = _steps.as_state_list(begin_state) if begin_state else []
        if isinstance(inputs, Tensor):
            return self.forward(inputs, states)
        return super().unroll(length, inputs, begin_state=states, layout=layout, merge_outputs=merge_outputs)

    def _extra_repr(self) -> str:
        return f"rate={self._rate}, axes={self._axes}"


class ModifierCell(RecurrentCell):
    """Base of cells that wrap a base cell and change its behaviour (zoneout, residual, variational dropout).

    The base cell becomes the child ``base_cell`` (its parameters are ``'base_cell.<name>'``),
    ``state_info``/``begin_state`` are the base cell's, and the base cell should no longer be
    used on its own: its ``begin_state`` raises while it is wrapped.

    Args:
        base_cell: the cell to wrap.

    Raises:
        TypeError: ``base_cell`` is not a recurrent cell.
        ValueError: ``base_cell`` is already wrapped by another modifier cell.
    """

    def __init__(self, base_cell: RecurrentCell, **kwargs: Any) -> None:
        name = type(self).__name__
        if not isinstance(base_cell, RecurrentCell):
            raise TypeError(f"{name}: base_cell must be a recurrent cell, got {type(base_cell).__name__}")
        if base_cell._modified:
            raise ValueError(f"{name}: base_cell {type(base_cell).__name__} is already modified; "
                             "one cell cannot be modified twice")
        super().__init__(**kwargs)
        base_cell._modified = True
        self.base_cell = base_cell

    @property
    def params(self) -> Any:
        """The base cell's own parameters (MXNet's ``ModifierCell.params``)."""
        return self.base_cell.params

    def state_info(self, batch_size: int = 0) -> list[dict[str, Any]]:
        """The base cell's ``state_info``."""
        return self.base_cell.state_info(batch_size)

    def begin_state(self, batch_size: int = 0, func: Callable[..., Tensor] | None = None, **kwargs: Any
                    ) -> list[Tensor]:
        """The base cell's initial states (arguments as :meth:`RecurrentCell.begin_state`).

        Raises:
            RuntimeError: this cell is itself wrapped by another modifier cell.
        """
        self._check_unmodified()
        with _unmodified(self.base_cell):
            return self.base_cell.begin_state(batch_size, func, **kwargs)

    def infer_shape(self, i: int, x: Tensor, is_bidirect: bool) -> None:
        """The base cell's ``infer_shape``."""
        self.base_cell.infer_shape(i, x, is_bidirect)

    def forward(self, inputs: Tensor, states: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """One step of the modified cell; subclasses implement it.

        Raises:
            NotImplementedError: always, here.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement forward()")


class ZoneoutCell(ModifierCell):
    """Zoneout (Krueger et al. 2016) on a base cell: while training, each element of the output and
    of the states keeps its previous value with probability ``zoneout_outputs`` / ``zoneout_states``.

    One step: ``o, s' = base_cell(x, s)``; output ``where(m_o, o, o_prev)`` (``o_prev`` is the
    previous step's output, zeros at the first step after ``reset()``/``unroll``) and states
    ``where(m_s, s', s)``, with fresh Bernoulli(1 - p) keep masks at every step. In predict mode
    (outside ``autograd.record()``) the cell is the base cell unchanged.

    Args:
        base_cell: the cell to wrap (not a :class:`BidirectionalCell`, which cannot be stepped).
        zoneout_outputs, zoneout_states: probabilities in ``[0, 1]``.

    Raises:
        ValueError: a bidirectional base cell, or a probability outside ``[0, 1]``.
        TypeError / ValueError: as :class:`ModifierCell`.
    """

    def __init__(self, base_cell: RecurrentCell, zoneout_outputs: float = 0.0, zoneout_states: float = 0.0,
                 **kwargs: Any
                 ) -> None:
        if isinstance(base_cell, RecurrentCell) and _has_bidirectional(base_cell):
            raise ValueError("ZoneoutCell: base_cell contains a BidirectionalCell, which cannot be stepped; "
                             "wrap the cells underneath in ZoneoutCell instead")
        p_out = _rate("ZoneoutCell", "zoneout_outputs", zoneout_outputs)
        p_states = _rate("ZoneoutCell", "zoneout_states", zoneout_states)
        super().__init__(base_cell, **kwargs)
        self.zoneout_outputs, self.zoneout_states = p_out, p_states
        self._prev_output: Tensor | None = None

    def reset(self) -> None:
        """Forget the previous output (and reset the base cell)."""
        super().reset()
        self._prev_output = None

    def forward(self, inputs: Tensor, states: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """One step of the base cell with zoneout applied to its output and states (training only)."""
        next_output, next_states = self.base_cell(inputs, states)
        prev = self._prev_output if self._prev_output is not None else ops.zeros_like(next_output)
        output = next_output
        if self.zoneout_outputs != 0.0:
            output = ops.where(_keep_mask(self.zoneout_outputs, next_output), next_output, prev)
        if self.zoneout_states != 0.0:
            next_states = [ops.where(_keep_mask(self.zoneout_states, new), new, old)
                           for new, old in zip(next_states, states)]
        self._prev_output = output
        return output, list(next_states)

    def _extra_repr(self) -> str:
        return f"p_out={self.zoneout_outputs}, p_state={self.zoneout_states}"


class ResidualCell(ModifierCell):
    """Residual connection around a base cell (Wu et al. 2016): output = base cell's output + input.

    The base cell's output must have the input's shape. ``unroll`` unrolls the base cell and adds
    the inputs (zeroed past ``valid_length``, so padded outputs stay zero).

    Args:
        base_cell: the cell to wrap (a :class:`BidirectionalCell` works with ``unroll``).

    Raises:
        TypeError / ValueError: as :class:`ModifierCell`; ValueError at run time when the output
        and input shapes differ.
    """

    def forward(self, inputs: Tensor, states: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """One step: ``(base output + inputs, base states)``.

        Raises:
            ValueError: the base cell's output and the input differ in shape.
        """
        output, states = self.base_cell(inputs, states)
        _same_shape(output, inputs)
        return ops.add(output, inputs), states

    def unroll(self, length: int, inputs: Tensor | Sequence[Tensor], begin_state: Sequence[Tensor] | None = None,
               layout: str = "NTC", merge_outputs: bool | None = None, valid_length: Any = None
               ) -> tuple[Tensor | list[Tensor], list[Tensor]]:
        """The base cell's unroll plus the inputs; arguments and result as :meth:`RecurrentCell.unroll`."""
        name = type(self).__name__
        self.reset()
        with _unmodified(self.base_cell):
            outputs, states = self.base_cell.unroll(length, inputs, begin_state=begin_state, layout=layout,
                                                    merge_outputs=merge_outputs, valid_length=valid_length)
        merge = isinstance(outputs, Tensor) if merge_outputs is None else merge_outputs
        inputs, axis, batch = _format_sequence(name, length, inputs, layout, merge)
        if valid_length is not None:
            inputs = _mask_sequence(inputs, _lengths(name, valid_length, batch, length), axis, merge)
        if merge:
            _same_shape(outputs, inputs)
            return ops.add(outputs, inputs), states
        for o, x in zip(outputs, inputs):
            _same_shape(o, x)
        return [ops.add(o, x) for o, x in zip(outputs, inputs)], states


def _same_shape(output: Tensor, inputs: Tensor) -> None:
    if output.shape != inputs.shape:
        raise ValueError(f"ResidualCell: the base cell's output has shape {output.shape} but the input has "
                         f"{inputs.shape}; a residual connection needs equal shapes")


class BidirectionalCell(RecurrentCell):
    """Runs ``l_cell`` forward and ``r_cell`` backward over a sequence and joins their outputs.

    Only ``unroll`` is possible (stepping raises). Outputs are ``concat([l_out, r_out])`` on the
    feature axis (axis 2 of a merged ``(N, T, C)``/``(T, N, C)`` array, axis 1 of each step), with
    ``r_out`` put back in forward time order; states are ``l_cell``'s followed by ``r_cell``'s.
    With ``valid_length`` the backward cell reads each sample's first ``valid_length[i]`` steps
    in reverse (MXNet's ``SequenceReverse``). Parameters are ``'l_cell.<name>'`` and ``'r_cell.<name>'``.

    Args:
        l_cell: the cell for the forward direction.
        r_cell: the cell for the backward direction.
        output_prefix: accepted for Gluon 1.x (it named the output symbols); unused.

    Raises:
        TypeError: a cell that is not a recurrent cell.
    """

    def __init__(self, l_cell: RecurrentCell, r_cell: RecurrentCell, output_prefix: str = "bi_", **kwargs: Any) -> None:
        for arg, cell in (("l_cell", l_cell), ("r_cell", r_cell)):
            if not isinstance(cell, RecurrentCell):
                raise TypeError(f"BidirectionalCell: {arg} must be a recurrent cell, got {type(cell).__name__}")
        super().__init__(**kwargs)
        self.l_cell = l_cell
        self.r_cell = r_cell
        self._output_prefix = output_prefix

    def __call__(self, inputs: Any, states: Any = None, *args: Any, **kwargs: Any) -> Any:
        """Stepping is not possible (the backward direction needs the whole sequence).

        Raises:
            NotImplementedError: always; use :meth:`unroll`.
        """
        raise NotImplementedError("BidirectionalCell cannot be stepped; use unroll()")

    def state_info(self, batch_size: int = 0) -> list[dict[str, Any]]:
        """``l_cell``'s state info followed by ``r_cell``'s."""
        return self.l_cell.state_info(batch_size) + self.r_cell.state_info(batch_size)

    def begin_state(self, batch_size: int = 0, func: Callable[..., Tensor] | None = None, **kwargs: Any
                    ) -> list[Tensor]:
        """``l_cell``'s initial states followed by ``r_cell``'s (arguments as :meth:`RecurrentCell.begin_state`).

        Raises:
            RuntimeError: this cell is wrapped by a modifier cell.
        """
        self._check_unmodified()
        return self.l_cell.begin_state(batch_size, func, **kwargs) + self.r_cell.begin_state(batch_size, func,
                                                                                               **kwargs)

    def infer_shape(self, i: int, x: Tensor, is_bidirect: bool) -> None:
        """Both cells' ``infer_shape(i, x, True)`` (a bidirectional layer below doubles the input width)."""
        self.l_cell.infer_shape(i, x, True)
        self.r_cell.infer_shape(i, x, True)

    def unroll(self, length: int, inputs: Tensor | Sequence[Tensor], begin_state: Sequence[Tensor] | None = None,
               layout: str = "NTC", merge_outputs: bool | None = None, valid_length: Any = None
               ) -> tuple[Tensor | list[Tensor], list[Tensor]]:
        """Unroll both directions; arguments as :meth:`RecurrentCell.unroll`.

        Returns:
            ``(outputs, l_states + r_states)``; outputs are ``2 * H`` wide (for two cells of ``H``).

        Raises:
            ValueError: a wrong number of begin states, or as :meth:`RecurrentCell.unroll`.
        """
        name = type(self).__name__
        self.reset()
        steps, axis, batch = _format_sequence(name, length, inputs, layout, False)
        lengths = _lengths(name, valid_length, batch, length) if valid_length is not None else None
        reversed_steps = _reverse_steps(steps, lengths)
        states = (_steps.as_state_list(begin_state) if begin_state is not None
                  else self.begin_state(batch, device=steps[0].device, dtype=steps[0].dtype))
        n_left, expected = len(self.l_cell.state_info(batch)), len(self.state_info(batch))
        if len(states) != expected:
            raise ValueError(f"{name}.unroll: takes {expected} begin states (l_cell's then r_cell's), "
                             f"got {len(states)}")
        l_out, l_states = self.l_cell.unroll(length, steps, begin_state=states[:n_left], layout=layout,
                                             merge_outputs=merge_outputs, valid_length=valid_length)
        r_out, r_states = self.r_cell.unroll(length, reversed_steps, begin_state=states[n_left:], layout=layout,
                                             merge_outputs=False, valid_length=valid_length)
        if isinstance(r_out, Tensor):
            r_out, _, _ = _format_sequence(name, length, r_out, layout, False)
        r_out = _reverse_steps(list(r_out), lengths)
        merge = isinstance(l_out, Tensor) if merge_outputs is None else merge_outputs
        if merge:
            l_merged = l_out if isinstance(l_out, Tensor) else ops.stack(l_out, axis=axis)
            outputs: _Seq = ops.concat([l_merged, ops.stack(r_out, axis=axis)], axis=2)
        else:
            l_list, _, _ = _format_sequence(name, length, l_out, layout, False)
            outputs = [ops.concat([a, b], axis=1) for a, b in zip(l_list, r_out)]
        if lengths is not None:
            outputs = _mask_sequence(outputs, lengths, axis, merge)
        return outputs, list(l_states) + list(r_states)


class VariationalDropoutCell(ModifierCell):
    """Variational dropout (Gal & Ghahramani 2016) on a base cell: one dropout mask per sequence,
    shared by every time step, for the inputs, the first state (``h``) and the outputs separately.

    The masks are drawn at the first step after ``reset()`` (``unroll`` resets), so when stepping
    by hand call ``reset()`` between sequences. Without state dropout ``unroll`` drops the whole
    input and output sequences at once (a mask shared along the time axis). Training only: in
    predict mode the cell is the base cell unchanged.

    Args:
        base_cell: the cell to wrap.
        drop_inputs, drop_states, drop_outputs: dropout rates in ``[0, 1]`` (0 leaves that part alone).

    Raises:
        ValueError: a rate outside ``[0, 1]``, or ``drop_states`` with a bidirectional base cell.
        TypeError / ValueError: as :class:`ModifierCell`.
    """

    def __init__(self, base_cell: RecurrentCell, drop_inputs: float = 0.0, drop_states: float = 0.0,
                 drop_outputs: float = 0.0, **kwargs: Any) -> None:
        p_in = _rate("VariationalDropoutCell", "drop_inputs", drop_inputs)
        p_states = _rate("VariationalDropoutCell", "drop_states", drop_states)
        p_out = _rate("VariationalDropoutCell", "drop_outputs", drop_outputs)
        if p_states and isinstance(base_cell, RecurrentCell) and _has_bidirectional(base_cell):
            raise ValueError("VariationalDropoutCell: drop_states is not possible with a BidirectionalCell base "
                             "(it cannot be stepped); wrap the cells underneath instead")
        super().__init__(base_cell, **kwargs)
        self.drop_inputs, self.drop_states, self.drop_outputs = p_in, p_states, p_out
        self.drop_inputs_mask: Tensor | None = None
        self.drop_states_mask: Tensor | None = None
        self.drop_outputs_mask: Tensor | None = None

    def reset(self) -> None:
        """Forget the masks (the next step draws new ones) and reset the base cell."""
        super().reset()
        self.drop_inputs_mask = self.drop_states_mask = self.drop_outputs_mask = None

    def forward(self, inputs: Tensor, states: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        """One step of the base cell on masked inputs and ``h``, with the output masked (training only)."""
        states = list(states)
        if self.drop_states:
            if self.drop_states_mask is None:
                self.drop_states_mask = _keep_mask(self.drop_states, states[0])
            states[0] = ops.multiply(states[0], self.drop_states_mask)  # h only: always the first state
        if self.drop_inputs:
            if self.drop_inputs_mask is None:
                self.drop_inputs_mask = _keep_mask(self.drop_inputs, inputs)
            inputs = ops.multiply(inputs, self.drop_inputs_mask)
        output, next_states = self.base_cell(inputs, states)
        if self.drop_outputs:
            if self.drop_outputs_mask is None:
                self.drop_outputs_mask = _keep_mask(self.drop_outputs, output)
            output = ops.multiply(output, self.drop_outputs_mask)
        return output, next_states

    def unroll(self, length: int, inputs: Tensor | Sequence[Tensor], begin_state: Sequence[Tensor] | None = None,
               layout: str = "NTC", merge_outputs: bool | None = None, valid_length: Any = None
               ) -> tuple[Tensor | list[Tensor], list[Tensor]]:
        """Unroll with one mask per sequence; arguments as :meth:`RecurrentCell.unroll`.

        With ``drop_states`` the cell is stepped (``merge_outputs=None`` then gives a list, as
        :meth:`RecurrentCell.unroll`); otherwise ``merge_outputs=None`` gives one array (MXNet).
        """
        if self.drop_states:
            return super().unroll(length, inputs, begin_state, layout, merge_outputs, valid_length)
        name = type(self).__name__
        self.reset()
        merged, axis, batch = _format_sequence(name, length, inputs, layout, True)
        states = (_steps.as_state_list(begin_state) if begin_state is not None
                  else self.begin_state(batch, device=merged.device, dtype=merged.dtype))
        if self.drop_inputs:
            merged = nn_ops.dropout(merged, self.drop_inputs, axes=(axis,))
        with _unmodified(self.base_cell):
            outputs, states = self.base_cell.unroll(length, merged, states, layout, merge_outputs=True,
                                                    valid_length=valid_length)
        if self.drop_outputs:
            outputs = nn_ops.dropout(outputs, self.drop_outputs, axes=(axis,))
        merge = True if merge_outputs is None else merge_outputs
        outputs, _, _ = _format_sequence(name, length, outputs, layout, merge)
        if valid_length is not None:
            outputs = _mask_sequence(outputs, _lengths(name, valid_length, batch, length), axis, merge)
        return outputs, states

    def _extra_repr(self) -> str:
        return f"p_in={self.drop_inputs}, p_state={self.drop_states}, p_out={self.drop_outputs}"


def dynamic_unroll(cell: RecurrentCell, inputs: Tensor, begin_state: Sequence[Tensor] | None,
                   drop_inputs: float = 0.0, drop_outputs: float = 0.0, layout: str = "TNC",
                   valid_length: Any = None) -> tuple[Tensor, list[Tensor]]:
    """Unroll ``cell`` over a whole sequence array (MXNet 2.x's ``rnn_cell.dynamic_unroll``).

    The same numbers as ``cell.unroll(T, inputs, begin_state, layout, merge_outputs=True,
    valid_length=valid_length)``, with optional dropout on the inputs and outputs whose mask is
    shared along the time axis (training only). The cell is ``reset()`` first.

    Args:
        cell: a steppable recurrent cell.
        inputs: ``(T, N, C)`` for 'TNC' (default) or ``(N, T, C)`` for 'NTC'.
        begin_state: the initial states (None: zeros).
        drop_inputs, drop_outputs: dropout rates in ``[0, 1]``.
        layout: 'TNC' or 'NTC'.
        valid_length: optional ``(N,)`` lengths (see :meth:`RecurrentCell.unroll`).

    Returns:
        ``(outputs, states)``: outputs in ``layout``, zero past each sample's length.

    Raises:
        TypeError: ``cell`` is not a recurrent cell or ``inputs`` not one array.
        ValueError: a bad layout, rate or ``valid_length``.
    """
    if not isinstance(cell, RecurrentCell):
        raise TypeError(f"dynamic_unroll: cell must be a recurrent cell, got {type(cell).__name__}")
    if isinstance(inputs, np.ndarray):
        inputs = _nd.array(inputs)
    if not isinstance(inputs, Tensor):
        raise TypeError(f"dynamic_unroll: inputs must be one array, got {type(inputs).__name__}")
    p_in = _rate("dynamic_unroll", "drop_inputs", drop_inputs)
    p_out = _rate("dynamic_unroll", "drop_outputs", drop_outputs)
    length = inputs.shape[_check_layout("dynamic_unroll", layout)] if inputs.ndim >= 3 else 0
    steps, axis, batch = _format_sequence("dynamic_unroll", length, inputs, layout, True)
    time_major = steps if axis == 0 else ops.swapaxes(steps, 0, 1)
    if p_in:
        time_major = nn_ops.dropout(time_major, p_in, axes=(0,))
    cell.reset()
    states = (_steps.as_state_list(begin_state) if begin_state is not None
              else cell.begin_state(batch, device=inputs.device, dtype=inputs.dtype))
    lengths = _lengths("dynamic_unroll", valid_length, batch, length) if valid_length is not None else None
    outputs = []
    for t, x in enumerate(ops.squeeze(s, axis=0) for s in ops.split(time_major, length, axis=0)):
        out, new_states = cell(x, states)
        if lengths is not None and not bool(np.all(lengths > t)):
            new_states = [_where_rows(lengths > t, n, o) for n, o in zip(new_states, states)]
        outputs.append(out)
        states = list(new_states)
    merged = ops.stack(outputs, axis=0)
    if p_out:
        merged = nn_ops.dropout(merged, p_out, axes=(0,))
    if axis != 0:
        merged = ops.swapaxes(merged, 0, 1)
    if lengths is not None:
        merged = _mask_sequence(merged, lengths, axis, True)  # type: ignore[assignment]
    return merged, states  # type: ignore[return-value]
