"""What every model-zoo constructor shares: loading MXNet's pretrained weights when ``pretrained=True``."""

from __future__ import annotations

from typing import Any, TypeVar

from ...nn import Block
from ..model_store import PretrainedUnavailableError, get_model_file

__all__ = ["PretrainedUnavailableError", "with_pretrained"]

BlockT = TypeVar("BlockT", bound=Block)


def with_pretrained(net: BlockT, model: str, pretrained: Any, root: Any, device: Any, ctx: Any) -> BlockT:
    """``net``, with MXNet's pretrained weights of ``model`` loaded on ``device`` (or ``ctx``; default the
    current device) when ``pretrained`` is true, as MXNet's constructors do: the file comes from
    :func:`~mxlite.gluon.model_zoo.model_store.get_model_file` (``root`` None: ``$MXNET_HOME/models``).

    Raises:
        PretrainedUnavailableError: the weight file is not in ``root`` and cannot be downloaded (the message says
            which file to put where).
        ValueError: the weights do not fit ``net`` (a ``classes`` other than the pretrained model's 1000).
    """
    if pretrained:
        net.load_parameters(get_model_file(model, root=root), device=device if ctx is None else ctx)
    return net
