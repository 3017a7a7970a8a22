"""The CPU benchmarks of recurrent models and of a busy machine run and report what they promise (toy sizes)."""

from __future__ import annotations

import json

from tests.test_benchmarks import _load

_TINY_LM = ["--lm-vocab", "30", "--lm-embed", "6", "--lm-hidden", "8", "--lm-layers", "2", "--lm-length", "5",
            "--lm-batch", "4"]


def test_bench_train_trains_the_word_lms_with_a_thread_setting(tmp_path, capsys):
    out = tmp_path / "lm.json"
    assert _load("bench_train").main(["--device", "cpu", "--models", "lstm_lm,gru_lm", *_TINY_LM, "--kvstores",
                                      "none", "--steps", "2", "--repeat", "2", "--warmup", "1", "--threads", "1",
                                      "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["meta"]["mxlite_threads"] == 1
    assert report["meta"]["mxlite_host_blas"].startswith(("MKL (", "NumPy's BLAS ("))
    mine = {r["model"]: r for r in report["records"] if r["framework"] == "mxlite"}
    assert set(mine) == {"lstm_lm", "gru_lm"}
    # embedding, 2 layers (i2h, h2h, two biases), decoder
    lstm = 30 * 6 + (4 * 8 * 6 + 4 * 8 * 8 + 2 * 4 * 8) + (4 * 8 * 8 + 4 * 8 * 8 + 2 * 4 * 8) + 8 * 30 + 30
    assert mine["lstm_lm"]["params"] == lstm and mine["lstm_lm"]["batch"] == 4
    for r in report["records"]:
        assert r["samples_per_s"] > 0 and r["run_spread_pct"] >= 0 and len(r["run_samples_per_s"]) == 2
    assert all(r["loss_decreased"] for r in mine.values())
    if report["meta"]["torch"] is not None:
        assert {r["model"] for r in report["records"] if r["framework"] == "torch"} == {"lstm_lm", "gru_lm"}
        assert report["meta"]["torch_threads"] == 1
    assert "sanity lstm_lm" in capsys.readouterr().out


def test_bench_busy_reports_the_slowdown_beside_a_competitor(tmp_path, capsys):
    out = tmp_path / "busy.json"
    assert _load("bench_busy").main(["--models", "lstm_lm", "--no-torch", "--rounds", "1", "--repeat", "2",
                                     "--steps", "1", "--warmup", "1", "--competitors", "1", "--threads", "1",
                                     "--train-args", " ".join(_TINY_LM), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    (record,) = report["records"]
    assert record["model"] == "lstm_lm" and record["framework"] == "mxlite" and record["threads"] == 1
    assert record["alone_ms"] > 0 and record["busy_ms"] > 0
    assert abs(record["slowdown"] - record["busy_ms"] / record["alone_ms"]) < 1e-9
    assert len(record["alone_runs_ms"]) == len(record["busy_runs_ms"]) == 2
    assert report["meta"]["competitors"] == 1 and report["meta"]["command"].startswith("python3 benchmarks/bench_busy")
    assert "slowdown" in capsys.readouterr().out


def test_bench_gemm_times_each_library_and_checks_the_hand_written_gemm(tmp_path, capsys):
    out = tmp_path / "gemm.json"
    shapes = "40x70x33:NT,33x40x70:TN,17x5x9:TT"  # ragged tiles, every transposition, a k below one block
    assert _load("bench_gemm").main(["--shapes", shapes, "--threads", "1,2", "--rounds", "1", "--calls", "1",
                                     "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    records, skipped = report["records"], report["meta"]["skipped"]
    products = {"40x70x33 NT", "33x40x70 TN", "17x5x9 TT"}
    for library in ("mxlite", "mxlite-numpy"):
        mine = [r for r in records if r["library"] == library]
        assert {(r["product"], r["threads"]) for r in mine} == {(p, t) for p in products for t in (1, 2)}
    assert report["meta"]["mxlite_products"]["mxlite-numpy"] == "NumPy's BLAS (MXLITE_HOST_BLAS=numpy)"
    assert all(r["ms"] > 0 and r["gflops"] == 2 * r["m"] * r["n"] * r["k"] / r["ms"] / 1e6 for r in records)
    for r in records:  # MKL's products, when its wheel is installed: checked like the hand-written ones
        if r["library"] == "mkl-pieces":
            assert r["max_rel_error"] < r["k"] * 2.0 ** -24
    blocked = [r for r in records if r["library"] == "blocked"]
    if "blocked" in skipped:  # no AVX-512 or no g++ here: the table says why
        assert not blocked and "not run" in capsys.readouterr().out
        return
    assert {(r["product"], r["threads"]) for r in blocked} == {(p, t) for p in products for t in (1, 2)}
    for r in blocked:  # within the rounding of k float32 terms, on one thread and with the columns split
        assert r["max_rel_error"] < r["k"] * 2.0 ** -24
        assert r["ceiling_gflops"] > 0
    assert "ceiling on 1 thread(s)" in capsys.readouterr().out
