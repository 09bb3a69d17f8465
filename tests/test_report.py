from __future__ import annotations

import json

import pytest

from paperline.report import method_table, write_report


def test_rows_become_a_table_and_scalars_a_list():
    text = method_table({"cost_ratio": 0.25, "K4_L1": {"a": 1.0, "b": 2, "nested": {"x": 1}},
                         "K4_L2": {"a": 0.5, "c": True}})
    assert "- cost_ratio: 0.25" in text
    assert "| | a | b | c |" in text
    assert "| K4_L2 | 0.5 |  | true |" in text
    assert "nested" not in text


def test_report_marks_missing_methods_and_names_a_malformed_file(tmp_path):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "dnc.json").write_text(json.dumps({"K4_L1": {"dnc_objective": 0.1}}))
    out = tmp_path / "reports" / "results.md"
    text = write_report(metrics, out, {"dnc": "Deep NC", "other": "Other"})
    assert out.read_text() == text
    assert "| K4_L1 | 0.1 |" in text and "_not run yet_" in text
    (metrics / "dnc.json").write_text("{not json")
    with pytest.raises(ValueError, match="dnc.json: line 1"):
        write_report(metrics, out, {"dnc": "Deep NC"})
    assert "K4_L1" in out.read_text()  # the failed write left the previous report whole
