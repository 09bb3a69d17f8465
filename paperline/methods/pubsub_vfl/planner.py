"""The profiling cost model and the planner over (w_a, w_p, B).

Per party X, a batch of B takes t_X(B) = λ_X·B^γ_X seconds (forward + backward; the top model's
time counted at the active party), fitted in log-log space from a short profile; the exponent is
not forced positive (spec update g: the paper's fitted exponents are negative). Memory per
worker M(B) = M₀ + ρ·B^χ gives B_max under the per-worker cap.
[I] The epoch time the planner minimises, max(T_A, T_P) + T_comm, with
    T_X(w, B) = ⌈n/B⌉ · (t_X(B)/min(w, C_X) + o·w)     (o: per-step coordination cost of each worker)
    T_comm(B) = ⌈n/B⌉ · (c₀ + (E + G)/bandwidth)
is our reconstruction of the paper's T_f = λB^γ/(wC) plus its communication term: t_X is one
worker's real forward + backward on one core, the party's C_X cores (total_cores split by
cores.counts, as the run pins them) run at most C_X of its w workers at once, and o·w is the cost
of more workers contending for them. Exhaustive search over the grid (the paper's DP visits the
same (i, j, r) cells)."""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np

from paperline.methods.pubsub_vfl import cores, model


@dataclass(frozen=True)
class PartyCost:
    lam: float  # λ
    gamma: float  # γ


@dataclass(frozen=True)
class CostModel:
    n: int  # training rows
    active: PartyCost
    passive: PartyCost
    worker_overhead_s: float  # o
    message_s: float  # c₀
    bytes_per_row: float  # E + G per row (embedding and its gradient)
    bandwidth: float  # bytes per second
    mem_base: float  # M₀ (bytes)
    mem_rho: float  # ρ
    mem_chi: float  # χ
    mem_cap: float  # per worker (bytes)
    cores: int  # C_a + C_p

    def batch_max(self) -> float:
        return ((self.mem_cap - self.mem_base) / self.mem_rho) ** (1 / self.mem_chi) if self.mem_cap > self.mem_base else 0

    def party_time(self, cost: PartyCost, w: int, B: int, party_cores: int) -> float:
        return math.ceil(self.n / B) * (cost.lam * B ** cost.gamma / min(w, party_cores) + self.worker_overhead_s * w)

    def comm_time(self, B: int) -> float:
        return math.ceil(self.n / B) * (self.message_s + self.bytes_per_row * B / self.bandwidth)

    def epoch_time(self, w_a: int, w_p: int, B: int) -> float:
        c_a, c_p = cores.counts(self.cores, w_a, w_p)
        return max(self.party_time(self.active, w_a, B, c_a),
                   self.party_time(self.passive, w_p, B, c_p)) + self.comm_time(B)


def plan(cost: CostModel, workers_a: list[int], workers_p: list[int], batches: list[int]) -> tuple[int, int, int]:
    """argmin over the grid of the epoch time, B ≤ B_max; ties to the fewest workers, smallest B."""
    b_max = cost.batch_max()
    cells = [(cost.epoch_time(i, j, B), i + j, B, i, j) for i in workers_a for j in workers_p
             for B in batches if B <= b_max]
    if not cells:
        raise ValueError(f"no batch size in {batches} fits the per-worker memory (B_max = {b_max:.0f})")
    _, _, B, i, j = min(cells)
    return i, j, B


def fit_power(batches: list[int], times: list[float]) -> PartyCost:
    """λ, γ of t = λ·B^γ by least squares on log t = log λ + γ log B."""
    gamma, log_lam = np.polyfit(np.log(batches), np.log(times), 1)
    return PartyCost(float(np.exp(log_lam)), float(gamma))


def profile(cfg, n: int, d_active: int, d_passive: int, task: str, reps: int = 5) -> CostModel:
    """Time each party's real forward + backward at the planner's batch sizes, on one core of this
    process (one BLAS thread: a worker's share when the workers fill their cores), plus the run's
    heterogeneity emulation where it has one (the sleep ∝ rows), and fit the cost model."""
    total = len(cores.usable(cfg.total_cores))  # refuses more cores than the machine has
    with _one_thread():
        t_a, t_p = _time_passes(cfg, d_active, d_passive, task, reps)
    per_row = 8 * 2 * cfg.embedding  # float64 embedding + gradient
    activations = 8 * (cfg.bottom_layers * cfg.hidden + cfg.embedding + max(d_active, d_passive))
    weights = 8 * (max(d_active, d_passive) * cfg.hidden + (cfg.bottom_layers - 2) * cfg.hidden ** 2
                   + cfg.hidden * cfg.embedding + 2 * cfg.embedding * cfg.top_hidden)
    return CostModel(n=n, active=fit_power(cfg.plan_batches, t_a), passive=fit_power(cfg.plan_batches, t_p),
                     worker_overhead_s=cfg.worker_overhead_ms * 1e-3, message_s=cfg.message_overhead_ms * 1e-3,
                     bytes_per_row=per_row, bandwidth=1e9, mem_base=weights, mem_rho=activations, mem_chi=1.0,
                     mem_cap=cfg.memory_cap_mb * 2 ** 20, cores=total)


def _one_thread():
    """numpy's BLAS on one thread for the profile (threadpoolctl, scikit-learn's dependency)."""
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

    return threadpool_limits(1)


def _time_passes(cfg, d_active: int, d_passive: int, task: str, reps: int) -> tuple[list[float], list[float]]:
    rng = np.random.default_rng(cfg.seed)
    bottom_a = model.init_bottom(rng, d_active, cfg.hidden, cfg.embedding, cfg.bottom_layers)
    bottom_p = model.init_bottom(rng, d_passive, cfg.hidden, cfg.embedding, cfg.bottom_layers)
    top = model.init_top(rng, cfg.embedding, cfg.top_hidden)
    t_a, t_p = [], []
    for B in cfg.plan_batches:
        xa, xp, y = rng.normal(size=(B, d_active)), rng.normal(size=(B, d_passive)), (rng.random(B) > 0.5) * 1.0
        best_a = best_p = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            zp, cache_p = model.bottom_forward(bottom_p, xp)
            model.bottom_backward(bottom_p, cache_p, zp)
            best_p = min(best_p, time.perf_counter() - t)
            t = time.perf_counter()
            za, cache_a = model.bottom_forward(bottom_a, xa)
            _, _, g_za, _ = model.top_loss_and_grads(top, za, zp, y, task)
            model.bottom_backward(bottom_a, cache_a, g_za)
            best_a = min(best_a, time.perf_counter() - t)
        emulated = cfg.delay_per_sample_ms * 1e-3 * B
        t_a.append(best_a + emulated * cfg.active_slowdown)
        t_p.append(best_p + 2 * emulated * cfg.passive_slowdown)  # forward and backward each sleep
    return t_a, t_p


def as_dict(cost: CostModel) -> dict:
    return asdict(cost)


def from_dict(fields: dict) -> CostModel:
    """`as_dict`'s inverse (a kept plan's cost model)."""
    return CostModel(**fields | {party: PartyCost(**fields[party]) for party in ("active", "passive")})
