"""Saving and loading a Trainer's optimizer states: the half of the Trainer that deals with state files.

:class:`TrainerStates` is a base class of :class:`mxlite.gluon.Trainer` holding ``save_states`` and
``load_states`` and the checks behind them; it reads and writes the layout of
:mod:`mxlite.optimizer.states_archive`, the one the KVStore uses. Loading is two-phase so that
``mx.checkpoint.load`` can verify everything before anything changes: :meth:`TrainerStates._read_states`
parses and checks a file (or bytes already read), :meth:`TrainerStates._apply_states` installs the result
and cannot fail.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from ..amp import LossScaler
from ..comm.faults import collective_timeout
from ..comm.mpi import MpiCommunicator
from ..device import cpu
from ..device.copy import as_host
from ..formats.archive import atomic_write
from ..optimizer import states_archive
from ..optimizer._arena import fused_rule
from ..optimizer._fused import to_structure
from ..optimizer.optimizer import MultiPrecisionState
from .parameter import Parameter

__all__ = ["TrainerStates", "copy_state", "SAVE_WAIT"]

# Seconds a sharded save_states waits for the other processes to call it too, when MXLITE_COLLECTIVE_TIMEOUT is unset
# (set, half of it: the others' step collectives wait that long, so this error, which says why, comes first).
SAVE_WAIT = 60.0


class TrainerStates:
    """``save_states``/``load_states`` of the Trainer (a base class: the attributes are the Trainer's)."""

    _gathered: dict[int, Any] = {}  # sharded states gathered for the save in progress (index -> whole state)
    _host_mpi: Any = None  # MPI over the processes, for gathering sharded states on the host
    _channel: Any = None  # AgreementChannel of the Trainer's processes (several processes only)
    _updates_done = 0  # updates applied so far (the Trainer counts them)

    # -- saving and loading optimizer states ----------------------------------------------
    def save_states(self, fname: str | os.PathLike) -> None:
        """Save the optimizer, every parameter's optimizer state and the compression residuals.

        The file is an ``.npz`` archive in the :mod:`mxlite.optimizer.states_archive` layout, the
        KVStore's (never pickled): the optimizer's hyperparameters, per-device update counts and
        scheduler position; each parameter's state (mirror 0's: every mirror holds the same state);
        each mirror's compression residual; and the parameters' names and shapes and the compression
        parameters, checked on load. With
        ``update_on_kvstore`` the store writes it (:meth:`KVStore.save_optimizer_states`). It is
        written to a temporary file, fsynced and renamed, so a crash during the save leaves the
        previous file intact.

        Sharded states (``shard_optimizer_states``) are gathered first: each parameter's whole state,
        from the slices of every device and process, in the same per-parameter layout, so the file
        loads onto any number of devices and processes, sharded or not. This is a collective: with
        several processes every rank must call it. It costs one host copy of every state on every
        rank (12 bytes per parameter for Adam with master weights) and, across processes, an
        all-gather of the states over MPI ((P - 1)/P of them per rank); the devices allocate nothing.

        Raises:
            RuntimeError: sharded states over several processes, and some ranks did not call ``save_states``
                within :data:`SAVE_WAIT` seconds (half of ``MXLITE_COLLECTIVE_TIMEOUT`` when set) of this one
                (``if rank == 0: trainer.save_states(f)``): names them; the job cannot go on (they wait
                elsewhere), and the uncaught error ends it.
            ValueError: the ranks called it after different numbers of updates, or with other hyper-parameters at
                their last update (names them; sharded states over several processes).
        """
        self._save_states(fname, with_states=True)

    def _save_states(self, fname: str | os.PathLike, with_states: bool) -> None:
        """:meth:`save_states`; ``with_states`` False writes no parameter state (``mx.checkpoint`` then keeps the
        gathered states of sharded training once, in rank 0's file): the file says so and loads only with them."""
        self._init_kvstore()
        if self._update_on_kvstore:
            self._kvstore.save_optimizer_states(fname, dump_optimizer=True)
            return
        if self._states_shared_by_processes():
            self._meet_to_save()
            self._confirm_hyperparameters("Trainer.save_states")
        self._gathered = self._gather_all_sharded()
        states: dict[Any, Any] = {}
        for index, param in enumerate(self._params) if with_states else ():
            state = self._saved_state(index, param)
            if state is not None:
                states[index] = state
        fields = {"trainer_params": [[p.label, list(p.shape) if p.shape else None] for p in self._params],
                  "compression": self._codec.params if self._codec is not None else None,
                  "loss_scaler": self._amp_loss_scaler.state_dict() if self._amp_loss_scaler is not None else None,
                  "partial_turn": self._partial_turn}
        if not with_states:
            fields["states_elsewhere"] = True
        self._gathered = {}
        data = states_archive.pack(states, self._optimizer.state_dict(), self._residuals(), states_archive.TRAINER,
                                   fields)
        atomic_write(fname, lambda f: f.write(data))

    def load_states(self, fname: str | os.PathLike) -> None:
        """Restore a :meth:`save_states` file; continuing then matches the saved run bit for bit.

        Everything is checked before anything changes: the file must be a state file of a
        Trainer with the same parameters (names and shapes), the same optimizer and scheduler
        classes and the same compression. States move to each mirror at its next update;
        parameters absent from the file start from fresh states.

        Raises:
            FileNotFoundError: no such file.
            ValueError: a damaged or foreign file, or one that does not fit this Trainer
                (the message names the file and what differs).
        """
        self._apply_states(self._read_states(fname))

    def _read_states(self, fname: str | os.PathLike, *, data: bytes | None = None,
                     states_from: tuple[str, bytes] | None = None) -> tuple[str, Any]:
        """Read and check a :meth:`save_states` file without changing anything (ValueError names the file).

        Args:
            fname: the file; only named in errors when ``data`` is given.
            data: the file's bytes, already read (and verified) by the caller (``mx.checkpoint.load``):
                these are parsed, so what :meth:`_apply_states` installs is what the caller checked.
                None reads ``fname`` (once).
            states_from: ``(name, bytes)`` of another rank's file holding the parameter states, for a file
                written without them (``mx.checkpoint`` of sharded training keeps them in rank 0's file
                only); its states are checked as the file's own would be.

        Returns what :meth:`_apply_states` takes: everything parsed and checked, so applying reads
        no file (also with ``update_on_kvstore``, where the store's own parse is kept).

        Raises:
            FileNotFoundError: no such file (``data`` None).
            ValueError: a damaged or foreign file, or one that does not fit this Trainer.
        """
        self._init_kvstore()
        fname = os.fspath(fname)
        if self._update_on_kvstore:
            parsed = self._kvstore.read_optimizer_states(data, fname)
            try:  # the store checks shapes only against values it holds: none before the first step
                self._check_store_states(parsed)
            except ValueError as exc:
                raise ValueError(f"cannot load trainer states from {fname!r}: {exc}") from exc
            return ("kvstore", parsed)
        if data is None:
            with open(fname, "rb") as f:
                data = f.read()
        try:
            states, optimizer_state, residuals, extra = states_archive.unpack(data, states_archive.TRAINER,
                                                                              self._states_limit())
            if optimizer_state is None or "trainer_params" not in extra:
                raise ValueError("it is not a Trainer.save_states file (no optimizer or parameter section)")
            if extra.get("states_elsewhere"):
                if states_from is None:
                    raise ValueError("it holds no parameter states (a checkpoint of sharded training keeps them in "
                                     "trainer-rank0.states): load the checkpoint with mx.checkpoint.load")
                states, _, _, source = states_archive.unpack(states_from[1], states_archive.TRAINER)
                if source.get("trainer_params") != extra["trainer_params"] or source.get("states_elsewhere"):
                    raise ValueError(f"{states_from[0]!r}, which should hold its parameter states, was saved for "
                                     "other parameters (or holds none)")
            self._optimizer.check_state_dict(optimizer_state)  # the optimizer first: its class shapes the states
            self._check_residuals(residuals, extra.get("compression"))
            self._check_saved_params(extra["trainer_params"], states)
            self._check_saved_counts(optimizer_state)  # after the parameters: other parameters say more
            scaler_state = extra.get("loss_scaler")
            if scaler_state is not None and self._amp_loss_scaler is not None:
                LossScaler().load_state_dict(scaler_state)  # validates
        except ValueError as exc:
            raise ValueError(f"cannot load trainer states from {fname!r}: {exc}") from exc
        turn = extra.get("partial_turn", 0)
        if not isinstance(turn, int) or turn < 0:
            raise ValueError(f"cannot load trainer states from {fname!r}: bad partial_turn {turn!r}")
        return "trainer", (states, optimizer_state, residuals, scaler_state, turn)

    def _apply_states(self, parsed: tuple[str, Any]) -> None:
        """Apply what :meth:`_read_states` read and checked (cannot fail; reads no file)."""
        kind, content = parsed
        if kind == "kvstore":  # the store's own parse of the same bytes, installed as load_optimizer_states does
            self._kvstore.apply_optimizer_states(content)
            return
        states, optimizer_state, residuals, scaler_state, self._partial_turn = content
        self._optimizer.load_state_dict(optimizer_state)
        if scaler_state is not None and self._amp_loss_scaler is not None:
            self._amp_loss_scaler.load_state_dict(scaler_state)
        self._states.clear()
        self._arena_updaters.clear()
        self._loaded, self._applied = states, set()
        self._loaded_residuals = residuals
        self._restore_residuals()

    def _residuals(self) -> dict[tuple[int, int], np.ndarray]:
        """Host copies of every (parameter index, mirror) compression residual, shaped like the parameter."""
        out = dict(self._loaded_residuals)
        for _, sync in self._syncs.values():
            if sync is None or sync.codec is None or not sync.codec.needs_residual:
                continue
            for param in sync.params:
                index = self._position[id(param)]
                for mirror in range(len(param.list_device())):
                    if (index, mirror) in self._loaded_residuals:
                        continue  # restored at the sync's first plan, not yet applied
                    flat = sync.residual(param, mirror)[:int(np.prod(param.shape))]
                    out[(index, mirror)] = np.array(as_host(flat)).reshape(param.shape)
        return out

    def _check_residuals(self, residuals: dict[tuple[Any, int], np.ndarray], compression: Any) -> None:
        """Residuals read from a file against this Trainer: its parameters, their shapes, finite values, its codec."""
        mine = self._codec.params if self._codec is not None else None
        for (index, mirror), value in residuals.items():
            key = f"residual of parameter index {index!r}, mirror {mirror}"
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self._params) \
                    or not isinstance(value, np.ndarray):
                raise ValueError(f"the {key} is not a residual of one of this Trainer's parameters")
            if value.dtype.kind != "f" or not np.all(np.isfinite(value)):
                raise ValueError(f"the {key} holds {value.dtype.name} values, or inf or NaN; residuals are "
                                 "finite floating-point arrays")
            param = self._params[index]
            shape = param.shape
            if param._shape_known() and value.shape != tuple(shape):
                raise ValueError(f"the residual of parameter {self._params[index].label!r} has shape "
                                 f"{value.shape}, the parameter has shape {tuple(shape)}")
        if compression != mine:
            raise ValueError(f"it was saved with compression {compression}, this Trainer uses {mine}")

    def _restore_residuals(self) -> None:
        """Copy loaded residuals into the syncs that exist now (later syncs restore theirs when built)."""
        for _, sync in self._syncs.values():
            if sync is None or sync.codec is None or not sync.codec.needs_residual:
                continue
            for param in sync.params:
                index = self._position[id(param)]
                for mirror, device in enumerate(param.list_device()):
                    value = self._loaded_residuals.pop((index, mirror), None)
                    if value is not None:
                        flat = sync.residual(param, mirror)
                        with device.use():
                            flat[:value.size] = device.xp.asarray(value.reshape(-1), dtype=np.float32)

    def _saved_state(self, index: int, param: Parameter) -> Any:
        """Mirror 0's state of parameter ``index`` (host arrays), or None when it has none yet."""
        if index in self._loaded and (index, 0) not in self._applied:
            return self._loaded[index]
        if (index, 0) in self._states:
            return self._states[(index, 0)]
        if index in self._gathered:
            return self._gathered[index]
        if not param.is_initialized or param.grad_req == "null":
            return None
        arena, slot = param.arena_slots()[0]
        updater = self._arena_updaters.get((id(arena), 0))
        if updater is None or updater.shard is not None:  # a sharded one's were gathered (or it holds none)
            return None
        return updater.get_state(slot)

    # -- sharded states (shard_optimizer_states) ------------------------------------------------------
    def _gather_all_sharded(self) -> dict[int, Any]:
        """Whole per-parameter states of every sharded arena (a collective: every rank, same order)."""
        gathered: dict[int, Any] = {}
        for _, sync in self._syncs.values():
            for layout in sync.layouts if sync is not None else []:
                updaters = [self._arena_updaters.get((id(a), m)) for m, a in enumerate(layout.arenas)]
                if all(u is None for u in updaters):
                    continue  # never updated on any device: no state yet
                if any(u is None for u in updaters):
                    raise RuntimeError("sharded optimizer states: some device mirrors of an arena have no state "
                                       "while others do; update every mirror together")
                gathered.update(self._gather_sharded(sync.comm, updaters))
        return gathered

    def _gather_sharded(self, comm: Any, updaters: list[Any]) -> dict[int, Any]:
        """``{optimizer index: whole state}`` of the parameters one sharded arena holds state for.

        ``updaters``: the arena's sharded updaters of this process's mirrors, in device order; their
        slices are consecutive, and so are the processes' (rank order). Each state buffer is copied to
        the host, joined over the local mirrors and all-gathered over the processes (MPI, on the host),
        then cut into parameters at the offsets the states were laid out for.
        """
        parts = [u.shard_states() for u in updaters]
        host = self._host_comm(comm)
        local = np.array([updaters[0].shard[0], updaters[-1].shard[1]], np.int64)
        start = int(local[0]) if host is None else int(host.allgather(local)[0][0])
        full = {}
        for name in parts[0]:
            mine = np.concatenate([p[name] for p in parts])
            full[name] = mine if host is None else np.concatenate(host.allgather(mine))
        first = updaters[0]
        gathered = {}
        for index, param in enumerate(self._params):
            offset = first.offset(param)
            if id(param) not in first.holding or offset is None:
                continue
            at, size = offset - start, int(np.prod(param.shape, dtype=np.int64))
            arrays = {name: full[name][at:at + size].reshape(param.shape).copy() for name in full}
            master = arrays.pop("master", None)
            gathered[index] = to_structure(first.state_names, arrays, master)
        return gathered

    def _meet_to_save(self) -> None:
        """Before gathering sharded states: every rank calls save_states, after the same update (see
        :meth:`save_states`); a rank that does not come is named instead of waited for forever."""
        timeout = collective_timeout()
        self._channel.meet(
            "Trainer.save_states", [("after update", self._updates_done)],
            SAVE_WAIT if timeout is None else timeout / 2,
            "with shard_optimizer_states each process holds a part of the optimizer states, so every rank must call "
            "save_states (each then writes the same whole states), not only rank 0 (`if rank == 0:` around it "
            "leaves it waiting for the others); or use mx.checkpoint.save, which every rank calls")

    def _confirm_hyperparameters(self, by: str) -> None:
        """At ``by``, a collective call every rank makes (``checkpoint.save``, a sharded ``save_states``): the
        hyper-parameters of every rank's last update are compared at once (one small message to each rank), so a
        change on one rank at the last step is named before the job ends; nothing with one process.

        Raises:
            ValueError: on every rank, naming the hyper-parameter, its values and the ranks (or the update counts).
        """
        if self._channel is None:
            return
        timeout = collective_timeout()
        self._channel.confirm("the optimizer's hyper-parameters", self._updates_done, by,
                              SAVE_WAIT if timeout is None else timeout / 2,
                              f"every rank must call {by} after the same step")

    def _states_shared_by_processes(self) -> bool:
        """Whether sharded states span several processes, so that every rank gathers (and saves) the same states."""
        return any(sync is not None and sync.layouts and comm.size > 1 for comm, sync in self._syncs.values())

    def _host_comm(self, comm: Any) -> Any:
        """A communicator over this job's processes for host arrays (MPI), or None with one process."""
        if comm.size == 1:
            return None
        if isinstance(comm, MpiCommunicator):
            return comm
        if self._host_mpi is None:
            self._host_mpi = MpiCommunicator([cpu(0)])
        return self._host_mpi

    def _check_store_states(self, parsed: tuple[Any, Any, Any]) -> None:
        """States and residuals of a store file (``update_on_kvstore``) against this Trainer's parameters.

        The store's keys are the parameter indices; every state and residual must have its
        parameter's shape (when known).

        Raises:
            ValueError: a key that is not a parameter index, or an array of another shape.
        """
        states, _, residuals = parsed
        entries = [(key, states_archive.state_arrays(state), "state") for key, state in states.items()]
        entries += [(key, [value], f"residual (position {pos})") for (key, pos), value in residuals.items()]
        for key, leaves, what in entries:
            if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < len(self._params):
                raise ValueError(f"{what} key {key!r} is not a parameter index of this Trainer "
                                 f"({len(self._params)} parameters)")
            param = self._params[key]
            if not param._shape_known():
                continue
            for leaf in leaves:
                if tuple(leaf.shape) != tuple(param.shape):
                    raise ValueError(f"the {what} of parameter {param.label!r} has shape {tuple(leaf.shape)}, "
                                     f"the parameter has shape {tuple(param.shape)}")

    def _states_limit(self) -> int | None:
        """The most bytes a states file of this Trainer can hold in arrays (None: a shape is still unknown).

        Per parameter at most 8 state arrays (master weights included) of its size in float32 or its own
        wider dtype, and one compression residual per device mirror; plus 1 MiB. A file declaring more
        is refused from its headers, before its arrays are inflated.
        """
        if not all(p._shape_known() for p in self._params):
            return None
        mirrors = max((len(p.list_device()) for p in self._params if p.is_initialized), default=1)
        size = sum(int(np.prod(p.shape)) * max(4, np.dtype(p.dtype).itemsize) for p in self._params)
        return size * (8 + mirrors) + (1 << 20)

    def _check_saved_counts(self, optimizer_state: dict[str, Any]) -> None:
        """The update counts of a (checked) optimizer state against this Trainer: mirrors 0..k-1, its indices.

        A Trainer numbers its device mirrors 0, 1, ... and its parameters 0..n-1; a file saved on k
        devices holds the mirrors 0..k-1 (resuming on other devices is allowed: new mirrors start
        from mirror 0's counts). Counts for another mirror or index would restart (or skip) a bias
        correction or schedule on resume.

        Raises:
            ValueError: naming the mirrors or indices.
        """
        counts = {int(slot): [i for i, _ in table] for slot, table in optimizer_state["update_counts"]}
        if counts and sorted(counts) != list(range(len(counts))):
            raise ValueError(f"update counts are given for mirrors {sorted(counts)}; a Trainer's state file holds "
                             f"mirrors 0..k-1 (one per device it was saved on)")
        for slot, indices in counts.items():
            foreign = [i for i in indices if isinstance(i, bool) or not isinstance(i, int)
                       or not 0 <= i < len(self._params)]
            if foreign:
                raise ValueError(f"update counts of mirror {slot} are given for indices {foreign[:5]}, which are not "
                                 f"parameter indices of this Trainer (0..{len(self._params) - 1})")

    def _check_saved_params(self, saved: Any, states: dict[Any, Any]) -> None:
        names = [p.label for p in self._params]
        try:
            saved_names = [entry[0] for entry in saved]
            saved_shapes = [tuple(entry[1]) if entry[1] is not None else None for entry in saved]
        except (TypeError, IndexError) as exc:
            raise ValueError(f"malformed parameter section ({exc})") from exc
        if saved_names != names:
            missing = [n for n in names if n not in saved_names]
            unexpected = [n for n in saved_names if n not in names]
            raise ValueError(f"it was saved for other parameters: missing {missing}, unexpected {unexpected}"
                             + ("" if missing or unexpected else " (same names, another order)"))
        for param, saved_shape in zip(self._params, saved_shapes):
            if param._shape_known() and saved_shape is not None and saved_shape != tuple(param.shape):
                raise ValueError(f"parameter {param.label!r} has shape {saved_shape} in the file and "
                                 f"{tuple(param.shape)} in this Trainer")
        for index, state in states.items():
            if not isinstance(index, int) or not 0 <= index < len(self._params):
                raise ValueError(f"state index {index!r} is not a parameter index")
            param = self._params[index]
            shape = tuple(param.shape) if param._shape_known() else saved_shapes[index]
            for leaf in states_archive.state_arrays(state):
                if shape is not None and tuple(leaf.shape) != shape:
                    raise ValueError(f"the state of parameter {param.label!r} has shape {tuple(leaf.shape)}, "
                                     f"the parameter has shape {shape}")
                kind = np.dtype(leaf.dtype)
                if kind.kind != "f" and kind.name != "bfloat16":
                    raise ValueError(f"the state of parameter {param.label!r} holds {kind.name} values; optimizer "
                                     "states are floating-point arrays")
                if not np.all(np.isfinite(np.asarray(leaf, dtype=np.float32))):
                    raise ValueError(f"the state of parameter {param.label!r} holds inf or NaN")
            if shape is not None:
                template = self._template_state(index, param, shape)
                problem = _structure_difference(template, state)
                if problem:
                    raise ValueError(f"the state of parameter {param.label!r} does not have the structure "
                                     f"{type(self._optimizer).__name__} creates: {problem}")
                self._check_state_dtypes(param, template, state)

    def _check_state_dtypes(self, param: Parameter, template: Any, state: Any) -> None:
        """Each leaf of a loaded state must have the dtype this Trainer keeps there (ValueError naming both).

        The fused update keeps float32 states (and float32 master weights); the per-parameter path the
        dtypes ``create_state`` gives. float16 states where float32 are kept would lose precision silently.
        """
        fused = param.grad_stype == "default" and fused_rule(self._optimizer, param.dtype) is not None
        for leaf, kept in zip(states_archive.state_arrays(state), states_archive.state_arrays(template)):
            allowed = {np.dtype(kept.dtype).name} | ({"float32"} if fused else set())
            got = np.dtype(leaf.dtype).name
            if got not in allowed:
                raise ValueError(f"the state of parameter {param.label!r} holds {got} values; this Trainer keeps "
                                 f"{' or '.join(sorted(allowed))} states there")

    def _template_state(self, index: int, param: Parameter, shape: tuple[int, ...]) -> Any:
        """A fresh state of parameter ``index`` on the host (its structure is what a loaded one must have)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self._optimizer.create_state(index, np.zeros(shape, dtype=param.dtype))


def _structure_difference(template: Any, state: Any, where: str = "the state") -> str:
    """'' when ``state`` is shaped like ``template`` (tuples and lists alike), else what differs."""
    if isinstance(template, MultiPrecisionState) != isinstance(state, MultiPrecisionState):
        return f"{where} {'lacks' if isinstance(template, MultiPrecisionState) else 'has'} float32 master weights"
    if template is None or state is None:
        return "" if template is None and state is None else \
            f"{where} is {'empty' if state is None else type(state).__name__}, expected " \
            f"{'none' if template is None else type(template).__name__}"
    if isinstance(template, (tuple, list)):
        if not isinstance(state, (tuple, list)) or len(state) != len(template):
            return f"{where} should be {len(template)} arrays, got {type(state).__name__}"
        for i, (t, s) in enumerate(zip(template, state)):
            problem = _structure_difference(t, s, f"{where}[{i}]")
            if problem:
                return problem
        return ""
    if hasattr(template, "shape") != hasattr(state, "shape"):
        return f"{where} should be {'an array' if hasattr(template, 'shape') else repr(template)}, got {state!r}"
    return ""



def copy_state(state: Any, device: Any) -> Any:
    """A copy of a host state on ``device`` (each mirror gets its own arrays)."""
    if isinstance(state, MultiPrecisionState):
        return MultiPrecisionState(*(copy_state(s, device) for s in state))
    if isinstance(state, (tuple, list)):
        return type(state)(copy_state(s, device) for s in state)
    if hasattr(state, "shape"):
        with device.use():
            return device.xp.array(np.asarray(state))
    return state
