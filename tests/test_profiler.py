"""mx.profiler, after MXNet's tests/python/unittest/test_profiler.py: the Chrome trace of a training step, the
aggregate table's counts and sorting, pause/resume, stop, the user's domains/tasks/frames/events/counters/markers,
scopes (Gluon blocks' included), device times on a GPU, and arguments refused by name."""

from __future__ import annotations

import gc
import json
from collections import OrderedDict

import numpy as np
import pytest

import mxlite as mx
from mxlite import profiler
from mxlite.profiler import _session, hooks


@pytest.fixture(autouse=True)
def fresh_profiler():
    """Every test starts and ends with the profiler stopped, at its defaults, with nothing recorded."""
    _reset()
    yield
    _reset()


def _reset() -> None:
    profiler.set_state("stop")
    session = _session.SESSION
    session.config = _session.Config(profile_symbolic=True, profile_api=True, profile_memory=True)
    session.clear_events()
    session.stats = {}
    hooks.set_recording(False)


def _enable(tmp_path, name: str = "profile.json", aggregate_stats: bool = True, run: bool = True) -> str:
    filename = str(tmp_path / name)
    profiler.set_config(profile_symbolic=True, profile_imperative=True, profile_memory=True, profile_api=True,
                        filename=filename, continuous_dump=False, aggregate_stats=aggregate_stats)
    if run:
        profiler.set_state("run")
    return filename


def _load(filename: str) -> dict:
    with open(filename) as f:
        return json.load(f)


def _events(document: dict, ph: str | None = None, cat: str | None = None) -> list[dict]:
    return [e for e in document["traceEvents"] if e["ph"] != "M" and (ph is None or e["ph"] == ph)
            and (cat is None or e["cat"] == cat)]


def _process_names(document: dict) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in document["traceEvents"] if e["name"] == "process_name"}


def _train_step(device: mx.Device) -> None:
    net = mx.nn.Sequential(mx.nn.Dense(8, activation="relu"), mx.nn.Dense(3))
    net.initialize(mx.init.Xavier(), device=device)
    trainer = mx.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    x = mx.np.array(np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32), device=device)
    label = mx.np.array(np.array([0, 1, 2, 1], dtype=np.float32), device=device)
    loss_fn = mx.loss.SoftmaxCrossEntropyLoss()
    with mx.autograd.record():
        loss = loss_fn(net(x), label)
    loss.backward()
    trainer.step(4)


def test_trace_of_a_training_step_is_chrome_json(tmp_path):
    filename = _enable(tmp_path)
    _train_step(mx.cpu(0))
    profiler.set_state("stop")
    profiler.dump()
    document = _load(filename)
    assert mx.profiler is profiler and document["displayTimeUnit"] == "ms"
    assert set(_process_names(document).values()) == {"cpu/0"}
    ops = _events(document, "X", "operator")
    names = [e["name"] for e in ops]
    assert names.count("FullyConnected") == 2, names
    assert "relu" in names
    for e in document["traceEvents"]:
        assert isinstance(e["pid"], int) and e["ph"] in ("M", "X")
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0 and isinstance(e["tid"], int)
    layers = _events(document, "X", "layer")
    dense = [e for e in layers if e["name"] == "dense"]
    assert len(dense) == 2 and any(e["name"] == "sequential" for e in layers)
    # each FullyConnected runs inside its Dense layer's span, on the same process and thread
    for op, layer in zip([e for e in ops if e["name"] == "FullyConnected"], sorted(dense, key=lambda e: e["ts"])):
        assert (op["pid"], op["tid"]) == (layer["pid"], layer["tid"])
        assert layer["ts"] <= op["ts"] and op["ts"] + op["dur"] <= layer["ts"] + layer["dur"] + 1e-3
        assert op["args"]["scope"] == "sequential:dense:"


def test_dumps_counts_each_operator_call(tmp_path):
    _enable(tmp_path)
    profiler.dumps(reset=True)
    inp = mx.nd.zeros(shape=(100, 100))
    mx.nd.sqrt(inp)
    inp = inp + 1
    inp = inp + 1
    mx.nd.waitall()
    profiler.dump(False)
    stats = json.loads(profiler.dumps(format="json"))
    assert stats["Unit"] == {"Time": "ms", "Memory": "kb"} and stats["Memory"] == {}
    operators = stats["Time"]["operator"]
    assert operators["sqrt"]["Count"] == 1
    assert operators["broadcast_add"]["Count"] == 2
    add = operators["broadcast_add"]
    assert add["Min"] <= add["Avg"] <= add["Max"] and add["Total"] == pytest.approx(2 * add["Avg"])
    table = profiler.dumps(reset=True)
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines() if line.startswith(("sqrt", "broad"))}
    assert rows["sqrt"][0] == "1" and rows["broadcast_add"][0] == "2", table
    assert "Total Count" in table and "Avg Time (ms)" in table
    assert json.loads(profiler.dumps(format="json"))["Time"] == {}  # reset forgot them


def test_dumps_sorts_each_category(tmp_path):
    _enable(tmp_path)
    x = mx.np.ones((64, 64))
    for _ in range(3):
        mx.np.exp(x)
    mx.np.log(x)
    x.sum()
    keys = {"total": "Total", "avg": "Avg", "min": "Min", "max": "Max", "count": "Count"}
    for sort_by, key in keys.items():
        for ascending in (False, True):
            stats = json.loads(profiler.dumps(format="json", sort_by=sort_by, ascending=ascending),
                               object_pairs_hook=OrderedDict)
            values = [item[key] for item in stats["Time"]["operator"].values()]
            assert len(values) == 3 and values == sorted(values, reverse=not ascending), (sort_by, values)


def test_pause_and_resume_exclude_what_runs_in_between(tmp_path):
    filename = _enable(tmp_path)
    domain = profiler.Domain("PythonDomain::test_pause")
    profiler.pause()
    assert profiler.state == "run" and not hooks.recording
    task = profiler.Task(domain, "paused_task")
    task.start()
    mx.np.exp(mx.np.ones((3,)))
    task.stop()
    profiler.resume()
    event = profiler.Event("resumed_event")
    event.start()
    mx.np.log(mx.np.ones((3,)))
    event.stop()
    profiler.set_state("stop")
    profiler.dump()
    names = {e["name"] for e in _events(_load(filename))}
    assert names == {"log", "resumed_event"}, names


def test_stopped_profiler_records_nothing(tmp_path):
    filename = _enable(tmp_path, run=False)
    mx.np.exp(mx.np.ones((3,)))
    profiler.set_state("run")
    mx.np.log(mx.np.ones((3,)))
    profiler.set_state("stop")
    assert profiler.state == "stop" and not hooks.recording
    mx.np.sqrt(mx.np.ones((3,)))
    profiler.Event("after_stop").start()
    profiler.dump()
    assert [e["name"] for e in _events(_load(filename))] == ["log"]
    profiler.dump()  # a finished dump forgot it
    assert _events(_load(filename)) == []


def test_operators_off_in_the_config_are_not_recorded(tmp_path):
    filename = str(tmp_path / "tasks_only.json")
    profiler.set_config(filename=filename, aggregate_stats=True)  # no profile_* flag: operators off (MXNet's)
    profiler.set_state("run")
    assert not hooks.recording
    task = profiler.Task(profiler.Domain("d"), "t")
    task.start()
    mx.np.exp(mx.np.ones((3,)))
    task.stop()
    profiler.dump()
    assert [e["name"] for e in _events(_load(filename))] == ["t"]


def test_domain_task_frame_event_counter_marker_appear(tmp_path):
    filename = _enable(tmp_path)
    domain = profiler.Domain("PythonDomain")
    task = domain.new_task("a_task")
    frame = domain.new_frame("a_frame")
    counter = domain.new_counter("a_counter", 5)
    marker = domain.new_marker("a_marker")
    task.start()
    task.stop()
    for _ in range(2):
        frame.start()
        frame.stop()
    event = profiler.Event("an_event")
    event.start()
    event.stop()
    counter += 1
    counter -= 2
    counter.increment(3)
    counter.decrement()
    marker.mark("process")
    marker.mark("thread")
    profiler.dump(False)
    document = _load(filename)
    assert set(_process_names(document).values()) == {"PythonDomain", "event"}
    by_name = {}
    for e in _events(document):
        by_name.setdefault(e["name"], []).append(e)
    assert by_name["a_task"][0]["cat"] == "PythonDomain" and by_name["a_task"][0]["args"] == {"kind": "task"}
    assert [e["args"]["frame"] for e in by_name["a_frame"]] == [1, 2]
    assert by_name["an_event"][0]["cat"] == "event"
    assert [(e["ph"], e["args"]["a_counter"]) for e in by_name["a_counter"]] == [("C", v) for v in (5, 6, 4, 7, 6)]
    assert [(e["ph"], e["s"]) for e in by_name["a_marker"]] == [("i", "p"), ("i", "t")]
    stats = json.loads(profiler.dumps(format="json"))["Time"]
    assert stats["PythonDomain"]["a_frame"]["Count"] == 2 and stats["PythonDomain"]["a_task"]["Count"] == 1
    assert stats["event"]["an_event"]["Count"] == 1
    assert stats["PythonDomain"]["a_counter"] == {"Count": 5, "Total": 6, "Min": 4, "Max": 7, "Avg": 5.6}
    assert "PythonDomain (counter values)" in profiler.dumps()


def test_continuous_dumps_grow_and_stay_valid_json(tmp_path):
    filename = _enable(tmp_path)
    profiler.set_config(filename=filename, profile_all=True, continuous_dump=True, aggregate_stats=True)
    domain = profiler.Domain("PythonDomain::test_continuous_profile")
    sizes = []
    for i in range(3):
        profiler.Marker(domain, f"StartIteration-{i}").mark("process")
        mx.np.exp(mx.np.ones((3,)))
        profiler.dump(False)
        sizes.append(len(_events(_load(filename))))
    assert sizes == [2, 4, 6]
    assert len(profiler.dumps()) > 0


def test_scope_names_the_operators_inside(tmp_path):
    filename = _enable(tmp_path)
    assert profiler.scope().__enter__() == "<unk>:"
    with profiler.scope("outer") as outer:
        with profiler.scope("inner:") as inner:
            mx.np.exp(mx.np.ones((2,)))
        with profiler.scope("alone", append_mode=False):
            mx.np.log(mx.np.ones((2,)))
    mx.np.sqrt(mx.np.ones((2,)))
    profiler.dump()
    assert (outer, inner) == ("outer:", "outer:inner:")
    args = {e["name"]: e.get("args") for e in _events(_load(filename))}
    assert args == {"exp": {"scope": "outer:inner:"}, "log": {"scope": "alone:"}, "sqrt": None}


def test_dumps_without_aggregate_stats_warns_and_returns_nothing(tmp_path):
    _enable(tmp_path, aggregate_stats=False)
    mx.np.exp(mx.np.ones((2,)))
    with pytest.warns(UserWarning, match="aggregate_stats=True"):
        assert profiler.dumps() == ""


def test_bad_arguments_are_refused_by_name(tmp_path):
    with pytest.raises(TypeError, match="unknown argument.*profile_everything"):
        profiler.set_config(profile_everything=True)
    with pytest.raises(TypeError, match="aggregate_stats must be True or False, got 'yes'"):
        profiler.set_config(aggregate_stats="yes")
    with pytest.raises(ValueError, match="filename must be a non-empty path"):
        profiler.set_config(filename="")
    with pytest.raises(ValueError, match="dump_period must be > 0"):
        profiler.set_config(dump_period=0)
    with pytest.raises(ValueError, match="profile_process='server'"):
        profiler.set_config(profile_process="server")
    with pytest.raises(ValueError, match="state must be 'run' or 'stop', got 'go'"):
        profiler.set_state("go")
    with pytest.raises(ValueError, match="format must be 'table' or 'json', got 'xml'"):
        profiler.dumps(format="xml")
    with pytest.raises(ValueError, match="sort_by must be one of total, avg, min, max, count, got 'median'"):
        profiler.dumps(sort_by="median")
    with pytest.raises(TypeError, match="dump: finished must be True or False"):
        profiler.dump(finished="no")
    with pytest.raises(ValueError, match="pause: profile_process must be 'worker', got 'all'"):
        profiler.pause("all")
    with pytest.raises(TypeError, match="Task: domain must be a profiler.Domain, got str"):
        profiler.Task("PythonDomain", "t")
    with pytest.raises(ValueError, match="Domain: name must be a non-empty str"):
        profiler.Domain("")
    with pytest.raises(TypeError, match="scope: name must be a str"):
        profiler.scope(3).__enter__()
    domain = profiler.Domain("d")
    with pytest.raises(ValueError, match="Marker 'm': scope must be one of global, process, thread"):
        profiler.Marker(domain, "m").mark("galaxy")
    counter = profiler.Counter(domain, "c", 1)
    with pytest.raises(ValueError, match="Counter 'c': decrement would make it -1"):
        counter -= 2
    with pytest.raises(TypeError, match="Counter 'c': delta must be an integer, got 1.5"):
        counter.increment(1.5)
    task = profiler.Task(domain, "t")
    with pytest.raises(RuntimeError, match="Task 't' was not started"):
        task.stop()
    task.start()
    with pytest.raises(RuntimeError, match="Task 't' is already started"):
        task.start()
    assert _session.SESSION.config.filename == "profile.json"  # the refused calls changed nothing


def test_an_op_that_raises_records_nothing_and_leaves_the_profiler_usable(tmp_path):
    filename = _enable(tmp_path)
    with pytest.raises(ValueError, match="add"):
        mx.np.ones((2, 3)) + mx.np.ones((4,))
    mx.np.exp(mx.np.ones((2,)))
    profiler.dump()
    assert [e["name"] for e in _events(_load(filename))] == ["exp"]


@pytest.mark.gpu
def test_gpu_operators_get_device_times_from_cuda_events(tmp_path):
    filename = _enable(tmp_path)
    gc.disable()  # no collection between an op's host clock readings and its events
    try:
        _train_step(mx.gpu(0))
    finally:
        gc.enable()
    profiler.set_state("stop")
    stats = json.loads(profiler.dumps(format="json"))["Time"]
    profiler.dump()
    document = _load(filename)
    processes = _process_names(document)
    assert {"gpu/0 host", "gpu/0"} <= set(processes.values()), processes
    host = [e for e in _events(document, "X", "operator") if processes[e["pid"]] == "gpu/0 host"]
    device = _events(document, "X", "operator (gpu/0)")
    assert [e["name"] for e in device] == [e["name"] for e in host]
    assert [e["name"] for e in device].count("FullyConnected") == 2
    assert all(processes[e["pid"]] == "gpu/0" and e["dur"] >= 0 for e in device)
    threads = {e["args"]["name"] for e in document["traceEvents"] if e["name"] == "thread_name"
               and processes[e["pid"]] == "gpu/0"}
    assert threads and all(t.startswith("stream 0x") for t in threads)
    # the device's span of each op lies within the host's span of its call (the emulated GPU runs at issue),
    # up to the few microseconds of placing the device's clock on the host's
    for h, d in zip(sorted(host, key=lambda e: e["ts"]), sorted(device, key=lambda e: e["ts"])):
        assert h["ts"] - 20 <= d["ts"] and d["ts"] + d["dur"] <= h["ts"] + h["dur"] + 20, (h, d)
    assert stats["operator (gpu/0)"]["FullyConnected"]["Count"] == 2 == stats["operator"]["FullyConnected"]["Count"]


@pytest.mark.gpu
def test_emulated_event_timing_refuses_what_cuda_refuses():
    cupy = mx.gpu(0).xp
    with mx.gpu(0).use():
        stream = cupy.cuda.get_current_stream()
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        with pytest.raises(cupy.cuda.runtime.CUDARuntimeError, match="start_event .* never recorded"):
            cupy.cuda.get_elapsed_time(start, stop)
        start.record(stream)
        x = cupy.ones((256,), dtype=np.float32)
        (x * 2).sum()
        stop.record(stream)
        with pytest.raises(cupy.cuda.runtime.CUDARuntimeError, match="cudaErrorNotReady.*synchronize it first"):
            cupy.cuda.get_elapsed_time(start, stop)
        stop.synchronize()
        assert cupy.cuda.get_elapsed_time(start, stop) >= 0
        untimed = cupy.cuda.Event(disable_timing=True)
        untimed.record(stream)
        untimed.synchronize()
        with pytest.raises(cupy.cuda.runtime.CUDARuntimeError, match="end_event .* disable_timing=True"):
            cupy.cuda.get_elapsed_time(start, untimed)
