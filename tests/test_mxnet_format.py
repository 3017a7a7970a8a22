"""MXNet's binary NDArray-list format: reading what MXNet writes, writing it, and loading it into models.

The fixtures are built here byte by byte with ``struct`` from the documented layout (MXNet's
``src/ndarray/ndarray.cc`` ``NDArray::Save``/``Load``/``LegacyLoad``, ``include/mxnet/tuple.h``,
``include/mxnet/base.h`` ``Context``, dmlc-core's serializers, mshadow's ``TypeFlag``), independently
of mxlite's reader and writer:

    u64 0x112 | u64 0 | u64 count | arrays | u64 n_names | (u64 len | bytes)*
    V2/V3 array: u32 magic | i32 stype | i32 ndim | i64 dims | i32 dev_type | i32 dev_id | i32 flag | data
    V1 array:    u32 0xF993FAC8 | i32 ndim | i64 dims | ctx | flag | data
    legacy:      u32 ndim | u32 dims | ctx | flag | data
"""

from __future__ import annotations

import os
import re
import struct

import numpy as np
import pytest

import mxlite as mx
from mxlite.formats import mxnet_params as fmt

LIST, V1, V2, V3 = 0x112, 0xF993FAC8, 0xF993FAC9, 0xF993FACA
FLAGS = {"float32": 0, "float64": 1, "float16": 2, "uint8": 3, "int32": 4, "int8": 5, "int64": 6, "bool": 7,
         "int16": 8, "uint16": 9, "uint32": 10, "uint64": 11}
CPU, GPU = (1, 0), (2, 1)


# -- independent builders of the documented layout ---------------------------------------------
def _raw(value: np.ndarray) -> bytes:
    """Little-endian C-order bytes of ``value`` (bool as one byte 0/1)."""
    if value.dtype == np.bool_:
        return value.astype(np.uint8).tobytes()
    return value.astype(value.dtype.newbyteorder("<")).tobytes()


def dense_v2(value: np.ndarray, magic: int = V2, ctx: tuple[int, int] = CPU, flag: int | None = None) -> bytes:
    flag = FLAGS[value.dtype.name] if flag is None else flag
    return (struct.pack("<I", magic) + struct.pack("<i", 0) + struct.pack("<i", value.ndim)
            + b"".join(struct.pack("<q", d) for d in value.shape) + struct.pack("<ii", *ctx)
            + struct.pack("<i", flag) + _raw(value))


def dense_v1(value: np.ndarray, ctx: tuple[int, int] = CPU) -> bytes:
    return (struct.pack("<I", V1) + struct.pack("<i", value.ndim) + b"".join(struct.pack("<q", d) for d in value.shape)
            + struct.pack("<ii", *ctx) + struct.pack("<i", FLAGS[value.dtype.name]) + _raw(value))


def dense_legacy(value: np.ndarray, ctx: tuple[int, int] = CPU) -> bytes:
    return (struct.pack("<I", value.ndim) + b"".join(struct.pack("<I", d) for d in value.shape)
            + struct.pack("<ii", *ctx) + struct.pack("<i", FLAGS[value.dtype.name]) + _raw(value))


def row_sparse(values: np.ndarray, rows: np.ndarray, shape: tuple[int, ...]) -> bytes:
    """A V2 row_sparse array: stype 1, storage shape, shape, ctx, flag, aux (int64 indices), data, aux data."""
    return (struct.pack("<Ii", V2, 1) + struct.pack(f"<i{values.ndim}q", values.ndim, *values.shape)
            + struct.pack(f"<i{len(shape)}q", len(shape), *shape) + struct.pack("<ii", *CPU)
            + struct.pack("<i", 0) + struct.pack("<i", 6) + struct.pack("<iq", 1, len(rows))
            + values.astype("<f4").tobytes() + rows.astype("<i8").tobytes())


def csr(data: np.ndarray, indptr: np.ndarray, indices: np.ndarray, shape: tuple[int, int]) -> bytes:
    """A V2 csr array: stype 2, two aux arrays (indptr, indices)."""
    return (struct.pack("<Ii", V2, 2) + struct.pack("<iq", 1, len(data)) + struct.pack("<iqq", 2, *shape)
            + struct.pack("<ii", *CPU) + struct.pack("<i", 0)
            + struct.pack("<iiq", 6, 1, len(indptr)) + struct.pack("<iiq", 6, 1, len(indices))
            + data.astype("<f4").tobytes() + indptr.astype("<i8").tobytes() + indices.astype("<i8").tobytes())


def listing(arrays: list[bytes], names: list[str] | None = None) -> bytes:
    out = struct.pack("<QQQ", LIST, 0, len(arrays)) + b"".join(arrays)
    names = names or []
    out += struct.pack("<Q", len(names))
    for n in names:
        out += struct.pack("<Q", len(n.encode())) + n.encode()
    return out


def _write(tmp_path, data: bytes, name: str = "model.params"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


RNG = np.random.default_rng(7)
SAMPLES = {
    "float32": RNG.standard_normal((2, 3)).astype(np.float32),
    "float64": RNG.standard_normal((4,)),
    "float16": np.array([[0.5, -2.0], [np.inf, 65504.0]], dtype=np.float16),
    "uint8": np.array([0, 7, 255], dtype=np.uint8),
    "int8": np.array([[-128, 0, 127]], dtype=np.int8),
    "int32": np.array([-(2**31), 5, 2**31 - 1], dtype=np.int32),
    "int64": np.array([[-(2**63)], [2**62 + 3]], dtype=np.int64),
    "bool": np.array([[True, False, True]]),
    "int16": np.array([-3, 30000], dtype=np.int16),
    "uint16": np.array([65535, 1], dtype=np.uint16),
    "uint32": np.array([2**32 - 1], dtype=np.uint32),
    "uint64": np.array([2**64 - 1, 0], dtype=np.uint64),
}


# -- reading each variant ----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", sorted(SAMPLES))
def test_v2_named_every_dtype(tmp_path, dtype):
    value = SAMPLES[dtype]
    path = _write(tmp_path, listing([dense_v2(value), dense_v2(value[..., :1])], ["w", "b"]))
    loaded = mx.nd.load(path)
    assert list(loaded) == ["w", "b"]
    assert _same(loaded["w"].asnumpy(), value) and _same(loaded["b"].asnumpy(), value[..., :1])


def test_v3_numpy_shape_keeps_scalars_and_zero_size(tmp_path):
    scalar, empty, matrix = np.array(2.5, dtype=np.float32), np.zeros((0, 3), np.int64), np.arange(6.0).reshape(2, 3)
    path = _write(tmp_path, listing([dense_v2(scalar, V3), dense_v2(empty, V3), dense_v2(matrix, V3)]))
    back = mx.npx.load(path)
    assert isinstance(back, list) and [b.shape for b in back] == [(), (0, 3), (2, 3)]
    assert _same(back[0].asnumpy(), scalar) and _same(back[1].asnumpy(), empty) and _same(back[2].asnumpy(), matrix)


def test_v1_int64_shape(tmp_path):
    value = SAMPLES["float32"]
    names, arrays = fmt.decode(listing([dense_v1(value), dense_v1(SAMPLES["int64"], GPU)], ["a", "b"]))
    assert names == ["a", "b"] and _same(arrays[0], value) and _same(arrays[1], SAMPLES["int64"])


def test_legacy_u32_shape(tmp_path):
    value = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    path = _write(tmp_path, listing([dense_legacy(value), dense_legacy(SAMPLES["uint8"])]))
    back = mx.nd.load(path)
    assert isinstance(back, list) and _same(back[0].asnumpy(), value) and _same(back[1].asnumpy(), SAMPLES["uint8"])


def test_v1_and_legacy_zero_size_arrays_carry_their_context_and_dtype():
    """Only ndim 0 is an uninitialised array in V1/legacy files: MXNet's writers of that era ended an
    array after its shape only when it was none (no storage), so a zero-size array of known shape was
    written whole (context, dtype flag, no data bytes); MXNet's readers, old (``ndim() == 0``) and new
    (``shape_is_none``: an unknown shape), read it back as a zero-size array."""
    empty, after = np.zeros((0, 3), np.float32), np.arange(4, dtype=np.int32)
    for build in (dense_v1, dense_legacy):
        names, arrays = fmt.decode(listing([build(empty), build(after)], ["empty", "after"]))
        assert names == ["empty", "after"] and _same(arrays[0], empty) and _same(arrays[1], after)


def test_gpu_context_and_mixed_variants_in_one_file():
    a, b, c, d = (np.arange(3, dtype=np.float32) + k for k in range(4))
    names, arrays = fmt.decode(listing([dense_v2(a, ctx=GPU), dense_v2(b, V3, ctx=(3, 0)), dense_v1(c),
                                        dense_legacy(d, ctx=(5, 0))], ["a", "b", "c", "d"]))
    assert names == list("abcd") and all(_same(x, y) for x, y in zip(arrays, [a, b, c, d]))


def test_bfloat16_reads_as_exact_float32():
    values = np.array([1.0, -2.5, 3.140625, np.inf, 2.0**-130, -0.0], dtype=np.float32)
    bits = (values.view(np.uint32) >> 16).astype("<u2")  # these values are exact in bfloat16
    raw = (struct.pack("<Iiiqii", V2, 0, 1, len(values), *CPU) + struct.pack("<i", 12) + bits.tobytes())
    names, arrays = fmt.decode(listing([raw], ["x"]))
    assert arrays[0].dtype == np.float32 and np.array_equal(arrays[0], values)


def test_empty_list_and_empty_dict():
    assert fmt.decode(listing([])) == (None, [])


def test_detection_ignores_the_file_name(tmp_path):
    value = SAMPLES["float32"]
    mx_path = _write(tmp_path, listing([dense_v2(value)], ["x"]), "looks_like.npz")
    assert _same(mx.nd.load(mx_path)["x"].asnumpy(), value)
    npz_path = tmp_path / "looks_like.params"
    mx.nd.save(npz_path, {"x": mx.nd.array(value)})
    assert npz_path.read_bytes()[:2] == b"PK"  # the default stays .npz
    assert _same(mx.nd.load(npz_path)["x"].asnumpy(), value)


# -- writing -----------------------------------------------------------------------------------
def test_writer_is_byte_exact_with_the_documented_layout():
    values = [SAMPLES[k] for k in sorted(SAMPLES)]
    names = sorted(SAMPLES)
    assert fmt.encode(values, names) == listing([dense_v2(v) for v in values], names)
    assert fmt.encode(values, None, np_shape=True) == listing([dense_v2(v, V3) for v in values])


@pytest.mark.parametrize("np_shape", [False, True])
@pytest.mark.parametrize("named", [False, True])
def test_encode_decode_round_trip(np_shape, named):
    values = list(SAMPLES.values()) + [np.asfortranarray(np.arange(6.0).reshape(2, 3)),
                                       np.arange(4, dtype=">i4"), np.zeros((2, 0), np.float32)]
    if np_shape:
        values.append(np.array(7, dtype=np.int64))
    names = [f"p{i}" for i in range(len(values))] if named else None
    back_names, back = fmt.decode(fmt.encode(values, names, np_shape))
    assert back_names == names
    for got, want in zip(back, values):
        assert got.dtype == want.dtype.newbyteorder("=") and np.array_equal(got, want)


def test_nd_and_npx_save_in_mxnet_format_round_trip(tmp_path):
    path = tmp_path / "arrays.params"
    data = {"w": mx.nd.array(SAMPLES["float32"]), "mask": mx.nd.array(SAMPLES["bool"]),
            "h": mx.nd.array(SAMPLES["float16"])}
    mx.nd.save(path, data, format="mxnet")
    raw = path.read_bytes()
    assert raw[:8] == struct.pack("<Q", LIST) and raw[24:28] == struct.pack("<I", V2)
    back = mx.nd.load(path)
    assert list(back) == list(data) and all(_same(back[k].asnumpy(), data[k].asnumpy()) for k in data)
    # nd.array gives float32 unless told (MXNet 1.x), so the int64 sample names its dtype
    mx.npx.save(path, [mx.nd.array(SAMPLES["int64"], dtype="int64"), mx.np.array(np.array(1.5, np.float32))],
                format="mxnet")
    assert path.read_bytes()[24:28] == struct.pack("<I", V3)
    back = mx.npx.load(path)
    assert isinstance(back, list) and _same(back[0].asnumpy(), SAMPLES["int64"]) and back[1].shape == ()
    mx.nd.save(path, mx.nd.ones((2,)), format="mxnet")  # a single array: an unnamed list of one
    assert [b.shape for b in mx.nd.load(path)] == [(2,)]


def test_save_format_errors(tmp_path):
    path = tmp_path / "x.params"
    with pytest.raises(ValueError, match=r"save: format must be 'npz' or 'mxnet', got 'pickle'"):
        mx.nd.save(path, [mx.nd.ones(2)], format="pickle")
    with pytest.raises(ValueError, match=r"array #0 is 0-d.*mx\.npx\.save"):
        mx.nd.save(path, [mx.np.array(np.array(1.0, np.float32))], format="mxnet")
    with pytest.raises(TypeError, match=r"array 'z': dtype complex64 has no MXNet type flag"):
        mx.nd.save(path, {"z": np.ones(2, np.complex64)}, format="mxnet")
    with pytest.raises(TypeError, match=r"entry 'a' is a str, not a Tensor"):
        mx.nd.save(path, {"a": "nope"}, format="mxnet")
    assert not path.exists()  # nothing is written when the data is refused


# -- models ------------------------------------------------------------------------------------
def _net(seed: int | None = None):
    net = mx.nn.Sequential(mx.nn.Dense(3, in_units=4), mx.nn.Dense(2, in_units=3))
    net.initialize()
    if seed is not None:
        rng = np.random.default_rng(seed)
        for p in net.collect_params().values():
            p.set_data(rng.standard_normal(p.shape).astype(np.float32))
    return net


def _values(net) -> dict[str, np.ndarray]:
    return {k: p.data().asnumpy().copy() for k, p in net.collect_params().items()}


def _mxnet_params(values: dict[str, np.ndarray], prefix: str = "", magic: int = V2) -> bytes:
    return listing([dense_v2(v, magic) for v in values.values()], [prefix + k for k in values])


@pytest.mark.parametrize("magic", [V2, V3])
def test_load_parameters_of_an_mxnet_file(tmp_path, magic):
    src = _values(_net(1))
    path = _write(tmp_path, _mxnet_params(src, magic=magic))
    net = _net(2)
    net.load_parameters(path)
    assert all(np.array_equal(v, src[k]) for k, v in _values(net).items())
    fresh = mx.nn.Sequential(mx.nn.Dense(3), mx.nn.Dense(2))  # deferred shapes come from the file
    fresh.load_parameters(path)
    assert all(np.array_equal(v, src[k]) for k, v in _values(fresh).items())
    out = fresh(mx.nd.ones((1, 4)))
    assert out.shape == (1, 2)


def test_arg_aux_prefixes_are_stripped(tmp_path):
    src = _values(_net(3))
    items = list(src.items())
    data = listing([dense_v2(v) for _, v in items],
                   [("arg:" if i % 2 else "aux:") + k for i, (k, _) in enumerate(items)])
    path = _write(tmp_path, data)
    net = _net(4)
    net.load_parameters(path)
    assert all(np.array_equal(v, src[k]) for k, v in _values(net).items())
    other = _net(5)
    other.collect_params().load(path)
    assert all(np.array_equal(v, src[k]) for k, v in _values(other).items())


def test_parameter_dict_load_with_restore_prefix(tmp_path):
    src = _values(_net(6))
    first = {k[2:]: v for k, v in src.items() if k.startswith("0.")}  # 'weight', 'bias'
    path = _write(tmp_path, _mxnet_params(first, prefix="arg:"))
    net = _net(7)
    net.collect_params().select(r"0\.").load(path, restore_prefix="0.")
    assert np.array_equal(_values(net)["0.weight"], src["0.weight"])


def test_prefix_collision_is_refused(tmp_path):
    src = _values(_net(8))
    names = list(src)
    data = listing([dense_v2(v) for v in src.values()] + [dense_v2(src[names[0]])], names + ["arg:" + names[0]])
    path = _write(tmp_path, data)
    net = _net(9)
    before = _values(net)
    with pytest.raises(ValueError, match=rf"{re.escape(repr(str(path)))}: '0\.weight' and 'arg:0\.weight' both "
                                         r"name parameter '0\.weight'"):
        net.load_parameters(path)
    _assert_unchanged(net, before)


def _assert_unchanged(net, before: dict[str, np.ndarray]) -> None:
    after = _values(net)
    assert after.keys() == before.keys() and all(np.array_equal(after[k], before[k]) for k in before)


def test_mxnet_file_mismatches_are_reported_like_npz_ones(tmp_path):
    src = _values(_net(10))
    src["0.weight"] = src["0.weight"][:, :2]  # wrong shape
    src["1.bias"] = src["1.bias"].astype(np.float64)  # wrong dtype
    path = _write(tmp_path, _mxnet_params(src))
    net = _net(11)
    before = _values(net)
    with pytest.raises(ValueError) as info:
        net.load_parameters(path)
    msg = str(info.value)
    assert repr(str(path)) in msg and "'0.weight': shape (3, 4)" in msg and "'1.bias': dtype float32" in msg
    _assert_unchanged(net, before)
    src["0.weight"] = _values(_net(10))["0.weight"]
    _write(tmp_path, _mxnet_params(src))
    net.load_parameters(path, cast_dtype=True)  # dtype_source 'current': the model stays float32
    assert _values(net)["1.bias"].dtype == np.float32 and np.allclose(_values(net)["1.bias"], src["1.bias"])


# -- refusals ------------------------------------------------------------------------------------
def _bad_files(tmp_path) -> dict[str, tuple[bytes, str]]:
    """name -> (file bytes, what the error must say)."""
    src = _values(_net(12))
    good = _mxnet_params(src)
    names = list(src)
    body = struct.pack("<QQQ", LIST, 0, len(src)) + b"".join(dense_v2(v) for v in src.values())
    two_names = (struct.pack("<QQQ", LIST, 0, 1) + dense_v2(src[names[0]]) + struct.pack("<Q", 2)
                 + b"".join(struct.pack("<Q", len(n)) + n.encode() for n in names[:2]))
    sparse = listing([dense_v2(src[names[0]]), row_sparse(np.ones((1, 4)), np.array([2]), (3, 4))] +
                     [dense_v2(src[n]) for n in names[2:]], [names[0], names[1]] + names[2:])
    sparse_csr = listing([csr(np.ones(2), np.array([0, 1, 2]), np.array([0, 3]), (2, 4))], ["m"])
    unknown_flag = listing([dense_v2(src[names[0]], flag=99)], names[:1])
    unknown_stype = listing([struct.pack("<Ii", V2, 7) + dense_v2(src[names[0]])[8:]], names[:1])
    bad_magic = listing([struct.pack("<I", 0xDEADBEEF) + dense_v2(src[names[0]])[4:]], names[:1])
    bad_device = listing([dense_v2(src[names[0]], ctx=(9, 0))], names[:1])
    none = listing([struct.pack("<Iii", V2, 0, 0)], names[:1])  # V2 ndim 0: an uninitialised NDArray
    return {
        "truncated": (body[:-5], r"truncated: array #3 \(of 4\): its 2 float32 values of shape \(2,\)"),
        "truncated-names": (good[:-3], r"truncated: name #3 needs"),
        "trailing": (good + b"\0", r"1 unexpected bytes after the end of the list"),
        "row-sparse": (sparse, r"'0\.bias' \(#1\) has row_sparse storage \(shape \(3, 4\)\); only dense arrays"),
        "csr": (sparse_csr, r"'m' \(#0\) has csr storage"),
        "unknown-dtype": (unknown_flag, r"array #0 \(of 1\) has dtype flag 99, not one MXNet defines"),
        "unknown-stype": (unknown_stype, r"array #0 \(of 1\) has storage type 7"),
        "bad-array-magic": (bad_magic, r"array #0 \(of 1\) starts with 0xdeadbeef, not an NDArray magic"),
        "bad-device": (bad_device, r"device type 9"),
        "none-array": (none, r"'0\.weight' \(#0\) is an empty \(uninitialised\) NDArray"),
        "name-count": (two_names, r"2 names for 1 arrays"),
        "duplicate-name": (listing([dense_v2(src[n]) for n in names[:2]], [names[0], names[0]]),
                           r"the name '0\.weight' is given to two arrays"),
        "not-utf8": (listing([dense_v2(src[names[0]])], ["x"])[:-1] + b"\xff", r"name #0 .* is not UTF-8"),
        "huge-count": (struct.pack("<QQQ", LIST, 0, 2**60) + b"\0" * 16,
                       r"truncated or corrupt: the header announces 1152921504606846976 arrays"),
        "huge-shape": (listing([struct.pack("<Iiiqqiii", V2, 0, 2, 2**40, 2**40, *CPU, 0) + b"\0" * 64], ["x"]),
                       r"truncated: array #0 \(of 1\): its 1208925819614629174706176 float32 values"),
        "unnamed-list": (listing([dense_v2(src[n]) for n in names]), r"holding an unnamed list of 4 arrays"),
        "bad-list-magic": (struct.pack("<Q", 0x113) + good[8:], r"as an mxlite \.npz file.*nor is it an MXNet"),
        "magic-prefix": (good[:5], r"truncated: the header"),
    }


BAD = ["truncated", "truncated-names", "trailing", "row-sparse", "csr", "unknown-dtype", "unknown-stype",
       "bad-array-magic", "bad-device", "none-array", "name-count", "duplicate-name", "not-utf8", "huge-count",
       "huge-shape", "unnamed-list", "bad-list-magic", "magic-prefix"]


@pytest.mark.parametrize("kind", BAD)
def test_bad_files_are_refused_and_change_nothing(tmp_path, kind):
    data, what = _bad_files(tmp_path)[kind]
    path = _write(tmp_path, data, f"{kind}.params")
    net = _net(13)
    before = _values(net)
    with pytest.raises(ValueError, match=rf"{re.escape(repr(str(path)))}.*({what})"):
        net.load_parameters(path)
    _assert_unchanged(net, before)
    with pytest.raises(ValueError, match=re.escape(repr(str(path)))):
        net.collect_params().load(path)
    _assert_unchanged(net, before)
    if kind != "unnamed-list":  # nd.load reads unnamed lists
        with pytest.raises(ValueError, match=re.escape(repr(str(path)))):
            mx.nd.load(path)


def test_every_truncation_is_a_value_error(tmp_path):
    good = listing([dense_v2(SAMPLES["float32"]), dense_v1(SAMPLES["int8"]), dense_legacy(SAMPLES["uint8"]),
                    row_sparse(np.ones((1, 2)), np.array([0]), (2, 2))], ["a", "b", "c", "d"])
    for cut in range(1, len(good)):
        with pytest.raises(ValueError, match=r"cannot read '<cut>' as an MXNet NDArray file: truncated"):
            fmt.decode(good[:cut], "<cut>")


@pytest.mark.parametrize("magic", [V2, V3, V1])
def test_zero_size_array_with_a_dimension_numpy_cannot_hold(magic):
    """(0, 2**62): no data bytes to be missing, but NumPy cannot make the array: still the file's error."""
    dims = (0, 2**62)
    head = struct.pack("<I", magic) if magic == V1 else struct.pack("<Ii", magic, 0)  # V1: no storage type
    array = head + struct.pack("<iqq", 2, *dims) + struct.pack("<ii", *CPU) + struct.pack("<i", 0)
    with pytest.raises(fmt.MXNetFormatError,
                       match=r"^cannot read '<zero>' as an MXNet NDArray file: array #0 \(of 1\) has shape "
                             r"\(0, 4611686018427387904\), which NumPy cannot hold"):
        fmt.decode(listing([array], ["x"]), "<zero>")


def test_damaged_bytes_never_escape_as_other_errors(tmp_path):
    src = _values(_net(14))
    good = _mxnet_params(src)
    rng = np.random.default_rng(0)
    for _ in range(300):
        damaged = bytearray(good)
        for pos in rng.integers(0, len(good), rng.integers(1, 4)):
            damaged[pos] = rng.integers(0, 256)
        try:
            names, arrays = fmt.decode(bytes(damaged), "damaged")
        except ValueError as exc:
            assert str(exc).startswith("cannot read 'damaged' as an MXNet NDArray file: ")
        else:
            assert len(names) == len(arrays) == 4


def test_no_pickle_is_ever_used(tmp_path, monkeypatch):
    import pickle  # noqa: PLC0415

    def refuse(*args, **kwargs):
        raise AssertionError("pickle used")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    path = _write(tmp_path, _mxnet_params(_values(_net(15))))
    _net().load_parameters(path)
    mx.nd.load(path)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        mx.nd.load(tmp_path / "nope.params")
    with pytest.raises(FileNotFoundError):
        _net().load_parameters(os.fspath(tmp_path / "nope.params"))
