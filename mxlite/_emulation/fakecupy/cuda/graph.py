"""``cupy.cuda.graph``: the CUDA graphs that stream captures make on the emulated GPUs."""

from __future__ import annotations

from .._graph import Graph

__all__ = ["Graph"]
