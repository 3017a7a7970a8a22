"""The ``MXLITE_*`` variables have one table, ``mxlite.device.env.SETTINGS``: every variable the package reads is
in it, docs/reliability.md's "Settings" table shows the same rows, and ``MXLITE_HOST_BLAS`` is read through it
like every other (a value it does not know is an error naming the variable, the value and the accepted ones)."""

import pathlib
import re

import numpy as np
import pytest

from mxlite.device import blas, env, mkl

ROOT = pathlib.Path(__file__).resolve().parent.parent
# a whole variable name: not a prefix such as ``MXLITE_HOSTCUDA_*`` in prose
_VARIABLE = re.compile(r"\bMXLITE_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_*])")
# read by the test suite's conftest only (it skips the kernel prebuild), never by mxlite
_TEST_SUITE_ONLY = {"MXLITE_PREBUILD_KERNELS"}


def _variables_named_in(paths):
    found = {}
    for path in paths:
        for name in _VARIABLE.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def test_every_variable_the_package_reads_is_in_the_table():
    listed = {setting.name for setting in env.SETTINGS}
    named = _variables_named_in(sorted((ROOT / "mxlite").rglob("*.py")))
    assert len(named) >= 9, named  # the search itself works
    missing = {name: where for name, where in named.items() if name not in listed}
    assert not missing, f"MXLITE_* variables read in mxlite/ but missing from env.SETTINGS: {missing}"
    conftest = _variables_named_in([ROOT / "tests" / "conftest.py"])
    missing = {name: where for name, where in conftest.items() if name not in listed | _TEST_SUITE_ONLY}
    assert not missing, f"MXLITE_* variables read by the tests' conftest but missing from env.SETTINGS: {missing}"
    unused = listed - set(named)
    assert not unused, f"env.SETTINGS lists variables mxlite never names: {sorted(unused)}"


def _docs_rows():
    """(variable, accepts, default) of each row of docs/reliability.md's Settings table, without backquotes."""
    text = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
    section = text[text.index("## Settings"):]
    section = section[:section.index("\n## ", 1)]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip().replace("`", "") for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("MXLITE_"):
            rows.append(tuple(cells))
    return rows


def test_the_docs_table_is_the_code_table():
    assert _docs_rows() == [(s.name, s.accepts, s.default) for s in env.SETTINGS]


def test_each_choice_variable_accepts_its_choices_and_defaults_to_one():
    for setting in env.SETTINGS:
        assert hasattr(env, setting.reader), setting
        assert bool(setting.choices) == (setting.reader == "choice"), setting
        if setting.choices:
            assert setting.default in setting.choices, setting
            assert all(re.search(rf"\b{c}\b", setting.accepts) for c in setting.choices), setting


def test_reading_a_variable_missing_from_the_table_is_refused(monkeypatch):
    monkeypatch.setenv("MXLITE_NOT_A_SETTING", "1")
    with pytest.raises(KeyError, match="MXLITE_NOT_A_SETTING is not in mxlite.device.env.SETTINGS"):
        env.flag("MXLITE_NOT_A_SETTING")


def _fresh(monkeypatch, value):
    monkeypatch.setattr(mkl, "_loaded", None)
    monkeypatch.setattr(mkl, "_why_not", None)
    monkeypatch.setenv("MXLITE_HOST_BLAS", value)


@pytest.mark.parametrize("value", ["mkl", "MKL", "openblas", "yes", "0"])
def test_an_unknown_host_blas_is_an_error_naming_variable_value_and_choices(monkeypatch, value):
    _fresh(monkeypatch, value)
    expected = f"MXLITE_HOST_BLAS must be one of auto, numpy, got '{value}'"
    with pytest.raises(ValueError, match=re.escape(expected)):
        mkl.status()
    a = np.ones((128, 128), np.float32)  # 2^21 multiply-adds: a product for MKL
    with pytest.raises(ValueError, match=re.escape(expected)):
        blas.matmul(a, a)
    monkeypatch.setenv("MXLITE_HOST_BLAS", " NumPy ")  # a bad value is not kept: fixed, the next product runs
    np.testing.assert_array_equal(blas.matmul(a, a), np.full((128, 128), 128, np.float32))
    assert mkl.status() == "NumPy's BLAS (MXLITE_HOST_BLAS=numpy)"


@pytest.mark.parametrize("value", ["", "  ", "auto", " AUTO "])
def test_host_blas_auto_or_unset_is_the_default(monkeypatch, value):
    _fresh(monkeypatch, value)
    assert env.choice("MXLITE_HOST_BLAS") == "auto"
    status = mkl.status()
    assert status.startswith("MKL (") or "MXLITE_HOST_BLAS" not in status, status
