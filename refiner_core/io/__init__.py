"""Storage access: files and folders over fsspec, blob reads, s3 multipart writes."""

from .blob import read_blob, validate_reference
from .datafile import DataFile, DataFolder, check_relative, full_url, is_local, is_s3, resolve

__all__ = [
    "DataFile",
    "DataFolder",
    "check_relative",
    "full_url",
    "is_local",
    "is_s3",
    "read_blob",
    "resolve",
    "validate_reference",
]
