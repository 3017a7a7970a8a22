"""One time step of each recurrence, and a whole (multi-layer, bidirectional) sequence, as functions.

A whole sequence (:func:`rnn_sequence`, what ``gluon.rnn``'s layers run) goes through
:func:`mxlite.ops.rnn_ops.recurrence`, one fused autograd node per layer and direction: the
input projection of every step in one GEMM, then one GEMM and one cell kernel (``kernels/rnn.cu``)
per step. The one-step functions below (what the cells run) are composed from mxlite's
differentiable ops, so gradients come from the ops' own and the same code runs on every device;
``rnn_sequence(..., fused=False)`` composes a whole sequence from them, the reference the fused
op is tested against. Gate order and formulas are MXNet's:

- RNN: ``h' = act(W_i x + b_i + W_h h + b_h)``.
- LSTM, gates ``i, f, c, o`` stacked in that order in the weights:
  ``c' = sigmoid(f) * c + sigmoid(i) * tanh(g)``, ``h' = sigmoid(o) * tanh(c')``.
- GRU, gates ``r, z, n``: ``r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)``, likewise ``z``,
  ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) * n + z * h``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ... import ops
from ...autograd.tensor import Tensor
from ...ops import nn_ops, rnn_ops, rnn_stack

Act = Callable[[Tensor], Tensor]

GATES = rnn_ops.GATES
NUM_STATES = rnn_ops.NUM_STATES


def rnn_step(i2h: Tensor, h: Tensor, h2h_weight: Tensor, h2h_bias: Tensor | None, activation: Act) -> Tensor:
    """``activation(i2h + h @ h2h_weight.T + h2h_bias)``; ``i2h`` is the input projection ``(N, H)``."""
    return activation(ops.add(i2h, nn_ops.fully_connected(h, h2h_weight, h2h_bias)))


def lstm_step(i2h: Tensor, h: Tensor, c: Tensor, h2h_weight: Tensor, h2h_bias: Tensor | None,
              activation: Act = ops.tanh, recurrent_activation: Act = ops.sigmoid,
              clip: tuple[float | None, float | None] | None = None) -> tuple[Tensor, Tensor]:
    """One LSTM step (gates ``i, f, c, o``); returns ``(h', c')``. ``clip`` bounds ``c'`` (MXNet's state_clip)."""
    gates = ops.add(i2h, nn_ops.fully_connected(h, h2h_weight, h2h_bias))
    return lstm_gates(gates, c, activation, recurrent_activation, clip)


def lstm_gates(gates: Tensor, c: Tensor, activation: Act = ops.tanh, recurrent_activation: Act = ops.sigmoid,
               clip: tuple[float | None, float | None] | None = None, axis: int = -1) -> tuple[Tensor, Tensor]:
    """The LSTM update from the summed pre-activations ``gates`` (``i, f, c, o`` stacked along ``axis``):
    ``(h', c')``. Shared by the dense and the convolutional cells (whose gates stack on the channel axis)."""
    in_gate, forget_gate, in_transform, out_gate = ops.split(gates, 4, axis=axis)
    c_next = ops.add(ops.multiply(recurrent_activation(forget_gate), c),
                     ops.multiply(recurrent_activation(in_gate), activation(in_transform)))
    if clip is not None:
        c_next = ops.clip(c_next, clip[0], clip[1])
    h_next = ops.multiply(recurrent_activation(out_gate), activation(c_next))
    return h_next, c_next


def gru_step(i2h: Tensor, h: Tensor, h2h_weight: Tensor, h2h_bias: Tensor | None, activation: Act = ops.tanh,
             recurrent_activation: Act = ops.sigmoid) -> Tensor:
    """One GRU step (gates ``r, z, n``, MXNet's / cuDNN's variant: ``r`` multiplies ``W_hn h + b_hn``)."""
    return gru_gates(i2h, nn_ops.fully_connected(h, h2h_weight, h2h_bias), h, activation, recurrent_activation)


def gru_gates(i2h: Tensor, h2h: Tensor, h: Tensor, activation: Act = ops.tanh,
              recurrent_activation: Act = ops.sigmoid, axis: int = -1) -> Tensor:
    """The GRU update from the input and recurrent projections (``r, z, n`` stacked along ``axis``): ``h'``.
    Shared by the dense and the convolutional cells."""
    i_r, i_z, i_n = ops.split(i2h, 3, axis=axis)
    h_r, h_z, h_n = ops.split(h2h, 3, axis=axis)
    reset = recurrent_activation(ops.add(i_r, h_r))
    update = recurrent_activation(ops.add(i_z, h_z))
    candidate = activation(ops.add(i_n, ops.multiply(reset, h_n)))
    return ops.add(ops.multiply(ops.subtract(1.0, update), candidate), ops.multiply(update, h))


def _run_direction(mode: str, steps: list[Tensor], states: list[Tensor], h2h_weight: Tensor,
                   h2h_bias: Tensor | None, reverse: bool,
                   clip: tuple[float | None, float | None] | None) -> tuple[list[Tensor], list[Tensor]]:
    order = range(len(steps) - 1, -1, -1) if reverse else range(len(steps))
    outputs: list[Tensor | None] = [None] * len(steps)
    h = states[0]
    c = states[1] if mode == "lstm" else None
    for t in order:
        if mode == "lstm":
            h, c = lstm_step(steps[t], h, c, h2h_weight, h2h_bias, clip=clip)
        elif mode == "gru":
            h = gru_step(steps[t], h, h2h_weight, h2h_bias)
        else:
            h = rnn_step(steps[t], h, h2h_weight, h2h_bias, ops.relu if mode == "rnn_relu" else ops.tanh)
        outputs[t] = h
    return outputs, ([h, c] if mode == "lstm" else [h])  # type: ignore[return-value]


def rnn_sequence(mode: str, x: Tensor, states: Sequence[Tensor], weights: Sequence[Sequence[Tensor | None]],
                 num_layers: int, bidirectional: bool, dropout: float = 0.0, training: bool = False,
                 clip: tuple[float | None, float | None] | None = None, valid_length: Any = None,
                 fused: bool = True) -> tuple[Tensor, list[Tensor]]:
    """A whole sequence through a stacked (optionally bidirectional) recurrence, MXNet's fused ``RNN`` op.

    Args:
        mode: 'rnn_relu', 'rnn_tanh', 'lstm' or 'gru'.
        x: input ``(T, N, C)`` (time-major).
        states: the begin states, each ``(num_layers * D, N, H)`` (``D`` = 2 when bidirectional):
            ``[h]``, or ``[h, c]`` for LSTM; entry ``l * D + d`` is layer ``l``, direction ``d``.
        weights: per layer and direction (same order), ``(i2h_weight, h2h_weight, i2h_bias,
            h2h_bias)``; biases may be ``None``.
        num_layers, bidirectional: the stack's shape.
        dropout: drop probability applied to the input of every layer but the first (training only).
        training: whether dropout applies.
        clip: LSTM cell-state bounds ``(min, max)``, or None.
        valid_length: optional per-sample lengths ``(N,)`` (MXNet's ``use_sequence_length``): sample
            ``b`` runs its first ``valid_length[b]`` steps in every layer (the backward direction from
            its last valid step back), its outputs past them are 0 and its final states are those
            after its last valid step. Fused only.
        fused: True (the default) runs each layer and direction as one
            :func:`~mxlite.ops.rnn_ops.recurrence` (on CPU devices, a stack of unidirectional
            layers as one :func:`~mxlite.ops.rnn_stack.stack_recurrence`, and a bidirectional
            layer's two directions as one
            :func:`~mxlite.ops.rnn_stack.bidirectional_recurrence`); False
            composes them step by step from the one-step functions above (the reference, many
            recorded ops per step).

    Returns:
        ``(output, final_states)``: output ``(T, N, D * H)`` (directions concatenated on the last
        axis) and the final states, shaped as ``states``.

    Raises:
        NotImplementedError: ``valid_length`` with ``fused=False``.
        ValueError: from :func:`~mxlite.ops.rnn_ops.recurrence`: shapes, dtypes or lengths that
            do not fit.
    """
    if valid_length is not None and not fused:
        raise NotImplementedError("rnn_sequence: valid_length needs the fused recurrence (fused=True)")
    if fused and num_layers > 1 and not bidirectional and not x.device.is_gpu:
        # one node for the stack, its layers overlapped on the host's threads (rnn_stack's docstring)
        return rnn_stack.stack_recurrence(mode, x, states, weights[:num_layers], clip=clip, valid_length=valid_length,
                                          dropout=dropout if training else 0.0)
    dirs = 2 if bidirectional else 1
    length, batch = x.shape[0], x.shape[1]
    finals: list[list[Tensor]] = [[] for _ in states]
    layer_in = x
    pairs = fused and bidirectional and not x.device.is_gpu  # a layer's two directions side by side on host threads
    for layer in range(num_layers):
        if layer > 0 and dropout > 0 and training:
            layer_in = nn_ops.dropout(layer_in, dropout, training=True)
        if pairs:
            begin = [ops.getitem(s, slice(2 * layer, 2 * layer + 2)) for s in states]
            layer_in, last = rnn_stack.bidirectional_recurrence(mode, layer_in, begin, weights[2 * layer:2 * layer + 2],
                                                                clip=clip, valid_length=valid_length)
            for k, s in enumerate(last):
                finals[k].append(s)  # (2, N, H): both directions
            continue
        outs = []
        for d in range(dirs):
            i2h_weight, h2h_weight, i2h_bias, h2h_bias = weights[layer * dirs + d]
            begin = [ops.reshape(ops.getitem(s, layer * dirs + d), s.shape[1:]) for s in states]
            if fused:
                out, last = rnn_ops.recurrence(mode, layer_in, begin, (i2h_weight, h2h_weight, i2h_bias, h2h_bias),
                                               reverse=d == 1, clip=clip, valid_length=valid_length)
                outs.append(out)
            else:
                i2h = nn_ops.fully_connected(layer_in, i2h_weight, i2h_bias, flatten=False)  # all steps in one GEMM
                width = i2h.shape[-1]
                steps = [ops.reshape(s, (batch, width)) for s in ops.split(i2h, length, axis=0)]
                seq, last = _run_direction(mode, steps, begin, h2h_weight, h2h_bias, reverse=d == 1, clip=clip)
                outs.append(ops.stack(seq, axis=0))
            for k, s in enumerate(last):
                finals[k].append(s)
        layer_in = outs[0] if dirs == 1 else ops.concat(outs, axis=2)
    if pairs:
        return layer_in, [ops.concat(f, axis=0) for f in finals]
    return layer_in, [ops.stack(f, axis=0) for f in finals]


def as_state_list(states: Any) -> list[Tensor]:
    """``states`` as a list (MXNet accepts one array for single-state cells)."""
    if isinstance(states, Tensor):
        return [states]
    return list(states)
