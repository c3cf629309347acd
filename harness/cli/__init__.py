"""The command line, ``python -m harness``: one module per command (run, render, validate,
draft), the signal plumbing (signals.py) and the console (console.py). See main.py."""

from harness.cli.main import main

__all__ = ["main"]
