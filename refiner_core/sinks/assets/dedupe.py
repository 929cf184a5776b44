"""Storing repeated media once per attempt, and the digests the packer takes of an asset's bytes.

``BlobAssetConfig(dedupe="source")`` knows a repeat by where it comes from: the same
URL and range, with the same size and modification time (local files) or ETag
(object stores), looked up with one ``stat``/``HEAD`` and never read again.
``dedupe="content"`` knows it by its bytes: the same size and digest. Where the
stored copy can be read back cheaply (a local output) the digest is CRC32C, and a
match is confirmed byte by byte against the stored copy; elsewhere it is SHA-256,
whose matches need no confirmation.

The index lives in one attempt's writer, so a reference only ever points into its
own attempt's blocks (removing a rejected attempt cannot break a kept row), or, with
``dedupe_against``, into the blocks of earlier, finished outputs, found through their
digest indexes (:mod:`.digest_index`).

Example:
    >>> counters = {"assets_deduplicated": 0, "bytes_deduplicated": 0}
    >>> index = DedupeIndex("content", counters)
    >>> key = content_key(b"frame")
    >>> index.reuse(key, 5) is None
    True
    >>> index.remember(key, {"path": "/out/block-00000.bin", "offset": 0, "size": 5}, 5)
    >>> index.reuse(key, 5)["offset"], counters["assets_deduplicated"]
    (0, 1)
    >>> index.reuse(key, 5, confirm=lambda stored: False) is None  # bytes differ after all
    True
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...io.blob import validate_reference
from ...io.checksum import Hasher, carried_checksum
from ...io.datafile import is_local
from .fetch import Filesystems, MissingAsset, Source, check_path

if TYPE_CHECKING:
    from .digest_index import EarlierDigests

STRONG_DIGEST = "sha256"  # matches need no confirmation
FAST_DIGEST = "crc32c"  # matches are confirmed against the stored bytes


class DedupeIndex:
    """Where each distinct asset of one attempt was stored, by its dedupe key."""

    def __init__(
        self, mode: str | None, counters: dict[str, int], earlier: EarlierDigests | None = None
    ) -> None:
        self.mode = mode
        self.counters = counters
        self.earlier = earlier  # dedupe_against: earlier outputs' stored assets
        self._stored: dict[Hashable, list[dict[str, Any]]] = {}
        self._sizes: set[int] = set()

    def find(self, key: Hashable | None) -> dict[str, Any] | None:
        found = None if key is None else self._stored.get(key)
        return found[0] if found else None

    def reuse(
        self,
        key: Hashable | None,
        size: int,
        confirm: Callable[[dict[str, Any]], bool] | None = None,
    ) -> dict[str, Any] | None:
        """A copy of the stored reference of ``key`` (counted as deduplicated), else ``None``.

        ``confirm(stored reference)`` says whether the stored bytes really equal the new
        ones; it is asked for keys whose digest is not collision-resistant. Assets of
        this attempt are looked up first, then those of the earlier outputs."""
        if key is None:
            return None
        found = self._match(self._stored.get(key, ()), confirm)
        if found is None and self.earlier is not None:
            found = self._match(self.earlier.find(key), confirm)
            if found is not None:  # later repeats find it here, and the index records it
                self._stored.setdefault(key, []).append(dict(found))
        if found is None:
            return None
        self.counters["assets_deduplicated"] += 1
        self.counters["bytes_deduplicated"] += size
        return dict(found)

    @staticmethod
    def _match(
        candidates: Iterable[dict[str, Any]], confirm: Callable[[dict[str, Any]], bool] | None
    ) -> dict[str, Any] | None:
        for stored in candidates:
            if confirm is None or confirm(stored):
                return stored
        return None

    def remember(self, key: Hashable | None, reference: dict[str, Any], size: int) -> None:
        """Record where the asset of ``key`` was stored (one more entry when a fast
        digest collided with different bytes)."""
        if key is not None and self.mode is not None:
            self._stored.setdefault(key, []).append(dict(reference))
            self._sizes.add(size)

    def has_size(self, size: int) -> bool:
        """Whether an asset of ``size`` bytes was stored (else a new one cannot be a repeat)."""
        return size in self._sizes or (self.earlier is not None and self.earlier.has_size(size))

    def stored(self) -> Iterator[tuple[Hashable, dict[str, Any]]]:
        """``(key, reference)`` of every distinct asset this attempt stored or reused."""
        for key, references in self._stored.items():
            for reference in references:
                yield key, reference


def content_key(data: bytes | memoryview) -> tuple[str, int, bytes]:
    return content_key_of(len(data), hashlib.sha256(data).digest())


def content_digest(readable_copies: bool) -> str:
    """The digest ``dedupe="content"`` keys on: fast when a match can be confirmed by
    reading the stored copy back, collision-resistant otherwise."""
    return FAST_DIGEST if readable_copies else STRONG_DIGEST


def content_key_of(size: int, digest: bytes) -> tuple[str, int, bytes]:
    return ("content", size, digest)


def source_key(value: Any, form: str, filesystems: Filesystems) -> tuple | None:
    """``(url, offset, length, stored size, version)`` of the source a path or blob
    reference reads; ``None`` for inline bytes (they have no source).

    Raises :class:`MissingAsset` when the source does not exist."""
    if form == "bytes":
        return None
    if form == "path":
        url, offset, length = check_path(value), 0, None
    else:
        url, offset, length = validate_reference(value)
    fs, path = filesystems.resolve(url)
    try:
        if is_local(fs):
            stat = os.stat(path)
            return (url, offset, length, stat.st_size, stat.st_mtime_ns)
        info = fs.info(path)
    except FileNotFoundError as exc:
        raise MissingAsset(url) from exc
    version = info.get("ETag") or info.get("mtime") or info.get("LastModified")
    return (url, offset, length, int(info["size"]), str(version) if version else None)


def source_key_size(key: tuple) -> int:
    """The number of bytes the source of a :func:`source_key` gives."""
    length, stored = key[2], key[3]
    return stored if length is None else length


@dataclass
class Fetched:
    """An asset ready to pack: its bytes (``source``; ``None`` when only its source key
    was looked up), its dedupe key and, for bytes in hand, its checksum."""

    source: Source | None
    key: Hashable | None = None
    checksum: str | None = None

    @property
    def size(self) -> int:
        assert self.source is not None
        return self.source.size


@dataclass
class DigestPlan:
    """Which digests one writer takes of every asset it stores."""

    content: str | None  # dedupe="content": the algorithm whose digest is the key
    checksum: str | None  # the reference's checksum algorithm

    @property
    def needs_nothing(self) -> bool:
        """Whether no digest is taken, so the bytes never need to pass through Python."""
        return self.content is None and self.checksum is None

    def of_bytes(self, source: Source, value: Any, key: Hashable | None) -> Fetched:
        """Digests of an asset whose bytes are in hand (computed in the fetching thread)."""
        assert source.data is not None
        carried = carried_checksum(value, self.checksum) if self.checksum else None
        digest = None
        if self.content:
            content = Hasher(self.content)
            content.update(source.data)
            digest = content.digest()
            key = content_key_of(source.size, digest)
        checksum = carried
        if self.checksum and carried is None:
            if digest is not None and self.checksum == self.content:
                checksum = f"{self.content}:{digest.hex()}"
            else:
                hasher = Hasher(self.checksum)
                hasher.update(source.data)
                checksum = hasher.checksum()
        return Fetched(source, key, checksum)

    def streaming(self, value: Any) -> StreamDigests:
        carried = carried_checksum(value, self.checksum) if self.checksum else None
        return StreamDigests(
            content=Hasher(self.content) if self.content else None,
            checksum=Hasher(self.checksum) if self.checksum and carried is None else None,
            carried=carried,
        )


@dataclass
class StreamDigests:
    """Digests taken while a large asset streams into its block (no second read)."""

    content: Hasher | None = None
    checksum: Hasher | None = None
    carried: str | None = None
    _hashers: list[Hasher] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._hashers = [h for h in (self.content, self.checksum) if h is not None]
        if (
            self.content is not None
            and self.checksum is not None
            and self.checksum.algorithm == self.content.algorithm
        ):
            self._hashers = [self.content]
            self.checksum = self.content

    def tee(self, source: Source) -> Source | HashedSource:
        """``source``, its chunks fed to the digests on the way (itself when none is taken)."""
        return HashedSource(source, self._hashers) if self._hashers else source

    def key(self, size: int) -> Hashable | None:
        return None if self.content is None else content_key_of(size, self.content.digest())

    def reference_checksum(self) -> str | None:
        return self.carried or (self.checksum.checksum() if self.checksum else None)


@dataclass
class HashedSource:
    """A :class:`Source` whose chunks also feed ``hashers`` as they go by."""

    source: Source
    hashers: list[Hasher]

    @property
    def size(self) -> int:
        return self.source.size

    @property
    def data(self) -> bytes | None:
        return self.source.data

    @property
    def url(self) -> str | None:
        return self.source.url

    @property
    def fd(self) -> None:
        """Never copied by the kernel: the hashers must see every byte."""
        return None

    def chunks(self) -> Iterator[bytes]:
        for chunk in self.source.chunks():
            for hasher in self.hashers:
                hasher.update(chunk)
            yield chunk
