"""The codec classes: what each contribution sends, and the exchange that sums it.

Two exchanges (see the package docstring): through the host for CPU devices and MPI
(:meth:`Codec.reduce`), and on the devices for NCCL (:meth:`Codec.reduce_on_nccl` and, for the
narrow wires, :meth:`_HalfWire.reduce_on_nccl`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...device import Device, device_of
from ...device.copy import as_host, copy_between
from ..base import Communicator
from .kernels import (
    _check_residual,
    _check_vector,
    _scatter_add,
    _words,
    dequantize_2bit,
    from_wire,
    quantize_2bit,
    scatter_add_message,
    sparse_message,
    threshold_select,
    threshold_select_on_device,
    to_wire,
    topk_count,
    topk_select,
)

__all__ = ["Codec"]


class Codec:
    """A gradient compression scheme and its exchange; built by :func:`create`.

    Attributes:
        params: the normalised parameters (JSON-able), e.g. ``{'type': '2bit', 'threshold': 0.5}``.
        needs_residual: whether :meth:`reduce` needs one float32 residual per gradient
            (error feedback: 2bit, topk, threshold), or ignores ``residuals`` (fp16, bf16).
    """

    needs_residual = True
    _variable_size = False  # payload sizes may differ between ranks (padded for the exchange)
    narrow_wire = False  # fp16/bf16: on NCCL, a half-precision all-reduce read directly by the update
    deferred_on_nccl = False  # threshold: on NCCL, exchanged after backward, all buckets' sizes agreed at once

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params

    def __repr__(self) -> str:
        return f"Codec({self.params!r})"

    def reduce(self, grads: Sequence[Any], residuals: Sequence[Any | None], out: Any,
               comm: Communicator | None = None) -> None:
        """``out[...] =`` the sum of what every contribution sent (see the module docstring).

        Args:
            grads: 1-D float32 or float16 NumPy/CuPy arrays of equal size, on any devices
                (several may share one); read only, so ``out`` may be one of them.
            residuals: per gradient, a float32 array of its size on its device, updated in
                place; entries are ignored (may be None) when ``needs_residual`` is False.
            out: 1-D float32 or float16 array of the same size, on any device.
            comm: with ``comm.size > 1``, the sum also runs over every process of ``comm``
                (each passing the same number of gradients of the same sizes).

        Raises:
            ValueError: a size, dtype, shape or device mismatch (naming the index); a peer's
                payload that does not parse (naming the rank).
        """
        grads, residuals = list(grads), list(residuals)
        n = self._check(grads, residuals, out)
        ranks = comm.size if comm is not None and comm.size > 1 else 1
        contributions = len(grads) * ranks
        home = device_of(out)
        payloads = [self._encode(g, r, contributions) for g, r in zip(grads, residuals)]
        if ranks == 1:
            messages = [tuple(copy_between(a, device_of(a), home, copy=False) for a in p) for p in payloads]
        else:
            messages = self._exchange(payloads, n, comm, home)
        with home.use():
            contiguous = out.dtype == np.float32 and out.flags.c_contiguous
            total = out if contiguous else home.xp.empty(n, np.float32)
            total.fill(0)
            for payload in messages:
                self._decode(payload, n, total, contributions)
            if total is not out:
                out[...] = total

    # -- the exchange -----------------------------------------------------------------------------
    def _exchange(self, payloads: list[tuple[Any, ...]], n: int, comm: Communicator,
                  home: Device) -> list[tuple[Any, ...]]:
        """Every rank's payloads, in rank then local order, as arrays on ``home`` (views of one copy per rank)."""
        mine = np.concatenate([self._serialize(p) for p in payloads]) if payloads else np.zeros(0, np.uint8)
        if self._variable_size:
            longest = int(max(s[0] for s in comm.allgather(np.array([mine.size], np.int64))))
            mine = np.concatenate([mine, np.zeros(longest - mine.size, np.uint8)])
        messages = []
        for rank, host in enumerate(comm.allgather(mine)):
            host = np.ascontiguousarray(host).view(np.uint8)
            on_home = copy_between(host, Device("cpu", 0), home, copy=False)
            offset = 0
            for i in range(len(payloads)):
                try:
                    payload, offset = self._deserialize(host, on_home, offset, n)
                except (ValueError, IndexError) as exc:
                    raise ValueError(f"the payload of rank {rank}, contribution {i}, does not parse as a "
                                     f"{self.params['type']} message for {n} elements ({exc}); do all ranks pass "
                                     f"the same gradients with the same codec?") from None
                messages.append(payload)
        return messages

    # -- the exchange on NCCL (no host copy) -----------------------------------------------------
    def reduce_on_nccl(self, grads: Sequence[Any], residuals: Sequence[Any], comm: Any) -> Any:
        """Sum on the GPUs: every gradient buffer becomes the sum of what every contribution sent.

        Buffer flow, on each GPU's communication stream (``comm`` is a
        :class:`~mxlite.comm.nccl.NcclCommunicator`): encode this GPU's contribution (residual
        updated in place) -> NCCL ``allGather`` of the fixed-size payloads -> decode every
        contribution in (process rank, device) order, adding into a float32 sum that starts at
        zero -> write the sum into this GPU's gradient buffer. The decode is the host path's, in
        the same order, so every GPU and rank gets the bits :meth:`reduce` gives. Nothing is copied
        to the host and the host never waits.

        Args:
            grads: one 1-D contiguous float32/float16 CuPy array per local device of ``comm``
                (a bucket's slice of each mirror's gradient arena); overwritten with the sum.
            residuals: per gradient, its float32 residual on its device.
            comm: the NCCL communicator.

        Returns:
            the :class:`~mxlite.comm.nccl.NcclWork` to wait for before reading the gradients.
        """
        grads, residuals = list(grads), list(residuals)
        n = self._check(grads, residuals, grads[0])
        comm.begin()  # the communication streams wait for backward's writes of these gradients
        sends = []
        for device, stream, g, r in zip(comm.devices, comm.streams, grads, residuals):
            with device.use(), stream:
                sends.append(self._device_payload(g, r))            # encode
        recvs = comm.allgather_on_device(sends)                      # every contribution, on every GPU
        self._decode_gathered(comm, recvs, n, grads, self._device_capacity(n))
        work = comm.end()
        work.keep = (sends, recvs)
        return work

    def _decode_gathered(self, comm: Any, recvs: Sequence[Any], n: int, grads: Sequence[Any], capacity: int) -> None:
        """On each GPU's communication stream: ``grad = sum over contributions of decode(message)``."""
        count = comm.contributions
        for device, stream, recv, g in zip(comm.devices, comm.streams, recvs, grads):
            length = recv.size // count
            with device.use(), stream:
                total = g if g.dtype == np.float32 else device.xp.empty(n, np.float32)
                total.fill(0)
                for c in range(count):                               # (rank, device) order
                    self._decode_message(recv[c * length:(c + 1) * length], n, total, capacity)
                if total is not g:
                    g[...] = total

    def _device_capacity(self, n: int) -> int:
        """Entries of a sparse message for ``n`` elements (fixed-size codecs); 0 when not sparse."""
        return 0

    def _device_payload(self, grad: Any, residual: Any) -> Any:
        """This contribution's fixed-size message as one 1-D device array (uint32 or int32)."""
        raise NotImplementedError

    def _decode_message(self, message: Any, n: int, total: Any, capacity: int) -> None:
        """``total +=`` what one gathered message sent (on the current device and stream)."""
        raise NotImplementedError

    # -- per codec --------------------------------------------------------------------------------
    def _encode(self, grad: Any, residual: Any, contributions: int) -> tuple[Any, ...]:
        """Compress one contribution on its device (updating ``residual``); its payload arrays."""
        raise NotImplementedError

    def _serialize(self, payload: tuple[Any, ...]) -> np.ndarray:
        """The payload as host bytes (uint8, a multiple of 4 long)."""
        raise NotImplementedError

    def _deserialize(self, host: np.ndarray, on_home: Any, offset: int, n: int) -> tuple[tuple[Any, ...], int]:
        """The payload at byte ``offset`` as views of ``on_home`` (sizes read from ``host``), and the next offset."""
        raise NotImplementedError

    def _decode(self, payload: tuple[Any, ...], n: int, total: Any, contributions: int) -> None:
        """``total += `` what the payload sent (``total`` float32 on the payload's device)."""
        raise NotImplementedError

    # -- validation --------------------------------------------------------------------------------
    def _check(self, grads: list[Any], residuals: list[Any], out: Any) -> int:
        if not grads:
            raise ValueError("reduce needs at least one gradient")
        if len(residuals) != len(grads):
            raise ValueError(f"reduce: {len(residuals)} residuals for {len(grads)} gradients")
        n = int(grads[0].size)
        for i, g in enumerate(grads):
            _check_vector(g, f"grads[{i}]", (np.float32, np.float16))
            if g.size != n:
                raise ValueError(f"grads[{i}] has {g.size} elements, grads[0] has {n}; they must match")
            if self.needs_residual:
                if residuals[i] is None:
                    raise ValueError(f"residuals[{i}] is None; {self.params['type']} compression needs a float32 "
                                     f"residual per gradient (zeros at the start, kept across steps)")
                _check_residual(residuals[i], g, f"residuals[{i}]", f"grads[{i}]")
        _check_vector(out, "out", (np.float32, np.float16))
        if out.size != n:
            raise ValueError(f"out has {out.size} elements, the gradients {n}; they must match")
        return n


def _sparse_bytes(payload: tuple[Any, ...]) -> np.ndarray:
    indices, values = (as_host(a) for a in payload)
    count = np.array([indices.size], np.int32)
    return np.concatenate([count.view(np.uint8), indices.astype(np.int32, copy=False).view(np.uint8),
                           values.astype(np.float32, copy=False).view(np.uint8)])


class _TwoBit(Codec):
    """MXNet's 2-bit quantisation with error feedback (:func:`quantize_2bit`)."""

    def _encode(self, grad: Any, residual: Any, contributions: int) -> tuple[Any, ...]:
        return (quantize_2bit(grad, residual, self.params["threshold"]),)

    def _serialize(self, payload: tuple[Any, ...]) -> np.ndarray:
        return as_host(payload[0]).view(np.uint8)

    def _deserialize(self, host: np.ndarray, on_home: Any, offset: int, n: int) -> tuple[tuple[Any, ...], int]:
        end = offset + 4 * _words(n)
        if end > host.size:
            raise ValueError(f"{host.size - offset} bytes left, {end - offset} needed")
        return (on_home[offset:end].view(np.uint32),), end

    def _decode(self, payload: tuple[Any, ...], n: int, total: Any, contributions: int) -> None:
        dequantize_2bit(payload[0], n, self.params["threshold"], out=total, accumulate=True)

    def _device_payload(self, grad: Any, residual: Any) -> Any:
        return self._encode(grad, residual, 0)[0]                         # ceil(n/16) uint32 words

    def _decode_message(self, message: Any, n: int, total: Any, capacity: int) -> None:
        self._decode((message,), n, total, 0)


class _Sparse(Codec):
    """A codec sending (indices, values) of part of the residual; the receiver scatter-adds them."""

    def _serialize(self, payload: tuple[Any, ...]) -> np.ndarray:
        return _sparse_bytes(payload)

    def _deserialize(self, host: np.ndarray, on_home: Any, offset: int, n: int) -> tuple[tuple[Any, ...], int]:
        m = int(host[offset:offset + 4].view(np.int32)[0])
        end = offset + 4 + 8 * m
        if not 0 <= m <= n or end > host.size:
            raise ValueError(f"count {m}")
        indices = on_home[offset + 4: offset + 4 + 4 * m].view(np.int32)
        values = on_home[offset + 4 + 4 * m: end].view(np.float32)
        return (indices, values), end

    def _decode(self, payload: tuple[Any, ...], n: int, total: Any, contributions: int) -> None:
        _scatter_add(payload[0], payload[1], total)

    def _decode_message(self, message: Any, n: int, total: Any, capacity: int) -> None:
        scatter_add_message(message, capacity, total)                   # the count is read on the device


class _TopK(_Sparse):
    """Top-k sparsification with local accumulation (:func:`topk_select`), k per reduced buffer."""

    def _encode(self, grad: Any, residual: Any, contributions: int) -> tuple[Any, ...]:
        return topk_select(grad, residual, topk_count(self.params["ratio"], grad.size))

    def _device_capacity(self, n: int) -> int:
        return topk_count(self.params["ratio"], n)

    def _device_payload(self, grad: Any, residual: Any) -> Any:
        k = self._device_capacity(grad.size)
        indices, values = topk_select(grad, residual, k)                # no host synchronisation
        return sparse_message(indices, values, _full_count(grad, k), k)  # int32 [k, idx[k], values[k]]


class _Threshold(_Sparse):
    """Threshold sparsification with local accumulation (:func:`threshold_select`)."""

    _variable_size = True
    deferred_on_nccl = True

    def _encode(self, grad: Any, residual: Any, contributions: int) -> tuple[Any, ...]:
        return threshold_select(grad, residual, self.params["threshold"])

    def encode_on_device(self, grads: Sequence[Any], residuals: Sequence[Any], comm: Any) -> list[tuple[Any, ...]]:
        """Select on every GPU's communication stream; per GPU ``(indices, values, count)``, the count on the device.

        The exchange waits for :meth:`exchange_on_nccl`, which agrees on every bucket's message
        size at once.
        """
        grads, residuals = list(grads), list(residuals)
        self._check(grads, residuals, grads[0])
        comm.begin()
        selected = []
        for device, stream, g, r in zip(comm.devices, comm.streams, grads, residuals):
            with device.use(), stream:
                selected.append(threshold_select_on_device(g, r, self.params["threshold"]))
        return selected

    def exchange_on_nccl(self, batch: Sequence[tuple[Sequence[Any], list[tuple[Any, ...]]]], comm: Any) -> Any:
        """Exchange and sum every encoded bucket of ``batch`` (``[(grads, selected per GPU)]``) on the GPUs.

        The message sizes are agreed by one NCCL all-reduce (max) of every bucket's counts, in
        int32 on the devices; the host then reads that one small vector (4 bytes per bucket, one
        synchronisation per step, not one per bucket), and each bucket is gathered with room for
        the largest count: int32 ``[count, indices[C], values[C]]`` per contribution, C the agreed
        maximum, decoded on every GPU as the fixed-size codecs are.

        Returns:
            the work to wait for (None for an empty batch).
        """
        if not batch:
            return None
        comm.begin()
        counts = []
        for d, (device, stream) in enumerate(zip(comm.devices, comm.streams)):
            with device.use(), stream:
                counts.append(device.xp.concatenate([selected[d][2] for _, selected in batch]))
        comm.allreduce_on_device(counts, "int32", "max")
        agreed = comm.end()
        agreed.wait()
        with comm.devices[0].use():
            capacities = [int(c) for c in counts[0].get()]              # the one host read of the step
        comm.begin()
        keep = [counts]
        for (grads, selected), capacity in zip(batch, capacities):
            sends = []
            for device, stream, (indices, values, count) in zip(comm.devices, comm.streams, selected):
                with device.use(), stream:
                    sends.append(sparse_message(indices, values, count, capacity))
            recvs = comm.allgather_on_device(sends)
            self._decode_gathered(comm, recvs, grads[0].size, grads, capacity)
            keep.append((selected, sends, recvs))
        work = comm.end()
        work.keep = keep
        return work


class _HalfWire(Codec):
    """float16 or bfloat16 on the wire, pre-scaled by 1/N in the cast (:func:`to_wire`, :func:`from_wire`)."""

    needs_residual = False
    narrow_wire = True

    @property
    def wire_dtype(self) -> str:
        """'float16' or 'bfloat16'."""
        return "float16" if self.params["type"] == "fp16" else "bfloat16"

    def _encode(self, grad: Any, residual: Any, contributions: int) -> tuple[Any, ...]:
        return (to_wire(grad, self.wire_dtype, np.float32(1.0 / contributions), self.params.get("clip")),)

    def _serialize(self, payload: tuple[Any, ...]) -> np.ndarray:
        raw = as_host(payload[0]).view(np.uint8)
        return np.concatenate([raw, np.zeros(2, np.uint8)]) if raw.size % 4 else raw

    def _deserialize(self, host: np.ndarray, on_home: Any, offset: int, n: int) -> tuple[tuple[Any, ...], int]:
        end = offset + 2 * n
        if end > host.size:
            raise ValueError(f"{host.size - offset} bytes left, {end - offset} needed")
        wire = on_home[offset:end].view(np.float16 if self.wire_dtype == "float16" else np.uint16)
        return (wire,), end + (2 if n % 2 else 0)

    def _decode(self, payload: tuple[Any, ...], n: int, total: Any, contributions: int) -> None:
        from_wire(payload[0], self.wire_dtype, np.float32(contributions), total, accumulate=True)

    def reduce_on_nccl(self, grads: Sequence[Any], wires: Sequence[Any], comm: Any) -> Any:
        """Half-precision all-reduce on the GPUs: ``wire = sum over contributions of half(clip(g) / N)``.

        Per GPU, on its communication stream: one ``to_wire`` launch (cast with the 1/N pre-scale
        fused) from the gradient slice into the wire slice, then one NCCL ``allReduce`` in
        NCCL_FLOAT16 / NCCL_BFLOAT16 with a sum. The gradient buffers are only read; the update
        reads the wire (see :mod:`mxlite.comm.narrow` for the flow and the precision).

        Args:
            grads: one 1-D float32/float16 CuPy array per local device of ``comm``.
            wires: one wire array of the same size per device (float16, or uint16 for bfloat16).
            comm: the NCCL communicator.

        Returns:
            the work to wait for before reading the wires.
        """
        grads = list(grads)
        self._check(grads, [None] * len(grads), grads[0])
        scale = np.float32(1.0 / comm.contributions)
        comm.begin()
        for device, stream, g, w in zip(comm.devices, comm.streams, grads, wires):
            with device.use(), stream:
                to_wire(g, self.wire_dtype, scale, self.params.get("clip"), out=w)   # cast and pre-scale
        comm.allreduce_on_device(list(wires), self.wire_dtype, "sum")                 # NCCL half sum
        return comm.end()


def _full_count(like: Any, k: int) -> Any:
    """A 1-element int32 array holding ``k``, on ``like``'s device (a fill, not a copy from the host)."""
    device = device_of(like)
    with device.use():
        return device.xp.full(1, k, np.int32)
