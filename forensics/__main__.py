import sys

from forensics.cli import main

if __name__ == "__main__":  # not when a worker process imports it
    sys.exit(main())
