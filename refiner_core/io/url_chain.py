"""fsspec URL chains (``simplecache::s3://bucket/key``): which link finally serves the bytes.

fsspec reads ``outer::inner`` by opening ``inner`` and letting ``outer`` wrap it, so
``simplecache::file:///proc/self/environ`` reads ``/proc/self/environ`` whatever the
outer links are. A source policy must judge that innermost link, and must know
every outer link, since a wrapper such as ``zip::`` or ``dir::`` changes what is read.
The links are split exactly where fsspec splits them: on every ``::``.

Example:
    >>> chain = split_chain("simplecache::file:///data/a.png")
    >>> chain.wrappers, chain.target
    (('simplecache',), 'file:///data/a.png')
    >>> split_chain("s3://bucket/a.png").wrappers
    ()
"""

from __future__ import annotations

from dataclasses import dataclass

SEPARATOR = "::"

CACHE_WRAPPERS = frozenset({"simplecache", "filecache", "blockcache", "cached"})
"""fsspec's caching layers: they hand on the bytes of the link inside them unchanged."""

WRAPPING_PROTOCOLS = CACHE_WRAPPERS | frozenset(
    {"dir", "reference", "zip", "tar", "libarchive", "jlcache", "chained"}
)
"""fsspec protocols that read through another filesystem instead of serving bytes."""


@dataclass(frozen=True)
class Chain:
    """A URL split into its outer links' protocols (outermost first) and its innermost link."""

    url: str
    wrappers: tuple[str, ...]
    target: str

    @property
    def chained(self) -> bool:
        return bool(self.wrappers)


def protocol_of(link: str) -> str:
    """The protocol of one link: ``s3`` for ``s3://b/k``, ``file`` for a plain path."""
    if "://" in link:
        return link.split("://", 1)[0]
    return link if link.isalpha() else "file"


def split_chain(url: str) -> Chain:
    """The links of ``url`` as fsspec would open them (a URL without ``::`` is one link)."""
    if SEPARATOR not in url:
        return Chain(url, (), url)
    links = url.split(SEPARATOR)
    return Chain(url, tuple(protocol_of(link) for link in links[:-1]), links[-1])
