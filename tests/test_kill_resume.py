"""The kill-and-resume benchmark's comparison of two results records (benchmarks/kill_resume.py)."""
from __future__ import annotations

from benchmarks.kill_resume import differing_keys, verdict

RECORD = {
    "method": "dnc", "profile": "tiny",
    "rows": {"K4_L1": {"nc1": 0.5, "final_loss": 1.25, "train_seconds": 3.0, "wall_s": 2.0, "step_ms": 4.0}},
    "details": {"speedup_vs_vfl": 2.0, "idle_fraction": 0.1, "planner_vs_grid_optimum": 1.1, "git_commit": "abc", "parent_run": "r1",
                "reason": "worker 8e58d2 died"},
    "claims": [{"metric": "nc1", "effect": 0.5, "verdict": "shown"},
               {"metric": "time_to_target_s", "effect": 1.0, "verdict": "shown"}],
}


def _with(**changes: object) -> dict:
    """RECORD with `rows/K4_L1` and `details` entries changed (a deep enough copy)."""
    record = RECORD | {"rows": {"K4_L1": dict(RECORD["rows"]["K4_L1"])}, "details": dict(RECORD["details"]),
                       "claims": [dict(c) for c in RECORD["claims"]]}
    for key, value in changes.items():
        (record["rows"]["K4_L1"] if key in record["rows"]["K4_L1"] else record["details"])[key] = value
    return record


def test_equal_records_are_identical():
    assert differing_keys(RECORD, _with()) == []
    assert verdict(RECORD, _with(), "") == ("identical", "")


def test_timing_and_id_keys_are_left_out():
    changed = _with(train_seconds=9.0, wall_s=9.0, step_ms=9.0, speedup_vs_vfl=9.0, idle_fraction=0.9,
                    planner_vs_grid_optimum=9.0, git_commit="def", parent_run="r2", reason="worker c5c82e died")
    changed["claims"][1] |= {"effect": 9.0, "verdict": "not shown"}  # a claim about a time
    assert verdict(RECORD, changed, "")[0] == "identical"


def test_a_changed_figure_is_named_by_its_path():
    changed = _with(nc1=0.5000000001, final_loss=1.5)
    changed["claims"][0]["verdict"] = "not shown"
    assert differing_keys(RECORD, changed) == ["/rows/K4_L1/nc1", "/rows/K4_L1/final_loss", "/claims/0/verdict"]
    assert verdict(RECORD, changed, "", shown=2) == ("differing", "/rows/K4_L1/nc1, /rows/K4_L1/final_loss (+1 more)")


def test_missing_keys_types_and_list_lengths_differ():
    assert differing_keys({"a": 1, "b": 2}, {"a": 1, "c": 2}) == ["/b", "/c"]
    assert differing_keys({"a": 1}, {"a": 1.0}) == ["/a"]  # an int become a float is a change
    assert differing_keys({"a": [1, 2]}, {"a": [1]}) == ["/a[len 2 vs 1]"]


def test_a_failed_resume_shows_its_last_lines():
    output = "step 1\nstep 2\nTraceback\nValueError: bad checkpoint\nERROR: failed to reproduce 'dnc'\n"
    assert verdict(RECORD, None, output) == (
        "failing", "Traceback / ValueError: bad checkpoint / ERROR: failed to reproduce 'dnc'")


def test_a_resume_that_moves_only_where_an_uninterrupted_rerun_moves_is_nondeterministic():
    resumed, rerun = _with(nc1=0.75), _with(nc1=0.7, final_loss=1.5)
    assert verdict(RECORD, resumed, "", rerun=rerun) == (
        "nondeterministic", "differs in 1 figures (/rows/K4_L1/nc1), all among the 2 in which two uninterrupted runs differ")
    assert verdict(RECORD, _with(nc1=0.75, final_loss=2.0), "", rerun=_with(final_loss=1.5))[0] == "differing"


def test_pubsub_vfls_fitted_cost_model_is_measured_but_its_pick_is_a_figure():
    cost = {"n": 398, "active": {"lam": 1e-4, "gamma": 0.8}, "passive": {"lam": 2e-4, "gamma": 0.9}}
    refit = {"n": 398, "active": {"lam": 3e-4, "gamma": 0.7}, "passive": {"lam": 1e-4, "gamma": 1.1}}
    plan = {"w_a": 1, "w_p": 2, "B": 64, "measured_cost_model": cost}
    replanned = plan | {"measured_cost_model": refit}
    assert differing_keys({"details": {"plan": plan}}, {"details": {"plan": replanned}}) == []
    assert differing_keys({"details": {"plan": plan}}, {"details": {"plan": replanned | {"w_a": 2}}}) == ["/details/plan/w_a"]
    assert differing_keys({"gamma": 0.9}, {"gamma": 0.99}) == ["/gamma"]  # a gamma elsewhere is a figure


def test_a_curves_time_stamps_are_timings_but_its_metrics_are_figures():
    def curves(seconds: float, metric: float) -> dict:
        return {"details": {"curves": {"pubsub_vfl": [[{"seconds": 0.4, "metric": 0.8}, {"seconds": seconds, "metric": metric}]]}}}

    assert differing_keys(curves(0.9, 0.91), curves(1.3, 0.91)) == []
    assert differing_keys(curves(0.9, 0.91), curves(0.9, 0.92)) == ["/details/curves/pubsub_vfl/0/1/metric"]


def test_a_figure_undefined_in_both_records_is_the_same_but_not_against_a_number():
    assert differing_keys(_with(nc1=float("nan")), _with(nc1=float("nan"))) == []
    assert differing_keys(_with(nc1=float("nan")), RECORD) == ["/rows/K4_L1/nc1"]
