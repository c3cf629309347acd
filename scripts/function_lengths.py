"""The longest functions of a package, in lines (``def`` line to the last line, docstring included).

Run: ``python scripts/function_lengths.py [ROOT] [--package harness/run] [--top 10]``; ROOT
(default: this checkout) may be another checkout, to compare before and after a change.
"""

from __future__ import annotations

import argparse
import ast
import os
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def function_lengths(folder: Path) -> list[tuple[int, str]]:
    """(lines, "path:qualified name") for every function and method under ``folder``, longest first."""
    out = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        stack = [(node, "") for node in tree.body]
        while stack:
            node, prefix = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + node.name
                if not isinstance(node, ast.ClassDef):
                    out.append((node.end_lineno - node.lineno + 1, f"{path.relative_to(folder.parent)}:{name}"))
                stack.extend((child, name + ".") for child in node.body)
    return sorted(out, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=ROOT)
    parser.add_argument("--package", default="harness/run")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    rows = function_lengths(Path(args.root) / args.package)
    for lines, name in rows[: args.top]:
        print(f"{lines:5d}  {name}")
    print(f"{len(rows)} functions; {sum(1 for n, _ in rows if n > 60)} over 60 lines")


if __name__ == "__main__":
    main()
