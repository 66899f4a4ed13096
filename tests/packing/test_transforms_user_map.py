"""UserMap: a user's function adds, replaces or drops; its failures name the sample; a bad spec fails at once."""
from __future__ import annotations

import pickle

import pytest

from corgi_io.errors import BadInput, PackError
from corgi_io.packing.sample import PackSample
from corgi_io.packing.transforms.chain import Drop, Kept
from corgi_io.packing.transforms.user_map import UserMap

USER_MODULE = '''
calls = []

def caption(fields, key):
    calls.append(key)
    return {**fields, "caption.txt": f"caption of {key}".encode()}

def only_text(fields, key):
    return {"txt": fields["txt"].upper()}

def drop_odd(fields, key):
    return None if int(key) % 2 else fields

def mutate(fields, key):
    fields.clear()
    return None

def boom(fields, key):
    raise ValueError(f"no caption for {key}\\nsecond line")

def not_a_dict(fields, key):
    return [("txt", b"x")]

def bad_name(fields, key):
    return {"Caption": b"x"}

def not_bytes(fields, key):
    return {"txt": "a str"}

def nothing(fields, key):
    return {}

NOT_CALLABLE = 3
'''


@pytest.fixture
def user_module(write_user_module):
    """The module `corgi_user_map_fns`, importable here."""
    write_user_module("corgi_user_map_fns", USER_MODULE)
    return "corgi_user_map_fns"


SAMPLE = PackSample("7", 4, {"txt": b"a corgi", "cls": b"4"})


def test_a_function_adds_a_field(user_module):
    kept = UserMap(f"{user_module}:caption")(SAMPLE)
    assert kept == Kept(PackSample("7", 4, {"txt": b"a corgi", "cls": b"4", "caption.txt": b"caption of 7"}))


def test_its_fields_replace_the_old_ones_whole(user_module):
    assert UserMap(f"{user_module}:only_text")(SAMPLE).sample.fields == {"txt": b"A CORGI"}


def test_none_drops_the_sample_with_a_reason(user_module):
    dropped = UserMap(f"{user_module}:drop_odd")(SAMPLE)
    assert dropped == Drop("7", f"{user_module}:drop_odd returned None") and not dropped
    assert UserMap(f"{user_module}:drop_odd")(PackSample("8", 0, {"txt": b"x"}))


def test_the_function_gets_a_copy_of_the_fields(user_module):
    UserMap(f"{user_module}:mutate")(SAMPLE)
    assert SAMPLE.fields == {"txt": b"a corgi", "cls": b"4"}


@pytest.mark.parametrize("function, message", [
    ("boom", r"^sample '7': corgi_user_map_fns:boom raised ValueError: no caption for 7$"),
    ("not_a_dict", "'7'.*returned list, not a dict of fields"),
    ("bad_name", "'7'.*returned field name 'Caption'"),
    ("not_bytes", "'7'.*'txt' holds str, not bytes"),
    ("nothing", "'7' has no field")])
def test_failures_are_bad_input_naming_the_sample(user_module, function, message):
    with pytest.raises(BadInput, match=message):
        UserMap(f"{user_module}:{function}")(SAMPLE)


@pytest.mark.parametrize("spec, message", [("no_colon", "expected MODULE:FUNCTION"), (":f", "expected MODULE:FUNCTION"),
                                           ("corgi_no_such_module:f", "ModuleNotFoundError"),
                                           ("{m}:missing", "AttributeError"), ("{m}:NOT_CALLABLE", "is not callable")])
def test_a_function_that_cannot_be_had_fails_at_once(user_module, spec, message):
    with pytest.raises(PackError, match=message):
        UserMap(spec.format(m=user_module))


def test_it_pickles_its_name_only_and_imports_the_function_again(user_module):
    transform = UserMap(f"{user_module}:caption")
    copy = pickle.loads(pickle.dumps(transform))
    assert copy == transform and copy._function is None and copy.options() == {"function": f"{user_module}:caption"}
    assert copy(SAMPLE) == transform(SAMPLE)
