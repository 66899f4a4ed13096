"""Tokenize: .npy token fields that np.load and webdataset read without pickle, the dtype, one load per process."""
from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

from corgi_io.errors import BadInput, PackError
from corgi_io.packing.sample import PackSample
from corgi_io.packing.transforms.tokenize import TOKENS_FIELD, Tokenize

tokenizers = pytest.importorskip("tokenizers")

SENTENCES = [f"the {animal} sat on the {thing} number {i}" for i, (animal, thing) in
             enumerate([("cat", "mat"), ("dog", "log"), ("corgi", "sofa"), ("bird", "branch")] * 5)]


@pytest.fixture(scope="module")
def bpe_file(tmp_path_factory):
    """A tiny BPE tokenizer trained offline on SENTENCES, saved as JSON."""
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(SENTENCES, tokenizers.trainers.BpeTrainer(vocab_size=120, special_tokens=["[UNK]"]))
    path = tmp_path_factory.mktemp("tok") / "bpe.json"
    tokenizer.save(str(path))
    return str(path)


@pytest.fixture(scope="module")
def large_vocab_file(tmp_path_factory):
    """A WordLevel tokenizer whose ids go past 65,535."""
    vocab = {f"w{i}": i for i in range(70_000)}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="w0"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    path = tmp_path_factory.mktemp("tok") / "words.json"
    tokenizer.save(str(path))
    return str(path)


def test_tokens_round_trip_through_np_load_without_pickle(bpe_file):
    text = "the corgi sat on the mat"
    kept = Tokenize(bpe_file)(PackSample("k", 2, {"txt": text.encode(), "cls": b"2"}))
    tokens = np.load(io.BytesIO(kept.sample.fields[TOKENS_FIELD]))  # allow_pickle=False by default
    expected = tokenizers.Tokenizer.from_file(bpe_file).encode(text, add_special_tokens=False).ids
    assert tokens.dtype == np.dtype("<u2") and tokens.tolist() == expected
    assert list(kept.sample.fields) == ["txt", "cls", TOKENS_FIELD] and kept.sample.label == 2
    assert kept.sizes == {TOKENS_FIELD: len(expected), "txt": len(expected)}


def test_webdataset_decodes_the_tokens_field(bpe_file):
    webdataset = pytest.importorskip("webdataset")
    kept = Tokenize(bpe_file)(PackSample("k", 0, {"txt": b"the dog sat on the log"}))
    decoded = webdataset.autodecode.basichandlers(TOKENS_FIELD, kept.sample.fields[TOKENS_FIELD])
    assert decoded.tolist() == np.load(io.BytesIO(kept.sample.fields[TOKENS_FIELD])).tolist()


def test_drop_text_and_another_field(bpe_file):
    kept = Tokenize(bpe_file, field="caption.txt", drop_text=True)(
        PackSample("k", 0, {"jpg": b"\xff\xd8", "caption.txt": b"a bird on a branch"}))
    assert list(kept.sample.fields) == ["jpg", TOKENS_FIELD] and set(kept.sizes) == {TOKENS_FIELD}


def test_empty_text_gives_an_empty_array(bpe_file):
    kept = Tokenize(bpe_file)(PackSample("k", 0, {"txt": b""}))
    assert np.load(io.BytesIO(kept.sample.fields[TOKENS_FIELD])).shape == (0,) and kept.sizes[TOKENS_FIELD] == 0


def test_the_dtype_follows_the_vocabulary(bpe_file, large_vocab_file):
    assert Tokenize(bpe_file).dtype == "uint16" and Tokenize(bpe_file, dtype="uint32").dtype == "uint32"
    tokenize = Tokenize(large_vocab_file)
    assert tokenize.dtype == "uint32"
    tokens = np.load(io.BytesIO(tokenize(PackSample("k", 0, {"txt": b"w69999 w1"})).sample.fields[TOKENS_FIELD]))
    assert tokens.dtype == np.dtype("<u4") and tokens.tolist() == [69_999, 1]
    with pytest.raises(PackError, match="ids up to 69,999: dtype uint16"):
        Tokenize(large_vocab_file, dtype="uint16")


def test_samples_that_cannot_be_tokenised_are_bad_input_naming_them(bpe_file):
    tokenize = Tokenize(bpe_file)
    with pytest.raises(BadInput, match="'k1' has no field 'txt'"):
        tokenize(PackSample("k1", 0, {"json": b"{}"}))
    with pytest.raises(BadInput, match=r"'k2'.*'txt' is not UTF-8 text \(byte 4\)"):
        tokenize(PackSample("k2", 0, {"txt": b"the \xff cat"}))
    with pytest.raises(BadInput, match="'k3' has a field 'tokens.npy' already"):
        tokenize(PackSample("k3", 0, {"txt": b"cat", TOKENS_FIELD: b""}))


@pytest.mark.parametrize("options, message", [({"dtype": "int8"}, "dtype must be one of"),
                                              ({"field": "../txt"}, "field name"),
                                              ({"drop_text": 1}, "drop_text must be True or False")])
def test_bad_options_are_pack_errors(bpe_file, options, message):
    with pytest.raises(PackError, match=message):
        Tokenize(bpe_file, **options)


def test_a_missing_or_malformed_tokenizer_file_is_a_pack_error(tmp_path):
    with pytest.raises(PackError, match="cannot be read"):
        Tokenize(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(PackError, match="cannot be loaded"):
        Tokenize(str(tmp_path / "bad.json"))


def test_it_pickles_without_its_tokenizer_and_loads_it_once_per_process(bpe_file):
    tokenize = Tokenize(bpe_file)
    copy = pickle.loads(pickle.dumps(tokenize))
    assert copy == tokenize and copy._tokenizer is None and len(pickle.dumps(tokenize)) < 1000
    sample = PackSample("k", 0, {"txt": b"the cat sat"})
    assert copy(sample) == tokenize(sample)
    loaded = copy._tokenizer
    copy(sample)
    assert copy._tokenizer is loaded


def test_a_worker_refuses_a_tokenizer_file_changed_since_the_driver_read_it(bpe_file, large_vocab_file, tmp_path):
    path = tmp_path / "tok.json"
    path.write_bytes(open(bpe_file, "rb").read())
    copy = pickle.loads(pickle.dumps(Tokenize(str(path))))
    path.write_bytes(open(large_vocab_file, "rb").read())
    with pytest.raises(PackError, match="changed since the pack began"):
        copy(PackSample("k", 0, {"txt": b"cat"}))


def test_its_options_rebuild_it_and_pin_the_file(bpe_file, large_vocab_file):
    options = Tokenize(bpe_file, drop_text=True).options()
    assert Tokenize(**options) == Tokenize(bpe_file, drop_text=True)
    assert options["dtype"] == "uint16" and len(options["sha256"]) == 64
    with pytest.raises(PackError, match="not the one recorded"):
        Tokenize(**{**options, "tokenizer_file": large_vocab_file})
