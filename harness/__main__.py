"""``python -m harness``: the command line (harness/cli)."""

import sys

if __name__ == "__main__":
    try:  # a Ctrl-C before the command line's own handling is in place
        from harness.cli.signals import as_program, install

        install()  # first: a SIGTERM from here on ends in "terminated" and 143, within the exit bound
        from harness.cli import main
    except KeyboardInterrupt as exc:
        if type(exc).__name__ == "Terminated":
            sys.stderr.write("terminated\n")
            sys.exit(143)
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    sys.exit(as_program(main))
