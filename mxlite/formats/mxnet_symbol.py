"""MXNet's symbol JSON (``*-symbol.json``, what ``HybridBlock.export`` and ``Symbol.save`` write), and ``mx.sym``.

A graph description, no computation: :class:`Symbol` is a list of outputs ("heads") of :class:`SymbolNode`\\ s,
each node an operator (``op``, a ``name``, string ``attrs``) or a variable (``op == "null"``: an input or a
parameter) whose ``inputs`` name the outputs of earlier nodes. ``mx.sym`` (``mx.symbol``) is this module:
:func:`load`, :func:`load_json`, :func:`var` and :func:`Group` build Symbols; a Symbol lists its arguments,
auxiliary states and outputs, picks outputs, and saves itself. Operators cannot be composed on Symbols in
mxlite; :class:`~mxlite.gluon.SymbolBlock` runs them.

The layout, as MXNet 1.x writes it (``nnvm``'s ``SaveJSON``/``LoadJSON`` through ``dmlc::JSONWriter``)::

    {"nodes": [{"op": "null" | operator, "name": str, "attrs": {str: str}, "inputs": [[node, output, version]]}],
     "arg_nodes": [index of every variable node],
     "node_row_ptr": [running count of every node's outputs, from 0],
     "heads": [[node, output, version]],
     "attrs": {"mxnet_version": ["int", 10901]}}

Nodes come in topological order (every input names an earlier node). Every attribute value is a string: Python's
``str`` of the value (``"(3, 3)"``, ``"True"``, ``"1e-05"``). Older files name a node's attributes ``"attr"`` or
``"param"`` and may give an input as ``[node, output]``; both are read. The inputs an operator mutates
(BatchNorm's moving mean and variance) are *auxiliary states*, written with version 1; the parameter files of
``export`` prefix their names with ``aux:`` and every other parameter's with ``arg:``.

Refused with :class:`MXNetSymbolError` (a ValueError) naming the source and what was found: text that is not
JSON, a missing or mistyped field, an input or head naming a node that is not earlier in the list, and an
output index the node does not have.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from . import _messages
from .archive import atomic_write
from .mxnet_params import _DTYPES

__all__ = ["MXNET_VERSION", "MXNetSymbolError", "Symbol", "SymbolNode", "Group", "Variable", "var", "load",
           "load_json", "format_attr", "parse_bool", "parse_float", "parse_int", "parse_ints", "dtype_flag",
           "flag_dtype", "aux_inputs", "output_count"]

MXNET_VERSION = 10901  # the version written: MXNet 1.9.1's format, which every MXNet since 1.0 reads

# Operator -> the indices of the inputs it mutates (its auxiliary states).
_AUX_INPUTS: dict[str, tuple[int, ...]] = {
    "BatchNorm": (3, 4), "BatchNorm_v1": (3, 4), "_contrib_SyncBatchNorm": (3, 4),
    "_contrib_BatchNormWithReLU": (3, 4),
}
# Operator -> (outputs, outputs visible to a caller) where not (1, 1); optional outputs shown by an attribute.
_OUTPUTS: dict[str, tuple[int, int]] = {
    "BatchNorm": (3, 1), "_contrib_SyncBatchNorm": (3, 1), "Dropout": (2, 1), "LayerNorm": (3, 1),
    "InstanceNorm": (3, 1), "GroupNorm": (3, 1),
}
_SHOWN_BY = {"BatchNorm": "output_mean_var", "_contrib_SyncBatchNorm": "output_mean_var",
             "LayerNorm": "output_mean_var"}
_SPLITS = ("SliceChannel", "split")  # as many outputs as their num_outputs attribute says
# Operators with one output that files often hold (an input naming their output 1 is an error).
_SINGLE_OUTPUT = frozenset({
    "Convolution", "Deconvolution", "FullyConnected", "Activation", "LeakyReLU", "Flatten", "Reshape", "Concat",
    "elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div", "Embedding", "softmax", "log_softmax",
})


class MXNetSymbolError(ValueError):
    """Symbol JSON that cannot be read: the message names the source and what was found."""


class SymbolNode:
    """One node of a symbol graph: an operator, or a variable (``op == "null"``).

    Attributes:
        op: the operator's MXNet name (``"Convolution"``), or ``"null"`` for a variable.
        name: the node's name (a variable's is the argument's name).
        attrs: the operator's attributes, every value a string as MXNet stores it.
        inputs: ``(node, output index, version)`` per input; version 1 marks an auxiliary state.
    """

    __slots__ = ("op", "name", "attrs", "inputs")

    def __init__(self, op: str, name: str, attrs: dict[str, str] | None = None,
                 inputs: Sequence[tuple[SymbolNode, int, int]] = ()) -> None:
        self.op, self.name = op, name
        self.attrs = dict(attrs or {})
        self.inputs = list(inputs)

    @property
    def is_variable(self) -> bool:
        """Whether the node is a variable (an input or a parameter) rather than an operator."""
        return self.op == "null"

    def __repr__(self) -> str:
        return f"SymbolNode({self.op!r}, {self.name!r})"


def aux_inputs(op: str) -> tuple[int, ...]:
    """The input positions operator ``op`` mutates, its auxiliary states (BatchNorm: 3 and 4)."""
    return _AUX_INPUTS.get(op, ())


def output_count(node: SymbolNode) -> tuple[int, int]:
    """``(outputs, visible outputs)`` of ``node``: BatchNorm computes 3 and shows 1 (3 with ``output_mean_var``).

    Raises:
        MXNetSymbolError: a split whose ``num_outputs`` is not a positive integer.
    """
    if node.is_variable:
        return 1, 1
    if node.op in _SPLITS:
        try:
            n = parse_int(node.attrs.get("num_outputs", ""))
        except ValueError:
            n = 0
        if n < 1:
            raise MXNetSymbolError(f"node {node.name!r} ({node.op}) needs num_outputs >= 1, got "
                                   f"{node.attrs.get('num_outputs')!r}")
        return n, n
    total, visible = _OUTPUTS.get(node.op, (1, 1))
    shown = _SHOWN_BY.get(node.op)
    if shown is not None and parse_bool(node.attrs.get(shown, "False")):
        visible = total
    return total, visible


# -- attribute strings ----------------------------------------------------------------------------------------
def format_attr(value: Any) -> str:
    """``value`` as MXNet writes an attribute: ``True``, ``3``, ``1e-05``, ``(3, 3)``, ``(2,)``, ``float32``.

    Raises:
        TypeError: a value of another kind (a dict, an array, ...).
    """
    if isinstance(value, (bool, np.bool_)):
        return "True" if value else "False"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, np.floating):
        return str(value)  # the shortest text that gives this float32/float64 back
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (tuple, list)):
        items = [format_attr(v) for v in value]
        return "(" + items[0] + ",)" if len(items) == 1 else "(" + ", ".join(items) + ")"
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return np.dtype(value).name
    if isinstance(value, str) or value is None:
        return str(value)
    raise TypeError(f"format_attr: cannot write a {type(value).__name__} as an MXNet attribute: {value!r}")


def parse_bool(text: str) -> bool:
    """``True``/``true``/``1`` or ``False``/``false``/``0`` as a bool. Raises ValueError otherwise."""
    low = text.strip().lower()
    if low in ("true", "1"):
        return True
    if low in ("false", "0"):
        return False
    raise ValueError(f"expected True or False, got {text!r}")


def parse_int(text: str) -> int:
    """An integer attribute (``"64"``). Raises ValueError for anything else."""
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"expected an integer, got {text!r}") from None


def parse_float(text: str) -> float:
    """A real-number attribute (``"1e-05"``, ``"0.9"``, ``"inf"``). Raises ValueError for anything else."""
    try:
        return float(text.strip())
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None


def parse_ints(text: str) -> tuple[int | None, ...]:
    """A shape or tuple attribute: ``"(3, 3)"``, ``"[3, 3]"``, ``"(2,)"``, ``"()"`` or a bare ``"3"``; ``None``
    entries stay None (``"(None, 2)"``, MXNet's optional ints). Raises ValueError for anything else."""
    body = text.strip()
    if body[:1] in "([" and body[-1:] in ")]":
        body = body[1:-1]
    out: list[int | None] = []
    for item in body.split(","):
        item = item.strip()
        if item in ("None", "none"):
            out.append(None)
        elif item:
            try:
                out.append(int(item.rstrip("L")))
            except ValueError:
                raise ValueError(f"expected a tuple of integers, got {text!r}") from None
    return tuple(out)


def dtype_flag(dtype: Any) -> int:
    """MXNet's type flag of ``dtype`` (0 float32, 1 float64, 2 float16, 3 uint8, 4 int32, ...).

    Raises:
        TypeError: a dtype MXNet has no flag for.
    """
    dtype = np.dtype(dtype)
    for flag, (name, _) in _DTYPES.items():
        if name == dtype.name:
            return flag
    raise TypeError(f"MXNet has no type flag for dtype {dtype}")


def flag_dtype(flag: int) -> np.dtype:
    """The dtype of MXNet's type flag ``flag`` (bfloat16, which NumPy lacks, as float32).

    Raises:
        ValueError: an unknown flag.
    """
    if flag not in _DTYPES:
        raise ValueError(f"unknown MXNet type flag {flag}; known: {sorted(_DTYPES)}")
    name = _DTYPES[flag][0]
    return np.dtype(np.float32 if name == "bfloat16" else name)


# -- Symbol ---------------------------------------------------------------------------------------------------
class Symbol:
    """A graph's outputs: ``mx.sym.load('net-symbol.json')``, or a variable from :func:`var`.

    Args:
        heads: the outputs, as ``(node, output index)`` pairs.

    ``len(sym)`` counts its outputs; ``sym[i]`` and ``sym['name_output']`` pick one; ``get_internals()``
    offers every node's outputs, e.g. to cut a network at a layer.
    """

    def __init__(self, heads: Sequence[tuple[SymbolNode, int]]) -> None:
        self.heads = [(node, int(index)) for node, index in heads]

    # -- naming --------------------------------------------------------------------------------------------
    @property
    def name(self) -> str | None:
        """The node name of a single-output Symbol; None for a group of several outputs."""
        return self.heads[0][0].name if len(self.heads) == 1 else None

    def list_outputs(self) -> list[str]:
        """The outputs' names: a variable's own name, ``<node>_output`` (``<node>_output<i>`` for several)."""
        return [_output_name(node, index) for node, index in self.heads]

    def list_inputs(self) -> list[str]:
        """Every variable's name (inputs, parameters and auxiliary states), in graph order."""
        return [n.name for n in self.topological_nodes() if n.is_variable]

    def list_arguments(self) -> list[str]:
        """The variables that are not auxiliary states: inputs and learned parameters, in graph order."""
        aux = set(self.list_auxiliary_states())
        return [name for name in self.list_inputs() if name not in aux]

    def list_auxiliary_states(self) -> list[str]:
        """The variables some operator mutates (BatchNorm's moving statistics), in graph order."""
        aux: list[str] = []
        for node in self.topological_nodes():
            for position in aux_inputs(node.op):
                if position < len(node.inputs):
                    source = node.inputs[position][0]
                    if source.is_variable and source.name not in aux:
                        aux.append(source.name)
        order = {name: i for i, name in enumerate(self.list_inputs())}
        return sorted(aux, key=order.__getitem__)

    # -- picking outputs -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.heads)

    def __iter__(self) -> Iterator[Symbol]:
        return (Symbol([head]) for head in self.heads)

    def __getitem__(self, key: int | str) -> Symbol:
        """The output at position ``key``, or the one named ``key`` (:meth:`list_outputs`).

        Raises:
            IndexError: no such position. KeyError: no such name (the message lists a few).
        """
        if isinstance(key, str):
            names = self.list_outputs()
            if key not in names:
                raise KeyError(f"Symbol has no output named {key!r}; it has {_messages.listing(names)}")
            return Symbol([self.heads[names.index(key)]])
        return Symbol([self.heads[key]])

    def get_internals(self) -> Symbol:
        """Every visible output of every node of the graph, in graph order (variables included)."""
        heads = []
        for node in self.topological_nodes():
            heads.extend((node, i) for i in range(output_count(node)[1]))
        return Symbol(heads)

    # -- the graph -----------------------------------------------------------------------------------------
    def topological_nodes(self) -> list[SymbolNode]:
        """The nodes the outputs depend on, each after its inputs (MXNet's depth-first order)."""
        order: list[SymbolNode] = []
        done: set[int] = set()
        for head, _ in self.heads:
            stack: list[tuple[SymbolNode, int]] = [(head, 0)]
            while stack:
                node, next_input = stack.pop()
                if id(node) in done:
                    continue
                if next_input < len(node.inputs):
                    stack.append((node, next_input + 1))
                    source = node.inputs[next_input][0]
                    if id(source) not in done:
                        stack.append((source, 0))
                    continue
                done.add(id(node))
                order.append(node)
        return order

    def tojson(self) -> str:
        """The graph as MXNet 1.x's symbol JSON (see the module's docstring for the layout)."""
        nodes = self.topological_nodes()
        index = {id(node): i for i, node in enumerate(nodes)}
        rows: list[dict[str, Any]] = []
        row_ptr = [0]
        for node in nodes:
            row: dict[str, Any] = {"op": node.op, "name": node.name}
            if node.attrs:
                row["attrs"] = {k: node.attrs[k] for k in sorted(node.attrs)}
            row["inputs"] = [[index[id(src)], i, version] for src, i, version in node.inputs]
            rows.append(row)
            row_ptr.append(row_ptr[-1] + output_count(node)[0])
        tail = {"arg_nodes": [i for i, n in enumerate(nodes) if n.is_variable], "node_row_ptr": row_ptr,
                "heads": [[index[id(n)], i, 0] for n, i in self.heads],
                "attrs": {"mxnet_version": ["int", MXNET_VERSION]}}
        # MXNet's own layout: one field per line, short lists and the inputs on one line each
        lines = ["{", '  "nodes": [']
        for i, row in enumerate(rows):
            fields = ",\n".join(f"      {json.dumps(k)}: " + (json.dumps(v, indent=2).replace("\n", "\n      ")
                                                            if k == "attrs" else json.dumps(v))
                                for k, v in row.items())
            lines.append("    {\n" + fields + "\n    }" + ("," if i < len(rows) - 1 else ""))
        lines.append("  ],")
        lines.append(",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in tail.items()))
        lines.append("}")
        return "\n".join(lines) + "\n"

    def save(self, fname: str | os.PathLike, remove_amp_cast: bool = True) -> None:
        """Write :meth:`tojson` to ``fname`` atomically (``remove_amp_cast``: MXNet's; mxlite writes no casts)."""
        text = self.tojson()
        atomic_write(fname, lambda f: f.write(text.encode("utf-8")))

    def __repr__(self) -> str:
        if len(self.heads) == 1:
            return f"<Symbol {self.name}>"
        return f"<Symbol group [{', '.join(self.list_outputs())}]>"


def _outputs_known(node: SymbolNode) -> bool:
    """Whether mxlite knows how many outputs ``node`` has (else any output index is taken on trust)."""
    return node.is_variable or node.op in _OUTPUTS or node.op in _SPLITS or node.op in _SINGLE_OUTPUT


def _output_name(node: SymbolNode, index: int) -> str:
    if node.is_variable:
        return node.name
    return f"{node.name}_output" if output_count(node)[1] == 1 else f"{node.name}_output{index}"


def var(name: str, attr: dict[str, str] | None = None, shape: Sequence[int] | None = None, dtype: Any = None,
        lr_mult: float | None = None, wd_mult: float | None = None, **kwargs: Any) -> Symbol:
    """A variable named ``name`` (an input or a parameter of a graph), as ``mx.sym.var``.

    ``shape``, ``dtype``, ``lr_mult`` and ``wd_mult`` become MXNet's ``__shape__``, ``__dtype__`` (its type
    flag), ``__lr_mult__`` and ``__wd_mult__`` attributes; ``attr`` adds attributes as given.

    Raises:
        TypeError: ``name`` is not a string, or an attribute value that cannot be written.
    """
    if not isinstance(name, str):
        raise TypeError(f"var: name must be a string, got {type(name).__name__}")
    attrs = {k: format_attr(v) for k, v in (attr or {}).items()}
    for key, value in (("__shape__", shape), ("__lr_mult__", lr_mult), ("__wd_mult__", wd_mult)):
        if value is not None:
            attrs[key] = format_attr(tuple(value) if key == "__shape__" else float(value))
    if dtype is not None:
        attrs["__dtype__"] = str(dtype_flag(dtype))
    attrs.update({f"__{k}__": format_attr(v) for k, v in kwargs.items() if v is not None})
    return Symbol([(SymbolNode("null", name, attrs), 0)])


Variable = var  # MXNet's other name


def Group(symbols: Iterable[Symbol]) -> Symbol:  # noqa: N802 - MXNet's name
    """One Symbol whose outputs are those of ``symbols``, in order (``mx.sym.Group``).

    Raises:
        TypeError: an item that is not a Symbol. ValueError: no symbols.
    """
    heads: list[tuple[SymbolNode, int]] = []
    for s in symbols:
        if not isinstance(s, Symbol):
            raise TypeError(f"Group: expected Symbols, got {type(s).__name__}")
        heads.extend(s.heads)
    if not heads:
        raise ValueError("Group: needs at least one Symbol")
    return Symbol(heads)


# -- reading --------------------------------------------------------------------------------------------------
def load(fname: str | os.PathLike) -> Symbol:
    """Read a symbol file (``net-symbol.json``) as ``mx.sym.load`` does.

    Raises:
        FileNotFoundError: no such file. MXNetSymbolError: the file is not symbol JSON (names the file).
    """
    with open(fname, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MXNetSymbolError(f"{os.fspath(fname)!r} is not symbol JSON: not UTF-8 text ({exc.reason} at byte "
                               f"{exc.start})") from None
    return load_json(text, source=os.fspath(fname))


def load_json(json_str: str, source: str = "<json string>") -> Symbol:
    """Parse symbol JSON text (``mx.sym.load_json``); ``source`` names it in errors.

    Raises:
        MXNetSymbolError: text that is not symbol JSON (names the source and the node at fault).
    """
    try:
        graph = json.loads(json_str)
    except json.JSONDecodeError as exc:
        raise MXNetSymbolError(f"{source} is not symbol JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
                               ) from None
    return _Reader(source).graph(graph)


class _Reader:
    """Checks one parsed JSON document field by field, naming the source and the node in every error."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, what: str) -> MXNetSymbolError:
        return MXNetSymbolError(f"{self.source} is not a readable MXNet symbol: {what}")

    def graph(self, graph: Any) -> Symbol:
        if not isinstance(graph, dict):
            raise self.fail(f"the top level is a JSON {type(graph).__name__}, not an object")
        rows = graph.get("nodes")
        if not isinstance(rows, list) or not rows:
            raise self.fail("no \"nodes\" list (or an empty one)")
        nodes: list[SymbolNode] = []
        for i, row in enumerate(rows):
            nodes.append(self.node(i, row, nodes))
        heads = graph.get("heads")
        if not isinstance(heads, list) or not heads:
            raise self.fail("no \"heads\" list (or an empty one): the graph has no output")
        return Symbol([self.entry(h, nodes, len(nodes), "heads")[:2] for h in heads])

    def node(self, i: int, row: Any, earlier: list[SymbolNode]) -> SymbolNode:
        if not isinstance(row, dict):
            raise self.fail(f"node {i} is a JSON {type(row).__name__}, not an object")
        op, name = row.get("op"), row.get("name")
        if not isinstance(op, str) or not isinstance(name, str):
            raise self.fail(f"node {i} needs string \"op\" and \"name\" fields, got op={op!r}, name={name!r}")
        attrs = next((row[k] for k in ("attrs", "attr", "param") if k in row), {})
        if not isinstance(attrs, dict) or not all(isinstance(v, str) for v in attrs.values()):
            raise self.fail(f"node {i} ({name!r}): attributes must be an object of strings, got {attrs!r}")
        inputs = row.get("inputs", [])
        if not isinstance(inputs, list):
            raise self.fail(f"node {i} ({name!r}): \"inputs\" must be a list, got {inputs!r}")
        where = f"node {i} ({name!r})"
        node = SymbolNode(op, name, attrs, [self.entry(e, earlier, i, where) for e in inputs])
        if node.is_variable and node.inputs:
            raise self.fail(f"{where} is a variable (op \"null\") with inputs")
        return node

    def entry(self, item: Any, nodes: list[SymbolNode], limit: int, where: str) -> tuple[SymbolNode, int, int]:
        if (not isinstance(item, list) or len(item) not in (2, 3)
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in item)):
            raise self.fail(f"{where}: an input must be [node, output] or [node, output, version], got {item!r}")
        source, index = item[0], item[1]
        if not 0 <= source < limit:
            raise self.fail(f"{where} refers to node {source}, which is not an earlier node (0..{limit - 1})")
        node = nodes[source]
        try:
            total = output_count(node)[0] if _outputs_known(node) else None
        except MXNetSymbolError as exc:
            raise self.fail(str(exc)) from None
        if index < 0 or (total is not None and index >= total):
            raise self.fail(f"{where} refers to output {index} of node {source} ({node.name!r}, {node.op}), which "
                            f"has {total} output{'s' if total != 1 else ''}")
        return node, index, item[2] if len(item) == 3 else 0
