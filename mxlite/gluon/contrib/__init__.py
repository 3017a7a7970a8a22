"""Gluon's ``contrib`` (MXNet 1.x's ``mxnet.gluon.contrib``): extra layers and the Estimator training loop.

* ``contrib.nn``: MXNet 1.9's contributed layers (``Concurrent``, ``HybridConcurrent``, ``Identity``,
  ``SparseEmbedding``, ``SyncBatchNorm``, ``PixelShuffle1D/2D/3D``), mostly the ``gluon.nn`` layers
  under their 1.x names.
* ``contrib.rnn``: the contributed recurrent cells (convolutional cells, ``VariationalDropoutCell``,
  ``LSTMPCell``), which are ``gluon.rnn``'s.
* ``contrib.estimator``: :class:`~mxlite.gluon.contrib.estimator.Estimator` with its event handlers.
"""

from . import estimator, nn, rnn

__all__ = ["estimator", "nn", "rnn"]
