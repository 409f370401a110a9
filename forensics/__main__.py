import sys

if __name__ == "__main__":  # not when a timeline renderer imports it as its main module
    from forensics.cli import main

    sys.exit(main())
