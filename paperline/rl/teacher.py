"""The scripted teacher of PEBBLE with B-Pref's (Lee et al. 2021b) irrational-teacher options: it
prefers the segment with the larger (myopically discounted) true return; `beta` makes the choice
stochastic (Boltzmann), `mistake` flips a label with that probability, `equal_margin` answers
"equally preferable" (½) when the returns differ by less than that share of the segment length.
It counts the queries it answers (the feedback budget)."""
from __future__ import annotations

import numpy as np
from pydantic import Field

from paperline.config import StrictModel


class TeacherSettings(StrictModel):
    beta: float | None = Field(None, gt=0)  # None: perfectly rational
    gamma: float = Field(1.0, ge=0, le=1)  # myopia: step t of H weighted gamma^(H−1−t)
    mistake: float = Field(0.0, ge=0, le=1)
    equal_margin: float = Field(0.0, ge=0)  # ½ when |R⁰ − R¹| < equal_margin · H


def segment_returns(rewards: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """[pairs, H] true rewards -> the teacher's returns (later steps weigh more when gamma < 1)."""
    H = rewards.shape[-1]
    return (rewards * gamma ** np.arange(H - 1, -1, -1)).sum(-1)


def rational_labels(r0: np.ndarray, r1: np.ndarray) -> np.ndarray:
    """y = P[σ⁰ ≻ σ¹] of a noiseless teacher: 1, 0, or ½ on equal returns."""
    return np.where(r0 > r1, 1.0, np.where(r0 < r1, 0.0, 0.5))


class ScriptedTeacher:
    def __init__(self, settings: TeacherSettings, rng: np.random.Generator):
        self.s, self.rng, self.queries = settings, rng, 0

    def label(self, rewards0: np.ndarray, rewards1: np.ndarray) -> np.ndarray:
        s = self.s
        r0, r1 = segment_returns(rewards0, s.gamma), segment_returns(rewards1, s.gamma)
        if s.beta is None:
            y = rational_labels(r0, r1)
        else:
            p = 1 / (1 + np.exp(-s.beta * (r0 - r1)))
            y = (self.rng.random(len(p)) < p).astype(float)
        flip = self.rng.random(len(y)) < s.mistake
        y = np.where(flip & (y != 0.5), 1 - y, y)
        if s.equal_margin > 0:
            y = np.where(np.abs(r0 - r1) < s.equal_margin * rewards0.shape[-1], 0.5, y)
        self.queries += len(y)
        return y

    def state_dict(self) -> dict:
        return {"queries": self.queries, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.queries = state["queries"]
        self.rng.bit_generator.state = state["rng"]
