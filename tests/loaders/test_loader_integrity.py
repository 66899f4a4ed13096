"""Fault injection against the loader: a seeded campaign of shard mutations, both formats.

Each mutation damages a copy of a small pack the way an operator's bad day would: flipped
bytes, a zeroed 512-byte range, truncation, appended garbage, a deleted shard, two shards
swapped.  The loader (Reading(verify=True), the default) must never yield a byte it was not
packed with: it either yields the whole epoch with every sample's original bytes (the damage
hit bytes no sample owns, such as a tar trailer), or it raises CorruptDataError or
StorageError naming the damaged shard, having yielded only intact samples before.  Nothing
hangs.  With Reading(verify=False) the same campaign shows what the check buys.
"""
from __future__ import annotations

import random
import shutil
from collections import Counter
from pathlib import Path

import pytest

from corgi_io import CorruptDataError, StorageError
from corgi_io.loaders import CorgiPileDataset, Reading, Shuffle
from corgi_io import PackOptions, pack
from helpers.corpus_factory import write_text

MUTATIONS_PER_FORMAT = 300
KINDS = ("flip", "zero512", "truncate", "append", "delete", "swap")


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    """{fmt: (pack root, {key: original payload})} of a 48-text corpus in several shards of 4-sample blocks."""
    source = tmp_path_factory.mktemp("integrity-corpus")
    for i in range(48):
        write_text(source / f"c{i % 3}" / f"t{i:02d}.txt", 20 + (i * 37) % 300, seed=i)
    out = {}
    for fmt in ("wds", "tfrecord"):
        root = tmp_path_factory.mktemp(f"integrity-{fmt}") / "pack"
        m = pack(source, root, PackOptions(format=fmt, block_samples=4, shard_bytes=12 << 10), progress=False)
        assert len(m.shards) >= 4
        originals = {s["key"]: s["data"] for s in CorgiPileDataset(root, shuffle=Shuffle("none"))}
        out[fmt] = root, originals
    return out


def shard_files(root: Path) -> list:
    return sorted(p for p in root.glob("shard-*") if not p.name.endswith(".index"))


def mutate(root: Path, rng: random.Random, kind: str) -> set:
    """Damage the pack at `root` in the way `kind` names; returns the names of the damaged shards."""
    shards = shard_files(root)
    victim = rng.choice(shards)
    data = bytearray(victim.read_bytes())
    if kind == "flip":
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == "zero512":
        start = rng.randrange(len(data))
        data[start:start + 512] = bytes(len(data[start:start + 512]))
    elif kind == "truncate":
        del data[rng.randrange(len(data)):]
    elif kind == "append":
        data += rng.randbytes(rng.randint(1, 2048))
    elif kind == "delete":
        victim.unlink()
        return {victim.name}
    elif kind == "swap":
        other = rng.choice([s for s in shards if s != victim])
        data, other_bytes = bytearray(other.read_bytes()), victim.read_bytes()
        other.write_bytes(other_bytes)
        victim.write_bytes(bytes(data))
        return {victim.name, other.name}
    victim.write_bytes(bytes(data))
    return {victim.name}


def run_epoch(root: Path, originals: dict, verify: bool, seed: int) -> tuple:
    """One epoch over the damaged pack: (outcome, error message or ""), the outcome one of 'complete',
    'raised', 'wrong bytes yielded' (silent corruption) or 'raised after wrong bytes'."""
    wrong = False
    try:
        for sample in CorgiPileDataset(root, seed=seed, shuffle=Shuffle(buffer_blocks=2),
                                       reading=Reading(verify=verify)):
            wrong = wrong or originals.get(sample["key"]) != sample["data"]
    except (CorruptDataError, StorageError) as exc:
        return ("raised after wrong bytes" if wrong else "raised"), str(exc)
    return ("wrong bytes yielded" if wrong else "complete"), ""


@pytest.mark.parametrize("fmt", ["wds", "tfrecord"])
def test_the_loader_never_yields_a_damaged_byte(packs, tmp_path, fmt):
    root, originals = packs[fmt]
    rng = random.Random(7)
    outcomes, checked_names = Counter(), 0
    for i in range(MUTATIONS_PER_FORMAT):
        kind = KINDS[i % len(KINDS)]
        copy = tmp_path / f"m{i}"
        shutil.copytree(root, copy)
        damaged = mutate(copy, rng, kind)
        outcome, message = run_epoch(copy, originals, verify=True, seed=i)
        outcomes[kind, outcome] += 1
        assert outcome in ("complete", "raised"), (kind, i, outcome)
        if outcome == "raised":
            assert "\n" not in message and any(f"{copy}/{name}" in message for name in damaged), message
            checked_names += 1
        shutil.rmtree(copy)
    print(f"\n{fmt}: {MUTATIONS_PER_FORMAT} mutations, Reading(verify=True): "
          + ", ".join(f"{k}/{o}={n}" for (k, o), n in sorted(outcomes.items())))
    for kind in ("truncate", "append", "delete", "swap"):  # these always change what the samples' ranges hold
        assert outcomes[kind, "complete"] == 0, kind
    assert checked_names >= MUTATIONS_PER_FORMAT * 0.6


def test_without_verification_the_same_damage_goes_unnoticed(packs, tmp_path):
    """The control: Reading(verify=False) yields damaged bytes for flips that Reading(verify=True) refuses."""
    root, originals = packs["wds"]
    rng = random.Random(11)
    silent = 0
    for i in range(30):
        copy = tmp_path / f"m{i}"
        shutil.copytree(root, copy)
        mutate(copy, rng, "flip")
        silent += run_epoch(copy, originals, verify=False, seed=i)[0] == "wrong bytes yielded"
        assert run_epoch(copy, originals, verify=True, seed=i)[0] in ("complete", "raised")
        shutil.rmtree(copy)
    assert silent >= 10


def test_a_shard_symlinked_outside_the_pack_is_never_read(packs, tmp_path):
    """A shard path is relative, but the file there could be a symlink out of the pack: it is refused unread."""
    root, _ = packs["wds"]
    copy = tmp_path / "pack"
    shutil.copytree(root, copy)
    victim = shard_files(copy)[0]
    secret = tmp_path / "SECRET.bin"
    secret.write_bytes(victim.read_bytes())  # identical bytes: only the location check can refuse it
    victim.unlink()
    victim.symlink_to(secret)
    with pytest.raises(StorageError, match="outside the pack root"):
        list(CorgiPileDataset(copy, shuffle=Shuffle("none")))
    inside = copy / "moved.tar"  # a symlink that stays inside the pack is fine
    secret.rename(inside)
    victim.unlink()
    victim.symlink_to(inside)
    assert len(list(CorgiPileDataset(copy, shuffle=Shuffle("none")))) == 48
