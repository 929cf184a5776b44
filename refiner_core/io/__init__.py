"""Storage access: files and folders over fsspec, blob reads, s3 multipart writes."""

from .blob import read_blob, validate_reference
from .blob_batch import iter_blobs, read_blobs
from .checksum import ChecksumMismatchError, checksum_of, parse_checksum
from .datafile import (
    DataFile,
    DataFolder,
    check_relative,
    full_url,
    is_local,
    is_s3,
    is_s3fs,
    resolve,
)
from .dataset_history import RollbackRefused, VersionInfo, dataset_versions, rollback
from .inheritance import (
    INHERITS_PATH,
    Inheritance,
    inherited_tables,
    read_inheritance,
    write_inheritance,
)
from .parallel_reads import (
    DEFAULT_READ_THREADS,
    file_sizes,
    map_in_order,
    pooled_options,
    read_table_rows,
)
from .read_sources import read_sources, set_read_sources
from .version_history import (
    check_as_of,
    first_published,
    moved_pointer,
    pointer_history,
    version_at,
)
from .versions import CURRENT_POINTER, VERSION_PREFIX, VERSIONS_DIR, UnknownVersion, read_pointer

__all__ = [
    "CURRENT_POINTER",
    "DEFAULT_READ_THREADS",
    "ChecksumMismatchError",
    "INHERITS_PATH",
    "Inheritance",
    "inherited_tables",
    "read_inheritance",
    "write_inheritance",
    "RollbackRefused",
    "VersionInfo",
    "UnknownVersion",
    "VERSIONS_DIR",
    "VERSION_PREFIX",
    "DataFile",
    "DataFolder",
    "check_as_of",
    "dataset_versions",
    "check_relative",
    "checksum_of",
    "first_published",
    "file_sizes",
    "full_url",
    "is_local",
    "is_s3",
    "is_s3fs",
    "iter_blobs",
    "moved_pointer",
    "map_in_order",
    "parse_checksum",
    "pooled_options",
    "pointer_history",
    "read_blob",
    "read_blobs",
    "read_pointer",
    "read_sources",
    "read_table_rows",
    "resolve",
    "rollback",
    "set_read_sources",
    "validate_reference",
    "version_at",
]
