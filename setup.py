"""The optional C speedup of legacy down-conversion; everything else is in pyproject.toml.

`optional=True`: where no C compiler (or zlib header) is at hand the build goes on without it,
and `storage.legacy_convert` uses its Python loop.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("storage._legacy_speedups", ["storage/_legacy_speedups.c"],
                             libraries=["z"], optional=True)])
