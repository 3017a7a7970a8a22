"""The host build cache (mxlite/device/_hostcuda/build.py): one verified entry per key.

Every entry (a module's ``<digest>/``, a flag set's ``support-*/``) is loaded only after its files'
sizes and SHA-256 match its ``entry.json``; a damaged entry is set aside and rebuilt with a warning.
Staging folders of builders that died are removed by the next build, never a live builder's; a
compiler that fails, is killed or writes nothing is named, and nothing it left is cached; the
cache folder's own failures name the folder and the cause. (A truncated library in a fresh process,
a SIGKILLed build and a compiler that writes nothing end to end: tests/test_hardening.py, N1 and N16.)
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
import uuid
import warnings

import numpy as np
import pytest

from mxlite.device import _hostcuda as hostcuda
from mxlite.device import staging
from mxlite.device._hostcuda import HostCudaBuildError, HostCudaError, HostModule, build

ADD_ONE = r"""
__global__ void add_one(float *x, long long n) {
    for (long long i = threadIdx.x; i < n; i += blockDim.x) x[i] += 1.0f;
}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache folder; g++ and CUDA's headers or a skip."""
    try:
        hostcuda.compiler()
        hostcuda.cuda_include_dirs()
    except hostcuda.HostCudaError as exc:
        pytest.skip(f"no host build here: {exc}")
    folder = tmp_path / "cache"
    monkeypatch.setenv("MXLITE_HOSTCUDA_CACHE", str(folder))
    return folder


def _source() -> str:
    return ADD_ONE + f"// {uuid.uuid4()}\n"  # a key of its own: never in another test's cache


def _run(source: str) -> list[float]:
    x = np.zeros(3, np.float32)
    HostModule(source, name="add_one.cu", serial=True).get_function("add_one")((1,), (1,), (x, 3))
    return x.tolist()


def _forget(monkeypatch) -> None:
    """As a fresh process: nothing loaded, only the disk cache is left."""
    monkeypatch.setattr(build, "_libraries", {})


def _entries(cache) -> dict[str, str]:
    """{'module': its folder, 'support': the support folder} of a cache holding one module."""
    names = os.listdir(cache)
    module = [n for n in names if not n.startswith(("support-", "."))]
    support = [n for n in names if n.startswith("support-")]
    assert len(module) == 1 and len(support) == 1, names
    return {"module": str(cache / module[0]), "support": str(cache / support[0])}


def _replace(path: str, data: bytes) -> None:
    """Write ``data`` as a new file in place of ``path`` (a new inode: this process's mapping is not touched)."""
    with open(path + ".new", "wb") as f:
        f.write(data)
    os.replace(path + ".new", path)


def _flip(path: str) -> None:
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x10
    _replace(path, bytes(data))


DAMAGE = {
    # which entry, which file, what is done to it
    "library-flipped": ("module", "module.so", _flip),
    "library-truncated": ("module", "module.so", lambda p: _replace(p, open(p, "rb").read()[:1000])),
    "unit-empty": ("module", "unit.cpp", lambda p: _replace(p, b"")),
    "entry-garbage": ("module", "entry.json", lambda p: _replace(p, b"{not json")),
    "entry-missing": ("module", "entry.json", os.unlink),
    "library-missing": ("module", "module.so", os.unlink),
    "pch-flipped": ("support", "cuda_host.h.gch", _flip),
    "runtime-truncated": ("support", "runtime.o", lambda p: _replace(p, open(p, "rb").read()[:64])),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_entry_is_set_aside_and_rebuilt_with_a_warning(cache, monkeypatch, damage):
    which, name, do = DAMAGE[damage]
    source = _source()
    assert _run(source) == [1.0] * 3
    entries = _entries(cache)
    do(os.path.join(entries[which], name))
    if which == "support":  # a support folder is read only when a module is built: ask for another module
        source = _source()
    _forget(monkeypatch)
    before = hostcuda.build_count()
    says = rf"cached host build of .*add_one.cu in .*{os.path.basename(entries[which])} was damaged \("
    with pytest.warns(RuntimeWarning, match=says) as caught:
        assert _run(source) == [1.0] * 3
    assert name in str(caught[0].message) or "entry.json" in str(caught[0].message), caught[0].message
    assert hostcuda.build_count() > before  # rebuilt, not loaded
    assert build._verified(entries[which], build._SUPPORT_FILES if which == "support" else build._MODULE_FILES) is None
    assert not [n for n in os.listdir(cache) if n.startswith(".")], "nothing set aside or staged is left"
    _forget(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rebuilt entry verifies: no warning, no build
        built = hostcuda.build_count()
        assert _run(source) == [1.0] * 3
        assert hostcuda.build_count() == built


def test_an_entry_lists_every_file_with_its_size_and_digest(cache):
    _run(_source())
    for kind, files in (("module", build._MODULE_FILES), ("support", build._SUPPORT_FILES)):
        folder = _entries(cache)[kind]
        entry = json.loads(open(os.path.join(folder, "entry.json")).read())
        assert entry["format"] == "hostcuda-entry-1" and sorted(entry["files"]) == sorted(files)
        for name, listed in entry["files"].items():
            path = os.path.join(folder, name)
            assert listed == {"bytes": os.path.getsize(path), "sha256": build._sha256_hex(path)}
        assert sorted(os.listdir(folder)) == sorted([*files, "entry.json"])


def test_a_build_is_made_durable_before_it_is_renamed_into_place(cache, monkeypatch):
    events = []
    monkeypatch.setattr(build, "fsync_file", lambda p: events.append(("file", os.path.basename(p))))
    monkeypatch.setattr(build, "fsync_dir", lambda p: events.append(("dir", os.path.basename(p))))
    rename = os.rename
    monkeypatch.setattr(build.os, "rename", lambda a, b: (events.append(("rename", os.path.basename(b))),
                                                          rename(a, b)))
    _run(_source())
    entries = {k: os.path.basename(v) for k, v in _entries(cache).items()}
    for kind, files in (("support", build._SUPPORT_FILES), ("module", build._MODULE_FILES)):
        at = events.index(("rename", entries[kind]))
        before = events[:at]
        assert {("file", f) for f in files} <= set(before), (kind, events)
        assert before[-1][0] == "dir" and before[-1][1].startswith(".build-"), (kind, events)  # the staging folder
        assert events[at + 1] == ("dir", "cache"), (kind, events)  # then the cache folder: the rename is durable


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_staging_folders_of_dead_builders_are_removed_and_live_ones_kept(cache):
    cache.mkdir()
    tag, old = build._host_tag(), time.time() - 2 * 24 * 3600
    other = "0" * 8 if tag != "0" * 8 else "1" * 8
    folders = {
        f".build-{tag}-{_dead_pid()}-0badc0de": False,        # this host, its builder is gone
        f".build-{tag}-{os.getpid()}-600dc0de": True,         # this host, alive (this process)
        f".build-{other}-{os.getpid()}-0ddba11a": True,       # another host: cannot be asked, young
        f".build-{other}-12345-0ddba11b": False,              # another host, two days old
        ".build-k1ll3d_x": True,                              # an older mxlite's tempfile name, young
        ".build-0ld_temp": False,                             # the same, two days old
        ".broken-abc-1234": False,                            # a damaged entry set aside
    }
    for name in folders:
        (cache / name).mkdir()
        (cache / name / "runtime.o").write_bytes(b"x" * 1000)
    for name in (f".build-{other}-12345-0ddba11b", ".build-0ld_temp"):
        os.utime(cache / name, (old, old))
    _run(_source())
    left = {n for n in os.listdir(cache) if n.startswith(".")}
    assert left == {n for n, keep in folders.items() if keep}


def test_the_abandonment_rule_is_the_checkpoints_too():
    assert staging.abandoned(True, _dead_pid(), 0.0)
    assert not staging.abandoned(True, os.getpid(), 1e9)  # alive: never, however old
    assert not staging.abandoned(False, 1, staging.FOREIGN_HOST_AGE - 1)
    assert staging.abandoned(False, 1, staging.FOREIGN_HOST_AGE + 1)
    assert not staging.pid_alive(True) and not staging.pid_alive("12") and not staging.pid_alive(0)


_KILLED_CXX = """#!/bin/sh
case " $* " in
  *" -o "*) kill -9 $$ ;;
esac
exec g++ "$@"
"""


def test_a_compiler_killed_by_a_signal_is_named_and_nothing_is_cached(cache, tmp_path, monkeypatch):
    cxx = tmp_path / "cxx"
    cxx.write_text(_KILLED_CXX)
    cxx.chmod(0o755)
    monkeypatch.setenv("MXLITE_HOSTCUDA_CXX", str(cxx))
    with pytest.raises(HostCudaBuildError, match=rf"the C\+\+ compiler {cxx} was killed by signal 9 \(SIGKILL\) "
                                                 r"\(the out-of-memory killer\?\) while compiling cuda_host.h"):
        HostModule(_source(), name="add_one.cu", serial=True).compile()
    assert os.listdir(cache) == []


@pytest.mark.parametrize("code, says", [(errno.ENOSPC, "the disk holding it is full"),
                                        (errno.EACCES, "it cannot be written"),
                                        (errno.EROFS, "read-only file system"), (errno.EIO, "")])
def test_the_cache_folders_own_failures_name_the_folder_and_the_cause(code, says):
    with pytest.raises(HostCudaError, match=r"cannot build k.cu in the host build cache /c/d \(writing x") as caught:
        with build._CacheFolder("/c/d", "k.cu", "writing x"):
            raise OSError(code, os.strerror(code))
    assert says in str(caught.value) and "MXLITE_HOSTCUDA_CACHE names another folder" in str(caught.value)
    assert isinstance(caught.value.__cause__, OSError)
    with pytest.raises(HostCudaBuildError), build._CacheFolder("/c/d", "k.cu", "x"):  # not the folder's: passes
        raise HostCudaBuildError("g++ failed")


@pytest.mark.parametrize("value, seed", [("", hostcuda.DEFAULT_SEED), (" 7 ", 7), ("0x10", 16), ("-3", -3)])
def test_the_scheduling_seed_is_read_as_every_setting(monkeypatch, value, seed):
    monkeypatch.setenv("MXLITE_HOSTCUDA_SEED", value)
    assert HostModule(ADD_ONE, name="seed.cu").seed == seed


@pytest.mark.parametrize("value", ["x", "1.5", str(2**64), "nan"])
def test_a_bad_scheduling_seed_is_named(monkeypatch, value):
    monkeypatch.setenv("MXLITE_HOSTCUDA_SEED", value)
    with pytest.raises(ValueError, match=rf"MXLITE_HOSTCUDA_SEED must be an integer .*got '{value}'"):
        HostModule(ADD_ONE, name="seed.cu")


def test_a_compiler_that_is_not_there_names_the_variable(monkeypatch):
    monkeypatch.setenv("MXLITE_HOSTCUDA_CXX", " no-such-g++ ")
    with pytest.raises(hostcuda.HostCudaSetupError, match=r"'no-such-g\+\+' \(g\+\+\) \(MXLITE_HOSTCUDA_CXX="):
        hostcuda.compiler()
