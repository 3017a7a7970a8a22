"""MXNet 1.9's ``gluon.contrib.nn``: the contributed layers under their 1.x names.

``Identity``, ``SyncBatchNorm`` and ``PixelShuffle1D/2D/3D`` are :mod:`mxlite.gluon.nn`'s own classes (MXNet
2.x moved them there). ``Concurrent``/``HybridConcurrent`` are 2.x's ``Concatenate`` with the 1.x name, and
``SparseEmbedding`` is an ``Embedding`` whose weight gradient is row-sparse (its weight stays dense: mxlite has
no row-sparse weights).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..nn import Concatenate, Embedding, Identity, PixelShuffle1D, PixelShuffle2D, PixelShuffle3D, SyncBatchNorm

__all__ = ["Concurrent", "HybridConcurrent", "Identity", "PixelShuffle1D", "PixelShuffle2D", "PixelShuffle3D",
           "SparseEmbedding", "SyncBatchNorm"]


class Concurrent(Concatenate):
    """Feeds its input to every child and concatenates their outputs along ``axis`` (default -1, the last).

    ``net = Concurrent(axis=1); net.add(nn.Dense(128), nn.Dense(64), Identity())`` maps ``(N, d)`` to
    ``(N, 192 + d)``. MXNet 1.x's name of :class:`mxlite.gluon.nn.Concatenate`; ``prefix=`` and ``params=``
    are taken as on every block.
    """

    def __init__(self, axis: int = -1, prefix: str | None = None, params: Any = None) -> None:
        super().__init__(axis=axis, prefix=prefix, params=params)


HybridConcurrent = Concurrent  # HybridBlock and Block are one class in mxlite


class SparseEmbedding(Embedding):
    """Maps integer ids to dense vectors with a row-sparse weight gradient (only the rows looked up).

    MXNet keeps the weight itself row-sparse too, for distributed training of huge vocabularies; mxlite's
    weight is dense, so the layer is :class:`mxlite.gluon.nn.Embedding` with ``sparse_grad=True``.

    Args:
        input_dim: vocabulary size (ids run from 0 to ``input_dim - 1``).
        output_dim: length of each vector.
        dtype: the weight's (and the output's) dtype.
        weight_initializer: initializer of the ``(input_dim, output_dim)`` weight.

    Raises:
        ValueError: ``input_dim`` or ``output_dim`` not a positive integer.
    """

    def __init__(self, input_dim: int, output_dim: int, dtype: Any = "float32", weight_initializer: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(input_dim, output_dim, dtype=np.dtype(dtype), weight_initializer=weight_initializer,
                         sparse_grad=True, **kwargs)
        self._dtype_name = np.dtype(dtype).name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.weight.shape[0]} -> {self.weight.shape[1]}, {self._dtype_name})"
