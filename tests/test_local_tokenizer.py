"""paperline.data.local_tokenizer: a local tokenizer.json read with errors that name the file."""
import json

import pytest

from paperline.data.local_tokenizer import encode_documents, model_vocab_size, read_tokenizer_json, shared_lm_tokenizer
from paperline.io import DataError


@pytest.fixture
def tokenizer_file(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(["to be or not to be"] * 4, trainers.BpeTrainer(
        vocab_size=270, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path, tok.get_vocab_size()


def test_reads_and_bounds_the_vocabulary(tokenizer_file):
    path, size = tokenizer_file
    assert read_tokenizer_json(path, max_vocab=size).get_vocab_size() == size
    with pytest.raises(DataError, match=rf"{path}: {size} tokens, more than the model's vocab_size {size - 1} \(lm.base\)"):
        read_tokenizer_json(path, max_vocab=size - 1, where="lm.base")


def test_missing_or_malformed_file_is_named(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    for path in (bad, tmp_path / "absent.json"):
        with pytest.raises(KeyError, match=str(path)):
            read_tokenizer_json(path, error=KeyError)


def test_shared_lm_tokenizer_checks_the_model_vocabulary(tokenizer_file, tmp_path):
    path, size = tokenizer_file
    model = tmp_path / "model"
    with pytest.raises(DataError, match=r"model/config.json missing \(run the lm-base stage"):
        shared_lm_tokenizer(model, path)
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": size}))
    assert model_vocab_size(model) == size
    assert shared_lm_tokenizer(model, path).get_vocab_size() == size
    (model / "config.json").write_text(json.dumps({"vocab_size": size + 3}))
    with pytest.raises(DataError, match=rf"vocab_size {size + 3} but .*tokenizer.json {size} tokens.*\(lm_base_path\)"):
        shared_lm_tokenizer(model, path, where="lm_base_path")


def test_documents_encode_into_one_int32_stream(tokenizer_file):
    tok = read_tokenizer_json(tokenizer_file[0])
    stream = encode_documents(tok, iter(["to be", "or not"]))
    assert stream.dtype.name == "int32"
    assert stream.tolist() == tok.encode("to be").ids + tok.encode("or not").ids
