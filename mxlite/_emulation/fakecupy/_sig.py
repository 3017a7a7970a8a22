"""Signatures built from :mod:`._signatures` parameter lists."""

from __future__ import annotations

import inspect

__all__ = ["signature_of"]

_MISSING = inspect.Parameter.empty


def signature_of(params: tuple) -> inspect.Signature:
    """An ``inspect.Signature`` from a :mod:`._signatures` parameter list (defaults shown as ``None``...)."""
    kinds = {"p": inspect.Parameter.POSITIONAL_ONLY, "pk": inspect.Parameter.POSITIONAL_OR_KEYWORD,
             "k": inspect.Parameter.KEYWORD_ONLY, "*": inspect.Parameter.VAR_POSITIONAL,
             "**": inspect.Parameter.VAR_KEYWORD}
    out = []
    for pname, kind, has_default in params:
        default = _Default if has_default and kind not in ("*", "**") else _MISSING
        out.append(inspect.Parameter(pname, kinds[kind], default=default))
    return inspect.Signature(out)


class _DefaultType:
    def __repr__(self) -> str:
        return "<CuPy's default>"


_Default = _DefaultType()
