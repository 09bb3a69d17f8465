"""The results record's one shape (validated when written and read), the report it renders, and the
flat metrics file beside it (what `dvc metrics show` prints)."""
from __future__ import annotations

import json

import pytest

from paperline.metrics import MethodMetrics, MetricsError, validate_metrics
from paperline.report import method_section, read_records, write_report


def _record(**changes) -> dict:
    record = {"method": "tpa", "profile": "tiny", "headline": {"cache_ratio": 3.9, "best": True},
              "baseline": "mha", "primary_metric": "val_loss",
              "rows": {"mha": {"val_loss": 4.0, "heads": 4}, "tpa": {"val_loss": 3.0, "heads": 5, "note": "x|y"}},
              "tables": {"paper shapes": {"small": {"mha": 1536, "tpa": 392}}}}
    return record | changes


def test_rows_become_the_comparison_table_with_the_ratio_to_the_baseline():
    text = method_section(MethodMetrics.model_validate(_record()))
    assert "- cache_ratio: 3.9" in text and "- best: true" in text
    assert "| variant | val_loss | val_loss_vs_baseline | heads | note |" in text
    assert "| mha (baseline) | 4 | 1 | 4 |  |" in text
    assert "| tpa | 3 | 0.75 | 5 | x\\|y |" in text  # a cell's | is escaped
    assert "**paper shapes**" in text and "| small | 1536 | 392 |" in text


@pytest.mark.parametrize("change, message", [
    ({"rows": {}}, "rows: Value error, the comparison table has no rows"),
    ({"baseline": "gqa"}, "baseline 'gqa' is not a row"),
    ({"primary_metric": "val_ppl"}, "primary metric 'val_ppl' missing from rows"),
    ({"rows": {"mha": {"val_loss": {"nested": 1}}}}, "rows.mha.val_loss"),
    ({"headlines": {}}, "headlines: Extra inputs are not permitted"),
])
def test_a_record_of_another_shape_is_refused_naming_the_key(change, message):
    with pytest.raises(MetricsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate_metrics(_record(**change), "results/tpa.json")


def test_report_marks_missing_methods_and_names_a_malformed_file(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "tpa.json").write_text(json.dumps(_record()))
    out = tmp_path / "reports" / "results.md"
    methods = {"tpa": "TPA", "other": "Other"}
    text = write_report(read_records(results, methods), out, methods)
    assert out.read_text() == text
    assert "## tpa: TPA" in text and "| tpa | 3 |" in text and "_not run yet_" in text
    (results / "tpa.json").write_text(json.dumps({"K4_L1": {"dnc_objective": 0.1}}))
    with pytest.raises(MetricsError, match="tpa.json: method: Field required"):
        read_records(results, {"tpa": "TPA"})
    (results / "tpa.json").write_text("{not json")
    with pytest.raises(ValueError, match="tpa.json: line 1"):
        read_records(results, {"tpa": "TPA"})
    assert "| tpa | 3 |" in out.read_text()  # the failed writes left the previous report whole


def test_the_readme_and_the_pages_show_the_committed_runs_verdicts():
    """README's methods block and each method page's claims table are what `python -m flows report
    --docs` writes from the committed metrics: a re-run that moves a verdict must update them."""
    from flows import METHODS
    from paperline.report import PAGE_BEGIN, PAGE_END, page_claims, readme_methods
    from tests.conftest import CHECKOUT

    readme = (CHECKOUT / "README.md").read_text()
    records = read_records(CHECKOUT / "results", METHODS)
    assert readme_methods(records, METHODS) in readme, "run `python -m flows report --docs`"
    for name, record in records.items():
        page = (CHECKOUT / "docs" / "methods" / f"{name}.md").read_text()
        assert page.count(PAGE_BEGIN) == 1 and page.count(PAGE_END) == 1, name
        assert page_claims(record) in page, f"{name}: run `python -m flows report --docs`"


def test_the_committed_metrics_files_are_the_outcome_counts_of_the_results_claims():
    """`dvc metrics show --md` is one row per method in an 80-column terminal: every metrics/<m>.json
    has the same few keys (DVC gives each key of any file a column), the outcome counts of the claims
    of results/<m>.json; a re-run that writes one without the other fails here."""
    from flows import METHODS
    from paperline.claims import OUTCOMES, VERDICTS, outcome_counts
    from tests.conftest import CHECKOUT

    assert sorted(v for verdicts in OUTCOMES.values() for v in verdicts) == sorted(VERDICTS)  # each counted once
    for name, record in read_records(CHECKOUT / "results", METHODS).items():
        assert record is not None, f"{name}: no results/{name}.json"
        flat = json.loads((CHECKOUT / "metrics" / f"{name}.json").read_text())
        assert list(flat) == list(OUTCOMES), name
        assert flat == outcome_counts(record.claims) and sum(flat.values()) == len(record.claims), name
    # the widest line of `dvc metrics show --md`: the longest path, then each key padded by DVC
    path = max(len(f"metrics/{name}.json") for name in METHODS)
    assert 1 + (path + 3) + sum(len(key) + 5 for key in OUTCOMES) <= 80


def test_the_report_draws_each_methods_own_verdict_rows_and_its_page_embeds_them(tmp_path):
    """reports/verdicts/<method>.png: a method's rows of the verdicts figure, for its page; none for
    a method with no paired claim (a stale one goes), none for one not run."""
    from paperline.claims import ClaimSpec
    from paperline.report import PAGE_BEGIN, page_claims

    spec = ClaimSpec(name="tpa_below_mha", claim="lower loss", metric="val_loss", method="tpa", versus="mha",
                     direction="lower")
    paired = spec.paired([3.0, 3.1, 2.9], [4.0, 4.1, 4.2]).model_dump()
    exact = ClaimSpec(name="lossless", claim="x", metric="y", method="tpa", versus="").exact(0.0, 0.0, 0.0)
    results = tmp_path / "results"
    results.mkdir()
    (results / "tpa.json").write_text(json.dumps(_record(claims=[paired])))
    (results / "dnc.json").write_text(json.dumps(_record(method="dnc", claims=[exact.model_dump()])))
    figures = tmp_path / "reports" / "verdicts"
    figures.mkdir(parents=True)
    (figures / "dnc.png").write_bytes(b"stale")
    methods = {"tpa": "TPA", "dnc": "DNC", "other": "Other"}
    records = read_records(results, methods)
    write_report(records, tmp_path / "reports" / "results.md", methods)
    assert sorted(p.name for p in figures.iterdir()) == ["tpa.png"]
    assert (figures / "tpa.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](../../reports/verdicts/tpa.png)" in page_claims(records["tpa"])
    assert "reports/verdicts/" not in page_claims(records["dnc"]) and PAGE_BEGIN in page_claims(records["dnc"])
