"""Finite-difference gradient checking for mxlite ops (float64, central differences).

``check_grad(fn, inputs)`` builds float64 tensors from NumPy inputs, runs ``fn`` under
``autograd.record()``, back-propagates a seeded random head gradient ``h`` and compares
every floating input's gradient with the central difference of ``sum(h * fn(...))``.
Integer inputs (indices, labels) are passed as constant tensors and not checked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import mxlite as mx
from mxlite.autograd.tensor import Tensor


def _is_float(a: np.ndarray) -> bool:
    return np.issubdtype(a.dtype, np.floating)


def _to_tensors(inputs: Sequence[np.ndarray], device: mx.Device, wrt: set[int]) -> list[Tensor]:
    out = []
    for i, a in enumerate(inputs):
        a = np.asarray(a)
        t = mx.array(a.astype(np.float64) if _is_float(a) else a, device=device)
        if i in wrt:
            t.attach_grad()
        out.append(t)
    return out


def _dense(g: Any) -> np.ndarray:
    return g.asnumpy()  # Tensor and RowSparseTensor both densify through asnumpy()


def check_grad(
    fn: Callable[..., Tensor],
    inputs: Sequence[np.ndarray],
    eps: float = 1e-6,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    reference: Callable[..., np.ndarray] | None = None,
    wrt: Sequence[int] | None = None,
    seed: int = 0,
    device: mx.Device | None = None,
    train_mode: bool = True,
) -> list[np.ndarray | None]:
    """Assert ``fn``'s analytic gradients match central finite differences.

    Args:
        fn: maps tensors (one per input, same order) to one output tensor.
        inputs: NumPy arrays; floating ones are cast to float64.
        eps: finite-difference step.
        rtol, atol: tolerances of the gradient comparison (``np.testing.assert_allclose``).
        reference: optional NumPy function of the float64 inputs; the forward output must
            match it (at the same tolerances).
        wrt: indices of the inputs to check (default: every floating input).
        seed: seed of the random head gradient.
        device: where the tensors live (default ``cpu(0)``).
        train_mode: the training flag while recording (finite differences use the same).

    Returns:
        The analytic gradient of each input as a dense NumPy array (``None`` where unchecked).
    """
    device = device or mx.cpu(0)
    arrays = [np.asarray(a) for a in inputs]
    checked = set(range(len(arrays))) if wrt is None else set(wrt)
    checked = {i for i in checked if _is_float(arrays[i])}
    base = [a.astype(np.float64) if _is_float(a) else a for a in arrays]

    tensors = _to_tensors(base, device, checked)
    with mx.autograd.record(train_mode=train_mode):
        out = fn(*tensors)
    out_np = out.asnumpy()
    if reference is not None:
        ref = np.asarray(reference(*[a.copy() for a in base]))
        assert out_np.shape == ref.shape, f"forward shape {out_np.shape} != reference shape {ref.shape}"
        np.testing.assert_allclose(out_np, ref, rtol=rtol, atol=atol, err_msg="forward disagrees with reference")
    head = np.random.default_rng(seed).standard_normal(out_np.shape)
    out.backward(mx.array(head, device=device, dtype=np.float64))

    def objective(arrs: list[np.ndarray]) -> float:
        ts = [mx.array(a, device=device) for a in arrs]
        with mx.autograd.train_mode() if train_mode else mx.autograd.predict_mode():
            value = fn(*ts).asnumpy()
        return float(np.sum(head * value))

    grads: list[np.ndarray | None] = [None] * len(arrays)
    for i in sorted(checked):
        analytic = _dense(tensors[i].grad)
        numeric = np.zeros_like(base[i])
        flat = numeric.reshape(-1)
        for k in range(base[i].size):
            plus = [a.copy() for a in base]
            minus = [a.copy() for a in base]
            plus[i].reshape(-1)[k] += eps
            minus[i].reshape(-1)[k] -= eps
            flat[k] = (objective(plus) - objective(minus)) / (2 * eps)
        np.testing.assert_allclose(analytic, numeric, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {i} (shape {base[i].shape}) is wrong")
        grads[i] = analytic
    return grads


def check_hvp(
    fn: Callable[..., Tensor],
    inputs: Sequence[np.ndarray],
    eps: float = 1e-5,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    wrt: Sequence[int] | None = None,
    seed: int = 0,
    device: mx.Device | None = None,
) -> list[np.ndarray | None]:
    """Assert ``fn``'s second derivatives, through ``autograd.grad(..., create_graph=True)``, match finite differences.

    With a seeded random head ``h`` and direction ``v`` (one array per checked input), ``L = sum(h * fn(x))``:
    the gradient ``G = dL/dx`` is recorded with ``create_graph=True``, then ``sum(G . v)`` is back-propagated,
    giving the Hessian-vector product ``H v`` in each input's ``grad``. It must equal the central difference
    ``(G(x + eps v) - G(x - eps v)) / (2 eps)`` of first-order gradients (themselves checked against finite
    differences by :func:`check_grad`). The recorded ``G`` must also equal the plain gradient.

    Returns:
        ``H v`` of each input as a NumPy array (``None`` where unchecked).
    """
    device = device or mx.cpu(0)
    arrays = [np.asarray(a) for a in inputs]
    checked = sorted(i for i in (range(len(arrays)) if wrt is None else wrt) if _is_float(arrays[i]))
    base = [a.astype(np.float64) if _is_float(a) else a for a in arrays]
    rng = np.random.default_rng(seed)
    head = None
    direction = {i: rng.standard_normal(base[i].shape) for i in checked}

    def gradients(arrs: list[np.ndarray], create_graph: bool) -> tuple[list[Tensor], list[Tensor]]:
        nonlocal head
        ts = _to_tensors(arrs, device, set(checked))
        with mx.autograd.record():
            out = fn(*ts)
            if head is None:
                head = np.random.default_rng(seed + 1).standard_normal(out.shape)
            loss = (out * mx.array(head, device=device, dtype=np.float64)).sum()
        return ts, mx.autograd.grad(loss, [ts[i] for i in checked], create_graph=create_graph)

    ts, grads = gradients(base, True)
    _, plain = gradients(base, False)
    for i, g, p in zip(checked, grads, plain):
        np.testing.assert_allclose(g.asnumpy(), p.asnumpy(), rtol=1e-12, atol=1e-12,
                                   err_msg=f"create_graph changed the gradient of input {i}")
    dot = None
    with mx.autograd.record():
        for i, g in zip(checked, grads):
            term = (g * mx.array(direction[i], device=device, dtype=np.float64)).sum()
            dot = term if dot is None else dot + term
    if dot._node is not None:  # else the gradient does not depend on any input: H v = 0
        dot.backward()

    def shifted(sign: float) -> list[np.ndarray]:
        arrs = [a.copy() for a in base]
        for i in checked:
            arrs[i] = arrs[i] + sign * eps * direction[i]
        return [g.asnumpy() for g in gradients(arrs, False)[1]]

    plus, minus = shifted(1.0), shifted(-1.0)
    results: list[np.ndarray | None] = [None] * len(arrays)
    for k, i in enumerate(checked):
        analytic = ts[i].grad.asnumpy()
        numeric = (plus[k] - minus[k]) / (2 * eps)
        np.testing.assert_allclose(analytic, numeric, rtol=rtol, atol=atol,
                                   err_msg=f"Hessian-vector product of input {i} (shape {base[i].shape}) is wrong")
        results[i] = analytic
    return results
