"""Emulation of a CUDA stack on the host, for machines without a GPU (CI, laptops).

* :mod:`mxlite._emulation.fakecupy` / ``fakecupyx``: a strict CuPy + NCCL double backed by NumPy, with N
  emulated GPUs in one process (see :func:`mxlite._emulation.install.install`).
"""

from __future__ import annotations
