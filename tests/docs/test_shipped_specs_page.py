"""docs/shipped-specs.md names every shipped spec: a spec added without its row fails here."""

from __future__ import annotations

import re

from tests.support import REPO, SPECS


def test_every_shipped_spec_has_a_row():
    page = (REPO / "docs" / "shipped-specs.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w.-]+\.yaml)`", page))
    missing = sorted(p.name for p in SPECS.glob("*.yaml") if p.name not in named)
    assert not missing, f"docs/shipped-specs.md has no row for {missing}"
