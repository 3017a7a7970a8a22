"""CuPy's NumPy-like functions and ufuncs, run by NumPy through :func:`._core.apply`.

Each function accepts exactly the parameters of CuPy 14's function of the same name (``__signature__`` and
argument binding come from :mod:`._signatures`); arguments are passed on to NumPy as given.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _blas, _core, _creation, _sig, _signatures

__all__ = ["ufunc"]

_SPECIAL = set(_creation.__all__) | {"from_dlpack", "where"}
_WRITES = {"copyto": (0,), "put": (0,), "place": (0,), "putmask": (0,), "put_along_axis": (0,),
           "fill_diagonal": (0,)}
_SYNC = {"nonzero", "flatnonzero", "argwhere", "unique", "unique_all", "unique_counts", "unique_inverse",
         "unique_values", "extract", "compress", "setdiff1d", "intersect1d", "union1d", "setxor1d", "trim_zeros"}
# No data access (metadata only), or views of their arguments (a read is recorded when a copy was needed).
_META = {"shape", "ndim", "size", "result_type", "can_cast", "min_scalar_type", "promote_types", "common_type",
         "iscomplexobj", "isrealobj", "isscalar", "issubdtype", "broadcast_shapes", "shares_memory",
         "may_share_memory", "isfortran", "reshape", "ravel", "transpose", "swapaxes", "moveaxis", "rollaxis",
         "expand_dims", "squeeze", "broadcast_to", "broadcast_arrays", "atleast_1d", "atleast_2d", "atleast_3d",
         "split", "array_split", "hsplit", "vsplit", "dsplit", "diagonal", "flip", "fliplr", "flipud", "real",
         "imag", "matrix_transpose", "permute_dims"}


def _function(name: str, func: Any, params: tuple) -> Any:
    sig = _sig.signature_of(params)
    writes = _WRITES.get(name, ())
    sync = name in _SYNC
    meta = tuple(range(8)) if name in _META else ()

    def function(*args: Any, **kwargs: Any) -> Any:
        try:
            sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"cupy.{name}(): {exc}; CuPy's signature is {name}{sig}") from None
        return _core.apply(name, func, args, kwargs, write_args=writes, meta_args=meta, sync=sync)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"NumPy's ``{name}`` on the current emulated GPU, with CuPy's parameters."
    function.__signature__ = sig
    return function


def where(condition: Any, x: Any = None, y: Any = None) -> Any:
    """``x`` where ``condition`` else ``y``; with ``condition`` alone, its nonzero indices (synchronises)."""
    if x is None and y is None:
        return _core.apply("where", np.where, (condition,), {}, sync=True)
    if x is None or y is None:
        raise ValueError("Must provide both 'x' and 'y' or neither.")
    return _core.apply("where", np.where, (condition, x, y), {})


class ufunc:  # noqa: N801 - CuPy's name
    """A CuPy universal function run by NumPy's ufunc of the same name.

    Called as ``f(*inputs, out=None, dtype=None, casting='same_kind')``; ``reduce``, ``accumulate``,
    ``reduceat``, ``outer`` and ``at`` as in NumPy (``at`` writes its first argument).
    """

    def __init__(self, name: str, nin: int, nout: int, ops: Any) -> None:
        self.name = self.__name__ = name
        self._func = ops  # the NumPy callable computing it
        self.nin = nin
        self.nout = nout
        self.nargs = nin + nout
        self.__doc__ = f"CuPy's ufunc ``{name}`` (NumPy's on the emulated GPU)."

    def __repr__(self) -> str:
        return f"<ufunc '{self.name}'>"

    @property
    def types(self) -> list[str]:
        """The loops' type signatures (NumPy's)."""
        return list(getattr(self._func, "types", []))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        unknown = set(kwargs) - {"out", "dtype", "casting"}
        if unknown:
            raise TypeError(f"Wrong arguments {sorted(unknown)} for ufunc {self.name}")
        if isinstance(kwargs.get("out"), tuple) and len(kwargs["out"]) == 1:
            kwargs["out"] = kwargs["out"][0]
        return _core.apply(self.name, self._func, args, kwargs)

    def _method(self, method: str, args: tuple, kwargs: dict[str, Any], writes: tuple[int, ...] = ()) -> Any:
        func = getattr(self._func, method, None)
        if func is None:
            raise ValueError(f"{method} only supported for ufuncs with NumPy counterparts, not {self.name}")
        return _core.apply(f"{self.name}.{method}", func, args, kwargs, write_args=writes)

    def reduce(self, array: Any, axis: Any = 0, dtype: Any = None, out: Any = None, keepdims: bool = False) -> Any:
        """Reduce ``array`` along ``axis`` with this ufunc."""
        return self._method("reduce", (array,), {"axis": axis, "dtype": dtype, "out": out, "keepdims": keepdims})

    def accumulate(self, array: Any, axis: int = 0, dtype: Any = None, out: Any = None) -> Any:
        """Accumulate ``array`` along ``axis`` with this ufunc."""
        return self._method("accumulate", (array,), {"axis": axis, "dtype": dtype, "out": out})

    def reduceat(self, array: Any, indices: Any, axis: int = 0, dtype: Any = None, out: Any = None) -> Any:
        """Reduce ``array`` over slices starting at ``indices``."""
        return self._method("reduceat", (array, indices), {"axis": axis, "dtype": dtype, "out": out})

    def outer(self, A: Any, B: Any, **kwargs: Any) -> Any:  # noqa: N803 - CuPy's names
        """This ufunc applied to every pair of ``A`` and ``B``'s elements."""
        return self._method("outer", (A, B), kwargs)

    def at(self, a: Any, indices: Any, b: Any = None) -> None:
        """Apply unbuffered in place: ``a[indices] = f(a[indices], b)``."""
        args = (a, indices) if b is None else (a, indices, b)
        self._method("at", args, {}, writes=(0,))


def _numpy_ufunc(name: str) -> Any:
    aliases = {"bitwise_invert": "invert", "bitwise_left_shift": "left_shift", "bitwise_right_shift": "right_shift",
               "acos": "arccos", "acosh": "arccosh", "asin": "arcsin", "asinh": "arcsinh", "atan": "arctan",
               "atan2": "arctan2", "atanh": "arctanh", "pow": "power"}
    return getattr(np, name, None) or getattr(np, aliases.get(name, name))


def _build() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _signatures.UFUNCS:
        func = _numpy_ufunc(name)
        out[name] = ufunc(name, getattr(func, "nin", 1), getattr(func, "nout", 1), func)
    for name, params in _signatures.FUNCTIONS.items():
        if name in _SPECIAL or name in out or not hasattr(np, name):
            continue
        func = getattr(np, name)
        out[name] = _function(name, _blas.half_in_float32(func) if name in ("matmul", "dot") else func, params)
    return out


globals().update(_build())
for _name in _creation.__all__:
    globals()[_name] = getattr(_creation, _name)
