"""A rank of the KVStore multi-process test (run by tests/test_kvstore.py under ``mpiexec -n 2``).

Usage: ``python tests/kvstore_worker.py OUT_DIR``. Each rank uses a 'dist_sync' store with two
CPU devices and writes what it saw to ``OUT_DIR/rank{r}.npz``:

* ``init``: the value pulled after every rank initialised the key with its own value (rank + 1);
* ``sum``: the pull after pushing ``[rank + 1 on cpu(0), 10 * (rank + 1) on cpu(1)]``;
* ``random_sum``: the pull after pushing :func:`dense_grads` (checked bit for bit);
* ``sgd``: a store with SGD after pushing ``rank + 1`` (the update of the summed 3);
* ``rows``, ``rsp_indices``, ``rsp_data``: a row-sparse push (rank 0 rows 0 and 3, rank 1 rows 3
  and 4), pulled dense and with ``row_sparse_pull`` of rows ``[3, 0, 3]``;
* ``before_barrier``/``after_barrier``: wall-clock times around ``barrier()`` (rank 1 arrives late);
* ``compressed``: 2-bit compression over the ranks, when ``mxlite.comm.compression`` exists.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import mxlite as mx
from mxlite.ops.sparse import row_sparse_array

SHAPE = (2, 3)
DEVICES = [mx.cpu(0), mx.cpu(1)]


def dense_grads() -> list[list[np.ndarray]]:
    """``[rank][position]`` float32 values whose sum depends on the order of the additions."""
    rng = np.random.default_rng(7)
    return [[rng.normal(size=SHAPE).astype(np.float32) * 10 ** rng.integers(-3, 3, size=SHAPE).astype(np.float32)
             for _ in DEVICES] for _ in range(2)]


def _sgd_store(kind: str) -> mx.kv.KVStore:
    kv = mx.kv.create(kind)
    kv.init("v", mx.zeros(3))
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.1, wd=0.01))
    return kv


def expected_sgd() -> np.ndarray:
    """What the SGD store holds after one push summing to 3, computed by one process."""
    kv = _sgd_store("local")
    kv.push("v", mx.full(3, 3.0))
    out = mx.zeros(3)
    kv.pull("v", out=out)
    return out.asnumpy()


def _pull(kv, key, shape):
    out = mx.zeros(shape)
    kv.pull(key, out=out)
    return out.asnumpy()


def main(out_dir: str) -> None:
    kv = mx.kv.create("dist_sync")
    r = kv.rank
    seen: dict[str, object] = {"rank": r, "num_workers": kv.num_workers}
    kv.init("a", mx.full(SHAPE, r + 1.0))
    seen["init"] = _pull(kv, "a", SHAPE)
    kv.push("a", [mx.full(SHAPE, r + 1.0, device=DEVICES[0]), mx.full(SHAPE, 10.0 * (r + 1), device=DEVICES[1])])
    seen["sum"] = _pull(kv, "a", SHAPE)

    kv.init("g", mx.zeros(SHAPE))
    kv.push("g", [mx.array(g, device=d) for g, d in zip(dense_grads()[r], DEVICES)])
    seen["random_sum"] = _pull(kv, "g", SHAPE)

    sgd = _sgd_store("dist_sync")
    sgd.push("v", mx.full(3, r + 1.0))
    seen["sgd"] = _pull(sgd, "v", 3)

    kv.init("e", mx.zeros((5, 2)))
    rows = [[0, 3], [3, 4]][r]
    values = [np.array([[1.0, 1.0], [2.0, 2.0]]), np.array([[10.0, 10.0], [20.0, 20.0]])][r]
    kv.push("e", row_sparse_array((values, rows), shape=(5, 2), device=DEVICES[r], dtype="float32"))
    seen["rows"] = _pull(kv, "e", (5, 2))
    picked = mx.sparse.zeros((5, 2))
    kv.row_sparse_pull("e", out=picked, row_ids=mx.array([3, 0, 3], dtype="int64"))
    seen["rsp_indices"], seen["rsp_data"] = picked.indices.asnumpy(), picked.data.asnumpy()

    if r == 1:
        time.sleep(0.3)
    seen["before_barrier"] = time.time()
    kv.barrier()
    seen["after_barrier"] = time.time()

    try:
        import mxlite.comm.compression  # noqa: F401
    except ImportError:
        pass
    else:
        ckv = mx.kv.create("dist_sync")
        ckv.set_gradient_compression({"type": "2bit", "threshold": 0.5})
        ckv.init(0, mx.zeros(5))
        grad = [[0.3, 0.6, -0.7, 0.0, 0.5], [0.5, -0.2, 0.1, -0.5, 0.5]][r]
        ckv.push(0, mx.array(grad))
        seen["compressed"] = _pull(ckv, 0, 5)
    np.savez(os.path.join(out_dir, f"rank{r}.npz"), **{k: np.asarray(v) for k, v in seen.items()})


if __name__ == "__main__":
    main(sys.argv[1])
