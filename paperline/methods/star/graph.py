"""STAR's discrete variant: the replay memory as a graph (states are vertices; an edge (s, a) keeps
its visit counts to each s′, whether it ended the episode, and r̂(s, a)), and in-sample value
iteration over it,

    Q̂(s, a) = r̂(s, a) + γ Σ_{s′} p̂(s′|s, a) (1 − d) max_{a′ ∈ A_seen(s′)} Q̂(s′, a′),

with p̂ from the counts and the max only over actions taken from s′ in the memory (a state with no
outgoing edge, reached only at a time limit, has value 0). Sweeps run in reverse order of first
visit (spec (b): reverse-order iteration) until the largest change is below `tol`.

The KL term of the Q_θ loss (App. A.2; its direction not decoded, [I]: the spec's written
KL(softmax_{A_seen} Q̂ ‖ softmax_{A_seen} Q_θ)) compares the two softmaxes over the seen actions."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch
import torch.nn.functional as F


class TransitionGraph:
    def __init__(self, n_actions: int):
        self.n_actions = n_actions
        self.order: list[tuple[int, int]] = []  # edges in order of first visit
        # per edge: visit counts of (s′, terminated)
        self.next_counts: dict[tuple[int, int], dict[tuple[int, bool], int]] = {}
        self.reward: dict[tuple[int, int], float] = {}
        self.q: dict[tuple[int, int], float] = {}
        self._table: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # of the last value iteration

    def add(self, s: int, a: int, s_next: int, terminated: bool, reward: float) -> None:
        edge = (int(s), int(a))
        if edge not in self.next_counts:
            self.order.append(edge)
            self.next_counts[edge] = defaultdict(int)
            self.q[edge] = 0.0
        self.next_counts[edge][(int(s_next), bool(terminated))] += 1
        self.reward[edge] = float(reward)

    def seen_actions(self, s: int) -> list[int]:
        return sorted(a for (t, a) in self.next_counts if t == s)

    def states(self) -> list[int]:
        return sorted({s for s, _ in self.next_counts})

    def relabel(self, reward_fn) -> None:
        """r̂ of every edge from reward_fn(states, actions) (the reward model's mean)."""
        if not self.order:
            return
        s, a = np.array(self.order).T
        for edge, r in zip(self.order, reward_fn(s, a)):
            self.reward[edge] = float(r)

    def value_iteration(self, gamma: float, tol: float = 1e-6, max_sweeps: int = 1000) -> int:
        """In-sample value iteration in place (Gauss–Seidel, reverse first-visit order, warm-started
        from the last Q̂); returns the sweeps run."""
        seen: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for edge in self.order:
            seen[edge[0]].append(edge)

        def v(state: int) -> float:
            edges = seen.get(state)
            return max(self.q[e] for e in edges) if edges else 0.0

        for sweep in range(1, max_sweeps + 1):
            delta = 0.0
            for edge in reversed(self.order):
                counts = self.next_counts[edge]
                total = sum(counts.values())
                cont = sum(n * v(s2) for (s2, term), n in counts.items() if not term)
                new = self.reward[edge] + gamma * cont / total
                delta = max(delta, abs(new - self.q[edge]))
                self.q[edge] = new
            if delta < tol:
                break
        self._table = self._tabulate()
        return sweep

    def _tabulate(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(states, Q̂ [states, actions], seen mask) of the edges as they are now."""
        states = self.states()
        row = {s: i for i, s in enumerate(states)}
        q_hat = np.zeros((len(states), self.n_actions), np.float32)
        mask = np.zeros((len(states), self.n_actions), bool)
        for (s, a), q in self.q.items():
            q_hat[row[s], a], mask[row[s], a] = q, True
        return np.array(states), q_hat, mask

    @property
    def solved(self) -> bool:
        return self._table is not None

    def kl_batch(self, rng: np.random.Generator, batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A batch of states of the last value iteration, with their Q̂ over all actions and the
        mask of the seen ones."""
        if self._table is None:
            raise RuntimeError("kl_batch before the graph's first value iteration")
        states, q_hat, mask = self._table
        picked = rng.choice(len(states), size=min(batch, len(states)), replace=False)
        return states[picked], q_hat[picked], mask[picked]

    def state_dict(self) -> dict:
        return {"order": list(self.order), "next_counts": {e: dict(c) for e, c in self.next_counts.items()},
                "reward": dict(self.reward), "q": dict(self.q), "solved": self.solved}

    def load_state_dict(self, state: dict) -> None:
        self.order = list(state["order"])
        self.next_counts = {e: defaultdict(int, c) for e, c in state["next_counts"].items()}
        self.reward, self.q = dict(state["reward"]), dict(state["q"])
        self._table = self._tabulate() if state["solved"] else None


def seen_softmax_kl(q_hat: torch.Tensor, q_theta: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over states of KL(softmax_{A_seen} Q̂ ‖ softmax_{A_seen} Q_θ)."""
    neg = torch.finfo(q_theta.dtype).min
    log_p = F.log_softmax(q_hat.masked_fill(~mask, neg), -1)
    log_q = F.log_softmax(q_theta.masked_fill(~mask, neg), -1)
    return (log_p.exp() * (log_p - log_q)).masked_fill(~mask, 0.0).sum(-1).mean()
