"""``Block.hybridize(static_alloc=True, static_shape=True)`` on GPUs: the block's forward and backward as CUDA graphs.

When a hybridized block is called on GPU tensors, :class:`BlockGraphs` looks the call up by its signature
(the recording and training flags, and each argument's shape, dtype, device and need for a gradient):

1. a signature seen for the first time runs eagerly (the warm-up: deferred parameters are created,
   kernels compiled, cuBLAS handles made);
2. the second call with it captures the forward and, under ``record()``, the backward as CUDA graphs
   (:mod:`mxlite.autograd._graphed`), then runs by launching them;
3. later calls launch the graphs: one copy per tensor argument, one graph launch, one copy per output
   (and, in backward, one copy per output gradient and one launch), whatever the number of layers.

A graph stays valid while the parameters it reads keep their buffers: it reads them at every launch, so
``set_data``, the optimizer's updates and ``load_parameters`` need no new capture, but a parameter that
got new buffers (re-initialised, ``cast``, ``reset_device``, a ``grad_req`` change, an arena that grew for
a new parameter) makes the graph stale: it is dropped and the signature starts again at 1. Up to
:data:`MAX_GRAPHS` signatures are kept per block (least recently used first out).

What cannot be captured runs eagerly, with one warning per block and cause naming the cause: a read by
the host inside the forward, random numbers from ``mx.random`` (cuRAND; Dropout draws from a generator
with its position on the device and is captured), a host synchronisation, a copy
from the host, cuBLAS through CuPy, forward hooks on child blocks, outputs other than arrays, sparse
gradients, and GPUs without nvmath-python. Such a signature keeps running eagerly until ``hybridize`` is
called again. An exception that ``forward`` raises itself while it is captured (any other than such a
refusal) propagates from that call, once and unchanged: ``forward`` does not run a second time, and the
next call of the signature tries the capture again. A block called again before the backward of its
previous recorded call (both calls' outputs alive with their history) runs that call eagerly: the graph's
buffers hold one call's activations. A call with an empty tensor argument (a dimension of size 0, such as
an empty batch) runs eagerly, without a notice: there is no work for a graph to save.

:class:`StepGraphs` captures the Trainer's fused update the same way (one eager warm-up per signature,
then one graph per GPU) when every parameter it updates is read by a captured block (:func:`graphed_params`);
with one GPU per process, the buckets' NCCL all-reduces go into that graph ahead of the update.
"""

from __future__ import annotations

import sys
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..autograd._graphed import GraphedFunction, capture, signature
from ..autograd.tensor import Tensor
from ..device import graphs as _device_graphs
from ._hooks import HookHandle

__all__ = ["MAX_GRAPHS", "BlockGraphs", "StepGraphs", "graphed_params"]

# Signatures (input shapes and flags) whose graphs one block keeps: training and inference calls at the
# batch size and at a smaller last batch, on two devices, fit.
MAX_GRAPHS = 8


class _Entry:
    """A captured signature: its graphs, and the parameter buffers they were captured on."""

    __slots__ = ("graphed", "params", "label")

    def __init__(self, graphed: GraphedFunction, params: list[tuple[Any, Any, Any, Any, str]], label: str) -> None:
        self.graphed = graphed
        self.params = params
        self.label = label

    def stale(self, device: Any) -> str | None:
        """Why the graphs no longer fit the parameters (None while they do)."""
        if not self.graphed.alive:
            return "its CUDA graphs were dropped (mx.device.graphs.clear())"
        for param, place, data_buf, grad_buf, req in self.params:
            now = param._slots.get(device)
            if now is not place or place[0].data_buf is not data_buf or place[0].grad_buf is not grad_buf \
                    or param.grad_req != req:
                return (f"parameter {param.label!r} got new buffers (initialize(force_reinit=True), cast, "
                        "reset_device, a grad_req change, or a new parameter in its arena)")
        return None


class BlockGraphs:
    """The CUDA graphs of one hybridized block (``hybridize(static_alloc=True, static_shape=True)``)."""

    def __init__(self, block: Any) -> None:
        self._block = block
        self._entries: OrderedDict[tuple, _Entry] = OrderedDict()
        self._seen: set[tuple] = set()  # signatures that ran their warm-up call
        self._modes: set[tuple] = set()  # (device, recording and training flags) it was called with
        self._failed: dict[tuple, str] = {}
        self._warned: set[str] = set()
        self._unavailable: str | None = None
        self._hook_stamp = -1
        self._hooked: str | None = None
        _LIVE.add(self)

    def __call__(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        block = self._block
        first = next((a for a in args if isinstance(a, Tensor)), None)
        if first is None or not first.device.is_gpu or _device_graphs.capturing() or self._unavailable:
            return block.forward(*args, **kwargs)  # CPU devices, or inside another block's capture
        if any(isinstance(a, Tensor) and a.size == 0 for a in args):
            return block.forward(*args, **kwargs)  # an empty batch: no work for a graph to save, eager's result
        key = signature(args, kwargs)
        if key is None:
            self._notice("arguments that cannot key a graph (an unhashable value, or a tensor passed by keyword)")
            return block.forward(*args, **kwargs)
        device = first.device
        hooked = self._hooked_child()
        if hooked is not None:
            self._notice(f"forward hooks on the child block {hooked!r} (a graph would run them only once, at capture)")
            return block.forward(*args, **kwargs)
        entry = self._entries.get(key)
        if entry is not None:
            why = entry.stale(device)
            if why is not None:  # this eager call is the warm-up of the next capture
                self._drop(key)
                self._notice(why)
                return block.forward(*args, **kwargs)
            if entry.graphed.busy:
                self._notice("called again before the backward of its previous recorded call (the graph's buffers "
                             "hold one call's activations; retain_graph=True, or outputs kept with their history)")
                return block.forward(*args, **kwargs)
            self._entries.move_to_end(key)
            return entry.graphed(args)
        if key in self._failed:
            return block.forward(*args, **kwargs)
        if key not in self._seen:
            # A new shape for the same device and modes is worth a notice; the first call on another device
            # (data parallelism) or in another mode (training, inference) is not.
            modes = (device, key[:2])
            if modes in self._modes:
                self._notice("a new input signature (shapes or dtypes); it runs eagerly once, then is captured")
            self._modes.add(modes)
            self._seen.add(key)
            return block.forward(*args, **kwargs)
        try:
            entry = self._capture(key, args, kwargs, device)
        except _device_graphs.GraphUnavailableError as exc:
            self._unavailable = str(exc)
            self._notice(str(exc))
            return block.forward(*args, **kwargs)
        except _device_graphs.CaptureError as exc:
            self._failed[key] = exc.cause
            self._notice(exc.cause)
            return block.forward(*args, **kwargs)
        self._entries[key] = entry
        while len(self._entries) > MAX_GRAPHS:
            self._drop(next(iter(self._entries)))
        return entry.graphed(args)

    def _capture(self, key: tuple, args: tuple, kwargs: dict[str, Any], device: Any) -> _Entry:
        block = self._block
        params = []
        seen: set[int] = set()
        for param in block.collect_params().values():
            place = param._slots.get(device)
            if place is None or id(param) in seen:
                continue
            seen.add(id(param))
            params.append((param, place, place[0].data_buf, place[0].grad_buf, param.grad_req))
        shapes = ", ".join(f"{tuple(a.shape)} {a.dtype}" for a in args if isinstance(a, Tensor))
        mode = "training" if key[1] else "inference"
        label = f"{type(block).__name__}({shapes}) {mode}{' recorded' if key[0] else ''}"
        graphed = capture(lambda *a: block.forward(*a, **kwargs), args, [p[1][1].data for p in params], label)
        return _Entry(graphed, params, label)

    def _hooked_child(self) -> str | None:
        """The path of a child block with forward hooks (None if none): such a block runs eagerly.

        The children are walked again when a hook was registered somewhere since the last walk (``HookHandle``
        numbers every registration), and while hooks were found (until they are detached).
        """
        stamp = HookHandle.registered
        if stamp != self._hook_stamp or self._hooked is not None:
            self._hook_stamp = stamp
            block = self._block
            self._hooked = next((path.rstrip(".") for path, child in block._iter_blocks("")
                                 if child is not block and (child._forward_hooks or child._forward_pre_hooks)), None)
        return self._hooked

    def _drop(self, key: tuple) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            entry.graphed.release()

    def _notice(self, cause: str) -> None:
        if cause in self._warned:
            return
        self._warned.add(cause)
        warnings.warn(f"mxlite: {type(self._block).__name__}.hybridize(static_alloc=True, static_shape=True) runs "
                      f"eagerly: {cause}", stacklevel=4)

    def release(self) -> None:
        """Drop every graph of the block."""
        for key in list(self._entries):
            self._drop(key)

    def info(self) -> list[dict[str, Any]]:
        """One dict per captured signature: ``label``, ``device``, ``bytes`` held, ``launches`` and whether a
        backward graph was captured; most recently used last."""
        out = []
        for entry in self._entries.values():
            g = entry.graphed
            out.append({"label": entry.label, "device": str(g.device), "bytes": g.nbytes,
                        "launches": g.forward_graph.launches, "backward": g.backward_graph is not None})
        return out


_LIVE: weakref.WeakSet[BlockGraphs] = weakref.WeakSet()


def graphed_params() -> set[int]:
    """``id()`` of the parameters read by a live captured signature with a backward graph (a block replayed in
    training): the Trainer captures its step only when every parameter it updates is among them."""
    found: set[int] = set()
    for graphs in list(_LIVE):
        for entry in graphs._entries.values():
            if entry.graphed.alive and entry.graphed.backward_graph is not None:
                found.update(id(p[0]) for p in entry.params)
    return found


# Optimizer attributes that change from step to step and reach the kernels through the table, not as kernel
# arguments: a change of them needs no new capture. (``_checked_rate``: the scheduler's rate, checked at this
# update, cached for the table.)
_PER_STEP = frozenset({"lr", "num_update", "_warned_low_precision", "_checked_rate"})
_SCALARS = (int, float, bool, str, type(None))
_NOT_A_KEY = object()  # an attribute that cannot reach a kernel as an argument (a dict, a scheduler, a device array)
_SMALL_ARRAY = 64  # host arrays up to this many elements key a signature by their bytes

# What one rank can do with a step that issues collectives, from best to worst. The ranks do the worst of theirs
# whenever they agree (see StepGraphs): all replay, all capture, or all run eagerly.
_REPLAY, _CAPTURE, _WARM_UP, _EAGER = 0, 1, 2, 3
# Steps with collectives between two agreements of the ranks once every rank replays (a rank whose step could not
# replay meanwhile ran it eagerly; the agreement lets the ranks capture it again together).
AGREE_EVERY = 100
# Agreements in a row (one per step) while the ranks warm up and capture a step with collectives together.
_LOCKSTEP = 4


class _StepEntry:
    """A captured step: one graph per device, and the objects whose buffers the graphs read (held, so their
    ``id()`` in the signature is never reused)."""

    __slots__ = ("graphs", "refs")

    def __init__(self, graphs: list[Any], refs: list[Any]) -> None:
        self.graphs = graphs
        self.refs = refs

    def drop(self) -> None:
        for graph in self.graphs:
            graph.drop()


class StepGraphs:
    """The Trainer's fused update captured as CUDA graphs: one graph per device, replayed at every step.

    The Trainer hands :meth:`run` the updates it prepared (:meth:`mxlite.optimizer._arena.ArenaUpdater.prepare`
    has advanced the update counts and written each per-parameter table into its device buffer). They are
    looked up by their *signature*: the buffers they read and write (arena, states, tables, plans) and every
    value of the optimizer that reaches the kernels as an argument (``rescale_grad``, hence the batch size;
    ``clip_gradient``, betas, momentum, ...), whether a Python or a NumPy scalar, a dtype or a tuple of them. A
    signature seen for the first time is launched eagerly (the warm-up: kernels compiled, plan tables copied);
    the second time it is captured, one graph per device, and from then on replayed with one graph launch per
    device. The learning rate, its schedule, weight decays and update counts travel in the table, so changing
    them needs no new capture.

    A step that issues collectives (one GPU per process: the gradient all-reduces join the graph) is captured
    by every rank at once or by none, since a capture runs nothing and a rank that captures while another runs
    the same collectives would leave it waiting. The ranks agree (one all-gather of a status per rank) at every
    step from the Trainer's first step with collectives until every rank captured it, and every
    :data:`AGREE_EVERY` steps after that; each then does the worst of the ranks' statuses: all replay, all
    capture, or all run eagerly. Between agreements a rank whose step cannot replay (its batch size or a
    hyper-parameter changed, or ``mx.device.graphs.clear()`` dropped its graphs) runs it eagerly: its
    collectives, issued from the host in the graph's order, meet the others' replayed ones.
    """

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple, _StepEntry] = OrderedDict()
        self._seen: OrderedDict[tuple, list[Any]] = OrderedDict()
        self._failed: dict[tuple, str] = {}
        self._warned: set[str] = set()
        self.replays = 0  # steps run by launching graphs
        # A step with collectives failed to capture: they stay eager (overlapping backward) from then on.
        self.collectives_failed = False
        # The last agreement found every rank's step eager: the Trainer gives the collectives back to backward.
        self.collectives_released = False
        self._lockstep = 0  # agreements left, one per step with collectives, before the ranks go on alone
        self._since_agreement = 0  # steps with collectives since the ranks last agreed
        self._join_lockstep = _LOCKSTEP  # agreements on joining left, one per step, before they space out
        self._since_join_agreement = 0  # steps that could join the collectives since the ranks last agreed on it

    @staticmethod
    def wanted(params: Iterable[Any]) -> bool:
        """Whether every gradient-carrying parameter is read by a captured block (a GPU, replayed in training)."""
        graphed = graphed_params()
        return bool(graphed) and all(id(p) in graphed for p in params if p.grad_req != "null")

    def notice(self, cause: str) -> None:
        """One warning per cause: the step runs eagerly, and why."""
        if cause in self._warned:
            return
        self._warned.add(cause)
        frame, level = sys._getframe(), 1  # point at the user's call (trainer.step or trainer.update)
        while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("mxlite."):
            frame, level = frame.f_back, level + 1
        warnings.warn(f"mxlite: Trainer.step runs eagerly (its blocks are captured as CUDA graphs, the step is "
                      f"not): {cause}", stacklevel=level)

    # -- steps with collectives: what the ranks agree on -------------------------------------------------------
    def agree_to_join(self, collectives: Sequence[Any], wanted: bool) -> bool:
        """Whether the next steps issue ``collectives`` (their buckets held back from backward), decided by every
        rank together: True only when every rank's blocks are captured (``wanted``, this rank's).

        Every rank calls it at each step whose collectives could join the step but do not yet, at the same point
        (before the step issues any collective of its own). The ranks agree (one all-gather of a flag) at the
        first :data:`_LOCKSTEP` such steps, at every step while some but not all ranks want to join (a rank that
        captured its blocks later, after a smaller batch), and every :data:`AGREE_EVERY` steps otherwise; between
        agreements nothing joins. A single process decides alone.
        """
        if all(comm.size == 1 for comm in _communicators(collectives)):
            return wanted
        self._since_join_agreement += 1
        if not self._join_lockstep and self._since_join_agreement < AGREE_EVERY:
            return False
        self._since_join_agreement = 0
        flags = _every_rank_status(collectives, int(wanted))
        if all(flags):
            self._join_lockstep = _LOCKSTEP  # for a later return to eager collectives
            return True
        self._join_lockstep = _LOCKSTEP if any(flags) else max(0, self._join_lockstep - 1)
        return False

    def start_lockstep(self) -> None:
        """The Trainer's steps issue their collectives from now on (every rank at the same step): the ranks agree
        at each step with collectives until they all replay, so that they warm up and capture together."""
        self._lockstep = _LOCKSTEP
        self._since_agreement = 0
        self.collectives_released = False

    def _agree(self, collectives: Sequence[Any], status: int) -> int:
        """What this step with ``collectives`` does on this rank: :data:`_REPLAY`, :data:`_CAPTURE` or eagerly.

        Every rank calls it once per step with collectives, before issuing any of them, with its own ``status``
        (``_EAGER`` when this rank's update cannot be captured at all). When the ranks agree at this step
        (lockstep, or :data:`AGREE_EVERY` steps since the last agreement) every rank gets the worst status of
        all (one all-gather); otherwise a rank replays if it can and runs the step eagerly if not, never
        capturing alone.
        """
        self._since_agreement += 1
        if not self._lockstep and self._since_agreement < AGREE_EVERY:
            return _REPLAY if status == _REPLAY else _EAGER
        self._since_agreement = 0
        statuses = _every_rank_status(collectives, status)
        action = max(statuses)
        self._lockstep = 0 if action <= _CAPTURE else (self._lockstep or _LOCKSTEP) - 1
        self.collectives_released = min(statuses) == _EAGER  # no rank captures: backward sums them again
        return action

    def run_eagerly(self, collectives: Sequence[Any]) -> None:
        """This rank's step with ``collectives`` cannot be captured (its blocks are not, or a check needs the host)
        and issues them eagerly: it takes part in the ranks' agreement when there is one at this step."""
        self._agree(collectives, _EAGER)

    # -- running a step ----------------------------------------------------------------------------------------
    def run(self, updates: Sequence[tuple[Any, Any]], optimizer: Any, collectives: Sequence[Any] = ()) -> None:
        """Launch the prepared ``updates`` = [(updater, prepared)]: by replaying their graphs when captured,
        eagerly for a signature's first step (or one that could not be captured).

        ``collectives``: gradient syncs (:class:`~mxlite.comm.buckets.GradientSync`, one GPU per process over
        NCCL) whose every bucket waits for this step: their all-reduces come first, in the same graph. The ranks
        decide together what to do (:meth:`_agree`), and a capture is kept only when it succeeded on every rank
        (one small all-gather per capture), so no rank replays collectives another captures.
        """
        key, refs = _signature(updates, optimizer, collectives)
        if collectives:
            self._run_with_collectives(key, refs, updates, collectives)
            return
        entry = self._entries.get(key)
        if entry is not None and all(g.alive for g in entry.graphs):
            self._replay(key, entry, ())
            return
        if entry is not None:
            del self._entries[key]  # mx.device.graphs.clear() dropped them: this step is the warm-up
            self._seen.pop(key, None)
        if key in self._failed or key not in self._seen:
            self._remember(key, refs)
            _launch(updates)
            return
        try:
            entry = self._capture(updates, refs, ())
        except _device_graphs.GraphUnavailableError as exc:
            self._give_up(key, str(exc), updates, ())
            return
        except _device_graphs.CaptureError as exc:
            self._give_up(key, exc.cause, updates, ())
            return
        self._keep(key, entry)

    def _run_with_collectives(self, key: tuple, refs: list[Any], updates: Sequence[tuple[Any, Any]],
                              collectives: Sequence[Any]) -> None:
        """:meth:`run` of a step whose graph holds collectives: what every rank does is agreed (:meth:`_agree`)."""
        entry = self._entries.get(key)
        if entry is not None and all(g.alive for g in entry.graphs):
            status = _REPLAY
        elif key in self._failed:
            status = _WARM_UP  # never captured again; the ranks run it eagerly
        else:
            status = _CAPTURE if entry is not None or key in self._seen else _WARM_UP
        action = self._agree(collectives, status)
        if action == _REPLAY:
            self._replay(key, entry, collectives)
            return
        if action == _CAPTURE:
            self._capture_with_every_rank(key, refs, updates, collectives)
            return
        if status == _WARM_UP and key not in self._failed:
            self._remember(key, refs)
        _sum(collectives)
        _launch(updates)

    def _capture_with_every_rank(self, key: tuple, refs: list[Any], updates: Sequence[tuple[Any, Any]],
                                 collectives: Sequence[Any]) -> None:
        """Every rank captures its step now (agreed); the graphs are kept only when every rank's capture succeeded."""
        self._drop(key)  # a rank that could replay captures again with the others
        failure = None
        try:
            entry = self._capture(updates, refs, collectives)
        except _device_graphs.GraphUnavailableError as exc:
            failure = str(exc)
        except _device_graphs.CaptureError as exc:
            failure = exc.cause
        if not _every_rank_captured(collectives, failure is None) and failure is None:
            entry.drop()
            failure = "another rank could not capture its step (the ranks run their collectives alike)"
        if failure is not None:
            self.collectives_failed = True
            self._give_up(key, failure, updates, collectives)
            return
        self._keep(key, entry)

    def _replay(self, key: tuple, entry: _StepEntry, collectives: Sequence[Any]) -> None:
        self._entries.move_to_end(key)
        for graph in entry.graphs:
            graph.launch()
        for sync in collectives:
            sync.comm.watch_replay(entry.graphs[0].label)
        self.replays += 1

    def _remember(self, key: tuple, refs: list[Any]) -> None:
        """A signature's warm-up: the next step with it is captured."""
        self._seen[key] = refs
        while len(self._seen) > 2 * MAX_GRAPHS:
            self._seen.popitem(last=False)

    def _give_up(self, key: tuple, failure: str, updates: Sequence[tuple[Any, Any]], collectives: Sequence[Any]
                 ) -> None:
        """The signature could not be captured: said once, and run eagerly from now on."""
        self._failed[key] = failure
        self.notice(failure)
        _sum(collectives)
        _launch(updates)

    def _keep(self, key: tuple, entry: _StepEntry) -> None:
        self._entries[key] = entry
        while len(self._entries) > MAX_GRAPHS:
            self._drop(next(iter(self._entries)))
        for graph in entry.graphs:
            graph.launch()  # a capture records the step; this launch runs it

    @staticmethod
    def _capture(updates: Sequence[tuple[Any, Any]], refs: list[Any], collectives: Sequence[Any]) -> _StepEntry:
        devices: list[Any] = []
        for updater, prepared in updates:
            device = updater.arena.device
            prepared.plan.tables(device)  # made on the first launch; never copied from the host inside a capture
            if device not in devices:
                devices.append(device)
        for sync in collectives:
            if sync.comm.devices[0] not in devices:
                raise _device_graphs.CaptureError("gradients summed on a device the update does not run on",
                                                  str(sync.comm.devices))
        graphs = []
        try:
            for device in devices:
                mine = [(u, p) for u, p in updates if u.arena.device == device]
                sums = [s for s in collectives if s.comm.devices[0] == device]
                what = " with its gradient all-reduce" if sums else ""
                label = f"Trainer.step {type(mine[0][0].optimizer).__name__} ({len(mine)} arena update(s){what})"

                def step(mine: list[tuple[Any, Any]] = mine, sums: list[Any] = sums) -> None:
                    _sum(sums)
                    _launch(mine)

                graph, _ = _device_graphs.capture(device, step, label)
                graphs.append(graph)
        except BaseException:
            for graph in graphs:
                graph.drop()
            raise
        return _StepEntry(graphs, refs)

    def _drop(self, key: tuple) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            for graph in entry.graphs:
                graph.drop()

    def release(self) -> None:
        """Drop every captured step."""
        for key in list(self._entries):
            self._drop(key)

    def info(self) -> list[dict[str, Any]]:
        """One dict per captured graph: ``label``, ``device``, ``bytes`` held and ``launches``."""
        return [{"label": g.label, "device": str(g.device), "bytes": g.nbytes, "launches": g.launches}
                for entry in self._entries.values() for g in entry.graphs]


def _launch(updates: Sequence[tuple[Any, Any]]) -> None:
    """The fused kernels of every prepared update (unsharded updates yield nothing between their launches)."""
    for updater, prepared in updates:
        for _ in updater.launch(prepared):
            raise RuntimeError("an unsharded update has no partial sums to complete")


def _sum(collectives: Sequence[Any]) -> None:
    """Every bucket of every gradient sync all-reduced, the current stream waiting for the sums."""
    for sync in collectives:
        sync.allreduce_grads()


def _communicators(collectives: Sequence[Any]) -> list[Any]:
    return list({id(s.comm): s.comm for s in collectives}.values())


def _every_rank_status(collectives: Sequence[Any], status: int) -> list[int]:
    """Every rank's ``status`` over every communicator of ``collectives`` (one small all-gather each)."""
    statuses = []
    for comm in _communicators(collectives):
        statuses.extend(int(s[0]) for s in comm.allgather(np.array([status], np.int32)))
    return statuses


def _every_rank_captured(collectives: Sequence[Any], captured: bool) -> bool:
    """Whether every rank of every communicator of ``collectives`` captured its step (this rank: ``captured``)."""
    return max(_every_rank_status(collectives, 0 if captured else 1)) == 0


def _key_value(value: Any) -> Any:
    """``value`` as a part of a step's signature (hashable, equal exactly when the kernels would get the same
    argument): Python scalars as they are; NumPy scalars with their dtype; dtypes and types by name; tuples and
    lists element by element; small host arrays by their bytes. :data:`_NOT_A_KEY` for what is no kernel
    argument (a dict, a scheduler, an array on a device)."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, np.generic):
        return ("numpy", value.dtype.str, value.item())
    if isinstance(value, np.dtype):
        return ("dtype", value.str)
    if isinstance(value, type):
        return ("type", value.__module__, value.__qualname__)
    if isinstance(value, (tuple, list)):
        parts = tuple(_key_value(v) for v in value)
        return _NOT_A_KEY if any(p is _NOT_A_KEY for p in parts) else (type(value).__name__, parts)
    if isinstance(value, np.ndarray) and value.size <= _SMALL_ARRAY:
        return ("array", value.shape, value.dtype.str, value.tobytes())
    return _NOT_A_KEY


def _kernel_arguments(optimizer: Any) -> tuple:
    """The optimizer's values that may reach the kernels as arguments: every attribute but the per-step ones
    (those travel in the table) and those that cannot be an argument, keyed by :func:`_key_value`."""
    out = []
    for name, value in vars(optimizer).items():
        if name not in _PER_STEP:
            key = _key_value(value)
            if key is not _NOT_A_KEY:
                out.append((name, key))
    return tuple(sorted(out))


def _signature(updates: Sequence[tuple[Any, Any]], optimizer: Any, collectives: Sequence[Any] = ()
               ) -> tuple[tuple, list[Any]]:
    """The key of a step (the buffers its launches read and write, the optimizer's kernel arguments, the
    collectives it issues first) and the objects it names by ``id()``."""
    refs: list[Any] = []
    parts = []
    for updater, prepared in updates:
        arena = updater.arena
        held = (updater, arena.data_buf, arena.grad_buf, prepared.plan, prepared.table, *updater.buffers())
        refs.append(held)
        parts.append(tuple(id(x) for x in held))
    refs.extend(collectives)
    return (tuple(parts), type(optimizer), _kernel_arguments(optimizer),
            tuple(s.graph_key() for s in collectives)), refs
