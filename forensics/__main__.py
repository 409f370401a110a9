import sys

from forensics.cli import main

sys.exit(main())
