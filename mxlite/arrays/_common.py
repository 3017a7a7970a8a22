"""Helpers shared by the ``mx.nd``, ``mx.np`` and ``mx.npx`` namespaces: operands, dtypes, reshape codes, files."""

from __future__ import annotations

import builtins as _b
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..autograd.tensor import Tensor
from ..device import Device, as_device, current_device, num_gpus
from ..device.context import pick_device
from ..formats._messages import quote
from ..formats.archive import load_arrays, save_arrays
from ..ops.core import nd_reshape_shape as reshape_nd  # noqa: F401 - the faces' name for it
from ..ops.creation import array

_LIST_PREFIX, _DICT_PREFIX = "list:", "dict:"


def tensor(x: Any, like: Tensor | None = None, dtype: Any = None) -> Tensor:
    """``x`` as a Tensor: a Tensor unchanged; a NumPy array, list or number copied onto ``like``'s device
    (else the current device). Python lists and numbers become float32 (MXNet's default)."""
    if isinstance(x, Tensor):
        return x
    dev = like.device if like is not None else current_device()
    if isinstance(x, (np.ndarray, np.generic)) or hasattr(x, "__cuda_array_interface__"):
        return array(x, dev, dtype)
    return array(x, dev, dtype if dtype is not None else np.float32)


def tensors(*xs: Any) -> list[Tensor]:
    """Every operand as a Tensor on the device of the first Tensor among them."""
    like = next((x for x in xs if isinstance(x, Tensor)), None)
    return [tensor(x, like) for x in xs]


def device_arg(device: Any, ctx: Any, where: str) -> Device:
    """The device from ``device=``/``ctx=`` (the current device when neither)."""
    return as_device(pick_device(device, ctx, where=where))


def shape_arg(shape: Any) -> tuple[int, ...]:
    """A shape given as an int or a sequence, as a tuple of ints."""
    if shape is None:
        return ()
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)


def reshape_npx(in_shape: tuple[int, ...], spec: Sequence[int], reverse: bool = False) -> tuple[int, ...]:
    """The target shape of MXNet 2.x's ``npx.reshape`` codes: -1 infer, -2 copy this dim, -3 drop this dim
    (of size 1), -4 copy all remaining, -5 merge the next two dims, -6 split one dim into the next two entries.

    Raises:
        ValueError: a spec that does not fit ``in_shape``.
    """
    table = {-2: 0, -4: -2, -5: -3, -6: -4}
    out_spec: list[int] = []
    shape = list(in_shape)
    pos = 0
    k = 0
    spec = list(spec)
    while k < len(spec):
        code = spec[k]
        if code == -3:
            if pos >= len(shape) or shape[pos] != 1:
                raise ValueError(f"npx.reshape: -3 drops an axis of size 1, but axis {pos} of {in_shape} is not 1")
            del shape[pos]
        elif code == -6:
            out_spec += [-4, spec[k + 1], spec[k + 2]]
            pos += 1
            k += 2
        elif code == -4:
            out_spec.append(-2)
            pos = len(shape)
        elif code == -5:
            out_spec.append(-3)
            pos += 2
        else:
            out_spec.append(table.get(code, code))
            pos += 1
        k += 1
    return reshape_nd(tuple(shape), out_spec, reverse)


def waitall() -> None:
    """Wait until every device has finished its queued work (synchronises each GPU; a no-op on CPU)."""
    count = num_gpus()
    for i in range(count):
        dev = Device("gpu", i)
        with dev.use():
            dev.xp.cuda.Device(i).synchronize()


def save(fname: str | os.PathLike, data: Tensor | Sequence[Tensor] | Mapping[str, Tensor]) -> None:
    """Save a Tensor, a list of Tensors or a dict name -> Tensor to ``fname`` (an ``.npz`` archive, no pickle).

    The file name is used as given; the write is atomic. Load it back with ``load``.

    Raises:
        TypeError: ``data`` is not a Tensor, a list of them or a dict of them (names the entry).
        ValueError: two dict keys that give one name (``1`` and ``'1'``), before anything is written.
    """
    if isinstance(data, Tensor):
        data = [data]
    if isinstance(data, Mapping):
        items = {_DICT_PREFIX + name: v for name, v in zip(entry_names(data, "save"), data.values())}
    elif isinstance(data, (list, tuple)):
        items = {f"{_LIST_PREFIX}{i}": v for i, v in enumerate(data)}
    else:
        raise TypeError(f"save: data must be a Tensor, a list of Tensors or a dict of them, got {type(data).__name__}")
    arrays = {}
    for k, v in items.items():
        if isinstance(v, Tensor):
            arrays[k] = v.asnumpy()
        elif isinstance(v, np.ndarray):
            arrays[k] = v
        else:
            raise TypeError(f"save: entry {k.split(':', 1)[1]!r} is a {type(v).__name__}, not a Tensor")
    save_arrays(fname, arrays)


def load(fname: str | os.PathLike, device: Any = None) -> list[Tensor] | dict[str, Tensor]:
    """Load what ``save`` wrote: a list or a dict of Tensors, on ``device`` (default ``cpu(0)``, as MXNet).

    An ``.npz`` written by other means loads as a dict keyed by its array names.

    Raises:
        FileNotFoundError: no such file. ValueError: not an mxlite/NumPy ``.npz`` archive, or a saved list
            whose positions are not exactly ``list:0 .. list:n-1`` (names the file and the entries).
    """
    dev = as_device(device) if device is not None else Device("cpu", 0)
    raw = load_arrays(fname)
    if raw and _b.any(k.startswith(_LIST_PREFIX) for k in raw):
        return [array(raw[k], dev) for k in _list_order(raw, fname)]
    return {(k[len(_DICT_PREFIX):] if k.startswith(_DICT_PREFIX) else k): array(v, dev) for k, v in raw.items()}


def entry_names(data: Mapping[Any, Any], where: str) -> list[str]:
    """The names a dict's keys are saved under (``str(key)``).

    Raises:
        ValueError: two keys give one name (``1`` and ``'1'``): one value would silently replace the other.
    """
    names: dict[str, Any] = {}
    for key in data:
        name = str(key)
        if name in names:
            raise ValueError(f"{where}: keys {quote(names[name])} and {quote(key)} both become the name "
                             f"{quote(name)}; give every entry a distinct str key")
        names[name] = key
    return list(names)


def _list_order(raw: Mapping[str, Any], fname: Any) -> list[str]:
    """The names of a saved list in position order; every position 0..n-1 once, nothing else.

    Raises:
        ValueError: a name that is not a list position (``list:x``, ``list:01``, a ``dict:`` entry among
            ``list:`` ones) or positions missing, naming the file and the first few such entries.
    """
    where = f"cannot read {os.fspath(fname)!r} as a saved list"
    positions: dict[int, str] = {}
    for name in raw:
        suffix = name[len(_LIST_PREFIX):] if name.startswith(_LIST_PREFIX) else None
        if suffix is None or not suffix.isdigit() or not suffix.isascii() or (suffix != "0" and suffix[0] == "0"):
            raise ValueError(f"{where}: {quote(name)} is not a list position (list:0, list:1, ...)")
        positions[int(suffix)] = name
    missing = [i for i in range(max(positions) + 1) if i not in positions]
    if missing:
        shown = ", ".join(f"list:{i}" for i in missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5
                                                                 else "")
        raise ValueError(f"{where}: entries {shown} are missing (it holds positions up to "
                         f"{max(positions)}, {len(positions)} entries)")
    return [positions[i] for i in range(len(positions))]  # complete: 0..n-1
