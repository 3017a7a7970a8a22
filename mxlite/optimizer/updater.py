"""Updater: applies an optimizer to (index, grad, weight) triples, creating states lazily.

States are saved with :meth:`Updater.get_states` as an in-memory ``.npz`` archive read back
with ``allow_pickle=False`` (MXNet pickles them; mxlite never unpickles anything):

* every state array is one entry, named after its index and its position in the (nested)
  state: the momentum of index 3 is ``'3'``, Adam's ``(m, v)`` of index 3 are ``'3/0'`` and
  ``'3/1'``, and a multi-precision state ``(master, (m, v))`` gives ``'3/0'``, ``'3/1/0'``,
  ``'3/1/1'`` (string indices are prefixed ``'str:'``);
* ``__manifest__`` (UTF-8 JSON as a uint8 array) records the state's structure: which entries
  form which tuple, where ``None`` stands, which tuple is a
  :class:`~mxlite.optimizer.MultiPrecisionState`, and the dtype of bfloat16 arrays (stored as
  uint16 bits);
* with ``dump_optimizer=True``, ``__optimizer__`` (JSON, likewise) holds
  :meth:`Optimizer.state_dict`: hyperparameters, multipliers, update counts and the
  scheduler's state.

Loaded states are NumPy arrays; each moves to its weight's device at that weight's next update
(MXNet's ``states_synced``).
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

from ..autograd.tensor import Tensor
from ..device import device_of
from ..formats.archive import describe_arrays, load_arrays, memory_limit
from .optimizer import MultiPrecisionState, Optimizer

__all__ = ["Updater", "get_updater"]

_FORMAT = "mxlite.updater.states"
_VERSION = 1
_MANIFEST = "__manifest__"
_OPTIMIZER = "__optimizer__"
_EXTRA = "__extra__"
_LABEL = "optimizer states"  # what the archive reader names in its errors (the bytes have no path here)
_JSON_LIMIT = 64 << 20  # bytes a JSON section may declare: a Trainer's parameter list of a huge model is a few MB


def _raw_grad(x: Any) -> Any:
    if isinstance(x, Tensor):
        return x.array
    return x  # a raw array, or a RowSparseTensor (the optimizer applies lazy_update or densifies)


class Updater:
    """Callable ``updater(index, grad, weight)`` (single items or equal-length lists).

    ``weight`` and ``grad`` are Tensors or raw NumPy/CuPy arrays (a gradient may also be a
    :class:`~mxlite.ops.sparse.RowSparseTensor`). States are created on first use of each index
    with ``optimizer.create_state_multi_precision`` and kept in ``states``; updates go
    through ``optimizer.update_multi_precision``. The optimizer's update counts are those of
    the weight's device id (MXNet's ``_set_current_context``).
    """

    def __init__(self, optimizer: Optimizer) -> None:
        self.optimizer = optimizer
        self.states: dict[Any, Any] = {}
        self.states_synced: dict[Any, bool] = {}

    def __call__(self, index: Any, grad: Any, weight: Any) -> None:
        if not isinstance(index, (list, tuple)):
            index, grad, weight = [index], [grad], [weight]
        if not (len(index) == len(grad) == len(weight)):
            raise ValueError(f"updater: {len(index)} indices, {len(grad)} grads, {len(weight)} weights")
        opt = self.optimizer
        previous = opt._index_update_count
        try:
            for i, g, w in zip(index, grad, weight):
                device = w.device if isinstance(w, Tensor) else device_of(w)
                raw = w.array if isinstance(w, Tensor) else w
                opt.set_current_mirror(device.device_id)
                with device.use():
                    if i not in self.states:
                        self.states[i] = opt.create_state_multi_precision(i, raw)
                        self.states_synced[i] = True
                    elif not self.states_synced.get(i, True):
                        self.states[i] = _to_array_module_of(self.states[i], raw)
                        self.states_synced[i] = True
                    opt.update_multi_precision(i, raw, _raw_grad(g), self.states[i])
        finally:
            opt._index_update_count = previous

    # -- save / restore -------------------------------------------------------------------
    def get_states(self, dump_optimizer: bool = False) -> bytes:
        """Every state (and, with ``dump_optimizer``, the optimizer's values) as ``.npz`` bytes.

        See the module docstring for the layout. Nothing is pickled.

        Raises:
            TypeError: an index that is not an int or str, or a state leaf that is not an
                array, a tuple/list, None, or a Python number.
        """
        return pack_states(self.states, self.optimizer.state_dict() if dump_optimizer else None)

    def set_states(self, states: bytes) -> None:
        """Restore bytes from :meth:`get_states`; continuing then matches the saved run bit for bit.

        With an optimizer section, the optimizer must be of the same class with the same
        scheduler class (its values are restored into it, see
        :meth:`Optimizer.load_state_dict`). Nothing changes unless the whole archive is valid.

        Raises:
            TypeError: ``states`` is not bytes.
            ValueError: not an archive written by :meth:`get_states` (garbage, truncated,
                pickled objects, a missing or malformed manifest, a missing array), or an
                optimizer section that does not fit this optimizer.
        """
        if not isinstance(states, (bytes, bytearray, memoryview)):
            raise TypeError(f"set_states expects the bytes returned by get_states, got {type(states).__name__}")
        restored, optimizer_state, _ = unpack_states(states)
        if optimizer_state is not None:
            self.optimizer.load_state_dict(optimizer_state)
        self.states = restored
        self.states_synced = dict.fromkeys(restored, False)


def get_updater(optimizer: Optimizer) -> Updater:
    """An :class:`Updater` for ``optimizer``."""
    return Updater(optimizer)


# -- the archive ----------------------------------------------------------------------------
def pack_states(states: dict[Any, Any], optimizer_state: dict[str, Any] | None = None,
                extra: Any = None) -> bytes:
    """``states`` ({index: state}) as ``.npz`` bytes (layout: the module docstring).

    ``optimizer_state`` (an :meth:`Optimizer.state_dict`) and ``extra`` (any JSON value, e.g.
    the Trainer's parameter list) are stored as JSON entries when given.

    Raises:
        TypeError: an index that is not an int or str, or a state leaf that is not an
            array, a tuple/list, None, or a Python number.
    """
    arrays: dict[str, np.ndarray] = {}
    entries = []
    for key, state in states.items():
        if isinstance(key, bool) or not isinstance(key, (int, str)):
            raise TypeError(f"get_states: index {key!r} must be an int or a str")
        name = str(key) if isinstance(key, int) else f"str:{key}"
        entries.append([key, _encode(state, name, arrays)])
    arrays[_MANIFEST] = _json_bytes({"format": _FORMAT, "version": _VERSION, "states": entries})
    if optimizer_state is not None:
        arrays[_OPTIMIZER] = _json_bytes(optimizer_state)
    if extra is not None:
        arrays[_EXTRA] = _json_bytes(extra)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def unpack_states(data: bytes | bytearray | memoryview, *, limit: int | None = None) -> tuple[dict[Any, Any], Any, Any]:
    """Read :func:`pack_states` bytes: ``(states, optimizer_state or None, extra or None)``.

    Loaded arrays are NumPy arrays. Nothing is unpickled. Headers come first, as for parameter
    files (:func:`mxlite.formats.archive.load_arrays`): every member's ``.npy`` header is checked
    against the zip's sizes, the JSON sections may declare at most :data:`_JSON_LIMIT` bytes each,
    and the state arrays the manifest names must fit in ``limit`` bytes together before any of them
    is read (arrays it does not name are never read), so a small compressed file cannot make the
    reader allocate what it does not announce.

    Args:
        data: the archive's bytes.
        limit: the most bytes the state arrays may declare (a Trainer passes a bound from its
            parameters' sizes); default: this machine's memory.

    Raises:
        ValueError: garbage, truncated data, pickled objects, a missing or malformed manifest,
            a missing array, an unknown format version, or sections or arrays over their limits.
    """
    blob = bytes(data)
    try:
        specs = describe_arrays(_LABEL, data=blob)
        sections = [name for name in (_MANIFEST, _OPTIMIZER, _EXTRA) if name in specs]
        for name in sections:
            if specs[name].nbytes > _JSON_LIMIT:
                raise ValueError(f"entry {name!r} declares {specs[name].nbytes} bytes, more than the "
                                 f"{_JSON_LIMIT} bytes a JSON section may hold")
        arrays = load_arrays(_LABEL, data=blob, names=sections)
    except Exception as exc:  # noqa: BLE001 - a damaged zip raises anything from EOFError to BadZipFile
        raise ValueError(f"cannot read optimizer states: not an mxlite updater archive "
                         f"({type(exc).__name__}: {exc})") from exc
    manifest = _json_entry(arrays, _MANIFEST)
    if isinstance(manifest, dict) and isinstance(manifest.get("states"), list):
        named = {n for entry in manifest["states"] if isinstance(entry, list) and len(entry) == 2
                 for n in _array_names(entry[1]) if n in specs and n not in sections}
        total = sum(specs[n].nbytes for n in named)
        limit = memory_limit() if limit is None else limit
        if total > limit:
            raise ValueError(f"cannot read optimizer states: its state arrays declare {total} bytes, more than the "
                             f"{limit} bytes they may take (the model's parameters bound them)")
        try:
            arrays.update(load_arrays(_LABEL, data=blob, names=named, limit=limit))
        except ValueError as exc:
            raise ValueError(f"cannot read optimizer states: not an mxlite updater archive ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        raise ValueError(f"cannot read optimizer states: the manifest is not an {_FORMAT!r} manifest")
    if manifest.get("version") != _VERSION:
        raise ValueError(f"cannot read optimizer states: format version {manifest.get('version')!r}, "
                         f"this mxlite reads version {_VERSION}")
    restored: dict[Any, Any] = {}
    try:
        for key, node in manifest["states"]:
            if isinstance(key, bool) or not isinstance(key, (int, str)):
                raise ValueError(f"index {key!r} is not an int or a str")
            restored[key] = _decode(node, arrays)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"cannot read optimizer states: malformed manifest ({type(exc).__name__}: {exc})") \
            from exc
    optimizer_state = _json_entry(arrays, _OPTIMIZER) if _OPTIMIZER in arrays else None
    extra = _json_entry(arrays, _EXTRA) if _EXTRA in arrays else None
    return restored, optimizer_state, extra


# -- the archive's pieces -----------------------------------------------------------------
def _json_bytes(value: Any) -> np.ndarray:
    return np.frombuffer(json.dumps(value).encode("utf-8"), dtype=np.uint8)


def _json_entry(arrays: dict[str, np.ndarray], name: str) -> Any:
    entry = arrays.get(name)
    if entry is None or entry.dtype != np.uint8 or entry.ndim != 1:
        raise ValueError(f"cannot read optimizer states: entry {name!r} is missing or not UTF-8 JSON bytes")
    try:
        return json.loads(entry.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read optimizer states: entry {name!r} is not valid JSON ({exc})") from exc


def _array_names(node: Any) -> list[str]:
    """The array names a manifest node refers to (leniently: :func:`_decode` refuses a malformed node)."""
    if not isinstance(node, dict):
        return []
    names = [node["array"]] if isinstance(node.get("array"), str) else []
    for key in ("multi_precision", "tuple", "list"):
        if isinstance(node.get(key), list):
            names += [n for child in node[key] for n in _array_names(child)]
    return names


def _encode(state: Any, name: str, arrays: dict[str, np.ndarray]) -> Any:
    """The manifest node of ``state``; its arrays go into ``arrays`` under ``name[/i...]``."""
    if state is None:
        return None
    if isinstance(state, MultiPrecisionState):
        return {"multi_precision": [_encode(s, f"{name}/{i}", arrays) for i, s in enumerate(state)]}
    if isinstance(state, (tuple, list)):
        kind = "tuple" if isinstance(state, tuple) else "list"
        return {kind: [_encode(s, f"{name}/{i}", arrays) for i, s in enumerate(state)]}
    if isinstance(state, (bool, int, float)):
        return {"scalar": state}
    if hasattr(state, "dtype") and hasattr(state, "shape"):
        host = state.get() if hasattr(state, "get") and not isinstance(state, np.ndarray) else np.asarray(state)
        node: dict[str, Any] = {"array": name}
        if host.dtype.name == "bfloat16":  # not a dtype .npy can name: keep the bits
            host, node["dtype"] = host.view(np.uint16), "bfloat16"
        arrays[name] = host
        return node
    raise TypeError(f"get_states: state leaf {name!r} of type {type(state).__name__} cannot be saved "
                    f"(expected arrays, tuples, lists, None or numbers)")


def _decode(node: Any, arrays: dict[str, np.ndarray]) -> Any:
    if node is None:
        return None
    if not isinstance(node, dict) or len(node) not in (1, 2):
        raise ValueError(f"unexpected manifest node {node!r}")
    if "multi_precision" in node:
        master, inner = node["multi_precision"]
        return MultiPrecisionState(_decode(master, arrays), _decode(inner, arrays))
    if "tuple" in node:
        return tuple(_decode(n, arrays) for n in node["tuple"])
    if "list" in node:
        return [_decode(n, arrays) for n in node["list"]]
    if "scalar" in node:
        return node["scalar"]
    if "array" in node:
        name = node["array"]
        if not isinstance(name, str) or name not in arrays or name in (_MANIFEST, _OPTIMIZER, _EXTRA):
            raise ValueError(f"state array {name!r} is missing from the archive")
        arr = arrays[name]
        if node.get("dtype") == "bfloat16":
            import ml_dtypes  # noqa: F401, PLC0415 - registers NumPy's 'bfloat16' dtype name

            arr = arr.view(np.dtype("bfloat16"))
        return arr
    raise ValueError(f"unexpected manifest node {node!r}")


def _to_array_module_of(state: Any, weight: Any) -> Any:
    """``state`` with every array moved to ``weight``'s array module and device."""
    if isinstance(state, MultiPrecisionState):
        return MultiPrecisionState(*(_to_array_module_of(s, weight) for s in state))
    if isinstance(state, (tuple, list)):
        return type(state)(_to_array_module_of(s, weight) for s in state)
    if isinstance(weight, np.ndarray) or not hasattr(state, "shape"):
        return state
    import cupy  # noqa: PLC0415 - only reached with CuPy weights

    with cupy.cuda.Device(weight.device.id):
        return cupy.asarray(state)

