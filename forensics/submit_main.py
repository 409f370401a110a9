"""The file `spark-submit` runs (it has no `-m`): the same job, unchanged, on a cluster.

    python -m forensics.package dist/forensics.zip
    spark-submit --master spark://HOST:7077 --py-files dist/forensics.zip \
        forensics/submit_main.py --data /shared/rebalanced --out /shared/forensics-out
"""

from forensics.cli import main

raise SystemExit(main())
