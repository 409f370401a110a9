"""Build the `--py-files` zip for spark-submit: `python -m forensics.package OUT.zip`.

It holds the job (`forensics/`) and the pure-Python parts of the broker it reuses (the record
codec and the varints in `storage/`, the record types in
`coordinator/`). Executors still need the `crc32c`
package installed (the batch checksum); the driver needs pyarrow, pandas and matplotlib.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("forensics", "storage", "coordinator")


def build(target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in PACKAGES:
            for path in sorted((ROOT / package).rglob("*.py")):
                zf.write(path, path.relative_to(ROOT).as_posix())
    return target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].endswith(".zip"):
        sys.stderr.write("usage: python -m forensics.package OUT.zip\n")
        return 2
    print(build(Path(args[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
