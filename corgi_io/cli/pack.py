"""`corgi pack SOURCE OUTPUT`: raw corpus -> block-structured shards + manifest."""
from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

import click
from click.core import ParameterSource

from corgi_io.cli.errors import one_line_errors
from corgi_io.cli.index import READERS_HELP, index_names, write_and_report
from corgi_io.cli.storage_options import with_storage_options
from corgi_io.formats import FORMATS
from corgi_io.manifest import DEFAULT_MAX_PIXELS, KINDS
from corgi_io.packing import PackOptions, layout, pack
from corgi_io.packing.pipeline import DEFAULT_MAP_TIMEOUT
from corgi_io.packing.pack_plan import DEFAULT_MAX_SAMPLE_BYTES
from corgi_io.packing.sources.forms import FORMS
from corgi_io.packing.transforms.image import IMAGE_FORMATS
from corgi_io.report.stats import counted

UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_bytes(text: str) -> int:
    """'512MiB', '4M', '1g', '1000' -> bytes (binary multiples)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", text.lower())
    if not match:
        raise click.BadParameter(f"{text!r} is not a size such as 512MiB or 4M")
    return int(float(match.group(1)) * UNITS[match.group(2)])


class ByteSize(click.ParamType):
    name = "SIZE"

    def convert(self, value, param, ctx):
        return value if isinstance(value, int) else parse_bytes(value)


def parse_mapping(text: str | None) -> tuple:
    """'jpg=image/encoded,label=image/class/label' -> (("jpg", "image/encoded"), ("label", "image/class/label"))."""
    if not text:
        return ()
    pairs = [item.partition("=") for item in text.split(",") if item.strip()]
    if any(not sep or not name.strip() or not target.strip() for name, sep, target in pairs):
        raise click.BadParameter(f"{text!r} is not NAME=TARGET pairs joined by commas")
    return tuple((name.strip(), target.strip()) for name, _, target in pairs)


def default_workers() -> int:
    return min(8, os.cpu_count() or 1)


def check_dask_address(ctx, param, value):
    """--dask must be local, local:N or a scheduler address; checked before any work (dask is not imported)."""
    from corgi_io.packing.dask_executor import parse_address

    if value is not None:
        try:
            parse_address(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from exc
    return value


@click.command("pack")
@click.argument("source")  # a path or an fsspec URL (click.Path would fold the // of s3://)
@click.argument("output")  # a folder, or s3://bucket/prefix (click.Path would fold the //)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="wds", show_default=True)
@click.option("--from", "from_", type=click.Choice(FORMS),
              help="What SOURCE is (default: detected from what it holds): a folder tree or a .csv/.jsonl listing of "
                   "raw files, or existing shards or tables to repack: WebDataset tars (.tar, .tar.gz), TFRecord "
                   "files of tf.train.Example, Parquet files, or JSONL files with the values inline. A folder, glob "
                   "of one, or one file; local, or an fsspec URL (http://, s3://). Each file (a Parquet row group) "
                   "is packed by a task of its own, into its own shards, keeping its order.")
@click.option("--features", metavar="NAME=FEATURE,...", callback=lambda ctx, param, value: parse_mapping(value),
              help="--from tfrecord: the features to pack as fields, e.g. jpg=image/encoded,txt=image/text,"
                   "label=image/class/label (label and key name the class id and the key).")
@click.option("--columns", metavar="NAME=COLUMN,...", callback=lambda ctx, param, value: parse_mapping(value),
              help="--from parquet or jsonl: the columns (a.b for a nested one) to pack as fields, e.g. "
                   "jpg=image.bytes,txt=caption,label=label.")
@click.option("--label-field", metavar="FIELD",
              help="--from wds: the field holding each sample's class id (default cls), taken out of its fields.")
@click.option("--kind", type=click.Choice(("auto", *KINDS)), default="auto", show_default=True,
              help="Keep only samples with a field of this kind (the first is primary): the files of others are "
                   "skipped (counted in one line, listed in the manifest); a sample whose fields name no kind is "
                   "packed as this kind.")
@click.option("--primary", metavar="FIELD",
              help="The field whose kind and size drive balance and stats (default: the first image field, else "
                   "video, else text); a sample without it is skipped.")
@click.option("--require", metavar="FIELD,FIELD", default="",
              help="Skip (and record) every sample that lacks one of these fields, e.g. --require jpg,txt.")
@click.option("--labels", "labels_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A file of class names, one per line, that fixes the label ids.")
@click.option("--block-samples", type=click.IntRange(min=1), default=layout.DEFAULT_BLOCK_SAMPLES, show_default=True,
              help="At most this many samples per block.")
@click.option("--block-bytes", type=ByteSize(), default=layout.DEFAULT_BLOCK_BYTES, show_default="4MiB",
              help="Close a block before it grows past this many bytes.")
@click.option("--shard-bytes", type=ByteSize(), default=layout.DEFAULT_SHARD_BYTES, show_default="512MiB",
              help="Close a shard before it grows past this many bytes.")
@click.option("--order", type=click.Choice(layout.ORDERS), default="shuffle", show_default=True,
              help="Permute samples at pack time (free), or keep the input order. A pack of shards or tables "
                   "keeps their order (the loader's shuffle mixes it).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=default_workers, show_default="CPU count, at most 8",
              help="Processes that write shards, one whole shard each at a time (1: this process).")
@click.option("--dask", "dask_address", metavar="ADDRESS", callback=check_dask_address,
              help="Write the shards on a Dask cluster instead of local processes: a scheduler address "
                   "(tcp://host:8786) or local[:N] (a LocalCluster of N worker processes). OUTPUT (--staging for "
                   "an s3:// OUTPUT) must be on a file system every worker shares. Not with --workers. Needs corgi-io[dask].")
@click.option("--size-fn", help="MODULE:FUNCTION called as function(path) -> int, replacing the built-in size.")
@click.option("--max-pixels", type=click.IntRange(min=0), default=DEFAULT_MAX_PIXELS, show_default=True,
              help="Skip an image whose header gives more pixels than this (a decompression bomb); the loader's "
                   "default limit. 0: no limit.")
@click.option("--max-sample-bytes", type=ByteSize(), default=DEFAULT_MAX_SAMPLE_BYTES, show_default="2GiB",
              help="Skip a file larger than this, without reading it.")
@click.option("--image-max-side", type=click.IntRange(min=1), metavar="N",
              help="Preprocess at pack time: shrink every image field whose longer side is above N pixels to N "
                   "(aspect kept, same format; smaller images pass through byte for byte). The recorded size is "
                   "the new pixel count.")
@click.option("--image-format", type=click.Choice(tuple(IMAGE_FORMATS)), default="keep", show_default=True,
              help="With --image-max-side: re-encode every image not already in this format (and every resized "
                   "one) as it, renaming its field (png -> jpg); keep: each image's own format.")
@click.option("--image-quality", type=click.IntRange(1, 100), default=90, show_default=True,
              help="JPEG/WebP quality of an image that --image-max-side re-encodes.")
@click.option("--tokenizer", type=click.Path(exists=True, dir_okay=False, resolve_path=True), metavar="FILE",
              help="Preprocess at pack time: tokenise each sample's txt field with this local tokenizers JSON file "
                   "into a tokens.npy field (uint16 or uint32 ids), the sample's primary field, sized by its token "
                   "count. Needs corgi-io[text].")
@click.option("--drop-text", is_flag=True, help="With --tokenizer: leave the txt field out of the pack.")
@click.option("--map", "map_function", metavar="MODULE:FUNCTION",
              help="Preprocess at pack time with your own function, called in the workers as function(fields, key) "
                   "with each sample's {field: bytes}; it returns the sample's new fields (it may add, replace or "
                   "remove fields; bytes-like values are taken as bytes) or None to drop the sample (a recorded "
                   "skip). An exception (sys.exit too), a field other than the sample's primary with a reserved name "
                   "(cls, data, ext, fields, index, key, kind, label, size, source; the primary may take any of them "
                   "but cls) or one above --max-sample-bytes skips the sample, or fails the pack under --strict. "
                   "MODULE must be importable by every worker; the map runs in worker "
                   "processes even with --workers 1, so that one that crashes is named. Runs before "
                   "--image-max-side and --tokenizer.")
@click.option("--map-timeout", type=click.FloatRange(min=0), default=DEFAULT_MAP_TIMEOUT, metavar="SECONDS",
              show_default=True,
              help="Fail the pack, naming the sample, when one --map call runs longer than this (a hung map would "
                   "hang the pack). The default allows minutes of work per sample (a model run on a video, say) and "
                   "still ends a hung pack within ten minutes. 0: no limit. Not enforced on --dask.")
@click.option("--dedup", is_flag=True,
              help="Leave out every sample whose primary field's bytes (as read, before --map and the other "
                   "transforms) equal an earlier sample's in pack order: a hashing pass (BLAKE2b-128) reads every "
                   "primary field once before the shards are written. Each one removed is a recorded skip.")
@click.option("--min-size", type=click.IntRange(min=0), metavar="N",
              help="Skip (and record) a sample whose primary field's final size (pixels, frames, tokens) is below N.")
@click.option("--max-size", type=click.IntRange(min=0), metavar="N",
              help="Skip (and record) a sample whose primary field's final size is above N.")
@click.option("--strict", is_flag=True,
              help="Fail on the first input that cannot be packed (missing, unreadable, not a regular file, corrupt, "
                   "above --max-pixels or --max-sample-bytes, or a listing row whose key breaks the key rule) "
                   "instead of skipping it.")
@click.option("--overwrite", is_flag=True, help="Replace a pack made with different options.")
@click.option("--staging", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="With an s3:// OUTPUT: the local folder where shards are written before they are uploaded "
                   "(default: a temporary folder). It holds about one unit's shards per worker at a time; with "
                   "--dask every worker must see it.")
@click.option("--index", "indexes", metavar="READER,...", callback=index_names,
              help=f"Once the pack is complete, also write other readers' index files beside it (as `corgi index "
                   f"OUTPUT --for ...`). {READERS_HELP}")
@with_storage_options
@click.pass_context
def pack_command(ctx, source, output, fmt, from_, features, columns, label_field, kind, primary, require, labels_file,
                 block_samples, block_bytes, shard_bytes, order, seed, workers, dask_address, size_fn, max_pixels,
                 max_sample_bytes, image_max_side, image_format, image_quality, tokenizer, drop_text, map_function,
                 map_timeout, dedup, min_size, max_size, strict, overwrite, staging, indexes, storage_options):
    """Pack SOURCE into shards and a manifest in OUTPUT: a folder tree or a .csv/.jsonl listing of raw files,
    or existing WebDataset tars, TFRecord files, Parquet or JSONL tables (see --from).

    In a folder, files that share a folder and a stem are one sample with one field per file
    (cat/001.jpg + cat/001.txt: sample cat/001, fields jpg and txt), as WebDataset groups tar members;
    files with distinct stems (the example corpus) stay one sample each.  A listing row is one sample.
    A tar's members are grouped by key as webdataset groups them; a TFRecord's features and a
    table's columns become fields by --features and --columns.
    """
    _check_usage(ctx, fmt, features, columns, dask_address, indexes)
    label_index = None
    if labels_file:
        label_index = tuple(line.strip() for line in labels_file.read_text(encoding="utf-8").splitlines() if line.strip())
    with one_line_errors():  # bad options fail before a cluster starts
        options = PackOptions(format=fmt, kind=kind, order=order, seed=seed, block_samples=block_samples,
                              block_bytes=block_bytes, shard_bytes=shard_bytes, size_fn=size_fn,
                              label_index=label_index, max_pixels=max_pixels or None, max_sample_bytes=max_sample_bytes,
                              primary=primary, require=tuple(name for name in require.split(",") if name),
                              image_max_side=image_max_side, image_format=image_format,
                              image_quality=image_quality, tokenizer=tokenizer,
                              drop_text=drop_text, min_size=min_size, max_size=max_size, source_form=from_,
                              source_fields=features or columns, label_field=label_field,
                              map_function=map_function, dedup=dedup)
    with one_line_errors(), _dask_client(dask_address) as client:
        manifest = pack(source, output, options, workers=1 if client is not None else workers, client=client,
                        strict=strict, overwrite=overwrite, map_timeout=map_timeout, storage_options=storage_options,
                        staging=staging)
    click.echo(f"packed {counted(manifest.num_samples, 'sample')} into {counted(len(manifest.blocks), 'block')} "
               f"and {counted(len(manifest.shards), 'shard')} in {output} ({manifest.skips['count']} skipped)")
    if indexes:
        write_and_report("pack", manifest, indexes, storage_options, output)


def _check_usage(ctx, fmt, features, columns, dask_address, indexes) -> None:
    """Refuse options that contradict each other (click.UsageError, exit 2) before anything is read or started."""
    if features and columns:
        raise click.UsageError("--features maps a TFRecord SOURCE, --columns a table: give one")
    if dask_address is not None and ctx.get_parameter_source("workers") is not ParameterSource.DEFAULT:
        raise click.UsageError("--workers sizes the local pool; with --dask the cluster's workers write the shards "
                               "(use --dask local:N for N local worker processes)")
    if indexes and fmt != "wds":
        raise click.UsageError("--index is for --format wds: the readers' indexes are of tar shards")


def _dask_client(address):
    """A client of the Dask cluster at `address` (started here for local[:N]), or None without --dask."""
    if address is None:
        return contextlib.nullcontext()
    from corgi_io.packing.dask_executor import dask_client

    return dask_client(address, default_workers())
