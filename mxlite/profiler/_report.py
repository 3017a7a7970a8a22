"""What the profiler writes: the Chrome trace (``dump``) and the aggregate statistics (``dumps``).

The trace is the JSON object chrome://tracing and Perfetto read, as MXNet writes it: ``traceEvents`` (a
``process_name`` metadata event per process, ``thread_name`` per thread, then the events) and
``displayTimeUnit``. The statistics come as MXNet's table or MXNet's JSON (``Time``/``Memory``/``Unit``),
durations in milliseconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ._session import Stat, TraceEvent

SORT_KEYS = ("total", "avg", "min", "max", "count")
_NAME_WIDTH = 25  # MXNet's name column, widened to the longest name
_COLUMN = 16


def trace(events: Iterable[TraceEvent], threads: dict[int, str]) -> dict[str, Any]:
    """The Chrome trace object of ``events`` (``threads``: host thread idents -> names)."""
    processes: dict[str, int] = {}
    thread_ids: dict[tuple[int, Any], int] = {}
    meta: list[dict[str, Any]] = []
    body: list[dict[str, Any]] = []
    for event in sorted(events, key=lambda e: e.ts):
        pid = processes.get(event.process)
        if pid is None:
            pid = processes[event.process] = len(processes)
            meta.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": event.process}})
        tid = thread_ids.get((pid, event.thread))
        if tid is None:
            tid = thread_ids[(pid, event.thread)] = len(thread_ids)
            name = threads.get(event.thread, str(event.thread)) if isinstance(event.thread, int) else event.thread
            meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        body.append(_trace_event(event, pid, tid))
    return {"traceEvents": meta + body, "displayTimeUnit": "ms"}


def _trace_event(event: TraceEvent, pid: int, tid: int) -> dict[str, Any]:
    out: dict[str, Any] = {"name": event.name, "cat": event.cat, "ph": event.ph, "ts": round(event.ts, 3),
                           "pid": pid, "tid": tid}
    if event.ph == "X":
        out["dur"] = round(event.dur, 3)
    args = dict(event.args or {})
    if event.ph == "i":
        out["s"] = args.pop("s", "t")  # an instant's scope: global, process or thread
    if args:
        out["args"] = args
    return out


def _sorted(names: dict[str, Stat], sort_by: str, ascending: bool) -> list[tuple[str, Stat]]:
    def key(item: tuple[str, Stat]) -> float:
        stat = item[1]
        return {"total": stat.last if stat.kind == "counter" else stat.total, "avg": stat.total / stat.count,
                "min": stat.low, "max": stat.high, "count": stat.count}[sort_by]

    return sorted(names.items(), key=key, reverse=not ascending)


def _values(stat: Stat) -> dict[str, float]:
    """Count, Total, Min, Max, Avg: milliseconds for durations; a counter's last value as its Total."""
    if stat.kind == "counter":
        return {"Count": stat.count, "Total": stat.last, "Min": stat.low, "Max": stat.high,
                "Avg": stat.total / stat.count}
    ms = 1e-3
    return {"Count": stat.count, "Total": stat.total * ms, "Min": stat.low * ms, "Max": stat.high * ms,
            "Avg": stat.total / stat.count * ms}


def stats_json(stats: dict[str, dict[str, Stat]], sort_by: str, ascending: bool) -> str:
    """MXNet's JSON of the aggregate statistics: ``{"Time": {category: {name: {...}}}, "Memory", "Unit"}``."""
    time = {category: {name: _values(stat) for name, stat in _sorted(names, sort_by, ascending)}
            for category, names in stats.items()}
    return json.dumps({"Time": time, "Memory": {}, "Unit": {"Time": "ms", "Memory": "kb"}}, indent=4)


def stats_table(stats: dict[str, dict[str, Stat]], sort_by: str, ascending: bool) -> str:
    """MXNet's table of the aggregate statistics: a section per category, a row per name."""
    lines = ["", "Profile Statistics:", "\tNote the difference in units for different entries."]
    for category, names in stats.items():
        for kind in ("duration", "counter"):
            rows = [(n, s) for n, s in _sorted(names, sort_by, ascending) if s.kind == kind]
            if rows:
                lines += _section(category if kind == "duration" else f"{category} (counter values)", rows, kind)
    return "\n".join(lines) + "\n"


def _section(title: str, rows: list[tuple[str, Stat]], kind: str) -> list[str]:
    width = max(_NAME_WIDTH, max(len(name) for name, _ in rows) + 1)
    unit = "Time (ms)" if kind == "duration" else "Value"
    heads = ["Total Count", unit if kind == "duration" else "Last Value", f"Min {unit}", f"Max {unit}",
             f"Avg {unit}"]
    out = [title, "=================", "Name".ljust(width) + " ".join(h.rjust(_COLUMN) for h in heads),
           "----".ljust(width) + " ".join(("-" * len(h)).rjust(_COLUMN) for h in heads)]
    for name, stat in rows:
        v = _values(stat)
        numbers = [f"{v[k]:.4f}".rjust(_COLUMN) for k in ("Total", "Min", "Max", "Avg")]
        out.append(name.ljust(width) + str(v["Count"]).rjust(_COLUMN) + " " + " ".join(numbers))
    return out + [""]
