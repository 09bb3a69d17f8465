"""The cost model and the planner on a known cost model (exact), the power-law fit (negative
exponents kept), the semi-asynchronous interval."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from paperline.methods.pubsub_vfl import planner
from paperline.methods.pubsub_vfl.parties import batches, delta_t


def _cost(**kw):
    base = dict(n=1024, active=planner.PartyCost(1e-3, 1.0), passive=planner.PartyCost(4e-3, 1.0),
                worker_overhead_s=1e-3, message_s=0.0, bytes_per_row=0.0, bandwidth=1.0,
                mem_base=0.0, mem_rho=1.0, mem_chi=1.0, mem_cap=1e9, cores=64)
    return planner.CostModel(**(base | kw))


def test_planner_on_a_known_cost_model():
    # per batch of B: t_X = λ_X·B; epoch: (n/B)(λ_X B/w + o w) = n λ_X/w + (n/B) o w
    # passive 4× slower: T_P(w) = 4.096/w + (1024/B)·1e-3·w is the max; at B = 256,
    # w_p = 4: 1.024 + 0.016 = 1.04; w_p = 8: 0.512 + 0.032 = 0.544; w_a = 2: 0.512 + 0.008 = 0.52 < T_P
    cost = _cost()
    assert cost.epoch_time(2, 8, 256) == pytest.approx(0.544)
    assert planner.plan(cost, [1, 2, 4, 8], [1, 2, 4, 8], [64, 256]) == (2, 8, 256)
    # w_a = 1 would make T_A = 1.024 + 0.004 the max: the planner takes the fewest workers that keep up
    assert cost.epoch_time(1, 8, 256) == pytest.approx(1.028)


def test_planner_is_the_grid_argmin_and_respects_memory():
    cost = _cost(active=planner.PartyCost(2e-3, -0.5), passive=planner.PartyCost(5e-3, 0.8), message_s=2e-3,
                 mem_base=100.0, mem_rho=2.0, mem_cap=100.0 + 2.0 * 128)
    grid = list(itertools.product([1, 2, 3, 5], [1, 2, 3, 5], [16, 32, 64, 128, 256]))
    best = min((cost.epoch_time(i, j, B), i, j, B) for i, j, B in grid if B <= 128)
    assert cost.batch_max() == pytest.approx(128)
    assert planner.plan(cost, [1, 2, 3, 5], [1, 2, 3, 5], [16, 32, 64, 128, 256]) == best[1:]
    with pytest.raises(ValueError, match="B_max"):
        planner.plan(_cost(mem_base=10.0, mem_cap=5.0), [1], [1], [16])


def test_fit_power_recovers_negative_exponents():
    B = [16, 32, 64, 128]
    fit = planner.fit_power(B, [0.3 * b ** -1.0071 for b in B])
    assert fit.gamma == pytest.approx(-1.0071) and fit.lam == pytest.approx(0.3)


def test_delta_t_and_shared_batches():
    assert delta_t(5, 0.0, 0.9) == 5
    assert delta_t(5, 0.9, 0.9) == round(5 * (1 + math.tanh(1)))
    a, b = batches(103, 10, 3, 7), batches(103, 10, 3, 7)
    assert len(a) == 11 and all(np.array_equal(x, y) for x, y in zip(a, b))
    assert sorted(np.concatenate(a)) == list(range(103))


def test_a_kept_plans_cost_model_reads_back_as_it_was():
    from paperline.methods.pubsub_vfl.planner import CostModel, PartyCost, as_dict, from_dict

    cost = CostModel(n=398, active=PartyCost(2e-5, 0.97), passive=PartyCost(8e-5, 1.0), worker_overhead_s=5e-4,
                     message_s=1e-3, bytes_per_row=128, bandwidth=1e9, mem_base=8704, mem_rho=464, mem_chi=1.0,
                     mem_cap=2**30, cores=2)
    assert from_dict(as_dict(cost)) == cost


def test_the_planner_counts_each_partys_cores():
    """C_a + C_p = total_cores, split by the workers: past its cores a party's extra workers only
    add coordination, so on 2 cores one worker a party is best and on 64 more pay."""
    from paperline.methods.pubsub_vfl import cores

    assert cores.counts(64, 8, 8) == (32, 32) and cores.counts(2, 3, 1) == (1, 1) and cores.counts(1, 2, 2) == (1, 1)
    assert cores.split([0, 1, 2, 3], 1, 3) == {"active": [0], "passive": [1, 2, 3]}
    few, many = _cost(cores=2), _cost(cores=64)
    assert few.epoch_time(4, 4, 256) > few.epoch_time(1, 1, 256)
    assert many.epoch_time(4, 4, 256) < many.epoch_time(1, 1, 256)
    assert planner.plan(few, [1, 2, 4], [1, 2, 4], [256]) == (1, 1, 256)


def test_a_party_alone_on_its_machine_takes_every_usable_core():
    """Both parties on one machine split its cores; with the other party on a machine of its own
    (launch.py), each side's party takes all of its machine's."""
    from paperline.methods.pubsub_vfl import cores
    from paperline.methods.pubsub_vfl.config import PubSubVFLConfig
    from paperline.methods.pubsub_vfl.train import party_cores

    cfg = PubSubVFLConfig(total_cores=1)
    usable = cores.usable(1)
    assert party_cores(cfg, (1, 3), alone=True) == {"active": usable, "passive": usable}
    assert party_cores(cfg, (1, 3), alone=False) == cores.split(usable, 1, 3)
    if len(cores.available()) >= 2:
        cfg = PubSubVFLConfig(total_cores=2)
        assert party_cores(cfg, (1, 1), alone=True)["passive"] == cores.usable(2)
        assert party_cores(cfg, (1, 1), alone=False) == {"active": cores.usable(2)[:1], "passive": cores.usable(2)[1:]}


def test_more_cores_than_the_machine_has_are_refused():
    from paperline.methods.pubsub_vfl import cores
    from paperline.methods.pubsub_vfl.config import PubSubVFLConfig

    have = len(cores.available())
    assert cores.usable(None) == cores.available() and len(cores.usable(1)) == 1
    with pytest.raises(ValueError, match=f"total_cores: {have + 1}, but this machine lets the run use {have}"):
        planner.profile(PubSubVFLConfig(total_cores=have + 1, plan_batches=[16, 32]), 100, 3, 4, "classification")
