"""What every model-zoo constructor shares: the refusal of ``pretrained=True``."""

from __future__ import annotations

from typing import Any

__all__ = ["PretrainedUnavailableError", "check_pretrained"]


class PretrainedUnavailableError(NotImplementedError):
    """``pretrained=True`` was asked for, but mxlite cannot fetch or load MXNet's pretrained weights."""


def check_pretrained(model: str, pretrained: Any) -> None:
    """Raise :class:`PretrainedUnavailableError` naming ``model`` when ``pretrained`` is true.

    MXNet's constructors download the model's weight file from MXNet's model store and load it;
    mxlite has no model store, so it can give random initial weights only. A false
    ``pretrained`` does nothing.
    """
    if pretrained:
        raise PretrainedUnavailableError(
            f"{model}: pretrained=True is not supported: mxlite has no model store to download MXNet's "
            "pretrained weights from. Build the model with pretrained=False and load a weight file with "
            "net.load_parameters(path): it reads mxlite's .npz and MXNet's .params files whose names are "
            "the model's structural names ('features.0.weight', ...).")
