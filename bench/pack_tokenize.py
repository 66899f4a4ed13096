"""Pack-time tokenising: `corgi pack --tokenizer FILE --workers 2` against `litdata.optimize` with the same tokenizer.

The corpus: 20,000 text files by default (class folders; 150..450 words each, drawn with a
Zipf-like law from 5,000 made-up words, in sentences), generated from a fixed seed.  A tiny BPE
tokenizer (2,000 ids, so rarer words split into pieces) is trained on the spot on the first 2,000
files with the `tokenizers` trainer and saved as JSON.  corgi packs the folder with that file (each
sample keeps its txt field and gains tokens.npy, its uint16 ids, as its primary field); litdata's
fn reads a file, encodes it with the same tokenizer (loaded once per worker) and returns {"txt":
str, "tokens": numpy uint16 ids, "label": int}, in `litdata.optimize(num_workers=2)`.  Chunks and
shards are at most --shard-mib MiB: small, because corgi gives each worker whole shards, so the
corpus must span several for 2 workers to share it.  Tokens are counted once, untimed.  The
contenders run interleaved from a warm page cache, round after round; each line is the median of
the rounds, in tokens/s, with its ratio against litdata.optimize (above 1: faster).

    python bench/pack_tokenize.py [--n 20000] [--rounds 3] [--shard-mib 8] [--workdir bench/out/pack_tokenize]

Needs tokenizers (pip install 'corgi-io[text]').  litdata is optional (bench/_litdata.py): without
it the bench says so in one line and prints corgi's numbers.
    pip install --no-deps litdata==0.2.76 lightning-utilities filelock boto3 requests
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _litdata  # noqa: E402
from _litdata import LITDATA, WORKERS, fixed_cost_line, ratio_text  # noqa: E402
from pack import run_rounds  # noqa: E402

from corgi_io import PackOptions, pack  # noqa: E402

VOCAB = 2000
_LOADED = {}  # tokenizer file -> Tokenizer, in each litdata worker


def made_up_words(rng, count: int) -> list:
    """`count` distinct lowercase words of 2..10 letters, from consonant-vowel syllables."""
    consonants, vowels = list("bcdfghklmnprstvwz"), list("aeiou")
    words = set()
    while len(words) < count:
        syllables = rng.integers(1, 5)
        words.add("".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(syllables))
                  + ("" if rng.random() < 0.7 else rng.choice(consonants)))
    return sorted(words)


def document(rng, words: list, weights: np.ndarray) -> str:
    """150..450 words in sentences of 6..20 words, each capitalised and ended by a full stop."""
    drawn = rng.choice(len(words), size=int(rng.integers(150, 451)), p=weights)
    sentences, start = [], 0
    while start < len(drawn):
        stop = start + int(rng.integers(6, 21))
        sentence = " ".join(words[i] for i in drawn[start:stop])
        sentences.append(sentence[0].upper() + sentence[1:] + ".")
        start = stop
    return " ".join(sentences) + "\n"


def make_text_folder(root: Path, n: int, classes: int = 10, seed: int = 0) -> Path:
    """`n` documents as `root/class_k/doc_i.txt`, reused if already there (a marker beside the folder)."""
    marker = root.with_name(root.name + f".complete-{n}-{classes}-{seed}")
    if marker.exists():
        return root
    rng = np.random.default_rng(seed)
    words = made_up_words(rng, 5000)
    weights = 1 / np.arange(1, len(words) + 1)
    weights /= weights.sum()
    for i in range(n):
        folder = root / f"class_{i % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"doc_{i:06d}.txt").write_text(document(rng, words, weights), encoding="utf-8")
    marker.touch()
    return root


def train_tokenizer(files: list, out: Path) -> str:
    """A BPE tokenizer (whitespace pre-tokenizer, VOCAB ids) trained on `files`, saved as JSON at `out`."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train(files, trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["[UNK]"], show_progress=False))
    tokenizer.save(str(out))
    return str(out)


def litdata_tokenize(path: str, tokenizer_file: str) -> dict:
    """litdata's fn: one file's text, its ids as a uint16 array (the tokenizer loaded once per worker), its label."""
    if tokenizer_file not in _LOADED:
        from tokenizers import Tokenizer

        _LOADED[tokenizer_file] = Tokenizer.from_file(tokenizer_file)
    text = Path(path).read_text(encoding="utf-8")
    ids = _LOADED[tokenizer_file].encode(text, add_special_tokens=False).ids
    return {"txt": text, "tokens": np.array(ids, dtype=np.uint16), "label": int(Path(path).parent.name.split("_")[1])}


def run_corgi(source: Path, out: Path, tokenizer_file: str, shard_bytes: int) -> None:
    """`corgi pack SOURCE OUT --tokenizer FILE --shard-bytes B --workers 2`."""
    pack(source, out, PackOptions(shard_bytes=shard_bytes, tokenizer=tokenizer_file), workers=WORKERS,
         overwrite=True, progress=False)


def contenders(source: Path, files: list, tokenizer_file: str, shard_bytes: int) -> tuple:
    """({name: run(out)}, fixed_cost(out) or None): litdata.optimize first when it imports (else its note is
    printed), then corgi; fixed_cost times litdata on 2 inputs only (`_litdata.fixed_cost`)."""
    litdata, note = _litdata.import_litdata()
    runs, fixed_cost = {}, None
    if litdata is None:
        print(note)
    else:
        fn = functools.partial(litdata_tokenize, tokenizer_file=tokenizer_file)
        runs[LITDATA] = lambda out: _litdata.optimize(litdata, fn, files, out, WORKERS, shard_bytes)
        fixed_cost = lambda out: _litdata.fixed_cost(litdata, fn, files, out, WORKERS, shard_bytes)  # noqa: E731
    runs[f"corgi pack --tokenizer FILE --workers {WORKERS}"] = \
        lambda out: run_corgi(source, out, tokenizer_file, shard_bytes)
    return runs, fixed_cost


def count_tokens(files: list, tokenizer_file: str) -> int:
    """The ids of every file, as both contenders make them (untimed)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_file)
    return sum(len(tokenizer.encode(Path(p).read_text(encoding="utf-8"), add_special_tokens=False).ids) for p in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shard-mib", type=int, default=8, help="litdata's chunk_bytes and corgi's --shard-bytes")
    parser.add_argument("--workdir", type=Path, default=Path("bench/out/pack_tokenize"))
    args = parser.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # trained here, then forked workers: no Rayon pool to fork
    source = make_text_folder(args.workdir / f"texts-{args.n}", args.n)
    files = sorted(str(p) for p in source.glob("class_*/*.txt"))
    tokenizer_file = train_tokenizer(files[:2000], args.workdir / "bpe-tokenizer.json")
    tokens, megabytes = count_tokens(files, tokenizer_file), sum(Path(p).stat().st_size for p in files) / 1e6
    runs, fixed_cost = contenders(source, files, tokenizer_file, args.shard_mib << 20)
    median = run_rounds(runs, args.workdir / "out", args.rounds)
    print(f"# {len(files)} text files, {megabytes:.1f} MB, {tokens} tokens (BPE, {VOCAB} ids, trained on the spot), "
          f"chunks/shards of {args.shard_mib} MiB, median of {args.rounds} interleaved rounds, warm page cache")
    if fixed_cost is not None:
        print(fixed_cost_line(fixed_cost(args.workdir / 'out'), median))
    for name, seconds in median.items():
        print(f"pack-tokenize {name:38s} {tokens / seconds:10.0f} tokens/s {len(files) / seconds:7.0f} docs/s"
              f"{ratio_text(median, seconds)}")


if __name__ == "__main__":
    main()
