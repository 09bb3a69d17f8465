"""FVAE-LoRA's claims from hand-made per-seed results, and the metrics record that carries them."""
from __future__ import annotations

import pytest

from paperline.methods.fvae_lora import claims
from paperline.methods.fvae_lora.config import FvaeLoraConfig
from paperline.methods.fvae_lora.summary import method_metrics


def _result(worst: float, accuracy: float = 0.8) -> dict:
    return {"metrics": {"accuracy": accuracy, "worst_group_accuracy": worst, "train_accuracy": 1.0,
                        "train_seconds": 1.0, "trainable_parameters": 10, "inference_parameters": 8,
                        **{f"group_y{y}_a{a}": worst for y in (0, 1) for a in (0, 1)}},
            "history": {"ce": [1.0]}}


def _results(**worst: list[float]) -> dict:
    return {v: {s + 1: _result(w) for s, w in enumerate(ws)} for v, ws in worst.items()}


def test_specs_name_both_modalities_each_with_a_trivial_claim():
    names = [s.name for s in claims.SPECS]
    assert len(names) == len(set(names)) == 2 * (2 + len(claims.ABLATIONS))
    trivial = {s.name: s for s in claims.SPECS if s.trivial}
    assert set(trivial) == {"image_fvae_lora_above_probe_worst_group", "text_fvae_lora_above_probe_worst_group"}
    assert trivial["text_fvae_lora_above_probe_worst_group"].versus == "text_linear_probe"


def test_shown_against_lora_reversed_against_the_probe_and_inconclusive_within_the_noise():
    results = _results(linear_probe=[0.70, 0.72, 0.71], lora=[0.40, 0.42, 0.41], fvae_lora=[0.60, 0.61, 0.62],
                       fvae_m0=[0.50, 0.70, 0.64])
    got = {c.name: c for c in claims.evaluate(results, "image")}
    assert set(got) == {"image_fvae_lora_above_lora_worst_group", "image_fvae_lora_above_probe_worst_group",
                        "image_fvae_lora_above_fvae_m0_worst_group"}  # the ablations that ran
    assert got["image_fvae_lora_above_lora_worst_group"].verdict == "shown"
    assert got["image_fvae_lora_above_lora_worst_group"].effect == pytest.approx(0.2)
    assert got["image_fvae_lora_above_probe_worst_group"].verdict == "reversed"  # doing nothing did better
    assert got["image_fvae_lora_above_fvae_m0_worst_group"].verdict == "inconclusive"
    two = claims.evaluate({v: {s: r[s] for s in (1, 2)} for v, r in results.items()}, "image")
    assert {c.verdict for c in two} == {"inconclusive"}  # two seeds are never a verdict


def test_the_metrics_record_carries_both_modalities_claims():
    cfg = FvaeLoraConfig(variants=["linear_probe", "lora", "fvae_lora"], seeds=[1, 2, 3],
                         text={"variants": ["lora", "fvae_lora"], "seeds": [1, 2, 3]})
    image = _results(linear_probe=[0.3, 0.3, 0.3], lora=[0.4, 0.42, 0.41], fvae_lora=[0.6, 0.61, 0.62])
    text = _results(lora=[0.0, 0.01, 0.02], fvae_lora=[0.3, 0.35, 0.31])
    metrics = method_metrics(cfg, image | {f"text_{v}": r for v, r in text.items()}, {"trained_here": True},
                             "digits", "tiny")
    verdicts = {c.name: c.verdict for c in metrics.claims}
    assert verdicts == {"image_fvae_lora_above_lora_worst_group": "shown",
                        "image_fvae_lora_above_probe_worst_group": "shown",
                        "text_fvae_lora_above_lora_worst_group": "shown"}
    assert not any("claim" in k for k in metrics.headline)
    assert metrics.rows["text_fvae_lora"]["worst_group_accuracy"] == pytest.approx(0.32)
