"""Training checkpoints: a model, its Trainer, the random streams and the step, saved and restored together.

    mx.checkpoint.save("ckpt", net, trainer, step)         # ckpt/step-00001200/, then ckpt/latest
    step = mx.checkpoint.load("ckpt", net, trainer)        # the latest; continues bit for bit

Layout of ``directory``:

* ``step-<step>/`` one checkpoint: ``params.npz`` (the model, as ``save_parameters`` writes it),
  ``trainer-rank<r>.states`` (each rank's ``Trainer.save_states``: its compression residuals
  are its own), ``meta-rank<r>.json`` (format, step, world size, each rank's random streams)
  and ``manifest.json`` (the SHA-256 digest and size of every other file; written last);
  with optimizer states sharded over the processes (``shard_optimizer_states``), the whole
  states every rank gathers are kept once, in ``trainer-rank0.states``, and the other ranks'
  metadata say so (``trainer_states_in``); each rank's load reads that file too, checked
  against the manifest like its own;
* ``latest``: the name of the newest complete checkpoint.

Crash safety: a checkpoint is written into a staging folder of its own
(``.tmp-step-<step>-<token>``, every file fsynced, with a ``.writer.json`` naming the host and
process writing it), which is renamed to ``step-<step>`` only when every file listed in its
manifest is there; ``latest`` is then replaced atomically. A crash at any point leaves the
previous checkpoint and ``latest`` intact. A failed save (a full disk) removes its staging
folder. Staging folders of writers that died are removed by later saves: on the same host when
the writing process no longer exists, from another host once they are a day old.

Concurrent writers (a restarted job while the old one still runs): each save stages into its
own folder and never touches another live writer's; publishing (the renames, ``latest``, the
removal of old checkpoints beyond ``keep``) happens under an exclusive lock on the folder
(``flock``), and never removes the checkpoint ``latest`` names.

Loading reads the manifest first and checks the number of processes against it (a job of another
size is told both sizes, before any other file is read); then every file is checked against its
SHA-256 in the manifest (a file whose digest differs is named) before it is parsed. Every file is
read exactly once: the bytes hashed are the bytes parsed (the metadata, the trainer states and the
parameters alike), so what is applied is what was verified, and a file changed or removed after
its check changes nothing. Everything (the metadata, the random streams, the trainer states
against the trainer, the parameters against the model) is checked before anything changes, so a
failed load leaves model, trainer and random streams as they were.
A damaged ``latest`` is named, with the complete checkpoints found; it does not stop later saves.

Several processes (``dist_*`` kvstores): every rank calls ``save``/``load``; the ranks first
check that they were given the same step and folder (else every rank raises a ValueError naming
the odd rank). Rank 0 writes the parameters and publishes, each rank writes its own trainer
states and metadata. Every step is agreed: when any rank fails (a file it cannot write, or
read), every rank raises the same error, naming that rank and its message, so no rank goes on
alone. The collectives honour ``MXLITE_COLLECTIVE_TIMEOUT``. The number of processes must match
at load (else every rank raises a ValueError naming both numbers).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .comm.agree import check_same_across_ranks
from .comm.factory import launched_by_mpi
from .comm.mpi import MpiCommunicator
from .device import cpu
from .device.staging import abandoned
from .formats import _messages
from .formats.archive import atomic_write, file_sha256, fsync_dir
from .ops import random as _random

__all__ = ["save", "load", "latest_step"]

_FORMAT = "mxlite.checkpoint"
_VERSION = 2  # 2: every checkpoint holds manifest.json
_MANIFEST = "manifest.json"
_MANIFEST_FORMAT = "mxlite.checkpoint.manifest"
_WRITER = ".writer.json"
_LATEST = "latest"
_STEP_DIR = re.compile(r"^step-(\d{8,})$")
_META_FILE = re.compile(r"^meta-rank(\d+)\.json$")
_STAGING = re.compile(r"^\.tmp-step-\d{8,}(-[0-9a-f]+)?$")
_SHARED_STATES = "trainer-rank0.states"  # where sharded training's gathered optimizer states are kept (once)
_UNMARKED_AGE = 3600.0  # a staging folder without a writer file (just created, or an old mxlite's)


def _world() -> Any:
    """An MPI communicator over every process of the job (timed collectives), or None with one process."""
    if not launched_by_mpi():
        return None
    try:
        from mpi4py import MPI  # noqa: PLC0415
    except ImportError:  # started by srun/mpiexec, but no MPI in Python: a single-process job
        return None
    if MPI.COMM_WORLD.Get_size() == 1:
        return None
    return MpiCommunicator([cpu(0)], MPI.COMM_WORLD)  # installs the fault handling; honours the timeout


def _step_name(step: int) -> str:
    return f"step-{step:08d}"


# -- agreement between ranks --------------------------------------------------------------------
_ERRORS: dict[str, type[Exception]] = {cls.__name__: cls for cls in (
    ValueError, TypeError, FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError,
    NotADirectoryError, OSError, RuntimeError, KeyError)}


def _gather_text(comm: Any, text: str) -> list[str]:
    """Every rank's ``text``, in rank order (one timed all-gather)."""
    data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    return [bytes(part.tobytes()).decode("utf-8") for part in comm.allgather(data)]


def _agreed(comm: Any, what: str, work: Callable[[], Any]) -> list[Any]:
    """Run ``work()`` on every rank; returns every rank's (JSON-able) result, in rank order.

    When ``work`` raises on any rank, every rank raises the same error (the failing rank's
    exception type, when a built-in one) naming the first failing rank and its message. With one
    process the exception propagates unchanged.
    """
    try:
        report: list[Any] = ["ok", work()]
        error: Exception | None = None
    except Exception as exc:  # noqa: BLE001 - every failure must reach the other ranks
        report, error = ["error", type(exc).__name__, str(exc)], exc
    if comm is None:
        if error is not None:
            raise error
        return [report[1]]
    reports = [json.loads(t) for t in _gather_text(comm, json.dumps(report))]
    failed = [(rank, r) for rank, r in enumerate(reports) if r[0] != "ok"]
    if not failed:
        return [r[1] for r in reports]
    rank, (_, kind, message) = failed[0]
    others = [r for r, _ in failed[1:]]
    also = f" (it failed on rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} too)" if others else ""
    raise _ERRORS.get(kind, RuntimeError)(f"{what} failed on rank {rank} of {comm.size}: {kind}: {message}{also}") \
        from error


def _check_arguments(comm: Any, what: str, entries: list[tuple[str, Any]]) -> None:
    """Every rank was given the same arguments (ValueError naming the odd rank on every rank)."""
    if comm is None:
        return
    check_same_across_ranks(comm, f"the arguments of {what}", entries)


# -- saving -------------------------------------------------------------------------------------
def save(directory: str | os.PathLike, net: Any, trainer: Any = None, step: int = 0, keep: int | None = 3) -> str:
    """Write a checkpoint of ``net`` (and ``trainer``) at ``step``; returns its folder.

    Args:
        directory: where checkpoints live (created if needed).
        net: the model (a Block).
        trainer: its Trainer, or None.
        step: the training step (a non-negative int) the checkpoint is named after.
        keep: how many checkpoints to keep (older ones are deleted after the new one is
            complete; never the one ``latest`` names); None keeps all.

    Files are created with the permissions the umask allows (0666 & ~umask; folders 0777 &
    ~umask). On failure the staging folder is removed and nothing is published.

    Raises:
        ValueError: a negative or non-int step, keep < 1, a Trainer updating parameters that are
            not ``net``'s (named), or (several processes) ranks given another step, folder, keep
            or trainer, or whose trainers' last updates used other hyper-parameters (a change on one
            rank at the last step; the message names the ranks and values).
        OSError: a file could not be written (the message names the rank with several processes).
    """
    comm = _world()
    rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)

    def arguments() -> str:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"checkpoint step must be a non-negative int, got {step!r}")
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise ValueError(f"keep must be an int of at least 1 (or None), got {keep!r}")
        _check_trainer_of(net, trainer, "checkpoint.save")
        return os.path.abspath(os.fspath(directory))

    folder = _agreed(comm, "checkpoint.save", arguments)[0]
    _check_arguments(comm, "checkpoint.save", [("directory", folder), ("step", step), ("keep", keep),
                                               ("trainer", trainer is not None)])
    if trainer is not None:
        trainer._confirm_hyperparameters("checkpoint.save")  # a change on one rank at the last step, named now
    final = os.path.join(folder, _step_name(step))
    staging: str | None = None
    try:
        def stage() -> str | None:
            nonlocal staging
            if rank != 0:
                return None
            os.makedirs(folder, exist_ok=True)
            with _lock(folder):  # no live writer holds a set-aside folder outside the lock
                _recover(folder)
                _remove_dead_latest_temporaries(folder)
                for name in os.listdir(folder):
                    if name.startswith(".old-step-"):
                        shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
            _remove_abandoned_staging(folder)
            staging = _new_staging(folder, step)
            net.save_parameters(os.path.join(staging, "params.npz"))
            return staging

        where = _agreed(comm, "checkpoint.save", stage)[0]
        assert where is not None

        def write_own() -> dict[str, Any]:
            names = [f"meta-rank{rank}.json"]
            meta = {"format": _FORMAT, "version": _VERSION, "step": step, "world_size": size, "rank": rank,
                    "trainer": trainer is not None, "random": _random.get_state()}
            if trainer is not None:
                names.insert(0, f"trainer-rank{rank}.states")
                # Sharded optimizer states over several processes: every rank gathers the same whole states;
                # rank 0's file keeps them, the others' their own residuals and counts (and say where the states are).
                shared = trainer._states_shared_by_processes()
                if shared and rank != 0:
                    trainer._save_states(os.path.join(where, names[0]), with_states=False)
                else:
                    trainer.save_states(os.path.join(where, names[0]))
                if shared:
                    meta["trainer_states_in"] = _SHARED_STATES
            atomic_write(os.path.join(where, names[-1]), lambda f: f.write(json.dumps(meta).encode()))
            if rank == 0:
                names.insert(0, "params.npz")
            return {name: list(file_sha256(os.path.join(where, name))) for name in names}

        files: dict[str, Any] = {}
        for own in _agreed(comm, "checkpoint.save", write_own):
            files.update(own)

        def publish() -> None:
            if rank == 0:
                _publish(folder, where, final, step, keep, files, size, trainer is not None)

        _agreed(comm, "checkpoint.save", publish)
    except BaseException:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def _check_trainer_of(net: Any, trainer: Any, what: str) -> None:
    """Every parameter ``trainer`` updates must be one of ``net``'s (the same objects; a subset is fine).

    Raises:
        ValueError: naming the Trainer's parameters that are not ``net``'s (their names and shapes).
    """
    if trainer is None:
        return
    mine = {id(p) for p in net.collect_params().values()}
    foreign = [p for p in trainer._params if id(p) not in mine]
    if foreign:
        shown = ", ".join(f"{_messages.quote(p.label)} {tuple(p.shape) if p.shape is not None else '(unknown)'}"
                          for p in foreign[:5])
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        raise ValueError(f"{what}: the Trainer updates parameters that are not net's: {shown}{more}; pass the "
                         "Trainer created over net.collect_params() (or over some of them)")


def _new_staging(folder: str, step: int) -> str:
    """A staging folder of this writer's own (umask permissions), with its writer file."""
    token = secrets.token_hex(8)
    staging = os.path.join(folder, f".tmp-{_step_name(step)}-{token}")
    os.mkdir(staging)  # 0777 & ~umask
    writer = {"host": socket.gethostname(), "pid": os.getpid(), "token": token, "started": time.time()}
    atomic_write(os.path.join(staging, _WRITER), lambda f: f.write(json.dumps(writer).encode()))
    return staging


def _publish(folder: str, staging: str, final: str, step: int, keep: int | None, files: dict[str, Any],
             size: int, with_trainer: bool) -> None:
    """Check the staging folder is complete and ours, write its manifest, rename it, point ``latest`` at it."""
    expected = {"params.npz", *(f"meta-rank{r}.json" for r in range(size))}
    if with_trainer:
        expected.update(f"trainer-rank{r}.states" for r in range(size))
    if set(files) != expected:
        raise RuntimeError(f"checkpoint {staging!r} is incomplete: missing {sorted(expected - set(files))}")
    listed = {name: {"sha256": digest, "bytes": nbytes} for name, (digest, nbytes) in sorted(files.items())}
    manifest = {"format": _MANIFEST_FORMAT, "step": step, "files": listed, "self_sha256": _self_digest(step, listed)}
    atomic_write(os.path.join(staging, _MANIFEST), lambda f: f.write(json.dumps(manifest, indent=1).encode()))
    with _lock(folder):
        _check_ours(staging)
        for name, (_, nbytes) in files.items():  # verify before the rename: publish nothing that lacks a file
            path = os.path.join(staging, name)
            if not os.path.isfile(path) or os.path.getsize(path) != nbytes:
                raise RuntimeError(f"checkpoint file {path!r} vanished or changed before publication; nothing "
                                   "was published (is another process deleting files in this folder?)")
        os.unlink(os.path.join(staging, _WRITER))
        fsync_dir(staging)  # every file in it was written by atomic_write (fsynced)
        aside = None
        if os.path.exists(final):  # the same step saved again: set the old one aside until the new one is in
            aside = os.path.join(folder, f".old-{_step_name(step)}")
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(final, aside)
        os.replace(staging, final)
        fsync_dir(folder)
        atomic_write(os.path.join(folder, _LATEST), lambda f: f.write(_step_name(step).encode()))
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
        if keep is not None:
            for old in _steps(folder)[:-keep]:
                if old != step:
                    shutil.rmtree(os.path.join(folder, _step_name(old)), ignore_errors=True)


def _check_ours(staging: str) -> None:
    try:
        with open(os.path.join(staging, _WRITER), "rb") as f:
            writer = json.loads(f.read())
        ours = writer.get("pid") == os.getpid() and writer.get("host") == socket.gethostname()
    except (OSError, ValueError, AttributeError):
        ours = False
    if not ours:
        raise RuntimeError(f"the staging folder {staging!r} of this save was removed or taken over by another "
                           "process; nothing was published")


@contextlib.contextmanager
def _lock(folder: str) -> Iterator[None]:
    """An exclusive ``flock`` on the checkpoint folder itself (released when the holder dies)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _remove_abandoned_staging(folder: str) -> None:
    """Remove staging folders whose writer is dead; never a live writer's."""
    now = time.time()
    for name in os.listdir(folder):
        if not _STAGING.match(name):
            continue
        path = os.path.join(folder, name)
        try:
            with open(os.path.join(path, _WRITER), "rb") as f:
                writer = json.loads(f.read())
            host, pid = writer["host"], writer["pid"]
            age = now - os.path.getmtime(os.path.join(path, _WRITER))
        except (OSError, ValueError, KeyError, TypeError):
            try:
                age = now - os.path.getmtime(path)
            except OSError:
                continue
            if age > _UNMARKED_AGE or "-" not in name[len(".tmp-step-"):]:  # unmarked: an old mxlite's, or stale
                shutil.rmtree(path, ignore_errors=True)
            continue
        if abandoned(host == socket.gethostname(), pid, age):
            shutil.rmtree(path, ignore_errors=True)


# -- the latest checkpoint ---------------------------------------------------------------------------
def _read_latest(directory: str) -> tuple[int | None, str | None]:
    """(step ``latest`` names, None) — or (None, why it is unusable); (None, None) when there is none."""
    path = os.path.join(directory, _LATEST)
    try:
        with open(path, "rb") as f:
            raw = f.read(256)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot be read ({exc})"
    try:
        text = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        return None, f"is damaged (holds {raw[:40]!r}, not a step name)"
    match = _STEP_DIR.match(text)
    if not match:
        return None, f"is damaged (holds {text[:40]!r}, not a step name such as 'step-00000100')"
    return int(match.group(1)), None


def latest_step(directory: str | os.PathLike) -> int | None:
    """The step of the newest complete checkpoint in ``directory`` (None when there is none).

    Raises:
        ValueError: the ``latest`` file is damaged (the message lists the complete checkpoints).
    """
    directory = os.fspath(directory)
    step, problem = _read_latest(directory)
    if problem is not None:
        raise ValueError(f"checkpoint file {os.path.join(directory, _LATEST)!r} {problem}; "
                         f"{_complete_note(directory)}")
    return step


def _complete_steps(directory: str) -> list[int]:
    """Steps whose folder holds a manifest and every file it lists."""
    found = []
    for step in _steps(directory) if os.path.isdir(directory) else []:
        try:
            _read_manifest(os.path.join(directory, _step_name(step)), step)
            found.append(step)
        except (OSError, ValueError):
            continue
    return found


def _complete_note(directory: str) -> str:
    steps = _complete_steps(directory)
    if not steps:
        return "no complete checkpoint was found there"
    return (f"complete checkpoints there: steps {steps}; pass step=<one of them> to load one (the next save "
            "replaces 'latest')")


# -- loading ----------------------------------------------------------------------------------
def load(directory: str | os.PathLike, net: Any, trainer: Any = None, step: int | None = None) -> int:
    """Restore the checkpoint at ``step`` (default: the latest) into ``net`` (and ``trainer``); returns the step.

    Everything is checked before anything changes (see the module docstring); with several
    processes, nothing changes on any rank unless every rank's checks passed.

    Raises:
        FileNotFoundError: no checkpoint in ``directory`` (or none at ``step``), or ``latest``
            names a missing one (the message lists the complete checkpoints).
        ValueError: a damaged or foreign checkpoint (a file whose digest differs from the
            manifest, a damaged ``latest``), another number of processes (both numbers named), a
            Trainer updating parameters that are not ``net``'s (named, before any file is read), a
            trainer given at load but not at save (or the reverse), or files that do not fit the
            model or trainer; the message names the file. With several processes, every rank raises the error of
            the first failing rank, naming it.
    """
    comm = _world()
    rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
    plan: dict[str, Any] = {}

    def check() -> int:
        if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
            raise ValueError(f"checkpoint step must be a non-negative int or None, got {step!r}")
        _check_trainer_of(net, trainer, "checkpoint.load")  # before any file is read
        folder_root = os.fspath(directory)
        if os.path.isdir(folder_root):
            with _lock(folder_root):
                _recover(folder_root)
                _remove_dead_latest_temporaries(folder_root)
        wanted = step
        if wanted is None:
            wanted, problem = _read_latest(folder_root)
            latest = os.path.join(folder_root, _LATEST)
            if problem is not None:
                raise ValueError(f"checkpoint file {latest!r} {problem}; {_complete_note(folder_root)}")
            if wanted is None:
                raise FileNotFoundError(f"no checkpoint in {folder_root!r} (no {_LATEST!r} file)")
            if not os.path.isdir(os.path.join(folder_root, _step_name(wanted))):
                raise FileNotFoundError(f"checkpoint file {latest!r} names {_step_name(wanted)}, which is missing; "
                                        f"{_complete_note(folder_root)}")
        folder = os.path.join(folder_root, _step_name(wanted))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"no checkpoint of step {wanted} in {folder_root!r}; "
                                    f"{_complete_note(folder_root)}")
        manifest = _read_manifest(folder, wanted)
        saved_size = _saved_world_size(folder, manifest)
        if saved_size != size:  # before any per-rank file: the other files' errors would only follow from it
            raise ValueError(f"checkpoint {folder!r} was saved by {saved_size} process{'es' if saved_size != 1 else ''}"
                             f" and this job has {size}: load it with {saved_size} (each rank restores its own "
                             "trainer states and random streams)")
        meta_path = os.path.join(folder, f"meta-rank{rank}.json")
        meta = _read_meta(_read_listed(folder, manifest, f"meta-rank{rank}.json"), meta_path, wanted, size)
        try:
            _check_random_state(meta["random"])
        except ValueError as exc:
            raise ValueError(f"checkpoint {meta_path!r}: {exc}") from exc
        if meta["trainer"] != (trainer is not None):
            raise ValueError(f"checkpoint {folder!r} was saved {'with' if meta['trainer'] else 'without'} a trainer, "
                             f"and load was given {'one' if trainer is not None else 'none'}")
        # Each file is read once: its readers parse the bytes that were hashed (the paths only name it).
        if trainer is not None:
            name = f"trainer-rank{rank}.states"
            source = meta.get("trainer_states_in")
            if source not in (None, _SHARED_STATES):
                raise ValueError(f"checkpoint file {meta_path!r} names {source!r} as its trainer states; expected "
                                 f"{_SHARED_STATES!r}")
            shared = None if source is None or source == name else (
                os.path.join(folder, source), _read_listed(folder, manifest, source))
            plan["trainer"] = trainer._read_states(os.path.join(folder, name),
                                                   data=_read_listed(folder, manifest, name), states_from=shared)
        plan["params"] = net._plan_load(os.path.join(folder, "params.npz"),  # checks, changes nothing
                                        data=_read_listed(folder, manifest, "params.npz"))
        plan["random"] = meta["random"]
        return wanted

    steps = _agreed(comm, "checkpoint.load", check)
    if len(set(steps)) > 1:
        raise ValueError("ranks disagree on the checkpoint to load: " + ", ".join(
            f"step {s} on rank {r}" for r, s in enumerate(steps)) + "; pass the same step= on every rank")
    net._apply_load(plan["params"])
    if trainer is not None:
        trainer._apply_states(plan["trainer"])
    _random.set_state(plan["random"])
    return steps[0]


def _read_manifest(folder: str, step: int) -> dict[str, Any]:
    """The checked manifest of a checkpoint folder: {file name: {"sha256", "bytes"}}."""
    path = os.path.join(folder, _MANIFEST)
    try:
        with open(path, "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        raise ValueError(f"checkpoint {folder!r} has no {_MANIFEST} (incomplete, or written by an mxlite before "
                         "checkpoint format 2)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"checkpoint file {path!r} is damaged: not JSON ({exc})") from exc
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if (not isinstance(manifest, dict) or manifest.get("format") != _MANIFEST_FORMAT or manifest.get("step") != step
            or not isinstance(files, dict) or not all(
                isinstance(v, dict) and isinstance(v.get("sha256"), str) and isinstance(v.get("bytes"), int)
                for v in files.values())):
        raise ValueError(f"checkpoint file {path!r} is damaged: not an {_MANIFEST_FORMAT} of step {step}")
    if manifest.get("self_sha256") != _self_digest(step, files):
        raise ValueError(f"checkpoint file {path!r} is damaged: its own SHA-256 does not match its content")
    for name, entry in files.items():
        if os.path.basename(name) != name or not os.path.isfile(os.path.join(folder, name)):
            raise ValueError(f"checkpoint {folder!r} is incomplete: {name!r}, listed in its manifest, is missing")
        if os.path.getsize(os.path.join(folder, name)) != entry["bytes"]:
            raise ValueError(f"checkpoint file {os.path.join(folder, name)!r} is damaged (or its {_MANIFEST} is): "
                             f"{os.path.getsize(os.path.join(folder, name))} bytes, {_MANIFEST} says {entry['bytes']}")
    return files


def _self_digest(step: int, files: dict[str, Any]) -> str:
    """The manifest's digest of its own entries (a flipped bit in the manifest is caught too)."""
    text = json.dumps({"step": step, "files": files}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _saved_world_size(folder: str, files: dict[str, Any]) -> int:
    """The number of processes that saved a checkpoint: how many ``meta-rank<r>.json`` its manifest lists."""
    ranks = sorted(int(m.group(1)) for name in files if (m := _META_FILE.match(name)))
    if not ranks or ranks != list(range(len(ranks))):
        raise ValueError(f"checkpoint file {os.path.join(folder, _MANIFEST)!r} is damaged: it lists the metadata of "
                         f"ranks {ranks}, not of ranks 0 to N-1")
    return len(ranks)


def _check_listed(folder: str, files: dict[str, Any], name: str) -> str:
    """The path of ``name`` in ``folder``; FileNotFoundError when the manifest does not list it."""
    path = os.path.join(folder, name)
    if name not in files:
        raise FileNotFoundError(f"checkpoint file {path!r} is not listed in its {_MANIFEST}, though its metadata "
                                "asks for it (a damaged or hand-made checkpoint?)")
    return path


def _check_digest(path: str, files: dict[str, Any], name: str, digest: str) -> None:
    if digest != files[name]["sha256"]:
        raise ValueError(f"checkpoint file {path!r} is damaged (or its {_MANIFEST} is): its SHA-256 is {digest}, "
                         f"{_MANIFEST} says {files[name]['sha256']}")


def _read_listed(folder: str, files: dict[str, Any], name: str) -> bytes:
    """The bytes of a file the manifest lists, read once and checked against its size and SHA-256.

    The caller parses these same bytes, so what is parsed is what was checked.

    Raises:
        FileNotFoundError: the manifest does not list ``name``, or the file vanished since.
        ValueError: its size or SHA-256 differs from the manifest's (the message names the file).
    """
    path = _check_listed(folder, files, name)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"checkpoint file {path!r}, listed in its {_MANIFEST}, is missing (removed while "
                                "loading?)") from None
    if len(data) != files[name]["bytes"]:
        raise ValueError(f"checkpoint file {path!r} is damaged (or its {_MANIFEST} is): {len(data)} bytes, "
                         f"{_MANIFEST} says {files[name]['bytes']}")
    _check_digest(path, files, name, hashlib.sha256(data).hexdigest())
    return data


def _read_meta(data: bytes, path: str, step: int, size: int) -> dict[str, Any]:
    """Parse and check a ``meta-rank<r>.json`` from its (already verified) bytes; ``path`` names it in errors."""
    try:
        meta = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"checkpoint file {path!r} is not JSON ({exc})") from exc
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        raise ValueError(f"checkpoint file {path!r} is not an {_FORMAT} metadata file")
    if meta.get("version") != _VERSION:
        raise ValueError(f"checkpoint file {path!r} has format version {meta.get('version')!r}; "
                         f"this mxlite reads version {_VERSION}")
    if meta.get("step") != step:
        raise ValueError(f"checkpoint file {path!r} is for step {meta.get('step')!r}, not {step}")
    if meta.get("world_size") != size:
        raise ValueError(f"checkpoint file {path!r} was saved by {meta.get('world_size')!r} processes; "
                         f"this job has {size}")
    if not isinstance(meta.get("trainer"), bool) or "random" not in meta:
        raise ValueError(f"checkpoint file {path!r} lacks its 'trainer' or 'random' entry")
    return meta


def _check_random_state(state: Any) -> None:
    _random.parse_state(state)  # ValueError when malformed; changes nothing


def _recover(directory: str) -> None:
    """Undo a crash between the two renames of a re-save: put the set-aside checkpoint back (under the lock)."""
    step, _ = _read_latest(directory)
    if step is None:
        return
    final = os.path.join(directory, _step_name(step))
    aside = os.path.join(directory, f".old-{_step_name(step)}")
    if not os.path.isdir(final) and os.path.isdir(aside):
        os.replace(aside, final)


def _remove_dead_latest_temporaries(directory: str) -> None:
    """Remove the temporaries of ``latest`` (``.tmp-latest.*``) a killed writer left (under the lock).

    ``latest`` is written only by :func:`_publish`, under the folder's lock, through ``atomic_write``,
    whose temporary is ``.tmp-latest.<random>``: whoever holds the lock knows no live writer owns one.
    A folder this process may not write in keeps them (a load must not fail for that).
    """
    prefix = f".tmp-{_LATEST}."
    for name in os.listdir(directory):
        if name.startswith(prefix):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))


def _steps(directory: str) -> list[int]:
    found = []
    for name in os.listdir(directory):
        match = _STEP_DIR.match(name)
        if match and os.path.isdir(os.path.join(directory, name)):
            found.append(int(match.group(1)))
    return sorted(found)
