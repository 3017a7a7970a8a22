"""The handle ``Block.register_forward_hook`` and ``register_forward_pre_hook`` return (MXNet's ``HookHandle``).

Every registration is numbered, in the process: a block's CUDA graphs (``_graphs.py``) read the count to notice
that a hook was registered somewhere below the block since they last looked.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["HookHandle"]


class HookHandle:
    """Returned by ``register_forward_hook``/``register_forward_pre_hook``: ``detach()`` removes the hook.

    Attributes:
        registered: how many hooks were registered in this process so far (class attribute).
    """

    registered = 0

    def __init__(self, hooks: OrderedDict, hook: Callable[..., Any]) -> None:
        self._hooks = hooks
        self._id = HookHandle.registered
        HookHandle.registered += 1
        hooks[self._id] = hook

    def detach(self) -> None:
        """Remove the hook (idempotent)."""
        self._hooks.pop(self._id, None)

    def __enter__(self) -> HookHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()
