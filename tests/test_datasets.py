"""Tests of the bundled digits dataset: shape, dtype, value range, labels and the split."""

from __future__ import annotations

import numpy as np
import pytest

from mxlite.datasets import load_digits, train_test_split_digits


def test_digits_shape_dtype_range() -> None:
    X, y = load_digits()
    assert X.shape == (1797, 64) and X.dtype == np.float32
    assert y.shape == (1797,) and y.dtype == np.int32
    assert X.min() == 0.0 and X.max() == 1.0
    np.testing.assert_array_equal(X * 16, np.round(X * 16))  # pixel counts 0..16, divided by 16


def test_digits_label_counts() -> None:
    _, y = load_digits()
    counts = np.bincount(y, minlength=10)
    assert len(counts) == 10
    assert counts.sum() == 1797
    assert counts.min() >= 170 and counts.max() <= 190  # 174..183 in the UCI test set


def test_digits_returns_fresh_arrays() -> None:
    X, _ = load_digits()
    X[:] = -1.0
    assert load_digits()[0].min() == 0.0


def test_split_sizes_and_reproducibility() -> None:
    X_train, y_train, X_test, y_test = train_test_split_digits()
    assert X_train.shape == (1437, 64) and y_train.shape == (1437,)
    assert X_test.shape == (360, 64) and y_test.shape == (360,)
    again = train_test_split_digits()
    np.testing.assert_array_equal(again[3], y_test)
    other = train_test_split_digits(seed=1)
    assert not np.array_equal(other[3], y_test)
    X, y = load_digits()
    all_rows = np.concatenate([X_train, X_test])
    np.testing.assert_array_equal(np.sort(all_rows.view(np.int32).sum(axis=1)), np.sort(X.view(np.int32).sum(axis=1)))
    assert np.bincount(np.concatenate([y_train, y_test])).tolist() == np.bincount(y).tolist()
    assert len(train_test_split_digits(test_fraction=0.5)[3]) == 899


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5])
def test_split_rejects_bad_fraction(bad: float) -> None:
    with pytest.raises(ValueError, match="test_fraction"):
        train_test_split_digits(test_fraction=bad)
