"""What a pack-time transform is, what it returns, and the chain that composes them.

A transform is a small frozen, picklable object built from JSON-able options (so a pool or Dask
worker can receive it), called on each `PackSample` a worker reads:

    transform(sample) -> Kept(sample, sizes) | Drop(key, reason)

* `Kept` holds the new sample and the sizes the transform measured on the way, {field name: size}
  (the pixels of a resized image, the tokens of a tokenised text), so the pipeline records them
  instead of probing again;
* `Drop` is a sample left out on purpose (a user function's None): a skip record with its reason,
  never fatal, even under strict.  It is falsy, so `if not result:` reads as "dropped";
* `BadInput` (raised) is a sample that cannot be transformed: skipped with its reason, or fatal
  under strict, like any other bad input.

`options()` gives the JSON-able options that rebuild the transform; the manifest records a
chain's `options()` in the pack's identity, so another preprocessing is another pack.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

from corgi_io.errors import ArgumentError, PackError
from corgi_io.packing.sample import PackSample


@dataclass(frozen=True)
class Drop:
    """A sample a transform left out on purpose: `key` and the `reason` the skip record gives."""

    key: str
    reason: str

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True)
class Kept:
    """A transformed sample and {field name: size} for the fields whose size a transform measured."""

    sample: PackSample
    sizes: dict = field(default_factory=dict)


@contextmanager
def checking_options(name: str):
    """Turns an ArgumentError of the `arguments` checks into the PackError of a bad pack option, naming `name`."""
    try:
        yield
    except ArgumentError as exc:
        raise PackError(f"{name}: {exc}") from None


def options_of(transform) -> dict:
    """{"name": the registry name, **the options that rebuild it}: one entry of a chain's identity."""
    return {"name": transform.name, **transform.options()}


@dataclass(frozen=True)
class TransformChain:
    """Transforms applied in turn to each sample; the first Drop (or BadInput) ends the chain.

    A size measured by one step stays valid while later steps keep that field's bytes (the same
    object); a later step that replaces or removes the field forgets it, so a size never
    describes bytes it was not measured on.
    """

    steps: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "steps", tuple(self.steps))  # a list given: still hashable, still equal

    def __call__(self, sample: PackSample) -> Kept | Drop:
        """The sample after every step, with the sizes still valid; or the Drop of the step that left it out."""
        sizes = {}
        for step in self.steps:
            result = step(sample)
            if not result:
                return result
            sizes = {name: size for name, size in sizes.items()
                     if result.sample.fields.get(name) is sample.fields.get(name) is not None}
            sample, sizes = result.sample, {**sizes, **result.sizes}
        return Kept(sample, sizes)

    def options(self) -> list:
        """[options_of(step), ...] in order: JSON-able, for the manifest's identity; [] for no transform."""
        return [options_of(step) for step in self.steps]
