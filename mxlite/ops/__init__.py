"""The op library (``mx.ops``): every differentiable operation on :class:`~mxlite.autograd.tensor.Tensor`.

The autograd engine (:mod:`mxlite.autograd`) records and walks graphs; the ops here compute, each with its
backward beside its forward, and stand above the engine (they import it, never the other way round):

* ``core.py``: elementwise, shape, reduction, indexing and product ops, and the ``_op`` decorator every
  op is dispatched through. Its ops are also this package's own names (``mx.ops.add``, ``mx.ops.reshape``);
* ``nn_ops.py`` (softmax, dropout, embedding, normalisation, fully connected; re-exports ``conv.py``'s
  convolution and pooling), ``activations.py``, ``attention.py``, ``rnn_ops.py`` and ``rnn_stack.py``
  (recurrent layers as one node), ``linalg.py``, ``special.py`` (``erf``), ``sparse.py`` (row-sparse
  tensors), ``random.py`` (``mx.random``), ``creation.py`` (``mx.array``, ``mx.zeros``, ...);
* the kernel drivers: ``_conv_kernels.py``, ``_conv_native.py``, ``_cudnn_ops.py``, ``_norm_kernels.py``,
  ``_loss_kernels.py``, ``_attention_kernels.py``, ``_philox.py`` (GPU dropout masks);
* ``higher_order_rules.py``: each op's differentiable backward, registered with the engine for
  ``autograd.grad(..., create_graph=True)``;
* ``_methods.py``: Tensor's operators and op methods (``x + y``, ``x.sum()``, ``x.to(device)``), attached
  to the class when this package is imported.

Importing this package (``import mxlite`` does) therefore completes Tensor: its operators, its op methods,
row-sparse gradients and second derivatives all come from here.
"""

from . import (
    _methods,  # noqa: F401 - attaches Tensor's operators and op methods
    activations,
    attention,
    conv,
    core,
    creation,
    higher_order_rules,  # noqa: F401 - registers each op's differentiable backward with the engine
    linalg,
    nn_ops,
    random,
    rnn_ops,
    rnn_stack,
    sparse,
    special,
)
from .core import *  # noqa: F403 - the primitive ops are mx.ops's own names

__all__ = [*core.__all__, "activations", "attention", "conv", "core", "creation", "linalg", "nn_ops", "random",
           "rnn_ops", "rnn_stack", "sparse", "special"]
