"""Checking that every rank describes the same thing (parameters, buckets, settings) before relying on it.

Purpose: data-parallel ranks must hold the same parameters in the same order, or their
collectives silently pair unrelated gradients (or hang when the sizes differ). One cheap
collective before the first step turns such a mistake into a clear error on every rank.
What may change during training (hyper-parameters) and the collective calls a rank may make
alone by mistake (``if rank == 0: trainer.save_states(f)`` with sharded states) are agreed
over an :class:`AgreementChannel`, by messages instead of a collective at every step.

Minimal example::

    entries = [(name, {"shape": list(p.shape), "dtype": str(p.dtype)}) for name, p in params.items()]
    check_same_across_ranks(comm, "the Trainer's parameters", entries)

Behaviour: every rank serialises its entries as JSON and the ranks all-gather a fixed-size
header (a SHA-256 digest of the entries and the length of their JSON text): one collective,
48 bytes per rank, whatever the number of entries. When the digests differ, a second collective
gathers the JSON texts themselves (padded to the longest, so every communicator can carry them)
and every rank raises the same ValueError naming the first entry that differs and the ranks
holding each variant.

Warnings:

* Every rank of ``comm`` must call it (it is a collective); a rank that raises before the
  collective (an entry that is not JSON-able) leaves the others waiting in it, unless the fault
  handling of :mod:`mxlite.comm.faults` ends the job (it does under ``MpiCommunicator``).
* Order matters: two ranks with the same entries in another order disagree (their buckets would
  pair different gradients). Descriptions are compared as JSON values (a dict's key order does not
  matter; a tuple equals a list).
* :func:`settings_of` turns an object's settings (NumPy scalars included) into JSON-able entries.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ..device.topology import mpi_module

__all__ = ["AgreementChannel", "Gathering", "check_same_across_ranks", "settings_of"]


class Gathering(Protocol):
    """What :func:`check_same_across_ranks` uses of a communicator (any :class:`mxlite.comm.base.Communicator`,
    whose collectives' debug checks call it): its number of processes and an all-gather of host arrays."""

    size: int

    def allgather(self, array: Any) -> list[np.ndarray]:
        """Every process's ``array`` (equal shapes), in rank order."""

_DIGEST_BYTES = 32  # SHA-256
_MISSING = object()
_MAX_VARIANTS = 4  # variants spelled out in a message; the rest are counted
_SKIP = object()  # a value settings_of leaves out
_TAGS = range(0x4D00, 0x4D00 + 4096)  # point-to-point tags of AgreementChannels (below 32767, MPI's least MPI_TAG_UB)


def check_same_across_ranks(comm: Gathering, what: str, entries: Sequence[tuple[str, Any]]) -> None:
    """Raise the same ValueError on every rank unless all ranks passed equal ``entries``.

    Args:
        comm: the communicator whose ranks are compared (all of them must call this).
        what: what the entries describe, for the message ("the Trainer's parameters").
        entries: ``(name, description)`` pairs in this rank's order; a description is any
            JSON-able value, e.g. ``{"shape": [4, 3], "dtype": "float32"}``.

    Returns at once when ``comm.size == 1``.

    Raises:
        ValueError: the ranks disagree: names ``what``, the first differing name and which
            ranks hold each variant (or lack the name), e.g. "ranks disagree on the Trainer's
            parameters: 'dense0.weight' is {shape [4, 3], dtype float32} on rank 0 and
            {shape [5, 3], dtype float32} on rank 1".
        TypeError: an entry is not a (str, JSON-able) pair (raised before any collective).
    """
    if comm.size == 1:
        return
    pairs = _validated(entries)
    text = json.dumps(pairs, separators=(",", ":")).encode()
    digest = hashlib.sha256(json.dumps(pairs, sort_keys=True, separators=(",", ":")).encode()).digest()
    header = np.frombuffer(digest + len(text).to_bytes(16, "little"), dtype=np.uint8)
    headers = [h.tobytes() for h in comm.allgather(header)]
    if all(h[:_DIGEST_BYTES] == digest for h in headers):
        return
    # Rare path: gather the texts. Equal sizes, so NCCL's all-gather (equal counts only) carries them too.
    lengths = [int.from_bytes(h[_DIGEST_BYTES:], "little") for h in headers]
    padded = np.zeros(max(lengths), dtype=np.uint8)
    padded[:len(text)] = np.frombuffer(text, dtype=np.uint8)
    texts = [t.tobytes()[:n] for t, n in zip(comm.allgather(padded), lengths)]
    problem = _first_difference([json.loads(t) for t in texts])
    raise ValueError(f"ranks disagree on {what}: {problem}")


def settings_of(obj: Any, skip: frozenset[str] = frozenset(), prefix: str = "") -> list[tuple[str, Any]]:
    """``(prefix + name, value)`` of ``obj``'s public attributes (a mapping's items) whose values are settings,
    sorted by name, for :func:`check_same_across_ranks` or an :class:`AgreementChannel`; [] for None.

    Settings are Python and NumPy scalars (a NumPy value as its Python value), dtypes and types (by name),
    and lists, tuples and dicts of them (a dict's keys as strings); other values (objects, arrays) and the
    names in ``skip`` are left out.
    """
    if obj is None:
        return []
    items = obj.items() if isinstance(obj, Mapping) else vars(obj).items()
    out = []
    for name, value in sorted(items, key=lambda item: str(item[0])):
        name = str(name)
        if name.startswith("_") or name in skip:
            continue
        described = _json_value(value)
        if described is not _SKIP:
            out.append((prefix + name, described))
    return out


def _json_value(value: Any) -> Any:
    """``value`` as JSON (see :func:`settings_of`), or :data:`_SKIP`."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return value.item()
    if isinstance(value, np.dtype):
        return value.name
    if isinstance(value, type):
        return value.__qualname__
    if isinstance(value, (list, tuple)):
        parts = [_json_value(v) for v in value]
        return _SKIP if any(p is _SKIP for p in parts) else parts
    if isinstance(value, dict):
        parts = {str(k): _json_value(v) for k, v in value.items()}
        ok = all(isinstance(k, (str, int)) for k in value) and all(v is not _SKIP for v in parts.values())
        return dict(sorted(parts.items())) if ok else _SKIP
    return _SKIP


class AgreementChannel:
    """Messages between the ranks of an MPI communicator (under a tag of the channel's own), for what the ranks
    must agree on without a collective at every step.

    Purpose: some values may change during training, legitimately when every rank changes them together (a
    learning rate set by ``set_learning_rate``); checking them at every step would cost a collective per step,
    and a collective run only when they change would hang when one rank changes them alone. And a collective a
    rank calls alone by mistake (``if rank == 0: trainer.save_states(f)`` with sharded states) waits forever for
    the others, which wait in their next step's collective for it.

    Minimal example::

        channel = AgreementChannel(mpi_comm)                   # every rank, in the same order
        channel.watch("the optimizer's hyper-parameters", step, entries)   # every rank, every step
        channel.meet("Trainer.save_states", [("update", n)], 60.0, "call it on every rank")

    Behaviour:

    * :meth:`watch`, once per step on every rank, before the step uses the values: when this rank's entries
      differ from its previous ones it sends them to every other rank (one small message each); every call
      receives the messages that arrived (a probe: no collective, no wait) and compares each with this rank's
      own entries at the step it names. A disagreement raises ValueError on this rank ("ranks disagree on WHAT
      at step S: 'lr' is 0.05 on rank 0 and 0.1 on rank 1"), after sending the message to every rank, which
      raise it at their next call. It comes a message late (usually the next step): the step at which the
      ranks differed has run. :meth:`confirm`, at a collective call that may end the job (a checkpoint), compares
      the last values at once.
    * :meth:`meet`: every rank sends its entries to every other and waits for theirs, at most a given time: a
      rank that does not come by then is named in a RuntimeError (the ranks that came raise it), and entries
      that differ raise the same ValueError on every rank, as :func:`check_same_across_ranks`.

    Warnings:

    * Create channels in the same order on every rank: a channel's messages carry a tag that follows that order
      (one of :data:`_TAGS`, reused after that many channels; nothing else of mxlite sends point-to-point).
    * After :meth:`meet` raised because a rank did not come, the job cannot go on (that rank is waiting
      elsewhere): let the error end it (MPI ranks abort on an uncaught exception, :mod:`mxlite.comm.faults`).
    """

    _HISTORY = 256  # changes remembered per watched description (messages come within a few steps)
    _created = 0  # channels made in this process (their tags follow)

    def __init__(self, mpi_comm: Any) -> None:
        self._mpi = mpi_module()
        self._comm = mpi_comm
        self._tag = _TAGS[AgreementChannel._created % len(_TAGS)]
        AgreementChannel._created += 1
        self.rank, self.size = self._comm.Get_rank(), self._comm.Get_size()
        self._watched: dict[str, list[tuple[int, str, list[list[Any]]]]] = {}  # what -> [(step, digest, pairs)]
        self._heard: list[tuple[int, dict[str, Any]]] = []  # (rank, change message) not yet compared
        self._met: dict[tuple[str, int], dict[int, Any]] = {}  # (what, call number) -> {rank: pairs}
        self._meetings: dict[str, int] = {}  # what -> calls of meet so far
        self._sending: list[tuple[Any, bytes]] = []  # (request, buffer) of messages in flight

    # -- values that change ------------------------------------------------------------------------------------
    def watch(self, what: str, step: int, entries: Sequence[tuple[str, Any]]) -> None:
        """Tell the other ranks when ``entries`` (this rank's values of ``what`` at ``step``) change, and check
        what they told. ``step`` must count alike on every rank and never go down.

        Raises:
            ValueError: a rank had other values of ``what`` at a step than this one (names the first differing
                entry, its values and ranks, and the step), found here or by another rank.
            TypeError: an entry is not a (str, JSON-able) pair.
        """
        history = self._watched.setdefault(what, [])
        if not history or [list(e) for e in entries] != history[-1][2]:
            pairs = _validated(entries)
            digest = _digest(pairs)
            first = not history
            history.append((step, digest, pairs))
            del history[:-self._HISTORY]
            if not first:  # the first values were agreed by a collective (check_same_across_ranks)
                self._send_all({"kind": "change", "what": what, "step": step, "digest": digest, "entries": pairs})
        self._receive()
        self._compare(step)

    def _compare(self, step: int) -> None:
        later = []
        for rank, message in self._heard:
            if message["step"] > step:
                later.append((rank, message))  # this rank has not reached that step yet
                continue
            history = self._watched.get(message["what"], [])
            mine = next((h for h in reversed(history) if h[0] <= message["step"]), None)  # None: forgotten
            if mine is not None and mine[1] != message["digest"]:
                ranks = sorted([self.rank, rank])
                per_rank = [mine[2] if r == self.rank else message["entries"] for r in ranks]
                text = (f"ranks disagree on {message['what']} at step {message['step']}: "
                        f"{_first_difference(per_rank, ranks)}")
                self._send_all({"kind": "disagree", "text": text})
                raise ValueError(text)
        self._heard = later

    def confirm(self, what: str, step: int, by: str, seconds: float, advice: str) -> None:
        """At ``by``, a collective call every rank makes (one that may end the job, where no later :meth:`watch`
        would hear a message): every rank's last watched values of ``what`` (this rank's at ``step``) are
        compared at once (:meth:`meet`), so that a change made on one rank at the last step is named too.

        Raises:
            ValueError: the same on every rank: the ranks' steps or values differ ("ranks disagree on WHAT at the
                last step (checked by BY): 'optimizer.lr' is 0.05 on rank 0 and 0.1 on rank 1").
            RuntimeError: some ranks did not call it within ``seconds`` (as :meth:`meet`).
        """
        history = self._watched.get(what)
        last = history[-1][2] if history else []
        self.meet(f"{what} at the last step (checked by {by})", [("step", step), *last], seconds, advice)

    # -- collective calls ------------------------------------------------------------------------------------
    def meet(self, what: str, entries: Sequence[tuple[str, Any]], seconds: float, advice: str) -> None:
        """Every rank calls ``what`` with equal ``entries``: wait at most ``seconds`` for every other rank's.

        Raises:
            RuntimeError: some ranks did not call it within ``seconds``: names them, ``what`` and ``advice``.
            ValueError: the ranks' entries differ (the same error on every rank, as check_same_across_ranks).
        """
        pairs = _validated(entries)
        call = self._meetings.get(what, 0) + 1
        self._meetings[what] = call
        self._send_all({"kind": "meet", "what": what, "call": call, "entries": pairs})
        arrived = self._met.setdefault((what, call), {})
        arrived[self.rank] = pairs
        deadline = time.monotonic() + seconds
        polls = 0
        while len(arrived) < self.size:
            self._receive()
            if len(arrived) == self.size:
                break
            if time.monotonic() > deadline:
                missing = [r for r in range(self.size) if r not in arrived]
                raise RuntimeError(f"{what} is a collective call: {_ranks(sorted(arrived))} called it, "
                                   f"{_ranks(missing)} did not within {seconds:g} s; {advice}")
            polls += 1
            if polls > 1000:
                time.sleep(0.001)
        del self._met[(what, call)]
        per_rank = [arrived[r] for r in range(self.size)]
        if any(_digest(p) != _digest(per_rank[0]) for p in per_rank):
            raise ValueError(f"ranks disagree on {what}: {_first_difference(per_rank)}")

    # -- messages --------------------------------------------------------------------------------------------
    def _send_all(self, message: dict[str, Any]) -> None:
        self._sending = [(request, data) for request, data in self._sending if not request.Test()]
        data = json.dumps(message, separators=(",", ":")).encode()
        for rank in range(self.size):
            if rank != self.rank:
                self._sending.append((self._comm.Isend([data, self._mpi.BYTE], dest=rank, tag=self._tag), data))

    def _receive(self) -> None:
        """Take every message that arrived: changes to compare, meetings, and disagreements (raised)."""
        status = self._mpi.Status()
        while self._comm.Iprobe(source=self._mpi.ANY_SOURCE, tag=self._tag, status=status):
            source = status.Get_source()
            data = bytearray(status.Get_count(self._mpi.BYTE))
            self._comm.Recv([data, self._mpi.BYTE], source=source, tag=self._tag)
            message = json.loads(bytes(data))
            if message["kind"] == "disagree":
                raise ValueError(message["text"])
            if message["kind"] == "change":
                self._heard.append((source, message))
            else:
                self._met.setdefault((message["what"], message["call"]), {})[source] = message["entries"]


def _digest(pairs: list[list[Any]]) -> str:
    return hashlib.sha256(json.dumps(pairs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _validated(entries: Sequence[tuple[str, Any]]) -> list[list[Any]]:
    pairs = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, (tuple, list)) or len(entry) != 2 or not isinstance(entry[0], str):
            raise TypeError(f"entry {i} must be a (name, description) pair with a str name, got {entry!r}")
        try:
            json.dumps(entry[1])
        except (TypeError, ValueError) as exc:
            raise TypeError(f"the description of {entry[0]!r} is not JSON-able ({exc}): {entry[1]!r}") from exc
        pairs.append([entry[0], entry[1]])
    return pairs


def _first_difference(per_rank: list[list[list[Any]]], ranks: list[int] | None = None) -> str:
    """A sentence naming the first disagreement among the ranks' entry lists (which differ); ``ranks``: the rank
    of each list (default: its position)."""
    ranks = list(range(len(per_rank))) if ranks is None else ranks
    names: dict[str, None] = {}  # every name, in order of first appearance (rank 0's order first)
    for pairs in per_rank:
        names.update((name, None) for name, _ in pairs)
    firsts = [dict(reversed(pairs)) for pairs in per_rank]  # name -> description of its first entry
    counts = _grouped([len(pairs) for pairs in per_rank], ranks)
    count_note = "" if len(counts) == 1 else "; " + " and ".join(
        f"{_ranks(holders)} {'has' if len(holders) == 1 else 'have'} {n} entr{'y' if n == 1 else 'ies'}"
        for n, holders in counts)
    for name in names:
        variants = _grouped([first.get(name, _MISSING) for first in firsts], ranks)
        if len(variants) > 1:
            return f"{name!r} is {_variants(variants)}{count_note}"
    for name in names:
        times = _grouped([sum(n == name for n, _ in pairs) for pairs in per_rank], ranks)
        if len(times) > 1:
            return f"{name!r} is listed " + " and ".join(f"{n} time{'s' if n != 1 else ''} on {_ranks(r)}"
                                                          for n, r in times) + count_note
    for i in range(max(len(pairs) for pairs in per_rank)):
        at = _grouped([pairs[i][0] for pairs in per_rank], ranks)
        if len(at) > 1:
            return "the same entries come in another order: entry " + str(i) + " is " + " and ".join(
                f"{n!r} on {_ranks(r)}" for n, r in at)
    return "their entries differ in a way JSON hides (" + " and ".join(  # not reached: the digests differ
        f"{len(pairs)} entries on rank {r}" for r, pairs in zip(ranks, per_rank)) + ")"


def _grouped(values: list[Any], ranks: list[int] | None = None) -> list[tuple[Any, list[int]]]:
    """[(value, ranks holding it)] in order of the lowest rank; values compared as canonical JSON. ``ranks``: the
    rank of each value (default: its position)."""
    groups: dict[str, tuple[Any, list[int]]] = {}
    for rank, value in zip(ranks if ranks is not None else range(len(values)), values):
        key = "" if value is _MISSING else json.dumps(value, sort_keys=True)  # JSON: True != 1, {a,b} == {b,a}
        groups.setdefault(key, (value, []))[1].append(rank)
    return list(groups.values())


def _variants(groups: list[tuple[Any, list[int]]]) -> str:
    groups = sorted(groups, key=lambda g: g[0] is _MISSING)  # "missing on ..." last
    shown = [("missing" if v is _MISSING else _render(v)) + f" on {_ranks(r)}" for v, r in groups[:_MAX_VARIANTS]]
    if len(groups) > _MAX_VARIANTS:
        shown.append(f"{len(groups) - _MAX_VARIANTS} other variants on the other ranks")
    return " and ".join(shown) if len(shown) < 3 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _ranks(ranks: list[int]) -> str:
    """'rank 1', 'ranks 0, 2', 'ranks 0, 2-5, 7' (runs of three or more as ranges; no 'and', which joins variants)."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    parts: list[str] = []
    start = prev = ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.extend([f"{start}-{prev}"] if prev - start >= 2 else [str(x) for x in range(start, prev + 1)])
        if r is not None:
            start = prev = r
    return "ranks " + ", ".join(parts)


def _render(value: Any) -> str:
    """A description as the message shows it: {shape [4, 3], dtype float32}."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} {_render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_render(v) for v in value) + "]"
    return value if isinstance(value, str) else json.dumps(value)
