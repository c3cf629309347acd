"""Reading a JUnit XML file (ours or pytest's) and the walkthrough edits that give every outcome."""

from __future__ import annotations

import xml.etree.ElementTree as ET

MUTATIONS = [  # (text in specs/qwen3_walkthrough.yaml, replacement)
    ('numel: "≈2.36M"}', 'numel: "≈2.37M"}'),  # fail
    (
        'local_bytes: "1.18 MB"}',
        'local_bytes: "1.19 MB", deviation: {reason: "a difference the spec declares"}}',
    ),  # xfail
    (
        "count: 11}",
        'count: 11, deviation: {reason: "a difference no longer seen"}}',
    ),  # xpass (first match: eleven_params)
]


def cases_of(xml_text: str) -> dict[tuple[str, str], dict]:
    """(classname, name) -> outcome, message, text of each testcase."""
    root = ET.fromstring(xml_text)
    out = {}
    for tc in root.iter("testcase"):
        child = next(iter(tc), None)
        outcome = "pass" if child is None else child.tag + (f":{child.get('type')}" if child.get("type") else "")
        out[(tc.get("classname"), tc.get("name"))] = {
            "outcome": outcome,
            "message": None if child is None else child.get("message"),
            "text": None if child is None else (child.text or ""),
        }
    return out
