"""The SplashNet metrics record: a row per variant with its differences from the baseline, the
per-user CER apart, the claims as ratios to the baseline."""
from __future__ import annotations

import pytest

from paperline.methods.splashnet.summary import method_metrics, variant_rows


def _result(variant: str, cer: float) -> dict:
    return {"variant": variant, "params": 10, "history": [(0, 1.0)], "zero_shot_cer": cer, "finetuned_cer": cer / 2,
            "zero_shot_ctc_loss": 1.0, "finetuned_ctc_loss": 0.5, "zero_shot_cer/user1": cer,
            "finetuned_cer/user1": cer / 2}


def test_rows_differences_and_per_user_values():
    rows, per_user = variant_rows([_result("baseline", 50.0), _result("splashnet_mini", 20.0)])
    assert rows["splashnet_mini"]["zero_shot_cer_minus_baseline"] == -30.0
    assert rows["baseline"]["finetuned_cer_minus_baseline"] == 0.0 and "zero_shot_beam_cer_minus_baseline" not in rows["baseline"]
    assert "history" not in rows["baseline"] and "zero_shot_cer/user1" not in rows["baseline"]
    assert per_user["splashnet_mini"] == {"zero_shot_cer/user1": 20.0, "finetuned_cer/user1": 10.0}

    stats = {"raw_cross_user_std_of_channel_means": 1.9, "rtn_cross_user_std_of_channel_means": 0.03}
    table = {"baseline": {"params": 100, "params_vs_baseline": 1.0}}
    metrics = method_metrics(rows, per_user, table, stats, "tiny", decoders=["greedy"])
    assert (metrics.baseline, metrics.primary_metric, metrics.higher_is_better) == ("baseline", "zero_shot_cer", False)
    assert metrics.headline == {"splashnet_mini_zero_shot_cer_vs_baseline": pytest.approx(0.4),
                                "splashnet_mini_finetuned_cer_vs_baseline": pytest.approx(0.4)} | stats
    assert metrics.tables == {"paper_models": table}
    assert metrics.details["test_users"] == ["user1"] and metrics.details["decoders"] == ["greedy"]
    assert metrics.with_ratios().rows["splashnet_mini"]["zero_shot_cer_vs_baseline"] == pytest.approx(0.4)
