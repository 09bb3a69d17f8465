"""The claims engine: paired differences, the t interval, the verdicts, and their validation."""
from __future__ import annotations

import math

import pytest

from paperline.claims import Claim, ClaimError, ClaimSpec, counts_text, outcome_counts, t_interval, verdict_counts
from paperline.metrics import MetricsError, validate_metrics
from paperline.report import claims_table, method_section, verdict_summary

SPEC = ClaimSpec(name="m_below_b", claim="lower loss than b", metric="loss", method="m", versus="b",
                 direction="lower")


def test_t_interval_by_hand():
    # differences -1, -2, -3: mean -2, sample std 1, t(0.975, 2) = 4.302653, half = 4.302653 / sqrt(3)
    mean, low, high = t_interval([-1.0, -2.0, -3.0])
    half = 4.302652729749464 / math.sqrt(3)
    assert mean == -2.0 and low == pytest.approx(-2.0 - half, abs=1e-12) and high == pytest.approx(-2.0 + half)
    assert t_interval([0.5]) == (0.5, None, None)


def test_shown_reversed_and_inconclusive():
    shown = SPEC.paired([1.0, 1.1, 0.9], [2.0, 2.05, 2.1])  # method lower at every seed, small spread
    assert shown.verdict == "shown" and shown.seeds == 3 and shown.high < 0
    assert shown.effect == pytest.approx(-1.05) and shown.method_mean == pytest.approx(1.0)
    reversed_ = SPEC.paired([3.0, 3.1, 2.9], [2.0, 2.05, 2.1])
    assert reversed_.verdict == "reversed" and reversed_.low > 0
    noisy = SPEC.paired([1.0, 3.0, 1.0], [2.0, 2.0, 2.0])  # the gap is below the seed spread
    assert noisy.verdict == "inconclusive" and noisy.low < 0 < noisy.high
    higher = SPEC.model_copy(update={"direction": "higher"}).paired([3.0, 3.1, 2.9], [2.0, 2.05, 2.1])
    assert higher.verdict == "shown"


def test_fewer_than_three_seeds_is_never_a_verdict():
    two = SPEC.paired([1.0, 1.0], [5.0, 5.1])
    assert two.verdict == "inconclusive" and two.seeds == 2 and two.high < 0  # the interval excludes 0
    one = SPEC.paired([1.0], [5.0])
    assert one.verdict == "inconclusive" and one.low is None and one.effect == -4.0
    assert "one seed" in one.effect_text()


def test_a_difference_with_no_spread_over_seeds_goes_to_the_sign_test():
    # one test image of 539 at every seed: the t-interval has no width (float rounding aside)
    gap = 1 / 539
    three = SPEC.paired([0.96 - gap, 0.95 - gap, 0.97 - gap], [0.96, 0.95, 0.97])
    assert three.high - three.low < 1e-9 and three.high < 0  # the degenerate interval excludes zero
    assert three.verdict == "inconclusive"  # sign test: p = 2 * 0.5**3 = 0.25
    assert "same at all 3 seeds" in three.effect_text() and "p = 0.25" in three.effect_text()
    five = SPEC.paired([1.0] * 5, [2.0] * 5)
    assert five.verdict == "inconclusive"  # p = 0.0625
    six = SPEC.paired([1.0] * 6, [2.0] * 6)
    assert six.verdict == "shown"  # p = 0.03125 < 0.05
    assert SPEC.paired([2.0] * 6, [1.0] * 6).verdict == "reversed"
    assert SPEC.paired([2.0] * 6, [2.0] * 6).verdict == "inconclusive"  # no difference at all
    with pytest.raises(ValueError, match="does not follow"):  # a results file cannot say otherwise
        Claim(**{**three.model_dump(), "verdict": "shown"})


def test_values_are_paired_by_seed_and_missing_or_nan_seeds_drop_out():
    claim = SPEC.paired({0: 1.0, 1: 1.1, 2: float("nan"), 3: 0.9}, {0: 2.0, 1: 2.1, 2: 2.0, 3: 2.2, 4: 9.0})
    assert claim.seeds == 3 and claim.effect == pytest.approx((-1.0 - 1.0 - 1.3) / 3)
    with pytest.raises(ClaimError, match="m_below_b.*2 method values against 3"):
        SPEC.paired([1.0, 2.0], [1.0, 2.0, 3.0])
    assert SPEC.paired([None], [1.0]).verdict == "inconclusive"


def test_evaluate_reads_per_seed_tables_and_names_a_missing_variant():
    seed_rows = {s: {"m": {"loss": 1.0 + s / 10}, "b": {"loss": 2.0}} for s in range(3)}
    assert SPEC.evaluate(seed_rows).verdict == "shown"
    with pytest.raises(ClaimError, match="m_below_b.*'b'.*'loss'"):
        SPEC.evaluate({0: {"m": {"loss": 1.0}}})


def test_exact_claims_hold_to_their_tolerance():
    spec = ClaimSpec(name="equivariant", claim="E(3)-equivariant", metric="equivariance_error", method="geoada",
                     versus="")
    assert spec.exact(1.3e-14, 0.0, 1e-6).verdict == "exact"
    assert spec.exact(0.05, 0.0, 1e-6).verdict == "not_exact"
    assert spec.exact(float("nan"), 0.0, 1e-6).verdict == "not_exact"


def test_a_verdict_the_numbers_do_not_support_is_refused():
    claim = SPEC.paired([1.0, 1.0], [5.0, 5.1]).model_dump()
    with pytest.raises(ValueError, match="verdict 'shown' does not follow.*'inconclusive'"):
        Claim.model_validate(claim | {"verdict": "shown"})
    with pytest.raises(ValueError, match="not an interval"):
        Claim.model_validate(claim | {"low": 1.0, "high": -1.0})
    with pytest.raises(ValueError, match="string_pattern_mismatch|should match pattern"):
        ClaimSpec(name="Bad Name", claim="x", metric="y", method="m", versus="b")


def _record(**changes) -> dict:
    claims = [SPEC.paired([1.0, 1.1, 0.9], [2.0, 2.05, 2.1]).model_dump(mode="json")]
    return {"method": "tpa", "profile": "tiny", "rows": {"m": {"loss": 1.0}, "b": {"loss": 2.0}},
            "claims": claims} | changes


def test_metrics_carry_validated_claims_and_no_claim_keys_in_the_headline():
    metrics = validate_metrics(_record(), "results/tpa.json")
    assert metrics.claims[0].verdict == "shown"
    with pytest.raises(MetricsError, match="headline.*claim_fastest.*name claims"):
        validate_metrics(_record(headline={"claim_fastest": True}), "results/tpa.json")
    with pytest.raises(MetricsError, match="claims: Value error, claim names \\['m_below_b'\\] repeated"):
        validate_metrics(_record(claims=_record()["claims"] * 2), "results/tpa.json")
    forged = _record()["claims"][0] | {"seeds": 2}
    with pytest.raises(MetricsError, match="results/tpa.json: claims.0: Value error.*does not follow"):
        validate_metrics(_record(claims=[forged]), "results/tpa.json")


def test_the_claims_table_and_the_verdict_count():
    metrics = validate_metrics(_record(), "results/tpa.json")
    one = SPEC.model_copy(update={"name": "one_seed", "trivial": True}).paired([1.0], [2.0])
    by_method = {"tpa": metrics.claims, "dnc": [one]}
    table = claims_table(by_method)
    assert table.splitlines()[0].startswith("| method | claim | the paper says |")
    assert "| tpa | m_below_b | lower loss than b | `m` vs `b` | loss (lower) | -1.05 [" in table
    assert "| **shown** |" in table and "(trivial baseline)" in table and "| 1 | **inconclusive** |" in table
    summary = verdict_summary(by_method)
    assert summary.startswith("1 shown, 1 inconclusive (2 claims of 2 methods)")
    assert "at least one claim shown: 1 (tpa)" in summary
    assert summary.endswith("every claim against the trivial baseline shown: 0 (none)")  # dnc's is one seed
    assert "| m_below_b |" in method_section(metrics)  # the method's own claims open its section
    assert verdict_counts(metrics.claims)["shown"] == 1


def test_the_verdicts_as_text_and_as_the_outcome_counts_of_the_metrics_file():
    exact = ClaimSpec(name="lossless", claim="x", metric="y", method="m", versus="")
    claims = [SPEC.paired([1.0, 1.1, 0.9], [2.0, 2.05, 2.1]), SPEC.paired([3.0, 3.1, 2.9], [2.0, 2.05, 2.1]),
              SPEC.paired([1.0], [2.0]), exact.exact(0.0, 0.0, 1e-6), exact.exact(1.0, 0.0, 1e-6)]
    assert [c.verdict for c in claims] == ["shown", "reversed", "inconclusive", "exact", "not_exact"]
    assert counts_text(claims + claims[:1]) == "2 shown, 1 reversed, 1 inconclusive, 1 exact, 1 not_exact"
    assert counts_text([]) == "no claims"
    # an identity that holds counts as held, one that misses its tolerance as failed
    assert outcome_counts(claims + claims[:1]) == {"held": 3, "failed": 2, "inconclusive": 1}
    assert outcome_counts([]) == {"held": 0, "failed": 0, "inconclusive": 0}


@pytest.mark.parametrize("method", sorted(__import__("flows").METHODS))
def test_every_method_declares_its_claims_with_one_against_the_trivial_baseline(method):
    """`paperline/methods/<m>/claims.py` lists every claim the method can report (SPECS), at least
    one of them against the trivial baseline of its setting (doing nothing)."""
    import importlib

    specs = importlib.import_module(f"paperline.methods.{method}.claims").SPECS
    assert specs and all(isinstance(s, ClaimSpec) for s in specs)
    names = [s.name for s in specs]
    assert len(names) == len(set(names)), f"{method}: repeated claim names"
    assert any(s.trivial for s in specs), f"{method}: no claim against the trivial baseline"


def test_the_verdicts_figure_places_every_paired_claim(tmp_path):
    from paperline.report import relative_effect, write_verdicts_figure

    shown = SPEC.paired([1.0, 1.1, 0.9], [2.0, 2.05, 2.1])
    effect, low, high = relative_effect(shown)
    assert effect == pytest.approx(-1.05 / 2.05 * 100) and low < effect < high < 0
    exact = ClaimSpec(name="lossless", claim="x", metric="y", method="m", versus="").exact(0.0, 0.0, 0.0)
    assert relative_effect(exact) is None
    path = write_verdicts_figure({"tpa": [shown, exact], "dnc": [SPEC.paired([1.0], [2.0])]}, tmp_path / "v.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_readme_and_pages_get_their_generated_blocks(tmp_path):
    """`python -m flows report --docs`: README's methods block and each page's claims table from the
    results, rewritten in place (a page without a block gets one under its `## Claims` heading)."""
    import json

    from paperline.report import (
        PAGE_BEGIN,
        README_BEGIN,
        README_END,
        page_claims,
        read_records,
        readme_methods,
        update_page,
        update_readme,
    )

    results = tmp_path / "results"
    results.mkdir()
    (results / "tpa.json").write_text(json.dumps(_record()))
    methods = {"tpa": "TPA: tensor products", "dnc": "Deep NC"}
    block = readme_methods(read_records(results, methods), methods)
    assert "| [TPA](docs/methods/tpa.md) | 1 shown |" in block and "): 1 shown (1 claims;" in block
    assert "| [Deep NC](docs/methods/dnc.md) | not run yet |" in block
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{README_BEGIN}\nold\n{README_END}\n\n## after\n")
    assert update_readme(readme, block) == f"# x\n\n{block}\n\n## after\n" == readme.read_text()
    with pytest.raises(ValueError, match="no methods block"):
        update_readme(results / "tpa.json", block)

    page = tmp_path / "tpa.md"
    page.write_text("# TPA\n\n## Claims\n\nprose\n\n## Memory plan\n")
    claims = page_claims(validate_metrics(_record(), "tpa.json"))
    first = update_page(page, claims)
    assert first.index("## Claims") < first.index(PAGE_BEGIN) < first.index("prose") and "| m_below_b |" in first
    assert update_page(page, claims) == first  # rewriting is idempotent
    bare = tmp_path / "bare.md"
    bare.write_text("# bare\n")
    assert update_page(bare, page_claims(None)).endswith("## Claims\n\n" + page_claims(None) + "\n")
