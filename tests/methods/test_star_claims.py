"""STAR's claims from hand-made per-seed values: pooled per kind of task, paired by seed, the random
policy as the trivial baseline, the offline extractions; and a task that runs fewer variants."""
from __future__ import annotations

import pytest

from paperline.methods.star import claims
from paperline.methods.star.config import StarConfig, runs_of


def _seeds(norm: list[float], over: list[float] | None = None, acc: list[float] | None = None) -> list[dict]:
    return [{"normalized_return": n, **({"overestimation_rel": over[i]} if over else {}),
             **({"pref_accuracy": acc[i]} if acc else {})} for i, n in enumerate(norm)]


def test_specs_are_unique_and_each_kind_and_offline_have_a_trivial_claim():
    names = [s.name for s in claims.SPECS]
    assert len(names) == len(set(names))
    assert {s.name for s in claims.SPECS if s.trivial} == {"star_above_random_continuous", "star_above_random_discrete",
                                                           "offline_star_above_random"}


def test_online_claims_pool_a_kinds_settings_seed_by_seed():
    values = {("continuous", "pendulum", "star", 40): _seeds([0.5, 0.6, 0.55], over=[0.1, 0.2, 0.1]),
              ("continuous", "pendulum", "pebble", 40): _seeds([0.2, 0.3, 0.25], over=[0.0, 0.4, -0.3]),
              ("continuous", "pendulum", "random", 40): _seeds([0.0, 0.0, 0.0]),
              ("continuous", "cheetah", "star", 40): _seeds([0.31, 0.2, 0.09]),  # +0.005, 0, -0.005 by seed
              ("continuous", "cheetah", "pebble", 40): _seeds([0.4, 0.3, 0.2]),
              ("discrete", "grid", "star", 30): _seeds([0.1, 0.9, 0.2]),
              ("discrete", "grid", "pebble", 30): _seeds([0.5, 0.4, 0.6])}
    got = {c.name: c for c in claims.online(values)}
    assert set(got) == {"star_above_random_continuous", "star_above_pebble_continuous",
                        "star_less_overestimation_continuous", "star_above_pebble_discrete"}
    # per seed: the mean over pendulum and cheetah; 0.105, 0.1, 0.095 (the same gap at every seed would
    # have no interval, and 3 seeds are too few for the sign test that judges it)
    pebble = got["star_above_pebble_continuous"]
    assert pebble.method_mean == pytest.approx((0.55 + 0.2) / 2) and pebble.effect == pytest.approx(0.1)
    assert pebble.verdict == "shown"
    assert got["star_above_random_continuous"].verdict == "shown"  # random ran on pendulum only: paired there
    assert got["star_above_random_continuous"].method_mean == pytest.approx(0.55)
    assert got["star_less_overestimation_continuous"].verdict == "inconclusive"  # within PEBBLE's spread
    assert got["star_above_pebble_discrete"].verdict == "inconclusive"


def test_offline_claims_and_a_reversed_one():
    got = {c.name: c for c in claims.offline({"star": [0.35, 0.40, 0.30], "iql": [0.36, 0.38, 0.33],
                                               "awr": [0.50, 0.52, 0.49], "dataset": [0.6, 0.62, 0.61],
                                               "random": [0.0, 0.0, 0.0]})}
    assert got["offline_star_above_random"].verdict == "shown"
    assert got["offline_star_above_iql"].verdict == "inconclusive"
    assert got["offline_star_above_awr"].verdict == "reversed"
    assert got["offline_star_above_dataset"].verdict == "reversed"
    assert [c.name for c in claims.offline({"star": [0.1], "iql": [0.2]})] == ["offline_star_above_iql"]


def test_the_offline_baselines_with_reward_models_of_their_own_get_their_rows_figures_and_claims():
    """`mr` and `pt` fit reward models of their own: each row shows its own held-out accuracy, the
    others STAR's; both get a headline gap and a claim beside the trivial baseline's."""
    from paperline.methods.star.summary import offline_headline, offline_rows, offline_seed_values

    def seed(star, pt, mr):
        return {"variants": {"star": {"return": star}, "iql": {"return": -600.0}, "mr": {"return": mr},
                             "pt": {"return": pt}},
                "expert_return": -200.0, "random_return": -1200.0, "dataset_return": -700.0, "labels": 100,
                "pref_accuracy": 0.9, "mr_pref_accuracy": 0.8, "pt_pref_accuracy": 0.7}

    offline = [seed(-500.0, -900.0, -700.0), seed(-450.0, -950.0, -650.0), seed(-480.0, -850.0, -690.0)]
    rows = offline_rows(offline)
    assert {v: rows[f"offline-{v}"]["pref_accuracy"] for v in ("star", "iql", "mr", "pt")} == pytest.approx({
        "star": 0.9, "iql": 0.9, "mr": 0.8, "pt": 0.7})
    assert rows["offline-pt"]["normalized_return"] == pytest.approx((0.3 + 0.25 + 0.35) / 3)
    head = offline_headline(rows)
    assert head["offline_star_minus_pt"] == pytest.approx(rows["offline-star"]["normalized_return"]
                                                          - rows["offline-pt"]["normalized_return"])
    got = {c.name: c for c in claims.offline(offline_seed_values(offline))}
    assert {"offline_star_above_random", "offline_star_above_mr", "offline_star_above_pt"} <= set(got)
    assert got["offline_star_above_pt"].effect == pytest.approx(head["offline_star_minus_pt"])


def test_a_task_may_run_fewer_variants_and_must_keep_the_oracle():
    task = {"env_id": "Pendulum-v1", "kind": "continuous", "episode_steps": 20, "steps": 100, "seed_steps": 10,
            "budgets": [4], "segment": 5}
    cfg = StarConfig(tasks=[{"name": "a", **task}, {"name": "b", **task, "variants": ["star", "oracle"]}],
                     variants=["oracle", "pebble", "star"])
    assert [(t.name, v) for t, v, _ in runs_of(cfg)] == [("a", "oracle"), ("a", "pebble"), ("a", "star"),
                                                         ("b", "oracle"), ("b", "star")]
    with pytest.raises(ValueError, match="task b: variants \\['star'\\] must include 'oracle'"):
        StarConfig(tasks=[{"name": "b", **task, "variants": ["star"]}], variants=["oracle", "star"])
