"""Building a rewritten source into a cached shared library: CUDA's headers, NVRTC options, g++, the cache.

:func:`cuda_include_dirs` finds CUDA's half-precision headers in pip packages; :func:`_map_options` turns
NVRTC options into g++ ones; :func:`_load` builds (or finds in the cache, ``MXLITE_HOSTCUDA_CACHE``) the
library of one translation unit, with a per-flag-set ``support-*`` folder holding the precompiled
``cuda_host.h`` and the compiled runtime.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from .. import env
from ..staging import abandoned, fsync_dir, fsync_file
from .errors import _COMPILE_LINES, _FORMAT, _HEADER, _RUNTIMES, HostCudaBuildError, HostCudaError, HostCudaSetupError

# -- locating CUDA's headers -----------------------------------------------------------------------
_REQUIRED_HEADERS = ("cuda_fp16.h", "cuda_fp16.hpp", "cuda_bf16.h", "cuda_bf16.hpp", "vector_types.h",
                     "crt/host_defines.h", "nv/target")
# (description, pip packages, include folders under site-packages/nvidia)
_LAYOUTS = (
    ("CUDA 13", "nvidia-cuda-runtime nvidia-cuda-crt nvidia-cuda-cccl", ("cu13/include",)),
    ("CUDA 12", "nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-cccl-cu12",
     ("cuda_runtime/include", "cuda_nvcc/include", "cuda_cccl/include")),
)
_include_dirs: tuple[str, ...] | None = None


def _nvidia_roots() -> list[str]:
    roots: list[str] = []
    spec = importlib.util.find_spec("nvidia")
    if spec is not None and spec.submodule_search_locations:
        roots += [str(p) for p in spec.submodule_search_locations]
    for entry in sys.path:
        candidate = os.path.join(entry or ".", "nvidia")
        if os.path.isdir(candidate) and candidate not in roots:
            roots.append(candidate)
    return roots


def cuda_include_dirs() -> tuple[str, ...]:
    """The include folders holding CUDA's ``cuda_fp16.h``/``cuda_bf16.h`` and what they include.

    Looked up in the installed pip packages (``site-packages/nvidia/...``), never in a
    hand-installed toolkit: the CUDA 13 set (``nvidia-cuda-runtime``, ``nvidia-cuda-crt``,
    ``nvidia-cuda-cccl``: ``nvidia/cu13/include``) or the CUDA 12 set
    (``nvidia-cuda-runtime-cu12``, ``nvidia-cuda-nvcc-cu12`` for ``crt/``, ``nvidia-cuda-cccl-cu12``
    for ``nv/target``).

    Raises:
        HostCudaSetupError: no complete set is installed (the message names the packages).
    """
    global _include_dirs
    if _include_dirs is not None:
        return _include_dirs
    partial = []
    for root in _nvidia_roots():
        for _label, _packages, folders in _LAYOUTS:
            dirs = [os.path.join(root, f) for f in folders if os.path.isdir(os.path.join(root, f))]
            if not dirs:
                continue
            missing = [h for h in _REQUIRED_HEADERS if not any(os.path.isfile(os.path.join(d, h)) for d in dirs)]
            if not missing:
                _include_dirs = tuple(dirs)
                return _include_dirs
            partial.append(f"{', '.join(dirs)} lacks {', '.join(missing)}")
    found = f" Found only: {'; '.join(partial)}." if partial else ""
    raise HostCudaSetupError(
        "the host CUDA build needs CUDA's cuda_fp16.h/cuda_bf16.h host headers from pip packages: "
        f"pip install {_LAYOUTS[0][1]}  (CUDA 13 headers, about 7 MB), or the CUDA 12 set "
        f"pip install {_LAYOUTS[1][1]}.{found}")



# -- options ------------------------------------------------------------------------------------------
_IGNORED_OPTIONS = re.compile(
    r"^(?:-arch|--gpu-architecture|-code|-ftz|--ftz|-fmad|--fmad|-prec-div|--prec-div|-prec-sqrt|--prec-sqrt|"
    r"-use_fast_math|--use_fast_math|-lineinfo|--generate-line-info|-G|--device-debug|-rdc|"
    r"--relocatable-device-code|-dc|-dw|-ewp|--extensible-whole-program|-maxrregcount|--maxrregcount|-restrict|"
    r"--restrict|-dopt|--dopt|-default-device|--device-as-default-execution-space|-dlto|--dlink-time-opt|"
    r"-split-compile|--split-compile|-time|--time|-jump-table-density|-pch|--pch|-Xptxas|--ptxas-options|"
    r"-opt-info|-err-no|-no-source-include|--no-source-include|-builtin-move-forward|-builtin-initializer-list|"
    r"-extra-device-vectorization|-modify-stack-limit|-minimal)(?:=.*)?$")


def _map_options(options: Sequence[str]) -> tuple[str, list[str]]:
    std, flags = "c++17", []
    for opt in options:
        if not isinstance(opt, str):
            raise TypeError(f"options must be strings, got {opt!r}")
        m = re.fullmatch(r"--?std=(c\+\+\d\w)", opt)
        if m:
            std = m.group(1)
        elif re.match(r"^(-D|-U|-I)\S", opt):
            flags.append(opt)
        elif re.match(r"^--(define-macro|undefine-macro|include-path)=", opt):
            key, value = opt[2:].split("=", 1)
            flags.append({"define-macro": "-D", "undefine-macro": "-U", "include-path": "-I"}[key] + value)
        elif opt in ("-w", "--disable-warnings"):
            flags.append("-w")
        elif _IGNORED_OPTIONS.match(opt):
            continue
        else:
            raise ValueError(f"NVRTC option {opt!r} has no meaning in the host build (hostcuda accepts -std=, -D, -U, "
                             "-I, -w and ignores architecture, debug and fast-math/ftz/fmad options)")
    return std, flags


# -- building ----------------------------------------------------------------------------------------
_build_count = 0
_build_lock = threading.Lock()  # guards _entry_locks
_entry_locks: dict[str, threading.Lock] = {}  # one per cache entry: builds of different entries run side by side
_libraries: dict[str, ctypes.CDLL] = {}
_compiler_ids: dict[str, str] = {}


def _lock_for(key: str) -> threading.Lock:
    """The lock of one cache entry (a module's digest, a support folder): threads building different entries
    run their g++ side by side; two threads wanting the same entry build it once."""
    with _build_lock:
        return _entry_locks.setdefault(key, threading.Lock())


def build_count() -> int:
    """How many times this process has run g++ (cache hits do not count)."""
    return _build_count


def cache_dir() -> str:
    """Where built modules are kept: ``MXLITE_HOSTCUDA_CACHE``, else ``~/.cache/mxlite/hostcuda``."""
    return env.text("MXLITE_HOSTCUDA_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "mxlite", "hostcuda"))


def compiler() -> str:
    """The path of the C++ compiler the host build uses (``MXLITE_HOSTCUDA_CXX``, default g++).

    Raises:
        HostCudaSetupError: it is not on PATH (the message names MXLITE_HOSTCUDA_CXX when it is set).
    """
    cxx = env.text("MXLITE_HOSTCUDA_CXX", "g++")
    path = shutil.which(cxx)
    if path is None:
        named = f" (MXLITE_HOSTCUDA_CXX={cxx!r})" if env.raw("MXLITE_HOSTCUDA_CXX") else ""
        raise HostCudaSetupError(f"the host CUDA build needs the C++ compiler {cxx!r} (g++){named}, which is not on "
                                 "PATH")
    return path


def _compiler_version(cxx: str) -> str:
    """``cxx``'s path, version and target machine (part of every cache key), asked once per compiler."""
    found = _compiler_ids.get(cxx)
    if found is None:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout
        machine = subprocess.run([cxx, "-dumpmachine"], capture_output=True, text=True, check=False).stdout
        found = _compiler_ids[cxx] = f"{cxx}\n{out}\n{machine}"
    return found


def _file_digest(path: str) -> bytes:
    return bytes.fromhex(_sha256_hex(path))


def _run_compiler(command: list[str], what: str, outputs: Sequence[str]) -> None:
    """Run the compiler; it must exit 0 and write every file of ``outputs`` (non-empty).

    Raises:
        HostCudaSetupError: the compiler cannot be run.
        HostCudaBuildError: it failed (its output quoted), was killed by a signal, or exited 0 without
            writing an output: the compiler is blamed, never the cache folder.
    """
    global _build_count
    with _build_lock:  # builds of different entries run on several threads
        _build_count += 1
    cxx = command[0]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise HostCudaSetupError(f"cannot run the C++ compiler {cxx!r} for the host build: {exc}") from exc
    if result.returncode < 0:
        number = -result.returncode
        name = signal.Signals(number).name if number in signal.valid_signals() else f"signal {number}"
        hint = " (the out-of-memory killer?)" if number == signal.SIGKILL else ""
        raise HostCudaBuildError(f"the C++ compiler {cxx} was killed by signal {number} ({name}){hint} while "
                                 f"compiling {what} for the host (hostcuda)")
    if result.returncode != 0:
        lines = (result.stderr + result.stdout).splitlines()
        shown = "\n".join(lines[:_COMPILE_LINES])
        more = f"\n... ({len(lines) - _COMPILE_LINES} more lines)" if len(lines) > _COMPILE_LINES else ""
        raise HostCudaBuildError(f"g++ failed to compile {what} for the host (hostcuda):\n{shown}{more}")
    for output in outputs:
        if not os.path.isfile(output) or os.path.getsize(output) == 0:
            raise HostCudaBuildError(
                f"the C++ compiler {cxx} exited with status 0 but wrote no {os.path.basename(output)} while "
                f"compiling {what}; the compiler is broken or was interrupted (MXLITE_HOSTCUDA_CXX names another)")


# -- the cache: one verified entry per key --------------------------------------------------------------
# <cache>/<digest40>/ holds module.so and unit.cpp, <cache>/support-<key32>/ the precompiled header and the
# runtime; each with entry.json (every file's size and SHA-256), written last. An entry is built in a staging
# folder of its own, .build-<host>-<pid>-<token> (the name says who writes it, from the first instant), every
# file fsynced, then renamed into place and the cache folder fsynced: a crash leaves no entry or a whole one.
# A library is loaded only after its sizes and digests match: a truncated library would be mapped past its
# end and kill the process with SIGBUS inside dlopen, where no Python code can catch it. A damaged entry is
# renamed aside (.broken-*, atomic: a process that has the old file mapped keeps its inode), removed, and
# rebuilt with a warning. Staging folders of builders that died (a SIGKILL, the OOM killer) and .broken-*
# folders are removed by the next build.
_ENTRY = "entry.json"
_ENTRY_FORMAT = "hostcuda-entry-1"
_MODULE_FILES = ("module.so", "unit.cpp")
_SUPPORT_FILES = ("cuda_host.h", "cuda_host.h.gch", "runtime.o")
_STAGING = ".build-"
_BROKEN = ".broken-"
_STAGING_NAME = re.compile(r"^\.build-([0-9a-f]{8})-(\d+)-[0-9a-f]+$")
_UNMARKED_AGE = 3600.0  # a staging folder whose name says no writer (an older mxlite's tempfile name)
_BUILD_AGE = 24 * 3600.0  # no build takes a day: older staging folders are abandoned whatever their pid says


def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


class _CacheFolder:
    """Turns an OSError of the cache folder's own operations into a HostCudaError naming the folder and the cause.

    Only around making folders, writing files and renaming: the compiler's failures are its own errors.
    """

    def __init__(self, folder: str, filename: str, doing: str) -> None:
        self.folder, self.filename, self.doing = folder, filename, doing

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if not isinstance(exc, OSError):
            return
        why = {errno.ENOSPC: "the disk holding it is full", errno.EDQUOT: "the disk quota is used up",
               errno.EACCES: "it cannot be written", errno.EPERM: "it cannot be written",
               errno.EROFS: "it is on a read-only file system"}.get(exc.errno, "")
        raise HostCudaError(f"cannot build {self.filename} in the host build cache {self.folder} ({self.doing}"
                            f"{': ' + why if why else ''}): {exc}. MXLITE_HOSTCUDA_CACHE names another folder") from exc


def _verified(folder: str, files: Sequence[str]) -> str | None:
    """None when ``folder`` holds ``files`` as its entry.json records them (sizes, SHA-256), else what differs."""
    try:
        with open(os.path.join(folder, _ENTRY), "rb") as f:
            entry = json.loads(f.read())
        listed = entry["files"] if entry.get("format") == _ENTRY_FORMAT else None
        if not isinstance(listed, dict) or sorted(listed) != sorted(files):
            return f"{_ENTRY} does not list {', '.join(files)}"
        for name in files:
            path = os.path.join(folder, name)
            size, expected = os.path.getsize(path), listed[name]["bytes"]
            if size != expected:
                return f"{name} has {size} bytes, {expected} expected"
            if _sha256_hex(path) != listed[name]["sha256"]:
                return f"{name} has another SHA-256 than when it was built"
    except FileNotFoundError as exc:
        return f"{os.path.basename(exc.filename or '?')} is missing"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"its {_ENTRY} cannot be read ({type(exc).__name__}: {exc})"
    return None


def _sha256_hex(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _usable(folder: str, files: Sequence[str], what: str) -> bool:
    """Whether the cache entry ``folder`` is there and verified; a damaged one is set aside (with a warning)."""
    if not os.path.isdir(folder):
        return False
    problem = _verified(folder, files)
    if problem is None:
        return True
    warnings.warn(f"the cached host build of {what} in {folder} was damaged ({problem}); rebuilding it",
                  RuntimeWarning, stacklevel=4)
    _set_aside(folder)
    return False


def _set_aside(folder: str) -> None:
    """Rename a damaged entry out of the way (atomic), then remove it; another process may have done either."""
    aside = os.path.join(os.path.dirname(folder), f"{_BROKEN}{os.path.basename(folder)}-{secrets.token_hex(4)}")
    try:
        os.rename(folder, aside)
    except OSError:
        return  # gone already (another process set it aside), or the folder cannot be written: the build says so
    shutil.rmtree(aside, ignore_errors=True)


def _remove_dead_staging(root: str) -> None:
    """Remove the staging folders of builders that died, and damaged entries set aside; never a live build's."""
    now = time.time()
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if name.startswith(_BROKEN):
            shutil.rmtree(path, ignore_errors=True)
            continue
        if not name.startswith(_STAGING):
            continue
        try:
            age = now - os.path.getmtime(path)
        except OSError:
            continue
        writer = _STAGING_NAME.match(name)
        if writer is None:
            dead = age > _UNMARKED_AGE
        else:
            dead = age > _BUILD_AGE or abandoned(writer.group(1) == _host_tag(), int(writer.group(2)), age)
        if dead:
            shutil.rmtree(path, ignore_errors=True)


def _publish(staging: str, final: str, files: Sequence[str], what: str) -> None:
    """Make ``staging`` durable with its entry.json and rename it to ``final``; a verified concurrent entry wins."""
    listed = {}
    for name in files:
        path = os.path.join(staging, name)
        fsync_file(path)
        listed[name] = {"bytes": os.path.getsize(path), "sha256": _sha256_hex(path)}
    entry = os.path.join(staging, _ENTRY)
    with open(entry, "w") as f:
        f.write(json.dumps({"format": _ENTRY_FORMAT, "files": listed}, indent=1))
        f.flush()
        os.fsync(f.fileno())
    os.chmod(staging, 0o755)
    fsync_dir(staging)
    root = os.path.dirname(final)
    for _ in range(2):
        try:
            os.rename(staging, final)  # atomic; fails when the entry exists (a concurrent builder's, or damaged)
        except OSError:
            if not os.path.isdir(final):
                raise
            if _usable(final, files, what):
                return  # theirs is whole: ours is dropped by the caller
            continue  # theirs was damaged and is set aside: try again
        fsync_dir(root)
        return
    os.rename(staging, final)  # a third builder got there again: its error, if any, is the cache's


def _build_entry(root: str, final: str, files: Sequence[str], what: str, build: Callable[[str], None]) -> None:
    """Build an entry with ``build(staging)`` (which writes ``files`` there) and publish it as ``final``."""
    with _CacheFolder(root, what, "making the build folder"):
        os.makedirs(root, exist_ok=True)
        _remove_dead_staging(root)
        staging = os.path.join(root, f"{_STAGING}{_host_tag()}-{os.getpid()}-{secrets.token_hex(4)}")
        os.mkdir(staging)
    try:
        build(staging)
        with _CacheFolder(root, what, "publishing the build"):
            _publish(staging, final, files, what)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _support(base: list[str], digest_parts: list[bytes], runtime_source: str, filename: str) -> tuple[str, str]:
    """(header to -include, runtime object) for one set of flags: built once, then shared by modules.

    The header is cuda_host.h next to its precompiled ``.gch``, so a module's translation unit
    does not parse CUDA's fp16/bf16 headers again, and the runtime is compiled only once. Verified
    (its 30 MB hashed) only when a module is built, which takes far longer.
    """
    key = hashlib.sha256(b"support\0" + "\0".join(base).encode() + b"\0" + b"".join(digest_parts)).hexdigest()
    root = cache_dir()
    folder = os.path.join(root, f"support-{key[:32]}")
    header, runtime = os.path.join(folder, "cuda_host.h"), os.path.join(folder, "runtime.o")
    what = f"the shared header and runtime of {filename}"
    with _lock_for(folder):
        if not _usable(folder, _SUPPORT_FILES, what):
            _build_support(root, folder, base, runtime_source, filename, what)
    return header, runtime


def _build_support(root: str, folder: str, base: list[str], runtime_source: str, filename: str, what: str) -> None:

    def build(staging: str) -> None:
        staged = os.path.join(staging, "cuda_host.h")
        with _CacheFolder(root, filename, "writing cuda_host.h"):
            shutil.copyfile(_HEADER, staged)
        _run_compiler([*base, "-x", "c++-header", staged, "-o", staged + ".gch"], "cuda_host.h", [staged + ".gch"])
        _run_compiler([*base, "-include", _HEADER, "-c", runtime_source, "-o", os.path.join(staging, "runtime.o")],
                      os.path.basename(runtime_source), [os.path.join(staging, "runtime.o")])

    _build_entry(root, folder, _SUPPORT_FILES, what, build)


# The serial build's extra flags: -O3 vectorises the block loops, with this machine's widest vectors
# (-march=native: the cache key then includes the target g++ resolves it to, so a cache shared by
# different machines never hands one a library built for another); errno and FP traps are never
# read, and leaving them out lets g++ use the vector square root and if-convert the NaN-keeping
# selects. None of this changes a result: every operation stays an IEEE operation in source order
# (-ffp-contract=off still forbids fused multiply-adds, and there is no fast math).
_SERIAL_FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-DHOSTCUDA_SERIAL")
_native_targets: dict[str, str] = {}


def _native_target(cxx: str) -> str:
    """What ``-march=native`` means to ``cxx`` on this machine: every target option it resolves to."""
    found = _native_targets.get(cxx)
    if found is None:
        found = subprocess.run([cxx, "-march=native", "-Q", "--help=target"], capture_output=True, text=True,
                               check=False).stdout
        _native_targets[cxx] = found
    return found


def _entry_of(unit: str, std: str, flags: list[str], serial: bool) -> tuple[str, str, list[str], list[bytes], str]:
    """``(digest, cache folder, g++ command base, digests of the inputs, runtime source)`` of one translation unit."""
    cxx = compiler()
    includes = cuda_include_dirs()
    runtime = _RUNTIMES[serial]
    optimise = list(_SERIAL_FLAGS) if serial else ["-O2"]
    # The optimisation flags come after -fno-fast-math, which would turn -fno-math-errno off again.
    base = [cxx, f"-std={std}", "-fPIC", "-pthread", "-ffp-contract=off", "-fno-fast-math", *optimise,
            "-fno-strict-aliasing", "-fexceptions", "-fvisibility=hidden", "-fstack-clash-protection", *flags,
            *(f"-I{d}" for d in includes)]
    digests = [_compiler_version(cxx).encode(), _FORMAT.encode()]
    if serial:
        digests.append(_native_target(cxx).encode())
    digests += [_file_digest(path) for path in (_HEADER, runtime, *(
        os.path.join(d, h) for d in includes for h in _REQUIRED_HEADERS[:4] if os.path.isfile(os.path.join(d, h))))]
    key = hashlib.sha256(unit.encode() + b"\0" + "\0".join(base).encode() + b"\0" + b"".join(digests))
    digest = key.hexdigest()
    return digest, os.path.join(cache_dir(), digest[:40]), base, digests, runtime


def _is_built(unit: str, std: str, flags: list[str], serial: bool = False) -> bool:
    """Whether the library of this unit is loaded or in the cache (not verified: :func:`_load` does that)."""
    digest, entry, *_ = _entry_of(unit, std, flags, serial)
    return digest in _libraries or os.path.isfile(os.path.join(entry, "module.so"))


def _load(unit: str, filename: str, std: str, flags: list[str], serial: bool = False) -> ctypes.CDLL:
    """Build (or find verified in the cache) the shared library of one translation unit and load it."""
    digest, entry, base, digests, runtime = _entry_of(unit, std, flags, serial)
    root = cache_dir()
    with _lock_for(digest):
        lib = _libraries.get(digest)
        if lib is not None:
            return lib
        if not _usable(entry, _MODULE_FILES, filename):
            header, runtime_object = _support(base, digests, runtime, filename)

            def build(staging: str) -> None:
                source, output = os.path.join(staging, "unit.cpp"), os.path.join(staging, "module.so")
                with _CacheFolder(root, filename, "writing the translation unit"):
                    with open(source, "w") as f:
                        f.write(unit)  # kept next to the library, for reading errors later
                _run_compiler([*base, "-include", header, "-shared", source, runtime_object, "-o", output],
                              filename, [output])

            _build_entry(root, entry, _MODULE_FILES, filename, build)
        lib = ctypes.CDLL(os.path.join(entry, "module.so"))  # verified above, or just built and published
        _libraries[digest] = lib
        return lib
