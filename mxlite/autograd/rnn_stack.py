"""A stack of unidirectional recurrent layers as one autograd op, its layers overlapped on the host's threads.

Purpose: a recurrent layer's time loop is a chain of small steps (one ``N x H`` by ``H x G*H`` GEMM and
one cell kernel each, about 0.4 ms at N=32, H=256): too small to split over threads with profit, and
each waits for the one before. The layers of a stack, though, form a wavefront: layer ``l`` can run
time step ``t`` as soon as layer ``l-1`` has, so two layers run side by side, one a few steps behind
the other. :func:`stack_recurrence` cuts the sequence into chunks of time steps and hands
:func:`mxlite.device.parallel.run_graph` these tasks (``l``: layer, ``k``: chunk):

- forward: run layer ``l`` over chunk ``k`` (after its chunk ``k-1`` and its projection of chunk ``k``);
  project layer ``l``'s input over chunk ``k`` (one GEMM, after layer ``l-1`` ran chunk ``k``). Layer 0's
  projection of the whole sequence is one GEMM before them.
- backward, chunks in reverse: run layer ``l`` back over chunk ``k`` (after its chunk ``k+1`` and after
  layer ``l+1``'s input gradient of chunk ``k``, which is layer ``l``'s output gradient); layer ``l``'s
  input gradient over chunk ``k`` (one GEMM); once a layer's chunks are done, its weight and bias
  gradients (whole-sequence GEMMs), which overlap with the layers below still in their loops.

Every task writes only its own outputs, and the chunks depend on the sequence length alone, so the
results are the same on any number of threads (on one, the tasks run in order). They equal those
of :func:`mxlite.autograd.rnn_ops.recurrence` called layer by layer up to the rounding of the
input projection GEMMs, which here run a chunk at a time.

Where it runs: ``mxlite.gluon.rnn._steps.rnn_sequence`` calls it for stacks of two or more
unidirectional layers on CPU devices without dropout between the layers; on a GPU the tasks would
run one after another on the calling thread (the layer-by-layer path is used there instead).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..device import parallel
from . import _state
from .ops import _op
from .rnn_ops import GATES, NUM_STATES, _check, _Layer, _lengths, _one_node, _step_gemms
from .tensor import Tensor

__all__ = ["stack_recurrence"]

_CHUNKS = 8  # the sequence is cut into at most this many chunks of equal length (the last may be shorter)


class _Like:
    """The shape and dtype of an array not yet made (the input of a layer above the first), for ``_check``."""

    def __init__(self, shape: tuple[int, ...], dtype: Any) -> None:
        self.shape, self.dtype, self.ndim = shape, dtype, len(shape)


def stack_recurrence(mode: str, x: Tensor, states: Sequence[Tensor], weights: Sequence[Sequence[Tensor | None]],
                     clip: tuple[float | None, float | None] | None = None,
                     valid_length: Any = None) -> tuple[Tensor, list[Tensor]]:
    """Layers ``0 .. L-1`` of a unidirectional recurrence over a whole sequence, as one autograd node.

    The same computation as :func:`mxlite.autograd.rnn_ops.recurrence` applied layer by layer, each
    layer's outputs the next one's input (MXNet's fused ``RNN`` op without dropout or a second direction).

    Args:
        mode: 'rnn_relu', 'rnn_tanh', 'lstm' or 'gru'.
        x: the input sequence ``(T, N, C)``, time-major.
        states: begin states ``[h]``, or ``[h, c]`` for LSTM, each ``(L, N, H)`` (entry ``l``: layer ``l``).
        weights: per layer, ``(i2h_weight, h2h_weight, i2h_bias or None, h2h_bias or None)``; layer 0's
            i2h_weight is ``(G*H, C)``, the others' ``(G*H, H)``.
        clip: LSTM only: cell-state bounds ``(min, max)`` (a None side is open), or None.
        valid_length: optional per-sample lengths ``(N,)``, as for ``recurrence``.

    Returns:
        ``(outputs, final_states)``: the last layer's outputs ``(T, N, H)`` and the final ``[h]`` or
        ``[h, c]`` of every layer, each ``(L, N, H)``.

    Raises:
        ValueError: an unknown mode, no layers, shapes or dtypes that disagree (the message names the
            layer and the tensor), clip for a mode other than LSTM, or lengths outside ``[0, T]``.
        TypeError: a dtype other than float16, float32 or float64.
    """
    weights = [tuple(w) for w in weights]
    if not weights:
        raise ValueError("stack_recurrence: weights must list at least one layer")
    if any(len(w) != 4 for w in weights):
        raise ValueError("stack_recurrence: each layer's weights must be (i2h_weight, h2h_weight, i2h_bias, h2h_bias)")
    return _stack(mode, x, list(states), weights, clip, valid_length)


def _check_stack(mode: str, x: Tensor, states: list[Tensor], weights: list[tuple[Tensor | None, ...]]) -> None:
    if mode not in GATES:
        raise ValueError(f"stack_recurrence: mode must be one of {sorted(GATES)}, got {mode!r}")
    if len(states) != NUM_STATES[mode]:
        raise ValueError(f"{mode} takes {NUM_STATES[mode]} begin state(s), got {len(states)}")
    layers = len(weights)
    layer_in: Any = x
    for k, s in enumerate(states):
        if s.ndim != 3 or s.shape[0] != layers:
            raise ValueError(f"states[{k}] has shape {s.shape}, expected ({layers}, N, H): one row per layer")
    for index, w in enumerate(weights):
        try:
            length, batch, _, hidden = _check(mode, layer_in, [_Like(s.shape[1:], s.dtype) for s in states], w)
        except ValueError as exc:
            raise ValueError(f"layer {index}: {exc}") from None
        layer_in = _Like((length, batch, hidden), x.dtype)


def _chunks(length: int) -> list[tuple[int, int]]:
    """``(t0, t1)`` ranges of equal length (the last may be shorter) covering ``0 .. length-1``, by length alone."""
    size = -(-length // min(length, _CHUNKS)) if length else 1
    return [(t0, min(t0 + size, length)) for t0 in range(0, length, size)]


class _Tasks:
    """A task list for :func:`mxlite.device.parallel.run_graph`, each task found again by a key."""

    def __init__(self) -> None:
        self.calls: list[Callable[[], None]] = []
        self.after: list[list[int]] = []
        self.index: dict[tuple[Any, ...], int] = {}

    def add(self, key: tuple[Any, ...], call: Callable[[], None], *needs: tuple[Any, ...]) -> None:
        """Task ``key`` runs ``call`` after the tasks ``needs`` that exist (a missing key needs nothing)."""
        self.index[key] = len(self.calls)
        self.calls.append(call)
        self.after.append([self.index[n] for n in needs if n in self.index])

    def run(self, device: Any) -> None:
        if device.is_gpu:  # one stream: in order on this thread (each task comes after those it waits for)
            for call in self.calls:
                call()
            return
        parallel.run_graph(self.calls, self.after)


@_op("stack_recurrence")
def _stack(mode: str, x: Tensor, states: list[Tensor], weights: list[tuple[Tensor | None, ...]],
           clip: tuple[float | None, float | None] | None, valid_length: Any) -> tuple[Tensor, list[Tensor]]:
    _check_stack(mode, x, states, weights)
    if clip is not None and mode != "lstm":
        raise ValueError(f"clip bounds the LSTM cell state; {mode} has none, got clip={clip}")
    device, xp = x.device, x.device.xp
    length, batch = x.shape[0], x.shape[1]
    lengths = None if valid_length is None else _lengths(device, valid_length, length, batch)
    parents = (x, *states, *(t for w in weights for t in w if t is not None))
    record = _state.is_recording() and any(p._requires_grad() for p in parents)
    layers: list[_Layer] = []
    layer_in = x._data
    with device.use():
        for i, w in enumerate(weights):
            layer = _Layer(mode, layer_in, device, [s._data[i] for s in states], w, lengths, False, clip)
            layer.begin(save=record)
            layers.append(layer)
            layer_in = layer.output_buffer()
        chunks = _chunks(length)
        tasks = _Tasks()
        for k, (t0, t1) in enumerate(chunks):
            for i, layer in enumerate(layers):
                if i:
                    tasks.add(("project", i, k), _call(layer.project, t0, t1), ("run", i - 1, k))
                tasks.add(("run", i, k), _call(layer.run, t0, t1), ("run", i, k - 1), ("project", i, k))
        layers[0].project(0, length)  # one GEMM, over every thread
        with _step_gemms(xp):
            tasks.run(device)
        results = [layer.results() for layer in layers]
        outputs = results[-1][0]
        finals = [xp.stack([finals[k] for _, finals in results]) for k in range(len(states))]
    if not record:
        return Tensor(outputs, device), [Tensor(f, device) for f in finals]

    def backward(grads: dict[str, Any]) -> list[Any]:
        return _backward(layers, grads, x, states, device)

    return _one_node("stack_recurrence", device, x.dtype, parents, backward, outputs, finals)


def _call(method: Callable[[int, int], None], t0: int, t1: int) -> Callable[[], None]:
    return lambda: method(t0, t1)


def _backward(layers: list[_Layer], grads: dict[str, Any], x: Tensor, states: list[Tensor],
              device: Any) -> list[Any]:
    """The gradients of (x, states, every layer's weights present) as :func:`_stack`'s node returns them."""
    xp = device.xp
    top = len(layers) - 1
    d_h, d_c = grads.get("h"), grads.get("c")
    with device.use():
        d_inputs = [xp.empty(layer.x.shape, dtype=layer.dtype) for layer in layers[1:]]  # [i]: layer i's d(outputs)
        dx = xp.empty(x.shape, dtype=layers[0].dtype) if x._requires_grad() else None
        for i, layer in enumerate(layers):
            d_out = grads.get("out") if i == top else d_inputs[i]
            layer.begin_backward(d_out, None if d_h is None else d_h[i], None if d_c is None else d_c[i])
        chunks = _chunks(x.shape[0])
        tasks = _Tasks()
        params: list[list[Any]] = [[] for _ in layers]
        for k in range(len(chunks) - 1, -1, -1):
            t0, t1 = chunks[k]
            for i in range(top, -1, -1):
                layer = layers[i]
                tasks.add(("back", i, k), _call(layer.run_back, t0, t1), ("back", i, k + 1), ("input", i + 1, k))
                target = d_inputs[i - 1] if i else dx
                if target is not None:
                    tasks.add(("input", i, k), _input_grad(layer, t0, t1, target), ("back", i, k))
        for i, layer in enumerate(layers):
            tasks.add(("params", i), _param_grads(layer, params[i]), ("back", i, 0))
        with _step_gemms(xp):
            tasks.run(device)
        d_states = [layer.state_grads() for layer in layers]
        for layer in layers:
            layer.release_backward()
        out: list[Any] = [dx]
        for k, s in enumerate(states):
            out.append(xp.stack([d[k] for d in d_states]) if s._requires_grad() else None)
        for i in range(len(layers)):
            out += params[i]
    return out


def _input_grad(layer: _Layer, t0: int, t1: int, target: Any) -> Callable[[], None]:
    return lambda: layer.input_grad(t0, t1, target[t0:t1])


def _param_grads(layer: _Layer, into: list[Any]) -> Callable[[], None]:
    return lambda: into.extend(layer.param_grads())
