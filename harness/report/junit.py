"""JUnit XML of checked entries, as ``pytest --junitxml`` writes it for the same spec items.

``run --junitxml PATH`` writes one ``<testcase>`` per entry, named as the pytest plugin names the
entry's item, so a CI history keeps one test per entry under pytest or the CLI: ``classname`` is
the node id without its last part, ``/`` and ``::`` read as ``.``; ``name`` the entry id. A fail,
error or xpass is a ``<failure>`` holding ``CheckResult.explain`` (its message shortened as pytest
9 does); a skip ``<skipped type="pytest.skip">``, a known deviation ``type="pytest.xfail"``; a
spec that does not load, one testcase ``load``. Errors are always 0, as under pytest."""

from __future__ import annotations

import platform
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from harness.judge.checks import CheckResult
from harness.language.entry import Entry

__all__ = [
    "Case",
    "table_slug",
    "spec_nodeid_path",
    "nodeid",
    "result_case",
    "load_error_case",
    "run_error_case",
    "junit_xml",
    "shorten_message",
]

MESSAGE_BUDGET = 500  # pytest 9's MESSAGE_ATTR_BUDGET for the message attribute
_ILLEGAL_XML = re.compile("[^\u0009\u000a\u000d\u0020-\u007e\u0080-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass(frozen=True)
class Case:
    """One testcase: pytest node id, outcome ('pass', 'failure', 'skip', 'xfail'), message, text,
    time in seconds."""

    nodeid: str
    outcome: str
    message: str = ""
    text: str = ""
    time_s: float = 0.0


def table_slug(title: str) -> str:
    """A spec table's title as the pytest collector names it ("shard per rank" -> "shard_per_rank")."""
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", title).strip("_")


def spec_nodeid_path(spec_path: str | Path, rootdir: str | Path | None = None) -> str:
    """The spec's path as a pytest node id holds it: relative to ``rootdir`` (default cwd) when inside it."""
    path = Path(spec_path)
    root = Path(rootdir) if rootdir is not None else Path.cwd()
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def nodeid(spec_path: str, entry: Entry) -> str:
    """``specs/x.yaml::<table slug>::<entry id>``."""
    return f"{spec_path}::{table_slug(entry.table)}::{entry.id}"


def result_case(spec_path: str, result: CheckResult) -> Case:
    """The testcase of one checked entry (module docstring for the outcomes)."""
    e = result.entry
    node = nodeid(spec_path, e)
    if result.status == "pass":
        return Case(node, "pass")
    if result.status == "skip":
        return Case(node, "skip", result.message, f"{e.spec}:{e.line}: {result.message}")
    if result.status == "xfail":
        return Case(node, "xfail", result.message)
    return Case(node, "failure", result.explain(), result.explain())


def load_error_case(spec_path: str, error: Exception) -> Case:
    """A spec that does not load: pytest's ``<spec>::load`` item."""
    text = f"spec does not load: {error}"
    return Case(f"{spec_path}::load", "failure", text, text)


def run_error_case(spec_path: str, entry: Entry, error: Exception) -> Case:
    """An entry whose spec's run failed: the text pytest's item shows for it."""
    text = (
        f"{entry.spec}:{entry.line}: [{entry.table}] {entry.id}\n  the run of this spec's setup failed:\n"
        f"{type(error).__name__}: {error}"
    )
    return Case(nodeid(spec_path, entry), "failure", text, text)


def shorten_message(msg: str, budget: int = MESSAGE_BUDGET) -> str:
    """A ``message`` attribute as pytest 9 shortens it: whole lines within ``budget`` characters, then a
    note that the element text holds the full report."""
    lines = msg.splitlines() or [""]
    kept: list[str] = []
    size = 0
    for line in lines:
        if kept and size + len(line) + 1 > budget:
            break
        kept.append(line)
        size += len(line) + 1
    shortened = "\n".join(kept)
    first_line_cut = len(shortened) > budget
    if first_line_cut:
        shortened = shortened[:budget] + "..."
    remaining = len(lines) - len(kept)
    if remaining:
        note = f"+{remaining} more line{'s' if remaining > 1 else ''}"
    elif first_line_cut:
        note = "truncated"
    else:
        return msg
    return f"{shortened}\n[{note}; full report in element text]"


def _escape(text: str) -> str:
    return _ILLEGAL_XML.sub(
        lambda m: f"#x{ord(m.group()):02X}" if ord(m.group()) <= 0xFF else f"#x{ord(m.group()):04X}", text
    )


def _names(node: str) -> tuple[str, str]:
    parts = node.split("::")
    parts[0] = parts[0].replace("/", ".")
    return ".".join(parts[:-1]), parts[-1]


def junit_xml(
    cases: Iterable[Case], *, duration_s: float = 0.0, suite_name: str = "harness", timestamp: datetime | None = None
) -> str:
    """The JUnit XML document (``<testsuites><testsuite>...``) for ``cases``, as text."""
    cases = list(cases)
    stamp = (timestamp or datetime.now(timezone.utc)).astimezone().isoformat()
    failures = sum(c.outcome == "failure" for c in cases)
    skipped = sum(c.outcome in ("skip", "xfail") for c in cases)
    suite = ET.Element(
        "testsuite",
        name=suite_name,
        errors="0",
        failures=str(failures),
        skipped=str(skipped),
        tests=str(len(cases)),
        time=f"{duration_s:.3f}",
        timestamp=stamp,
        hostname=platform.node(),
    )
    for c in cases:
        classname, name = _names(c.nodeid)
        case = ET.SubElement(suite, "testcase", classname=classname, name=name, time=f"{c.time_s:.3f}")
        if c.outcome == "failure":
            ET.SubElement(case, "failure", message=_escape(shorten_message(c.message))).text = _escape(c.text)
        elif c.outcome == "skip":
            ET.SubElement(case, "skipped", type="pytest.skip", message=_escape(c.message)).text = _escape(c.text)
        elif c.outcome == "xfail":
            ET.SubElement(case, "skipped", type="pytest.xfail", message=_escape(c.message))
    root = ET.Element("testsuites", name=f"{suite_name} tests")
    root.append(suite)
    return '<?xml version="1.0" encoding="utf-8"?>' + ET.tostring(root, encoding="unicode")
