"""The optional C speedups (legacy down-conversion and the group log's replay fold, the
group log's fsync thread, the TLS layer's record path, the forensics group-log decoder);
everything else is in pyproject.toml.

`optional=True`: where no C compiler (or zlib header) is at hand the build goes on without
them, and `storage.legacy_convert`, `storage.record_batch` and `forensics.grouplog` use their
Python loops, the group log a Python fsync thread, `protocol.tls` its Python record path.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("storage._legacy_speedups", ["storage/_legacy_speedups.c"],
                             libraries=["z"], optional=True),
                   Extension("storage._fsync_worker", ["storage/_fsync_worker.c"],
                             optional=True),
                   Extension("protocol._tls_records", ["protocol/_tls_records.c"],
                             optional=True),
                   Extension("forensics._grouplog_speedups", ["forensics/_grouplog_speedups.c"],
                             optional=True)])
