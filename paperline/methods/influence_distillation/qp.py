"""The second-order check on a convex model (spec §b Objective, §e convex check).

Logistic regression on a source set S and a target set T (two Gaussian classes; the target's class
means shifted so that some source samples help it more than others), at a parameter θ after a few
gradient steps on S. With G_S the per-sample gradients, g_T and H_T the target gradient and
Hessian, one weighted step θ' = θ − (η/n) G_Sᵀ w gives the quadratic model
f(w) = −pᵀw + (η/2) wᵀQw, p = G_S g_T, Q = (1/n) G_S H_T G_Sᵀ. With (λ/2)‖w‖², w ≥ 0, Σw = n, the
full QP is solved with scipy (SLSQP) and compared with the first-order solution w ∝ (p − ν)₊ at
the λ that gives k non-zero weights: they agree as η → 0 and part as η grows.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit

from paperline.methods.influence_distillation.selection import first_order_weights, lambda_for_k


def _data(rng: np.random.Generator, n: int, dim: int, shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y = rng.integers(0, 2, n)
    x = rng.normal(size=(n, dim)) + np.where(y[:, None] == 1, 1.0, -1.0) * 0.8 + shift
    return np.c_[x, np.ones(n)], y.astype(float)


def _loss(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    z = x @ theta
    return float(np.mean(np.logaddexp(0, z) - y * z))


def qp_check(n_source: int, n_target: int, dim: int, k: int, lrs: list[float], seed: int) -> dict:
    rng = np.random.default_rng(seed)
    xs, ys = _data(rng, n_source, dim, rng.normal(scale=0.5, size=dim) * (rng.random((n_source, 1)) < 0.5))
    xt, yt = _data(rng, n_target, dim, np.full(dim, 0.5))
    theta = np.zeros(dim + 1)
    for _ in range(20):  # a short warm-up on S, so gradients are not all alike
        theta -= 0.5 * xs.T @ (expit(xs @ theta) - ys) / n_source
    g_s = (expit(xs @ theta) - ys)[:, None] * xs  # per-sample gradients (n, d)
    st = expit(xt @ theta)
    g_t = xt.T @ (st - yt) / n_target
    h_t = (xt * (st * (1 - st))[:, None]).T @ xt / n_target
    p = g_s @ g_t
    q = g_s @ h_t @ g_s.T / n_source
    lam = lambda_for_k(p, k)
    w1 = first_order_weights(p, lam)
    base = _loss(theta, xt, yt)
    rows = []
    for eta in lrs:
        def objective(w):
            return -p @ w + 0.5 * eta * w @ q @ w + 0.5 * lam * w @ w

        def gradient(w):
            return -p + eta * q @ w + lam * w

        res = minimize(objective, w1, jac=gradient, method="SLSQP", bounds=[(0, None)] * n_source,
                       constraints=[{"type": "eq", "fun": lambda w: w.sum() - n_source,
                                     "jac": lambda w: np.ones_like(w)}],
                       options={"ftol": 1e-14, "maxiter": 1000})
        if not res.success:
            raise RuntimeError(f"QP at lr {eta}: {res.message}")
        w2 = np.maximum(res.x, 0)
        support1, support2 = set(np.nonzero(w1 > 1e-9)[0]), set(np.nonzero(w2 > 1e-6 * w2.max())[0])
        step = lambda w: theta - eta / n_source * g_s.T @ w  # noqa: E731
        rows.append({"lr": eta,
                     "relative_weight_difference": float(np.linalg.norm(w2 - w1) / np.linalg.norm(w1)),
                     "support_jaccard": len(support1 & support2) / len(support1 | support2),
                     "target_loss_drop_first_order": base - _loss(step(w1), xt, yt),
                     "target_loss_drop_second_order": base - _loss(step(w2), xt, yt)})
    return {"lambda": lam, "k": k, "rows": rows}
