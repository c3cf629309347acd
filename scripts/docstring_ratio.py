"""How much of a package is docstring: docstring lines against code lines, and the functions whose
docstring outweighs their body (issue 43's rule: at most 20%, and no such function unless its
docstring states a formula or a source).

Code lines are the non-blank lines that are neither comments nor docstrings. A docstring states a
formula or a source where a line of it holds `` = `` or names a ``section``/``Source``.

Run: ``python scripts/docstring_ratio.py [harness model] [--max-ratio 0.2] [--list]``; exit 1 where
the ratio exceeds ``--max-ratio`` or, with ``--max-ratio``, a function's docstring outweighs its body.
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Counts:
    docstring: int = 0
    code: int = 0
    heavy: list[str] = field(default_factory=list)  # "path:line name (doc N > body M)"
    per_file: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.docstring / self.code if self.code else 0.0


def _docstring_node(node: ast.AST) -> ast.Expr | None:
    body = getattr(node, "body", None)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            return body[0]
    return None


def _states_formula_or_source(text: str) -> bool:
    return any(" = " in line or "section" in line.lower() or "source" in line.lower() for line in text.splitlines())


def count_file(path: Path, rel: str, counts: Counts) -> None:
    """Add ``path``'s docstring and code lines, and its docstring-heavy functions, to ``counts``."""
    text = path.read_text()
    tree = ast.parse(text, str(path))
    doc_lines: set[int] = set()
    for node in [tree, *ast.walk(tree)]:
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        doc = _docstring_node(node)
        if doc is None:
            continue
        lines = range(doc.lineno, doc.end_lineno + 1)
        doc_lines.update(lines)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = sum(n.end_lineno - n.lineno + 1 for n in node.body[1:])
            if len(lines) > body and not _states_formula_or_source(doc.value.value):
                counts.heavy.append(f"{rel}:{node.lineno} {node.name} (docstring {len(lines)} > body {body})")
    comment_or_blank: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT and not tok.line[: tok.start[1]].strip():
            comment_or_blank.add(tok.start[0])
    lines = text.splitlines()
    blank = {i for i, line in enumerate(lines, 1) if not line.strip()}
    code = len(lines) - len(blank | comment_or_blank | doc_lines)
    counts.docstring += len(doc_lines)
    counts.code += code
    counts.per_file[rel] = (len(doc_lines), code)


def count(folders: list[str]) -> Counts:
    counts = Counts()
    for folder in folders:
        top = ROOT / folder
        for path in [top] if top.is_file() else sorted(top.rglob("*.py")):
            count_file(path, str(path.relative_to(ROOT)), counts)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", default=["harness", "model"])
    parser.add_argument("--max-ratio", type=float, default=None)
    parser.add_argument("--list", action="store_true", help="per file, most docstring first, and the heavy functions")
    args = parser.parse_args()
    counts = count(args.folders)
    if args.list:
        for rel, (doc, code) in sorted(counts.per_file.items(), key=lambda kv: -kv[1][0]):
            print(f"{doc:5d} {code:5d}  {rel}")
        for line in counts.heavy:
            print("heavy:", line)
    print(
        f"{' '.join(args.folders)}: {counts.docstring} docstring lines, {counts.code} code lines: "
        f"{counts.ratio:.1%}; {len(counts.heavy)} functions whose docstring outweighs their body"
    )
    if args.max_ratio is not None and (counts.ratio > args.max_ratio or counts.heavy):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
