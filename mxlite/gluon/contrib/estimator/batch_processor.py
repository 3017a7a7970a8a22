"""What the Estimator does with one batch: :class:`BatchProcessor` (MXNet's ``fit_batch``/``evaluate_batch``)."""

from __future__ import annotations

from typing import Any

from .... import autograd
from ...utils import split_and_load

__all__ = ["BatchProcessor"]


class BatchProcessor:
    """Trains or evaluates the Estimator's model on one batch; subclass it to change how.

    A batch is ``(data, label, ...)`` from a DataLoader. Both methods split data and label over the
    Estimator's devices along ``batch_axis`` (slices as even as the batch allows), run the model and the loss
    on each device, and return ``(data, label, pred, loss)``: four lists with one entry per device. The
    Estimator's handlers then update the metrics and (``GradientUpdateHandler``) step the trainer.
    """

    def _get_data_and_label(self, batch: Any, devices: list[Any], batch_axis: int = 0) -> tuple[list[Any], list[Any]]:
        """Data and label of ``batch``, each split into one slice per device.

        Raises:
            ValueError: the batch is not a (data, label, ...) sequence.
        """
        if not isinstance(batch, (list, tuple)) or len(batch) < 2:
            raise ValueError("Estimator: a batch must be (data, label, ...) as a DataLoader over an ArrayDataset "
                             f"of data and labels gives, got {_describe(batch)}")
        data = split_and_load(batch[0], devices, batch_axis=batch_axis, even_split=False)
        label = split_and_load(batch[1], devices, batch_axis=batch_axis, even_split=False)
        return data, label

    def evaluate_batch(self, estimator: Any, val_batch: Any, batch_axis: int = 0) -> tuple[list, list, list, list]:
        """Run ``estimator.val_net`` and ``estimator.val_loss`` on one validation batch (nothing recorded).

        Returns:
            ``(data, label, pred, loss)``, one entry per device.
        """
        data, label = self._get_data_and_label(val_batch, estimator.device, batch_axis)
        pred = [estimator.val_net(x) for x in data]
        loss = [estimator.val_loss(y_hat, y) for y_hat, y in zip(pred, label)]
        return data, label, pred, loss

    def fit_batch(self, estimator: Any, train_batch: Any, batch_axis: int = 0) -> tuple[list, list, list, list]:
        """Forward ``estimator.net`` and ``estimator.loss`` on one training batch under ``autograd.record()``,
        then back-propagate every device's loss (the trainer's step is ``GradientUpdateHandler``'s).

        Returns:
            ``(data, label, pred, loss)``, one entry per device.
        """
        data, label = self._get_data_and_label(train_batch, estimator.device, batch_axis)
        with autograd.record():
            pred = [estimator.net(x) for x in data]
            loss = [estimator.loss(y_hat, y) for y_hat, y in zip(pred, label)]
        autograd.backward(loss)
        return data, label, pred, loss


def _describe(batch: Any) -> str:
    if isinstance(batch, (list, tuple)):
        return f"a {type(batch).__name__} of {len(batch)} element(s)"
    return f"a {type(batch).__name__}" + (f" of shape {batch.shape}" if hasattr(batch, "shape") else "")
