"""gluon.model_zoo's model store: ``pretrained=True`` loads MXNet's ``{name}-{short hash}.params`` from ``root``
(SHA-1 checked), downloads it from ``$MXNET_GLUON_REPO`` (a local file:// mirror here) when missing, and says
which file to put where when neither works. The weight files are written by the tests in MXNet's format, and
the published SHA-1 table is patched to theirs (MXNet's real files are tens of MB)."""

from __future__ import annotations

import hashlib
import os
import zipfile

import numpy as np
import pytest

import mxlite as mx
from mxlite.gluon.model_zoo import model_store, vision

MODEL = "mobilenet0.25"  # the smallest model with pretrained weights


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """No network: MXNet's repository is an empty local folder."""
    repo = tmp_path / "repo"
    repo.mkdir()
    monkeypatch.setenv("MXNET_GLUON_REPO", repo.as_uri() + "/")
    return repo


@pytest.fixture
def weights(tmp_path, monkeypatch):
    """An MXNet-format weight file of MODEL, the table patched to its SHA-1; returns (net, file name, path)."""
    mx.random.seed(0)
    net = vision.get_model(MODEL)
    net.initialize(mx.init.Xavier())
    net(mx.nd.ones((1, 3, 32, 32)))
    staged = tmp_path / "staged.params"
    net.save_parameters(str(staged), format="mxnet")
    sha1 = hashlib.sha1(staged.read_bytes()).hexdigest()
    monkeypatch.setitem(model_store._MODEL_SHA1, MODEL, sha1)
    return net, f"{MODEL}-{sha1[:8]}", staged


def _same_outputs(a, b) -> None:
    x = mx.nd.array(np.random.default_rng(0).uniform(size=(2, 3, 32, 32)))
    np.testing.assert_array_equal(a(x).asnumpy(), b(x).asnumpy())


def test_published_hashes_are_mxnets():
    assert len(model_store._MODEL_SHA1) == 34 and set(model_store._MODEL_SHA1) == set(vision.model_names())
    assert model_store._MODEL_SHA1["resnet18_v1"] == "a0666292f0a30ff61f857b0b66efc0228eb6a54b"
    assert model_store._MODEL_SHA1["vgg19_bn"] == "f360b758e856f1074a85abd5fd873ed1d98297c3"
    assert model_store.short_hash("mobilenetv2_0.25") == "ae8f9392"
    with pytest.raises(ValueError, match="pretrained model 'resnet19_v1' is not available"):
        model_store.short_hash("resnet19_v1")


def test_pretrained_loads_mxnets_file_from_root(tmp_path, weights, offline, monkeypatch):
    net, file_name, staged = weights
    root = tmp_path / "models"
    root.mkdir()
    os.replace(staged, root / f"{file_name}.params")
    loaded = vision.get_model(MODEL, pretrained=True, root=str(root))
    _same_outputs(net, loaded)
    monkeypatch.setenv("MXNET_HOME", str(tmp_path))  # the default root: $MXNET_HOME/models
    _same_outputs(net, vision.mobilenet0_25(pretrained=True, device=mx.cpu()))
    assert os.listdir(root) == [f"{file_name}.params"]


def test_missing_file_without_network_says_which_file_to_put_where(tmp_path, offline):
    root = tmp_path / "models"
    with pytest.raises(model_store.PretrainedUnavailableError) as info:
        vision.get_model("resnet18_v1", pretrained=True, root=str(root))
    message = str(info.value)
    assert message.startswith("resnet18_v1: pretrained weights unavailable")
    assert f"{root}/resnet18_v1-a0666292.params does not exist" in message
    assert "SHA-1 a0666292f0a30ff61f857b0b66efc0228eb6a54b" in message and "resnet18_v1-a0666292.zip" in message
    assert isinstance(info.value, FileNotFoundError)
    assert os.listdir(root) == []  # no partial download left behind


def test_a_file_failing_its_sha1_is_downloaded_again_or_refused(tmp_path, weights, offline):
    net, file_name, staged = weights
    root = tmp_path / "models"
    root.mkdir()
    (root / f"{file_name}.params").write_bytes(b"not the weights")
    with pytest.raises(model_store.PretrainedUnavailableError, match="fails its SHA-1 check"):
        vision.get_model(MODEL, pretrained=True, root=str(root))
    models = offline / "gluon" / "models"
    models.mkdir(parents=True)
    with zipfile.ZipFile(models / f"{file_name}.zip", "w") as zf:
        zf.write(staged, f"{file_name}.params")
    _same_outputs(net, vision.get_model(MODEL, pretrained=True, root=str(root)))  # replaced from the mirror
    assert os.listdir(root) == [f"{file_name}.params"]


def test_download_from_mxnets_repository_layout(tmp_path, weights, offline):
    net, file_name, staged = weights
    models = offline / "gluon" / "models"
    models.mkdir(parents=True)
    with zipfile.ZipFile(models / f"{file_name}.zip", "w") as zf:
        zf.write(staged, f"{file_name}.params")
    root = tmp_path / "fresh" / "models"
    assert model_store.get_model_file(MODEL, root=str(root)) == str(root / f"{file_name}.params")
    _same_outputs(net, vision.get_model(MODEL, pretrained=True, root=str(root)))
    model_store.purge(str(root))
    assert os.listdir(root) == []


def test_pretrained_weights_must_fit_the_model(tmp_path, weights, offline):
    _, file_name, staged = weights
    os.replace(staged, tmp_path / f"{file_name}.params")
    with pytest.raises(ValueError, match="shape"):
        vision.get_model(MODEL, pretrained=True, root=str(tmp_path), classes=10)
