"""Storage access: files and folders over fsspec, blob reads, s3 multipart writes."""

from .blob import read_blob, validate_reference
from .blob_batch import iter_blobs, read_blobs
from .checksum import ChecksumMismatchError, checksum_of, parse_checksum
from .datafile import DataFile, DataFolder, check_relative, full_url, is_local, is_s3, resolve
from .parallel_reads import DEFAULT_READ_THREADS, file_sizes, map_in_order, read_table_rows
from .read_sources import read_sources, set_read_sources
from .versions import CURRENT_POINTER, VERSION_PREFIX, VERSIONS_DIR, UnknownVersion, read_pointer

__all__ = [
    "CURRENT_POINTER",
    "DEFAULT_READ_THREADS",
    "ChecksumMismatchError",
    "UnknownVersion",
    "VERSIONS_DIR",
    "VERSION_PREFIX",
    "DataFile",
    "DataFolder",
    "check_relative",
    "checksum_of",
    "file_sizes",
    "full_url",
    "is_local",
    "is_s3",
    "iter_blobs",
    "map_in_order",
    "parse_checksum",
    "read_blob",
    "read_blobs",
    "read_pointer",
    "read_sources",
    "read_table_rows",
    "resolve",
    "set_read_sources",
    "validate_reference",
]
