"""A small JSON file replaced atomically and durably: the ACLs and the SCRAM credentials.

Written beside the target, fsynced, renamed over it, then the directory fsynced, so that a
crash leaves either the old file or the new one, never a torn one; readable by the owner only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def replace_json(path: Path, document: Any) -> None:
    data = json.dumps(document, indent=1).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = path.with_suffix(".tmp")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(aside, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
