"""``cupy.lib``."""

from __future__ import annotations

from . import stride_tricks

__all__ = ["stride_tricks"]
