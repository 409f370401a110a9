"""storage.crc gives the crc32c package's function without running the package's `__init__`."""

from __future__ import annotations

import subprocess
import sys

import crc32c as package

from storage.crc import crc32c


def test_known_value_and_the_package_agree() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    data = bytes(range(256)) * 5
    assert crc32c(data, crc32c(b"head")) == package.crc32c(data, package.crc32c(b"head"))


def test_the_broker_start_does_not_read_package_metadata() -> None:
    code = ("import sys; import storage.record_batch; "
            "print('importlib.metadata' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"
