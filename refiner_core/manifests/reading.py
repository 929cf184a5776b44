"""Reading the attempt manifests of an output: one listing, each file once, in parallel.

Finalization and the write steps of a fan-out read many small manifests from an
object store, where each read is a round trip. :func:`list_manifests` lists the
manifest folder once; :func:`read_manifests` reads the manifests it names (all of
them, or only those of some shards) on a bounded thread pool, so an output of N
shards costs one listing (a page per thousand names) and N concurrent reads.

A caller that already holds some of the manifests (a fan-out's finalize step has what
its write steps returned) passes them as ``known``: a known manifest whose listed file
has exactly the size of its stored form is taken as read, so the store is asked only
for the rest. The listing still decides which manifests exist.

Example:
    >>> import tempfile
    >>> from refiner_core.io import DataFolder
    >>> from refiner_core.manifests import AttemptManifest, write_manifest
    >>> folder = DataFolder(tempfile.mkdtemp())
    >>> for shard in ("00000", "00001"):
    ...     write_manifest(folder, AttemptManifest(run_id="r1", shard_id=shard,
    ...         attempt_id="0123456789ab", started_at=1.0, completed_at=2.0))
    >>> [m.shard_id for m in read_manifests(folder, shard_ids=["00001"])]
    ['00001']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..io.datafile import completed_name
from ._attempts import MANIFEST_DIR, parse_attempt_key
from .values import AttemptManifest, manifest_bytes, read_manifest

MANIFEST_READERS = 32
"""At most this many manifests are read at once."""


@dataclass(frozen=True)
class ManifestListing:
    """The names in an output's manifest folder, from one listing.

    ``manifests`` are the completed manifests' names; ``temporaries`` the names of
    manifests an attempt died while writing.
    """

    manifests: tuple[str, ...]
    temporaries: tuple[str, ...]
    sizes: Mapping[str, int] = field(default_factory=dict)
    """Each completed manifest's size in bytes, as listed."""

    def of_shards(self, shard_ids: Iterable[str]) -> tuple[str, ...]:
        """The names of the manifests of ``shard_ids``."""
        wanted = set(shard_ids)
        return tuple(n for n in self.manifests if n.split("__", 1)[0] in wanted)


def list_manifests(folder: Any) -> ManifestListing:
    """One listing of ``folder``'s manifest folder."""
    sizes = folder.listdir_sizes(MANIFEST_DIR)
    names = sorted(sizes)
    manifests = tuple(n for n in names if n.endswith(".json") and not n.startswith("."))
    temporaries = tuple(
        n
        for n in names
        if (completed := completed_name(n))
        and parse_attempt_key(completed.removesuffix(".json")) is not None
    )
    return ManifestListing(manifests, temporaries, {n: sizes[n] for n in manifests})


def read_manifests(
    folder: Any,
    *,
    shard_ids: Iterable[str] | None = None,
    listing: ManifestListing | None = None,
    known: Iterable[AttemptManifest] = (),
) -> list[AttemptManifest]:
    """The attempt manifests persisted under ``folder`` (of ``shard_ids`` only, when
    given), in the listing's order. ``listing`` saves the listing when the caller has
    one; ``known`` are manifests the caller holds, each used in place of reading the
    listed file of its name when that file's size is its stored form's. The others are
    each read once, concurrently. An unreadable manifest raises, naming it."""
    listing = listing if listing is not None else list_manifests(folder)
    names = listing.manifests if shard_ids is None else listing.of_shards(shard_ids)
    found = _matching(known, listing)
    unread = [n for n in names if n not in found]
    if len(unread) <= 1:
        found.update((n, read_manifest(folder, f"{MANIFEST_DIR}/{n}")) for n in unread)
    else:
        with ThreadPoolExecutor(max_workers=min(MANIFEST_READERS, len(unread))) as pool:
            read = pool.map(lambda n: read_manifest(folder, f"{MANIFEST_DIR}/{n}"), unread)
            found.update(zip(unread, read, strict=True))
    return [found[n] for n in names]


def _matching(
    known: Iterable[AttemptManifest], listing: ManifestListing
) -> dict[str, AttemptManifest]:
    """The ``known`` manifests whose listed file has the size of their stored form."""
    matching = {}
    for manifest in known:
        name = manifest.path.rsplit("/", 1)[-1]
        listed = listing.sizes.get(name)
        if listed is not None and listed == len(manifest_bytes(manifest)):
            matching[name] = manifest
    return matching


@dataclass(frozen=True)
class PersistedManifests:
    """An output's manifest folder as read once: its listing and every manifest in it.

    Counting, reducing and summarizing share one of these instead of each reading the
    store again.
    """

    listing: ManifestListing
    manifests: tuple[AttemptManifest, ...]


def read_persisted(folder: Any, known: Iterable[AttemptManifest] = ()) -> PersistedManifests:
    """One listing of ``folder``'s manifests and one read of each that is not ``known``
    (see :func:`read_manifests`)."""
    listing = list_manifests(folder)
    read = read_manifests(folder, listing=listing, known=known)
    return PersistedManifests(listing, tuple(read))
