"""The device array: a NumPy view into an allocation of an emulated GPU, used as CuPy's ``ndarray``."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from . import _blas, _core, _counters, _memory, _sig, _signatures, _state, _streams

__all__ = ["ndarray"]


class ndarray:  # noqa: N801 - CuPy's name
    """An array on an emulated GPU (CuPy's ``cupy.ndarray``).

    Args:
        shape: the array's shape.
        dtype: its dtype (default float64).
        memptr: a :class:`MemoryPointer` to view (default: a new allocation on the current device).
        strides: byte strides (with ``memptr``).
        order: 'C' or 'F'.

    Operations run eagerly in NumPy; the device, stream-ordering and host-read rules of
    :mod:`mxlite._emulation.fakecupy` are checked on every use. Host NumPy arrays are not accepted as
    operands, and ``numpy.asarray(device_array)`` raises TypeError: use :meth:`get`.
    """

    __slots__ = ("_a", "_mem", "__weakref__")
    __array_priority__ = 100

    def __init__(self, shape: Any, dtype: Any = float, memptr: Any = None, strides: Any = None,
                 order: str = "C") -> None:
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        if memptr is None:
            made = _core.new_array(shape, dtype, None, order)
            self._a, self._mem = made._a, made._mem
            return
        allocation = memptr._allocation
        offset = memptr.ptr - allocation.ptr
        self._a = np.ndarray(shape, dtype, buffer=allocation.block.buf, offset=offset, strides=strides,
                             order=order)
        self._mem = allocation

    @classmethod
    def _make(cls, a: np.ndarray, mem: _memory.Allocation) -> ndarray:
        obj = object.__new__(cls)
        obj._a = a
        obj._mem = mem
        return obj

    # -- metadata ------------------------------------------------------------------------------
    shape = property(lambda self: self._a.shape, doc="The array's shape.")
    dtype = property(lambda self: self._a.dtype, doc="The array's dtype.")
    size = property(lambda self: self._a.size, doc="Number of elements.")
    ndim = property(lambda self: self._a.ndim, doc="Number of dimensions.")
    itemsize = property(lambda self: self._a.itemsize, doc="Bytes per element.")
    nbytes = property(lambda self: self._a.nbytes, doc="Bytes of the elements.")
    strides = property(lambda self: self._a.strides, doc="Byte strides.")
    flags = property(lambda self: self._a.flags, doc="Contiguity flags (NumPy's flags object).")

    @shape.setter
    def shape(self, value: Any) -> None:
        self._a.shape = value

    @property
    def data(self) -> _memory.MemoryPointer:
        """The :class:`MemoryPointer` to element 0 (``.data.ptr`` is a real host address)."""
        address = self._a.__array_interface__["data"][0]
        return _memory.MemoryPointer(self._mem, address - self._mem.ptr)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:  # noqa: PLW3201 - CUDA's protocol name
        """The CUDA Array Interface (version 3): shape, typestr, data pointer, strides, stream (None)."""
        c_contiguous = self._a.flags.c_contiguous
        return {"shape": self._a.shape, "typestr": self._a.dtype.str, "descr": self._a.dtype.descr,
                "data": (self.data.ptr, False), "strides": None if c_contiguous else self._a.strides,
                "version": 3, "stream": None}

    @property
    def device(self) -> Any:
        """The :class:`cupy.cuda.Device` holding the array."""
        from .cuda._device import Device  # noqa: PLC0415 - cycle

        return Device(self._mem.device_id)

    @property
    def base(self) -> Any:
        """None (the emulation does not track view bases)."""
        return None

    @property
    def T(self) -> ndarray:  # noqa: N802 - NumPy's name
        """The transposed view."""
        return self.transpose()

    @property
    def real(self) -> ndarray:
        """The real part (a view for complex arrays)."""
        return _core.apply("real", np.real, (self,), {})

    @property
    def imag(self) -> ndarray:
        """The imaginary part."""
        return _core.apply("imag", np.imag, (self,), {})

    def __repr__(self) -> str:
        # Debug aid: reads the bytes without the ordering checks or counters (a real repr would sync).
        return f"array({np.array2string(self._a, separator=', ')}, dtype={self._a.dtype}, device={self._mem.device_id})"

    __str__ = __repr__

    def __len__(self) -> int:
        if self._a.ndim == 0:
            raise TypeError("len() of unsized object")
        return len(self._a)

    def __iter__(self) -> Any:
        if self._a.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(len(self._a)))

    def __hash__(self) -> int:
        raise TypeError("unhashable type: 'cupy.ndarray'")

    # -- host interop --------------------------------------------------------------------------
    def __array__(self, dtype: Any = None) -> np.ndarray:
        raise TypeError("Implicit conversion to a NumPy array is not allowed. "
                        "Please use `.get()` to construct a NumPy array explicitly.")

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        for x in inputs + tuple(kwargs.get("out", ()) or ()):
            if isinstance(x, np.ndarray):
                raise TypeError(f"Unsupported type {type(x)}: operand of {ufunc.__name__} mixes a host NumPy array "
                                "with a device array")
        if method == "__call__":
            return _core.apply(ufunc.__name__, ufunc, inputs, kwargs)
        if method == "at":
            return _core.apply(f"{ufunc.__name__}.at", ufunc.at, inputs, kwargs, write_args=(0,))
        return _core.apply(f"{ufunc.__name__}.{method}", getattr(ufunc, method), inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        from . import _functions  # noqa: PLC0415 - cycle

        ours = getattr(_functions, func.__name__, None)
        if ours is None or func.__module__.startswith("numpy.lib.npyio"):
            raise TypeError(f"numpy.{func.__name__} is not supported on device arrays")
        return ours(*args, **kwargs)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        """A DLPack capsule (kDLCUDA, this device) viewing the array."""
        from . import _dlpack  # noqa: PLC0415

        return _dlpack.to_capsule(self)

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(2, device id)``: kDLCUDA."""
        return (2, self._mem.device_id)

    def toDlpack(self) -> Any:  # noqa: N802 - CuPy's name
        """A legacy DLPack capsule viewing the array."""
        from . import _dlpack  # noqa: PLC0415

        return _dlpack.to_capsule(self)

    def get(self, stream: Any = None, order: str = "C", out: Any = None, blocking: bool = True) -> np.ndarray:
        """A host copy, made on ``stream`` (default: the current stream of the array's device), synchronised.

        Raises:
            EmulatedGPUError: the array's last writer is not ordered before that stream (rule 4).
        """
        host = _core.host_read(self, "get()", stream)
        if order == "F":
            host = np.asfortranarray(host)
        if out is not None:
            if not isinstance(out, np.ndarray):
                raise TypeError("out must be a numpy.ndarray")
            np.copyto(out, host)
            return out
        return host

    def set(self, arr: np.ndarray, stream: Any = None) -> None:
        """Copy host array ``arr`` into this array, on ``stream`` (default: current stream of its device)."""
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"Only numpy.ndarray can be set to cupy.ndarray, got {type(arr)}")
        if arr.shape != self._a.shape or arr.dtype != self._a.dtype:
            raise ValueError(f"Shape/dtype mismatch: {arr.shape} {arr.dtype} into {self._a.shape} {self._a.dtype}")
        device_id = self._mem.device_id
        stream = stream or _streams.get_current_stream(device_id)
        if stream._capture is not None or _streams.active_captures:
            from . import _graph  # noqa: PLC0415 - cycle

            _graph.refuse_transfer(stream, "H2D", "set()")
        _core.check_access(stream, (), (self,), "set()")
        np.copyto(self._a, arr)
        _core.record_access(stream, (), (self,))
        c = _counters.counters[device_id]
        c.h2d_copies += 1
        c.h2d_bytes += arr.nbytes

    def item(self) -> Any:
        """The only element as a Python scalar (a blocking device -> host read)."""
        return _core.host_read(self, "item()").item()

    def tolist(self) -> Any:
        """The array as nested Python lists (a blocking device -> host read)."""
        return _core.host_read(self, "tolist()").tolist()

    def tobytes(self, order: str = "C") -> bytes:
        """The array's bytes (a blocking device -> host read)."""
        return _core.host_read(self, "tobytes()").tobytes(order)

    def _scalar(self, kind: type, what: str) -> Any:
        return kind(_core.host_read(self, what))

    def __float__(self) -> float:
        return self._scalar(float, "float()")

    def __int__(self) -> int:
        return self._scalar(int, "int()")

    def __complex__(self) -> complex:
        return self._scalar(complex, "complex()")

    def __bool__(self) -> bool:
        return self._scalar(bool, "bool()")

    def __index__(self) -> int:
        return operator.index(_core.host_read(self, "index").item())

    # -- copies and dtype ----------------------------------------------------------------------
    def copy(self, order: str = "C") -> ndarray:
        """A copy on the current device (a peer copy when the array lives on another device)."""
        device_id = _state.current_device_id()
        if self._mem.device_id != device_id:
            return _core.peer_copy(self, device_id, order=order)
        return _core.apply("copy", np.ndarray.copy, (self, order), {})

    def astype(self, dtype: Any, order: str = "K", casting: Any = None, subok: Any = None,
               copy: bool = True) -> ndarray:
        """The array cast to ``dtype`` (itself when ``copy=False`` and the dtype is already right)."""
        if not copy and np.dtype(dtype) == self._a.dtype:
            return self
        kwargs = {"order": order}
        if casting is not None:
            kwargs["casting"] = casting
        return _core.apply("astype", np.ndarray.astype, (self, dtype), kwargs)

    def view(self, dtype: Any = None, type: Any = None) -> ndarray:  # noqa: A002 - CuPy's name
        """A view of the same memory (with another dtype when given)."""
        if type is not None:
            raise TypeError("view(type=...) is not supported for device arrays")
        args = (self,) if dtype is None else (self, dtype)
        return _core.apply("view", np.ndarray.view, args, {}, meta_args=(0,))

    def reshape(self, *shape: Any, order: str = "C", copy: Any = None) -> ndarray:
        """The array with a new shape (a view when possible)."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        return _core.apply("reshape", np.reshape, (self, shape), {"order": order}, meta_args=(0,))

    def ravel(self, order: str = "C") -> ndarray:
        """The array flattened (a view when possible)."""
        return _core.apply("ravel", np.ravel, (self, order), {}, meta_args=(0,))

    def transpose(self, *axes: Any) -> ndarray:
        """The view with permuted axes."""
        if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], (int, np.integer))):
            axes = axes[0]
        return _core.apply("transpose", np.transpose, (self, axes or None), {}, meta_args=(0,))

    def swapaxes(self, axis1: int, axis2: int) -> ndarray:
        """The view with two axes swapped."""
        return _core.apply("swapaxes", np.swapaxes, (self, axis1, axis2), {}, meta_args=(0,))

    def squeeze(self, axis: Any = None) -> ndarray:
        """The view without length-1 axes."""
        return _core.apply("squeeze", np.squeeze, (self, axis), {}, meta_args=(0,))

    def fill(self, value: Any) -> None:
        """Set every element to ``value``."""
        _core.apply("fill", np.ndarray.fill, (self, value), {}, write_args=(0,))

    # -- indexing ------------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Any:
        sync = _is_mask(key)
        return _core.apply("getitem", operator.getitem, (self, key), {}, meta_args=(0,), sync=sync)

    def __setitem__(self, key: Any, value: Any) -> None:
        host = isinstance(value, np.ndarray)
        target = self
        if _is_basic(key):  # the write touches only the bytes of the view the key selects
            keys = key if isinstance(key, tuple) else (key,)
            if Ellipsis not in keys:
                keys = (*keys, Ellipsis)  # a full integer index then still selects a (0-d) view
            target, key = ndarray._make(self._a[keys], self._mem), Ellipsis
        _core.apply("setitem", operator.setitem, (target, key, value), {}, write_args=(0,), host_ok=host)
        if host:
            c = _counters.counters[self._mem.device_id]
            c.h2d_copies += 1
            c.h2d_bytes += value.nbytes


def _is_basic(key: Any) -> bool:
    """Whether ``key`` is basic indexing (ints, slices, Ellipsis, None): it selects a view."""
    keys = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or isinstance(k, (int, np.integer, slice)) and not isinstance(k, bool)
               for k in keys)


def _is_mask(key: Any) -> bool:
    keys = key if isinstance(key, tuple) else (key,)
    return any(isinstance(k, ndarray) and k.dtype == np.bool_ for k in keys)


def _method(name: str, func: Any, writes: bool = False, sync: bool = False, meta: bool = False) -> Any:
    params = _signatures.METHODS.get(name)
    sig = _sig.signature_of((("self", "p", False),) + params) if params is not None else None

    def method(self: ndarray, *args: Any, **kwargs: Any) -> Any:
        if sig is not None:
            try:
                sig.bind(self, *args, **kwargs)
            except TypeError as exc:
                raise TypeError(f"ndarray.{name}(): {exc}") from None
        return _core.apply(name, func, (self, *args), kwargs, write_args=(0,) if writes else (),
                           meta_args=(0,) if meta else (), sync=sync)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"NumPy's ``ndarray.{name}`` on the device (CuPy's signature)."
    if sig is not None:
        method.__signature__ = sig
    return method


for _name in ("all", "any", "argmax", "argmin", "argsort", "choose", "clip", "compress", "conj", "conjugate",
              "cumprod", "cumsum", "diagonal", "dot", "flatten", "max", "mean", "min", "prod", "ptp", "repeat",
              "round", "searchsorted", "std", "sum", "take", "trace", "var", "argpartition"):
    func = getattr(np, _name) if _name in ("ptp",) else getattr(np.ndarray, _name)
    setattr(ndarray, _name, _method(_name, _blas.half_in_float32(func) if _name == "dot" else func))
for _name in ("sort", "partition", "put"):
    setattr(ndarray, _name, _method(_name, getattr(np.ndarray, _name), writes=True))
ndarray.nonzero = _method("nonzero", np.ndarray.nonzero, sync=True)
ndarray.compress = _method("compress", np.ndarray.compress, sync=True)
ndarray.diagonal = _method("diagonal", np.ndarray.diagonal, meta=True)


def _binary(name: str, func: Any, reflected: bool = False) -> Any:
    if reflected:
        def op(self: ndarray, other: Any) -> Any:
            return _core.apply(name, func, (other, self), {})
    else:
        def op(self: ndarray, other: Any) -> Any:
            return _core.apply(name, func, (self, other), {})
    op.__name__ = op.__qualname__ = name
    return op


def _inplace(name: str, func: Any) -> Any:
    def op(self: ndarray, other: Any) -> Any:
        _core.apply(name, func, (self, other), {"out": self})
        return self

    op.__name__ = op.__qualname__ = name
    return op


for _name, _func in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("truediv", np.true_divide),
                     ("floordiv", np.floor_divide), ("mod", np.remainder), ("pow", np.power),
                     ("matmul", _blas.half_in_float32(np.matmul)), ("and", np.bitwise_and), ("or", np.bitwise_or),
                     ("xor", np.bitwise_xor), ("lshift", np.left_shift), ("rshift", np.right_shift)):
    setattr(ndarray, f"__{_name}__", _binary(f"__{_name}__", _func))
    setattr(ndarray, f"__r{_name}__", _binary(f"__r{_name}__", _func, reflected=True))
    setattr(ndarray, f"__i{_name}__", _inplace(f"__i{_name}__", _func))
for _name, _func in (("lt", np.less), ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal),
                     ("eq", np.equal), ("ne", np.not_equal), ("divmod", np.divmod)):
    setattr(ndarray, f"__{_name}__", _binary(f"__{_name}__", _func))
ndarray.__rdivmod__ = _binary("__rdivmod__", np.divmod, reflected=True)
for _name, _func in (("neg", np.negative), ("pos", np.positive), ("abs", np.absolute), ("invert", np.invert)):
    setattr(ndarray, f"__{_name}__", (lambda f, n: lambda self: _core.apply(n, f, (self,), {}))(_func, f"__{_name}__"))
