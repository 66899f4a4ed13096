"""docs/format.md's "Reading a corgi pack with other readers": each Python recipe, as printed, reads every sample's key
of a pack made here (a wds pack, or a TFRecord one for the recipes that say so), with its library where it is
installed (each recipe's test skips, naming the library, where it is not). Each runs in a fresh interpreter, as a user
runs it: the `tfrecord` package registers tensorflow's proto names too, so one process cannot import both."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.index_packs import captioned_pack

from corgi_io.indexes import write_indexes
from corgi_io.manifest import open_manifest
from corgi_io.packing import PackOptions, pack

DOC = (Path(__file__).resolve().parents[2] / "docs" / "format.md").read_text(encoding="utf-8")
SECTION = DOC.split("## Reading a corgi pack with other readers\n", 1)[1].split("\n## ", 1)[0]
SETUP, *_ = re.findall(r"^```python\n(.*?)^```", SECTION, re.S | re.M)
RECIPES = {title: code for title, body in re.findall(r"^### (.+?)\n(.*?)(?=^### |\Z)", SECTION, re.S | re.M)
           for code in re.findall(r"^```python\n(.*?)^```", body, re.S | re.M)}
WDS, TFRECORD = "/tmp/corgi-pack", "/tmp/corgi-pack-tfrecord"


@pytest.fixture(scope="module")
def packs(tmp_path_factory):
    """{placeholder path in the docs: a pack made here} (long keys left out: wids cannot read them)."""
    wds, _ = captioned_pack(tmp_path_factory.mktemp("recipes"), long_key=False)
    with pytest.warns(UserWarning):  # the key with a space, in DALI's index
        write_indexes(wds, "wids,dali")
    tfrecord = tmp_path_factory.mktemp("recipes-tfrecord") / "pack"
    pack(wds.parent / "src", tfrecord, PackOptions(format="tfrecord", block_samples=3, shard_bytes=12 * 1024),
         workers=1, progress=False)
    return {WDS: wds, TFRECORD: tfrecord}


def test_the_section_holds_a_recipe_for_each_reader():
    assert set(RECIPES) == {"webdataset", "wids", "Ray Data", "tf.data (a --format tfrecord pack)",
                            "The tfrecord package (a --format tfrecord pack)"}
    assert {"DALI", "Megatron-Energon", "Hugging Face datasets"} <= set(re.findall(r"^### (.+)$", SECTION, re.M))


RUN_RECIPE = """import json, sys
namespace = {}
try:
    exec(compile(sys.stdin.read(), sys.argv[1], "exec"), namespace)
except ModuleNotFoundError as missing:
    print(json.dumps({"missing": missing.name}))
else:
    print(json.dumps({"keys": namespace["keys"]}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("title", sorted(RECIPES))
def test_a_recipe_reads_every_samples_key(title, packs, tmp_path):
    code = SETUP + RECIPES[title]
    placeholder = TFRECORD if TFRECORD in code else WDS
    code = code.replace(TFRECORD, str(packs[TFRECORD])).replace(WDS, str(packs[WDS]))
    env = {**os.environ, "WIDS_CACHE": str(tmp_path / "wids-cache")}  # wids caches in /tmp/_wids_cache otherwise
    done = subprocess.run([sys.executable, "-c", RUN_RECIPE, f"docs/format.md: {title}"], input=code, cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "missing" in result:
        pytest.skip(f"pip install {result['missing']}")
    assert sorted(result["keys"]) == sorted(open_manifest(packs[placeholder]).keys())
