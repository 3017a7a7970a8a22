"""File formats: what mxlite writes to disk and reads back, with no pickle anywhere.

* :mod:`.archive`: atomic writes (a crash during a save leaves the previous file intact), NumPy
  ``.npz`` archives read with ``allow_pickle=False``, and the dispatch that recognises MXNet's files;
* :mod:`.mxnet_params`: MXNet's binary NDArray-list format (``mx.nd.save``, 1.x ``save_parameters``).

Formats know arrays and bytes only: they sit on the device layer (for device-to-host reads).
"""
