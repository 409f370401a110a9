"""Where the inputs are: a local path, or a URL of any filesystem pyarrow has (`file://`,
`s3://`, `gs://`, `hdfs://`, `abfs://`).

Both readers (the journal's files and the group log's segments) list and read through here,
on the driver and on the executors alike, so the data can stay where a cluster keeps it. A
location is a string: a local path, or a URL whose query (pyarrow's filesystem options, such
as `s3://bucket/dir?endpoint_override=host:9000&scheme=http`) every location under it keeps,
so an executor rebuilds the same filesystem from the location alone. Credentials come the
way the filesystem's own library takes them (for S3: `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT_URL`, a profile, an instance role).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

Location = str


def is_url(location: str | Path) -> bool:
    return "://" in str(location)


def normalize(location: str | Path) -> Location:
    """A local path made absolute (executors may start elsewhere); a URL as it is."""
    text = str(location)
    return text if is_url(text) else str(Path(text).resolve())


@lru_cache(maxsize=16)
def _from_url(base: str, query: str) -> Any:
    from pyarrow import fs

    filesystem, _ = fs.FileSystem.from_uri(f"{base}?{query}" if query else base)
    return filesystem


def resolve(location: str | Path) -> tuple[Any, str]:
    """The filesystem and the path inside it."""
    text = str(location)
    if not is_url(text):
        from pyarrow import fs

        return fs.LocalFileSystem(), text
    from pyarrow import fs

    base, _, query = text.partition("?")
    scheme, _, rest = base.partition("://")
    if scheme == "file":
        return fs.LocalFileSystem(), "/" + rest.lstrip("/")
    _, path = fs.FileSystem.from_uri(base)
    # One filesystem per bucket (or host) and options: creating an S3 client is not free.
    root = f"{scheme}://{rest.split('/', 1)[0]}"
    return _from_url(root, query), path


def child(location: str | Path, name: str) -> Location:
    text = str(location)
    base, sep, query = text.partition("?") if is_url(text) else (text, "", "")
    return f"{base.rstrip('/')}/{name}{sep}{query}"


def name_of(location: str | Path) -> str:
    return str(location).partition("?")[0].rstrip("/").rsplit("/", 1)[-1]


def list_dir(location: str | Path) -> list[tuple[Location, bool]]:
    """`(location, is a directory)` of each entry directly in `location`, by name; nothing
    when it does not exist. A filesystem error (a missing bucket, a refused credential)
    raises OSError."""
    from pyarrow import fs

    filesystem, path = resolve(location)
    infos = filesystem.get_file_info(fs.FileSelector(path, allow_not_found=True))
    found = [(child(location, os.path.basename(info.path.rstrip("/"))),
              info.type == fs.FileType.Directory)
             for info in infos if info.type in (fs.FileType.File, fs.FileType.Directory)]
    return sorted(found, key=lambda item: name_of(item[0]))


def is_dir(location: str | Path) -> bool:
    from pyarrow import fs

    filesystem, path = resolve(location)
    return bool(filesystem.get_file_info(path).type == fs.FileType.Directory)


def size(location: str | Path) -> int | None:
    """The file's size, or None when there is no such file."""
    from pyarrow import fs

    filesystem, path = resolve(location)
    info = filesystem.get_file_info(path)
    return int(info.size) if info.type == fs.FileType.File else None


def read_bytes(location: str | Path) -> bytes:
    if not is_url(location):
        return Path(location).read_bytes()  # no pyarrow needed for the local case
    filesystem, path = resolve(location)
    with filesystem.open_input_stream(path) as stream:
        return bytes(stream.read())


def check(location: str | Path) -> str | None:
    """Why `location` cannot be read as a directory (one line), or None when it can: a
    missing bucket or a refused credential shows here, before any Spark job."""
    try:
        list_dir(location)
        if not is_dir(location):
            return _missing_bucket(location) or "no such directory"
    except (OSError, ValueError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


_BUCKET_SCHEMES = ("s3", "gs", "gcs", "abfs", "abfss", "az")


def _missing_bucket(location: str | Path) -> str | None:
    """'no such bucket NAME' when the location is in an object store bucket that does not
    exist (its paths begin with the bucket's name)."""
    from pyarrow import fs

    text = str(location)
    if not is_url(text) or text.partition("://")[0] not in _BUCKET_SCHEMES:
        return None
    filesystem, path = resolve(text)
    bucket = path.split("/", 1)[0]
    if filesystem.get_file_info(bucket).type == fs.FileType.NotFound:
        return f"no such bucket {bucket}"
    return None
