"""MXNet 1.x's data iterators (``mx.io``): :class:`NDArrayIter` over in-memory arrays, :class:`MNISTIter` and
:class:`CSVIter` over files, :class:`ImageRecordIter` over image RecordIO files, :class:`ResizeIter`,
:class:`PrefetchingIter`, and the :class:`DataIter`, :class:`DataBatch` and :class:`DataDesc` they are built from.

::

    from mxlite import io
    for batch in io.NDArrayIter(X, y, batch_size=32, shuffle=True):
        x, label = batch.data[0], batch.label[0]
"""

from .file_iters import CSVIter, MNISTIter
from .image_record_iter import ImageRecordIter
from .io import DataBatch, DataDesc, DataIter, NDArrayIter, PrefetchingIter, ResizeIter

__all__ = ["CSVIter", "DataBatch", "DataDesc", "DataIter", "ImageRecordIter", "MNISTIter", "NDArrayIter",
           "PrefetchingIter", "ResizeIter"]
