"""Pack-time preprocessing (issue 18 section 3): transforms a worker applies to each `PackSample`.

Building blocks for the pack pipeline, which wires them in (CLI flags, PackOptions, the manifest's
record of `options()`); each is frozen and picklable, built from JSON-able options:

* chain steps, chosen by name from `TRANSFORMS` and composed by `build_chain`:
  ``resize`` (`ImageResize`), ``tokenize`` (`Tokenize`), ``map`` (`UserMap`); a chain is called
  per sample in a worker, ``chain(sample) -> Kept(sample, sizes) | Drop(key, reason)``, and
  BadInput is raised for a sample that cannot be transformed (see base.py);
* `SizeFilter` (filters.py): after the chain, on the primary field's final size, per sample
  (``check(key, size)``) or over a sizes column in the driver (``mask(sizes)``);
* `ExactDedup` (dedup.py): ``digest(sample)`` in the workers, ``first_occurrences(hashes_of(digests))``
  in the driver.
"""
from corgi_io.arguments import choose
from corgi_io.errors import PackError
from corgi_io.packing.transforms.chain import Drop, Kept, TransformChain, checking_options, options_of
from corgi_io.packing.transforms.dedup import ExactDedup, first_occurrences, first_occurrences_chunked, hashes_of
from corgi_io.packing.transforms.filters import SizeFilter
from corgi_io.packing.transforms.image import ImageResize
from corgi_io.packing.transforms.tokenize import Tokenize
from corgi_io.packing.transforms.user_map import UserMap

TRANSFORMS = {step.name: step for step in (ImageResize, Tokenize, UserMap)}


def build_transform(spec: dict):
    """The chain step `spec` describes, {"name": a TRANSFORMS name, **its options} (as `options_of` gives it)."""
    if not isinstance(spec, dict):
        raise PackError(f"a transform is a dict {{'name': ..., **options}}, got {spec!r}")
    options = dict(spec)
    with checking_options("transform"):
        step = choose("transform", options.pop("name", None), TRANSFORMS)
    try:
        return step(**options)
    except TypeError as exc:  # an option the transform does not take, or one it needs and lacks
        raise PackError(f"transform {step.name!r}: {exc}") from None


def build_chain(specs) -> TransformChain:
    """The chain of the steps `specs` describe, in order: `build_chain(chain.options())` rebuilds `chain`."""
    return TransformChain(tuple(build_transform(spec) for spec in specs))


__all__ = ["TRANSFORMS", "Drop", "ExactDedup", "ImageResize", "Kept", "SizeFilter", "Tokenize", "TransformChain",
           "UserMap", "build_chain", "build_transform", "first_occurrences", "first_occurrences_chunked", "hashes_of", "options_of"]
