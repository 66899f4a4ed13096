"""The OUTPUT folder of `corgi pack`, in whatever state a run killed at any moment left it.

A pack first checks that OUTPUT can be one (`check_output`), creates it and takes its lock
(locks.py: ``.corgi-lock``, held for the whole run, so that one run at a time writes OUTPUT; the
lock file belongs to no state below and is never removed here).  It checks OUTPUT before its walk
(`open_output`) and against its identity after it (`claim_output`).  It then writes, in order: the
partial folder ``.corgi-partial/`` with its plan (made under a temporary name and renamed, so it
appears whole), the pack-order table inside it (under temporary names: every run writes its own),
the shards (each under a temporary name, renamed when complete, after its resume record), the
manifest (head last), and then removes the partial folder.  So OUTPUT is always in one of four states:

* **finished** - the manifest head exists, the last file a pack writes; a partial folder beside
  it is the leftover of a run killed during its clean-up;
* **partial** - ``.corgi-partial/plan.json`` exists: a rerun with the same options resumes;
* **empty** - nothing, or only what killed runs leave and no pack needs (temporary files and
  folders, a partial folder holding no plan and only temporary files);
* **foreign** - anything else, which is refused unless ``--overwrite``.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from corgi_io.errors import PackError
from corgi_io.storage.locks import LOCK_NAME
from corgi_io.manifest import HEAD_NAME, INDEX_FILES, PACK_METADATA
from corgi_io.storage.atomic import temp_name, write_atomic

PARTIAL_DIR = ".corgi-partial"
PLAN_NAME = "plan.json"
SHARD_PATTERN = "shard-*"  # shards and their sidecars


def pack_files(output: Path) -> list:
    """The files (or folders) of the pack in OUTPUT that exist: the manifest's, other readers' index files (which
    describe this pack: Energon takes a folder with `.nv-meta/` for prepared), then the shards and sidecars."""
    manifest = [output / name for name in (*PACK_METADATA, *INDEX_FILES) if (output / name).exists()]
    return manifest + sorted(output.glob(SHARD_PATTERN))


def check_output(source: Path, output: Path) -> None:
    """Refuse, before anything is written, an OUTPUT that cannot hold a pack: an existing file, the SOURCE
    folder itself, or a folder inside it (the walk would pack the pack)."""
    if output.exists() and not output.is_dir():
        raise PackError(f"{output}: is a file, not a folder; OUTPUT must be a folder (it is created if missing)")
    if not source.is_dir():
        return  # a listing names its files anywhere: only their walk could tell
    source, inside = source.resolve(), output.resolve()
    if inside == source:
        raise PackError(f"{output}: is SOURCE itself; choose an OUTPUT outside SOURCE")
    if source in inside.parents:
        raise PackError(f"{output}: is inside SOURCE {source}, whose walk would pack the pack; "
                        "choose an OUTPUT outside SOURCE")


def open_output(output: Path, overwrite: bool) -> None:
    """Before the walk, OUTPUT created and locked: refuse it if foreign (unless `overwrite`), clear what killed
    runs left."""
    if not overwrite and _recorded_identity(output) is None and _foreign_entries(output):
        raise PackError(f"{output}: not empty and holds no corgi pack; choose an empty OUTPUT or pass --overwrite")
    _remove(_leftovers(output, (output / HEAD_NAME).exists()))


def claim_output(output: Path, identity: dict, overwrite: bool) -> bool:
    """After the walk: check OUTPUT against this pack's identity; True when it already holds this pack, finished.

    Raises PackError for a pack with other options there, unless `overwrite`, which first removes
    that pack (other files stay).
    """
    if overwrite:
        _remove(pack_files(output) + [output / PARTIAL_DIR])
    recorded = _recorded_identity(output)
    if recorded is not None and recorded != identity:
        changed = sorted(k for k in identity.keys() | recorded.keys() if identity.get(k) != recorded.get(k))
        raise PackError(f"{output}: holds a pack made with different {', '.join(changed)}; "
                        "pass --overwrite to replace it")
    return (output / HEAD_NAME).exists()


def open_partial(output: Path, identity: dict) -> Path:
    """The partial folder of a pack being written, made with its plan unless a killed run's can be resumed.

    A new one is written under a temporary name and renamed, so that no kill can leave a
    partial folder without its plan.
    """
    partial = output / PARTIAL_DIR
    if not (partial / PLAN_NAME).exists():
        staging = output / temp_name(PARTIAL_DIR)
        staging.mkdir()
        write_atomic(staging / PLAN_NAME, json.dumps(identity).encode())
        staging.rename(partial)
    return partial


def finish_output(output: Path) -> None:
    """Remove the partial folder and any leftovers once the manifest is written (a rerun would do the same)."""
    _remove(_leftovers(output, finished=True))


def _recorded_identity(output: Path):
    """The options of the pack in OUTPUT, from its manifest head or else its plan; None when it has neither."""
    for path, field in ((output / HEAD_NAME, "options"), (output / PARTIAL_DIR / PLAN_NAME, None)):
        if not path.exists():
            continue
        try:
            recorded = json.loads(path.read_bytes())
            options = recorded[field] if field else recorded
            problem = None if isinstance(options, dict) else "the options are not a JSON object"
        except (ValueError, TypeError, KeyError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if problem:
            raise PackError(f"{path}: unreadable ({problem}); pass --overwrite to replace the pack")
        return options
    return None


def _foreign_entries(output: Path) -> list:
    """What OUTPUT holds besides the leftovers of killed runs and the lock (OUTPUT holding no manifest and no plan)."""
    if not output.exists():
        return []
    leftovers = set(_leftovers(output, finished=False)) | {output / LOCK_NAME}
    return [path for path in output.iterdir() if path not in leftovers]


def _leftovers(output: Path, finished: bool) -> list:
    """What killed runs left in OUTPUT that no pack needs.

    Temporary files and folders of any writer (in OUTPUT and in the manifest's folders, if it has
    any); inside the partial folder of a pack to resume, its temporary files (a table included); the
    partial folder itself once the pack is finished, or when it holds no plan and nothing but
    temporary files (a run killed while creating it, by versions that did not create it whole).
    """
    pattern, partial = temp_name("*", "*"), output / PARTIAL_DIR
    folders = [output, *(output / name for name in PACK_METADATA)]
    found = [path for folder in folders if folder.is_dir() for path in folder.glob(pattern)]
    if not partial.is_dir() or partial.is_symlink():
        return found
    inside = list(partial.glob(pattern))
    if (partial / PLAN_NAME).exists() and not finished:
        return found + inside
    if finished or set(partial.iterdir()) <= set(inside):
        return found + [partial]
    return found  # a partial folder without a plan that holds something else is not ours to delete


def _remove(paths) -> None:
    """Delete files and folders (a symlink itself, never what it points to); missing ones are fine."""
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
