"""mxlite.device.kernels.KernelFile: one declaration per kernel file, used by every driver."""

from __future__ import annotations

import numpy as np
import pytest

import mxlite as mx
from mxlite.comm import compression
from mxlite.device import kernels as _kernels
from mxlite.ops import _attention_kernels, _conv_kernels, _loss_kernels, _norm_kernels, _philox, activations, rnn_ops
from mxlite.optimizer import _fused

DRIVERS = {"activation.cu": activations.KERNELS, "attention.cu": _attention_kernels.KERNELS,
           "bias_act.cu": _conv_kernels.BIAS_ACT_KERNELS, "compression.cu": compression.KERNELS,
           "conv.cu": _conv_kernels.KERNELS, "norm.cu": _norm_kernels.KERNELS, "optimizers.cu": _fused.KERNELS,
           "random.cu": _philox.KERNELS, "rnn.cu": rnn_ops.KERNELS, "softmax_ce.cu": _loss_kernels.KERNELS}


@pytest.fixture
def registry(monkeypatch):
    """A private copy of the name registry: declarations made by a test do not reach the others."""
    providers = {filename: list(listed) for filename, listed in _kernels._name_providers.items()}
    monkeypatch.setattr(_kernels, "_name_providers", providers)
    return providers


def test_a_declaration_registers_its_instantiations_and_names(registry):
    declared = _kernels.KernelFile("demo.cu", ("float32", "float16"), ("scale", "shift"), names=("reset",))
    assert declared.names() == ("scale<float>", "scale<__half>", "shift<float>", "shift<__half>", "reset")
    assert _kernels.kernel_names()["demo.cu"] == declared.names()


def test_an_accumulator_declaration_names_t_and_a(registry):
    declared = _kernels.KernelFile("demo.cu", ("float64", "float16"), ("sum",), accumulator=True)
    assert declared.names() == ("sum<double, double>", "sum<__half, float>")
    assert declared.template_arguments(np.float16) == "__half, float"


def test_a_callable_list_is_read_when_asked(registry):
    listed = ["one"]
    declared = _kernels.KernelFile("demo.cu", names=lambda: tuple(listed))
    listed.append("two")
    assert _kernels.kernel_names()["demo.cu"] == ("one", "two") == declared.names()


def test_type_name_of_an_undeclared_dtype_names_the_file_and_the_dtypes(registry):
    declared = _kernels.KernelFile("demo.cu", ("float32",), ("scale",))
    assert declared.type_name(np.dtype(np.float32)) == "float" and declared.supports("float32")
    assert not declared.supports(np.int32)
    with pytest.raises(ValueError, match=r"demo\.cu has no kernels for dtype int32 \(it takes float32\)"):
        declared.type_name(np.int32)


def test_launching_an_undeclared_name_is_refused_with_the_name(registry):
    declared = _kernels.KernelFile("demo.cu", ("float32",), ("scale",))
    with pytest.raises(ValueError, match=r"'scale<double>' is not among the compiled names"):
        declared.function("scale<double>", mx.cpu(0))


def test_block_size_has_one_default_and_cpu_devices_run_one_thread(registry):
    assert _kernels.KernelFile("demo.cu").block_threads == _kernels.BLOCK_THREADS == 256
    assert _kernels.KernelFile("demo.cu", block_threads=64).block_for(mx.cpu(0)) == 1
    assert _attention_kernels.KERNELS.block_threads == 128


@pytest.mark.gpu
def test_a_gpu_launch_takes_the_declared_block():
    assert _fused.KERNELS.block_for(mx.gpu(0)) == 256
    assert _attention_kernels.KERNELS.block_for(mx.gpu(0)) == 128


def test_every_registered_file_is_one_drivers_declaration():
    assert {filename: declared.names() for filename, declared in DRIVERS.items()} == _kernels.kernel_names()
    assert all(declared.filename == filename for filename, declared in DRIVERS.items())


def test_the_drivers_share_one_dtype_table():
    for declared in DRIVERS.values():
        assert all(_kernels.C_TYPES[dtype] == c for dtype, c in declared.type_names.items()), declared
