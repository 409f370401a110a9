"""The file `spark-submit` runs (it has no `-m`): the same job, unchanged, on a cluster.

    python -m forensics.package dist/forensics.zip
    spark-submit --master spark://HOST:7077 --py-files dist/forensics.zip \
        forensics/submit_main.py --data /shared/rebalanced --out /shared/forensics-out
"""

from forensics.pyspark_path import prefer_installed_pyspark

# Before pyspark is first imported: spark-submit put its zip of pyspark first on the path.
prefer_installed_pyspark()

# Guarded: the timeline renderers are spawned interpreters that import this file as their
# main module, and must neither start the job (and a second SparkContext) again nor import it.
if __name__ == "__main__":
    from forensics.cli import main

    raise SystemExit(main())
