"""CUDA graphs of whole models on the emulated GPUs: a fused LSTM with dropout between layers trains bit for bit
as eagerly, ``Block.drop_graphs`` gives the memory back and the block captures again, and
``benchmarks/bench_gpu_model.py --graphs`` counts the eager and the captured step side by side.
"""

from __future__ import annotations

import importlib.util
import json
import os
import warnings

import numpy as np
import pytest

import mxlite as mx
from mxlite.device import graphs as dgraphs

pytestmark = pytest.mark.gpu

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def emu():
    """The emulation's counters; skipped on real GPUs."""
    from mxlite._emulation import install  # noqa: PLC0415

    return install if mx.num_gpus() and install.emulated_gpu_count() else pytest.skip("needs the GPU emulation")


class _Tagger(mx.nn.Block):
    """Two fused LSTM layers with dropout between them, then a Dense layer per time step."""

    def __init__(self):
        super().__init__()
        self.rnn = mx.gluon.rnn.LSTM(8, num_layers=2, layout="NTC", input_size=6, dropout=0.3)
        self.out = mx.nn.Dense(3, in_units=8, flatten=False)

    def forward(self, x):
        return self.out(self.rnn(x))


def _mlp():
    return mx.nn.Sequential(mx.nn.Dense(16, activation="relu", in_units=12), mx.nn.Dense(5, in_units=16))


def _pair(make, device, seed, optimizer, params):
    """Two equal networks and their Trainers: the first runs eagerly, the second is hybridized."""
    nets = []
    for _ in range(2):
        mx.random.seed(seed)
        net = make()
        net.initialize(mx.init.Xavier(), device=device)
        nets.append(net)
    nets[1].hybridize(static_alloc=True, static_shape=True)
    return nets, [mx.Trainer(n.collect_params(), optimizer, params) for n in nets]


def _step(net, trainer, x):
    with mx.autograd.record():
        y = net(x)
        loss = (y * y).mean()
    loss.backward()
    trainer.step(x.shape[0])
    return y.asnumpy()


def _both_steps(emu, nets, trainers, x, step):
    """A step of the captured net, then of the eager one (the same dropout masks), compared bit for bit;
    returns the captured step's graph launches."""
    emu.reset_counters()
    mx.random.seed(300 + step)
    captured = _step(nets[1], trainers[1], x)
    launches = emu.counters()[0]["graph_launches"]
    mx.random.seed(300 + step)
    eager = _step(nets[0], trainers[0], x)
    assert eager.tobytes() == captured.tobytes(), step
    for pe, pg in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
        assert pe.data(x.device).asnumpy().tobytes() == pg.data(x.device).asnumpy().tobytes(), (step, pe.label)
    return launches


def test_a_fused_lstm_with_dropout_is_captured_bit_for_bit(emu):
    device = mx.gpu(0)
    nets, trainers = _pair(_Tagger, device, 21, "adam", {"learning_rate": 0.01})
    rng = np.random.default_rng(22)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing falls back
        for step in range(8):
            x = mx.array(rng.standard_normal((4, 5, 6)).astype(np.float32), device=device)
            # forward + backward, and from step 2 the Trainer's step (tests/test_graph_step.py)
            assert _both_steps(emu, nets, trainers, x, step) == [0, 2, 3][min(step, 2)], step
    assert len(nets[1].graph_info()) == 1


def test_drop_graphs_gives_the_memory_back_and_the_block_captures_again(emu):
    device = mx.gpu(0)
    nets, trainers = _pair(_mlp, device, 23, "sgd", {"learning_rate": 0.1})
    rng = np.random.default_rng(24)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a deliberate drop is no fallback: no notice
        for step in range(6):
            x = mx.array(rng.standard_normal((4, 12)).astype(np.float32), device=device)
            if step == 3:
                held = nets[1].graph_info()
                assert len(held) == 1 and held[0]["bytes"] > 0
                mine = [g for g in dgraphs.info() if g["label"].startswith("Sequential((4, 12)")]
                assert len(mine) == 2  # forward and backward
                assert nets[1].drop_graphs() == 1 and nets[1].graph_info() == []
                assert not [g for g in dgraphs.info() if g["label"].startswith("Sequential((4, 12)")]
            # captured again at once after the drop
            assert _both_steps(emu, nets, trainers, x, step) == [0, 2, 3][min(step, 2)], step
    assert nets[1].graph_info()[0]["launches"] == 3
    assert nets[0].drop_graphs() == 0  # not hybridized: nothing to drop


def test_bench_gpu_model_counts_launches_eager_and_captured(tmp_path, capsys):
    if mx.device.devices._emulated_gpus() < 1:
        pytest.skip("counts come from the GPU emulation")
    spec = importlib.util.spec_from_file_location("bench_gpu_model", os.path.join(_ROOT, "benchmarks",
                                                                                  "bench_gpu_model.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "graphs.json"
    assert bench.main(["--graphs", "--models", "mlp,cnn_bn", "--gpus", "1", "--kvstores", "none", "--codecs", "none",
                       "--no-rules", "--hidden", "32", "--input", "16", "--layers", "2", "--batch", "8", "--image", "8",
                       "--cnn-batch", "4", "--warmup", "2", "--steps", "2", "--json", str(out)]) == 0
    records = {(r["model"], r["mode"]): r for r in json.loads(out.read_text())["graphs"]}
    assert set(records) == {(m, mode) for m in ("mlp", "cnn_bn") for mode in ("eager", "captured")}
    for model in ("mlp", "cnn_bn"):
        eager, captured = records[(model, "eager")], records[(model, "captured")]
        assert eager["graph_launches"] == 0 and captured["graph_launches"] == 3  # forward, backward and step graphs
        assert captured["host_syncs"] == eager["host_syncs"] == 0
        assert captured["launches"] < eager["launches"]  # per step, a graph launch counting as one
        assert captured["graph_nodes"] > captured["graph_launches"]
        for phase in ("forward", "backward"):
            assert captured["phase_launches"][phase] < eager["phase_launches"][phase], (model, phase)
        # one arena: the Trainer's one fused kernel launch eagerly, its one graph launch captured
        assert captured["phase_launches"]["step"] == eager["phase_launches"]["step"] == 1
    assert "launches/step" in capsys.readouterr().out
