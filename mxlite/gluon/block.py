"""Block: the base of every layer and model (Gluon's ``Block``), and ``Sequential``.

Assigning a Block or a Parameter to an attribute registers it. ``collect_params()`` returns
every parameter under its structural name (``'0.weight'``, ``'encoder.dense.bias'``; MXNet
2.x naming), and ``initialize`` puts all of a model's mirrors in one :class:`ParameterStore`,
so each (device, dtype) has one flat arena for the whole model.

Checkpoints (``save_parameters``) are ``.npz`` archives keyed by structural name, written
atomically; ``load_parameters`` validates the whole file before changing any parameter. It also
reads the parameter files MXNet writes (its binary NDArray-list format, told by the first bytes).
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..arrays import nd
from ..autograd.tensor import NDTensor, Tensor
from ..device import current_device
from ..formats.archive import describe_arrays, load_arrays, save_arrays, save_mxnet_arrays
from ..formats.mxnet_params import strip_arg_aux_prefixes
from ..ops.creation import array
from ..profiler import hooks as _profiling
from ._graphs import BlockGraphs
from ._hooks import HookHandle
from .parameter import (
    DeferredInitializationError,
    Parameter,
    ParameterDict,
    _device_list,
    apply_load,
    plan_from_arrays,
    plan_load,
)

__all__ = ["Block", "HybridBlock", "Sequential", "HybridSequential"]


def _shape_text(value: Any) -> str:
    """A block's output (or the inputs) as summary() shows it: ``(2, 3)``, several joined by commas."""
    if hasattr(value, "shape"):
        return str(tuple(value.shape))
    if isinstance(value, (list, tuple)):
        return ", ".join(_shape_text(v) for v in value)
    return type(value).__name__


class Block:
    """Base class of layers and models.

    Subclasses create child Blocks and Parameters in ``__init__`` (as attributes) and
    implement ``forward(*inputs)``. Calling the block calls ``forward``.

    Args:
        prefix: Gluon 1.x's name prefix, kept as :attr:`prefix`/:attr:`name` (parameters are named by
            structure, not by prefix).
        params: Gluon 1.x's parameter sharing: a mapping name -> Parameter (another block's ``params``,
            or a ``collect_params()``). A Parameter this block assigns under a name found there is
            replaced by the shared one (``Dense(..., params=embedding.params)`` ties ``weight``), and so is
            a child block's parameter whose structural name below this block (``'dense0.weight'``) is
            found there (``Net(params=other.collect_params())`` shares every parameter). Shapes merge
            where one side is unknown.

    Raises:
        TypeError: ``params`` that is not a mapping.
        ValueError: a shared parameter whose shape or dtype contradicts the one the block declares.
    """

    def __init__(self, prefix: str | None = None, params: Any = None) -> None:
        if params is not None and not hasattr(params, "keys"):
            raise TypeError(f"{type(self).__name__}: params must be a ParameterDict (another block's params or "
                            f"collect_params()), got {type(params).__name__}")
        object.__setattr__(self, "_children", OrderedDict())
        object.__setattr__(self, "_reg_params", OrderedDict())
        object.__setattr__(self, "_prefix", prefix or "")
        object.__setattr__(self, "_shared_params", params)
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())

    # -- Gluon 1.x naming -------------------------------------------------------------------
    @property
    def prefix(self) -> str:
        """The ``prefix`` given at construction (Gluon 1.x); structural names do not use it."""
        return self._prefix

    @property
    def name(self) -> str:
        """The prefix without its trailing underscore, else the class name in lower case."""
        return self._prefix.rstrip("_") or type(self).__name__.lower()

    def name_scope(self) -> contextlib.AbstractContextManager[None]:
        """Gluon 1.x's naming scope; parameters are named by structure in mxlite, so it does nothing."""
        return contextlib.nullcontext()

    # -- registration ---------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if "_children" not in self.__dict__:
            # Before Block.__init__ ran: plain attributes are kept (MXNet 1.x's Block allows them); a Block or
            # a Parameter cannot be registered yet
            if isinstance(value, (Block, Parameter)):
                raise RuntimeError(f"{type(self).__name__}.__init__ must call super().__init__() before assigning "
                                   f"the {type(value).__name__} attribute {name!r}")
            object.__setattr__(self, name, value)
            return
        registered = self._children.get(name) or self._reg_params.get(name)
        if registered is not None and not isinstance(value, (Block, Parameter)):
            raise TypeError(f"changing attribute {name!r} of {type(self).__name__} from "
                            f"{type(registered).__name__} to {type(value).__name__} is not allowed")
        if isinstance(value, Block):
            self._reg_params.pop(name, None)
            self.register_child(value, name)
        elif isinstance(value, Parameter):
            value = self._shared_or(name, value)
            self._children.pop(name, None)
            # ``self.w = self.params.get('weight', ...)``: the parameter is already registered as 'weight'.
            if not any(p is value and n != name for n, p in self._reg_params.items()):
                self._reg_params[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._children.pop(name, None)
        self._reg_params.pop(name, None)
        object.__delattr__(self, name)

    def register_child(self, block: Block, name: str | None = None) -> None:
        """Register ``block`` as a child under ``name`` (default: its index)."""
        if not isinstance(block, Block):
            raise TypeError(f"register_child expects a Block, got {type(block).__name__}")
        name = str(len(self._children)) if name is None else name
        self._children[name] = block
        if self._shared_params:
            for path, param in list(block._iter_params(name + ".")):
                shared = self._shared_or(path, param)
                if shared is not param:
                    owner, _, attr = path.rpartition(".")
                    target: Block = self
                    for part in owner.split("."):
                        target = target._children[part]
                    object.__setattr__(target, attr, shared)
                    target._reg_params[attr] = shared

    def _shared_or(self, name: str, param: Parameter) -> Parameter:
        """The Parameter of ``params=`` (Gluon 1.x sharing) called ``name``, merged with ``param``'s declared
        shape, else ``param`` itself."""
        shared = self._shared_params.get(name) if self._shared_params else None
        if not isinstance(shared, Parameter) or shared is param:
            return param
        if shared.dtype != param.dtype:
            raise ValueError(f"{type(self).__name__}: shared parameter {shared.label!r} has dtype {shared.dtype}, "
                             f"but {name!r} is declared with dtype {param.dtype}")
        try:
            if param.shape is not None:
                shared.shape = param.shape
        except ValueError:
            raise ValueError(f"{type(self).__name__}: shared parameter {shared.label!r} has shape {shared.shape}, "
                             f"but {name!r} is declared with shape {param.shape}") from None
        return shared

    @property
    def params(self) -> ParameterDict:
        """This block's own parameters (not its children's), by attribute name.

        ``self.params.get('weight', shape=(3, 4))`` creates and registers a parameter (Gluon 1.x).
        """
        shared = self._shared_params
        out = ParameterDict(self._reg_params, prefix=self._prefix,
                            shared=shared if isinstance(shared, ParameterDict) else None)
        out._owner = self
        return out

    def setattr(self, name: str, value: Any) -> None:
        """Set attribute ``name`` (``grad_req``, ``lr_mult`` ...) of every parameter of this block and its children."""
        self.collect_params().setattr(name, value)

    def register_forward_pre_hook(self, hook: Callable[..., Any]) -> HookHandle:
        """Call ``hook(block, inputs)`` before each forward; returns a handle whose ``detach()`` removes it."""
        return HookHandle(self._forward_pre_hooks, hook)

    def register_forward_hook(self, hook: Callable[..., Any]) -> HookHandle:
        """Call ``hook(block, inputs, output)`` after each forward; returns a handle whose ``detach()`` removes it."""
        return HookHandle(self._forward_hooks, hook)

    def summary(self, *inputs: Any) -> None:
        """Print each layer's output shape and parameter count for one forward pass on ``inputs``, as MXNet does.

        One row per block call, in the order the calls finish (``Dense-3``: the class and the row number),
        containers (``Sequential``) left out; a row counts the block's own parameters. The totals add the
        rows up, so a parameter shared by two layers counts twice ("duplicate included"); the shared
        part and the unique count follow. Parameters must be initialised (deferred shapes are completed
        by this pass).
        """
        rows: list[tuple[str, str, int]] = [("Input", _shape_text(inputs), 0)]
        totals = {"params": 0, "trainable": 0, "shared": 0}
        seen: set[int] = set()
        handles = []

        def hook(block: Block, args: Any, out: Any) -> None:
            count = 0
            for p in block._reg_params.values():
                if not p.is_initialized:  # unused by the pass, shape unknown (or never initialised)
                    p.data()  # raises as MXNet's summary (which reads p.data()) does: no row with a bogus count
                size = int(np.prod(p.shape))
                count += size
                totals["trainable"] += 0 if p.grad_req == "null" else size
                if id(p) in seen:
                    totals["shared"] += size
                seen.add(id(p))
            totals["params"] += count
            rows.append((f"{type(block).__name__}-{len(rows)}", _shape_text(out), count))

        def register(block: Block) -> None:
            if not isinstance(block, Sequential):
                handles.append(block.register_forward_hook(hook))

        self.apply(register)
        try:
            self(*inputs)
        finally:
            for h in handles:
                h.detach()
        row = "{:>20}  {:>42} {:>15}"
        print("-" * 80)
        print(row.format("Layer (type)", "Output Shape", "Param #"))
        print("=" * 80)
        for name, shape, count in rows:
            print(row.format(name, shape, count))
        print("=" * 80)
        print(f"Parameters in forward computation graph, duplicate included\n   Total params: {totals['params']}\n"
              f"   Trainable params: {totals['trainable']}\n"
              f"   Non-trainable params: {totals['params'] - totals['trainable']}\n"
              f"Shared params in forward computation graph: {totals['shared']}\n"
              f"Unique parameters in model: {totals['params'] - totals['shared']}")
        print("-" * 80)

    # -- parameters -----------------------------------------------------------------------
    def collect_params(self, select: str | None = None) -> ParameterDict:
        """Every parameter of this block and its descendants, once each, by structural name.

        A parameter reachable under several names (a child block assigned to two attributes, a parameter
        shared through ``params=`` or :meth:`share_parameters`) is listed once, under the first of them,
        as MXNet 1.x lists each Parameter once; its other names still resolve (``params['b.weight']``).
        ``save_parameters`` and ``load_parameters`` use every name, as MXNet's do.

        Args:
            select: a regular expression; only names it matches (``re.match``) are kept,
                e.g. ``'.*weight'`` or ``'0\\.|1\\.'``.
        """
        self._check_container_with_block()
        pattern = re.compile(select) if select is not None else None
        out = ParameterDict()
        listed: set[int] = set()
        for name, param in self._iter_params(""):
            if param._path is None:
                param._path = name
            if pattern is not None and not pattern.match(name):
                continue
            if id(param) in listed:
                out._aliases[name] = param
            else:
                listed.add(id(param))
                out[name] = param
        for name, view in self._iter_param_aliases("", set()):
            if pattern is None or pattern.match(name):
                out._aliases[name] = view
        return out

    def _structural_params(self) -> ParameterDict:
        """Every parameter under every structural name it has (a shared one under each): what
        ``save_parameters`` writes and ``load_parameters`` expects, as MXNet's ``_collect_params_with_prefix``."""
        out = ParameterDict()
        for name, param in self._iter_params(""):
            out[name] = param
        return out

    def _iter_param_aliases(self, prefix: str, visited: set[int]) -> Iterator[tuple[str, Any]]:
        """Views a block offers by name besides its parameters (``_param_aliases``: an RNN layer's 'rnn_param'),
        each block's under its first name only (``visited``: the blocks seen)."""
        visited.add(id(self))
        aliases = getattr(self, "_param_aliases", None)
        if aliases is not None:
            for name, view in aliases().items():
                yield prefix + name, view
        for name, child in self._children.items():
            if id(child) not in visited:
                yield from child._iter_param_aliases(prefix + name + ".", visited)

    def _check_container_with_block(self) -> None:
        """Warn about Blocks kept in a plain list, tuple or dict attribute (as MXNet 2.x does).

        Such Blocks are not registered, so their parameters are neither collected, initialised nor
        saved; ``register_child`` or a ``Sequential`` registers them. Checks every descendant too.
        """
        registered = {id(c) for c in self._children.values()}

        def hides_block(value: Any) -> bool:
            if isinstance(value, (list, tuple)):
                return any(hides_block(v) for v in value)
            if isinstance(value, dict):
                return any(hides_block(v) for v in value.values())
            return isinstance(value, Block) and id(value) not in registered

        for name, value in vars(self).items():
            if (isinstance(value, (list, tuple, dict)) and not name.startswith("__")
                    and name not in _BLOCK_INTERNALS and hides_block(value)):
                warnings.warn(f'"{type(self).__name__}.{name}" is an unregistered container with Blocks: Blocks '
                              "inside a list, tuple or dict are not registered, so their parameters are not "
                              "collected. Register them with register_child() or use nn.Sequential instead.",
                              stacklevel=3)
        for child in self._children.values():
            child._check_container_with_block()

    def _iter_params(self, prefix: str) -> Iterator[tuple[str, Parameter]]:
        for name, param in self._reg_params.items():
            yield prefix + name, param
        for name, child in self._children.items():
            yield from child._iter_params(prefix + name + ".")

    def initialize(self, init: Any = None, device: Any = None, verbose: bool = False,
                   force_reinit: bool = False, ctx: Any = None) -> None:
        """Initialise every parameter on ``device`` (a Device or a list: one mirror each).

        ``init`` (default ``Uniform()``) applies to parameters without their own initializer,
        following MXNet's name rules (biases zero, gammas one). Parameters of unknown shape
        are initialised during the first forward pass.

        Raises:
            ValueError: duplicate devices, or an unknown shape on a parameter that cannot defer.

        ``ctx`` is MXNet 1.x's name of ``device``.
        """
        self.collect_params().initialize(init, device, verbose, force_reinit, ctx)

    def zero_grad(self) -> None:
        """Zero every parameter's gradient."""
        for param in self.collect_params().values():
            param.zero_grad()

    def reset_device(self, device: Any = None, ctx: Any = None) -> None:
        """Move every parameter to ``device`` (``ctx``; a Device or list), keeping values."""
        for param in self.collect_params().values():
            param.reset_device(device if ctx is None else ctx)

    reset_ctx = reset_device

    def cast(self, dtype: Any) -> None:
        """Change every parameter's dtype."""
        for param in self.collect_params().values():
            param.cast(dtype)

    def share_parameters(self, shared: dict[str, Parameter]) -> Block:
        """Use the given Parameters (by structural name) in place of this block's own."""
        for name, param in shared.items():
            owner, _, attr = name.rpartition(".")
            block: Block = self
            for part in owner.split(".") if owner else []:
                block = block._children[part]
            if attr not in block._reg_params:
                raise ValueError(f"share_parameters: this block has no parameter named {name!r}")
            setattr(block, attr, param)
        return self

    def apply(self, fn: Callable[[Block], None]) -> Block:
        """Call ``fn`` on every descendant and then on this block."""
        for child in self._children.values():
            child.apply(fn)
        fn(self)
        return self

    def hybridize(self, active: bool = True, static_alloc: bool = False, static_shape: bool = False,
                  **kwargs: Any) -> None:
        """Run the block as CUDA graphs on GPUs (``static_alloc=True, static_shape=True``), else eagerly.

        With both flags, a call on GPU tensors is captured as a CUDA graph of the forward and, under
        ``autograd.record()``, one of the backward, and later calls with the same signature (shapes,
        dtypes, devices, recording and training flags) replay them: one launch instead of a few CuPy calls
        per layer. The first call of each signature runs eagerly (warm-up), the second captures. Callers get
        fresh output arrays on every call. What cannot be captured (a read by the host in ``forward``,
        ``mx.random`` draws, ...) runs eagerly with one warning per cause; docs/graphs.md lists them. Any
        other exception ``forward`` raises during the capture is its own: the call raises it, once and
        unchanged. CPU devices, calls with an empty tensor argument (a dimension of size 0), and
        ``hybridize()`` without both flags, run eagerly, as does every call when nvmath-python (cuBLAS that a
        graph can capture) is missing. The block's children are covered by its graphs.

        ``hybridize(False)`` (or a new ``hybridize`` call) drops the block's graphs and their memory.
        Other MXNet arguments (``inline_limit``, ``forward_bulk_size``, ...) are accepted and ignored.

        Warning: a graph replays the forward as it ran once, at capture: Python side effects in ``forward``
        (counters, printing, branches on Python state) happen at capture only; hybridize again after
        changing the block's structure or such state.
        """
        def drop(block: Block) -> None:
            graphs = block.__dict__.get("_graphs")
            if graphs is not None:
                graphs.release()
            object.__setattr__(block, "_graphs", None)

        self.apply(drop)  # this block's graphs cover its children
        self._watch_export_inputs(active)
        if active and static_alloc and static_shape:
            object.__setattr__(self, "_graphs", BlockGraphs(self))

    def graph_info(self) -> list[dict[str, Any]]:
        """The CUDA graphs this block holds (``hybridize(static_alloc=True, static_shape=True)`` on GPUs): one
        dict per captured signature with ``label``, ``device``, ``bytes`` (memory held, in bytes),
        ``launches`` and ``backward`` (whether the backward was captured too). Empty when there are none."""
        graphs = self.__dict__.get("_graphs")
        return [] if graphs is None else graphs.info()

    def drop_graphs(self) -> int:
        """Drop the CUDA graphs this block and its children hold, and their memory, keeping the block hybridized.

        The next call of each signature captures it again (no eager warm-up: that ran already). For every
        graph of the process at once, ``mx.device.graphs.clear()``; to stop capturing, ``hybridize(False)``.

        Returns:
            How many signatures' graphs were dropped.
        """
        dropped = 0
        for _, block in self._iter_blocks(""):
            graphs = block.__dict__.get("_graphs")
            if graphs is not None:
                dropped += len(graphs.info())
                graphs.release()
        return dropped

    # -- export to MXNet -------------------------------------------------------------------
    def export(self, path: str | os.PathLike, epoch: int = 0, remove_amp_cast: bool = True, *,
               inputs: Any = None) -> tuple[str, str]:
        """Write the model for MXNet: its graph to ``path-symbol.json``, its parameters to ``path-%04d.params``.

        MXNet's ``HybridBlock.export`` files: ``gluon.SymbolBlock.imports`` (MXNet's or mxlite's) runs them.
        mxlite keeps no graph, so the forward runs once more, in inference mode, and what it computes is
        written in MXNet's operators (``FullyConnected``, ``Convolution``, ``BatchNorm``, ``elemwise_add``, ...):
        on ``inputs`` (an array, or a list of arrays) when given, else, as MXNet's order goes (``hybridize()``,
        a call, ``export``), on arrays of ones shaped as the last call's inputs since ``hybridize()``.
        Variables are named by structural name (``features.0.weight``), inputs ``data`` (``data0``, ``data1``,
        ... for several); parameters are saved as ``arg:<name>`` and ``aux:<name>`` (moving statistics).
        ``remove_amp_cast`` is MXNet's; mxlite's graphs hold no AMP casts.

        Returns:
            The symbol file's and the parameter file's names.

        Raises:
            ValueError: no ``inputs`` and no call since ``hybridize()``, or a negative ``epoch``.
            TypeError: inputs that are not arrays.
            NotImplementedError: an operation or constant array MXNet's symbol file cannot hold (named).
        """
        if not _EXPORTERS:
            raise RuntimeError("export: the exporter (mxlite.gluon._export) is not loaded; import mxlite.gluon")
        return _EXPORTERS[0](self, path, epoch, inputs)

    def _watch_export_inputs(self, active: bool) -> None:
        """While hybridized (``active``), keep the shapes, dtypes and devices of this block's last call for
        :meth:`export`, as ``_export_signature``; its descendants stop keeping theirs (this block's calls cover
        them, as its CUDA graphs do)."""
        for _, block in self._iter_blocks(""):
            handle = vars(block).pop("_export_watch", None)
            if handle is not None:
                handle.detach()
            vars(block).pop("_export_signature", None)
        if active:
            object.__setattr__(self, "_export_watch", self.register_forward_pre_hook(_remember_export_signature))

    # -- checkpoints ----------------------------------------------------------------------
    def save_parameters(self, filename: str | os.PathLike, deduplicate: bool = False, *, format: str = "npz") -> None:
        """Write every parameter's value (first mirror) to ``filename``.

        ``format="npz"`` (default) writes mxlite's ``.npz`` archive keyed by structural name;
        ``format="mxnet"`` writes MXNet 1.x's ``save_parameters`` file (its binary format, the names MXNet
        1.x uses, recurrent layers' weights included), which MXNet 1.9's ``load_parameters`` reads.
        The write is atomic: a crash leaves any previous file at ``filename`` intact.
        With ``deduplicate``, a shared parameter is saved once, under its first name.

        Raises:
            ValueError: an unknown ``format``, or (``"mxnet"``) a 0-d parameter, which MXNet 1.x cannot hold.
            TypeError: (``"mxnet"``) a dtype MXNet has no type flag for.
        """
        if format not in ("npz", "mxnet"):
            raise ValueError(f"save_parameters: format must be 'npz' or 'mxnet', got {format!r}")
        arrays: dict[str, np.ndarray] = {}
        seen: set[int] = set()
        for name, param in self._structural_params().items():
            if deduplicate and id(param) in seen:
                continue
            seen.add(id(param))
            arrays[name] = param._first_mirror().asnumpy()
        if format == "npz":
            save_arrays(filename, arrays)
            return
        for prefix, hook in self._layout_hooks("_to_mxnet_layout"):
            arrays = hook(prefix, arrays)
        save_mxnet_arrays(filename, list(arrays.values()), list(arrays))

    def load_parameters(self, filename: str | os.PathLike, device: Any = None, allow_missing: bool = False,
                        ignore_extra: bool = False, cast_dtype: bool = False, dtype_source: str = "current",
                        ctx: Any = None) -> None:
        """Load values saved by :meth:`save_parameters`; all-or-nothing.

        ``filename`` is an mxlite ``.npz`` or a file MXNet wrote (``save_parameters``, ``nd.save`` of
        a dict: its binary format, dense arrays); MXNet's ``arg:``/``aux:`` name prefixes are removed.

        Everything is validated before any parameter changes, from the file's array headers before
        any array is read: names missing from the file (unless ``allow_missing``), names the model
        lacks (unless ``ignore_extra``), shape mismatches (a zero-size dimension cannot complete a
        deferred shape), and dtype mismatches (unless ``cast_dtype``; then ``dtype_source``
        'current' keeps the model's dtype, 'saved' adopts the file's).
        Uninitialised parameters are initialised on ``device`` (default: current device).

        Raises:
            FileNotFoundError: no such file.
            ValueError: unreadable file, or mismatches (every problem listed at once).
        """
        plan = self._plan_load(filename, allow_missing, ignore_extra, cast_dtype, dtype_source)
        self._apply_load(plan, device if ctx is None else ctx)

    def load_dict(self, param_dict: dict[str, Any], device: Any = None, allow_missing: bool = False,
                  ignore_extra: bool = False, cast_dtype: bool = False, dtype_source: str = "current",
                  ctx: Any = None) -> None:
        """Load parameter values from a dict name -> array (MXNet 2.x's ``load_dict``); all-or-nothing.

        Names are structural (``collect_params()``'s; MXNet's ``arg:``/``aux:`` prefixes are removed); values
        are arrays (keeping their dtype) or NumPy arrays, which become float32 first as in MXNet (it passes
        them through ``nd.array``). Checks and errors as :meth:`load_parameters`.
        """
        values = {str(k): (v.asnumpy() if hasattr(v, "asnumpy") else np.asarray(v, dtype=np.float32))
                  for k, v in param_dict.items()}
        values = strip_arg_aux_prefixes(values, "<dict given to load_dict>")
        plan = self._plan_load("<dict given to load_dict>", allow_missing, ignore_extra, cast_dtype, dtype_source,
                               arrays=values)
        self._apply_load(plan, device if ctx is None else ctx)

    def _plan_load(self, filename: str | os.PathLike, allow_missing: bool = False, ignore_extra: bool = False,
                   cast_dtype: bool = False, dtype_source: str = "current", *,
                   data: bytes | None = None, arrays: dict[str, np.ndarray] | None = None
                   ) -> list[tuple[Parameter, np.ndarray]]:
        """Read and check a :meth:`save_parameters` file, changing nothing: [(parameter, value)] to apply.

        ``data``: the file's bytes, already read (and verified) by the caller, parsed in place of
        reading ``filename``, which then only names the file in errors (``mx.checkpoint.load``).
        ``arrays``: the values by name, in place of a file (:meth:`load_dict`).

        Raises the errors of :meth:`load_parameters`.
        """
        params = self._structural_params()
        options = dict(allow_missing=allow_missing, ignore_extra=ignore_extra, cast_dtype=cast_dtype,
                       dtype_source=dtype_source)
        if arrays is None:
            hooks = list(self._layout_hooks("_from_mxnet_layout"))
            names = set(strip_arg_aux_prefixes(describe_arrays(filename, data=data), filename)) if hooks else set()
            # extra names under a recurrent layer may hold its weights a second time: those the hooks check
            if not hooks or (set(params) <= names
                             and not any(n.startswith(p) for n in names - set(params) for p, _ in hooks)):
                # the file names this model's parameters as they are: headers first, then only what is needed
                return plan_load(filename, params, data=data, **options)
            arrays = strip_arg_aux_prefixes(load_arrays(filename, data=data), filename)  # MXNet's RNN layouts
        return plan_from_arrays(filename, params, self._from_mxnet_layouts(arrays), **options)

    def _layout_hooks(self, name: str) -> Iterator[tuple[str, Callable[..., Any]]]:
        """(structural prefix, hook) of every descendant that has method ``name`` (the recurrent layers'
        ``_from_mxnet_layout``/``_to_mxnet_layout``: MXNet's other names and packings of their weights)."""
        for path, block in self._iter_blocks(""):
            hook = getattr(block, name, None)
            if hook is not None:
                yield path, hook

    def _iter_blocks(self, prefix: str) -> Iterator[tuple[str, Block]]:
        yield prefix, self
        for name, child in self._children.items():
            yield from child._iter_blocks(prefix + name + ".")

    def _from_mxnet_layouts(self, loaded: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A loaded file's arrays with MXNet 1.x's ``_unfused`` RNN names and 2.x's fused ``rnn_param`` turned
        into this model's structural names."""
        for prefix, hook in self._layout_hooks("_from_mxnet_layout"):
            loaded = hook(prefix, loaded)
        return loaded

    def _apply_load(self, plan: list[tuple[Parameter, np.ndarray]], device: Any = None) -> None:
        """Apply what :meth:`_plan_load` checked (uninitialised parameters are initialised on ``device``)."""
        apply_load(plan, _device_list(device) if device is not None else [current_device()])

    # -- calling --------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _profiling.recording and _profiling.open_layer() is not self:  # mx.profiler runs: time this call
            with _profiling.layer_scope(self, args):
                return self.__call__(*args, **kwargs)
        if any(isinstance(a, np.ndarray) for a in args):
            args = _tensor_args(args)
        for hook in list(self._forward_pre_hooks.values()):
            hook(self, args)
        graphs = self.__dict__.get("_graphs")  # hybridize(static_alloc=True, static_shape=True): CUDA graphs
        try:
            out = self.forward(*args, **kwargs) if graphs is None else graphs(args, kwargs)
        except DeferredInitializationError:
            # MXNet 2.x: a block that uses its deferred parameters directly defines infer_shape(*args) to set
            # their shapes from the inputs; the forward then runs again (its parameters initialise on first use)
            if getattr(self, "infer_shape", None) is None:
                raise
            self.infer_shape(*args, **kwargs)
            out = self.forward(*args, **kwargs)
        if any(a.__class__ is NDTensor for a in args):
            out = _nd_face(out)  # mx.nd in, mx.nd out, as in MXNet 1.x (also through Embedding's index input)
        for hook in list(self._forward_hooks.values()):
            hook(self, args, out)
        return out

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Compute the block's output; subclasses override.

        A Gluon 1.x block that defines ``hybrid_forward(self, F, x, *args, **params)`` instead gets it
        called with ``F`` the ``mx.nd`` namespace and its own parameters by name, on ``x``'s device.

        Raises:
            NotImplementedError: neither ``forward`` nor ``hybrid_forward`` is defined (a container Block).
        """
        hybrid = getattr(self, "hybrid_forward", None)
        if hybrid is None:
            raise NotImplementedError(f"{type(self).__name__} must implement forward() (or hybrid_forward())")
        first = next((a for a in args if hasattr(a, "device")), None)
        params = {}
        for name, param in self._reg_params.items():
            if not param.is_initialized:
                param._finish_deferred_init()
            params[name] = param.data(first.device) if first is not None else param.data()
        return hybrid(nd, *args, **kwargs, **params)

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}("]
        for name, child in self._children.items():
            body = repr(child).replace("\n", "\n  ")
            lines.append(f"  ({name}): {body}")
        lines.append(")")
        return "\n".join(lines) if self._children else f"{type(self).__name__}({self._extra_repr()})"

    def _extra_repr(self) -> str:
        return ""


_BLOCK_INTERNALS = frozenset({"_children", "_reg_params", "_forward_hooks", "_forward_pre_hooks"})

HybridBlock = Block  # mxlite has no symbolic mode: every block is imperative

# HybridBlock.export's tracer (_export.py) reads every layer, and the layers import this module: the tracer
# registers itself here when mxlite.gluon is imported, so this module never imports it.
_EXPORTERS: list[Callable[[Block, Any, int, Any], tuple[str, str]]] = []


def register_exporter(export: Callable[[Block, Any, int, Any], tuple[str, str]]) -> None:
    """Make ``export(block, path, epoch, inputs)`` what :meth:`Block.export` calls (``mxlite.gluon._export``
    registers its tracer at import; a later registration replaces the earlier one)."""
    _EXPORTERS[:] = [export]


def _remember_export_signature(block: Block, args: tuple) -> None:
    if args and all(isinstance(a, Tensor) for a in args):
        object.__setattr__(block, "_export_signature", [(a.shape, a.dtype, a.device) for a in args])


def _nd_face(value: Any) -> Any:
    """A block's output with the ``mx.nd`` face (a view, no copy), in lists and tuples too."""
    if value.__class__ is Tensor:
        return value.as_nd_ndarray()
    if type(value) in (list, tuple):
        return type(value)(_nd_face(v) for v in value)
    return value


def _tensor_args(args: tuple) -> tuple:
    """NumPy arrays among ``args`` as Tensors on the device of the first Tensor argument (else the current one)."""
    like = next((a for a in args if isinstance(a, Tensor)), None)
    dev = like.device if like is not None else current_device()
    # A float NumPy operand (a label) takes the dtype of a float Tensor operand, so float64 data does not upcast.
    cast = like.dtype if like is not None and np.issubdtype(like.dtype, np.floating) else None
    return tuple(array(a, dev, cast if cast is not None and np.issubdtype(a.dtype, np.floating) else None)
                 if isinstance(a, np.ndarray) else a for a in args)


class Sequential(Block):
    """Children applied in order: ``net = Sequential(); net.add(Dense(64), Dense(10))``."""

    def __init__(self, *blocks: Block, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if blocks:
            self.add(*blocks)

    def add(self, *blocks: Block) -> None:
        """Append blocks; their structural names are their positions ('0', '1', ...)."""
        for block in blocks:
            self.register_child(block)

    def forward(self, x: Any, *args: Any) -> Any:
        for block in self._children.values():
            x = block(x, *args)
            args = ()
        return x

    def __getitem__(self, key: int | slice) -> Any:
        children = list(self._children.values())
        if isinstance(key, slice):
            net = type(self)()
            net.add(*children[key])
            return net
        return children[key]

    def __len__(self) -> int:
        return len(self._children)


HybridSequential = Sequential

