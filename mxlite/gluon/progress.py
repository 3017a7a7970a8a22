"""What a training loop shows: a progress bar over an epoch's batches, and the training-curve plot.

Shared by the main job (``mxlite train``, :mod:`mxlite.cli.train_job`: its figure is :func:`plot_history`)
and the Estimator of ``gluon.contrib.estimator`` (its ``LoggingHandler`` shows :func:`progress_bar`, its
``TrainingCurveHandler`` draws :func:`plot_curves`). tqdm is a dependency of mxlite; matplotlib is optional
(``pip install 'mxlite[train]'``): without it the plot functions return False and draw nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
from tqdm import tqdm

__all__ = ["CurvePanel", "accuracy_limits", "plot_curves", "plot_history", "progress_bar"]

_MARKERS = ("o", "s", "^", "v", "D", "x")


def progress_bar(total: int | None, desc: str, *, unit: str = "batch", file: IO[str] | None = None,
                 disable: bool | None = False) -> Any:
    """A tqdm bar as the main job shows it: advanced by hand (``bar.update(1)`` after each step) and cleared
    when closed.

    Args:
        total: steps in the epoch; None when unknown (the bar then counts without a percentage).
        desc: the label on the left (``'epoch 3'``).
        unit: what one step is.
        file: where the bar is drawn (default: standard error).
        disable: True draws nothing; None draws only when ``file`` is a terminal (tqdm's rule).
    """
    return tqdm(total=total, desc=desc, unit=unit, leave=False, disable=disable, dynamic_ncols=True, file=file)


def accuracy_limits(values: Sequence[float]) -> tuple[float, float]:
    """The accuracy axis: from a little below the lowest value plotted (at most 0.9 below 1) to 1.0,
    so that the useful range near the top is not squeezed into the top tenth of the plot.

    NaN values (an epoch without a value) are left out.
    """
    finite = [v for v in values if not math.isnan(v)]
    low = min(finite) if finite else 0.0
    span = max(1.0 - low, 0.02)
    return max(0.0, 1.0 - 1.1 * span), 1.0 + 0.02 * span


@dataclass
class CurvePanel:
    """One panel of a training-curve figure: named curves with one value per epoch (NaN: no value that epoch).

    ``ylim``: the y-axis range, or None for matplotlib's. ``ylabel``: the axis label (default: the only
    curve's name, or none). A panel with several curves gets a legend.
    """

    title: str
    curves: dict[str, Sequence[float]] = field(default_factory=dict)
    ylabel: str | None = None
    ylim: tuple[float, float] | None = None


def plot_curves(path: str, panels: Sequence[CurvePanel], title: str = "") -> bool:
    """Draw ``panels`` side by side against the epoch (1, 2, ...) and save the figure to ``path`` (PNG, 100 dpi).

    Returns:
        False, drawing nothing, when matplotlib is not installed; True once the file is written.

    Raises:
        ValueError: no panel, or a panel without curves.
    """
    if not panels or any(not panel.curves for panel in panels):
        raise ValueError(f"plot_curves: every panel needs at least one curve, got {[p.title for p in panels]}")
    try:
        import matplotlib  # noqa: PLC0415 - optional

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return False
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        _draw_panel(ax, panel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _draw_panel(ax: Any, panel: CurvePanel) -> None:
    for index, (name, values) in enumerate(panel.curves.items()):
        epochs = np.arange(1, len(values) + 1)
        ax.plot(epochs, list(values), marker=_MARKERS[index % len(_MARKERS)], label=name)
    only = next(iter(panel.curves)) if len(panel.curves) == 1 else None
    ax.set(title=panel.title, xlabel="epoch", ylabel=panel.ylabel if panel.ylabel is not None else (only or ""))
    if panel.ylim is not None:
        ax.set_ylim(panel.ylim)
    if len(panel.curves) > 1:
        ax.legend()


def plot_history(history: Any, path: str, title: str = "") -> bool:
    """The main job's figure: its training loss, and its train and held-out accuracy, per epoch.

    ``history`` has ``train_loss``, ``train_acc`` and ``test_acc`` lists (the job's ``History``).
    Returns False when matplotlib is not installed (see :func:`plot_curves`).
    """
    loss = CurvePanel("training loss", {"train": history.train_loss}, ylabel="softmax cross-entropy")
    accuracy = CurvePanel("accuracy", {"train": history.train_acc, "held-out": history.test_acc}, ylabel="accuracy",
                          ylim=accuracy_limits(list(history.train_acc) + list(history.test_acc)))
    return plot_curves(path, [loss, accuracy], title)
