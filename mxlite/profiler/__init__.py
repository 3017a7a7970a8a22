"""``mx.profiler``: MXNet's profiler API over mxlite's operator calls.

    mx.profiler.set_config(profile_all=True, filename="profile.json", aggregate_stats=True)
    mx.profiler.set_state("run")
    ...                                   # train a few steps
    mx.profiler.set_state("stop")
    mx.profiler.dump()                    # profile.json: open it in chrome://tracing or ui.perfetto.dev
    print(mx.profiler.dumps())            # per-operator count, total, min, max, avg (ms)

While the state is ``run`` (and not paused) every operator call is recorded with its host time (its
MXNet name: ``FullyConnected``, ``Convolution``, ``broadcast_add``, ...), every Gluon block call as a
``layer`` event, and on a GPU each operator's device time too, from CUDA events around it on its stream.
``Domain``, ``Task``, ``Frame``, ``Event``, ``Counter`` and ``Marker`` add the user's own events;
``scope(name)`` names the operators run inside it. While the profiler is stopped an operator call costs
one test of a module flag (:mod:`.hooks`).

``state`` reads the current state (``'run'`` or ``'stop'``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import numbers
import os
import threading
import warnings
from collections.abc import Iterator
from typing import Any

from ..formats.archive import atomic_write
from . import hooks
from ._report import SORT_KEYS, stats_json, stats_table, trace
from ._session import SESSION, Config, TraceEvent, now_us

__all__ = ["set_config", "set_state", "get_state", "dump", "dumps", "pause", "resume", "scope", "Domain", "Task",
           "Frame", "Event", "Counter", "Marker", "profiler_set_config", "profiler_set_state", "dump_profile"]

_BOOL_SETTINGS = ("profile_all", "profile_symbolic", "profile_imperative", "profile_memory", "profile_api",
                  "continuous_dump", "aggregate_stats")
_MARKER_SCOPES = {"global": "g", "process": "p", "thread": "t", "task": "t", "marker": "t"}


# -- settings and state ----------------------------------------------------------------------
def set_config(**kwargs: Any) -> None:
    """Configure the profiler with MXNet's keyword arguments; settings not given take their defaults.

    Args:
        filename: the trace file ``dump`` writes (default ``'profile.json'``).
        profile_all, profile_symbolic, profile_imperative: record operator calls (mxlite runs every
            operator imperatively, so any of the three records them all). Default False each; before
            any ``set_config`` the profiler records them (MXNet's default mode includes symbolic).
        profile_memory, profile_api: accepted; mxlite records no memory or C API events.
        continuous_dump: accepted; ``dump(finished=False)`` writes the trace so far at any time.
        dump_period: seconds, > 0 (accepted; there is no background dump).
        aggregate_stats: keep the per-name statistics that ``dumps()`` prints.
        profile_process: ``'worker'`` (the only process kind mxlite has).

    Raises:
        TypeError: an argument MXNet's profiler does not take, or a value of the wrong type (named).
        ValueError: an empty filename, a ``dump_period`` <= 0, or a ``profile_process`` other than 'worker'.
    """
    known = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"set_config: unknown argument(s) {', '.join(unknown)}; the profiler takes "
                        f"{', '.join(sorted(known))}")
    config = Config()
    for name, value in kwargs.items():
        setattr(config, name, _checked_setting(name, value))
    with SESSION.lock:
        SESSION.config = config
    _refresh()


def _checked_setting(name: str, value: Any) -> Any:
    if name in _BOOL_SETTINGS:
        return _flag(f"set_config: {name}", value)
    if name == "filename":
        if not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"set_config: filename must be a path (str), got {type(value).__name__}: {value!r}")
        if not os.fspath(value):
            raise ValueError("set_config: filename must be a non-empty path, got ''")
        return os.fspath(value)
    if name == "dump_period":
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"set_config: dump_period must be a number of seconds, got {value!r}")
        if not value > 0:
            raise ValueError(f"set_config: dump_period must be > 0 seconds, got {value!r}")
        return float(value)
    return _process(f"set_config: {name}", value)


def _flag(what: str, value: Any) -> bool:
    if isinstance(value, bool) or (isinstance(value, numbers.Integral) and value in (0, 1)):
        return bool(value)
    raise TypeError(f"{what} must be True or False, got {value!r}")


def _process(what: str, value: Any) -> str:
    if value == "worker":
        return value
    if value == "server":
        raise ValueError(f"{what}='server': mxlite has no kvstore server process; profile each worker")
    raise ValueError(f"{what} must be 'worker', got {value!r}")


def set_state(state: str = "stop", profile_process: str = "worker") -> None:
    """Start (``'run'``) or stop (``'stop'``) recording; stopping keeps what was recorded for ``dump``.

    Raises:
        ValueError: a ``state`` other than 'run' or 'stop', or a ``profile_process`` other than 'worker'.
    """
    _process("set_state: profile_process", profile_process)
    if state not in ("run", "stop"):
        raise ValueError(f"set_state: state must be 'run' or 'stop', got {state!r}")
    with SESSION.lock:
        if state == "run" and SESSION.state != "run":
            SESSION.anchors = {}  # device times of this run are measured from fresh events
        SESSION.state = state
        SESSION.paused = False
    _refresh()


def get_state() -> str:
    """The profiler's state: ``'run'`` or ``'stop'`` (also readable as ``mx.profiler.state``)."""
    return SESSION.state


def __getattr__(name: str) -> Any:
    if name == "state":
        return SESSION.state
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pause(profile_process: str = "worker") -> None:
    """Stop recording until ``resume()`` (the state stays ``'run'``).

    Raises:
        ValueError: a ``profile_process`` other than 'worker'.
    """
    _process("pause: profile_process", profile_process)
    SESSION.paused = True
    _refresh()


def resume(profile_process: str = "worker") -> None:
    """Record again after ``pause()``.

    Raises:
        ValueError: a ``profile_process`` other than 'worker'.
    """
    _process("resume: profile_process", profile_process)
    SESSION.paused = False
    _refresh()


def _refresh() -> None:
    hooks.set_recording(SESSION.active and SESSION.config.records_operators())


# -- output ----------------------------------------------------------------------------------
def dump(finished: bool = True, profile_process: str = "worker") -> None:
    """Write what was recorded to the configured ``filename`` as a Chrome trace (JSON), atomically.

    Waits for the GPU-timed operators' events first. With ``finished=True`` the recorded events are
    then forgotten (a later dump starts a new trace); with ``finished=False`` they are kept, so each dump
    writes everything recorded so far. The state (``run``/``stop``) does not change.

    Raises:
        TypeError: ``finished`` that is not a bool. ValueError: a ``profile_process`` other than 'worker'.
        OSError: the file cannot be written.
    """
    finished = _flag("dump: finished", finished)
    _process("dump: profile_process", profile_process)
    SESSION.resolve_device_ops()
    with SESSION.lock:
        document = trace(list(SESSION.events), dict(SESSION.threads))
        filename = SESSION.config.filename
    text = json.dumps(document, indent=1).encode()
    atomic_write(filename, lambda f: f.write(text))
    if finished:
        SESSION.clear_events()


def dumps(reset: bool = False, format: str = "table", sort_by: str = "total",  # noqa: A002 - MXNet's name
          ascending: bool = False) -> str:
    """The aggregate statistics (``set_config(aggregate_stats=True)``) as MXNet's table or JSON.

    Per category (``operator``: host time of each operator call; ``operator (gpu/0)``: device time on
    that GPU; ``layer``: Gluon block calls; a domain's tasks, frames and counters; ``event``) and name:
    count, total, min, max and average, in milliseconds (a counter: its values, the last as total).

    Args:
        reset: forget the statistics after formatting them.
        format: ``'table'`` or ``'json'`` (``{"Time": {...}, "Memory": {}, "Unit": {...}}``).
        sort_by: ``'total'``, ``'avg'``, ``'min'``, ``'max'`` or ``'count'``, within each category.
        ascending: sort smallest first.

    Returns:
        The formatted statistics; an empty string, with a warning, when aggregate statistics are off.

    Raises:
        TypeError: ``reset``/``ascending`` not bools. ValueError: an unknown ``format`` or ``sort_by``.
    """
    reset, ascending = _flag("dumps: reset", reset), _flag("dumps: ascending", ascending)
    if format not in ("table", "json"):
        raise ValueError(f"dumps: format must be 'table' or 'json', got {format!r}")
    if sort_by not in SORT_KEYS:
        raise ValueError(f"dumps: sort_by must be one of {', '.join(SORT_KEYS)}, got {sort_by!r}")
    if not SESSION.config.aggregate_stats:
        warnings.warn("profiler.dumps(): aggregate statistics are off; call "
                      "profiler.set_config(aggregate_stats=True, ...) before profiling", stacklevel=2)
        return ""
    SESSION.resolve_device_ops()
    with SESSION.lock:
        text = (stats_table if format == "table" else stats_json)(SESSION.stats, sort_by, ascending)
        if reset:
            SESSION.stats = {}
    return text


# -- MXNet 1.x's deprecated spellings --------------------------------------------------------
def profiler_set_config(mode: str = "symbolic", filename: str = "profile.json") -> None:
    """Deprecated (MXNet): ``set_config(profile_<mode>=True, filename=filename)``; ``mode`` is 'symbolic' or 'all'.

    Raises:
        ValueError: another ``mode``.
    """
    warnings.warn("profiler.profiler_set_config() is deprecated; use profiler.set_config()", DeprecationWarning,
                  stacklevel=2)
    if mode not in ("symbolic", "all"):
        raise ValueError(f"profiler_set_config: mode must be 'symbolic' or 'all', got {mode!r}")
    set_config(**{f"profile_{mode}": True, "filename": filename})


def profiler_set_state(state: str = "stop") -> None:
    """Deprecated (MXNet): ``set_state(state)``."""
    warnings.warn("profiler.profiler_set_state() is deprecated; use profiler.set_state()", DeprecationWarning,
                  stacklevel=2)
    set_state(state)


def dump_profile() -> None:
    """Deprecated (MXNet): ``dump(True)``."""
    warnings.warn("profiler.dump_profile() is deprecated; use profiler.dump()", DeprecationWarning, stacklevel=2)
    dump(True)


# -- scopes ----------------------------------------------------------------------------------
@contextlib.contextmanager
def scope(name: str = hooks.UNKNOWN_SCOPE, append_mode: bool = True) -> Iterator[str]:
    """Name the operators recorded inside (their trace events get ``args.scope``), as MXNet 2.x's scope.

    ``name`` gets a trailing ``':'``; with ``append_mode`` it is appended to the enclosing scope
    (``'outer:inner:'``). Gluon block calls open such a scope with the block's name while recording.

    Raises:
        TypeError: a ``name`` that is not a str.
    """
    if not isinstance(name, str):
        raise TypeError(f"scope: name must be a str, got {type(name).__name__}")
    name = name if name.endswith(":") else name + ":"
    outer = hooks.SCOPE.get()
    if append_mode and outer != hooks.UNKNOWN_SCOPE:
        name = outer + name
    token = hooks.SCOPE.set(name)
    try:
        yield name
    finally:
        hooks.SCOPE.reset(token)


# -- the user's objects ----------------------------------------------------------------------
def _name_arg(where: str, name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{where}: name must be a non-empty str, got {type(name).__name__}: {name!r}")
    if not name:
        raise ValueError(f"{where}: name must be a non-empty str, got ''")
    return name


def _domain_arg(where: str, domain: Any) -> Domain:
    if not isinstance(domain, Domain):
        raise TypeError(f"{where}: domain must be a profiler.Domain, got {type(domain).__name__}")
    return domain


def _record(event: TraceEvent, stat_value: float | None = None, stat_kind: str | None = "duration") -> None:
    if SESSION.active:
        SESSION.add(event, stat_value, stat_kind)


class Domain:
    """A category grouping tasks, frames, counters and markers (a trace process and a statistics section).

    Raises:
        TypeError, ValueError: a ``name`` that is not a non-empty str.
    """

    def __init__(self, name: str) -> None:
        self.name = _name_arg("Domain", name)

    def __str__(self) -> str:
        return self.name

    def new_task(self, name: str) -> Task:
        """A Task of this domain."""
        return Task(self, name)

    def new_frame(self, name: str) -> Frame:
        """A Frame of this domain."""
        return Frame(self, name)

    def new_counter(self, name: str, value: int | None = None) -> Counter:
        """A Counter of this domain, set to ``value`` when given."""
        return Counter(self, name, value)

    def new_marker(self, name: str) -> Marker:
        """A Marker of this domain."""
        return Marker(self, name)


class _Duration:
    """A named span timed between ``start()`` and ``stop()``, recorded when stopped while the profiler runs."""

    def __init__(self, name: str, category: str) -> None:
        self.name = name
        self._category = category
        self._begin: float | None = None
        self._passes = 0

    def start(self) -> None:
        """Begin timing.

        Raises:
            RuntimeError: already started and not stopped.
        """
        if self._begin is not None:
            raise RuntimeError(f"{type(self).__name__} {self.name!r} is already started; stop() it first")
        self._begin = now_us()

    def stop(self) -> None:
        """End timing and record the span (when the profiler runs and is not paused).

        Raises:
            RuntimeError: not started.
        """
        if self._begin is None:
            raise RuntimeError(f"{type(self).__name__} {self.name!r} was not started; call start() first")
        begin, self._begin = self._begin, None
        self._passes += 1
        _record(TraceEvent("X", self.name, self._category, self._category, threading.get_ident(), begin,
                           now_us() - begin, self._args()))

    def _args(self) -> dict[str, Any] | None:
        return None

    def __str__(self) -> str:
        return self.name


class Task(_Duration):
    """A span of work on one thread, recorded under its domain; every pass adds to one statistic.

    Raises:
        TypeError: ``domain`` not a Domain. TypeError, ValueError: ``name`` not a non-empty str.
    """

    def __init__(self, domain: Domain, name: str) -> None:
        super().__init__(_name_arg("Task", name), _domain_arg("Task", domain).name)

    def _args(self) -> dict[str, Any] | None:
        return {"kind": "task"}


class Frame(_Duration):
    """A numbered span (an iteration, a rendered frame) recorded under its domain.

    Raises:
        TypeError: ``domain`` not a Domain. TypeError, ValueError: ``name`` not a non-empty str.
    """

    def __init__(self, domain: Domain, name: str) -> None:
        super().__init__(_name_arg("Frame", name), _domain_arg("Frame", domain).name)

    def _args(self) -> dict[str, Any] | None:
        return {"kind": "frame", "frame": self._passes}


class Event(_Duration):
    """A span recorded in the ``event`` category (no domain), as MXNet's profiler Event.

    Raises:
        TypeError, ValueError: ``name`` not a non-empty str.
    """

    def __init__(self, name: str) -> None:
        super().__init__(_name_arg("Event", name), "event")


class Counter:
    """An integer value >= 0 tracked over time: each change is a counter event of its domain.

    Raises:
        TypeError: ``domain`` not a Domain, or a ``value`` that is not an integer.
        ValueError: ``name`` empty, or a ``value`` below zero.
    """

    def __init__(self, domain: Domain, name: str, value: int | None = None) -> None:
        self.name = _name_arg("Counter", name)
        self._domain = _domain_arg("Counter", domain).name
        self.value = 0
        if value is not None:
            self.set_value(value)

    def set_value(self, value: int) -> None:
        """Set the counter to ``value`` (an integer >= 0).

        Raises:
            TypeError: not an integer. ValueError: below zero.
        """
        self._set(self._integer("value", value), "set_value")

    def increment(self, delta: int = 1) -> None:
        """Add ``delta`` to the counter.

        Raises:
            TypeError: not an integer. ValueError: the counter would go below zero.
        """
        self._set(self.value + self._integer("delta", delta), "increment")

    def decrement(self, delta: int = 1) -> None:
        """Subtract ``delta`` from the counter.

        Raises:
            TypeError: not an integer. ValueError: the counter would go below zero.
        """
        self._set(self.value - self._integer("delta", delta), "decrement")

    def __iadd__(self, delta: int) -> Counter:
        self.increment(delta)
        return self

    def __isub__(self, delta: int) -> Counter:
        self.decrement(delta)
        return self

    def __str__(self) -> str:
        return self.name

    def _integer(self, what: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"Counter {self.name!r}: {what} must be an integer, got {value!r}")
        return int(value)

    def _set(self, value: int, how: str) -> None:
        if value < 0:
            raise ValueError(f"Counter {self.name!r}: {how} would make it {value}; a counter stays >= 0 "
                             f"(it is {self.value})")
        self.value = value
        _record(TraceEvent("C", self.name, self._domain, self._domain, threading.get_ident(), now_us(), 0.0,
                           {self.name: value}), float(value), "counter")


class Marker:
    """An instant of the trace, marked with ``mark(scope)`` under its domain.

    Raises:
        TypeError: ``domain`` not a Domain. TypeError, ValueError: ``name`` not a non-empty str.
    """

    def __init__(self, domain: Domain, name: str) -> None:
        self.name = _name_arg("Marker", name)
        self.domain = _domain_arg("Marker", domain)

    def mark(self, scope: str = "process") -> None:
        """Record the instant (while the profiler runs); ``scope``: 'global', 'process', 'thread', 'task' or
        'marker' (the last two are thread-wide in the trace).

        Raises:
            ValueError: another ``scope``.
        """
        if scope not in _MARKER_SCOPES:
            raise ValueError(f"Marker {self.name!r}: scope must be one of {', '.join(_MARKER_SCOPES)}, "
                             f"got {scope!r}")
        _record(TraceEvent("i", self.name, self.domain.name, self.domain.name, threading.get_ident(), now_us(), 0.0,
                           {"s": _MARKER_SCOPES[scope]}), stat_kind=None)  # an instant: not in the statistics

    def __str__(self) -> str:
        return self.name
