"""MXNet's model store (``gluon.model_zoo.model_store``): where the pretrained weights of the vision models are.

``get_model_file(name, root)`` gives the path of ``{root}/{name}-{short hash}.params``, MXNet's own file
(the short hash is the first 8 hex digits of its SHA-1), after checking its SHA-1 against MXNet's published
one. A missing file, or one whose SHA-1 differs, is downloaded from MXNet's repository,
``$MXNET_GLUON_REPO`` (default ``https://apache-mxnet.s3-accelerate.dualstack.amazonaws.com/``), as
``gluon/models/{name}-{short hash}.zip`` and unzipped into ``root``. Without a network, put the file in ``root``
yourself: the error names the file and the folder. ``root`` defaults to ``$MXNET_HOME/models``
(``~/.mxnet/models``), as in MXNet, so files MXNet downloaded are found.
"""

from __future__ import annotations

import os
import tempfile
import uuid
import zipfile

from ..data.download import check_sha1, download, repo_file_url

__all__ = ["PretrainedUnavailableError", "default_root", "get_model_file", "purge", "short_hash"]

# MXNet's published SHA-1 of each model's weight file (python/mxnet/gluon/model_zoo/model_store.py).
_MODEL_SHA1 = {
    "alexnet": "44335d1f0046b328243b32a26a4fbd62d9057b45",
    "densenet121": "f27dbf2dbd5ce9a80b102d89c7483342cd33cb31",
    "densenet161": "b6c8a95717e3e761bd88d145f4d0a214aaa515dc",
    "densenet169": "2603f878403c6aa5a71a124c4a3307143d6820e9",
    "densenet201": "1cdbc116bc3a1b65832b18cf53e1cb8e7da017eb",
    "inceptionv3": "ed47ec45a937b656fcc94dabde85495bbef5ba1f",
    "mobilenet0.25": "9f83e440996887baf91a6aff1cccc1c903a64274",
    "mobilenet0.5": "8e9d539cc66aa5efa71c4b6af983b936ab8701c3",
    "mobilenet0.75": "529b2c7f4934e6cb851155b22c96c9ab0a7c4dc2",
    "mobilenet1.0": "6b8c5106c730e8750bcd82ceb75220a3351157cd",
    "mobilenetv2_1.0": "36da4ff1867abccd32b29592d79fc753bca5a215",
    "mobilenetv2_0.75": "e2be7b72a79fe4a750d1dd415afedf01c3ea818d",
    "mobilenetv2_0.5": "aabd26cd335379fcb72ae6c8fac45a70eab11785",
    "mobilenetv2_0.25": "ae8f9392789b04822cbb1d98c27283fc5f8aa0a7",
    "resnet18_v1": "a0666292f0a30ff61f857b0b66efc0228eb6a54b",
    "resnet34_v1": "48216ba99a8b1005d75c0f3a0c422301a0473233",
    "resnet50_v1": "0aee57f96768c0a2d5b23a6ec91eb08dfb0a45ce",
    "resnet101_v1": "d988c13d6159779e907140a638c56f229634cb02",
    "resnet152_v1": "671c637a14387ab9e2654eafd0d493d86b1c8579",
    "resnet18_v2": "a81db45fd7b7a2d12ab97cd88ef0a5ac48b8f657",
    "resnet34_v2": "9d6b80bbc35169de6b6edecffdd6047c56fdd322",
    "resnet50_v2": "ecdde35339c1aadbec4f547857078e734a76fb49",
    "resnet101_v2": "18e93e4f48947e002547f50eabbcc9c83e516aa6",
    "resnet152_v2": "f2695542de38cf7e71ed58f02893d82bb409415e",
    "squeezenet1.0": "264ba4970a0cc87a4f15c96e25246a1307caf523",
    "squeezenet1.1": "33ba0f93753c83d86e1eb397f38a667eaf2e9376",
    "vgg11": "dd221b160977f36a53f464cb54648d227c707a05",
    "vgg11_bn": "ee79a8098a91fbe05b7a973fed2017a6117723a8",
    "vgg13": "6bc5de58a05a5e2e7f493e2d75a580d83efde38c",
    "vgg13_bn": "7d97a06c3c7a1aecc88b6e7385c2b373a249e95e",
    "vgg16": "e660d4569ccb679ec68f1fd3cce07a387252a90a",
    "vgg16_bn": "7f01cf050d357127a73826045c245041b0df7363",
    "vgg19": "ad2f660d101905472b83590b59708b71ea22b2e5",
    "vgg19_bn": "f360b758e856f1074a85abd5fd873ed1d98297c3",
}


class PretrainedUnavailableError(FileNotFoundError):
    """A model's pretrained weight file is not in ``root`` (or fails its SHA-1 check) and could not be
    downloaded; the message names the file, the folder to put it in and the download's error."""


def default_root() -> str:
    """``$MXNET_HOME/models``, ``MXNET_HOME`` defaulting to ``~/.mxnet`` (MXNet's folder of weight files)."""
    return os.path.join(os.environ.get("MXNET_HOME", os.path.join("~", ".mxnet")), "models")


def short_hash(name: str) -> str:
    """The first 8 hex digits of the SHA-1 of model ``name``'s weight file.

    Raises:
        ValueError: MXNet publishes no pretrained weights for ``name`` (the message lists the models it does).
    """
    if name not in _MODEL_SHA1:
        raise ValueError(f"pretrained model {name!r} is not available; MXNet's model store has "
                         f"{', '.join(sorted(_MODEL_SHA1))}")
    return _MODEL_SHA1[name][:8]


def _unzip_params(archive: str, member: str, target: str) -> None:
    """Copy ``member`` (matched by base name) out of the zip ``archive`` to ``target``, atomically."""
    with zipfile.ZipFile(archive) as zf:
        names = [n for n in zf.namelist() if os.path.basename(n) == member]
        if not names:
            raise OSError(f"{archive} does not hold {member}")
        fd, tmp = tempfile.mkstemp(prefix=".params-", dir=os.path.dirname(target))
        try:
            with os.fdopen(fd, "wb") as out, zf.open(names[0]) as source:
                while chunk := source.read(1 << 20):
                    out.write(chunk)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)


def _download(file_name: str, root: str, target: str) -> None:
    # a name of this call's own, so that processes downloading at once never share the archive
    archive = os.path.join(root, f"{file_name}.zip.{os.getpid()}-{uuid.uuid4().hex}")
    download(repo_file_url("gluon/models", file_name + ".zip"), path=archive, overwrite=True, retries=2)
    try:
        _unzip_params(archive, file_name + ".params", target)
    finally:
        os.remove(archive)


def get_model_file(name: str, root: str | os.PathLike | None = None) -> str:
    """The path of model ``name``'s pretrained weights, ``{root}/{name}-{short_hash}.params``, downloading
    them when the file is missing or fails its SHA-1 check (see the module docstring).

    Args:
        name: a model name with pretrained weights ('resnet18_v1', 'mobilenetv2_0.25', 'vgg16_bn', ...).
        root: the folder of weight files (default :func:`default_root`); created when a download is needed.

    Raises:
        ValueError: no pretrained weights exist for ``name``.
        PretrainedUnavailableError: the file is not in ``root`` (or fails its SHA-1 check) and the download
            failed or gave a file with another SHA-1.
    """
    file_name = f"{name}-{short_hash(name)}"
    root = os.path.expanduser(os.fspath(root) if root is not None else default_root())
    path = os.path.join(root, file_name + ".params")
    sha1 = _MODEL_SHA1[name]
    present = os.path.exists(path)
    if present and check_sha1(path, sha1):
        return path
    url = repo_file_url("gluon/models", file_name + ".zip")
    try:
        os.makedirs(root, exist_ok=True)
        _download(file_name, root, path)
    except (OSError, zipfile.BadZipFile) as exc:
        found = f"{path} fails its SHA-1 check (expected {sha1})" if present else f"{path} does not exist"
        raise PretrainedUnavailableError(
            f"{name}: pretrained weights unavailable: {found}, and downloading {url} failed ({exc}). Put MXNet's "
            f"{file_name}.params (SHA-1 {sha1}; {file_name}.zip from MXNet's model store, unzipped) in {root}, or "
            "point MXNET_GLUON_REPO at a mirror of MXNet's repository") from exc
    if not check_sha1(path, sha1):
        raise PretrainedUnavailableError(f"{name}: the weights downloaded from {url} into {path} do not have MXNet's "
                                         f"SHA-1 {sha1}; the mirror may be out of date: try again or fix it")
    return path


def purge(root: str | os.PathLike | None = None) -> None:
    """Delete every ``.params`` file in ``root`` (default :func:`default_root`)."""
    root = os.path.expanduser(os.fspath(root) if root is not None else default_root())
    for name in os.listdir(root):
        if name.endswith(".params"):
            os.remove(os.path.join(root, name))
