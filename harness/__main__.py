"""``python -m harness``: the command line (harness/cli)."""

import sys

from harness.cli import main
from harness.cli.signals import as_program

if __name__ == "__main__":
    sys.exit(as_program(main))
