"""A parameter file that holds a recurrent layer's weights twice, under two of the names mxlite reads (its own
``l0_i2h_weight``, MXNet 1.x's ``_unfused.0.i2h_weight``, MXNet 2.x's fused ``rnn_param``), is ambiguous: loading it
is an error naming both names, and the model is left as it was (never one copy silently winning)."""

import numpy as np
import pytest

import mxlite as mx
from mxlite.formats.archive import save_mxnet_arrays
from mxlite.gluon import nn, rnn


def _model(seed, initialize=True):
    mx.random.seed(seed)
    net = nn.Sequential()
    net.add(rnn.LSTM(2, input_size=3))
    if initialize:
        net.initialize(mx.init.Uniform(0.5))
    return net


def _values(net):
    return {name: p.data().asnumpy().copy() for name, p in net.collect_params().items()}


def _fused(values):
    """MXNet 2.x's rnn_param of layer '0.': every weight, then every bias; i2h then h2h."""
    return np.concatenate([values[f"0.l0_{kind}_{part}"].ravel() for part in ("weight", "bias")
                           for kind in ("i2h", "h2h")])


def _file(tmp_path, arrays):
    path = tmp_path / "twice.params"
    save_mxnet_arrays(path, list(arrays.values()), list(arrays))
    return path


def _ambiguous_files(values):
    """(case, arrays, the two names the error must give for the layer's i2h weight)."""
    own = dict(values)
    unfused = {f"0._unfused.0.{name[len('0.l0_'):]}": v + 1 for name, v in values.items()}
    fused = {"0.rnn_param": _fused(values) + 2}
    return [
        ("1.x names and rnn_param", unfused | fused, ("0._unfused.0.i2h_weight", "0.rnn_param")),
        ("rnn_param and 1.x names", fused | unfused, ("0.rnn_param", "0._unfused.0.i2h_weight")),
        ("own names and rnn_param", own | fused, ("0.l0_i2h_weight", "0.rnn_param")),
        ("own names and 1.x names", own | unfused, ("0.l0_i2h_weight", "0._unfused.0.i2h_weight")),
    ]


@pytest.mark.parametrize("ignore_extra", [False, True])
@pytest.mark.parametrize("case", range(4))
def test_weights_under_two_names_are_refused_naming_both(tmp_path, case, ignore_extra):
    src = _values(_model(1))
    what, arrays, (first, second) = _ambiguous_files(src)[case]
    path = _file(tmp_path, arrays)
    dst = _model(2)
    before = _values(dst)
    with pytest.raises(ValueError, match="ambiguous") as caught:
        dst.load_parameters(path, ignore_extra=ignore_extra)
    message = str(caught.value)
    assert f"'{first}'" in message and f"'{second}'" in message, (what, message)
    assert "'0.l0_i2h_weight'" in message, message  # the weight held twice
    after = _values(dst)
    for name, value in before.items():  # a refused load changes nothing
        np.testing.assert_array_equal(after[name], value, err_msg=f"{what}: {name} changed")


def test_an_uninitialised_model_stays_uninitialised_after_an_ambiguous_file(tmp_path):
    src = _values(_model(1))
    _, arrays, _ = _ambiguous_files(src)[0]
    dst = _model(2, initialize=False)
    with pytest.raises(ValueError, match="ambiguous"):
        dst.load_parameters(_file(tmp_path, arrays))
    assert not any(p.is_initialized for p in dst.collect_params().values())


def test_each_name_alone_still_loads(tmp_path):
    """The three spellings of the same weights, one at a time: each loads the same values."""
    src = _values(_model(1))
    unfused = {f"0._unfused.0.{name[len('0.l0_'):]}": v for name, v in src.items()}
    for arrays in (src, unfused, {"0.rnn_param": _fused(src)}):
        dst = _model(2)
        dst.load_parameters(_file(tmp_path, arrays))
        for name, value in _values(dst).items():
            np.testing.assert_array_equal(value, src[name])


def test_load_dict_refuses_the_same_weights_under_two_names():
    src = _values(_model(1))
    _, arrays, (first, second) = _ambiguous_files(src)[0]
    dst = _model(2)
    before = _values(dst)
    with pytest.raises(ValueError, match=f"ambiguous.*'{first}' and as '{second}'"):
        dst.load_dict(arrays)
    for name, value in _values(dst).items():
        np.testing.assert_array_equal(value, before[name])
