"""Optimizer-state files: one layout for ``KVStore.save_optimizer_states`` and ``Trainer.save_states``.

The layout is :func:`mxlite.optimizer.updater.pack_states`'s ``.npz`` (never pickled): the optimizer
states keyed by index (the store's keys, or the Trainer's parameter indices), the optimizer's values
(:meth:`Optimizer.state_dict`), and an ``__extra__`` JSON section that says what wrote the file::

    {"format": "mxlite.kvstore.optimizer_states" | "mxlite.trainer_states", "version": 1,
     "residuals": [[key, position, entry], ...], ...the writer's own fields}

A compression residual (one float32 array per key and position: a store's push position, a
Trainer's device mirror) is stored as one more "state" under ``entry``, a name chosen to differ from
every key, and taken out of the states again on reading. The writer's own fields: the store's
compression parameters; the Trainer's parameter names and shapes, compression, loss scaler and
partial-sync turn.

Read too: a plain :meth:`Updater.get_states` archive (no extra section) as a store's states without
residuals, and a Trainer file from before this layout (its residuals as ``'residual:<index>:<mirror>'``
states, no ``format``), whose extra section is returned as it is for the Trainer to take apart.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .updater import pack_states, unpack_states

__all__ = ["KVSTORE", "TRAINER", "pack", "state_arrays", "unpack"]

KVSTORE = "mxlite.kvstore.optimizer_states"
TRAINER = "mxlite.trainer_states"
_VERSION = 1
_WRITERS = {KVSTORE: "a KVStore.save_optimizer_states file", TRAINER: "a Trainer.save_states file"}


def pack(states: dict[Any, Any], optimizer_state: dict[str, Any] | None,
         residuals: dict[tuple[Any, int], np.ndarray], kind: str, fields: dict[str, Any] | None = None) -> bytes:
    """The archive bytes of ``states`` ({key: state}), the optimizer's values and ``residuals``.

    Args:
        states: the optimizer state of each key (nested tuples of arrays, as ``create_state`` makes them).
        optimizer_state: :meth:`Optimizer.state_dict`, or None (not written).
        residuals: ``{(key, position): float32 array}``.
        kind: :data:`KVSTORE` or :data:`TRAINER`, written as the format.
        fields: the writer's own JSON fields, stored beside the format.

    Raises:
        ValueError: an unknown ``kind``. TypeError: as :func:`~mxlite.optimizer.updater.pack_states`.
    """
    if kind not in _WRITERS:
        raise ValueError(f"unknown optimizer-state file kind {kind!r}; known: {', '.join(_WRITERS)}")
    entries: dict[Any, Any] = dict(states)
    table = []
    for (key, pos), array in sorted(residuals.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        name = f"__residual__/{key}/{pos}"
        while name in entries:  # a str key that happens to look like our name
            name += "_"
        entries[name] = array
        table.append([key, pos, name])
    extra = {**(fields or {}), "format": kind, "version": _VERSION, "residuals": table}
    return pack_states(entries, optimizer_state, extra)


def unpack(data: bytes, kind: str, limit: int | None = None
           ) -> tuple[dict[Any, Any], Any, dict[tuple[Any, int], np.ndarray], dict[str, Any]]:
    """``(states, optimizer_state or None, residuals, fields)`` from :func:`pack` bytes of ``kind``.

    ``limit``: the most bytes the state and residual arrays may declare together, checked from the
    headers before any is read (:func:`~mxlite.optimizer.updater.unpack_states`); default: this
    machine's memory.

    ``fields`` holds the writer's own fields (empty for a plain updater archive); a Trainer file of the
    earlier layout gives its extra section as ``fields`` and its ``'residual:<index>:<mirror>'``
    states as residuals.

    Raises:
        ValueError: not such an archive (damaged, truncated, pickled, or written by the other kind,
            which the message names), another format version, a malformed residual table, or arrays
            declaring more than ``limit`` bytes.
    """
    states, optimizer_state, extra = unpack_states(data, limit=limit)
    residuals: dict[tuple[Any, int], np.ndarray] = {}
    if extra is None:
        if kind == TRAINER:
            raise ValueError("it is not a Trainer.save_states file (no optimizer or parameter section)")
        return states, optimizer_state, residuals, {}  # a plain Updater.get_states archive
    written_by = extra.get("format") if isinstance(extra, dict) else None
    if kind == TRAINER and written_by is None and isinstance(extra, dict) and "trainer_params" in extra:
        return states, optimizer_state, _residuals_of_earlier_trainer_layout(states), extra
    if written_by != kind:
        legacy_trainer = isinstance(extra, dict) and "trainer_params" in extra
        what = _WRITERS.get(written_by) or (_WRITERS[TRAINER] if legacy_trainer else "an archive of another kind")
        raise ValueError(f"it is {what}, not {_WRITERS[kind]}")
    if extra.get("version") != _VERSION:
        raise ValueError(f"format version {extra.get('version')!r}; this mxlite reads version {_VERSION}")
    table = extra.get("residuals")
    if not isinstance(table, list):
        raise ValueError("the residual table is missing")
    for row in table:
        if not (isinstance(row, list) and len(row) == 3):
            raise ValueError(f"malformed residual entry {row!r}")
        key, pos, name = row
        if isinstance(key, bool) or not isinstance(key, (int, str)) or isinstance(pos, bool) \
                or not isinstance(pos, int) or pos < 0:
            raise ValueError(f"malformed residual entry {row!r}")
        array = states.pop(name, None) if isinstance(name, str) else None
        if not isinstance(array, np.ndarray) or array.dtype != np.float32:
            raise ValueError(f"the residual of key {key!r} (position {pos}) is missing or not a float32 array")
        if (key, pos) in residuals:
            raise ValueError(f"the residual of key {key!r} (position {pos}) appears twice")
        residuals[(key, pos)] = array
    fields = {k: v for k, v in extra.items() if k not in ("format", "version", "residuals")}
    return states, optimizer_state, residuals, fields


def _residuals_of_earlier_trainer_layout(states: dict[Any, Any]) -> dict[tuple[Any, int], np.ndarray]:
    """Take the ``'residual:<index>:<mirror>'`` entries of an earlier Trainer file out of ``states``."""
    residuals = {}
    for key in [k for k in states if isinstance(k, str)]:
        parts = key.split(":")
        if len(parts) != 3 or parts[0] != "residual" or not (parts[1].isdigit() and parts[2].isdigit()):
            raise ValueError(f"unexpected entry {key!r}")
        residuals[(int(parts[1]), int(parts[2]))] = states.pop(key)
    return residuals


def state_arrays(state: Any) -> list[Any]:
    """The array leaves of a (nested) optimizer state, in order."""
    if isinstance(state, (tuple, list)):
        return [leaf for part in state for leaf in state_arrays(part)]
    return [state] if hasattr(state, "shape") else []
