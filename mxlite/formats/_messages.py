"""Quoting values from files in error messages, within a bounded length.

A damaged or hostile file can hold a name of megabytes (of control characters, which ``repr``
makes four times longer) or a million names: quoted whole, the message would be larger than the
file. These helpers cut what they quote and say how much was left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["quote", "listing"]

QUOTE_LIMIT = 60  # characters of a value shown: enough to recognise a parameter name
LIST_LIMIT = 5  # items of a list shown


def quote(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` of a str (or bytes), cut to its first ``limit`` characters: ``'abc'... (2000000 characters)``."""
    if isinstance(value, (str, bytes)) and len(value) > limit:
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{value[:limit]!r}... ({len(value)} {unit})"
    return repr(value)


def listing(items: Iterable[Any], limit: int = LIST_LIMIT) -> str:
    """``['a', 'b']``, or ``['a', 'b', ...] and 995 more`` past ``limit`` items; each item :func:`quote`d."""
    items = list(items)
    shown = ", ".join(quote(item) for item in items[:limit])
    if len(items) <= limit:
        return f"[{shown}]"
    return f"[{shown}, ...] and {len(items) - limit} more"
