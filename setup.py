"""The one compiled piece: the produce path's record walk and the Spark source's column decoder
(partitions/_recordscan.c). Everything else is in pyproject.toml. optional=True: without a C compiler the
install still succeeds and partitions/validation.py and spark/columns.py walk records in Python (slower, same
rules); tests/partitions/test_validation.py says when it was not built."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("partitions._recordscan", ["partitions/_recordscan.c"], optional=True)])
