"""Small datasets shipped inside the package, for examples and tests that need real data.

Only the UCI handwritten digits are included (``digits.csv.gz``, 57 KB); see ``README.md`` in
this folder for source, licence and citation.
"""

from __future__ import annotations

import functools
import gzip
import math
from importlib import resources

import numpy as np

__all__ = ["DIGITS_FEATURES", "DIGITS_SAMPLES", "load_digits", "train_test_split_digits"]

DIGITS_SAMPLES = 1797  # rows in scikit-learn's digits.csv.gz (the UCI test set, "optdigits.tes")
DIGITS_FEATURES = 64  # 8x8 images
_DIGITS_MAX_PIXEL = 16.0  # each pixel counts "on" bits in a 4x4 block of the 32x32 bitmap: 0..16


@functools.lru_cache(maxsize=1)
def _read_digits() -> np.ndarray:
    """The raw CSV as a read-only float64 array of shape (1797, 65); read once per process."""
    source = resources.files(__package__).joinpath("digits.csv.gz")
    with source.open("rb") as raw, gzip.open(raw, "rt") as text:
        table = np.loadtxt(text, delimiter=",", dtype=np.float64)
    if table.shape != (DIGITS_SAMPLES, DIGITS_FEATURES + 1):
        raise RuntimeError(
            f"digits.csv.gz has shape {table.shape}, expected {(DIGITS_SAMPLES, DIGITS_FEATURES + 1)}; "
            "the packaged file is damaged, reinstall mxlite"
        )
    table.setflags(write=False)
    return table


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The UCI handwritten digits: 1797 8x8 grey images of the digits 0-9.

    Returns:
        ``(X, y)``: ``X`` float32 of shape (1797, 64), row-major 8x8 images with pixel counts
        0..16 divided by 16 (so values lie in [0, 1]); ``y`` int32 of shape (1797,), the
        digit 0..9 (about 180 of each). Fresh arrays on every call, safe to modify.

    Raises:
        RuntimeError: the packaged data file is damaged.
    """
    table = _read_digits()
    X = (table[:, :DIGITS_FEATURES] / _DIGITS_MAX_PIXEL).astype(np.float32)
    y = table[:, DIGITS_FEATURES].astype(np.int32)
    return X, y


def train_test_split_digits(test_fraction: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray,
                                                                                 np.ndarray, np.ndarray]:
    """The digits split at random into a training and a test part (not stratified).

    The rows are permuted by ``numpy.random.Generator(PCG64(seed)).permutation``; the first
    ``ceil(test_fraction * 1797)`` rows of the permutation form the test set (scikit-learn's
    rounding), the rest the training set. The same ``seed`` always gives the same split.

    Args:
        test_fraction: share of the 1797 samples put in the test set, in (0, 1).
        seed: a non-negative integer choosing the permutation.

    Returns:
        ``(X_train, y_train, X_test, y_test)`` with the dtypes and scaling of :func:`load_digits`;
        for the defaults, 1437 training and 360 test samples.

    Raises:
        ValueError: ``test_fraction`` outside (0, 1) or leaving one side empty; bad ``seed``.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    X, y = load_digits()
    n_test = math.ceil(test_fraction * len(X))
    if n_test >= len(X):
        raise ValueError(f"test_fraction={test_fraction!r} leaves no training samples out of {len(X)}")
    perm = np.random.Generator(np.random.PCG64(seed)).permutation(len(X))
    test, train = perm[:n_test], perm[n_test:]
    return X[train], y[train], X[test], y[test]
