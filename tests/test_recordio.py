"""mx.recordio: MXNet's RecordIO format byte for byte (files written here by the format's rules with
``struct``, no MXNet needed), the .idx index, the image-record header, and MXNet's own
tests/python/unittest/test_recordio.py replayed."""

from __future__ import annotations

import os
import random
import string
import struct

import numpy as np
import pytest

import mxlite as mx

MAGIC = 0xCED7230A


def _record(data: bytes, cflag: int = 0) -> bytes:
    """One record part as dmlc-core writes it: magic, (cflag << 29 | length), data, zero padding to 4 bytes."""
    return struct.pack("<II", MAGIC, (cflag << 29) | len(data)) + data + b"\0" * (-len(data) % 4)


# -- MXNet's tests/python/unittest/test_recordio.py ----------------------------------------------------------------
def test_recordio(tmp_path):
    frec = str(tmp_path / "rec")
    writer = mx.recordio.MXRecordIO(frec, "w")
    for i in range(255):
        writer.write(bytes(chr(i), "utf-8"))
    del writer
    reader = mx.recordio.MXRecordIO(frec, "r")
    for i in range(255):
        assert reader.read() == bytes(chr(i), "utf-8")
    assert reader.read() is None


def test_indexed_recordio(tmp_path):
    fidx, frec = str(tmp_path / "idx"), str(tmp_path / "rec")
    writer = mx.recordio.MXIndexedRecordIO(fidx, frec, "w")
    for i in range(255):
        writer.write_idx(i, bytes(chr(i), "utf-8"))
    del writer
    reader = mx.recordio.MXIndexedRecordIO(fidx, frec, "r")
    keys = list(reader.keys)
    assert sorted(keys) == list(range(255))
    random.Random(0).shuffle(keys)
    for i in keys:
        assert reader.read_idx(i) == bytes(chr(i), "utf-8")


def test_recordio_pack_label():
    rng = random.Random(0)
    for i in range(1, 40):
        for j in range(0, 40, 7):
            content = "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(j)).encode()
            label = np.random.default_rng(i).uniform(size=i).astype(np.float32)
            header, rcontent = mx.recordio.unpack(mx.recordio.pack((0, label, 0, 0), content))
            assert (label == header.label).all() and header.flag == i
            assert content == rcontent


# -- the format, byte for byte -------------------------------------------------------------------------------------
def test_writer_output_is_the_format_byte_for_byte(tmp_path):
    path = str(tmp_path / "a.rec")
    records = [b"", b"a", b"abcd", b"hello world"]
    with mx.recordio.MXRecordIO(path, "w") as writer:
        for r in records:
            writer.write(r)
    expected = b"".join(_record(r) for r in records)
    assert open(path, "rb").read() == expected
    assert len(expected) == 8 + 12 + 12 + 20  # padding to 4 bytes


def test_a_file_written_by_the_rules_reads_back(tmp_path):
    path = tmp_path / "hand.rec"
    # a whole record, then one cut in three parts at two magic numbers (dmlc-core's continuation flags 1, 2, 3)
    magic = struct.pack("<I", MAGIC)
    path.write_bytes(_record(b"first!") + _record(b"abcd", 1) + _record(b"", 2) + _record(b"xyz", 3))
    reader = mx.recordio.MXRecordIO(str(path), "r")
    assert reader.read() == b"first!"
    assert reader.read() == b"abcd" + magic + magic + b"xyz"
    assert reader.read() is None
    assert mx.recordio.record_offsets(str(path)) == [0, 16]


def test_data_holding_the_magic_number_is_cut_as_dmlc_core_cuts_it(tmp_path):
    magic = struct.pack("<I", MAGIC)
    data = b"abcd" + magic + magic + b"xyz" + magic  # the last one is not on a 4-byte boundary: kept as data
    path = str(tmp_path / "m.rec")
    with mx.recordio.MXRecordIO(path, "w") as writer:
        writer.write(data)
    assert open(path, "rb").read() == (_record(b"abcd", 1) + _record(b"", 2) + _record(b"xyz" + magic, 3))
    assert mx.recordio.MXRecordIO(path, "r").read() == data


def test_index_file_is_key_tab_offset(tmp_path):
    fidx, frec = str(tmp_path / "a.idx"), str(tmp_path / "a.rec")
    with mx.recordio.MXIndexedRecordIO(fidx, frec, "w") as writer:
        assert writer.tell() == 0
        for key, payload in ((5, b"x" * 7), (3, b"y"), (9, b"")):
            writer.write_idx(key, payload)
    assert open(fidx).read() == "5\t0\n3\t16\n9\t28\n"
    reader = mx.recordio.MXIndexedRecordIO(fidx, frec, "r")
    assert reader.keys == [5, 3, 9] and reader.idx == {5: 0, 3: 16, 9: 28}
    assert reader.read_idx(3) == b"y" and reader.read_idx(5) == b"x" * 7 and reader.read_idx(9) == b""
    with pytest.raises(KeyError, match=r"key 4 is not in .*a\.idx"):
        reader.read_idx(4)


def test_image_record_header_is_IfQQ(tmp_path):
    packed = mx.recordio.pack(mx.recordio.IRHeader(0, 3.5, 42, 7), b"IMG")
    assert packed == struct.pack("<IfQQ", 0, 3.5, 42, 7) + b"IMG"
    multi = mx.recordio.pack(mx.recordio.IRHeader(0, [1.0, 2.0, 4.0], 9, 0), b"IMG")
    assert multi == struct.pack("<IfQQ", 3, 0.0, 9, 0) + struct.pack("<3f", 1, 2, 4) + b"IMG"
    header, payload = mx.recordio.unpack(multi)
    assert header.flag == 3 and header.id == 9 and payload == b"IMG"
    np.testing.assert_array_equal(header.label, [1.0, 2.0, 4.0])
    header, payload = mx.recordio.unpack(packed)
    assert header == (0, 3.5, 42, 7) and payload == b"IMG"


def test_pack_img_and_unpack_img_round_trip():
    img = np.random.default_rng(0).integers(0, 256, (6, 9, 3), dtype=np.uint8)
    header, out = mx.recordio.unpack_img(mx.recordio.pack_img(mx.recordio.IRHeader(0, 1.0, 2, 0), img,
                                                              img_fmt=".png"))
    assert header.label == 1.0 and header.id == 2
    np.testing.assert_array_equal(out, img)  # PNG is lossless; BGR in, BGR out as OpenCV's
    smooth = np.broadcast_to(np.linspace(0, 250, 9, dtype=np.uint8)[None, :, None], (6, 9, 3))
    _, jpeg = mx.recordio.unpack_img(mx.recordio.pack_img((0, 1.0, 2, 0), smooth, quality=100))
    assert jpeg.shape == smooth.shape and np.abs(jpeg.astype(int) - smooth).max() <= 8


# -- errors name what is wrong ---------------------------------------------------------------------------------------
def test_bad_files_are_refused_naming_the_offset(tmp_path):
    bad = tmp_path / "bad.rec"
    bad.write_bytes(_record(b"ok") + struct.pack("<II", 0x12345678, 4) + b"abcd")
    reader = mx.recordio.MXRecordIO(str(bad), "r")
    assert reader.read() == b"ok"
    with pytest.raises(ValueError, match=r"at byte 12: magic number 0x12345678, expected 0xced7230a"):
        reader.read()
    short = tmp_path / "short.rec"
    short.write_bytes(_record(b"hello world")[:-4])
    with pytest.raises(ValueError, match=r"at byte 0 is truncated: 11 bytes announced"):
        mx.recordio.MXRecordIO(str(short), "r").read()
    with pytest.raises(ValueError, match="truncated"):
        mx.recordio.record_offsets(str(short))
    orphan = tmp_path / "orphan.rec"
    orphan.write_bytes(_record(b"tail", 3))
    with pytest.raises(ValueError, match="continuation flag 3 out of sequence at byte 0"):
        mx.recordio.MXRecordIO(str(orphan), "r").read()


def test_misuse_is_refused(tmp_path):
    with pytest.raises(ValueError, match="flag must be 'r'"):
        mx.recordio.MXRecordIO(str(tmp_path / "x.rec"), "a")
    writer = mx.recordio.MXRecordIO(str(tmp_path / "x.rec"), "w")
    with pytest.raises(TypeError, match="encode it first"):
        writer.write("text")
    with pytest.raises(ValueError, match="open for writing"):
        writer.read()
    writer.close()
    with pytest.raises(ValueError, match="open for reading"):
        mx.recordio.MXRecordIO(str(tmp_path / "x.rec"), "r").write(b"x")
    fidx = tmp_path / "x.idx"
    indexed = mx.recordio.MXIndexedRecordIO(str(fidx), str(tmp_path / "y.rec"), "w")
    indexed.write_idx(1, b"a")
    with pytest.raises(ValueError, match="key 1 is already in"):
        indexed.write_idx(1, b"b")
    indexed.close()
    fidx.write_text("1\t0\nnot an index line\n")
    with pytest.raises(ValueError, match=r"x\.idx line 2: expected 'key<TAB>offset'"):
        mx.recordio.MXIndexedRecordIO(str(fidx), str(tmp_path / "y.rec"), "r")
    with pytest.raises(ValueError, match="24-byte header, got 3 bytes"):
        mx.recordio.unpack(b"abc")
    with pytest.raises(ValueError, match="announces 2 float32 labels"):
        mx.recordio.unpack(struct.pack("<IfQQ", 2, 0, 0, 0) + b"1234")


def test_reader_reopens_in_a_forked_process(tmp_path):
    path = str(tmp_path / "f.rec")
    with mx.recordio.MXRecordIO(path, "w") as writer:
        for i in range(3):
            writer.write(b"r%d" % i)
    reader = mx.recordio.MXRecordIO(path, "r")
    assert reader.read() == b"r0"
    pid = os.fork()
    if pid == 0:  # the child reads from the start, through a file of its own
        os._exit(0 if reader.read() == b"r0" else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert reader.read() == b"r1"  # the parent's position is untouched
