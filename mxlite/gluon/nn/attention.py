"""Attention layers: multi-head attention, the position-wise feed-forward block, Transformer encoder and
decoder layers.

Names and defaults follow GluonNLP (``gluonnlp.attention_cell``, ``gluonnlp.layers.PositionwiseFFN``,
``gluonnlp.models.transformer``), the Gluon home of these layers; MXNet 2.x's ``gluon.nn`` has none. Attention
runs as one op, :func:`mxlite.ops.attention.scaled_dot_product_attention` (a fused kernel that never
holds the (batch, heads, Tq, Tk) weights), so the layers return their output alone, not GluonNLP's attention
weights as well.

Masks follow GluonNLP: 1 (True) where query i may attend to key j, (batch, Tq, Tk) or (Tq, Tk), or with an
axis for the heads (batch, heads or 1, Tq, Tk); ``valid_length`` (batch,) masks the keys past each
sequence's length without a mask array.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ... import ops
from ...autograd.tensor import Tensor
from ...ops import activations
from ...ops.attention import scaled_dot_product_attention
from ..block import Block
from .basic_layers import Dense, Dropout, LayerNorm, _int_arg, _real_arg

__all__ = ["MultiHeadAttention", "PositionwiseFFN", "TransformerDecoderLayer", "TransformerEncoderLayer"]

_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": activations.relu,
    "gelu": lambda x: activations.gelu(x, "erf"),
    "gelu(tanh)": lambda x: activations.gelu(x, "tanh"),
    "tanh": ops.tanh,
    "sigmoid": ops.sigmoid,
}
_LAYOUTS = ("NT", "TN")


def _activation(layer: str, name: str) -> Callable[[Tensor], Tensor]:
    """The activation named ``name``.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if name not in _ACTIVATIONS:
        raise ValueError(f"{layer}: unknown activation {name!r}; known: {', '.join(_ACTIVATIONS)}")
    return _ACTIVATIONS[name]


def _layout(layer: str, layout: str) -> str:
    if layout not in _LAYOUTS:
        raise ValueError(f"{layer}: layout must be 'NT' (batch, seq, units) or 'TN' (seq, batch, units), got "
                         f"{layout!r}")
    return layout


def _per_head_mask(mask: Any) -> Any:
    """A (batch, Tq, Tk) mask with an axis for the heads, (batch, 1, Tq, Tk); other shapes as they are."""
    if mask is None or len(np.shape(mask) if not isinstance(mask, Tensor) else mask.shape) != 3:
        return mask
    return ops.expand_dims(mask, 1) if isinstance(mask, Tensor) else np.expand_dims(np.asarray(mask), 1)


class MultiHeadAttention(Block):
    """Multi-head attention: query, key and value projections, scaled dot-product attention per head, and an
    output projection (``units`` wide).

    Self-attention when only ``query`` is given (keys and values are the query), cross attention when ``key``
    (and ``value``, which defaults to ``key``) come from elsewhere (an encoder's memory).

    Args:
        units: width of the projections and of the output; a multiple of ``num_heads``.
        num_heads: number of heads; each attends over ``units // num_heads`` dimensions.
        dropout: probability of dropping an attention weight while training.
        use_bias: the four projections have biases.
        scaled: scale the scores by ``1 / sqrt(units // num_heads)`` (GluonNLP's ``scaled``); False uses 1.
        causal: query i attends to keys j <= i only (a decoder's self-attention), without a mask array.
        query_units, key_units, value_units: input widths; 0 infers them from the first call.
        layout: 'NT' (batch, seq, units) or 'TN' (seq, batch, units), for inputs and output.
        weight_initializer, bias_initializer: the projections' initializers (biases default to zeros).
        dtype: the parameters' dtype.

    Parameters: ``query_proj``, ``key_proj``, ``value_proj``, ``out_proj`` (Dense layers: ``weight`` of shape
    (units, in_units), ``bias`` (units,)).

    Raises:
        ValueError: ``units`` not a positive multiple of ``num_heads``, ``dropout`` outside [0, 1], an unknown
            layout (at construction); inputs whose batch or width do not fit (at the call, naming the shapes).
    """

    def __init__(self, units: int, num_heads: int, dropout: float = 0.0, use_bias: bool = True, scaled: bool = True,
                 causal: bool = False, query_units: int = 0, key_units: int = 0, value_units: int = 0,
                 layout: str = "NT", weight_initializer: Any = None, bias_initializer: Any = "zeros",
                 dtype: Any = np.float32, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        units = _int_arg("MultiHeadAttention", "units", units)
        num_heads = _int_arg("MultiHeadAttention", "num_heads", num_heads)
        if units % num_heads:
            raise ValueError(f"MultiHeadAttention: units ({units}) must be a multiple of num_heads ({num_heads})")
        self._dropout = _real_arg("MultiHeadAttention", "dropout", dropout, low=0, high=1, high_inclusive=True)
        self._units, self._num_heads, self._scaled, self._causal = units, num_heads, scaled, causal
        self._layout = _layout("MultiHeadAttention", layout)
        common = {"flatten": False, "use_bias": use_bias, "weight_initializer": weight_initializer,
                  "bias_initializer": bias_initializer, "dtype": dtype}
        self.query_proj = Dense(units, in_units=query_units, **common)
        self.key_proj = Dense(units, in_units=key_units, **common)
        self.value_proj = Dense(units, in_units=value_units, **common)
        self.out_proj = Dense(units, in_units=units, **common)

    def forward(self, query: Tensor, key: Tensor | None = None, value: Tensor | None = None, mask: Any = None,
                valid_length: Any = None, causal: bool | None = None) -> Tensor:
        """Attend from ``query`` (batch, Tq, query_units) to ``key`` (batch, Tk, key_units) and ``value``
        (batch, Tk, value_units) ('NT' layout; 'TN' swaps the first two axes). ``mask``: 1 where query i may
        attend to key j, (batch, Tq, Tk), (Tq, Tk) or (batch, heads or 1, Tq, Tk); ``valid_length``: (batch,)
        keys per sequence; ``causal``: overrides the layer's ``causal`` for this call. Returns (batch, Tq, units).

        Raises:
            ValueError: inputs that are not 3-D or whose batch or key lengths differ (names the shapes).
        """
        key = query if key is None else key
        value = key if value is None else value
        axes = "(batch, seq, units)" if self._layout == "NT" else "(seq, batch, units)"
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x.ndim != 3:
                raise ValueError(f"MultiHeadAttention: {name} must be 3-D {axes}, got shape {x.shape}")
        if self._layout == "TN":
            query, key, value = (ops.swapaxes(x, 0, 1) for x in (query, key, value))
        if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
            raise ValueError(f"MultiHeadAttention: query, key and value must share the batch and key and value the "
                             f"sequence length; got (batch, seq) {query.shape[:2]}, {key.shape[:2]}, {value.shape[:2]}")
        q, k, v = (self._heads(proj(x)) for proj, x in
                   ((self.query_proj, query), (self.key_proj, key), (self.value_proj, value)))
        head_dim = self._units // self._num_heads
        causal = self._causal if causal is None else causal
        out = scaled_dot_product_attention(q, k, v, mask=_per_head_mask(mask), causal=causal,
                                           valid_length=valid_length, dropout=self._dropout,
                                           scale=None if self._scaled else 1.0)
        batch, _, tq, _ = out.shape
        out = self.out_proj(ops.reshape(ops.transpose(out, (0, 2, 1, 3)), (batch, tq, self._num_heads * head_dim)))
        return ops.swapaxes(out, 0, 1) if self._layout == "TN" else out

    def _heads(self, x: Tensor) -> Tensor:
        """(batch, seq, units) -> (batch, heads, seq, units // heads)."""
        batch, seq, _ = x.shape
        return ops.transpose(ops.reshape(x, (batch, seq, self._num_heads, -1)), (0, 2, 1, 3))

    def _extra_repr(self) -> str:
        return f"units={self._units}, num_heads={self._num_heads}, dropout={self._dropout}" + (
            ", causal" if self._causal else "")


class PositionwiseFFN(Block):
    """The position-wise feed-forward block of a Transformer (GluonNLP's ``PositionwiseFFN``).

    ``pre_norm``: ``data + dropout(ffn_2(act_dropout(act(ffn_1(norm(data))))))``; otherwise
    ``norm(data + dropout(ffn_2(act_dropout(act(ffn_1(data))))))``.

    Args:
        units: input and output width; hidden_size: the inner width.
        activation_dropout: dropout after the activation; dropout: dropout of the output before the residual.
        activation: 'relu', 'gelu', 'gelu(tanh)', 'tanh' or 'sigmoid'.
        layer_norm_eps: LayerNorm's epsilon; pre_norm: normalise before instead of after.
        weight_initializer, bias_initializer, dtype: of the two Dense layers.

    Parameters: ``ffn_1``, ``ffn_2`` (Dense), ``layer_norm`` (LayerNorm).

    Raises:
        ValueError: an unknown activation, or a width or dropout out of range.
    """

    def __init__(self, units: int = 512, hidden_size: int = 2048, activation_dropout: float = 0.0,
                 dropout: float = 0.1, weight_initializer: Any = None, bias_initializer: Any = "zeros",
                 activation: str = "relu", layer_norm_eps: float = 1e-5, pre_norm: bool = False,
                 dtype: Any = np.float32, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        units = _int_arg("PositionwiseFFN", "units", units)
        hidden_size = _int_arg("PositionwiseFFN", "hidden_size", hidden_size)
        self._act_name, self._act = activation, _activation("PositionwiseFFN", activation)
        self._pre_norm = pre_norm
        dense = {"flatten": False, "weight_initializer": weight_initializer, "bias_initializer": bias_initializer,
                 "dtype": dtype}
        self.ffn_1 = Dense(hidden_size, in_units=units, **dense)
        self.activation_dropout_layer = Dropout(activation_dropout)
        self.ffn_2 = Dense(units, in_units=hidden_size, **dense)
        self.dropout_layer = Dropout(dropout)
        self.layer_norm = LayerNorm(epsilon=layer_norm_eps, in_channels=units)

    def forward(self, data: Tensor) -> Tensor:
        """(..., units) -> (..., units)."""
        x = self.layer_norm(data) if self._pre_norm else data
        out = self.ffn_2(self.activation_dropout_layer(self._act(self.ffn_1(x))))
        out = self.dropout_layer(out) + data
        return out if self._pre_norm else self.layer_norm(out)

    def _extra_repr(self) -> str:
        return f"{self._act_name}" + (", pre_norm" if self._pre_norm else "")


class TransformerEncoderLayer(Block):
    """A Transformer encoder layer (GluonNLP's ``TransformerEncoderLayer``): self-attention, then
    :class:`PositionwiseFFN`, each with a residual connection and LayerNorm.

    ``pre_norm``: ``x + dropout(attn(norm(x)))`` (the normalisation before the attention); otherwise
    ``norm(x + dropout(attn(x)))`` (the original Transformer's).

    Args:
        units, hidden_size, num_heads: widths and heads.
        attention_dropout_prob: on the attention weights; hidden_dropout_prob: on the attention's and the FFN's
            outputs; activation_dropout_prob: after the FFN's activation.
        layer_norm_eps, pre_norm, activation ('relu', 'gelu', ...): as :class:`PositionwiseFFN`.
        use_qkv_bias: the attention's projections have biases.
        weight_initializer, bias_initializer, dtype: of every Dense layer.
        layout: 'NT' (batch, seq, units) or 'TN' (seq, batch, units).

    Parameters: ``attention`` (:class:`MultiHeadAttention`), ``layer_norm``, ``ffn``.
    """

    def __init__(self, units: int = 512, hidden_size: int = 2048, num_heads: int = 8,
                 attention_dropout_prob: float = 0.1, hidden_dropout_prob: float = 0.1,
                 activation_dropout_prob: float = 0.0, layer_norm_eps: float = 1e-12, pre_norm: bool = False,
                 use_qkv_bias: bool = True, weight_initializer: Any = None, bias_initializer: Any = "zeros",
                 activation: str = "relu", dtype: Any = np.float32, layout: str = "NT", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._pre_norm, self._layout = pre_norm, _layout("TransformerEncoderLayer", layout)
        self.attention = MultiHeadAttention(units, num_heads, dropout=attention_dropout_prob, use_bias=use_qkv_bias,
                                            query_units=units, key_units=units, value_units=units, layout=layout,
                                            weight_initializer=weight_initializer, bias_initializer=bias_initializer,
                                            dtype=dtype)
        self.dropout_layer = Dropout(hidden_dropout_prob)
        self.layer_norm = LayerNorm(epsilon=layer_norm_eps, in_channels=units)
        self.ffn = PositionwiseFFN(units, hidden_size, activation_dropout_prob, hidden_dropout_prob,
                                   weight_initializer, bias_initializer, activation, layer_norm_eps, pre_norm, dtype)

    def forward(self, data: Tensor, attn_mask: Any = None, valid_length: Any = None) -> Tensor:
        """``data`` (batch, seq, units) ('TN': (seq, batch, units)); ``attn_mask`` (batch, seq, seq), 1 where a
        position may attend to another; ``valid_length`` (batch,) masks the keys past each sequence's length.
        Returns the layer's output, ``data``'s shape."""
        x = self.layer_norm(data) if self._pre_norm else data
        out = self.dropout_layer(self.attention(x, mask=attn_mask, valid_length=valid_length)) + data
        if not self._pre_norm:
            out = self.layer_norm(out)
        return self.ffn(out)


class TransformerDecoderLayer(Block):
    """A Transformer decoder layer (GluonNLP's ``TransformerDecoderLayer``): causal self-attention, attention to
    the encoder's memory, then :class:`PositionwiseFFN`, each with a residual connection and LayerNorm (before,
    with ``pre_norm``, or after each part).

    Args:
        units, mem_units (the memory's width; default ``units``), hidden_size, num_heads: widths and heads.
        activation_dropout, dropout, attention_dropout: as :class:`TransformerEncoderLayer`'s
            ``activation_dropout_prob``, ``hidden_dropout_prob``, ``attention_dropout_prob``.
        layer_norm_eps, activation, pre_norm: as :class:`PositionwiseFFN`.
        use_bias: the attentions' projections have biases (GluonNLP's decoder has none).
        weight_initializer, bias_initializer, dtype, layout: as :class:`TransformerEncoderLayer`.

    Parameters: ``self_attention``, ``inter_attention`` (:class:`MultiHeadAttention`), ``ln_in``, ``ln_inter``,
    ``ffn``.
    """

    def __init__(self, units: int = 512, mem_units: int | None = None, hidden_size: int = 2048, num_heads: int = 8,
                 activation_dropout: float = 0.0, dropout: float = 0.1, attention_dropout: float = 0.1,
                 layer_norm_eps: float = 1e-5, activation: str = "relu", pre_norm: bool = False,
                 use_bias: bool = False, weight_initializer: Any = None, bias_initializer: Any = "zeros",
                 dtype: Any = np.float32, layout: str = "NT", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        mem_units = units if mem_units is None else mem_units
        self._pre_norm, self._layout = pre_norm, _layout("TransformerDecoderLayer", layout)
        common = {"dropout": attention_dropout, "use_bias": use_bias, "layout": layout,
                  "weight_initializer": weight_initializer, "bias_initializer": bias_initializer, "dtype": dtype}
        self.self_attention = MultiHeadAttention(units, num_heads, query_units=units, key_units=units,
                                                 value_units=units, **common)
        self.inter_attention = MultiHeadAttention(units, num_heads, query_units=units, key_units=mem_units,
                                                  value_units=mem_units, **common)
        self.dropout_layer = Dropout(dropout)
        self.ln_in = LayerNorm(epsilon=layer_norm_eps, in_channels=units)
        self.ln_inter = LayerNorm(epsilon=layer_norm_eps, in_channels=units)
        self.ffn = PositionwiseFFN(units, hidden_size, activation_dropout, dropout, weight_initializer,
                                   bias_initializer, activation, layer_norm_eps, pre_norm, dtype)

    def forward(self, data: Tensor, mem: Tensor, self_causal_mask: Any = None, mem_attn_mask: Any = None,
                mem_valid_length: Any = None) -> Tensor:
        """``data`` (batch, seq, units) attends to itself, causally, then to ``mem`` (batch, mem_length,
        mem_units) ('TN': sequence first). ``self_causal_mask`` (batch, seq, seq): the self-attention's mask;
        None attends to positions j <= i without a mask array. ``mem_attn_mask`` (batch, seq, mem_length) and
        ``mem_valid_length`` (batch,) mask the memory. Returns ``data``'s shape."""
        out = self._residual(data, self.ln_in, lambda x: self.self_attention(
            x, mask=self_causal_mask, causal=self_causal_mask is None))
        return self.ffn(self._residual(out, self.ln_inter, lambda x: self.inter_attention(
            x, mem, mask=mem_attn_mask, valid_length=mem_valid_length)))

    def _residual(self, data: Tensor, norm: LayerNorm, part: Callable[[Tensor], Tensor]) -> Tensor:
        """``data + dropout(part(norm(data)))`` with ``pre_norm``, else ``norm(data + dropout(part(data)))``."""
        if self._pre_norm:
            return data + self.dropout_layer(part(norm(data)))
        return norm(data + self.dropout_layer(part(data)))
