"""The text-corpus prep flow (`python -m flows run text-corpus`): writes the corpus, a corpus made
from other parameters is rebuilt by the methods that read it, and bad parameters exit 2 naming the
key. Moved out of tests/methods/ (tests there never import `tasks` or run flows)."""
from __future__ import annotations

import json


def test_the_text_corpus_flow_writes_the_corpus_and_a_stale_one_is_rebuilt(project, prefect_server, capsys):
    from flows.__main__ import main as flows_cli
    from paperline.config import read_params
    from tasks import text_corpus

    assert flows_cli(["run", "text-corpus", "--set", "vocab_size=300"]) == 0
    out = project / "data" / "text" / "shakespeare"
    meta = json.loads((out / "corpus.json").read_text())
    assert meta["vocab_size"] == 300 and meta["source"]["kind"] == "slice" and meta["fingerprint"]
    # a method flow reuses the corpus only if it was made from params/text_corpus.yaml's text_corpus (512 here)
    cfg = text_corpus.resolve(read_params(project / "params"))
    assert text_corpus.ensure(cfg) == out
    assert json.loads((out / "corpus.json").read_text())["vocab_size"] == 512
    assert "made from other text_corpus parameters" in capsys.readouterr().out
    built = (out / "train.bin").stat().st_mtime_ns
    text_corpus.ensure(cfg)
    assert (out / "train.bin").stat().st_mtime_ns == built  # current: reused as it is

    assert flows_cli(["run", "text-corpus", "--set", "vocab_size=12"]) == 2  # invalid parameters: named, no work
    assert "text_corpus.vocab_size" in capsys.readouterr().err
    assert flows_cli(["run", "text-corpus", "--profile", "tiny"]) == 2  # one configuration for every profile
    assert "text_corpus: one configuration for every profile" in capsys.readouterr().err
