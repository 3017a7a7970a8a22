"""Compile the project's CUDA sources with g++ for the HOST and launch them the way CuPy does.

Two builds of the same unmodified source:

* the **fiber build** (default), for the emulated GPUs: real block sizes, one fiber per CUDA
  thread, shuffled schedules; it proves a kernel's results, not its speed;
* the **serial build** (``HostModule(..., serial=True)``), for CPU devices: one thread per block,
  with ``threadIdx``/``blockDim`` compile-time constants, so a kernel's block loop
  ``for (i = begin + threadIdx.x; i < end; i += blockDim.x)`` is a unit-stride loop that g++
  vectorises (``-O3``); blocks run in order on the calling thread (``runtime_serial.cpp``). It is
  how CPU devices run the fused optimizer updates at memory speed, with the kernels' own
  arithmetic. A serial launch takes ``block=1`` only; code that needs real threads (warp
  shuffles over more than lane 0, dynamic shared memory) fails the launch with a message.

Why the fiber build: CI has no GPU, yet ``kernels/*.cu`` must be checked against their NumPy twins. This module
builds an unmodified CUDA source into a shared library (``g++ -shared``, loaded with ctypes) and
launches its kernels with CuPy's calling convention: ``HostModule`` mirrors ``cupy.RawModule``
(code, options, name_expressions), ``HostKernel.__call__(grid, block, args, shared_mem, stream)``
mirrors ``cupy.RawKernel``, including how arguments are packed (an array passes its data
pointer, a NumPy scalar its own bytes, a Python int an int64, a Python float a float64, a bool a
bool). Unlike CuPy, every argument is checked against the kernel's real C++ signature.

Design:

* ``cuda_host.h`` (force-included) defines the CUDA built-ins for g++: the qualifiers,
  ``threadIdx``/``blockIdx``/``blockDim``/``gridDim``, ``__syncthreads``, warp shuffles and votes,
  atomics and math intrinsics. ``__half``/``__nv_bfloat16`` are CUDA's own ``cuda_fp16.h`` /
  ``cuda_bf16.h`` host code from a pip package (:func:`cuda_include_dirs`).
* Two build-time rewrites of the source text (line numbers kept): ``extern __shared__ T name[];``
  (function scope, the usual form) becomes a pointer to the launch's dynamic shared buffer
  (``shared_mem`` bytes, poisoned with 0xff bytes before each block); recognised inline PTX
  ``asm(...)`` statements (``add/sub/mul/div/fma/sqrt/neg/abs/min/max`` ``.rn`` [``.ftz``] ``.f32``/
  ``.f64``, ``mov.b32``/``.b64``, special registers such as ``%laneid``) become calls of host
  functions; any other PTX instruction is a build error naming it.
* For each name expression (``'adam_update<float>'``) the translation unit gets an ``extern "C"``
  launch entry and a signature entry; template deduction on the kernel's function pointer gives
  each parameter's kind (pointer/value), type code, width and const-ness (:class:`Param`).
* ``runtime_fibers.cpp`` runs the threads of a block as fibers (one 64 KiB stack each, from a
  pool) on one OS thread. A fiber yields at ``__syncthreads`` and at every warp operation; the
  scheduler completes a barrier when every thread of the block waits there, and a warp
  operation when every live lane of its mask does (real 32-lane warp semantics for the
  shuffles). Blocks run one after another.

What the shuffle proves: blocks, and the fibers of a block within each round, run in an order
drawn from a seed (``seed=`` of the module or the launch, else ``MXLITE_HOSTCUDA_SEED``, else
:data:`DEFAULT_SEED`). A kernel whose result depends on the order of threads between two
barriers (a missing ``__syncthreads``, a race on shared memory, a reduction order taken for
granted) gives different results for different seeds; a barrier that can never complete (some
threads exited or wait elsewhere) raises :class:`HostCudaLaunchError` naming the kernel, block
and threads, instead of hanging.

What the host build cannot show: the GPU memory model (fibers switch only at barriers and
warp operations, so a data race inside one segment, e.g. a non-atomic read-modify-write by two
threads, never interleaves; stale caches and fences are invisible); warp lockstep beyond
shuffles, votes and barriers (code relying on implicit warp-synchronous execution runs one
lane at a time); the GPU's flush-to-zero, its canonical NaNs and the rounding of its fast
special functions (``rsqrtf``, ``__expf``, ...: here IEEE host arithmetic, subnormals kept, no
a*b+c contraction); the reset of ``__shared__`` variables between blocks (static shared
variables keep their values from the previous block); code under ``#ifdef __CUDA_ARCH__``;
and speed.

NVRTC options: ``-std=c++NN`` sets the C++ standard (default C++17), ``-D``/``-U``/``-I`` (and
their long forms) pass through; architecture, debug/line-info, ``-ftz``, ``-fmad``,
``-prec-div``, ``-prec-sqrt``, ``--use_fast_math``, ``-rdc``, register and similar code
generation options are accepted and ignored (the host always keeps subnormals, never contracts
multiply-adds and never uses fast math, which is what the NumPy twins do). Any other option
raises ValueError.

Builds are cached in ``MXLITE_HOSTCUDA_CACHE`` (else ``~/.cache/mxlite/hostcuda``) under a
SHA-256 of everything that goes into them (source after rewriting, entries, flags, cuda_host.h,
the runtime, CUDA's headers, the g++ version), one folder per entry: a module's ``<digest>/``
(``module.so``, ``unit.cpp``) and, per set of flags, a ``support-*/`` holding a precompiled
cuda_host.h and the compiled runtime, so a module build only compiles its own source (about 0.3 s
for a small kernel, 2-3 s for ``optimizers.cu``; the first build of a flag set adds about 2 s).
Each entry is built in a staging folder named after its builder (``.build-<host>-<pid>-<token>``),
every file fsynced, an ``entry.json`` recording each file's size and SHA-256 written last, then
renamed into place (concurrent builders, e.g. MPI ranks: the first whole entry wins). An entry is
used only when its files match its ``entry.json``: a truncated library would otherwise be mapped
past its end and kill the process with SIGBUS inside ``dlopen``. A damaged entry is set aside and
rebuilt with a RuntimeWarning; staging folders of builders that died are removed by the next build.
A compiler that fails, is killed or exits 0 without writing its output raises
:class:`HostCudaBuildError` naming it, and nothing is cached. ``MXLITE_HOSTCUDA_CXX`` names another
g++ executable (the ``MXLITE_HOSTCUDA_*`` variables are read by :mod:`mxlite.device.env`). Fibers switch with a
few instructions of x86-64 assembly (callee-saved registers, MXCSR, x87 control word), or with
``swapcontext`` on other machines or with ``-DHOSTCUDA_USE_UCONTEXT``; kernel code is built
with ``-fstack-clash-protection`` so that a stack overflow hits a guard page and is reported.
"""

from .build import build_count, cache_dir, compiler, cuda_include_dirs
from .errors import HostCudaBuildError, HostCudaError, HostCudaLaunchError, HostCudaSetupError, Param
from .launch import DEFAULT_SEED, HostKernel, HostModule
from .rewrite import rewrite_source

__all__ = ["DEFAULT_SEED", "HostCudaBuildError", "HostCudaError", "HostCudaLaunchError", "HostCudaSetupError",
           "HostKernel", "HostModule", "Param", "build_count", "cache_dir", "compiler", "cuda_include_dirs",
           "rewrite_source"]
