"""Gradient compression: codecs that shrink what each contribution sends when gradients are summed.

Purpose: Gluon's ``compression_params`` (``Trainer(..., compression_params=...)`` or
``KVStore.set_gradient_compression``) choose a codec; :func:`create` parses the dict and returns
a :class:`Codec` (or None for no compression). ``codec.reduce(grads, residuals, out, comm)``
then replaces an all-reduce: every local gradient buffer (one per device, the *contributions*)
is compressed where it lives, the payloads of every process are exchanged, and every rank
decompresses all of them and sums them into ``out``.

Example::

    codec = create({'type': '2bit', 'threshold': 0.5})
    residuals = [np.zeros_like(g, dtype=np.float32) for g in grads]   # kept across steps
    codec.reduce(grads, residuals, out, comm)                         # out = sum of what was sent

Codecs (float32 math throughout):

* ``2bit`` (MXNet's 2-bit quantisation, bit for bit): ``r += g``; send +threshold where
  ``r >= threshold`` (then ``r -= threshold``), -threshold where ``r <= -threshold`` (then
  ``r += threshold``), else 0. Sixteen values per 32-bit word, in MXNet's layout
  (:func:`quantize_2bit`).
* ``topk`` (SINGA-style local accumulation): ``r += g``; send the ``k = max(1, ceil(ratio * n))``
  elements of largest ``|r|`` (ties: lowest index first; NaN counts as largest) as (indices,
  values) and zero them in ``r``.
* ``threshold``: ``r += g``; send every element with ``|r| >= threshold`` and zero it in ``r``.
* ``fp16`` / ``bf16``: each contribution sends ``half(clip(g, -clip, clip) * (1/N))``, N the
  number of contributions (local buffers times processes), and the receiver sums
  ``float32(wire) * N``: the 1/N pre-scale is fused into the cast, so a sum whose half would
  overflow still arrives. bfloat16 travels as uint16 bit patterns (NumPy and CuPy have no
  bfloat16 dtype), rounded to nearest even; NaN stays NaN (the wire's canonical quiet NaN).

The first three keep a per-element float32 *residual* on the sender (error feedback): what was
not sent is added to the next step's gradient, so nothing is lost, only delayed.

Buffer flow of ``reduce``: compress each ``grads[i]`` on its device (residual updated in place)
-> with several processes, copy every payload to the host, concatenate this rank's payloads into
one byte buffer and ``comm.allgather`` it -> on ``out``'s device, decompress every contribution
in rank order, then local order, adding each into a float32 sum that starts at zero -> write
the sum into ``out``. The order is fixed and every rank decodes the same bytes, so every rank
(and every mirror) gets identical bits.

Byte format of one contribution in the exchange (each a multiple of 4 bytes, so that every
array view is aligned): 2bit: ``ceil(n/16)`` uint32 words; topk/threshold: an int32 count m,
m int32 indices (ascending), m float32 values; fp16/bf16: n uint16 values and 2 zero bytes when
n is odd. A rank's buffer is the concatenation over its local contributions; for threshold,
whose size varies, buffers are zero-padded to the longest (an allgather of the sizes first) so
that carriers needing equal sizes (NCCL) can take them.

On GPUs with NCCL the exchange stays on the devices (:meth:`Codec.reduce_on_nccl`): 2bit and
topk payloads (fixed sizes) go through one NCCL ``allGather`` per bucket and are decoded on every
GPU in the same order, so the bits are those of the host exchange; threshold's variable sizes are
agreed by one NCCL all-reduce (max) of every bucket's counts per step, read by the host once, and
its buckets are exchanged after backward; fp16/bf16 become a half-precision NCCL all-reduce whose
result the optimizer reads directly (:mod:`mxlite.comm.narrow`, where their precision is stated).
CPU devices and MPI use the host exchange.

Each low-level function has a NumPy twin (NumPy arrays) and a CUDA path (CuPy arrays) running
``kernels/compression.cu``; both give the same bits (tests/test_compression.py).

Modules: :mod:`.params` (parsing ``compression_params``), :mod:`.codecs` (the codec classes
and their exchanges), :mod:`.kernels` (the low-level operations, NumPy twins and CUDA paths).

Where mxlite differs from MXNet: MXNet compresses only the worker-to-server push and has no
top-k, threshold or half-precision wire codecs; mxlite compresses every contribution of a
reduction, and each rank decompresses all of them itself (no server).

Warnings:
    * Residuals are the caller's: pass the same arrays every step (one per local buffer).
    * Every rank must pass the same number of gradients of the same sizes, with the same codec.
"""

from __future__ import annotations

from ...device.copy import copy_between  # noqa: F401 - the exchange's copies go through the device layer (codecs)
from .codecs import Codec
from .kernels import (
                      KERNELS,
                      dequantize_2bit,
                      from_wire,
                      quantize_2bit,
                      scatter_add_message,
                      threshold_select,
                      threshold_select_on_device,
                      to_wire,
                      topk_count,
                      topk_select,
)
from .params import TYPES, create

__all__ = ["Codec", "create", "quantize_2bit", "dequantize_2bit", "topk_count", "topk_select", "threshold_select",
           "threshold_select_on_device", "scatter_add_message", "to_wire", "from_wire", "TYPES", "KERNELS"]
