"""Recurrent layers over whole sequences (Gluon's ``gluon.rnn.RNN``, ``LSTM``, ``GRU``).

``layer(inputs)`` returns the output sequence; ``layer(inputs, states)`` returns
``(output, new_states)``. Inputs are ``(T, N, C)`` with ``layout='TNC'`` (the default) or
``(N, T, C)`` with ``'NTC'``; states are always ``(num_layers * D, N, H)`` (``D`` = 2 when
bidirectional). Parameters are named as MXNet 1.x's: ``l0_i2h_weight``, ``l0_h2h_weight``,
``l0_i2h_bias``, ``l0_h2h_bias`` for layer 0's forward direction, ``r0_...`` for its backward
direction, with the gates stacked in MXNet's order (LSTM ``i, f, c, o``; GRU ``r, z, n``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ... import autograd, ops
from ...arrays import nd as _nd
from ...autograd.tensor import Tensor
from ..block import Block
from ..nn.basic_layers import _int_arg, _ready, _real_arg
from ..parameter import Parameter
from . import _steps
from .rnn_cell import _make_states

__all__ = ["RNN", "LSTM", "GRU", "FusedRNNParam", "fused_layout", "split_fused"]


def fused_layout(mode: str, num_layers: int, input_size: int, hidden_size: int, bidirectional: bool
                 ) -> list[tuple[str, tuple[int, ...]]]:
    """The weights of a recurrent layer in MXNet 2.x's fused ``rnn_param`` order: ``(name, shape)`` each.

    The packing (MXNet 2.x ``gluon/rnn/rnn_layer.py`` and its ``RNNFused`` initializer, the layout of the fused
    RNN operator, ``src/operator/rnn-inl.h``): every weight first, then every bias; within each, layer by layer,
    direction by direction (l, then r), i2h then h2h; each matrix row-major, ``(gates * hidden, inputs)``.
    """
    g, d = _steps.GATES[mode] * hidden_size, 2 if bidirectional else 1
    out = []
    for part in ("weight", "bias"):
        for layer in range(num_layers):
            for direction in ("l", "r")[:d]:
                for kind in ("i2h", "h2h"):
                    inputs = hidden_size if kind == "h2h" else (input_size if layer == 0 else d * hidden_size)
                    out.append((f"{direction}{layer}_{kind}_{part}", (g, inputs) if part == "weight" else (g,)))
    return out


def split_fused(flat: Any, layout: list[tuple[str, tuple[int, ...]]]) -> dict[str, Any]:
    """``flat`` (a 1-D NumPy array or Tensor) cut into the named pieces of ``layout``, each reshaped (views)."""
    out, pos = {}, 0
    for name, shape in layout:
        size = int(np.prod(shape))
        out[name] = flat[pos:pos + size].reshape(shape)
        pos += size
    return out


class _RNNLayer(Block):
    """The shared implementation: a stack of ``num_layers`` recurrences, each one or two directions."""

    def __init__(self, hidden_size: int, num_layers: int, layout: str, dropout: float, bidirectional: bool,
                 input_size: int, i2h_weight_initializer: Any, h2h_weight_initializer: Any,
                 i2h_bias_initializer: Any, h2h_bias_initializer: Any, mode: str, dtype: Any,
                 use_sequence_length: bool = False, clip: tuple[float | None, float | None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        name = type(self).__name__
        if layout not in ("TNC", "NTC"):
            raise ValueError(f"{name}: layout must be 'TNC' or 'NTC', got {layout!r}")
        self._hidden_size = _int_arg(name, "hidden_size", hidden_size)
        self._num_layers = _int_arg(name, "num_layers", num_layers)
        self._input_size = _int_arg(name, "input_size", input_size, low=0)
        self._dropout = _real_arg(name, "dropout", dropout, low=0, high=1)
        self._layout, self._bidirectional, self._mode, self._clip = layout, bool(bidirectional), mode, clip
        self._use_sequence_length = bool(use_sequence_length)
        self._dir = 2 if bidirectional else 1
        gates = _steps.GATES[mode] * self._hidden_size
        self._names: list[tuple[str, str, str, str]] = []
        for layer in range(self._num_layers):
            in_size = self._input_size if layer == 0 else self._dir * self._hidden_size
            for prefix in ("l", "r")[:self._dir]:
                names = tuple(f"{prefix}{layer}_{kind}" for kind in ("i2h_weight", "h2h_weight", "i2h_bias",
                                                                      "h2h_bias"))
                shapes = ((gates, in_size), (gates, self._hidden_size), (gates,), (gates,))
                inits = (i2h_weight_initializer, h2h_weight_initializer, i2h_bias_initializer, h2h_bias_initializer)
                for pname, shape, init in zip(names, shapes, inits):
                    setattr(self, pname, Parameter(pname, shape=shape, init=init, dtype=dtype,
                                                   allow_deferred_init=True))
                self._names.append(names)  # type: ignore[arg-type]

    def infer_shape(self, inputs: Tensor, *args: Any) -> None:
        """Set the input size from ``inputs`` (MXNet 2.x's shape inference; ``args``, the states, are not needed).

        Raises:
            ValueError: ``inputs`` is not 3-D, or its feature count differs from an input size already set.
        """
        if inputs.ndim != 3:
            raise ValueError(f"{type(self).__name__}: inputs must be 3-D ({self._layout}), got shape {inputs.shape}")
        for names in self._names[:self._dir]:
            getattr(self, names[0]).shape = (_steps.GATES[self._mode] * self._hidden_size, inputs.shape[2])

    @property
    def rnn_param(self) -> FusedRNNParam:
        """MXNet 2.x's single fused parameter of the layer, as a view that packs and unpacks this layer's per-gate
        parameters (``l0_i2h_weight``, ...), which stay the layer's real parameters (see :class:`FusedRNNParam`)."""
        return FusedRNNParam(self)

    def _param_aliases(self) -> dict[str, Any]:
        """Names ``collect_params()`` resolves without listing them: MXNet 2.x's ``rnn_param``."""
        return {"rnn_param": self.rnn_param}

    def state_info(self, batch_size: int = 0) -> list[dict[str, Any]]:
        """Shape and layout of each state: ``(num_layers * D, batch_size, H)``, layout 'LNC'."""
        shape = (self._num_layers * self._dir, batch_size, self._hidden_size)
        return [{"shape": shape, "__layout__": "LNC"} for _ in range(_steps.NUM_STATES[self._mode])]

    def begin_state(self, batch_size: int = 0, func: Callable[..., Tensor] | None = None, **kwargs: Any
                    ) -> list[Tensor]:
        """Initial states, ``func(shape=..., **kwargs)`` each (default ``mx.nd.zeros``; ``ctx=``, ``dtype=``)."""
        return _make_states(self.state_info(batch_size), func, kwargs)

    def forward(self, inputs: Tensor, states: Any = None, sequence_length: Any = None) -> Any:
        """The output sequence (and the final states when ``states`` is given); see the class docstring.

        ``sequence_length`` (``(N,)`` whole numbers in ``[0, T]``, any real dtype; required exactly when
        the layer was built with ``use_sequence_length=True``): sample ``b`` runs its first
        ``sequence_length[b]`` steps (the backward direction from its last valid step back to step 0);
        its outputs past them are 0 and its final states are those after its last valid step.

        Raises:
            ValueError: inputs, states or ``sequence_length`` of the wrong shape or values, or
                ``sequence_length`` missing with ``use_sequence_length=True`` or given without it.
        """
        name = type(self).__name__
        if isinstance(inputs, np.ndarray):
            inputs = _nd.array(inputs)
        if self._use_sequence_length and sequence_length is None:
            raise ValueError(f"{name} was built with use_sequence_length=True: call it as layer(inputs, states, "
                             "sequence_length) with one length per sample")
        if sequence_length is not None and not self._use_sequence_length:
            raise ValueError(f"{name}: sequence_length given, but the layer was built with use_sequence_length=False "
                             "(MXNet ignores it there); build it with use_sequence_length=True")
        if inputs.ndim != 3:
            raise ValueError(f"{name}: inputs must be 3-D ({self._layout}), got shape {inputs.shape}")
        x = ops.swapaxes(inputs, 0, 1) if self._layout == "NTC" else inputs
        batch = x.shape[1]
        skip_states = states is None
        if skip_states:
            states = self.begin_state(batch, device=x.device, dtype=x.dtype)
        states = _steps.as_state_list(states)
        expected = self.state_info(batch)
        if len(states) != len(expected):
            raise ValueError(f"{name} takes {len(expected)} state array(s), got {len(states)}")
        for s, info in zip(states, expected):
            if tuple(s.shape) != info["shape"]:
                raise ValueError(f"{name}: a state has shape {s.shape}, expected {info['shape']} "
                                 "(num_layers * directions, batch, hidden_size)")
        first = getattr(self, self._names[0][0])
        if not first.is_initialized:
            for names in self._names[:self._dir]:
                getattr(self, names[0]).shape = (_steps.GATES[self._mode] * self._hidden_size, x.shape[2])
        elif first.shape[1] != x.shape[2]:
            raise ValueError(f"{name}: Parameter '{first.label}' expects {first.shape[1]} input features, "
                             f"but the inputs have {x.shape[2]} (shape {inputs.shape}, layout {self._layout})")
        weights = [tuple(_ready(getattr(self, n), x) for n in names) for names in self._names]
        out, new_states = _steps.rnn_sequence(self._mode, x, states, weights, self._num_layers, self._bidirectional,
                                              self._dropout, autograd.is_training(), self._clip,
                                              valid_length=sequence_length)
        if self._layout == "NTC":
            out = ops.swapaxes(out, 0, 1)
        return out if skip_states else (out, new_states)

    # -- MXNet's other layouts of the same weights, for load_parameters / save_parameters(format="mxnet") --
    # MXNet 1.x's save_parameters names a layer's weights as its unfused cells: '_unfused.{layer}.i2h_weight'
    # (one direction) or '_unfused.{layer}.{l|r}_cell.i2h_weight' (bidirectional); MXNet 2.x keeps them all in
    # one flat 'rnn_param' vector (below). mxlite's own names are 1.x's attributes, 'l0_i2h_weight'.
    _UNFUSED = re.compile(r"_unfused\.(\d+)\.(?:([lr])_cell\.)?((?:i2h|h2h)_(?:weight|bias))\Z")

    def _from_mxnet_layout(self, prefix: str, loaded: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``loaded`` with this layer's weights (under ``prefix``) renamed from MXNet 1.x's ``_unfused`` names
        and unpacked from MXNet 2.x's ``rnn_param`` to this layer's names; other entries unchanged.

        Raises:
            ValueError: a weight held twice, under two of these names (e.g. ``_unfused.0.i2h_weight`` and
                ``rnn_param``): the file is ambiguous; the message names the weight and both names.
        """
        mine = {n for names in self._names for n in names}
        out: dict[str, np.ndarray] = {}
        origin: dict[str, str] = {}  # each entry of out: the name it was read under
        twice: list[tuple[str, str, str]] = []
        for key, value in loaded.items():
            for name, piece in self._renamed(prefix, key, value, mine):
                if name in out:
                    twice.append((name, origin[name], key))
                out[name], origin[name] = piece, key
        if twice:
            raise ValueError(self._ambiguous_message(prefix, twice))
        return out

    def _renamed(self, prefix: str, key: str, value: np.ndarray, mine: set[str]) -> list[tuple[str, np.ndarray]]:
        """The (name, value) entries one loaded entry becomes: this layer's names for its MXNet names, else
        itself."""
        match = self._UNFUSED.match(key[len(prefix):]) if key.startswith(prefix) else None
        if match is not None:
            layer, direction, kind = match.groups()
            if direction is None and self._dir == 2:
                direction = "?"  # a one-direction file for a bidirectional layer: left for the load to report
            name = f"{direction or 'l'}{layer}_{kind}"
            if name in mine:
                return [(prefix + name, value)]
        elif key == prefix + "rnn_param":
            return [(prefix + n, v) for n, v in self._unpack_fused(value).items()]
        return [(key, value)]

    def _ambiguous_message(self, prefix: str, twice: list[tuple[str, str, str]]) -> str:
        """The error for weights found under two names each: (weight, first name, second name) per weight."""
        shown = "; ".join(f"{name!r} as {first!r} and as {second!r}" for name, first, second in twice[:4])
        more = f"; and {len(twice) - 4} more" if len(twice) > 4 else ""
        where = f" {prefix[:-1]!r}" if prefix else ""
        return (f"{type(self).__name__}{where}: the file holds {len(twice)} weight(s) twice, under two names, so it "
                f"is ambiguous which copy to load: {shown}{more}. Keep one of the names (mxlite's own "
                "'l0_i2h_weight', MXNet 1.x's '_unfused.0.i2h_weight' or MXNet 2.x's 'rnn_param') in the file")

    def _to_mxnet_layout(self, prefix: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``arrays`` with this layer's weights renamed to MXNet 1.x's ``save_parameters`` names (``_unfused``)."""
        out: dict[str, np.ndarray] = {}
        for key, value in arrays.items():
            name = key[len(prefix):] if key.startswith(prefix) else ""
            match = re.fullmatch(r"([lr])(\d+)_((?:i2h|h2h)_(?:weight|bias))", name)
            if match is None:
                out[key] = value
                continue
            direction, layer, kind = match.groups()
            cell = f"{direction}_cell." if self._dir == 2 else ""
            out[f"{prefix}_unfused.{layer}.{cell}{kind}"] = value
        return out

    def _unpack_fused(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """MXNet 2.x's ``rnn_param`` split into this layer's weights, in :func:`fused_layout`'s packing. The input
        size is what the total length leaves for layer 0.

        Raises:
            ValueError: ``flat`` is not 1-D, or its length fits no input size of this layer's configuration.
        """
        name = type(self).__name__
        g, h, d, layers = _steps.GATES[self._mode] * self._hidden_size, self._hidden_size, self._dir, self._num_layers
        rest = (layers - 1) * d * g * (d * h + h + 2)  # layers 1.. : i2h (d*h inputs), h2h, two biases
        first, remainder = divmod(flat.size - rest, d * g) if flat.ndim == 1 else (0, 1)
        in_size = first - h - 2
        if flat.ndim != 1 or remainder or in_size < 1 or (self._input_size and in_size != self._input_size):
            raise ValueError(f"{name}: an MXNet 'rnn_param' of shape {flat.shape} does not fit this layer "
                             f"(hidden_size={h}, num_layers={layers}, bidirectional={d == 2}"
                             + (f", input_size={self._input_size}" if self._input_size else "") + ")")
        return split_fused(flat, fused_layout(self._mode, layers, in_size, h, d == 2))

    def _extra_repr(self) -> str:
        shape = getattr(self, self._names[0][0]).shape
        in_size = shape[1] if shape and shape[1] > 0 else None
        return (f"{in_size} -> {self._hidden_size}, {self._layout}, num_layers={self._num_layers}"
                + (", bidirectional" if self._bidirectional else "")
                + (f", dropout={self._dropout}" if self._dropout else ""))


class FusedRNNParam:
    """MXNet 2.x's fused ``rnn_param`` of a recurrent layer: one flat vector packing every weight and bias, as a
    view of mxlite's per-gate parameters (MXNet 1.x's layout, which the layer keeps: the Trainer, ``save_parameters``
    and ``collect_params().items()`` see those; ``layer.rnn_param`` and ``collect_params()['rnn_param']`` give this).

    Purpose: code written for MXNet 2.x's layout (``params['rnn_param'].set_data(flat)``, ``.shape``,
    ``.data().grad`` split with :func:`~mxlite.gluon.utils.split_rnn_params`) runs unchanged.

    Behaviour: :meth:`set_data` writes through to the per-gate parameters (and, on a layer whose input size is
    still unknown, sets it from the vector's length); :meth:`data` and :meth:`grad` return new flat arrays
    packed from the parameters' current values (a copy: writing into them changes nothing). The packing is
    :func:`fused_layout`'s.
    """

    name = "rnn_param"

    def __init__(self, layer: _RNNLayer) -> None:
        self._layer = layer

    def _params(self) -> list[Parameter]:
        layer = self._layer
        return [getattr(layer, n) for n, _ in fused_layout(layer._mode, layer._num_layers, 1, layer._hidden_size,
                                                            layer._bidirectional)]

    @property
    def shape(self) -> tuple[int]:
        """``(total length,)``; ``(-1,)`` while the input size is unknown."""
        params = self._params()
        if not all(p._shape_known() for p in params):
            return (-1,)
        return (sum(int(np.prod(p.shape)) for p in params),)

    @property
    def dtype(self) -> Any:
        """The parameters' dtype."""
        return self._params()[0].dtype

    def list_device(self) -> list[Any]:
        """The devices holding the parameters."""
        return self._params()[0].list_device()

    def _pack(self, arrays: list[Tensor]) -> Tensor:
        return ops.concat([ops.reshape(a, (-1,)) for a in arrays], axis=0)

    def data(self, device: Any = None) -> Tensor:
        """The packed values on ``device`` (a new array), with ``.grad`` the packed gradients when they exist.

        Raises:
            RuntimeError: the parameters are not initialised (or not on ``device``).
        """
        params = self._params()
        with autograd.pause():
            out = self._pack([p.data(device) for p in params])
            if all(p.grad_req != "null" for p in params):
                grad = self._pack([p.grad(device) for p in params])
                out.attach_grad()
                out.grad[...] = grad
        return out

    def grad(self, device: Any = None) -> Tensor:
        """The packed gradients on ``device`` (a new array)."""
        with autograd.pause():
            return self._pack([p.grad(device) for p in self._params()])

    def set_data(self, data: Any) -> None:
        """Write a packed vector into the per-gate parameters (every device).

        Raises:
            ValueError: ``data`` is not 1-D, or its length fits no input size of the layer.
        """
        flat = data.asnumpy() if isinstance(data, Tensor) else np.asarray(data)
        for name, value in self._layer._unpack_fused(flat).items():
            getattr(self._layer, name).set_data(value)

    def __repr__(self) -> str:
        return (f"Parameter rnn_param (shape={self.shape}, dtype={self.dtype}; a view of "
                f"{type(self._layer).__name__}'s per-gate parameters)")


class RNN(_RNNLayer):
    """Multi-layer Elman RNN: ``h_t = activation(W_i x_t + b_i + W_h h_{t-1} + b_h)`` (MXNet Gluon's ``rnn.RNN``).

    Args:
        hidden_size: units of the hidden state.
        num_layers: stacked layers (default 1).
        activation: 'relu' (default, as MXNet) or 'tanh'.
        layout: 'TNC' (default) or 'NTC'.
        dropout: drop probability on each layer's input but the first, in training.
        bidirectional: run a backward direction too and concatenate both outputs.
        i2h_weight_initializer, h2h_weight_initializer, i2h_bias_initializer, h2h_bias_initializer:
            initializers (weights default to the global one, biases to zeros).
        input_size: input features; 0 infers them from the first batch.
        dtype: parameter dtype.
        use_sequence_length: the layer takes per-sample lengths, ``layer(inputs, states,
            sequence_length)`` (MXNet's; see :meth:`forward`).

    Inputs: ``inputs`` (see ``layout``) and optional ``states`` (list of one
    ``(num_layers * D, N, H)`` array). Outputs: ``(T, N, D * H)`` (in ``layout``), and the new
    states when ``states`` was given.

    Each layer and direction runs as one fused op (:func:`mxlite.ops.rnn_ops.recurrence`: the
    cell kernels of ``kernels/rnn.cu`` and one GEMM per step).

    Raises:
        ValueError / TypeError: bad arguments (at construction); inputs or states of the wrong shape.
    """

    def __init__(self, hidden_size: int, num_layers: int = 1, activation: str = "relu", layout: str = "TNC",
                 dropout: float = 0, bidirectional: bool = False, i2h_weight_initializer: Any = None,
                 h2h_weight_initializer: Any = None, i2h_bias_initializer: Any = "zeros",
                 h2h_bias_initializer: Any = "zeros", input_size: int = 0, dtype: Any = np.float32,
                 use_sequence_length: bool = False, prefix: str | None = None, params: Any = None) -> None:
        if activation not in ("relu", "tanh"):
            raise ValueError(f"RNN: activation must be 'relu' or 'tanh', got {activation!r}")
        super().__init__(hidden_size, num_layers, layout, dropout, bidirectional, input_size, i2h_weight_initializer,
                         h2h_weight_initializer, i2h_bias_initializer, h2h_bias_initializer, "rnn_" + activation,
                         dtype, use_sequence_length, prefix=prefix, params=params)


class LSTM(_RNNLayer):
    """Multi-layer LSTM (MXNet Gluon's ``rnn.LSTM``; gates ``i, f, c, o``); states ``[h, c]``.

    Args: as :class:`RNN` (no ``activation``), plus ``state_clip_min``/``state_clip_max``
    (bound the cell state, MXNet's ``state_clip_*``). ``projection_size`` (LSTMP) is not supported.

    Raises:
        NotImplementedError: ``projection_size`` given.
    """

    def __init__(self, hidden_size: int, num_layers: int = 1, layout: str = "TNC", dropout: float = 0,
                 bidirectional: bool = False, input_size: int = 0, i2h_weight_initializer: Any = None,
                 h2h_weight_initializer: Any = None, i2h_bias_initializer: Any = "zeros",
                 h2h_bias_initializer: Any = "zeros", projection_size: int | None = None,
                 h2r_weight_initializer: Any = None, state_clip_min: float | None = None,
                 state_clip_max: float | None = None, state_clip_nan: bool = False, dtype: Any = np.float32,
                 use_sequence_length: bool = False, prefix: str | None = None, params: Any = None) -> None:
        if projection_size is not None:
            raise NotImplementedError("LSTM: projection_size (LSTMP) is not supported by mxlite")
        clip = None if state_clip_min is None and state_clip_max is None else (state_clip_min, state_clip_max)
        super().__init__(hidden_size, num_layers, layout, dropout, bidirectional, input_size, i2h_weight_initializer,
                         h2h_weight_initializer, i2h_bias_initializer, h2h_bias_initializer, "lstm", dtype,
                         use_sequence_length, clip, prefix=prefix, params=params)


class GRU(_RNNLayer):
    """Multi-layer GRU (MXNet Gluon's ``rnn.GRU``; gates ``r, z, n``, ``r`` applied to ``W_hn h + b_hn``).

    Args: as :class:`RNN` (no ``activation``).
    """

    def __init__(self, hidden_size: int, num_layers: int = 1, layout: str = "TNC", dropout: float = 0,
                 bidirectional: bool = False, input_size: int = 0, i2h_weight_initializer: Any = None,
                 h2h_weight_initializer: Any = None, i2h_bias_initializer: Any = "zeros",
                 h2h_bias_initializer: Any = "zeros", dtype: Any = np.float32, use_sequence_length: bool = False,
                 prefix: str | None = None, params: Any = None) -> None:
        super().__init__(hidden_size, num_layers, layout, dropout, bidirectional, input_size, i2h_weight_initializer,
                         h2h_weight_initializer, i2h_bias_initializer, h2h_bias_initializer, "gru", dtype,
                         use_sequence_length, prefix=prefix, params=params)
