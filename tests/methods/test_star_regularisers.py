"""STAR's policy regularisers: the Gumbel regression's minimiser, Q_ξ fitted on buffer tuples
only, the actor's KL term, in-sample value iteration on a tiny graph and the seen-action KL."""
from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch

from paperline.methods.star.conservative import ConservativeQ, gumbel_loss, soft_in_sample_value
from paperline.methods.star.graph import TransitionGraph, seen_softmax_kl
from paperline.rl import sac as sac_module
from paperline.rl.sac import SAC, SACSettings
from tests.methods.star_helpers import lbfgs_minimise


@pytest.mark.parametrize("beta", [0.5, 2.0, 6.0])
def test_gumbel_regression_is_minimised_at_the_in_sample_log_mean_exp(beta):
    q = torch.tensor([0.3, -1.2, 2.0, 0.7, 1.1])
    closed = soft_in_sample_value(q, beta)
    assert closed.item() == pytest.approx(beta * math.log(np.mean(np.exp(q.numpy() / beta))), rel=1e-6)
    v = torch.zeros((), requires_grad=True)
    assert lbfgs_minimise(v, lambda: gumbel_loss(q, v.expand_as(q), beta)).item() == pytest.approx(closed.item(),
                                                                                                  abs=1e-5)


def test_the_soft_value_runs_from_the_in_sample_max_to_the_mean():
    q = torch.tensor([1.0, 2.0, 6.0])
    assert soft_in_sample_value(q, 1e-3).item() == pytest.approx(6.0, abs=0.01)
    assert soft_in_sample_value(q, 1e4).item() == pytest.approx(3.0, abs=1e-3)
    values = [soft_in_sample_value(q, b).item() for b in (0.1, 1.0, 6.0, 50.0)]
    assert values == sorted(values, reverse=True)  # monotone in β


def _batch(rng, n=16, obs_dim=3, act_dim=2):
    return {"obs": rng.normal(size=(n, obs_dim)).astype(np.float32),
            "act": rng.uniform(-1, 1, (n, act_dim)).astype(np.float32),
            "next_obs": rng.normal(size=(n, obs_dim)).astype(np.float32),
            "reward": rng.uniform(-1, 1, n).astype(np.float32), "terminated": np.zeros(n, np.float32)}


def test_q_xi_is_fitted_on_buffer_actions_only():
    rng = np.random.default_rng(0)
    cq = ConservativeQ(3, 2, 16, 2, 1e-3, 6.0, 0.99, 0.005, 2, torch.Generator().manual_seed(0))
    batch = _batch(rng)
    seen = []
    for net in (cq.q, cq.q_target):
        net.register_forward_pre_hook(lambda module, args: seen.append(args[0][:, 3:].detach().clone()))
    losses = [cq.update(batch) for _ in range(3)]
    assert seen and all(torch.equal(actions, torch.as_tensor(batch["act"])) for actions in seen)
    assert all(np.isfinite(list(loss.values())).all() for loss in losses)
    assert int(cq.updates) == 3


def test_the_actor_term_is_eta_times_log_pi_minus_q_xi():
    rng = np.random.default_rng(1)
    cq = ConservativeQ(3, 2, 16, 2, 1e-3, 6.0, 0.99, 0.005, 2, torch.Generator().manual_seed(0))
    obs, act = torch.as_tensor(_batch(rng)["obs"]), torch.as_tensor(_batch(rng)["act"])
    logp = torch.randn(16)
    expected = 0.1 * (logp - cq.q_xi(obs, act)).mean()
    assert cq.actor_term(0.1)(obs, act, logp).item() == pytest.approx(expected.item(), rel=1e-6)
    assert cq.actor_term(0.0)(obs, act, logp).item() == 0.0


def test_the_actor_term_steers_the_action_and_leaves_q_xi_untouched():
    cq = ConservativeQ(3, 2, 16, 2, 1e-3, 6.0, 0.99, 0.005, 2, torch.Generator().manual_seed(0))
    batch = _batch(np.random.default_rng(2))
    obs, act = torch.as_tensor(batch["obs"]), torch.as_tensor(batch["act"]).requires_grad_(True)
    (grad_reference,) = torch.autograd.grad(-0.1 * cq.q_xi(obs, act).mean(), act)
    cq.actor_term(0.1)(obs, act, torch.zeros(16)).backward()
    assert torch.equal(act.grad, grad_reference)
    assert all(p.grad is None and p.requires_grad for p in cq.q.parameters())


def test_sac_updates_the_same_without_the_critics_weight_gradients_in_the_actor_step(monkeypatch):
    """The actor step skips the critic's weight gradients (its optimiser clears them unused): the
    weights after a few updates are exactly those of the plain step that computes them."""
    def trained() -> SAC:
        agent = SAC(3, 2, -np.ones(2, np.float32), np.ones(2, np.float32), SACSettings(hidden=16, batch=16),
                    torch.Generator().manual_seed(0))
        rng = np.random.default_rng(3)
        for _ in range(4):
            agent.update(_batch(rng))
        return agent

    fast = trained()
    assert all(p.requires_grad for p in fast.critic.parameters())
    monkeypatch.setattr(sac_module, "no_weight_grads", lambda module: contextlib.nullcontext())
    plain = trained()
    assert all(torch.equal(a, b) for a, b in zip(fast.state_dict().values(), plain.state_dict().values()))


def test_in_sample_value_iteration_on_a_tiny_graph():
    """0 −a0→ 1 −a0→ 2 (terminal, r=1); 0 −a1→ 0 (r=0.5); from 1, a1 is never taken (its Q̂ is
    never made up); 3 −a0→ {1 (3 visits), 2 (1 visit)} (p̂ from counts)."""
    g = TransitionGraph(n_actions=2)
    g.add(0, 0, 1, False, 0.0)
    g.add(1, 0, 2, True, 1.0)
    g.add(0, 1, 0, False, 0.5)
    for s2 in (1, 1, 1, 2):
        g.add(3, 0, s2, False, 0.2)
    gamma = 0.9
    g.value_iteration(gamma, tol=1e-12)
    q11 = 1.0  # terminal: no bootstrap
    q01 = 0.5 / (1 - gamma)  # the self-loop: 5.0
    q00 = 0.0 + gamma * q11  # max over 1's *seen* actions only
    q30 = 0.2 + gamma * (0.75 * q11 + 0.25 * 0.0)  # state 2 has no outgoing edge: value 0
    assert g.q[(1, 0)] == pytest.approx(q11, abs=1e-9)
    assert g.q[(0, 1)] == pytest.approx(q01, abs=1e-9)
    assert g.q[(0, 0)] == pytest.approx(q00, abs=1e-9)
    assert g.q[(3, 0)] == pytest.approx(q30, abs=1e-9)
    assert (1, 1) not in g.q and g.seen_actions(1) == [0]
    states, q_hat, mask = g.kl_batch(np.random.default_rng(0), 10)
    assert sorted(states.tolist()) == [0, 1, 3]
    row = states.tolist().index(0)
    assert mask[row].tolist() == [True, True] and q_hat[row].tolist() == pytest.approx([q00, q01])
    g.relabel(lambda s, a: np.where(a == 1, -1.0, 0.0))  # a new reward model: Q̂ re-solved from it
    g.value_iteration(gamma, tol=1e-12)
    # the self-loop now costs −1 and bootstraps through a0 (Q̂ = 0), the in-sample max at state 0
    assert g.q[(0, 1)] == pytest.approx(-1.0, abs=1e-9) and g.q[(1, 0)] == 0.0 and g.q[(0, 0)] == 0.0
    restored = TransitionGraph(2)
    restored.load_state_dict(g.state_dict())
    assert restored.q == g.q and restored.solved


def test_seen_softmax_kl_ignores_unseen_actions():
    q_hat = torch.tensor([[1.0, 0.0, 5.0], [0.0, 2.0, 0.0]])
    mask = torch.tensor([[True, True, False], [False, True, True]])
    same_on_seen = q_hat.masked_fill(~mask, 9.0) + 3.0  # unseen actions differ, a constant shift
    assert seen_softmax_kl(q_hat, same_on_seen, mask).item() == pytest.approx(0.0, abs=1e-6)
    q_theta = torch.zeros(2, 3)
    p = torch.softmax(torch.tensor([1.0, 0.0]), 0)
    kl0 = float((p * (p.log() - math.log(0.5))).sum())
    p2 = torch.softmax(torch.tensor([2.0, 0.0]), 0)
    kl1 = float((p2 * (p2.log() - math.log(0.5))).sum())
    assert seen_softmax_kl(q_hat, q_theta, mask).item() == pytest.approx((kl0 + kl1) / 2, rel=1e-6)
