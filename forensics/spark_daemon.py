"""The Python daemon Spark starts for the job's Python workers (`spark.python.daemon.module`):
PySpark's own daemon, with `pyspark` imported from the installed package where that is the
code Spark's zip holds (`forensics.pyspark_path`). The workers it forks inherit the path and
the modules it imported."""

from forensics.pyspark_path import prefer_installed_pyspark

prefer_installed_pyspark()

from pyspark import daemon  # noqa: E402  (after the path is set)

if __name__ == "__main__":
    daemon.manager()
