"""The pack pipeline: corpus -> order -> layout -> parallel read and probe -> ordered shard writes -> manifest.

Worker processes read, probe and encode whole blocks; the parent appends them to the
shards in the planned order, so the output is identical for any `workers`.  At most a
few blocks per worker are in flight, so memory stays bounded however large the corpus.  Progress
and resume state live in ``OUTPUT/.corgi-partial/`` until the manifest is written; a rerun after a
kill at any moment resumes (see pack_output).  Worker processes die with the pack process.
"""
from __future__ import annotations

import json
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path

import numpy as np
from tqdm import tqdm

from corgi_io.packing import layout
from corgi_io.packing.corpus import Corpus, discover
from corgi_io.errors import PackError
from corgi_io.formats import get_format
from corgi_io.manifest import KINDS, MANIFEST_VERSION, open_manifest, save_manifest
from corgi_io.packing.encode import Item, encode_block
from corgi_io.checksum import DEFAULT_CHECKSUM
from corgi_io.packing.output import finish_output, open_partial, prepare_output
from corgi_io.packing.shard_file import COLUMNS as SHARD_COLUMNS, ShardWriter, load_finished, naming
from corgi_io.packing.sizing import load_size_fn
from corgi_io.packing.worker_pool import worker_pool

BLOCKS_AHEAD = 3    # blocks in flight per worker: memory stays near workers * 3 * block bytes


@dataclass(frozen=True)
class PackOptions:
    """Everything that decides the bytes of a pack; a resumed pack must match it exactly."""

    format: str = "wds"
    kind: str = "auto"
    order: str = "shuffle"
    seed: int = 0
    block_samples: int = layout.DEFAULT_BLOCK_SAMPLES
    block_bytes: int = layout.DEFAULT_BLOCK_BYTES
    shard_bytes: int = layout.DEFAULT_SHARD_BYTES
    size_fn: str | None = None
    label_index: tuple | None = None


def pack(source, output, options: PackOptions = PackOptions(), *, workers: int = 1, strict: bool = False,
         overwrite: bool = False, progress: bool | None = None):
    """Pack SOURCE into block-structured shards plus a manifest in OUTPUT; returns the opened Manifest.

    `progress=None` shows a bar only on a terminal.  Rerunning after an interruption resumes:
    finished shards are kept, the rest rewritten.
    """
    fmt = get_format(options.format)
    if options.order not in layout.ORDERS:
        raise PackError(f"order must be one of {layout.ORDERS}, not {options.order!r}")
    if options.size_fn:
        load_size_fn(options.size_fn)  # fail before any work, not in every worker
    corpus = discover(source, options.kind, options.label_index, strict=strict)
    output = Path(output)
    identity = json.loads(json.dumps(dict(asdict(options), source=str(Path(source).resolve()), manifest_version=MANIFEST_VERSION,
                                          corpus=corpus.fingerprint())))  # as it reads back from JSON
    if prepare_output(output, identity, overwrite):
        return open_manifest(output)
    try:
        _write_pack(fmt, options, corpus, output, identity, workers=workers, strict=strict, progress=progress)
        finish_output(output)
    except OSError as exc:  # a full disk, say: one line that names the file, and the finished shards stay
        if exc.filename is None:
            raise
        raise PackError(f"{exc.filename}: {exc.strerror or exc} (finished shards are kept: "
                        "rerun the same command to resume)") from exc
    return open_manifest(output)


def _write_pack(fmt, options: PackOptions, corpus: Corpus, output: Path, identity: dict, *, workers: int,
                strict: bool, progress) -> None:
    """Lay the corpus out, write the shards that are not finished yet, then the manifest."""
    partial = open_partial(output, identity)
    order = np.random.default_rng(options.seed).permutation(len(corpus)) if options.order == "shuffle" \
        else np.arange(len(corpus))
    key_bytes = np.array([len(corpus.keys[i].encode()) for i in order], dtype=np.int64)
    estimates = fmt.estimate_record_bytes(np.array(corpus.nbytes, dtype=np.int64)[order], key_bytes)
    plan = layout.plan_layout(estimates, options.block_bytes, options.block_samples,
                              max(1, options.shard_bytes - len(fmt.TRAILER)))
    labels = corpus.label_ids()

    shard_names = [f"shard-{i:06d}{fmt.SUFFIX}" for i in range(len(plan.shard_starts))]
    records = [load_finished(output / name, partial / f"{name}.json") for name in shard_names]
    block_bounds, shard_blocks = plan.block_bounds(len(order)), plan.shard_bounds()
    todo = [(shard, block) for shard, record in enumerate(records) if record is None
            for block in range(shard_blocks[shard], shard_blocks[shard + 1])]

    order_list, labels_list = order.tolist(), labels.tolist()
    kinds = [KINDS[k] for k in corpus.kinds]

    def items(block):
        first, stop = int(block_bounds[block]), int(block_bounds[block + 1])
        return [Item(q, corpus.paths[p], kinds[p], corpus.keys[p], corpus.exts[p], labels_list[p])
                for q, p in zip(range(first, stop), order_list[first:stop])]

    blocks = ((items(b), partial / f"block-{b}.spill") for _, b in todo)
    encoded = _ordered_map(options.format, options.size_fn, blocks, workers)
    total = int(sum(block_bounds[b + 1] - block_bounds[b] for _, b in todo))
    with _Progress(total, progress) as bar:
        for shard, record in _write_shards(fmt, output, partial, shard_names, todo, encoded, shard_blocks,
                                           lambda position: corpus.relpaths[order_list[position]], strict, bar):
            records[shard] = record
    head = {"format": options.format, "options": identity, "labels": corpus.labels,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    _write_manifest(output, head, corpus, order, labels, shard_names, records)


def _write_shards(fmt, output: Path, partial: Path, shard_names, todo, encoded, shard_blocks, relpath_of, strict, bar):
    """Append the encoded blocks of `todo` to their shards in order; yields (shard, resume record) per finished shard.

    A skipped file is a warning (or, with `strict`, a PackError); an unfinished shard's temporary file is removed.
    """
    writer = None
    try:
        for (shard, block_index), block in zip(todo, encoded):
            if writer is None:
                writer = ShardWriter(fmt, output / shard_names[shard], partial / f"{shard_names[shard]}.json")
            for position, path, reason in block.skipped:
                if strict:
                    raise PackError(f"{path}: {reason}")
                bar.warn(f"skipped {path}: {reason}")
                writer.skip(relpath_of(position), reason)
            writer.add_block(block_index, block)
            bar.advance(len(block.position) + len(block.skipped), block.payload_bytes)
            if block_index + 1 == shard_blocks[shard + 1]:
                yield shard, writer.finish()
                writer = None
    except BaseException:
        if writer is not None:
            writer.abort()
        encoded.close()
        raise


def _write_manifest(output: Path, head: dict, corpus: Corpus, order, labels, shard_names, records) -> None:
    columns = {name: np.concatenate([np.asarray(r[name], dtype=np.int64) for r in records])
               for name in SHARD_COLUMNS}
    source = order[columns["position"]]
    extensions, ext_ids = np.unique(np.asarray(corpus.exts, dtype=str), return_inverse=True)
    counts = [len(r["offset"]) for r in records]
    shard = np.repeat(np.arange(len(records)), counts)
    samples = dict(label=labels[source], kind=np.asarray(corpus.kinds)[source],
                   bytes=np.asarray(corpus.nbytes, dtype=np.int64)[source], size=columns["size"], shard=shard,
                   offset=columns["offset"], length=columns["length"], data_offset=columns["data_offset"],
                   checksum=columns["checksum"], ext=ext_ids[source])
    # a block is a run of written samples that share a planned block (skips may empty or shrink one)
    first = np.flatnonzero(np.diff(columns["block"], prepend=-1) != 0) if len(source) else np.zeros(0, np.int64)
    count = np.diff(np.append(first, len(source)))
    last = first + count - 1
    blocks = dict(shard=shard[first], offset=columns["offset"][first],
                  length=columns["offset"][last] + columns["length"][last] - columns["offset"][first],
                  first=first, count=count, size_sum=np.add.reduceat(columns["size"], first) if len(first) else first)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int)
    head["shards"] = [{"path": name, "bytes": r["bytes"], "first_sample": int(s), "samples": c}
                      for name, r, s, c in zip(shard_names, records, starts, counts)]
    head["extensions"], head["checksum"] = extensions.tolist() or [""], DEFAULT_CHECKSUM
    head["skipped"] = corpus.skipped + [s for r in records for s in r["skipped"]]
    save_manifest(output, head, samples, blocks, [corpus.keys[i] for i in source])


def _ordered_map(format_name: str, size_fn_spec, blocks, workers: int):
    """Encoded blocks in order, from (items, spill path) pairs.

    With workers > 1 a process pool encodes them, spilling each block to its spill path,
    with a bounded number of blocks in flight; with one worker they are encoded in memory.
    On Linux the workers are forked (so that they are children of this process) and die with it.
    """
    if workers <= 1:
        for items, _ in blocks:
            yield encode_block(format_name, size_fn_spec, items)
        return
    pool = worker_pool(workers)
    try:
        def submit(items, spill_path):
            return spill_path, pool.submit(encode_block, format_name, size_fn_spec, items, str(spill_path))

        pending = deque(submit(*block) for block in islice(blocks, workers * BLOCKS_AHEAD))
        while pending:
            spill_path, future = pending.popleft()
            with naming(spill_path):  # a worker that cannot write its spill (a full disk)
                block = future.result()
            for next_block in islice(blocks, 1):
                pending.append(submit(*next_block))
            yield block
    finally:
        pool.shutdown(cancel_futures=True)


class _Progress:
    """A tqdm bar counting samples, with MB/s; silent off a terminal unless forced."""

    def __init__(self, total: int, enabled):
        self.bar = tqdm(total=total, unit="sample", unit_scale=True, desc="pack",
                        disable=None if enabled is None else not enabled, dynamic_ncols=True)
        self.bytes, self.start, self.shown = 0, time.perf_counter(), 0.0

    def advance(self, samples: int, nbytes: int) -> None:
        self.bytes += nbytes
        self.bar.update(samples)
        now = time.perf_counter()
        if now - self.shown > 0.5:
            self.shown = now
            self.bar.set_postfix_str(f"{self.bytes / 1e6 / max(now - self.start, 1e-9):.1f} MB/s", refresh=False)

    def warn(self, message: str) -> None:
        tqdm.write(f"corgi pack: warning: {message}", file=sys.stderr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.bar.close()
