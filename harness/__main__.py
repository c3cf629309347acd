"""``python -m harness``: the command line (harness/cli)."""

import sys

if __name__ == "__main__":
    try:  # a Ctrl-C before the command line's own handling is in place
        from harness.cli import main
        from harness.cli.signals import as_program
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    sys.exit(as_program(main))
