"""Sequence packing: `CorgiPileDataset(batching=TokenRows(L))` against litdata's `TokensLoader(block_size=L)`,
one process.

The corpus: --n text files (bench/pack_tokenize.py's made-up words, 150..450 words each), a BPE tokenizer
(2,000 ids) trained on the spot.  corgi packs it with that tokenizer (`corgi pack --tokenizer --drop-text`:
tokens.npy, uint16); litdata's `optimize` writes the same ids (uint16, an end token after each
document, as TokensLoader expects) for `StreamingDataset(item_loader=TokensLoader(block_size=L), shuffle=True)`.
Both are read for --epochs epochs in one process (no DataLoader workers), in batches of --batch rows of --length
tokens, warm page cache.  The contenders:

  * litdata TokensLoader: rows of ids only, collated by a DataLoader(batch_size=B, num_workers=0);
  * litdata TokensLoader + boundaries: the same, plus what corgi's rows carry, computed in torch from the end
    tokens per batch (position_ids restarting per document and row, document ids, cu_seqlens);
  * corgi TokenRows(L, batch_size=B, eos_id=...): input_ids, position_ids, document_ids (int64), cu_seqlens, with
    CorgiPile shuffling, every checksum verified; split_documents True (default) and False.

Each measurement runs in a fresh process with torch.set_num_threads(1) (torch's intra-op threads made the
boundaries' small ops 50x slower on a shared 2-vCPU machine); rounds interleave the contenders; each line is the median tokens/s
of --rounds rounds, with its ratio against the named baseline (above 1: corgi faster).  Then the waste (padding
share) of split_documents True and False, one rank and 8 ranks (count and size balance).

    python bench/seq_pack.py [--n 10000] [--length 2048] [--batch 8] [--rounds 5] [--epochs 5] [--workdir bench/out/seq_pack]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import _litdata  # noqa: E402
from pack_tokenize import make_text_folder, train_tokenizer  # noqa: E402

EOS = 0  # the tokenizer's [UNK]: any id works as the end token, both contenders use the same
RAW, BOUNDED = "litdata TokensLoader", "litdata TokensLoader + boundaries"
CORGI = {"corgi TokenRows (split)": True, "corgi TokenRows (split_documents=False)": False}


def build(workdir: Path, n: int) -> tuple:
    """(corgi pack, litdata folder, tokens with end tokens), made once under `workdir` and reused."""
    from corgi_io import PackOptions, pack

    source = make_text_folder(workdir / f"texts-{n}", n)
    files = sorted(str(p) for p in source.glob("class_*/*.txt"))
    tokenizer = workdir / "bpe-tokenizer.json"
    if not tokenizer.exists():
        train_tokenizer(files[:2000], tokenizer)
    corgi, lit = workdir / f"corgi-{n}", workdir / f"litdata-{n}"
    if not (corgi / "manifest.json").exists() and not any(corgi.glob("manifest*")):
        pack(source, corgi, PackOptions(tokenizer=str(tokenizer), drop_text=True), workers=2, overwrite=True,
             progress=False)
    if not (lit / "index.json").exists():
        litdata, note = _litdata.import_litdata()
        if litdata is None:
            print(note)
        else:
            from litdata.streaming.item_loader import TokensLoader
            litdata.optimize(fn=LitTokens(str(tokenizer)), inputs=files, output_dir=str(lit), num_workers=2,
                             chunk_bytes="64MB", item_loader=TokensLoader(), verbose=False)
    from corgi_io.manifest import open_manifest
    return corgi, lit, int(np.asarray(open_manifest(corgi).samples.size).sum()) + n


class LitTokens:
    """litdata's fn: one file's ids (uint16) and an end token (the tokenizer loaded once per worker)."""

    def __init__(self, tokenizer_file: str):
        self.tokenizer_file, self.tokenizer = tokenizer_file, None

    def __call__(self, path: str):
        if self.tokenizer is None:
            from tokenizers import Tokenizer
            self.tokenizer = Tokenizer.from_file(self.tokenizer_file)
        ids = self.tokenizer.encode(Path(path).read_text(encoding="utf-8"), add_special_tokens=False).ids
        yield np.array(ids + [EOS], dtype=np.uint16)


def boundaries(batch, length: int) -> dict:
    """What corgi's rows carry, from a litdata batch of ids (B, L): positions restarting after each end token and
    at each row, document ids (per batch), cu_seqlens over the flattened tokens."""
    import torch

    flat = batch.reshape(-1).long()
    start = torch.zeros(flat.numel(), dtype=torch.bool)
    start[::length] = True
    start[1:] |= flat[:-1] == EOS
    cu = torch.nonzero(start).reshape(-1)
    bounds = torch.cat([cu, torch.tensor([flat.numel()])])
    positions = torch.arange(flat.numel()) - torch.repeat_interleave(cu, torch.diff(bounds))
    return {"input_ids": flat.reshape(batch.shape), "position_ids": positions.reshape(batch.shape),
            "document_ids": (torch.cumsum(start, 0) - 1).reshape(batch.shape), "cu_seqlens": bounds.int()}


def real_tokens(item) -> int:
    """The tokens of a corgi item, not its padding: the lengths of its sequences (cu_seqlens) whose first slot
    holds a document (document id >= 0), as cheap as litdata's numel (no pass over the item's slots)."""
    cu = item["cu_seqlens"].long()
    firsts = item["document_ids"].reshape(-1)[cu[:-1]]
    return int((cu[1:] - cu[:-1])[firsts >= 0].sum())


def child(name: str, corgi: str, lit: str, length: int, batch: int, epochs: int) -> None:
    """`epochs` epochs of one contender, in this (fresh) process: prints {"seconds", "tokens"} as JSON."""
    import torch

    torch.set_num_threads(1)  # one process, one thread: intra-op threads only spin on a shared 2-vCPU machine
    if name in CORGI:
        from corgi_io.loaders import CorgiPileDataset, TokenRows
        items = CorgiPileDataset(corgi, batching=TokenRows(length, batch_size=batch, eos_id=EOS,
                                                           split_documents=CORGI[name]))
        count = real_tokens
    else:
        import litdata
        from litdata.streaming.item_loader import TokensLoader
        data = litdata.StreamingDataset(lit, item_loader=TokensLoader(block_size=length), shuffle=True)
        items = torch.utils.data.DataLoader(data, batch_size=batch, num_workers=0)
        count = lambda item: item.numel() if name == RAW else boundaries(item, length)["input_ids"].numel()  # noqa
    start, tokens = time.perf_counter(), 0
    for epoch in range(epochs):
        (items.dataset if name not in CORGI else items).set_epoch(epoch)
        for item in items:
            tokens += count(item)
    print(json.dumps({"seconds": time.perf_counter() - start, "tokens": tokens}))


def measure(name: str, args, corgi: Path, lit: Path) -> dict:
    command = [sys.executable, __file__, "--child", name, "--corgi", str(corgi), "--lit", str(lit),
               "--length", str(args.length), "--batch", str(args.batch), "--epochs", str(args.epochs)]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    if done.returncode:
        raise RuntimeError(f"{name}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def waste_lines(corgi: Path, length: int) -> None:
    """The padding share of split_documents True and False, for 1 and 8 ranks, count and size balance."""
    from corgi_io.loaders import CorgiPileDataset, Ranks, TokenRows
    for split in (True, False):
        for world, balance in ((1, "count"), (8, "count"), (8, "size")):
            ds = CorgiPileDataset(corgi, ranks=Ranks(balance=balance, rank=0, world_size=world),
                                  batching=TokenRows(length, batch_size=8, eos_id=EOS, split_documents=split))
            print(f"seq-pack waste split_documents={split!s:5s} ranks={world} balance={balance:5s} "
                  f"{100 * ds.planner.waste():6.3f}% padding ({len(ds)} batches of 8 rows per rank)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=5, help="epochs per measurement (one process)")
    parser.add_argument("--workdir", type=Path, default=Path("bench/out/seq_pack"))
    parser.add_argument("--child"), parser.add_argument("--corgi"), parser.add_argument("--lit")
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.corgi, args.lit, args.length, args.batch, args.epochs)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    corgi, lit, tokens = build(args.workdir, args.n)
    names = ([RAW, BOUNDED] if (lit / "index.json").exists() else []) + list(CORGI)
    rates = {name: [] for name in names}
    for _ in range(args.rounds):
        for name in names:
            result = measure(name, args, corgi, lit)
            rates[name].append(result["tokens"] / result["seconds"])
    median = {name: statistics.median(values) for name, values in rates.items()}
    print(f"# {args.n} documents, {tokens} tokens with end tokens (BPE, trained on the spot), rows of {args.length}, "
          f"batches of {args.batch}, one process, warm page cache, {args.epochs} epochs a measurement, median of "
          f"{args.rounds} interleaved rounds, each in a fresh process; tokens/s counts real tokens, not padding")
    for name in names:
        ratios = "".join(f" ratio {median[name] / median[base]:5.2f}x vs {base}" for base in (RAW, BOUNDED)
                         if base in median and name in CORGI)
        print(f"seq-pack {name:42s} {median[name] / 1e6:8.1f} M tokens/s{ratios}")
    waste_lines(corgi, args.length)


if __name__ == "__main__":
    main()
