"""MXNet's own KVStore unit tests (tests/python/unittest/test_kvstore.py), replayed on mxlite.

Each test names the MXNet test it mirrors. The calls are the ones a Gluon user makes, with
``import mxlite as mx``; the expected values are MXNet's. Where MXNet raises ``MXNetError``,
mxlite raises a Python error type (docs/mxnet-differences.md, "errors").
"""

import numpy as np
import pytest

import mxlite as mx

SHAPE = (4, 4)
INT_KEYS = [5, 7, 11]
STR_KEYS = ["b", "c", "d"]
STYPES = ["default", "row_sparse"]


def _store_int(stype="default"):
    kv = mx.kv.create()
    kv.init(3, mx.nd.zeros(SHAPE, stype=stype))
    kv.init(INT_KEYS, [mx.nd.zeros(SHAPE, stype=stype)] * len(INT_KEYS))
    return kv


def _store_str(stype="default"):
    kv = mx.kv.create()
    kv.init("a", mx.nd.zeros(SHAPE, stype=stype))
    kv.init(STR_KEYS, [mx.nd.zeros(SHAPE, stype=stype)] * len(STR_KEYS))
    return kv


def _all_equal(arr, value):
    assert np.abs(arr.asnumpy() - value).sum() == 0, arr.asnumpy()


def _random_rsp(shape, device):
    dense = np.random.uniform(-1, 1, size=shape).astype(np.float32)
    dense[np.random.rand(shape[0]) < 0.5] = 0
    return mx.nd.array(dense, device).tostype("row_sparse")


@pytest.mark.parametrize("stype", STYPES)
def test_single_kv_pair(stype):
    """Mirrors MXNet's ``test_single_kv_pair``: push ones under one key, pull back ones."""
    for kv, key in ((_store_int(), 3), (_store_str(), "a")):
        kv.push(key, mx.nd.ones(SHAPE).tostype(stype))
        out = mx.nd.empty(SHAPE)
        kv.pull(key, out=out)
        _all_equal(out, 1)


@pytest.mark.parametrize("count", [1, 4])
def test_row_sparse_pull(count):
    """Mirrors MXNet's ``test_row_sparse_pull``: pulled rows are the stored ones, the others zero."""
    kv = _store_str("row_sparse")
    kv.init("e", mx.nd.ones(SHAPE).tostype("row_sparse"))
    rows = SHAPE[0]
    outs, ids = [], []
    for _ in range(count):
        outs.append(mx.nd.zeros(SHAPE).tostype("row_sparse"))
        ids.append(mx.nd.array(np.random.randint(rows, size=rows)).reshape((2, rows // 2)))
    kv.row_sparse_pull("e", out=outs[0] if count == 1 else outs, row_ids=ids[0] if count == 1 else ids)
    for out, row_id in zip(outs, ids):
        got = out.asnumpy()
        kept = set(row_id.asnumpy().astype(int).ravel().tolist())
        for r in range(rows):
            np.testing.assert_allclose(got[r], np.full(SHAPE[1], 1.0 if r in kept else 0.0))


@pytest.mark.parametrize("key", [3, "a"])
def test_init(key):
    """Mirrors MXNet's ``test_init``: a pull right after init returns the initial value."""
    kv = mx.kv.create()
    kv.init(key, mx.nd.ones(SHAPE) * 4)
    out = mx.nd.zeros(SHAPE)
    kv.pull(key, out=out)
    _all_equal(out, 4)


@pytest.mark.parametrize("kind", ["device", "local"])
def test_pull(kind):
    """Mirrors MXNet's ``test_pull``: four pushed ones sum to 4; an untouched key pulls its init value."""
    kv = mx.kv.create(kind)
    a, b = mx.nd.ones(SHAPE), mx.nd.zeros(SHAPE)
    kv.init("1", mx.nd.zeros(SHAPE))
    kv.push("1", [a, a, a, a])
    kv.pull("1", b)
    _all_equal(b, 4)
    kv.init("2", mx.nd.zeros(SHAPE))
    kv.pull("2", b)
    _all_equal(b, 0)


@pytest.mark.parametrize("stype", STYPES)
def test_list_kv_pair(stype):
    """Mirrors MXNet's ``test_list_kv_pair``: push and pull a list of keys at once."""
    for kv, keys in ((_store_int(), INT_KEYS), (_store_str(), STR_KEYS)):
        kv.push(keys, [mx.nd.ones(SHAPE).tostype(stype) * 4] * len(keys))
        outs = [mx.nd.empty(SHAPE)] * len(keys)
        kv.pull(keys, out=outs)
        for out in outs:
            _all_equal(out, 4)


@pytest.mark.parametrize("stype", STYPES)
def test_aggregator(stype):
    """Mirrors MXNet's ``test_aggregator``: values pushed from 4 devices are summed; pull fills every device."""
    n = 4
    devs = [mx.Context("cpu", i) for i in range(n)]
    for kv, key, keys in ((_store_int(), 3, INT_KEYS), (_store_str(), "a", STR_KEYS)):
        vals = [mx.nd.ones(SHAPE, d).tostype(stype) for d in devs]
        outs = [mx.nd.empty(SHAPE, d) for d in devs]
        kv.push(key, vals)
        kv.pull(key, out=outs)
        for out in outs:
            _all_equal(out, n)
        vals = [[mx.nd.ones(SHAPE, d).tostype(stype) * 2.0 for d in devs]] * len(keys)
        outs = [[mx.nd.empty(SHAPE, d) for d in devs]] * len(keys)
        kv.push(keys, vals)
        kv.pull(keys, out=outs)
        for per_key in outs:
            for out in per_key:
                _all_equal(out, n * 2.0)


@pytest.mark.parametrize("sparse_pull", [False, True])
def test_sparse_aggregator(sparse_pull):
    """Mirrors MXNet's ``test_sparse_aggregator``: row-sparse pushes from 4 devices sum; every output gets the sum."""
    kv = _store_str("row_sparse")
    n = 4
    devs = [mx.Context("cpu", i) for i in range(n)]
    vals = [_random_rsp(SHAPE, devs[i]) for i in range(n)]
    expected = sum(v.asnumpy() for v in vals)
    kv.push("a", vals)
    all_rows = mx.nd.array(np.arange(SHAPE[0]))
    if sparse_pull:
        kv.row_sparse_pull("a", out=vals, row_ids=[all_rows] * len(vals))
    else:
        kv.pull("a", out=vals, ignore_sparse=False)
    np.testing.assert_allclose(sum(v.asnumpy() for v in vals), expected * n, rtol=1e-5, atol=1e-6)

    vals = [[_random_rsp(SHAPE, devs[i]) for i in range(n)]] * len(STR_KEYS)
    expected = sum(v.asnumpy() for v in vals[0])
    kv.push(STR_KEYS, vals)
    if sparse_pull:
        kv.row_sparse_pull(STR_KEYS, out=vals, row_ids=[[all_rows] * n] * len(vals))
    else:
        kv.pull(STR_KEYS, out=vals, ignore_sparse=False)
    for per_key in vals:
        np.testing.assert_allclose(sum(v.asnumpy() for v in per_key), expected * n, rtol=1e-5, atol=1e-6)


def _int_updater(key, recv, local):
    assert isinstance(key, int)
    local += recv


def _str_updater(key, recv, local):
    if isinstance(key, bytes):
        key = key.decode()
    assert isinstance(key, str)
    local += recv


@pytest.mark.parametrize("stype", STYPES)
def test_updater(stype):
    """Mirrors MXNet's ``test_updater``: a ``+=`` updater accumulates every push (keys keep their type)."""
    n = 4
    devs = [mx.Context("cpu", i) for i in range(n)]
    for kv, upd, key, keys in ((_store_int(), _int_updater, 3, INT_KEYS),
                               (_store_str(), _str_updater, "a", STR_KEYS)):
        kv._set_updater(upd)
        vals = [mx.nd.ones(SHAPE, d).tostype(stype) for d in devs]
        outs = [mx.nd.empty(SHAPE, d) for d in devs]
        kv.push(key, vals)
        kv.pull(key, out=outs)
        for out in outs:
            _all_equal(out, n)
        vals = [[mx.nd.ones(SHAPE, d).tostype(stype) for d in devs]] * len(keys)
        outs = [[mx.nd.empty(SHAPE, d) for d in devs]] * len(keys)
        pushes = 4
        for _ in range(pushes):
            kv.push(keys, vals)
        kv.pull(keys, out=outs)
        for per_key in outs:
            for out in per_key:
                _all_equal(out, n * pushes)


def test_get_type():
    """Mirrors MXNet's ``test_get_type``: ``create('local_allreduce_cpu').type`` is that name."""
    kv = mx.kv.create("local_allreduce_cpu")
    assert kv.type == "local_allreduce_cpu"


def test_invalid_pull():
    """Mirrors MXNet's ``test_invalid_pull``.

    A dense pull into row-sparse outputs is ignored (outputs keep their values); ``row_sparse_pull``
    into dense outputs fails; a store keyed by ints refuses str keys and the other way round.
    """
    errors = (ValueError, TypeError)
    stores = [_store_int(), _store_str()]
    single = [3, "a"]
    lists = [INT_KEYS, STR_KEYS]
    for i in range(2):
        kv = stores[i]
        rsp = (mx.nd.ones(SHAPE) * 2).tostype("row_sparse")
        kv.pull(single[i], out=rsp)
        _all_equal(rsp, 2)
        rsps = [v.tostype("row_sparse") for v in [mx.nd.ones(SHAPE) * 2] * len(lists[i])]
        kv.pull(lists[i], out=rsps)
        for v in rsps:
            _all_equal(v, 2)

        with pytest.raises(errors):
            kv.row_sparse_pull(single[i], out=mx.nd.ones(SHAPE) * 2, row_ids=mx.nd.array([1]))
        with pytest.raises(errors):
            kv.row_sparse_pull(lists[i], out=[mx.nd.ones(SHAPE) * 2] * len(lists[i]),
                               row_ids=[mx.nd.array([1])] * len(lists[i]))

        other, other_list = single[1 - i], lists[1 - i]
        dns = mx.nd.ones(SHAPE) * 2
        for fn, args, kwargs in ((kv.init, (other, dns), {}), (kv.push, (other, dns), {}),
                                 (kv.pull, (other, dns), {}),
                                 (kv.row_sparse_pull, (other, dns.tostype("row_sparse")),
                                  {"row_ids": mx.nd.array([1])})):
            with pytest.raises(errors):
                fn(*args, **kwargs)
        dnss = [dns] * len(other_list)
        rsps = [v.tostype("row_sparse") for v in dnss]
        for fn, args, kwargs in ((kv.init, (other_list, dnss), {}), (kv.push, (other_list, dnss), {}),
                                 (kv.pull, (other_list, dnss), {}),
                                 (kv.row_sparse_pull, (other_list, rsps),
                                  {"row_ids": [mx.nd.array([1])] * len(other_list)})):
            with pytest.raises(errors):
                fn(*args, **kwargs)
