"""CRC-32C (Castagnoli), the checksum of record batches: the `crc32c` package's C function.

The package's `__init__` reads its own version through `importlib.metadata`, which costs about
20 ms (most of the import and a tenth of the broker's start-up) to serve nobody here. The
function is taken from the package's extension module, loaded on its own under its own name, so
a later `import crc32c` finds and reuses it. Without the package this fails as its import would.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

__all__ = ["crc32c"]

_EXTENSION = "crc32c._crc32c"


def _extension() -> ModuleType:
    loaded = sys.modules.get(_EXTENSION)
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec("crc32c")  # finds the package without running it
    for directory in (package.submodule_search_locations or []) if package else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(directory) / f"_crc32c{suffix}"
            if path.is_file():
                spec = importlib.util.spec_from_file_location(_EXTENSION, path)
                if spec is None or spec.loader is None:
                    break
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                sys.modules[_EXTENSION] = module
                return module
    import crc32c as package_module  # not laid out as expected: the package's own import

    return package_module


crc32c: Callable[..., int] = _extension().crc32c
