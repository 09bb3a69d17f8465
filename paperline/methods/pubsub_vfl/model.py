"""The split model in numpy (the party processes import numpy and zmq only): bottom models f_a,
f_p (an MLP of `layers` linear layers, ReLU between, the last one giving the embedding: the
paper's bottom model has 10), the top model g (a 2-layer MLP) at the active
party, their forward and backward passes, the metrics, and μ-Gaussian DP on the embeddings."""
from __future__ import annotations

import numpy as np

Params = dict[str, np.ndarray]


def init_bottom(rng: np.random.Generator, d_in: int, hidden: int, emb: int, layers: int = 2) -> Params:
    """W1, b1 … W{layers}, b{layers}: `layers` - 1 hidden layers of `hidden` units, then the embedding."""
    if layers < 2:
        raise ValueError(f"a bottom model needs at least 2 layers (a hidden one and the embedding), not {layers}")
    widths = [d_in] + [hidden] * (layers - 1)
    p: Params = {}
    for i in range(1, layers):
        p[f"W{i}"] = rng.normal(0, np.sqrt(2 / widths[i - 1]), (widths[i - 1], hidden))
        p[f"b{i}"] = np.zeros(hidden)
    p[f"W{layers}"], p[f"b{layers}"] = rng.normal(0, np.sqrt(1 / hidden), (hidden, emb)), np.zeros(emb)
    return p


def init_top(rng: np.random.Generator, emb: int, hidden: int) -> Params:
    return {"U1": rng.normal(0, np.sqrt(2 / (2 * emb)), (2 * emb, hidden)), "c1": np.zeros(hidden),
            "U2": rng.normal(0, np.sqrt(1 / hidden), (hidden, 1)), "c2": np.zeros(1)}


def bottom_forward(p: Params, x: np.ndarray) -> tuple[np.ndarray, tuple]:
    """The embedding and the cache for the backward pass: each layer's input and pre-activation."""
    layers = len(p) // 2
    inputs, pres, h = [x], [], x
    for i in range(1, layers):
        pre = h @ p[f"W{i}"] + p[f"b{i}"]
        h = np.maximum(pre, 0)
        pres.append(pre)
        inputs.append(h)
    return h @ p[f"W{layers}"] + p[f"b{layers}"], (inputs, pres)


def bottom_backward(p: Params, cache: tuple, g_z: np.ndarray) -> Params:
    inputs, pres = cache
    layers = len(p) // 2
    grads: Params = {}
    g = g_z
    for i in range(layers, 0, -1):
        grads[f"W{i}"], grads[f"b{i}"] = inputs[i - 1].T @ g, g.sum(0)
        if i > 1:
            g = (g @ p[f"W{i}"].T) * (pres[i - 2] > 0)
    return grads


def top_loss_and_grads(p: Params, z_a: np.ndarray, z_p: np.ndarray, y: np.ndarray, task: str
                       ) -> tuple[float, Params, np.ndarray, np.ndarray]:
    """Mean loss over the batch (BCE on logits, or MSE), the top model's gradients, ∇z_a L, ∇z_p L."""
    z = np.concatenate([z_a, z_p], 1)
    pre = z @ p["U1"] + p["c1"]
    h = np.maximum(pre, 0)
    out = (h @ p["U2"] + p["c2"])[:, 0]
    n = len(y)
    if task == "classification":
        loss = float(np.mean(np.logaddexp(0, out) - y * out))
        g_out = (1 / (1 + np.exp(-out)) - y) / n
    else:
        loss = float(np.mean((out - y) ** 2))
        g_out = 2 * (out - y) / n
    g_out = g_out[:, None]
    g_h = (g_out @ p["U2"].T) * (pre > 0)
    g_z = g_h @ p["U1"].T
    grads = {"U1": z.T @ g_h, "c1": g_h.sum(0), "U2": h.T @ g_out, "c2": g_out.sum(0)}
    k = z_a.shape[1]
    return loss, grads, g_z[:, :k], g_z[:, k:]


def top_forward(top: Params, z_a: np.ndarray, z_p: np.ndarray) -> np.ndarray:
    z = np.concatenate([z_a, z_p], 1)
    return (np.maximum(z @ top["U1"] + top["c1"], 0) @ top["U2"] + top["c2"])[:, 0]


def predict(bottom_a: Params, bottom_p: Params, top: Params, x_a: np.ndarray, x_p: np.ndarray) -> np.ndarray:
    return top_forward(top, bottom_forward(bottom_a, x_a)[0], bottom_forward(bottom_p, x_p)[0])


def auc(y: np.ndarray, score: np.ndarray) -> float:
    """ROC AUC by the rank statistic (ties share their mean rank)."""
    from scipy.stats import rankdata

    pos = y == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    ranks = rankdata(score)
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def rmse(y: np.ndarray, pred: np.ndarray) -> float:
    return float(np.sqrt(np.mean((y - pred) ** 2)))


def metric(task: str, y: np.ndarray, out: np.ndarray) -> float:
    return auc(y, out) if task == "classification" else rmse(y, out)


def dp_noise_std(mu: float, clip: float) -> float:
    """μ-GDP Gaussian mechanism on a clipped embedding: σ = C/μ (sensitivity C). μ = 0: no noise."""
    return 0.0 if mu == 0 else clip / mu


def privatise(z: np.ndarray, mu: float, clip: float, rng: np.random.Generator) -> np.ndarray:
    """Clip each row's norm to C, add N(0, (C/μ)²). [I] The paper adds noise without explicit
    clipping, σ² from a moments accountant (spec update g); clip-then-noise is our stand-in."""
    if mu == 0:
        return z
    norms = np.linalg.norm(z, axis=1, keepdims=True)
    clipped = z * np.minimum(1.0, clip / np.maximum(norms, 1e-12))
    return clipped + rng.normal(0.0, dp_noise_std(mu, clip), z.shape)


def sgd(p: dict, g: dict, lr: float) -> dict:
    """p − lr·g over (nested) dicts of arrays."""
    return {k: sgd(p[k], g[k], lr) if isinstance(p[k], dict) else p[k] - lr * g[k] for k in p}


def zeros_like(p: dict) -> dict:
    return {k: zeros_like(v) if isinstance(v, dict) else np.zeros_like(v) for k, v in p.items()}


def add(p: dict, q: dict) -> dict:
    return {k: add(p[k], q[k]) if isinstance(p[k], dict) else p[k] + q[k] for k in p}


def average(params: list[dict]) -> dict:
    first = params[0]
    return {k: average([p[k] for p in params]) if isinstance(first[k], dict) else np.mean([p[k] for p in params], 0)
            for k in first}
