"""The metrics record's one shape (validated when written and read) and the report it renders."""
from __future__ import annotations

import json

import pytest

from paperline.metrics import MethodMetrics, MetricsError, validate_metrics
from paperline.report import method_section, write_report


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
        validate_metrics(_record(**change), "metrics/tpa.json")


def test_report_marks_missing_methods_and_names_a_malformed_file(tmp_path):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "tpa.json").write_text(json.dumps(_record()))
    out = tmp_path / "reports" / "results.md"
    text = write_report(metrics, out, {"tpa": "TPA", "other": "Other"})
    assert out.read_text() == text
    assert "## tpa: TPA" in text and "| tpa | 3 |" in text and "_not run yet_" in text
    (metrics / "tpa.json").write_text(json.dumps({"K4_L1": {"dnc_objective": 0.1}}))
    with pytest.raises(MetricsError, match="tpa.json: method: Field required"):
        write_report(metrics, out, {"tpa": "TPA"})
    (metrics / "tpa.json").write_text("{not json")
    with pytest.raises(ValueError, match="tpa.json: line 1"):
        write_report(metrics, out, {"tpa": "TPA"})
    assert "| tpa | 3 |" in out.read_text()  # the failed writes left the previous report whole


def test_the_readme_and_the_pages_show_the_committed_runs_verdicts():
    """README's methods block and each method page's claims table are what `python -m flows report
    --docs` writes from the committed metrics: a re-run that moves a verdict must update them."""
    from flows import METHODS
    from paperline.report import PAGE_BEGIN, PAGE_END, page_claims, read_records, readme_methods
    from tests.conftest import CHECKOUT

    readme = (CHECKOUT / "README.md").read_text()
    assert readme_methods(CHECKOUT / "metrics", METHODS) in readme, "run `python -m flows report --docs`"
    for name, record in read_records(CHECKOUT / "metrics", METHODS).items():
        page = (CHECKOUT / "docs" / "methods" / f"{name}.md").read_text()
        assert page.count(PAGE_BEGIN) == 1 and page.count(PAGE_END) == 1, name
        assert page_claims(record) in page, f"{name}: run `python -m flows report --docs`"
