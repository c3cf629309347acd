"""Fuzz the loader: a mutated shipped spec loads, or raises SpecError; nothing else, never slowly.

Two strategies, each starting from a shipped spec (specs/*.yaml):

- text: the YAML text is cut, spliced, has lines duplicated, swapped or re-indented, or gets
  YAML's own punctuation (anchors, aliases, tags, flow brackets, tabs, control characters,
  bytes that are not UTF-8) inserted;
- structure: the loaded mapping has a value somewhere replaced by another (any JSON-like value,
  a huge number, a deep list), a key removed or added, then it is dumped back to YAML.

Each input must end in a loaded Spec or a SpecError within 2 s: a bound against blow-ups such as
an alias bomb (minutes, and the same every time), not a benchmark. On a shared machine a load can
stall for seconds now and then (load averages of 12 on 2 cores were seen), so an input over 2 s
is loaded twice more, each time beside the largest shipped spec: it fails only if its fastest
load is over 2 s and over 10 times that spec's; a blocking hang ends at 60 s (SIGALRM).

Example counts: the default profile ``fuzz`` runs 25 inputs per strategy so the suite
stays fast; ``FSDP2_FUZZ_PROFILE=fuzz-thorough`` runs 2,000 each:

    FSDP2_FUZZ_PROFILE=fuzz-thorough python -m pytest -q tests/unit/load/test_fuzz_spec_loading.py
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.load.spec import SpecError, load_spec
from tests.support import SHIPPED_SPECS as SPECS

TEXTS = {p.name: p.read_bytes() for p in SPECS}

_COMMON = dict(
    deadline=None,
    derandomize=False,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("fuzz", max_examples=25, **_COMMON)
settings.register_profile("fuzz-thorough", max_examples=2000, **_COMMON)
FUZZ = settings.get_profile(os.environ.get("FSDP2_FUZZ_PROFILE", "fuzz"))

_PUNCT = [
    b"&a ",
    b"*a",
    b"&b [*a, *a, *a]",
    b"!!python/object:os.system ",
    b"!!binary ",
    b"!!set ",
    b"? ",
    b": ",
    b"- ",
    b"[",
    b"]",
    b"{",
    b"}",
    b",",
    b"#",
    b"|",
    b">",
    b"'",
    b'"',
    b"\t",
    b"\x00",
    b"\xff",
    b"\xc3",
    b"\xe9",
    b"%YAML 1.1\n",
    b"---\n",
    b"...\n",
    b"\n",
    b"  ",
    b"~",
    b"null",
    b".inf",
    b"1e999",
    b"-1",
    b"0x10",
    b"2024-01-01",
    b"yes",
    b"<<: *a\n",
    "\u00e9".encode(),
    "\u2028".encode(),
    b"\r",
]


BOUND_S = 2.0
WALL_BOUND_S = 60


class _Hung(Exception):
    pass


def _alarm(signum, frame):
    raise _Hung(f"loading took over {WALL_BOUND_S} s of wall-clock time")


def _load_once(path: Path) -> float:
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(WALL_BOUND_S)
    started = time.perf_counter()
    try:
        load_spec(path)
    except SpecError as exc:
        assert str(exc).startswith(str(path)), str(exc)
        assert all(len(line) <= 420 for line in str(exc).splitlines())
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return time.perf_counter() - started


LARGEST = max(SPECS, key=lambda p: len(TEXTS[p.name]))


def _load(data: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="fsdp2-fuzz-") as d:
        path = Path(d) / "spec.yaml"
        path.write_bytes(data)
        times, reference = [_load_once(path)], []
        while times[-1] >= BOUND_S and len(times) < 3:  # a stall, or a slow input: the same again?
            reference.append(_load_once(LARGEST))
            times.append(_load_once(path))
        best = min(times)
        assert best < BOUND_S or best < 10 * min(reference), (
            f"loading took {best:.2f} s at best of {len(times)}; {LARGEST.name} took {min(reference):.2f} s"
        )


@st.composite
def text_mutations(draw) -> bytes:
    text = TEXTS[draw(st.sampled_from(sorted(TEXTS)))]
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["cut", "insert", "dup_line", "swap_lines", "indent", "splice", "replace"]))
        lines = text.split(b"\n")
        if kind == "cut" and text:
            i = draw(st.integers(0, len(text) - 1))
            j = draw(st.integers(i, min(len(text), i + 200)))
            text = text[:i] + text[j:]
        elif kind == "insert":
            i = draw(st.integers(0, len(text)))
            piece = draw(
                st.one_of(
                    st.sampled_from(_PUNCT),
                    st.binary(max_size=8),
                    st.text(max_size=8).map(lambda s: s.encode("utf-8", "surrogatepass")),
                )
            )
            text = text[:i] + piece + text[i:]
        elif kind == "dup_line" and lines:
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            text = b"\n".join(lines)
        elif kind == "swap_lines" and len(lines) > 1:
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            text = b"\n".join(lines)
        elif kind == "indent" and lines:
            i = draw(st.integers(0, len(lines) - 1))
            lines[i] = b" " * draw(st.integers(0, 6)) + lines[i].lstrip(b" ")
            text = b"\n".join(lines)
        elif kind == "splice":
            other = TEXTS[draw(st.sampled_from(sorted(TEXTS)))]
            i, j = draw(st.integers(0, len(text))), draw(st.integers(0, len(other)))
            text = text[:i] + other[j : j + draw(st.integers(0, 400))] + text[i:]
        elif kind == "replace" and lines:
            i = draw(st.integers(0, len(lines) - 1))
            line = lines[i]
            if b": " in line:
                key = line.split(b": ", 1)[0]
                lines[i] = key + b": " + draw(st.sampled_from(_PUNCT))
            text = b"\n".join(lines)
    return text


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        [
            "all",
            "float16",
            "bfloat16",
            "fake",
            "gloo",
            "4.72 MB",
            "≈590K",
            "<= 1e-2",
            "After Pre-Forward",
            "Peak",
            "root",
            "step2.q_heads",
            "layers.0",
            "dp",
            "self_attn.q_proj.weight",
            ">=2.6",
            "Shard(dim=0)",
            "temp",
            "total",
        ]
    ),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.text(max_size=8)
            | st.sampled_from(
                [
                    "layer",
                    "state",
                    "select",
                    "id",
                    "op",
                    "phase",
                    "rank",
                    "ranks",
                    "shape",
                    "config",
                    "overrides",
                    "mesh",
                ]
            ),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=12,
)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


@st.composite
def structure_mutations(draw) -> bytes:
    data = yaml.safe_load(TEXTS[draw(st.sampled_from(sorted(TEXTS)))].decode("utf-8"))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(data) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        kind = draw(st.sampled_from(["replace", "delete", "add", "deepen"]))
        if kind == "replace":
            parent[path[-1]] = draw(_VALUES)
        elif kind == "delete":
            del parent[path[-1]]
        elif kind == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=10) | st.integers())] = draw(_VALUES)
        elif kind == "add":
            parent.insert(draw(st.integers(0, len(parent))), draw(_VALUES))
        else:  # wrap the value in lists
            value = parent[path[-1]]
            for _ in range(draw(st.integers(1, 60))):
                value = [value]
            parent[path[-1]] = value
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False).encode("utf-8")


def setup_module() -> None:
    load_spec(SPECS[0])  # imports and schema compilation outside the deadline


@FUZZ
@given(text_mutations())
def test_mutated_spec_text_loads_or_raises_spec_error(data):
    _load(data)


@FUZZ
@given(structure_mutations())
def test_mutated_spec_structure_loads_or_raises_spec_error(data):
    _load(data)


def test_shipped_specs_load():
    for path in SPECS:
        load_spec(path)
