"""Modules: output shapes and the CTC emission length, parameter counts against the spec's
formula and its ≈5.3M / 1.4M / 2.6M, FLOP ratios against the paper's 0.6× and 1.15×, and
Split-and-Share weight sharing (one set of weights for both hands; hands meet at the classifier)."""
from __future__ import annotations

import pytest
import torch

from paperline.methods.splashnet.modules import ModelSpec, TDSConvCTC, count_flops, count_parameters

BASELINE = ModelSpec()
MINI = ModelSpec(six_bands=True, rtn=True, share_hand_weights=True)
SPLASHNET = ModelSpec(mlp_features=(528,), block_channels=(24, 24, 48, 48), six_bands=True, rtn=True,
                      share_hand_weights=True)
SMALL = dict(mlp_features=(16,), block_channels=(4, 4), kernel_width=5)


def _tds_block(width: int, channels: int, kernel: int) -> int:
    conv = channels * channels * kernel + channels
    fc = 2 * (width * width + width)
    return conv + fc + 2 * (2 * width)  # two LayerNorms


def test_parameter_counts_follow_the_spec():
    baseline = 2 * (528 * 384 + 384) + 64 + 4 * _tds_block(768, 24, 32) + 768 * 99 + 99
    mini = (96 * 384 + 384) + 4 * _tds_block(384, 24, 32) + 768 * 99 + 99
    splash = (96 * 528 + 528) + 2 * _tds_block(528, 24, 32) + 2 * _tds_block(528, 48, 32) + 1056 * 99 + 99
    counts = {name: count_parameters(TDSConvCTC(spec)) for name, spec in
              [("baseline", BASELINE), ("mini", MINI), ("splashnet", SPLASHNET)]}
    assert counts == {"baseline": baseline, "mini": mini, "splashnet": splash}
    assert counts["baseline"] / 1e6 == pytest.approx(5.3, abs=0.05)
    assert counts["mini"] / 1e6 == pytest.approx(1.4, abs=0.05)
    assert counts["splashnet"] / 1e6 == pytest.approx(2.6, abs=0.05)
    assert counts["mini"] / counts["baseline"] == pytest.approx(0.25, abs=0.02)  # paper: ¼
    assert counts["splashnet"] / counts["baseline"] == pytest.approx(0.5, abs=0.02)  # paper: ½


def test_flop_ratios_match_the_paper():
    frames = 497  # a 4 s window (8000 samples)
    base = count_flops(TDSConvCTC(BASELINE), frames)
    assert count_flops(TDSConvCTC(MINI), frames) / base == pytest.approx(0.6, abs=0.03)
    assert count_flops(TDSConvCTC(SPLASHNET), frames) / base == pytest.approx(1.15, abs=0.05)


@pytest.mark.parametrize("spec", [ModelSpec(**SMALL), ModelSpec(**SMALL, six_bands=True, rtn=True,
                                                                 share_hand_weights=True)])
def test_shapes_and_emission_length(spec):
    model = TDSConvCTC(spec)
    x = torch.randn(60, 3, 2, 16, spec.freq_features)
    out = model(x)
    assert out.shape == (60 - (spec.receptive_field - 1), 3, 99)
    assert spec.receptive_field == 2 * 4 + 1
    assert torch.allclose(out.exp().sum(-1), torch.ones(out.shape[:2]), atol=1e-5)
    assert model.emission_lengths(torch.tensor([60])).item() == out.shape[0]
    assert ModelSpec().receptive_field == 125  # spec: 4·31 + 1 frames


def test_split_and_share_runs_both_hands_through_the_same_weights():
    torch.manual_seed(0)
    shared = TDSConvCTC(ModelSpec(**SMALL, rtn=True, share_hand_weights=True)).eval()
    assert not hasattr(shared, "mlps") and shared.mlp.mlp[0].in_features == 16 * 33
    assert all(m.normalized_shape == (16,) for m in shared.modules() if isinstance(m, torch.nn.LayerNorm))
    x = torch.randn(40, 2, 2, 16, 33)
    swapped = x.flip(2)  # left <-> right
    H = 16
    # swapping the hands equals swapping the classifier's two input halves: nothing else is per hand
    flipped = TDSConvCTC(shared.spec).eval()
    flipped.load_state_dict(shared.state_dict())
    with torch.no_grad():
        w = flipped.classifier.weight
        w.copy_(torch.cat([w[:, H:], w[:, :H]], dim=1))
        assert torch.allclose(shared(swapped), flipped(x), atol=1e-5)
    # the unshared baseline has a MLP per hand: the same check fails there
    unshared = TDSConvCTC(ModelSpec(**SMALL, rtn=True)).eval()
    other = TDSConvCTC(unshared.spec).eval()
    other.load_state_dict(unshared.state_dict())
    with torch.no_grad():
        w = other.classifier.weight
        w.copy_(torch.cat([w[:, H:], w[:, :H]], dim=1))
        assert not torch.allclose(unshared(swapped), other(x), atol=1e-3)
    # one gradient step on the left hand's input reaches the one shared MLP
    shared.train()
    x_left = x.clone()
    x_left[:, :, 1] = 0
    shared(x_left).sum().backward()
    assert shared.mlp.mlp[0].weight.grad.abs().sum() > 0


def test_ctc_blank_bias_starts_in_the_all_blank_phase():
    from paperline.data.emg2qwerty import BLANK
    from paperline.methods.splashnet.lightning_module import CTCModule

    x = torch.randn(40, 2, 2, 16, 33)
    spec = ModelSpec(**SMALL)
    torch.manual_seed(0)
    plain = CTCModule(spec, 1e-3, 0, 10).eval()
    torch.manual_seed(0)
    biased = CTCModule(spec, 1e-3, 0, 10, blank_bias=6.0).eval()
    with torch.no_grad():
        p_plain, p_biased = plain(x)[..., BLANK].exp().mean(), biased(x)[..., BLANK].exp().mean()
    assert p_plain < 0.1 and p_biased > 0.5  # e^6 / (e^6 + 98) ≈ 0.8 at equal logits
    # only the blank's bias moves
    diff = (biased.model.classifier.bias - plain.model.classifier.bias).detach()
    assert float(diff[BLANK]) == pytest.approx(6.0) and torch.count_nonzero(diff) == 1


def test_time_mask_width_follows_the_config():
    from paperline.methods.splashnet.config import SplashNetConfig
    from paperline.methods.splashnet.data import ACM_AUGMENT, BASELINE_AUGMENT
    from paperline.methods.splashnet.pipeline import augmentation

    sizes = {k: {"mlp_features": [16], "block_channels": [4]} for k in ("baseline", "splashnet_mini", "splashnet")}
    cfg = SplashNetConfig(sizes=sizes, time_mask_frames=6)
    assert augmentation(cfg, "baseline").time_mask_param == 6 and BASELINE_AUGMENT.time_mask_param == 25
    assert augmentation(cfg, "rtn").n_time_masks == 3 and augmentation(cfg, "rtn").freq_mask_param == 4
    assert augmentation(cfg, "acm") == ACM_AUGMENT and augmentation(cfg, "splashnet") == ACM_AUGMENT


def test_a_capped_run_is_the_start_of_the_longer_schedule():
    from paperline.methods.splashnet.config import SplashNetConfig
    from paperline.methods.splashnet.lightning_module import warmup_cosine
    from paperline.methods.splashnet.pipeline import schedule_horizon

    sizes = {k: {"mlp_features": [16], "block_channels": [4]} for k in ("baseline", "splashnet_mini", "splashnet")}
    capped = SplashNetConfig(sizes=sizes, max_steps=240, schedule_steps=600)
    assert schedule_horizon(capped, 240) == 600 and schedule_horizon(capped, 800) == 800
    assert schedule_horizon(SplashNetConfig(sizes=sizes), 240) == 240
    # the last trained step's lr: still high on the long horizon, at the floor when squeezed
    assert warmup_cosine(239, 0, schedule_horizon(capped, 240), 1e-2) > 6e-3
    assert warmup_cosine(239, 0, 240, 1e-2) < 1e-5
