"""Custom differentiation and explicit gradient buffers: MXNet's ``autograd.Function`` and ``mark_variables``.

:class:`Function` lets a user give an operation's backward by hand (a stable formula, a straight-through
estimator, a computation leaving the graph through NumPy). :func:`mark_variables` attaches gradient
buffers of the caller's choosing. :func:`get_symbol` exists only to say why it cannot work here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _state
from .tensor import _GRAD_REQS, Tensor, _Node, describe

__all__ = ["Function", "get_symbol", "mark_variables"]


def mark_variables(variables: Tensor | Sequence[Tensor], gradients: Tensor | Sequence[Tensor],
                   grad_reqs: str | Sequence[str] = "write") -> None:
    """Attach the given gradient buffers to ``variables`` (MXNet's ``mark_variables``).

    ``attach_grad`` with a buffer of the caller's choosing: backward writes (``'write'``) or adds
    (``'add'``) each variable's gradient into its buffer in place, so the caller's tensor shows it.
    As ``attach_grad``, on a recorded result it keeps the graph (the gradient is kept and passed on).

    Args:
        variables: a Tensor or a list of Tensors.
        gradients: their buffers, one per variable, each of its variable's shape.
        grad_reqs: 'write', 'add' or 'null', for all variables or one per variable.

    Raises:
        ValueError: the lists differ in length, a buffer's shape or device differs from its variable's, or
            an unknown grad_req. TypeError: a variable or buffer is not a Tensor, a variable is not
            floating point, or a buffer's dtype differs from its variable's (for any grad_req but 'null').
    """
    if isinstance(variables, Tensor):
        variables, gradients = [variables], [gradients]
    variables, gradients = list(variables), list(gradients)
    reqs = [grad_reqs] * len(variables) if isinstance(grad_reqs, str) else list(grad_reqs)
    if not len(variables) == len(gradients) == len(reqs):
        raise ValueError(f"mark_variables: {len(variables)} variables, {len(gradients)} gradients and "
                         f"{len(reqs)} grad_reqs; pass one of each per variable")
    for i, (v, g, req) in enumerate(zip(variables, gradients, reqs)):
        if not isinstance(v, Tensor) or not isinstance(g, Tensor):
            raise TypeError(f"mark_variables: variable {i} and its gradient must be Tensors, got "
                            f"{type(v).__name__} and {type(g).__name__}")
        if req not in _GRAD_REQS:
            raise ValueError(f"mark_variables: grad_req must be one of {_GRAD_REQS}, got {req!r} for variable {i}")
        if req != "null" and not np.issubdtype(v.dtype, np.floating):
            raise TypeError(f"mark_variables: variable {i} ({describe(v)}) is not floating point and cannot "
                            "have a gradient")
        if g.shape != v.shape:
            raise ValueError(f"mark_variables: gradient {i} has shape {g.shape}, its variable {v.shape}")
        if req != "null":
            _check_buffer(i, v, g)
        v.grad = None if req == "null" else g
        v.grad_req = req


def _check_buffer(i: int, variable: Tensor, buffer: Tensor) -> None:
    """Refuse a gradient buffer backward could not write variable ``i``'s gradient into exactly: another dtype
    (an int32 buffer would truncate the gradient, a float16 one round it; MXNet requires the variable's dtype) or
    another device."""
    if buffer.dtype != variable.dtype:
        raise TypeError(f"mark_variables: gradient {i} ({describe(buffer)}) has dtype {buffer.dtype}, its variable "
                        f"({describe(variable)}) {variable.dtype}; a gradient buffer must have its variable's dtype "
                        f"(make it with zeros_like(variable))")
    if buffer.device != variable.device:
        raise ValueError(f"mark_variables: gradient {i} lives on {buffer.device}, its variable on {variable.device}; "
                         "a gradient buffer must be on its variable's device")


def get_symbol(x: Tensor) -> Any:
    """Not available: mxlite runs eagerly and records closures, not a Symbol graph (MXNet's ``get_symbol``).

    Raises:
        NotImplementedError: always.
    """
    raise NotImplementedError("autograd.get_symbol: mxlite records Python closures, not an MXNet Symbol graph, so "
                              "there is no symbol to return (save a model's weights with save_parameters)")


class Function:
    """An operation whose gradient is given by hand (MXNet's ``autograd.Function``).

    Subclass it, define ``forward(self, *inputs)`` and ``backward(self, *output_grads)`` on Tensors
    (NDArrays), and call an instance on the inputs. ``forward`` runs with recording paused, so its
    ops leave no history; inside ``record()`` the outputs are recorded as one node whose backward is
    yours. ``backward`` gets one gradient per output (zeros for an output that received none) and
    returns one per input, each of its input's shape (``None`` for no gradient).

    Example::

        class Sigmoid(mx.autograd.Function):
            def forward(self, x):
                y = 1 / (1 + mx.nd.exp(-x))
                self.save_for_backward(y)
                return y

            def backward(self, dy):
                y, = self.saved_tensors
                return dy * y * (1 - y)

    Warning: an instance can be called once (its saved tensors belong to that call), as in MXNet.

    Warning: ``autograd.grad(..., create_graph=True)`` cannot differentiate through a Function and
    raises naming it: its backward works on arrays outside the graph, so a second derivative through it
    would silently miss terms.
    """

    def __init__(self) -> None:
        self._used = False
        self.saved_tensors: tuple[Any, ...] = ()

    def save_for_backward(self, *args: Any) -> None:
        """Keep ``args`` for :meth:`backward`, as the tuple :attr:`saved_tensors`."""
        self.saved_tensors = args

    def forward(self, *inputs: Tensor) -> Tensor | Sequence[Tensor]:
        """The computation: Tensors in, a Tensor or a tuple/list of Tensors out. Override it."""
        raise NotImplementedError(f"{type(self).__name__} must define forward(self, *inputs)")

    def backward(self, *output_grads: Tensor) -> Tensor | Sequence[Tensor | None]:
        """The inputs' gradients from the outputs' gradients, one per input. Override it."""
        raise NotImplementedError(f"{type(self).__name__} must define backward(self, *output_grads)")

    def __call__(self, *inputs: Tensor) -> Any:
        """Run :meth:`forward` on ``inputs``; inside ``record()`` record the outputs with :meth:`backward`.

        Raises:
            RuntimeError: the instance was called before. TypeError: an input or output is not a Tensor.
        """
        name = type(self).__name__
        if self._used:
            raise RuntimeError(f"{name}: each Function instance can be called only once; create another instance")
        self._used = True
        for i, x in enumerate(inputs):
            if not isinstance(x, Tensor):
                raise TypeError(f"{name}: input {i} is a {type(x).__name__}, not a Tensor")
        recording = _state.set_recording(False)
        try:
            result = self.forward(*inputs)
        finally:
            _state.set_recording(recording)
        outputs = (result,) if isinstance(result, Tensor) else tuple(result)
        for i, y in enumerate(outputs):
            if not isinstance(y, Tensor):
                raise TypeError(f"{name}.forward: output {i} is a {type(y).__name__}, not a Tensor")
        if not recording or not any(x._requires_grad() for x in inputs):
            return result
        # An output that is an input, or already has history, is re-wrapped so its own node stays intact.
        outputs = tuple(Tensor(y._data, y._device) if y._requires_grad() or any(y is x for x in inputs) else y
                        for y in outputs)
        self._record(inputs, outputs)
        if isinstance(result, Tensor):
            return outputs[0]
        return list(outputs) if isinstance(result, list) else outputs

    def _record(self, inputs: tuple[Tensor, ...], outputs: tuple[Tensor, ...]) -> None:
        """Record the outputs: each one's node feeds a shared node whose backward calls :meth:`backward` once.

        The shared node's tensor carries no data; the gradient reaching it is a :class:`_OutputGrads`
        (one slot per output), which the engine adds up like any gradient.
        """
        op = f"Function({type(self).__name__})"
        n = len(outputs)
        xp = inputs[0]._device.xp
        joint = Tensor(xp.empty((0,), dtype=np.float32), inputs[0]._device)

        def backward(grads: _OutputGrads) -> list[Any]:
            out_grads = [Tensor(g if g is not None else y._device.xp.zeros_like(y._data), y._device)
                         for g, y in zip(grads.slots, outputs)]
            returned = self.backward(*out_grads)
            returned = (returned,) if isinstance(returned, Tensor) or returned is None else tuple(returned)
            if len(returned) != len(inputs):
                raise ValueError(f"{op}.backward returned {len(returned)} gradients for {len(inputs)} inputs; return "
                                 "one per argument of forward")
            arrays: list[Any] = []
            for i, (g, x) in enumerate(zip(returned, inputs)):
                if g is not None and (not isinstance(g, Tensor) or g.shape != x.shape):
                    raise ValueError(f"{op}.backward: gradient {i} must be a Tensor of its input's shape {x.shape}, "
                                     f"got {describe(g) if isinstance(g, Tensor) else type(g).__name__}")
                arrays.append(None if g is None else g._data)
            return arrays

        joint._node = _Node(op, inputs, backward)
        for i, y in enumerate(outputs):
            y._node = _Node(op, (joint,), lambda g, i=i: (_OutputGrads.one(n, i, g),))


class _OutputGrads:
    """The gradients of a Function's outputs, one slot each (None until one arrives); ``+`` merges slots."""

    __slots__ = ("slots",)

    def __init__(self, slots: list[Any]) -> None:
        self.slots = slots

    @classmethod
    def one(cls, n: int, i: int, g: Any) -> _OutputGrads:
        slots: list[Any] = [None] * n
        slots[i] = g
        return cls(slots)

    def __add__(self, other: _OutputGrads) -> _OutputGrads:
        return _OutputGrads([b if a is None else a if b is None else a + b for a, b in zip(self.slots, other.slots)])
