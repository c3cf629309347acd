"""The observation schema, generated from the field declarations (:mod:`harness.contract.fields`).

``python -m harness.contract.observation_schema`` writes ``harness/contract/observation.schema.json``;
``--check`` exits 1 (naming the file) when the shipped file differs from what the declarations give.
Edit the declarations, never the JSON file.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from harness.contract.field_tree import schema_of
from harness.contract.fields import DEFS, DOCUMENT
from harness.contract.observation import SCHEMA_PATH

__all__ = ["build_schema", "schema_text", "main"]


def build_schema() -> dict[str, Any]:
    """The observation document's JSON schema (draft 2020-12), with :data:`~harness.contract.fields.DEFS`."""
    defs = dict(DEFS)
    schema = schema_of(DOCUMENT, defs)
    schema["$defs"] = defs
    return schema


def schema_text() -> str:
    """The schema file's text: two-space indented JSON and a final newline."""
    return json.dumps(build_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.contract.observation_schema", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the shipped schema is out of date")
    args = parser.parse_args(argv)
    text = schema_text()
    if args.check:
        if SCHEMA_PATH.read_text(encoding="utf-8") != text:
            print(f"{SCHEMA_PATH}: out of date; run python -m harness.contract.observation_schema", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
