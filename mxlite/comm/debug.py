"""Debug mode for collectives (``MXLITE_DEBUG_COLLECTIVES=1``, or true/yes/on): every rank checks its partners first.

Purpose: a collective called with other shapes or dtypes on one rank, or a different collective
altogether (rank 0 in an all-reduce while rank 1 waits in a barrier), either hangs or silently
mixes unrelated data. With the variable set to ``1`` (or ``true``, ``yes``, ``on``), every collective of a multi-process
communicator (MPI or NCCL) first runs :func:`~mxlite.comm.agree.check_same_across_ranks` on a
description of the call (its number in this communicator, the operation, the buffers' shapes
and dtype), so every rank raises the same ValueError naming the odd rank out instead. The
Trainer then also checks, after each step, that the parameters are identical on every mirror
and every rank (:func:`parameter_digests`).

Cost: one small all-gather per collective and a hash of every parameter per step; for
debugging, not for production runs. Off (the default), it costs one dictionary lookup per call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..device import env

__all__ = ["enabled", "describe_call", "parameter_digests"]

ENV = "MXLITE_DEBUG_COLLECTIVES"


def enabled() -> bool:
    """Whether ``MXLITE_DEBUG_COLLECTIVES`` is on (1/true/yes/on; read at each call, so tests can toggle it).

    Raises:
        ValueError: a value other than 1/true/yes/on or 0/false/no/off (any case), naming the variable.
    """
    return env.flag(ENV)


def describe_call(number: int, op: str, buffers: Sequence[Any], with_shapes: bool = True) -> list[tuple[str, Any]]:
    """The entry every rank compares before collective ``number``: op, shapes and dtypes of its buffers."""
    desc: dict[str, Any] = {"op": op, "dtype": [np.dtype(b.dtype).name for b in buffers]}
    if with_shapes:
        desc["shape"] = [list(b.shape) for b in buffers]
    return [(f"collective #{number}", desc)]


def parameter_digests(params: Sequence[Any]) -> list[tuple[str, Any]]:
    """(name, SHA-256 of the first mirror's bytes) per parameter; raises if the local mirrors differ.

    Raises:
        ValueError: a parameter's mirrors on this process's devices hold different values
            (names the parameter and devices).
    """
    entries = []
    for p in params:
        mirrors = [d.asnumpy() for d in p.list_data()]
        for device, other in zip(p.list_device()[1:], mirrors[1:]):
            if other.tobytes() != mirrors[0].tobytes():
                raise ValueError(f"Parameter {p.label!r} differs between its mirrors on {p.list_device()[0]} and "
                                 f"{device}")
        entries.append((p.label, hashlib.sha256(np.ascontiguousarray(mirrors[0]).tobytes()).hexdigest()))
    return entries
