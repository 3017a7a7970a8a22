"""Image RecordIO files end to end: gluon.data.vision.ImageRecordDataset, mx.io.ImageRecordIter (MXNet's default
augmenter and normalisation, labels, padding, parts, shuffling) and the ``mxlite im2rec`` command, on tiny
images; the .rec files are written here by the format's rules with ``struct``."""

from __future__ import annotations

import os
import random
import struct

import numpy as np
import pytest

import mxlite as mx
from mxlite.cli import main as cli_main

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless (the test extra) decodes the images")
MAGIC = 0xCED7230A


def _png(bgr: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".png", bgr)
    assert ok
    return buf.tobytes()


def _write_rec(folder, records: list[tuple[object, int, bytes]], name: str = "data") -> tuple[str, str]:
    """Write ``(label, id, payload)`` image records and their index by hand: MXNet's record framing and header."""
    rec, idx = os.path.join(folder, name + ".rec"), os.path.join(folder, name + ".idx")
    with open(rec, "wb") as out, open(idx, "w") as index:
        for label, key, payload in records:
            labels = np.atleast_1d(np.asarray(label, np.float32))
            if labels.size == 1:
                data = struct.pack("<IfQQ", 0, float(labels[0]), key, 0) + payload
            else:
                data = struct.pack("<IfQQ", labels.size, 0.0, key, 0) + labels.tobytes() + payload
            index.write(f"{key}\t{out.tell()}\n")
            out.write(struct.pack("<II", MAGIC, len(data)) + data + b"\0" * (-len(data) % 4))
    return rec, idx


@pytest.fixture
def bgr_images():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (10 + i, 12 + 2 * i, 3), dtype=np.uint8) for i in range(5)]


def test_image_record_dataset_reads_a_hand_written_file(tmp_path, bgr_images):
    rec, _ = _write_rec(tmp_path, [(float(i), i, _png(img)) for i, img in enumerate(bgr_images)])
    dataset = mx.gluon.data.vision.ImageRecordDataset(rec)
    assert len(dataset) == 5
    for i, img in enumerate(bgr_images):
        data, label = dataset[i]
        np.testing.assert_array_equal(data.asnumpy(), img[:, :, ::-1])  # RGB
        assert label == float(i)
    grey, _ = mx.gluon.data.vision.ImageRecordDataset(rec, flag=0)[1]
    grey_cv = cv2.imdecode(np.frombuffer(_png(bgr_images[1]), np.uint8), 0)
    np.testing.assert_array_equal(grey.asnumpy()[:, :, 0], grey_cv)
    doubled = mx.gluon.data.vision.ImageRecordDataset(rec, transform=lambda x, y: (x.shape, y * 2))
    assert doubled[3] == ((13, 18, 3), 6.0)
    loader = mx.gluon.data.DataLoader(dataset.transform_first(lambda x: x.asnumpy()[:8, :8]), batch_size=5,
                                      num_workers=2)
    (batch, labels), = list(loader)
    assert batch.shape == (5, 8, 8, 3)
    np.testing.assert_array_equal(labels.asnumpy(), np.arange(5))
    with pytest.raises(FileNotFoundError, match=r"missing\.rec"):
        mx.gluon.data.vision.ImageRecordDataset(str(tmp_path / "missing.rec"))
    os.remove(str(tmp_path / "data.idx"))
    with pytest.raises(FileNotFoundError, match=r"data\.idx"):
        mx.gluon.data.vision.ImageRecordDataset(rec)


def _expected(bgr: np.ndarray, height: int, width: int, mean, std) -> np.ndarray:
    """MXNet's default augmenter without randomness: the centred crop, RGB, (x - mean) / std, CHW."""
    y, x = (bgr.shape[0] - height) // 2, (bgr.shape[1] - width) // 2
    rgb = bgr[y:y + height, x:x + width, ::-1].astype(np.float32)
    return ((rgb - np.float32(mean)) * (np.float32(1) / np.float32(std))).transpose(2, 0, 1)


def test_image_record_iter_centre_crop_normalisation_and_padding(tmp_path, bgr_images):
    rec, idx = _write_rec(tmp_path, [(float(i), i, _png(img)) for i, img in enumerate(bgr_images)])
    mean, std = (10.0, 20.0, 30.0), (2.0, 4.0, 8.0)
    it = mx.io.ImageRecordIter(path_imgrec=rec, path_imgidx=idx, data_shape=(3, 8, 9), batch_size=2,
                               mean_r=mean[0], mean_g=mean[1], mean_b=mean[2], std_r=std[0], std_g=std[1],
                               std_b=std[2], preprocess_threads=2)
    assert it.provide_data[0].shape == (2, 3, 8, 9) and it.provide_label[0].shape == (2,)
    batches = list(it)
    assert [b.pad for b in batches] == [0, 0, 1]
    data = np.concatenate([b.data[0].asnumpy() for b in batches])
    labels = np.concatenate([b.label[0].asnumpy() for b in batches])
    np.testing.assert_array_equal(labels, [0, 1, 2, 3, 4, 0])  # the last batch filled up from the start
    for i, img in enumerate(bgr_images + bgr_images[:1]):
        np.testing.assert_allclose(data[i], _expected(img, 8, 9, mean, std), rtol=1e-6)
    it.reset()
    assert len(list(it)) == 3
    # no index: the record headers are scanned; mirror=True flips every image
    flipped = next(mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 8, 9), batch_size=1, mirror=True))
    np.testing.assert_array_equal(flipped.data[0].asnumpy()[0], _expected(bgr_images[0], 8, 9, 0, 1)[:, :, ::-1])


def test_image_record_iter_resize_random_crop_parts_and_shuffle(tmp_path, bgr_images):
    rec, idx = _write_rec(tmp_path, [(float(i), i, _png(img)) for i, img in enumerate(bgr_images)])
    resized = next(mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 6, 6), batch_size=1, resize=7,
                                         inter_method=2, dtype="uint8"))
    small = cv2.resize(bgr_images[0], (7 * 12 // 10, 7), interpolation=2)  # shorter edge 7, bicubic
    np.testing.assert_array_equal(resized.data[0].asnumpy()[0], small[0:6, 1:7, ::-1].transpose(2, 0, 1))
    parts = [mx.io.ImageRecordIter(path_imgrec=rec, path_imgidx=idx, data_shape=(3, 8, 8), batch_size=1,
                                   num_parts=2, part_index=p) for p in range(2)]
    assert [[float(b.label[0].asnumpy()[0]) for b in part] for part in parts] == [[0, 1], [2, 3, 4]]

    def epoch(seed):
        it = mx.io.ImageRecordIter(path_imgrec=rec, path_imgidx=idx, data_shape=(3, 8, 8), batch_size=5, seed=seed,
                                   shuffle=True, rand_crop=True, rand_mirror=True)
        b = next(it)
        return b.label[0].asnumpy(), b.data[0].asnumpy()

    (labels_a, data_a), (labels_b, data_b) = epoch(3), epoch(3)
    np.testing.assert_array_equal(labels_a, labels_b)
    np.testing.assert_array_equal(data_a, data_b)  # the same seed, the same shuffle and crops
    assert sorted(labels_a) == [0, 1, 2, 3, 4]
    rrc = next(mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 5, 5), batch_size=5, random_resized_crop=True,
                                     min_random_area=0.3, max_aspect_ratio=0.25))
    assert rrc.data[0].shape == (5, 3, 5, 5)


def test_image_record_iter_labels(tmp_path, bgr_images):
    records = [([float(i), 10.0 + i], i, _png(img)) for i, img in enumerate(bgr_images[:3])]
    rec, idx = _write_rec(tmp_path, records, "multi")
    batch = next(mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 8, 8), batch_size=3, label_width=2))
    np.testing.assert_array_equal(batch.label[0].asnumpy(), [[0, 10], [1, 11], [2, 12]])
    with pytest.raises(ValueError, match=r"record at byte 0 holds 2 label\(s\) but label_width is 1"):
        next(mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 8, 8), batch_size=1))
    imglist = tmp_path / "multi.lst"
    imglist.write_text("".join(f"{i}\t{7 - i}\timg{i}.png\n" for i in range(3)))
    relabelled = next(mx.io.ImageRecordIter(path_imgrec=rec, path_imglist=str(imglist), data_shape=(3, 8, 8),
                                            batch_size=3))
    np.testing.assert_array_equal(relabelled.label[0].asnumpy(), [7, 6, 5])


def test_image_record_iter_refuses_what_it_cannot_do(tmp_path, bgr_images):
    rec, _ = _write_rec(tmp_path, [(0.0, 0, _png(bgr_images[0])), (1.0, 1, b"not an image")])
    with pytest.raises(NotImplementedError, match="max_rotate_angle"):
        mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 8, 8), batch_size=1, max_rotate_angle=10)
    with pytest.raises(TypeError, match="unknown argument.*bogus"):
        mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 8, 8), batch_size=1, bogus=1)
    with pytest.raises(ValueError, match="data_shape must have 1 .grey. or 3"):
        mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(4, 8, 8), batch_size=1)
    with pytest.raises(FileNotFoundError, match="nothere.rec"):
        mx.io.ImageRecordIter(path_imgrec=str(tmp_path / "nothere.rec"), data_shape=(3, 8, 8), batch_size=1)
    with pytest.raises(ValueError, match=r"data\.rec, record at byte \d+: imdecode: the 12 bytes"):
        next(mx.io.ImageRecordIter(path_imgrec=rec, data_shape=(3, 8, 8), batch_size=2))


def _folder_of_classes(root) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    images = {}
    for cls in ("cat", "dog"):
        os.makedirs(os.path.join(root, cls))
        for j in range(3):
            rel = os.path.join(cls, f"{j}.png")
            images[rel] = rng.integers(0, 256, (6 + j, 8, 3), dtype=np.uint8)
            cv2.imwrite(os.path.join(root, rel), images[rel])
    return images


def test_im2rec_lists_and_packs_a_folder_of_classes(tmp_path, capsys):
    root, prefix = str(tmp_path / "images"), str(tmp_path / "out" / "train")
    os.makedirs(os.path.dirname(prefix))
    images = _folder_of_classes(root)
    assert cli_main(["im2rec", "--list", "--recursive", prefix, root]) == 0
    assert "cat 0\ndog 1" in capsys.readouterr().out
    walk = [(i, rel, 0 if rel.startswith("cat") else 1) for i, rel in enumerate(sorted(images))]
    random.Random(100).shuffle(walk)  # MXNet's tool's shuffle
    assert open(prefix + ".lst").read() == "".join(f"{i}\t{label}\t{rel}\n" for i, rel, label in walk)
    assert cli_main(["im2rec", "--encoding", ".png", "--num-thread", "2", prefix, root]) == 0
    dataset = mx.gluon.data.vision.ImageRecordDataset(prefix + ".rec")
    assert len(dataset) == 6
    reader = mx.recordio.MXIndexedRecordIO(prefix + ".idx", prefix + ".rec", "r")
    assert reader.keys == [i for i, _, _ in walk]  # keyed by list index, in list order
    for n, (_, rel, label) in enumerate(walk):
        img, got = dataset[n]
        assert got == label
        np.testing.assert_array_equal(img.asnumpy(), images[rel][:, :, ::-1])


def test_im2rec_pass_through_resize_and_errors(tmp_path, capsys):
    root, prefix = str(tmp_path / "images"), str(tmp_path / "p")
    images = _folder_of_classes(root)
    assert cli_main(["im2rec", "--list", "--recursive", "--no-shuffle", "--train-ratio", "0.5", prefix, root]) == 0
    assert sorted(os.listdir(tmp_path)) == ["images", "p_train.lst", "p_val.lst"]
    assert cli_main(["im2rec", "--pass-through", prefix, root]) == 0
    reader = mx.recordio.MXIndexedRecordIO(prefix + "_train.idx", prefix + "_train.rec", "r")
    header, payload = mx.recordio.unpack(reader.read_idx(0))
    assert payload == open(os.path.join(root, "cat", "0.png"), "rb").read() and header.label == 0
    assert cli_main(["im2rec", "--resize", "4", "--encoding", ".png", prefix + "_val", root]) == 0
    _, img = mx.recordio.unpack_img(mx.recordio.MXRecordIO(prefix + "_val.rec", "r").read())
    np.testing.assert_array_equal(img, cv2.resize(images[os.path.join("dog", "0")+".png"], (5, 4)))
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["im2rec", "--chunks", "0", prefix, root])
    assert exit_info.value.code == 2 and "--chunks must be at least 1" in capsys.readouterr().err
    assert cli_main(["im2rec", str(tmp_path / "none"), root]) == 1
