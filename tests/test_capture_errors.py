"""What happens to errors and empty batches when a hybridized block is captured as CUDA graphs.

An exception the block's own ``forward`` raises while it is being captured is the user's: it propagates
once, unchanged, and ``forward`` is not run a second time. Only what a capture cannot record (a read by
the host, a synchronisation, cuRAND, ...) makes the block run eagerly, with one warning (docs/graphs.md).
A call with an empty tensor argument (a dimension of size 0) runs eagerly and gives the eager result.
"""

from __future__ import annotations

import traceback
import warnings

import numpy as np
import pytest

import mxlite as mx
from mxlite.device import graphs as dgraphs

pytestmark = pytest.mark.gpu

_USER_ERRORS = {
    "value": lambda: ValueError("labels must be non-negative"),
    "mentions random": lambda: ValueError("random crop larger than the image"),
    "mentions synchronisation": lambda: RuntimeError("could not synchronize the replicas"),
    "key": lambda: KeyError("missing feature"),
}


class _RaisesOnCall(mx.nn.Block):
    """A Dense layer whose forward raises ``error`` on call number ``on`` (after the layer ran) and counts calls."""

    def __init__(self, error, on):
        super().__init__()
        self.dense = mx.nn.Dense(4, in_units=5)
        self.error, self.on = error, on
        self.calls = 0
        self.raised = None

    def forward(self, x):
        self.calls += 1
        y = self.dense(x)
        if self.calls == self.on:
            self.raised = self.error()
            raise self.raised
        return y


def _hybridized(block, device):
    block.initialize(mx.init.Xavier(), device=device)
    block.hybridize(static_alloc=True, static_shape=True)
    return block


@pytest.mark.parametrize("record", [False, True], ids=["inference", "recorded"])
@pytest.mark.parametrize("kind", sorted(_USER_ERRORS))
def test_an_error_raised_by_forward_during_capture_propagates_once_unchanged(kind, record):
    device = mx.gpu(0)
    net = _hybridized(_RaisesOnCall(_USER_ERRORS[kind], on=2), device)  # call 1: warm-up, call 2: the capture
    x = mx.array(np.ones((3, 5), np.float32), device=device)

    def call():
        if not record:
            return net(x)
        with mx.autograd.record():
            y = net(x)
        y.backward()
        return y

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
        with pytest.raises(type(net.raised or _USER_ERRORS[kind]())) as info:
            call()
    assert info.value is net.raised and net.calls == 2  # the very exception, and forward ran once for the call
    assert info.value.__cause__ is None and not info.value.__suppress_context__
    assert traceback.extract_tb(info.value.__traceback__)[-1].name == "forward"
    assert not [str(w.message) for w in caught if "hybridize" in str(w.message)]
    y = call()  # the next call captures (forward runs for it once) and the block keeps working
    assert net.calls == 3 and len(net.graph_info()) == 1
    assert y.asnumpy().tobytes() == net.dense(x).asnumpy().tobytes()


def test_device_capture_lets_the_functions_own_error_through_and_stays_usable():
    device = mx.gpu(0)
    error = ValueError("not a capture problem")

    def fails():
        raise error

    with pytest.raises(ValueError) as info:
        dgraphs.capture(device, fails, "own error")
    assert info.value is error and info.value.__cause__ is None
    x = mx.array(np.full(3, 2.0, np.float32), device=device)
    graph, y = dgraphs.capture(device, lambda: x.array * 3, "after")
    graph.launch()
    assert mx.autograd.Tensor(y, device).asnumpy().tolist() == [6.0] * 3


def test_a_capture_refusal_still_falls_back_to_eager_with_one_notice():
    """A read by the host inside forward cannot be captured: eager, one warning, forward's result."""

    class HostRead(mx.nn.Block):
        def __init__(self):
            super().__init__()
            self.dense = mx.nn.Dense(4, in_units=5)

        def forward(self, x):
            y = self.dense(x)
            return y * 2 if float(y.sum().asnumpy()) > 1e9 else y

    device = mx.gpu(0)
    net = _hybridized(HostRead(), device)
    x = mx.array(np.ones((3, 5), np.float32), device=device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [net(x).asnumpy() for _ in range(3)]
    notices = [str(w.message) for w in caught if "hybridize" in str(w.message)]
    assert len(notices) == 1 and "read of GPU data by the host" in notices[0], notices
    assert all(o.tobytes() == net.dense(x).asnumpy().tobytes() for o in outs) and net.graph_info() == []


def _mlp():
    return mx.nn.Sequential(mx.nn.Dense(6, activation="relu", in_units=5), mx.nn.Dense(3, in_units=6))


def test_an_empty_batch_gives_the_eager_result():
    device = mx.gpu(0)
    nets = []
    for _ in range(2):
        mx.random.seed(3)
        net = _mlp()
        net.initialize(mx.init.Xavier(), device=device)
        nets.append(net)
    nets[1].hybridize(static_alloc=True, static_shape=True)
    empty = mx.array(np.ones((0, 5), np.float32), device=device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):  # warm-up, capture, replay for a non-empty batch
            results = []
            for net in nets:
                with mx.autograd.record():
                    y = net(empty)
                y.backward()
                inference = net(empty)
                results.append([y.asnumpy(), inference.asnumpy()]
                               + [p.grad(device).asnumpy() for p in net.collect_params().values()])
            assert results[1][0].shape == (0, 3) and results[1][1].shape == (0, 3)
            for a, b in zip(*results):
                assert a.shape == b.shape and a.tobytes() == b.tobytes()
    assert not [str(w.message) for w in caught if "hybridize" in str(w.message)]
    assert nets[1].graph_info() == []
    x = mx.array(np.ones((2, 5), np.float32), device=device)
    for _ in range(2):
        nets[1](x)
    assert len(nets[1].graph_info()) == 1  # a batch with samples is still captured
