"""The profiler's store: its settings and state, the events recorded so far, and the aggregate statistics.

One :data:`SESSION` per process. Events are kept as :class:`TraceEvent` tuples until a dump turns them
into Chrome's trace format; an operator timed on a GPU keeps its CUDA events (:class:`DeviceOp`) until a
dump or ``dumps()`` waits for them and reads their times. Times are microseconds on the host's monotonic
clock, counted from the moment the profiler module was imported.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, NamedTuple

from ..device import Device

_EPOCH = time.perf_counter()

OPERATOR = "operator"  # the aggregate category of operator calls (their host time), as MXNet's
LAYER = "layer"  # Gluon blocks' calls


def now_us() -> float:
    """Microseconds since the profiler module was imported (the host's monotonic clock)."""
    return (time.perf_counter() - _EPOCH) * 1e6


def host_process(device: Device | None) -> str:
    """The trace process of host-side events on ``device``: ``cpu/0``, ``gpu/1 host``, or ``host``."""
    if device is None:
        return "host"
    name = f"{device.device_type}/{device.device_id}"
    return f"{name} host" if device.is_gpu else name


def device_process(device: Device) -> str:
    """The trace process (and aggregate category suffix) of device times on GPU ``device``: ``gpu/0``."""
    return f"{device.device_type}/{device.device_id}"


class TraceEvent(NamedTuple):
    """One event of the trace: ``ph`` is Chrome's phase (``X`` duration, ``i`` instant, ``C`` counter)."""

    ph: str
    name: str
    cat: str
    process: str  # a process name; the dump numbers them
    thread: Any  # a host thread's ident, or a stream's name
    ts: float  # microseconds
    dur: float  # microseconds (0 for instants and counters)
    args: dict[str, Any] | None


class DeviceOp(NamedTuple):
    """An operator timed on a GPU stream: its CUDA events, read when the profiler next dumps."""

    name: str
    device: Device
    stream: str
    anchor: tuple[Any, float]  # (a CUDA event, the host time in us it was recorded at, its stream idle)
    start: Any
    stop: Any
    args: dict[str, Any] | None


@dataclasses.dataclass
class Config:
    """The settings of ``set_config``, with MXNet's names and defaults (each call sets all of them)."""

    filename: str = "profile.json"
    profile_all: bool = False
    profile_symbolic: bool = False
    profile_imperative: bool = False
    profile_memory: bool = False
    profile_api: bool = False
    continuous_dump: bool = False
    dump_period: float = 1.0
    aggregate_stats: bool = False
    profile_process: str = "worker"

    def records_operators(self) -> bool:
        """Whether operator calls are recorded: mxlite runs every operator imperatively, so any of the three."""
        return self.profile_all or self.profile_symbolic or self.profile_imperative


class Stat:
    """Aggregate of one name in one category: durations in microseconds, or a counter's values."""

    __slots__ = ("kind", "count", "total", "low", "high", "last")

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "duration" or "counter"
        self.count = 0
        self.total = 0.0
        self.low = float("inf")
        self.high = float("-inf")
        self.last = 0.0

    def add(self, value: float) -> None:
        """Count one duration (us) or counter value."""
        self.count += 1
        self.total += value
        self.last = value
        self.low = min(self.low, value)
        self.high = max(self.high, value)


class Session:
    """The process's profiler: settings, run/stop and pause state, recorded events, aggregate statistics."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # Before any set_config, MXNet's profiler records symbolic operators (and API calls and memory).
        self.config = Config(profile_symbolic=True, profile_api=True, profile_memory=True)
        self.state = "stop"
        self.paused = False
        self.events: list[TraceEvent] = []
        self.pending: list[DeviceOp] = []
        self.stats: dict[str, dict[str, Stat]] = {}
        self.threads: dict[int, str] = {}
        self.anchors: dict[Device, tuple[Any, float]] = {}

    @property
    def active(self) -> bool:
        """Whether events are recorded now: the state is ``run`` and the profiler is not paused."""
        return self.state == "run" and not self.paused

    # -- recording ------------------------------------------------------------------------
    def add(self, event: TraceEvent, stat_value: float | None = None, stat_kind: str | None = "duration") -> None:
        """Keep ``event``; with aggregate statistics on, count ``stat_value`` (default: its duration) as a
        ``stat_kind`` ('duration' or 'counter'; None: not counted)."""
        with self.lock:
            self.events.append(event)
            if isinstance(event.thread, int) and event.thread not in self.threads:
                self.threads[event.thread] = threading.current_thread().name
            if self.config.aggregate_stats and stat_kind is not None:
                value = event.dur if stat_value is None else stat_value
                self._stat(event.cat, event.name, stat_kind).add(value)

    def add_device_op(self, op: DeviceOp) -> None:
        """Keep a GPU-timed operator until the next dump reads its events."""
        with self.lock:
            self.pending.append(op)

    def anchor(self, device: Device, stream: Any) -> tuple[Any, float]:
        """The CUDA event every device time on ``device`` is measured from, with its host time (made once:
        the stream is synchronised first, so the event completes when it is recorded)."""
        found = self.anchors.get(device)
        if found is None:
            stream.synchronize()
            event = device.xp.cuda.Event()
            before = now_us()
            event.record(stream)
            found = self.anchors[device] = (event, (before + now_us()) / 2)
        return found

    def _stat(self, category: str, name: str, kind: str) -> Stat:
        names = self.stats.setdefault(category, {})
        stat = names.get(name)
        if stat is None:
            stat = names[name] = Stat(kind)
        return stat

    # -- reading --------------------------------------------------------------------------
    def resolve_device_ops(self) -> None:
        """Wait for the GPU-timed operators' events and turn them into trace events (and statistics)."""
        with self.lock:
            pending, self.pending = self.pending, []
        for op in pending:
            begin, dur = _device_times(op)
            process = device_process(op.device)
            self.add(TraceEvent("X", op.name, f"{OPERATOR} ({process})", process, op.stream, begin, dur, op.args))

    def clear_events(self) -> None:
        """Forget the recorded events (a finished dump); the statistics stay until ``dumps(reset=True)``."""
        with self.lock:
            self.events = []
            self.pending = []
            self.anchors = {}


def _device_times(op: DeviceOp) -> tuple[float, float]:
    """(start, duration) in microseconds of ``op`` on the host's time line, from its CUDA events."""
    elapsed = op.device.xp.cuda.get_elapsed_time
    anchor_event, anchor_us = op.anchor
    with op.device.use():
        op.stop.synchronize()
        start_ms = elapsed(anchor_event, op.start)
        dur_ms = elapsed(op.start, op.stop)
    return anchor_us + start_ms * 1e3, dur_ms * 1e3


SESSION = Session()
