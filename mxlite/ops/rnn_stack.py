"""Recurrent layers as one autograd op with their independent work overlapped on the host's threads.

:func:`stack_recurrence` runs a stack of unidirectional layers, :func:`bidirectional_recurrence` the
two directions of one bidirectional layer (each direction's work a task of its own; below, the stack).

Purpose: a recurrent layer's time loop is a chain of small steps (one ``N x H`` by ``H x G*H`` GEMM and
one cell kernel each, about 0.4 ms at N=32, H=256): too small to split over threads with profit, and
each waits for the one before. The layers of a stack, though, form a wavefront: layer ``l`` can run
time step ``t`` as soon as layer ``l-1`` has, so two layers run side by side, one a few steps behind
the other. :func:`stack_recurrence` cuts the sequence into chunks of time steps and hands
:func:`mxlite.device.parallel.run_graph` these tasks (``l``: layer, ``k``: chunk):

- forward: run layer ``l`` over chunk ``k`` (after its chunk ``k-1`` and its projection of chunk ``k``);
  project layer ``l``'s input over chunk ``k`` (one GEMM, after layer ``l-1`` ran chunk ``k``; layer 0's
  at once: its input is there).
- backward, chunks in reverse: run layer ``l`` back over chunk ``k`` (after its chunk ``k+1`` and after
  layer ``l+1``'s input gradient of chunk ``k``, which is layer ``l``'s output gradient); layer ``l``'s
  input gradient over chunk ``k`` (one GEMM); once a layer's chunks are done, its weight and bias
  gradients (whole-sequence GEMMs), which overlap with the layers below still in their loops.

Every task writes only its own outputs, and the chunks depend on the sequence length alone, so the
results are the same bits on any number of threads (on one, the tasks run in order). They equal
those of :func:`mxlite.ops.rnn_ops.recurrence` called layer by layer up to rounding: the input
projections and input gradients here are GEMMs over a chunk's rows instead of the whole sequence's,
and OpenBLAS may round a row of a small product differently from the same row inside a larger one
(seen in the last bits at a few rows per chunk; at 32 rows and more the bits agreed in the cases tried).

Dropout between the layers: the masks are drawn before the tasks, layer by layer, as
``nn_ops.dropout`` would draw them between the layers run one by one; a projection task applies its
chunk of the mask to its chunk of the input, an input-gradient task to its chunk of the gradient.

Where it runs: ``mxlite.gluon.rnn._steps.rnn_sequence`` calls :func:`stack_recurrence` for stacks of
two or more unidirectional layers and :func:`bidirectional_recurrence` for each bidirectional layer, on
CPU devices; on a GPU the tasks would run one after another on the calling thread (the layer-by-layer
path is used there instead).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..autograd import is_recording
from ..autograd.tensor import Tensor
from ..device import parallel
from .core import _op
from .nn_ops import _dropout_mask
from .rnn_ops import GATES, NUM_STATES, _check, _Layer, _lengths, _one_node, _step_gemms

__all__ = ["bidirectional_recurrence", "stack_recurrence"]

_CHUNKS = 8  # the sequence is cut into at most this many chunks of equal length (the last may be shorter)


class _Like:
    """The shape and dtype of an array not yet made (the input of a layer above the first), for ``_check``."""

    def __init__(self, shape: tuple[int, ...], dtype: Any) -> None:
        self.shape, self.dtype, self.ndim = shape, dtype, len(shape)


def stack_recurrence(mode: str, x: Tensor, states: Sequence[Tensor], weights: Sequence[Sequence[Tensor | None]],
                     clip: tuple[float | None, float | None] | None = None, valid_length: Any = None,
                     dropout: float = 0.0) -> tuple[Tensor, list[Tensor]]:
    """Layers ``0 .. L-1`` of a unidirectional recurrence over a whole sequence, as one autograd node.

    The same computation as :func:`mxlite.ops.rnn_ops.recurrence` applied layer by layer, each
    layer's outputs (after dropout, when ``dropout`` > 0) the next one's input: MXNet's fused ``RNN`` op
    without a second direction.

    Args:
        mode: 'rnn_relu', 'rnn_tanh', 'lstm' or 'gru'.
        x: the input sequence ``(T, N, C)``, time-major.
        states: begin states ``[h]``, or ``[h, c]`` for LSTM, each ``(L, N, H)`` (entry ``l``: layer ``l``).
        weights: per layer, ``(i2h_weight, h2h_weight, i2h_bias or None, h2h_bias or None)``; layer 0's
            i2h_weight is ``(G*H, C)``, the others' ``(G*H, H)``.
        clip: LSTM only: cell-state bounds ``(min, max)`` (a None side is open), or None.
        valid_length: optional per-sample lengths ``(N,)``, as for ``recurrence``.
        dropout: drop probability in ``[0, 1]`` for the input of every layer but the first (inverted
            dropout, the masks drawn as :func:`mxlite.ops.nn_ops.dropout` draws them, layer by
            layer); 0 for none. Applied whenever given: the caller decides whether it is training.

    Returns:
        ``(outputs, final_states)``: the last layer's outputs ``(T, N, H)`` and the final ``[h]`` or
        ``[h, c]`` of every layer, each ``(L, N, H)``.

    Raises:
        ValueError: an unknown mode, no layers, shapes or dtypes that disagree (the message names the
            layer and the tensor), clip for a mode other than LSTM, lengths outside ``[0, T]``, or
            dropout outside ``[0, 1]``.
        TypeError: a dtype other than float16, float32 or float64.
    """
    weights = [tuple(w) for w in weights]
    if not weights:
        raise ValueError("stack_recurrence: weights must list at least one layer")
    if any(len(w) != 4 for w in weights):
        raise ValueError("stack_recurrence: each layer's weights must be (i2h_weight, h2h_weight, i2h_bias, h2h_bias)")
    if not 0.0 <= dropout <= 1.0:
        raise ValueError(f"stack_recurrence: dropout must lie in [0, 1], got {dropout}")
    return _stack(mode, x, list(states), weights, clip, valid_length, float(dropout))


def _check_states(name: str, mode: str, states: list[Tensor], rows: int, meaning: str) -> None:
    """The mode, and ``states``: one ``(rows, N, H)`` tensor per state of ``mode`` (``meaning``: what a row is)."""
    if mode not in GATES:
        raise ValueError(f"{name}: mode must be one of {sorted(GATES)}, got {mode!r}")
    if len(states) != NUM_STATES[mode]:
        raise ValueError(f"{mode} takes {NUM_STATES[mode]} begin state(s), got {len(states)}")
    for k, s in enumerate(states):
        if s.ndim != 3 or s.shape[0] != rows:
            raise ValueError(f"states[{k}] has shape {s.shape}, expected ({rows}, N, H): {meaning}")


def _check_stack(mode: str, x: Tensor, states: list[Tensor], weights: list[tuple[Tensor | None, ...]]) -> None:
    _check_states("stack_recurrence", mode, states, len(weights), "one row per layer")
    layer_in: Any = x
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

    def add(self, key: tuple[Any, ...], call: Callable[[], None], *needs: tuple[Any, ...] | None) -> None:
        """Task ``key`` runs ``call`` after the tasks ``needs``, each added before (None: no such need here).

        Raises:
            KeyError: a need that names no task added so far (a wrong key would otherwise be a race).
        """
        after = []
        for need in needs:
            if need is not None:
                if need not in self.index:
                    raise KeyError(f"task {key} waits for {need}, which is not a task (yet)")
                after.append(self.index[need])
        self.index[key] = len(self.calls)
        self.calls.append(call)
        self.after.append(after)

    def run(self, device: Any) -> None:
        if device.is_gpu:  # one stream: in order on this thread (each task comes after those it waits for)
            for call in self.calls:
                call()
            return
        parallel.run_graph(self.calls, self.after)


@_op("stack_recurrence")
def _stack(mode: str, x: Tensor, states: list[Tensor], weights: list[tuple[Tensor | None, ...]],
           clip: tuple[float | None, float | None] | None, valid_length: Any,
           dropout: float) -> tuple[Tensor, list[Tensor]]:
    _check_stack(mode, x, states, weights)
    if clip is not None and mode != "lstm":
        raise ValueError(f"clip bounds the LSTM cell state; {mode} has none, got clip={clip}")
    device, xp = x.device, x.device.xp
    length, batch = x.shape[0], x.shape[1]
    lengths = None if valid_length is None else _lengths(device, valid_length, length, batch)
    parents = (x, *states, *(t for w in weights for t in w if t is not None))
    record = is_recording() and any(p._requires_grad() for p in parents)
    layers: list[_Layer] = []
    # Per layer: with dropout, above the first, the mask its input is made with (outputs of the layer below * mask,
    # in a buffer of its own); None where the input is the array below as it is.
    masks: list[Any] = []
    layer_in = x._data
    with device.use():
        for i, w in enumerate(weights):
            masks.append(_dropout_mask(device, layer_in.shape, dropout, x.dtype) if i and dropout > 0 else None)
            if masks[i] is not None:
                layer_in = xp.empty(layer_in.shape, dtype=x.dtype)
            layer = _Layer(mode, layer_in, device, [s._data[i] for s in states], w, lengths, False, clip)
            layer.begin(save=record)
            layers.append(layer)
            layer_in = layer.output_buffer()
        chunks = _chunks(length)
        tasks = _Tasks()
        for k, (t0, t1) in enumerate(chunks):
            for i, layer in enumerate(layers):
                below = layers[i - 1].output_buffer() if i else None
                tasks.add(("project", i, k), _project(layer, t0, t1, below, masks[i]), ("run", i - 1, k) if i else None)
                tasks.add(("run", i, k), _call(layer.run, t0, t1), ("run", i, k - 1) if k else None,
                          ("project", i, k))
        with _step_gemms(xp):
            tasks.run(device)
        results = [layer.results() for layer in layers]
        outputs = results[-1][0]
        finals = [xp.stack([finals[k] for _, finals in results]) for k in range(len(states))]
    if not record:
        return Tensor(outputs, device), [Tensor(f, device) for f in finals]

    def backward(grads: dict[str, Any]) -> list[Any]:
        return _backward(layers, masks, grads, x, states, device)

    return _one_node("stack_recurrence", device, x.dtype, parents, backward, outputs, finals)


def _call(method: Callable[[int, int], None], t0: int, t1: int) -> Callable[[], None]:
    return lambda: method(t0, t1)


def _project(layer: _Layer, t0: int, t1: int, below: Any, mask: Any) -> Callable[[], None]:
    """Layer ``layer``'s input projection over ``t0 .. t1-1``; with a mask, its input there first: ``below`` (the
    outputs of the layer below) times the mask (dropout)."""
    def run() -> None:
        if mask is not None:
            layer.xp.multiply(below[t0:t1], mask[t0:t1], out=layer.x[t0:t1])
        layer.project(t0, t1)
    return run


def _backward(layers: list[_Layer], masks: list[Any], grads: dict[str, Any], x: Tensor, states: list[Tensor],
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
        params: list[dict[int, Any]] = [{} for _ in layers]  # per layer: part -> gradients
        for k in range(len(chunks) - 1, -1, -1):
            t0, t1 = chunks[k]
            for i in range(top, -1, -1):
                layer = layers[i]
                tasks.add(("back", i, k), _call(layer.run_back, t0, t1),
                          ("back", i, k + 1) if k + 1 < len(chunks) else None, ("input", i + 1, k) if i < top else None)
                target = d_inputs[i - 1] if i else dx
                if target is not None:
                    tasks.add(("input", i, k), _input_grad(layer, t0, t1, target, masks[i]), ("back", i, k))
        for i, layer in enumerate(layers):  # two GEMMs and the bias sums, once the layer's loop is done
            for part in range(3):
                tasks.add(("params", i, part), _param_grads(layer, part, params[i]), ("back", i, 0) if chunks else None)
        with _step_gemms(xp):
            tasks.run(device)
        return _gradients(layers, dx, states, params, xp)


def _gradients(layers: list[_Layer], dx: Any, states: list[Tensor], params: list[dict[int, Any]], xp: Any) -> list[Any]:
    """The node's gradients once its backward tasks ran: ``dx``, each state's (stacked over ``layers``), then every
    layer's weights' and biases' (``params``: per layer, part -> gradients); hands the layers' buffers back."""
    d_states = [layer.state_grads() for layer in layers]
    for layer in layers:
        layer.release_backward()
    out: list[Any] = [dx]
    for k, s in enumerate(states):
        out.append(xp.stack([d[k] for d in d_states]) if s._requires_grad() else None)
    for parts in params:
        out += [parts[0], parts[1], *parts[2]]
    return out


def _input_grad(layer: _Layer, t0: int, t1: int, target: Any, mask: Any) -> Callable[[], None]:
    """The gradient of ``layer``'s input over ``t0 .. t1-1`` into ``target``; through the dropout mask if any."""
    def run() -> None:
        layer.input_grad(t0, t1, target[t0:t1])
        if mask is not None:
            target[t0:t1] *= mask[t0:t1]
    return run


def _param_grads(layer: _Layer, part: int, into: dict[int, Any]) -> Callable[[], None]:
    """Part 0 or 1: the i2h or h2h weight's gradient; 2: the biases' gradients (a list), into ``into[part]``."""
    def run() -> None:
        into[part] = layer.bias_grads() if part == 2 else layer.weight_grad(part)
    return run


# -- the two directions of a bidirectional layer ---------------------------------------------------------------
def bidirectional_recurrence(mode: str, x: Tensor, states: Sequence[Tensor],
                             weights: Sequence[Sequence[Tensor | None]],
                             clip: tuple[float | None, float | None] | None = None,
                             valid_length: Any = None) -> tuple[Tensor, list[Tensor]]:
    """Both directions of one bidirectional recurrent layer as one autograd node, the two side by side.

    The same computation as :func:`mxlite.ops.rnn_ops.recurrence` run forwards and in reverse over
    ``x`` and the outputs concatenated (MXNet's fused ``RNN`` op, one bidirectional layer). The two
    directions are independent, so on CPU devices their work (each one's projection and time loop, and in
    the backward its loop, input gradient and weight gradients) runs as tasks side by side when a second
    thread is free; the results are the bits of the two ``recurrence`` calls, on any thread count (whole-
    sequence GEMMs as there; the input's gradient is the sum of the two directions', the same in either
    order).

    Args:
        mode: 'rnn_relu', 'rnn_tanh', 'lstm' or 'gru'.
        x: the input sequence ``(T, N, C)``, time-major.
        states: begin states ``[h]``, or ``[h, c]`` for LSTM, each ``(2, N, H)`` (0: forwards, 1: reverse).
        weights: ``[forwards, reverse]``, each ``(i2h_weight, h2h_weight, i2h_bias or None, h2h_bias or None)``.
        clip: LSTM only: cell-state bounds ``(min, max)`` (a None side is open), or None.
        valid_length: optional per-sample lengths ``(N,)``, as for ``recurrence``.

    Returns:
        ``(outputs, final_states)``: outputs ``(T, N, 2H)`` (forwards, then reverse, on the last axis) and
        the final ``[h]`` or ``[h, c]``, each ``(2, N, H)``.

    Raises:
        ValueError: an unknown mode, not two directions' weights, shapes or dtypes that disagree (the
            message names the direction and the tensor), clip for a mode other than LSTM, or lengths
            outside ``[0, T]``.
        TypeError: a dtype other than float16, float32 or float64.
    """
    weights = [tuple(w) for w in weights]
    if len(weights) != 2 or any(len(w) != 4 for w in weights):
        raise ValueError("bidirectional_recurrence: weights must be [forwards, reverse], each "
                         "(i2h_weight, h2h_weight, i2h_bias, h2h_bias)")
    return _bidirectional(mode, x, list(states), weights, clip, valid_length)


@_op("bidirectional_recurrence")
def _bidirectional(mode: str, x: Tensor, states: list[Tensor], weights: list[tuple[Tensor | None, ...]],
                   clip: tuple[float | None, float | None] | None, valid_length: Any) -> tuple[Tensor, list[Tensor]]:
    _check_states("bidirectional_recurrence", mode, states, 2, "forwards and reverse")
    for name, w in zip(("forwards", "reverse"), weights):
        try:
            _check(mode, x, [_Like(s.shape[1:], s.dtype) for s in states], w)
        except ValueError as exc:
            raise ValueError(f"{name} direction: {exc}") from None
    if clip is not None and mode != "lstm":
        raise ValueError(f"clip bounds the LSTM cell state; {mode} has none, got clip={clip}")
    device, xp = x.device, x.device.xp
    lengths = None if valid_length is None else _lengths(device, valid_length, x.shape[0], x.shape[1])
    parents = (x, *states, *(t for w in weights for t in w if t is not None))
    record = is_recording() and any(p._requires_grad() for p in parents)
    with device.use():
        layers = [_Layer(mode, x._data, device, [s._data[d] for s in states], weights[d], lengths, d == 1, clip)
                  for d in (0, 1)]
        tasks = _Tasks()
        for d, layer in enumerate(layers):
            layer.begin(save=record)
            tasks.add(("project", d), _call(layer.project, 0, x.shape[0]))
        for d, layer in enumerate(layers):
            tasks.add(("run", d), _call(layer.run, 0, x.shape[0]), ("project", d))
        with _step_gemms(xp):
            tasks.run(device)
        results = [layer.results() for layer in layers]
        outputs = xp.concatenate([results[0][0], results[1][0]], axis=2)
        finals = [xp.stack([results[0][1][k], results[1][1][k]]) for k in range(len(states))]
    if not record:
        return Tensor(outputs, device), [Tensor(f, device) for f in finals]

    def backward(grads: dict[str, Any]) -> list[Any]:
        return _bidirectional_backward(layers, grads, x, states, device)

    return _one_node("bidirectional_recurrence", device, x.dtype, parents, backward, outputs, finals)


def _bidirectional_backward(layers: list[_Layer], grads: dict[str, Any], x: Tensor, states: list[Tensor],
                            device: Any) -> list[Any]:
    """The gradients of (x, states, both directions' weights present) as :func:`_bidirectional`'s node returns."""
    xp = device.xp
    hidden = layers[0].hidden
    d_out, d_h, d_c = grads.get("out"), grads.get("h"), grads.get("c")
    dx: list[Any] = [None, None]
    params: list[dict[int, Any]] = [{}, {}]
    with device.use():
        tasks = _Tasks()
        for d, layer in enumerate(layers):
            half = None if d_out is None else d_out[..., d * hidden:(d + 1) * hidden]
            layer.begin_backward(half, None if d_h is None else d_h[d], None if d_c is None else d_c[d])
            tasks.add(("back", d), _call(layer.run_back, 0, x.shape[0]))
        for d, layer in enumerate(layers):
            if x._requires_grad():
                tasks.add(("input", d), _whole_input_grad(layer, dx, d), ("back", d))
            for part in range(3):
                tasks.add(("params", d, part), _param_grads(layer, part, params[d]), ("back", d))
        with _step_gemms(xp):
            tasks.run(device)
        return _gradients(layers, None if dx[0] is None else dx[0] + dx[1], states, params, xp)


def _whole_input_grad(layer: _Layer, into: list[Any], d: int) -> Callable[[], None]:
    def run() -> None:
        into[d] = layer.input_grad_all()
    return run
