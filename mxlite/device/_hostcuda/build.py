"""Building a rewritten source into a cached shared library: CUDA's headers, NVRTC options, g++, the cache.

:func:`cuda_include_dirs` finds CUDA's half-precision headers in pip packages; :func:`_map_options` turns
NVRTC options into g++ ones; :func:`_load` builds (or finds in the cache, ``MXLITE_HOSTCUDA_CACHE``) the
library of one translation unit, with a per-flag-set ``support-*`` folder holding the precompiled
``cuda_host.h`` and the compiled runtime.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence

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
_build_lock = threading.Lock()
_libraries: dict[str, ctypes.CDLL] = {}
_compiler_ids: dict[str, str] = {}


def build_count() -> int:
    """How many times this process has run g++ (cache hits do not count)."""
    return _build_count


def cache_dir() -> str:
    """Where built modules are kept: ``MXLITE_HOSTCUDA_CACHE``, else ``~/.cache/mxlite/hostcuda``."""
    return os.environ.get("MXLITE_HOSTCUDA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "mxlite",
                                                                   "hostcuda")


def compiler() -> str:
    """The path of the C++ compiler the host build uses (``MXLITE_HOSTCUDA_CXX``, default g++).

    Raises:
        HostCudaSetupError: it is not on PATH.
    """
    cxx = os.environ.get("MXLITE_HOSTCUDA_CXX", "g++")
    path = shutil.which(cxx)
    if path is None:
        raise HostCudaSetupError(f"the host CUDA build needs the C++ compiler {cxx!r} (g++), which is not on PATH")
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
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).digest()


def _run_compiler(command: list[str], what: str) -> None:
    global _build_count
    _build_count += 1
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise HostCudaSetupError(f"cannot run the C++ compiler {command[0]!r} for the host build: {exc}") from exc
    if result.returncode != 0:
        lines = (result.stderr + result.stdout).splitlines()
        shown = "\n".join(lines[:_COMPILE_LINES])
        more = f"\n... ({len(lines) - _COMPILE_LINES} more lines)" if len(lines) > _COMPILE_LINES else ""
        raise HostCudaBuildError(f"g++ failed to compile {what} for the host (hostcuda):\n{shown}{more}")


def _support(base: list[str], digest_parts: list[bytes], runtime_source: str) -> tuple[str, str]:
    """(header to -include, runtime object) for one set of flags: built once, then shared by modules.

    The header is cuda_host.h next to its precompiled ``.gch``, so a module's translation unit
    does not parse CUDA's fp16/bf16 headers again, and the runtime is compiled only once.
    """
    key = hashlib.sha256(b"support\0" + "\0".join(base).encode() + b"\0" + b"".join(digest_parts)).hexdigest()
    root = cache_dir()
    folder = os.path.join(root, f"support-{key[:32]}")
    header, runtime = os.path.join(folder, "cuda_host.h"), os.path.join(folder, "runtime.o")
    if os.path.isfile(runtime):
        return header, runtime
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=root, prefix=".build-")
    try:
        shutil.copyfile(_HEADER, os.path.join(tmp, "cuda_host.h"))
        _run_compiler([*base, "-x", "c++-header", os.path.join(tmp, "cuda_host.h"), "-o",
                       os.path.join(tmp, "cuda_host.h.gch")], "cuda_host.h")
        _run_compiler([*base, "-include", _HEADER, "-c", runtime_source, "-o", os.path.join(tmp, "runtime.o")],
                      os.path.basename(runtime_source))
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, folder)  # atomic; fails when a concurrent builder got there first (then use theirs)
        except OSError:
            if not os.path.isfile(runtime):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return header, runtime


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


def _load(unit: str, filename: str, std: str, flags: list[str], serial: bool = False) -> ctypes.CDLL:
    """Build (or find in the cache) the shared library of one translation unit and load it."""
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
    with _build_lock:
        lib = _libraries.get(digest)
        if lib is not None:
            return lib
        folder = cache_dir()
        target = os.path.join(folder, f"{digest[:40]}.so")
        if not os.path.isfile(target):
            try:
                header, runtime_object = _support(base, digests, runtime)
                os.makedirs(folder, exist_ok=True)
                with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as tmp:
                    source = os.path.join(tmp, "unit.cpp")
                    with open(source, "w") as f:
                        f.write(unit)
                    output = os.path.join(tmp, "module.so")
                    _run_compiler([*base, "-include", header, "-shared", source, runtime_object, "-o", output],
                                  filename)
                    os.replace(source, target[:-3] + ".cpp")  # the translation unit, for reading errors later
                    os.replace(output, target)  # atomic: a concurrent builder sees no file or the whole new one
            except OSError as exc:  # g++ ran (or _run_compiler said why not): the cache folder is the problem
                raise HostCudaError(f"cannot build {filename} in the host build cache {folder}: {exc}. "
                                    "MXLITE_HOSTCUDA_CACHE names another folder") from exc
        lib = ctypes.CDLL(target)
        _libraries[digest] = lib
        return lib
