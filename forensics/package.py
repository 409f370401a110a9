"""Build the `--py-files` zip for spark-submit: `python -m forensics.package OUT.zip`;
`python -m forensics.package --java-options` prints the driver's JVM options for
`spark-submit --driver-java-options` (`forensics.session.driver_java_options`).

It holds the job (`forensics/`) and the pure-Python parts of the broker it reuses (the record
codec and the varints in `storage/`, the record types in
`coordinator/`), each module with its bytecode beside it. Executors still need the `crc32c`
package installed (the batch checksum); the driver needs pyarrow, pandas and matplotlib.

Python imports a module from a zip by compiling its source on every start, and never writes
the result back: without the bytecode, the driver and every executor's Python workers compiled
the job's modules again on each run. The bytecode is this interpreter's; an interpreter of
another version finds a different magic number, ignores it and compiles the source, as
before. It is not checked against the source (the two are written together).
"""

from __future__ import annotations

import py_compile
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("forensics", "storage", "coordinator")


def build(target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    with (zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf,
          tempfile.TemporaryDirectory() as scratch):
        compiled = Path(scratch) / "module.pyc"
        for package in PACKAGES:
            for path in sorted((ROOT / package).rglob("*.py")):
                name = path.relative_to(ROOT).as_posix()
                zf.write(path, name)
                # Where zipimport looks for a module's bytecode: `name.pyc` beside `name.py`.
                py_compile.compile(str(path), cfile=str(compiled), dfile=name, doraise=True,
                                   invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
                zf.write(compiled, name + "c")
    return target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--java-options"]:
        # For `spark-submit --driver-java-options`; imported here: building the zip needs
        # no pyspark.
        from forensics.session import driver_java_options

        print(driver_java_options())
        return 0
    if len(args) != 1 or not args[0].endswith(".zip"):
        sys.stderr.write("usage: python -m forensics.package OUT.zip | --java-options\n")
        return 2
    print(build(Path(args[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
