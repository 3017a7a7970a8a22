"""Trainer: applies an optimizer to a set of Parameters mirrored on several devices (Gluon's).

Purpose: after ``autograd.backward`` has filled every mirror's gradient, ``step(batch_size)``
sums each parameter's gradients over its mirrors, rescales by ``1 / batch_size`` and applies
the same update to every mirror, so mirrors stay identical.

Behaviour:

* ``step`` = ``allreduce_grads()`` + ``update(batch_size)``. ``allreduce_grads`` replaces
  every mirror's gradient by the sum over mirrors (the sum is computed once, in device order,
  and copied out, so all mirrors hold bit-identical sums); ``update`` runs the optimizer on
  each mirror with that mirror's own optimizer state.
* The optimizer's ``rescale_grad`` becomes ``scale / batch_size`` at each step, where
  ``scale`` is the ``rescale_grad`` given in ``optimizer_params`` (default 1). With several
  processes on a 'dist_*' store, unless ``update_on_kvstore=False`` is given, ``batch_size`` is the
  first step's (agreed by every rank at that step), as MXNet's store keeps its first factor: a later
  change warns with MXNet's message, and the ranks' weights never drift apart.
* A mirror whose gradient backward has not written since the last step is *stale*: ``step``
  raises naming the parameter and device, unless ``ignore_stale_grad=True`` (then stale
  parameters are skipped).
* Parameters of a fused rule (``mxlite/optimizer/_fused.py``'s registry: every built-in rule on
  float32/float16 weights) are updated by one fused update per (arena, device mirror), with
  states laid out like the arena; other rules, float64 weights and row-sparse gradients take
  the per-parameter path.
* ``save_states``/``load_states`` write and read the optimizer (hyperparameters, update counts,
  scheduler position), every parameter's state and the compression residuals in a safe
  ``.npz`` format; a run resumed from them continues bit for bit.
* ``shard_optimizer_states=True`` (ZeRO-1) keeps each optimizer state on one device only: every
  device of every process owns a slice of each arena, gets the gradient sum of that slice (a
  reduction of each bucket onto its owners, during backward as the all-reduce was), updates it, and
  an all-gather restores every mirror's weights. See docs/sharding.md.

* When every parameter is read by a block captured as CUDA graphs (``hybridize(static_alloc=True,
  static_shape=True)`` on GPUs), the fused update is captured too, one graph per GPU, and replayed; the
  per-parameter table (rates, schedule, update counts) is written to the device before each replay. With one
  GPU per process (NCCL under ``mpiexec``) the buckets' all-reduces join that graph, ahead of the update. What
  needs the host (``update_on_kvstore``, ``partial_sync``, compression, AMP, ``check_finite``, sharded
  states, a rule without fused kernels) keeps it eager with one warning per reason. See docs/graphs.md.
  With the all-reduces in the graph, the ranks capture together or not at all (:class:`StepGraphs` agrees):
  a rank whose step cannot replay (an uneven last batch) runs it eagerly while the others replay.

* Several processes agree on what their collectives and updates rely on: the parameters (shapes, dtypes,
  ``grad_req``, multipliers) and the settings (optimizer, hyper-parameters, sharding, buckets, ...) when the
  Trainer is created (one small all-gather; the same ValueError on every rank names the setting and the
  ranks), a rebuilt bucket plan when it is rebuilt, the hyper-parameters at every update by messages sent
  only when they change (:class:`mxlite.comm.agree.AgreementChannel`: no collective per step), and a sharded
  ``save_states`` called on one rank only, which raises naming the ranks that did not come.

The kvstore (Gluon's rules, see :meth:`Trainer._init_kvstore`): a store is used when there are
several devices or a 'dist_*' type. By default (mxlite) the store only sums gradients, through
zero-copy buckets (:mod:`mxlite.comm.buckets`), and every mirror applies the update itself with
one fused launch per arena; with ``update_on_kvstore=True`` the store applies the optimizer to
its own copy of each weight and every mirror pulls the result (Gluon's default; slower here,
same numbers). Row-sparse gradients with a 'dist_*' store always update on the store, as Gluon.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import comm as _comm
from .. import kvstore as _kvs
from .. import optimizer as _opt
from ..amp import all_gradients_finite, gradients_finite
from ..comm import debug
from ..comm.agree import AgreementChannel, check_same_across_ranks, settings_of
from ..comm.base import Communicator
from ..comm.buckets import DEFAULT_BUCKET_BYTES, GradientSync
from ..comm.debug import parameter_digests
from ..comm.mpi import mpi_module
from ..comm.narrow import narrow_gradient
from ..formats.archive import as_host
from ..ops import sparse
from ..optimizer._arena import ArenaUpdater, fused_rule
from ..optimizer._fused import from_structure
from ._graphs import StepGraphs
from ._trainer_states import TrainerStates, copy_state
from .parameter import Parameter

__all__ = ["Trainer"]

# Optimizer attributes each rank may hold alone: rescale_grad follows the rank's own batch size (MXNet), the update
# count advances by itself.
_PER_RANK = frozenset({"rescale_grad", "num_update"})

_KVSTORE_TYPES = ("local", "device", "nccl", "dist_sync", "dist_sync_device", "dist_device_sync", "dist_async",
                  "local_allreduce_cpu", "local_allreduce_device", "local_update_cpu")  # the last 3: MXNet's aliases


class Trainer(TrainerStates):
    """Applies an optimizer to Parameters (Gluon's ``Trainer``).

    Args:
        params: a dict of name -> Parameter (as from ``collect_params()``; sorted by name, as
            Gluon does) or a list of Parameters. A parameter present twice is used once.
        optimizer: a registered name ('sgd', 'adam', ...) or an Optimizer instance.
        optimizer_params: keyword arguments of the optimizer (only with a name).
        kvstore: a :class:`~mxlite.kvstore.KVStore` or a type name. 'device' (default),
            'local' and 'nccl' reduce over this process's devices; 'dist_sync' (and
            'dist_sync_device', 'dist_device_sync') also over every process started by
            ``mpiexec``/``mxlite launch`` (MPI; NCCL for GPUs), summing over workers as MXNet
            does (see ``average_over_workers``). None reduces over local devices like 'device'
            (Gluon's None does not reduce at all).
        compression_params: gradient compression, e.g. ``{'type': '2bit', 'threshold': 0.5}``,
            ``{'type': 'topk', 'ratio': 0.01}``, ``{'type': 'fp16'}``; see
            :mod:`mxlite.comm.compression`. Used only when a store is (several devices or
            'dist_*'); kvstore 'local' rejects it, as MXNet.
        update_on_kvstore: apply the optimizer on the store (True) or on every mirror (False).
            None: False for dense gradients (mxlite's default; Gluon's is True), True for
            row-sparse gradients with a 'dist_*' store. See :meth:`_init_kvstore`.
        bucket_bytes: (mxlite) gradients travel in buckets of at most this many bytes
            (a larger parameter travels alone); see :mod:`mxlite.comm.buckets`.
        overlap: (mxlite) reduce each bucket during backward as soon as it is complete.
        partial_sync: (mxlite, SINGA's ``backward_and_partial_update``) do not sum gradients:
            each mirror updates with its own gradient, then one bucket of *parameters*
            (round robin) is averaged over every mirror and process. Cheaper communication,
            mirrors differ between syncs; an experimental option.
        check_finite: (mxlite) before updating, check the summed gradients and raise
            FloatingPointError naming the first parameter holding inf/NaN; nothing is written.
            (With ``mx.amp`` loss scaling such a step is skipped instead.) One reduction per
            parameter and one host synchronisation per step.
        average_over_workers: (mxlite) with a 'dist_*' kvstore, divide the gradient summed over
            workers by ``batch_size * num_workers`` instead of ``batch_size``. False (default):
            MXNet's convention, ``step(local_batch)`` applies the sum of every worker's gradient
            divided by the local batch, so a learning rate tuned in MXNet works unchanged. True:
            the mean over workers (as Horovod and PyTorch DDP), so the same learning rate fits
            1 or N workers. No effect with a single process.
        shard_optimizer_states: (mxlite; ZeRO stage 1, as PyTorch's ZeroRedundancyOptimizer) keep
            each parameter's optimizer state (moments, master weights) on one device only instead of on
            every device and process: each of the N devices (processes x local devices) owns a
            contiguous 1/N of every arena (the flat buffer of a dtype's parameters), receives the
            gradient sum of that slice only, updates it, and the updated weights are all-gathered into
            every mirror before ``step`` returns. Optimizer memory per device falls to 1/N; the bytes
            on the wire are those of the all-reduce it replaces; the all-gather runs after the update
            (before the next forward). Results equal the unsharded Trainer's (bit for bit for
            elementwise rules; LAMB and LARS add their per-parameter norms over the shards, so they
            agree to float32 rounding). Needs a store that sums over several devices or processes
            ('device', 'nccl', 'dist_*') and a rule with a fused update (every built-in rule on
            float32/float16 weights; float64 weights and row-sparse gradients keep full states);
            ``save_states`` gathers the states (every rank must call it) into the usual
            per-parameter file, which loads onto any number of devices, sharded or not. Not with
            ``update_on_kvstore``, ``partial_sync`` or the '2bit'/'topk'/'threshold' codecs ('fp16'
            and 'bf16' work). See docs/sharding.md.

    Raises:
        ValueError: empty params, a non-Parameter entry, optimizer_params with an instance,
            an unknown kvstore name, bad compression_params, ``update_on_kvstore=True`` with a
            store that cannot run an optimizer ('nccl'), ``update_on_kvstore=False`` with
            row-sparse gradients on a 'dist_*' store, ``partial_sync`` with
            ``update_on_kvstore``, or ``shard_optimizer_states`` with an optimizer without a fused
            update, ``update_on_kvstore``, ``partial_sync`` or an error-feedback codec.
    """

    def __init__(self, params: Mapping[str, Parameter] | Iterable[Parameter], optimizer: Any,
                 optimizer_params: dict[str, Any] | None = None, kvstore: Any = "device",
                 compression_params: dict[str, Any] | None = None, update_on_kvstore: bool | None = None, *,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, overlap: bool = True, partial_sync: bool = False,
                 check_finite: bool = False, average_over_workers: bool = False,
                 shard_optimizer_states: bool = False) -> None:
        if isinstance(params, Mapping):
            param_list = [params[k] for k in sorted(params)]
        elif isinstance(params, (list, tuple)):
            param_list = list(params)
        else:
            raise ValueError(f"params must be a dict of Parameters (e.g. net.collect_params()) or a list, "
                             f"got {type(params).__name__}")
        self._params: list[Parameter] = []
        seen: set[int] = set()
        for p in param_list:
            if not isinstance(p, Parameter):
                raise ValueError(f"Trainer expects Parameters, got {type(p).__name__}: {p!r}")
            if id(p) not in seen:
                seen.add(id(p))
                self._params.append(p)
        if not self._params:
            raise ValueError("Trainer needs at least one Parameter")
        self._position = {id(p): i for i, p in enumerate(self._params)}  # parameter -> optimizer index
        if kvstore is not None and not isinstance(kvstore, str) and not hasattr(kvstore, "is_capable"):
            raise TypeError(f"kvstore must be None, a type name or a KVStore, got {type(kvstore).__name__} {kvstore!r}")
        if isinstance(kvstore, str) and kvstore not in _KVSTORE_TYPES:
            raise ValueError(f"unknown kvstore {kvstore!r}; known: {', '.join(_KVSTORE_TYPES)} or None")
        self._kvstore_arg = kvstore
        self._kvstore: Any = None  # the KVStore, once _init_kvstore has decided one is needed
        self._kv_initialized = False
        self._kv_keys: set[int] = set()  # parameter indices initialised on the store
        self._update_on_kvstore_arg = update_on_kvstore
        self._update_on_kvstore = False
        self._compression_params = compression_params
        self._codec = _make_codec(compression_params)  # validates early (ValueError)
        self._partial_sync = bool(partial_sync)
        self._check_finite = bool(check_finite)
        if self._partial_sync and update_on_kvstore:
            raise ValueError("partial_sync updates every mirror locally; it cannot be combined with "
                             "update_on_kvstore=True")
        self._partial_turn = 0
        self._bucket_bytes, self._overlap = int(bucket_bytes), bool(overlap) and not self._partial_sync
        self._syncs: dict[tuple[Any, ...], tuple[Communicator, GradientSync | None]] = {}  # devices -> sync
        self._synced_params: set[int] = set()  # id() of parameters covered by a GradientSync
        self._num_workers = 1
        self._average_over_workers = bool(average_over_workers)
        self._amp_loss_scaler: Any = None  # set by mx.amp.init_trainer
        self._amp_original_scale = 1.0
        optimizer_params = dict(optimizer_params or {})
        if isinstance(optimizer, _opt.Optimizer) and optimizer_params:
            raise ValueError("optimizer_params must be None when optimizer is an Optimizer instance")
        param_dict = dict(enumerate(self._params))
        if isinstance(optimizer, _opt.Optimizer):
            optimizer.param_dict = param_dict
            self._optimizer = optimizer
        else:
            self._optimizer = _opt.create(optimizer, param_dict=param_dict, **optimizer_params)  # validates
        self._scale = float(self._optimizer.rescale_grad)
        self._shard_states = bool(shard_optimizer_states)
        if self._shard_states:
            self._check_shardable(update_on_kvstore)
        self._states: dict[tuple[int, int], Any] = {}  # (param index, mirror number) -> state
        self._arena_updaters: dict[tuple[int, int], ArenaUpdater] = {}  # (id(arena), mirror) -> fused state
        self._loaded: dict[int, Any] = {}  # param index -> state read by load_states (host arrays)
        self._applied: set[tuple[int, int]] = set()  # (index, mirror) that received its loaded state
        self._loaded_residuals: dict[tuple[int, int], np.ndarray] = {}  # (index, mirror) -> residual to restore
        # (id(ShardLayout), mirror) -> (layout, data buffer, slot count, positions in the layout's range that the
        # sharded update does not own, on the device), for _gather_sharded_weights
        self._not_owned: dict[tuple[int, int], tuple[Any, Any, int, Any]] = {}
        self._step_graphs = StepGraphs()  # the update as CUDA graphs when every block is captured (docs/graphs.md)
        # The step issues the joined syncs' collectives (inside its graph when captured), from the step where every
        # rank started doing so until the ranks agree otherwise: backward's hooks leave them to the step meanwhile.
        self._collectives_in_step = False
        self._updates_done = 0  # updates applied (a step every rank counts alike), for the hyper-parameters' checks
        self._agreed_plans: dict[tuple[Any, ...], tuple[int, ...]] = {}  # devices -> the new plan the ranks agreed on
        # MXNet's server keeps the first step's gradient factor (update_on_kvstore on a 'dist_*' store): the batch
        # size every rank agreed on at its first step, and the last one passed (for the warning on a change).
        self._first_batch: float | None = None
        self._last_batch: float | None = None
        self._init_kvstore()  # as soon as the devices are known (deferred parameters know theirs)
        if all(p.is_initialized for p in self._params if p.grad_req != "null"):
            # Start in sync (rank 0's values) and hook the buckets before the first backward;
            # parameters initialised later (deferred) join at their first step.
            self._init_kvstore()
            self._ensure_sync()
        self._num_workers = max(self._num_workers, self._dist_size())  # known from construction on

    # -- hyperparameters ------------------------------------------------------------------
    @property
    def optimizer(self) -> _opt.Optimizer:
        """The optimizer instance."""
        return self._optimizer

    @property
    def learning_rate(self) -> float:
        """The optimizer's current learning rate."""
        return self._optimizer.learning_rate

    def set_learning_rate(self, lr: float) -> None:
        """Set the optimizer's learning rate (UserWarning is raised if a scheduler is set).

        Raises:
            TypeError: ``lr`` is not a real number (None included). ValueError: NaN, infinite or negative.
            The rate is unchanged then.
        """
        self._optimizer.set_learning_rate(lr)

    @property
    def num_workers(self) -> int:
        """Processes taking part in the gradient sum (1 unless a 'dist_*' kvstore runs under MPI).

        Right from construction, also while the parameters wait for deferred initialisation, so
        ``dataset.shard(trainer.num_workers, rank)`` splits the data before the first step.
        """
        return self._num_workers

    def _dist_size(self) -> int:
        """How many MPI processes the 'dist_*' store spans (1 for other stores), known before any step."""
        kv = self._kvstore if self._kvstore is not None else self._kvstore_arg
        if kv is None:
            return 1
        if not isinstance(kv, str):
            return int(kv.num_workers) if "dist" in kv.type else 1
        if "dist" not in kv:
            return 1
        return int(mpi_module().COMM_WORLD.Get_size())

    def _workers_divisor(self) -> int:
        """What the summed gradient is divided by besides the batch size: 1 (MXNet) or ``num_workers``."""
        return self._num_workers if self._average_over_workers else 1

    @property
    def update_on_kvstore(self) -> bool:
        """Whether the store applies the optimizer (decided when the parameters are initialised)."""
        self._init_kvstore()
        return self._update_on_kvstore

    # -- the kvstore ----------------------------------------------------------------------
    def _init_kvstore(self) -> None:
        """Decide the store and ``update_on_kvstore`` as Gluon does (once, when params are initialised).

        * kvstore None, or a type name with one device and no 'dist': no store (nothing to sum).
        * row-sparse gradients: update on the store when it is 'dist_*' (``update_on_kvstore=False``
          there is a ValueError, as Gluon); an explicit value wins otherwise.
        * dense gradients: ``update_on_kvstore`` as given; None means False in mxlite (Gluon
          defaults to True: updating in place on every mirror is the fast path here, with the
          same numbers). True on a store without optimizer support ('nccl') is a ValueError.
        * compression goes to the store (which validates it: 'local' rejects it) and the
          optimizer too when it updates.
        """
        if self._kv_initialized:
            return
        devices = self._devices()
        if not devices:  # nothing initialised (nor deferred on known devices) yet
            return
        arg = self._kvstore_arg
        if arg is None:
            kv = None
        elif isinstance(arg, _kvs.KVStore):
            kv = arg
        elif len(devices) == 1 and "dist" not in arg:
            kv = None
        else:
            kv = _kvs.create(arg)
        distributed = kv is not None and "dist" in kv.type
        explicit = self._update_on_kvstore_arg
        if any(p.grad_stype == "row_sparse" for p in self._params if p.grad_req != "null"):
            if explicit is False and distributed:
                raise ValueError("Cannot set update_on_kvstore=False on dist kvstore when sparse gradients "
                                 "are present")
            update = distributed if explicit is None else bool(explicit)
        else:
            update = bool(explicit)
            if update and kv is not None and not kv.is_capable(_kvs.KVStore.OPTIMIZER):
                raise ValueError(f"Please set update_on_kvstore=False when training with kvstore "
                                 f"{kv.type!r}: it cannot run an optimizer")
        if kv is None:
            update = False
        else:
            if self._compression_params:
                kv.set_gradient_compression(self._compression_params)
            if update:
                kv.set_optimizer(self._optimizer)
        if self._partial_sync and update:
            raise ValueError("partial_sync updates every mirror locally; it cannot be combined with "
                             "update_on_kvstore")
        if self._shard_states and update:
            raise ValueError("shard_optimizer_states updates every device's slice locally; it cannot be combined "
                             "with update_on_kvstore (row-sparse gradients on a 'dist_*' store update there)")
        if self._partial_sync and any(p.grad_stype == "row_sparse" for p in self._params if p.grad_req != "null"):
            raise ValueError("partial_sync averages dense parameters bucket by bucket; row-sparse gradients "
                             "(sparse_grad=True) are not supported with it")
        if kv is None or update:
            self._codec = None  # the buckets do not compress: no store, or the store's push does
        self._kvstore, self._update_on_kvstore = kv, update
        self._kv_initialized = True

    def _devices(self) -> list[Any]:
        """The devices of the first initialised (or deferred, device-assigned) parameter; [] while none is."""
        for p in self._params:
            if p.is_initialized or getattr(p, "_deferred", None) is not None:
                return p.list_device()
        return []

    # -- the step -------------------------------------------------------------------------
    def step(self, batch_size: int, ignore_stale_grad: bool = False) -> None:
        """Sum gradients over mirrors, then update every mirror; see the module docstring.

        With ``update_on_kvstore``: push each gradient to the store (which sums and updates)
        and pull the new weights into every mirror. With dynamic loss scaling
        (``mx.amp.init_trainer``), a step whose summed gradients hold inf/NaN updates nothing
        and lowers the loss scale.

        Args:
            batch_size: samples that produced this worker's gradients. The gradient summed over
                devices and workers is divided by ``batch_size`` (MXNet), or by
                ``batch_size * num_workers`` with ``average_over_workers=True``. With several processes
                on a 'dist_*' store and ``update_on_kvstore`` not False, by the first step's batch size at
                every step (MXNet's store keeps that factor; a change warns).
            ignore_stale_grad: skip, instead of rejecting, parameters whose gradient is stale.

        Raises:
            ValueError: batch_size <= 0; at the first step of several processes on a 'dist_*' store (see
                ``batch_size``), ranks that passed different batch sizes (names the ranks and their sizes).
            UserWarning: a stale gradient (names the parameter and device), as MXNet raises;
                also when updating on the store (where MXNet would push the old gradient).
        """
        self._check_batch_size(batch_size)
        self._init_kvstore()
        self._check_devices_unchanged()
        if (self._update_on_kvstore or self._partial_sync) and self._step_graphs.wanted(self._params):
            self._step_graphs.notice(self._eager_step_reason())
        if self._update_on_kvstore:
            self._step_on_kvstore(batch_size, ignore_stale_grad)
        elif self._partial_sync:
            self._ensure_sync()
            # Each mirror updates with its own gradient, from its share of this worker's batch.
            self._update(batch_size, ignore_stale_grad, workers=1 / max(1, len(self._devices())))
            self._average_partition()
        else:
            joined = self._joined_syncs()
            if joined and all(sync.left_for_step() for sync in joined):
                # One GPU per process: the buckets' all-reduces go into the step's CUDA graph with the update.
                if not self._collectives_in_step:
                    self._collectives_in_step = True
                    self._step_graphs.start_lockstep()
                self._update(batch_size, ignore_stale_grad, self._workers_divisor(), joined)
            else:
                if joined and self._collectives_in_step:
                    self._step_graphs.run_eagerly(joined)  # the ranks may agree at this step: this one is eager
                self._allreduce_grads()  # a narrow wire's half-precision sum stays for the fused update to read
                self.update(batch_size, ignore_stale_grad)
            self._hold_collectives(joined)
        self._debug_check_after_step()

    def allreduce_grads(self) -> None:
        """Replace every mirror's gradient by the sum over its mirrors (and, 'dist_*', over processes).

        Dense gradients travel in buckets (see :mod:`mxlite.comm.buckets`), most of them already
        reduced during backward when ``overlap`` is on; row-sparse gradients are summed per
        parameter.

        Raises:
            RuntimeError: the parameters are updated on the store (Gluon's message).
        """
        self._init_kvstore()
        if self._update_on_kvstore:
            raise RuntimeError("allreduce_grads() when parameters are updated on kvstore is not supported. "
                               "Try setting `update_on_kvstore` to False when creating trainer.")
        joined = self._joined_syncs() if self._collectives_in_step else []
        if joined:
            self._step_graphs.run_eagerly(joined)  # the ranks may agree at this step: this one sums eagerly
        self._allreduce_grads()
        # The user sums: overlap with backward again, unless the ranks left their collectives to the step together
        # (another rank may replay them in its graph: they keep its order, not backward's).
        self._hold_collectives(joined)
        for _, sync in self._syncs.values():
            if sync is not None:
                sync.materialize()  # the caller reads the gradient buffers: a narrow wire's sums go there
                if sync.layouts:
                    sync.gather_grads()  # sharded: each owner holds its sums; the caller reads every gradient

    def _allreduce_grads(self) -> None:
        self._check_devices_unchanged()
        self._check_new_plans_agreed()  # before any collective of this step: the old plan's too
        # Finish the buckets the current plans reduced during backward first; parameters that
        # join a plan now (initialised late, unfrozen) were not summed yet and are reduced apart.
        for _, sync in self._syncs.values():
            if sync is not None:
                sync.allreduce_grads()
        before = {devices: sync for devices, (_, sync) in self._syncs.items()}
        rebuilt = self._ensure_sync()
        for devices, old in before.items():
            if old is not None and old.layouts and self._syncs[devices][1] is not old:
                old.gather_grads()  # its owners summed under the old slices; the new plan's owners need the sums
        for sync, joined in rebuilt:
            if joined is None:
                sync.allreduce_grads()  # a first plan: nothing was reduced during backward
            else:
                sync.reduce_params(joined)
        for param in self._params:
            if (param.grad_req != "null" and param.is_initialized and param.grad_stype == "row_sparse"
                    and len(param.list_device()) > 1):
                _sum_row_sparse_into_all(param)

    def _joined_syncs(self) -> list[GradientSync]:
        """The gradient syncs whose all-reduces join the step's CUDA graph (empty when the step's collectives stay
        eager): when the step is captured at all, its plans are current and every sync's collectives can be
        recorded (NCCL with one GPU per process, no codec, no sharding; see docs/graphs.md).

        The ranks move them into the step together: at a step where they could join, every rank takes part in an
        agreement (:meth:`StepGraphs.agree_to_join`) and they join only when every rank's blocks are captured; the
        next backward then leaves them to the step on every rank. Once there, they stay with the step (its graph,
        or eagerly in the same order) until the ranks agree otherwise (a capture that failed somewhere, no rank
        able to capture, a new plan), even while this rank's blocks are not captured: another rank may be
        replaying them."""
        syncs = [sync for _, sync in self._syncs.values() if sync is not None]
        graphs = self._step_graphs
        if (not syncs or graphs.collectives_failed or not all(sync.capturable() for sync in syncs)
                or (self._collectives_in_step and graphs.collectives_released)
                or self._plans_to_rebuild() or self._eager_step_reason() is not None):
            return []
        if self._collectives_in_step or all(sync.held for sync in syncs):
            return syncs  # every rank agreed to leave them to the step
        return syncs if graphs.agree_to_join(syncs, graphs.wanted(self._params)) else []

    def _hold_collectives(self, joined: list[GradientSync]) -> None:
        """After a step: the next backward leaves the joined syncs' buckets to the step (its graph), the others
        reduce from the ready-hooks as usual; with none joined, the step no longer issues collectives."""
        for _, sync in self._syncs.values():
            if sync is not None:
                sync.held = bool(joined) and any(sync is j for j in joined)
        if not joined:
            self._collectives_in_step = False
            self._step_graphs.collectives_released = False

    def _check_devices_unchanged(self) -> None:
        """RuntimeError naming the parameter when one now lives on other devices than its gradient sum was built for."""
        for devices, (_, sync) in self._syncs.items():
            for param in (sync.params if sync is not None else []):
                now = tuple(param.list_device()) if param.is_initialized else devices
                if now != devices:
                    raise RuntimeError(
                        f"Parameter {param.label!r} now lives on {list(now)}, but this Trainer set up its gradient "
                        f"sum when it lived on {list(devices)}: the model was initialised again on other devices "
                        "after the Trainer was created. Create the Trainer after the last initialize (or create a "
                        "new Trainer for the new devices)")

    def _ensure_sync(self) -> list[tuple[GradientSync, list[Parameter] | None]]:
        """Start new parameters in sync, and (re)build a communicator and bucket plan per device list.

        A plan is rebuilt when its set of dense, gradient-carrying parameters changes (a parameter
        initialised late, a ``grad_req`` changed); compression residuals carry over. Returns
        (sync, parameters that joined it, or None for a first plan) for the plans built.
        """
        self._init_kvstore()
        self._check_new_plans_agreed()
        rebuilt = []
        for devices, new, dense in self._plans_to_rebuild():
            old_comm, old_sync = self._syncs.get(devices, (None, None))
            old_dense = old_sync.params if old_sync is not None else []
            comm = old_comm if old_comm is not None else self._communicator(list(devices))
            self._start_in_sync(comm, new)
            needed = (comm.size > 1 or len(devices) > 1) and not self._update_on_kvstore and bool(dense)
            shard = (lambda dtype: fused_rule(self._optimizer, dtype) is not None) if self._shard_states else False
            sync = GradientSync(comm, dense, self._bucket_bytes, self._overlap, self._codec, shard) if needed else None
            if sync is not None and old_sync is not None:
                sync.take_residuals(old_sync)
            self._syncs[devices] = (comm, sync)
            self._synced_params.update(id(p) for p in new)
            if sync is not None:
                kept = {id(p) for p in old_dense}
                rebuilt.append((sync, [p for p in dense if id(p) not in kept] if old_sync is not None else None))
                if self._loaded_residuals:
                    self._restore_residuals()
        return rebuilt

    def _plans_to_rebuild(self) -> list[tuple[tuple[Any, ...], list[Parameter], list[Parameter]]]:
        """(devices, new parameters, dense gradient-carrying parameters) of every device list whose communicator or
        bucket plan :meth:`_ensure_sync` must (re)build: new parameters, or another set of dense gradients."""
        groups: dict[tuple[Any, ...], list[Parameter]] = {}
        for param in self._params:
            if param.is_initialized:
                groups.setdefault(tuple(param.list_device()), []).append(param)
        todo = []
        for devices, params in groups.items():
            new = [p for p in params if id(p) not in self._synced_params]
            dense = [p for p in params if p.grad_req != "null" and p.grad_stype == "default"]
            old_comm, old_sync = self._syncs.get(devices, (None, None))
            old_dense = old_sync.params if old_sync is not None else []
            if old_comm is None or new or [id(p) for p in dense] != [id(p) for p in old_dense]:
                todo.append((devices, new, dense))
        return todo

    def _communicator(self, devices: list[Any]) -> Communicator:
        kind = self._kvstore.kind if self._kvstore is not None else "device"  # canonical, aliases resolved
        comm = _comm.create(kind, devices)
        self._num_workers = max(self._num_workers, comm.size)
        return comm

    def _start_in_sync(self, comm: Communicator, params: list[Parameter]) -> None:
        """Every process checks it has the same parameters (shapes, dtypes, ``grad_req``, multipliers) and the
        same settings (optimizer, hyper-parameters, sharding, buckets, ...), then starts from rank 0's values."""
        if comm.size == 1 or not params:
            return
        check_same_across_ranks(comm, "the Trainer's parameters", [(p.label, _description(p)) for p in params])
        check_same_across_ranks(comm, "the Trainer's settings", self._settings())
        if self._channel is None:  # the hyper-parameters, as they change (set_learning_rate...), and sharded saves
            self._channel = AgreementChannel(self._host_comm(comm).comm)
            self._watch_hyperparameters(count=False)  # the values just agreed: a change from them is told
        for p in params:
            comm.broadcast([d.array for d in p.list_data()], root=0)
        self._check_identical(comm, params, "after the broadcast of rank 0's parameters")

    def _check_new_plans_agreed(self) -> None:
        """A bucket plan about to be rebuilt (a ``grad_req`` changed, a parameter initialised late) sums the same
        parameters on every rank: ValueError on every rank naming the parameter, its ``grad_req`` on each rank and
        the ranks, before any collective of the step (once per new plan; the first plans were agreed with the
        parameters when the Trainer was created).
        """
        if all(comm.size == 1 for comm, _ in self._syncs.values()):
            return
        for devices, _, dense in self._plans_to_rebuild():
            comm = self._syncs.get(devices, (None, None))[0]
            plan = tuple(id(p) for p in dense)
            if comm is None or comm.size == 1 or self._agreed_plans.get(devices) == plan:
                continue
            mirrored = [p for p in self._params if p.is_initialized and tuple(p.list_device()) == devices]
            check_same_across_ranks(comm, "the parameters whose gradients the Trainer sums",
                                    [(p.label, {"grad_req": p.grad_req}) for p in mirrored])
            self._agreed_plans[devices] = plan

    def _settings(self) -> list[tuple[str, Any]]:
        """What must be equal on every rank besides the parameters, as (name, JSON-able value): the optimizer, its
        hyper-parameters and scheduler, and the Trainer's arguments that shape its collectives or its update."""
        codec = self._codec.params if self._codec is not None else {}
        return [*self._hyperparameters(), ("rescale_grad", self._scale),
                *settings_of(self._optimizer.lr_scheduler, prefix="lr_scheduler."),
                ("kvstore", self._kvstore.kind if self._kvstore is not None else None),
                ("update_on_kvstore", self._update_on_kvstore), ("shard_optimizer_states", self._shard_states),
                ("compression", bool(codec)), *settings_of(codec, prefix="compression."),
                ("partial_sync", self._partial_sync), ("check_finite", self._check_finite),
                ("average_over_workers", self._average_over_workers), ("overlap", self._overlap),
                ("bucket_bytes", self._bucket_bytes)]

    def _hyperparameters(self) -> list[tuple[str, Any]]:
        """The optimizer's rule and hyper-parameters as (name, JSON-able value), without what each rank sets alone
        (``rescale_grad`` follows its batch size) or what advances by itself (the update count, the schedule)."""
        opt = self._optimizer
        scheduler = opt.lr_scheduler
        return [("optimizer", type(opt).__name__), *settings_of(opt, _PER_RANK, "optimizer."),
                ("lr_scheduler", type(scheduler).__name__ if scheduler is not None else None)]

    def _watch_hyperparameters(self, count: bool = True) -> None:
        """Every update: the hyper-parameters in effect are those of every rank (checked by messages when they
        change, no collective: :class:`mxlite.comm.agree.AgreementChannel`); counts the update (``count``)."""
        self._updates_done += int(count)
        if self._channel is not None:  # "at update N": N counts from 1, as the user's steps
            self._channel.watch("the optimizer's hyper-parameters", self._updates_done, self._hyperparameters())

    @staticmethod
    def _check_identical(comm: Communicator, params: list[Parameter], when: str) -> None:
        """Every mirror of every rank holds the same values (ValueError naming the parameter and ranks)."""
        check_same_across_ranks(comm, f"the parameter values {when}", parameter_digests(params))

    def _debug_check_after_step(self) -> None:
        """Debug mode (``MXLITE_DEBUG_COLLECTIVES=1``): parameters identical on every mirror and rank."""
        if not debug.enabled() or self._partial_sync:
            return
        for comm, _ in self._syncs.values():
            params = [p for p in self._params if p.is_initialized and p.list_device() == comm.devices]
            if comm.size > 1 or len(comm.devices) > 1:
                self._check_identical(comm, params, "after a step")

    def _step_on_kvstore(self, batch_size: int, ignore_stale_grad: bool) -> None:
        """Push every fresh gradient (the store sums and updates) and pull the new weights."""
        if self._amp_loss_scaler is not None:
            raise ValueError("dynamic loss scaling needs update_on_kvstore=False")
        self._ensure_sync()  # rank 0's initial values everywhere, before the store copies them
        self._num_workers = max(self._num_workers, self._kvstore.num_workers)
        self._watch_hyperparameters()
        self._optimizer.rescale_grad = self._scale / (self._dividing_batch(batch_size) * self._workers_divisor())
        todo = self._fresh_params(ignore_stale_grad)
        kv = self._kvstore
        for index, param in todo:
            if index not in self._kv_keys:
                kv.init(index, param.data(param.list_device()[0]))
                self._kv_keys.add(index)
            else:  # the weights may have changed outside the store (a checkpoint loaded, set_data)
                kv.overwrite(index, param.data(param.list_device()[0]))
            kv.push(index, param.list_grad(), priority=-index)
            kv.pull(index, param.list_data(), priority=-index)
            param._mark_stale()

    def _fresh_params(self, ignore_stale_grad: bool) -> list[tuple[int, Parameter]]:
        """(index, param) of every parameter to update; stale ones raise or are skipped (and listed)."""
        todo = []
        stale_anywhere = self._stale_on_some_rank() if ignore_stale_grad and self._num_workers > 1 else set()
        for index, param in enumerate(self._params):
            if param.grad_req == "null":
                continue
            param._materialize()  # a deferred parameter forward never used; raises if its shape is unknown
            stale = [d for d in param.list_device() if not param._fresh(d)]
            if index in stale_anywhere and not stale:
                stale = param.list_device()[:1]  # fresh here, stale on another rank: every rank skips it
            if stale:
                if ignore_stale_grad:
                    param._mark_stale()  # its fresh mirrors too: their gradient is not used next step either
                    continue
                raise UserWarning(
                    f"Gradient of Parameter '{param.label}' on device {stale[0]} has not been updated by "
                    "backward since the last step; this could mean a bug in your model that made it only use "
                    "a subset of the Parameters for this iteration. Call step with ignore_stale_grad=True to "
                    "suppress this and update only the parameters with fresh gradients"
                )
            todo.append((index, param))
        return todo

    def _stale_on_some_rank(self) -> set[int]:
        """Indices of parameters stale on any mirror of any rank (one all-reduce), so all ranks skip alike."""
        comm = next((c for c, _ in self._syncs.values() if c.size > 1), None)
        if comm is None:
            return set()
        flags = np.array([0.0 if p.grad_req == "null" or not p.is_initialized else
                          float(any(not p._fresh(d) for d in p.list_device())) for p in self._params])
        buffers = []
        for device in comm.devices:
            with device.use():
                buffers.append(device.xp.asarray(flags.copy()))
        comm.allreduce(buffers).wait()
        summed = as_host(buffers[0])
        return {i for i, f in enumerate(summed) if f > 0}

    def _average_partition(self) -> None:
        """partial_sync: average the parameters of one bucket (round robin) over every mirror and process."""
        partitions = [b.params for _, sync in self._syncs.values() if sync is not None for b in sync.buckets]
        if not partitions:
            return
        self._partial_turn %= len(partitions)
        comm = next(c for c, sync in self._syncs.values() if sync is not None and any(
            b.params is partitions[self._partial_turn] for b in sync.buckets))
        works = [comm.allreduce([d.array for d in param.list_data()], average=True)
                 for param in partitions[self._partial_turn]]
        for work in works:
            work.wait()  # (GPU) the next forward reads these weights
        self._partial_turn += 1

    def update(self, batch_size: int, ignore_stale_grad: bool = False) -> None:
        """Apply the optimizer to every mirror with its (already summed) gradient.

        Raises:
            RuntimeError: the parameters are updated on the store (Gluon's message).
            UserWarning: a stale gradient, as :meth:`step`.
        """
        self._check_batch_size(batch_size)
        self._init_kvstore()
        if self._update_on_kvstore:
            raise RuntimeError("update() when parameters are updated on kvstore is not supported. "
                               "Try setting `update_on_kvstore` to False when creating trainer.")
        self._update(batch_size, ignore_stale_grad, self._workers_divisor())

    def _update(self, batch_size: int, ignore_stale_grad: bool, workers: float,
                collectives: Sequence[GradientSync] = ()) -> None:
        """Update every fresh parameter; ``collectives``: gradient syncs whose buckets are summed here first,
        inside the step's CUDA graph when the update is captured (else at once)."""
        self._watch_hyperparameters()
        # Each worker passes its own batch size; the sum over workers is divided by it (MXNet), or
        # also by num_workers (average_over_workers).
        self._optimizer.rescale_grad = self._scale / (self._dividing_batch(batch_size) * workers)
        opt = self._optimizer
        todo = self._fresh_params(ignore_stale_grad)
        fused = [p.grad_stype == "default" and fused_rule(opt, p.dtype) is not None for _, p in todo]
        sharded_syncs = [sync for _, sync in self._syncs.values() if sync is not None and sync.layouts]
        captured = bool(todo) and self._step_capturable(fused, sharded_syncs)
        if collectives and not captured:
            self._step_graphs.run_eagerly(collectives)  # the ranks may agree at this step: this one is eager
            for sync in collectives:
                sync.allreduce_grads()
            collectives = ()
        if self._check_finite or self._amp_loss_scaler is not None or not all(fused):
            for _, sync in self._syncs.values():  # these read the gradient buffers, not a narrow wire
                if sync is not None:
                    sync.materialize()
        if self._check_finite and self._amp_loss_scaler is None:
            self._raise_if_not_finite([p for _, p in todo], sharded_syncs)
        if self._amp_loss_scaler is not None and self._overflow([p for _, p in todo], sharded_syncs):
            for param in self._params:
                param._mark_stale()  # the step is skipped: nothing is written
            return
        groups: dict[tuple[int, int], tuple[Any, list[tuple[int, Any]]]] = {}  # -> (arena, [(index, slot)])
        for (index, param), is_fused in zip(todo, fused, strict=True):
            if is_fused:
                for mirror, (arena, slot) in enumerate(param.arena_slots()):
                    groups.setdefault((id(arena), mirror), (arena, []))[1].append((index, slot))
            else:
                self._update_per_parameter(index, param)
            param._mark_stale()
        if sharded_syncs:
            self._reshard_if_moved(sharded_syncs)
        # One fused update per (arena, mirror): every parameter of the arena in one launch. Sharded, every
        # mirror updates its own slice, and the mirrors of one arena are driven together (norm sums).
        together: dict[int, tuple[Communicator, list[Any]]] = {}
        prepared = []  # captured: every table written first, then the launches replayed (one graph per GPU)
        for key, (arena, entries) in groups.items():
            sync, layout = self._shard_layout(arena)
            shard = layout.shard(key[1]) if layout is not None else None
            updater = self._arena_updaters.get(key)
            if updater is None:
                updater = self._arena_updaters[key] = ArenaUpdater(opt, arena, key[1], shard)
            for index, slot in entries:
                if index in self._loaded and (index, key[1]) not in self._applied:
                    updater.set_state(slot, *from_structure(updater.state_names, self._loaded[index]))
                    self._applied.add((index, key[1]))
            # On a GPU the bucket sums may still sit in the arena's half-precision wire (fp16/bf16
            # codecs): the comm layer says whether it holds all of them, the update then reads it.
            narrow = narrow_gradient(arena, {id(s.key) for _, s in entries}) if arena.device.is_gpu else None
            if layout is None and captured:
                prepared.append((updater, updater.prepare(entries)))  # no narrow wire: compression keeps it eager
            elif layout is None:
                updater.step(entries, narrow)
            else:
                together.setdefault(id(layout), (sync.comm, []))[1].append(updater.steps(entries, narrow))
        if prepared:
            self._step_graphs.run(prepared, opt, collectives)
        for comm, steps in together.values():
            _drive_shards(comm, steps)
        opt.set_current_mirror(0)
        if sharded_syncs:
            self._gather_sharded_weights(sharded_syncs)

    def _step_capturable(self, fused: list[bool], sharded_syncs: list[GradientSync]) -> bool:
        """Whether this step's update runs as CUDA graphs: every parameter's block is captured (else no notice:
        nothing asked for graphs) and nothing in the step needs the host; otherwise one notice per reason."""
        if not self._step_graphs.wanted(self._params):
            self._step_graphs.release()  # the blocks stopped being captured (hybridize(False)): give the memory back
            return False
        why = self._eager_step_reason(fused, sharded_syncs)
        if why is not None:
            self._step_graphs.notice(why)
        return why is None

    def _eager_step_reason(self, fused: list[bool] | None = None, sharded_syncs: list[GradientSync] | None = None
                           ) -> str | None:
        """Why the step cannot be captured (None when it can); see docs/graphs.md."""
        if any(not d.is_gpu for p in self._params if p.is_initialized for d in p.list_device()):
            return "a parameter lives on a CPU device"
        if self._update_on_kvstore:
            return "update_on_kvstore=True (the store applies the optimizer)"
        if self._partial_sync:
            return "partial_sync (its parameter averaging waits for the collectives)"
        if self._codec is not None:
            return (f"gradient compression {self._codec.params.get('type')!r} (its exchange or wire is driven from "
                    "the host)")
        if self._amp_loss_scaler is not None:
            return "dynamic loss scaling (mx.amp reads the overflow flag on the host to skip a step)"
        if self._check_finite:
            return "check_finite=True (reads the gradients' finiteness on the host)"
        if sharded_syncs:
            return "shard_optimizer_states=True (its all-gather of the updated shards runs after the update)"
        if fused is not None and not all(fused):
            return (f"a parameter without a fused update ({type(self._optimizer).__name__} on float64 weights, a "
                    "rule without fused kernels, or a row-sparse gradient)")
        return None

    def _check_shardable(self, update_on_kvstore: bool | None) -> None:
        """ValueError when ``shard_optimizer_states`` cannot work with the other arguments."""
        if update_on_kvstore:
            raise ValueError("shard_optimizer_states updates every device's slice locally; it cannot be combined "
                             "with update_on_kvstore=True")
        if self._partial_sync:
            raise ValueError("shard_optimizer_states cannot be combined with partial_sync (each mirror would need "
                             "every state to update with its own gradient)")
        if self._codec is not None and not self._codec.narrow_wire and self._codec.needs_residual:
            raise ValueError(f"shard_optimizer_states cannot be combined with {self._codec.params.get('type')!r} "
                             "compression (its exchange sums every gradient on every device); use no compression or "
                             "the 'fp16'/'bf16' wire")
        opt = self._optimizer
        if all(fused_rule(opt, dtype) is None for dtype in (np.float32, np.float16)):
            raise ValueError(f"shard_optimizer_states needs an optimizer with a fused update; "
                             f"{type(opt).__name__} has none (every built-in rule but SGLD, DCASGD, FTML, LANS and "
                             "subclasses has one): train it without sharding")

    def _shard_layout(self, arena: Any) -> tuple[Any, Any]:
        """``(sync, ShardLayout)`` of the gradient sync that shards ``arena``, or ``(None, None)``."""
        for _, sync in self._syncs.values():
            layout = sync.layout(arena) if sync is not None and sync.layouts else None
            if layout is not None:
                return sync, layout
        return None, None

    def _sharded(self, param: Parameter) -> bool:
        return param.is_initialized and self._shard_layout(param.arena_slots()[0][0])[1] is not None

    def _reshard_if_moved(self, sharded_syncs: list[GradientSync]) -> None:
        """When a sharded arena's slices moved (an arena grew, a parameter joined or left), gather the old
        slices' states into whole per-parameter states, which the new updaters take (as from a file)."""
        for sync in sharded_syncs:
            for layout in list(sync.layouts):
                olds = [self._arena_updaters.get((id(a), m)) for m, a in enumerate(layout.arenas)]
                if all(u is None or u.fits(layout.shard(m), a.slots)
                       for m, (u, a) in enumerate(zip(olds, layout.arenas))):
                    continue
                if any(u is None for u in olds):
                    raise RuntimeError("sharded optimizer states: some device mirrors of an arena have no state "
                                       "while others do; update every mirror together")
                gathered = self._gather_sharded(sync.comm, olds)
                for m, a in enumerate(layout.arenas):
                    del self._arena_updaters[(id(a), m)]
                for index, state in gathered.items():
                    self._loaded[index] = state
                    self._applied -= {(index, m) for m in range(len(layout.arenas))}

    def _gather_sharded_weights(self, sharded_syncs: list[GradientSync]) -> None:
        """After a sharded update every mirror gets every shard's updated weights (one all-gather per arena).

        The all-gather moves each shard's whole range of the arena, and parameters that this Trainer does not
        update may lie inside it (a BatchNorm's running statistics, ``grad_req='null'``, which each device's
        forward updates with its own batch; another Trainer's parameters): their values on each device are put
        back afterwards (one gather and one scatter per arena and device), as unsharded training leaves them.
        """
        kept = []
        for sync in sharded_syncs:
            for layout in sync.layouts:
                for mirror, arena in enumerate(layout.arenas):
                    index = self._not_owned_index(sync, layout, mirror, arena)
                    if index is not None:
                        with arena.device.use():
                            kept.append((arena, index, arena.data_buf[index]))
        for sync in sharded_syncs:
            sync.gather_weights()
        for arena, index, values in kept:
            with arena.device.use():
                arena.data_buf[index] = values

    def _not_owned_index(self, sync: GradientSync, layout: Any, mirror: int, arena: Any) -> Any:
        """Positions (a device array) of the data in ``layout``'s range of ``arena`` that belong to parameters
        ``sync`` does not sum, hence that no shard updates; None when there are none. Cached per layout."""
        key = (id(layout), mirror)
        cached = self._not_owned.get(key)
        if cached is not None and cached[0] is layout and cached[1] is arena.data_buf and cached[2] == len(arena.slots):
            return cached[3]
        synced = {id(p) for p in sync.params}
        runs = [np.arange(max(s.offset, layout.lo), min(s.offset + s.size, layout.hi), dtype=np.int64)
                for s in arena.slots
                if id(s.key) not in synced and s.offset < layout.hi and s.offset + s.size > layout.lo]
        index = None
        if runs:
            with arena.device.use():
                index = arena.device.xp.asarray(np.concatenate(runs))
        if len(self._not_owned) > 4 * len(sync.layouts) * len(layout.arenas):  # layouts replaced: forget old ones
            self._not_owned.clear()
        self._not_owned[key] = (layout, arena.data_buf, len(arena.slots), index)
        return index

    def _raise_if_not_finite(self, params: list[Parameter], sharded_syncs: list[GradientSync]) -> None:
        """``check_finite``: FloatingPointError naming the first parameter whose summed gradient holds inf or NaN.

        Sharded arenas are checked on their owners first (every rank agrees); only when that finds inf or
        NaN are their gradients gathered, to name the parameter.
        """
        if sharded_syncs and not all([sync.sharded_grads_finite() for sync in sharded_syncs]):
            for sync in sharded_syncs:
                sync.gather_grads()
            _raise_if_not_finite(params)
        _raise_if_not_finite([p for p in params if not sharded_syncs or not self._sharded(p)])

    def _overflow(self, params: list[Parameter], sharded_syncs: list[GradientSync]) -> bool:
        """AMP: whether any summed gradient holds inf/NaN (sharded arenas decided by their owners, agreed by all);
        updates the loss scale."""
        scaler = self._amp_loss_scaler
        if not sharded_syncs:
            return scaler.has_overflow(params)
        overflow = not all([sync.sharded_grads_finite() for sync in sharded_syncs])
        others = [p for p in params if p.grad_req != "null" and not self._sharded(p)]
        overflow = overflow or not all_gradients_finite(others)
        scaler.update(overflow)
        return overflow

    def _update_per_parameter(self, index: int, param: Parameter) -> None:
        """The optimizer's own rule on each mirror (rules or dtypes without a fused kernel)."""
        opt = self._optimizer
        for slot_no, (data, grad) in enumerate(zip(param.list_data(), param.list_grad())):
            opt.set_current_mirror(slot_no)
            key = (index, slot_no)
            weight = data.array
            if key not in self._states:
                with data.device.use():
                    if index in self._loaded:
                        self._states[key] = copy_state(self._loaded[index], data.device)
                        self._applied.add(key)
                    else:
                        self._states[key] = opt.create_state(index, weight)
            # A row-sparse gradient goes through as it is: rules with lazy_update touch only its rows.
            raw_grad = grad if isinstance(grad, sparse.RowSparseTensor) else grad.array
            with data.device.use():
                opt.update(index, weight, raw_grad, self._states[key])

    def _keeps_first_batch(self) -> bool:
        """Whether the gradient is divided by the first step's batch size at every step: several processes on a
        'dist_*' store where MXNet updates on the store (``update_on_kvstore`` not False), whose one optimizer
        keeps the factor it got first. Not with ``partial_sync`` (each mirror updates with its own share)."""
        explicit_local = self._update_on_kvstore_arg is False and not self._update_on_kvstore
        return (self._num_workers > 1 and self._kvstore is not None and "dist" in self._kvstore.type
                and not explicit_local and not self._partial_sync)

    def _dividing_batch(self, batch_size: float) -> float:
        """The batch size this step divides the summed gradient by: ``batch_size``, or, where the ranks keep the
        first step's factor (:meth:`_keeps_first_batch`), the first step's batch size, agreed by every rank at that
        step (one small all-gather); a later change warns as MXNet does and is not applied.

        Raises:
            ValueError: at the first step the ranks passed different batch sizes (names the ranks and their sizes).
        """
        if not self._keeps_first_batch():
            return batch_size
        if self._first_batch is None:
            comm = next((c for c, _ in self._syncs.values() if c.size > 1), None)
            if comm is not None:
                check_same_across_ranks(comm, "the batch size of the first step (with several workers on a 'dist_*' "
                                        "kvstore every step divides the summed gradient by it, as MXNet's store)",
                                        [("batch_size", float(batch_size))])
            self._first_batch = self._last_batch = float(batch_size)
        elif float(batch_size) != self._last_batch:
            self._last_batch = float(batch_size)
            warnings.warn("Possible change in the `batch_size` from previous `step` detected. Optimizer gradient "
                          "normalizing factor will not change w.r.t new batch_size when update_on_kvstore=True and "
                          f"when distributed kvstore is used (mxlite: batch_size {float(batch_size):g} on this rank; "
                          f"the gradient is still divided by {self._first_batch:g}, the first step's; pass "
                          "update_on_kvstore=False to divide by each step's own)", UserWarning, stacklevel=4)
        return self._first_batch

    @staticmethod
    def _check_batch_size(batch_size: int) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Real):
            raise TypeError(f"batch_size must be a positive number, got {type(batch_size).__name__} {batch_size!r}")
        if not batch_size > 0 or not math.isfinite(batch_size):  # `not > 0` also rejects NaN
            raise ValueError(f"batch_size must be a positive number, got {batch_size!r}")


def _description(param: Parameter) -> dict[str, Any]:
    """What every rank must agree on about a parameter: its layout, whether and how its gradient is summed, and
    its rate and decay multipliers."""
    return {"shape": list(param.shape), "dtype": np.dtype(param.dtype).name, "grad_req": param.grad_req,
            "stype": param.grad_stype, "lr_mult": float(param.lr_mult), "wd_mult": float(param.wd_mult)}


def _drive_shards(comm: Communicator, steps: list[Any]) -> None:
    """Run the sharded updates of one arena's mirrors together (:meth:`ArenaUpdater.steps`).

    A rule with per-parameter norms yields each shard's table of partial sums between its launches:
    the tables of every device and process are added by one small all-reduce (float64) before every
    shard goes on, so each sees its parameters' whole norms.
    """
    while True:
        tables = [next(step, None) for step in steps]
        if all(table is None for table in tables):
            return
        if any(table is None for table in tables):
            raise RuntimeError("the shards of one arena disagree on their launches (a sharded update must run "
                               "the same rule on every device)")
        comm.allreduce(tables).wait()


def _sum_row_sparse_into_all(param: Parameter) -> None:
    """Sum row-sparse gradients over mirrors; every mirror's gradient becomes the sum."""
    mirrors = param.list_data()
    home = mirrors[0].device
    total = mirrors[0].grad
    for leaf in mirrors[1:]:
        total = sparse.add_any(total, _row_sparse_to(leaf.grad, home), param.shape)
    for leaf in mirrors:
        leaf.grad = _row_sparse_to(total, leaf.device)


def _row_sparse_to(rs: sparse.RowSparseTensor, device: Any) -> sparse.RowSparseTensor:
    return sparse.RowSparseTensor(rs.data.copyto(device), rs.indices.copyto(device), rs.shape)


def _raise_if_not_finite(params: list[Parameter]) -> None:
    """FloatingPointError naming the first parameter whose (summed) gradient holds inf or NaN.

    One flag is read per device; only when it says inf/NaN are the parameters checked one by one.
    """
    if all_gradients_finite(params):
        return
    finite = gradients_finite(params)
    if not all(finite):
        param = params[finite.index(False)]
        raise FloatingPointError(f"the gradient of Parameter {param.label!r} holds inf or NaN (on "
                                 f"{param.list_device()[0]}, after the sum over devices and workers); "
                                 "the step was not applied")


def _make_codec(compression_params: Any) -> Any:
    """The compression codec for ``compression_params`` (None: no compression); ValueError when malformed."""
    if not compression_params:
        return None
    from ..comm import compression  # noqa: PLC0415 - loaded only when compression is asked for

    return compression.create(compression_params)
