"""``cupy.cuda.stream``: streams and events of the emulated GPUs."""

from __future__ import annotations

from .._streams import Event, Stream, get_current_stream, get_elapsed_time

__all__ = ["Event", "Stream", "get_current_stream", "get_elapsed_time"]
