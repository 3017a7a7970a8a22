"""tests/deadlines.py: child deadlines that follow the machine's load, and where a late child stood."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import deadlines


def test_the_scale_follows_the_load(monkeypatch):
    monkeypatch.setattr(deadlines.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(deadlines.os, "getloadavg", lambda: (0.5, 0, 0))
    assert deadlines.scale() == 1.0
    monkeypatch.setattr(deadlines.os, "getloadavg", lambda: (8.0, 0, 0))  # six busy processes beside two of ours
    assert deadlines.scale() == 4.5 and deadlines.scaled(60) == 270
    monkeypatch.setattr(deadlines.os, "getloadavg", lambda: (100.0, 0, 0))
    assert deadlines.scale() == deadlines.MAX_SCALE


def test_a_late_child_is_stopped_with_its_stacks(monkeypatch):
    monkeypatch.setattr(deadlines, "scale", lambda: 1.0)
    code = "import time\ndef waiting_for_a_peer():\n    time.sleep(60)\nwaiting_for_a_peer()\n"
    with pytest.raises(subprocess.TimeoutExpired) as late:
        deadlines.run([sys.executable, "-c", code], timeout=2)
    assert "waiting_for_a_peer" in late.value.stderr and "still running after 2 s" in late.value.stderr


def test_a_child_in_time_is_an_ordinary_completed_process():
    done = deadlines.run([sys.executable, "-c", "print('ok')"], timeout=60)
    assert done.returncode == 0 and done.stdout == "ok\n"
