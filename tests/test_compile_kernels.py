"""``mxlite compile-kernels`` (mxlite/cli/compile_kernels.py): every registered kernel variant compiled into the
kernel cache ahead of time, per GPU, in parallel worker processes; a clear error without a GPU.

On the emulated GPUs (``MXLITE_EMULATE_GPUS=2``) the command fills the emulation's host-build cache: a second
process then loads every variant of the file without building anything. What the same command does with the real
CuPy (each variant compiled alone by NVRTC) is held to NVRTC itself by tests/test_real_nvrtc.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mxlite.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mxlite", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env},
                          timeout=600)


def _names(filename: str) -> tuple[str, ...]:
    from mxlite.cli.compile_kernels import registered_kernels  # noqa: PLC0415

    return registered_kernels()[filename]


def test_compile_kernels_fills_the_cache_of_every_emulated_gpu(tmp_path):
    cache = str(tmp_path / "hostcuda")
    out = tmp_path / "times.json"
    proc = _run(["compile-kernels", "--only", "activation.cu", "--jobs", "2", "--json", str(out)],
                MXLITE_EMULATE_GPUS="2", MXLITE_HOSTCUDA_CACHE=cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = _names("activation.cu")
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"compile-kernels: {len(names)} kernel variants of 1 files for 2 GPU(s), 2 jobs, "
                               f"into the emulated GPUs' host-build cache {cache}")
    for device in (0, 1):  # a table per GPU: the file's row, its variants, then the total
        table = lines[lines.index(next(line for line in lines if line.startswith(f"gpu({device}) "))):]
        assert table[1].split()[:3] == ["file", "variants", "seconds"]
        assert table[2].split()[:2] == ["activation.cu", str(len(names))]
        assert table[3].split()[:2] == ["total", str(len(names))]
    assert lines[-1].startswith(f"compile-kernels: {2 * len(names)} of {2 * len(names)} variants ready in ")
    variants = json.loads(out.read_text())["variants"]
    assert sorted((v["device"], v["name"]) for v in variants) == sorted((d, n) for d in (0, 1) for n in names)
    assert all(v["file"] == "activation.cu" and v["error"] is None and v["seconds"] > 0 for v in variants)
    # a fresh process finds every variant built: get_kernel on both GPUs runs no compiler
    check = ("import mxlite as mx\n"
             "import mxlite.comm.compression\n"
             "from mxlite.device._hostcuda.build import build_count\n"
             "from mxlite.device.kernels import get_kernel, kernel_names\n"
             "names = kernel_names()['activation.cu']\n"
             "for d in (0, 1):\n"
             "    for n in names:\n"
             "        assert get_kernel('activation.cu', n, mx.gpu(d), names) is not None\n"
             "print('builds', build_count())\n")
    loaded = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=ROOT, timeout=300,
                            env={**os.environ, "MXLITE_EMULATE_GPUS": "2", "MXLITE_HOSTCUDA_CACHE": cache})
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert loaded.stdout.split() == ["builds", "0"]


def test_compile_kernels_without_a_gpu_says_so_and_exits_1():
    proc = _run(["compile-kernels"], MXLITE_EMULATE_GPUS="0", CUDA_VISIBLE_DEVICES="")
    assert proc.returncode == 1
    assert proc.stderr.startswith("mxlite compile-kernels: error: no GPU visible: "), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize(("args", "message"), [
    (["--only", "activation.cu,nosuch.cu"], "--only: no registered kernels in nosuch.cu (kernel files: "),
    (["--device", "2"], "--device 2: 2 GPU(s) visible (0..1)"),
    (["--jobs", "0"], "--jobs must be at least 1, got 0"),
])
def test_compile_kernels_usage_errors_are_one_line_and_status_2(args, message, capsys):
    """Checked before any worker starts (this process has the 2 emulated GPUs of tests/conftest.py)."""
    with pytest.raises(SystemExit) as exc:
        main(["compile-kernels", *args])
    assert exc.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]  # after the emulation's notice, the first time in this process
    assert last.startswith(f"mxlite compile-kernels: error: {message}")
