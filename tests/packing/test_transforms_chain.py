"""TransformChain and the registry: composition, sizes kept only for unchanged bytes, Drop ends the chain,
options that rebuild the chain, and every transform pickled to a worker process."""
from __future__ import annotations

import concurrent.futures
import io
import json
import multiprocessing
import pickle

import pytest
from PIL import Image

from corgi_io.errors import PackError
from corgi_io.packing.sample import PackSample
from corgi_io.packing.transforms import (TRANSFORMS, Drop, ExactDedup, ImageResize, Kept, SizeFilter, Tokenize,
                                         TransformChain, UserMap, build_chain, build_transform)

tokenizers = pytest.importorskip("tokenizers")

USER_MODULE = '''
def keep_all(fields, key):
    return fields

def retag(fields, key):
    return {**fields, "jpg": bytes(bytearray(fields["jpg"]))}  # equal bytes, another object: not known unchanged

def drop(fields, key):
    return None

def fail(fields, key):
    raise AssertionError("a step after a Drop ran")
'''


@pytest.fixture
def user_module(write_user_module):
    """The module `corgi_chain_fns`, importable here."""
    write_user_module("corgi_chain_fns", USER_MODULE)
    return "corgi_chain_fns"


@pytest.fixture
def tokenizer_file(tmp_path):
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab={"[UNK]": 0, "a": 1, "corgi": 2}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "words.json"))
    return str(tmp_path / "words.json")


def jpeg(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), "orange").save(out, format="JPEG")
    return out.getvalue()


SAMPLE = PackSample("k", 1, {"jpg": jpeg(400, 200), "txt": b"a corgi"})


def test_steps_apply_in_turn_and_their_sizes_add_up(user_module, tokenizer_file):
    chain = TransformChain((ImageResize(100), UserMap(f"{user_module}:keep_all"), Tokenize(tokenizer_file)))
    kept = chain(SAMPLE)
    assert list(kept.sample.fields) == ["jpg", "txt", "tokens.npy"]
    assert kept.sizes == {"jpg": 100 * 50, "txt": 2, "tokens.npy": 2}


def test_a_size_is_forgotten_when_a_later_step_replaces_its_bytes(user_module):
    kept = TransformChain((ImageResize(100), UserMap(f"{user_module}:retag")))(SAMPLE)
    assert "jpg" in kept.sample.fields and kept.sizes == {}


def test_a_drop_ends_the_chain(user_module):
    chain = TransformChain((UserMap(f"{user_module}:drop"), UserMap(f"{user_module}:fail")))
    assert chain(SAMPLE) == Drop("k", f"{user_module}:drop returned None")


def test_no_step_keeps_the_sample_as_it_is():
    assert TransformChain()(SAMPLE) == Kept(SAMPLE) and TransformChain().options() == []


def test_options_name_each_step_and_rebuild_the_chain(user_module, tokenizer_file):
    chain = TransformChain((ImageResize(64, format="webp"), Tokenize(tokenizer_file, drop_text=True),
                            UserMap(f"{user_module}:keep_all")))
    options = chain.options()
    assert [step["name"] for step in options] == ["resize", "tokenize", "map"]
    assert json.loads(json.dumps(options)) == options and build_chain(options) == chain
    assert build_chain(options)(SAMPLE) == chain(SAMPLE)


@pytest.mark.parametrize("spec, message", [({"name": "blur"}, r"transform must be one of \('resize', 'tokenize', 'map'\)"),
                                           ({"max_side": 3}, "transform must be one of"),
                                           ({"name": "resize", "max_side": 3, "side": 4}, "'resize'.*'side'"),
                                           ({"name": "resize"}, "'resize'.*max_side"),
                                           (["resize"], "a transform is a dict")])
def test_a_bad_spec_is_a_pack_error_naming_the_choices(spec, message):
    with pytest.raises(PackError, match=message):
        build_transform(spec)


def test_the_registry_holds_the_chain_steps():
    assert TRANSFORMS == {"resize": ImageResize, "tokenize": Tokenize, "map": UserMap}


def _apply(chain, sample):
    return chain(sample)


@pytest.mark.slow
def test_every_transform_runs_in_a_spawned_worker(user_module, tokenizer_file):
    chain = TransformChain((ImageResize(100), Tokenize(tokenizer_file), UserMap(f"{user_module}:keep_all")))
    others = (SizeFilter(1, 10), ExactDedup())
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        assert pool.submit(_apply, chain, SAMPLE).result() == chain(SAMPLE)
        assert pool.submit(pickle.loads, pickle.dumps(others)).result() == others
