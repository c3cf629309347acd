"""StateDictOptions calls: setup.state_dict.get_model / set_model and the ``state_dict_get`` /
``state_dict_set`` check kinds.

The kinds' measure runs on a synthetic observation (the walkthrough's 4 ranks plus
``state_dict_options`` records written by hand: torch's rank-0-only full state dict under
cpu_offload, a strict load that raised, a broadcast that left a key on meta); the setup keys and
the kinds' rules as ``file:line: key.path: expected`` load errors. The real run is
specs/state_dict_options.yaml.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from harness.judge.checks import CheckResult, check
from harness.judge.evaluate import evaluate_item
from harness.language.entry import make_entry
from harness.load.spec import SpecError, SpecItem, load_spec
from tests.support import REPO
from tests.support.observations import walkthrough_observation
from tests.support.specs import write_spec as write

OBSERVATION_SCHEMA = json.loads((REPO / "harness" / "contract" / "observation.schema.json").read_text())
Q = "layers.0.self_attn.q_proj.weight"
UP = "layers.0.mlp.up_proj.weight"


def tensor(fqn: str, *, dtensor: bool, device: str = "cpu", equal: bool = True, local=(128, 512)) -> dict:
    return {
        "fqn": fqn,
        "is_dtensor": dtensor,
        "device": device,
        "shape": [512, 512],
        "local_shape": list(local) if dtensor else [512, 512],
        "placements": ["Shard(dim=0)"] if dtensor else [],
        "dtype": "float16",
        "equal": equal,
    }


def loaded(fqn: str, *, device: str = "cpu", equal: bool = True, gathered=None, dtype=None) -> dict:
    return {
        "fqn": fqn,
        "is_dtensor": True,
        "device": device,
        "local_shape": [128, 512],
        "placements": ["Shard(dim=0)"],
        "equal": equal,
        "equal_before_load": False,
        "gathered_equal": gathered,
        "gathered_dtype": dtype,
    }


def record(rank: int) -> dict:
    full_on_cpu = [tensor(Q, dtensor=False), tensor(UP, dtensor=False)] if rank == 0 else []
    return {
        "get_model": [
            {"id": "sharded", "keys": 2, "entries": [tensor(Q, dtensor=True), tensor(UP, dtensor=True)]},
            {"id": "full_on_cpu", "keys": len(full_on_cpu), "entries": full_on_cpu},
        ],
        "set_model": [
            {
                "id": "strict",
                "given_keys": 1,
                "error": {"type": "RuntimeError", "message": f'Missing key(s) in state_dict: "{UP}".'},
                "missing_keys": None,
                "unexpected_keys": None,
                "meta_params": [],
                "meta_buffers": [],
                "gathered": False,
                "entries": [loaded(Q), loaded(UP, equal=False)],
            },
            {
                "id": "broadcast",
                "given_keys": 1 if rank == 0 else 0,
                "error": None,
                "missing_keys": [],
                "unexpected_keys": ["extra"] if rank == 0 else [],
                "meta_params": [UP],
                "meta_buffers": ["rotary_emb.inv_freq"],
                "gathered": False,
                "entries": [loaded(Q), loaded(UP, device="meta", equal=False)],
            },
            {
                "id": "recipe",
                "given_keys": 2 if rank == 0 else 0,
                "error": None,
                "missing_keys": [],
                "unexpected_keys": [],
                "meta_params": [],
                "meta_buffers": ["rotary_emb.inv_freq"],
                "gathered": True,
                "entries": [loaded(Q, gathered=True, dtype="bfloat16"), loaded(UP, gathered=True, dtype="bfloat16")],
            },
        ],
    }


@pytest.fixture(scope="module")
def obs():
    doc = walkthrough_observation()
    for rank_doc in doc["ranks"]:
        rank_doc["state_dict_options"] = record(rank_doc["rank"])
    return doc


def run(obs, kind: str, /, **values) -> CheckResult:
    entry = make_entry(kind, values, id="x", says="", section="S", table="t", spec="specs/x.yaml", line=7)
    return check(entry, obs)


def test_synthetic_observation_is_schema_valid(obs):
    jsonschema.Draft202012Validator(OBSERVATION_SCHEMA).validate(obs)


def test_get_whole_dict_per_rank(obs):
    assert run(obs, "state_dict_get", get="full_on_cpu", ranks=[0], keys=2, dtensors=0, devices=["cpu"]).status == (
        "pass"
    )
    assert run(obs, "state_dict_get", get="full_on_cpu", ranks=[1, 2, 3], keys=0, equal_entries=0).status == "pass"
    wrong = run(obs, "state_dict_get", get="full_on_cpu", keys=2)
    assert wrong.status == "fail" and [f.field for f in wrong.fields if not f.ok] == ["keys"]
    assert run(obs, "state_dict_get", get="sharded", dtensors=2, equal_entries=2).status == "pass"


def test_get_one_key(obs):
    r = run(obs, "state_dict_get", get="sharded", fqn=Q, is_dtensor=True, local_shape=[128, 512], equal=True)
    assert r.status == "pass", r.message
    assert run(obs, "state_dict_get", get="full_on_cpu", fqn=Q, ranks=[1], present=False).status == "pass"
    absent = run(obs, "state_dict_get", get="full_on_cpu", fqn=Q, ranks=[1], is_dtensor=False)
    assert absent.status == "fail"  # observed null: the rank got no such key
    assert run(obs, "state_dict_get", get="sharded", fqn=Q, placements=["Replicate()"]).status == "fail"


def test_set_error_and_keys(obs):
    r = run(obs, "state_dict_set", set="strict", error_type="RuntimeError", error={"matches": "Missing key"})
    assert r.status == "pass", r.message
    assert run(obs, "state_dict_set", set="strict", error=None).status == "fail"
    assert run(obs, "state_dict_set", set="broadcast", error=None, missing_keys=[], meta_params=[UP]).status == "pass"
    per_rank = run(obs, "state_dict_set", set="broadcast", unexpected_keys=["extra"])
    assert per_rank.status == "fail" and "rank" in per_rank.explain()
    assert run(obs, "state_dict_set", set="broadcast", ranks=[0], unexpected_keys=["extra"]).status == "pass"
    assert run(obs, "state_dict_set", set="broadcast", equal_entries=1, entries=2, given_keys=0, ranks=[3]).status == (
        "pass"
    )


def test_set_gathered(obs):
    assert run(obs, "state_dict_set", set="recipe", gathered=True, gathered_equal_entries=2).status == "pass"
    assert run(obs, "state_dict_set", set="recipe", fqn=Q, gathered_equal=True).status == "pass"
    assert run(obs, "state_dict_set", set="broadcast", gathered=True).status == "fail"
    assert run(obs, "state_dict_set", set="broadcast", fqn=Q, gathered_equal=True).status == "fail"  # not gathered


def test_set_gathered_dtype(obs):
    """The dtype the all-gather gave (what gathered_equal compared in): the right one passes."""
    assert run(obs, "state_dict_set", set="recipe", fqn=Q, gathered_dtype="bfloat16").status == "pass"
    assert run(obs, "state_dict_set", set="recipe", fqn=Q, gathered_dtype="float32").status == "fail"
    assert run(obs, "state_dict_set", set="recipe", gathered_dtypes=["bfloat16"]).status == "pass"
    assert run(obs, "state_dict_set", set="broadcast", gathered_dtypes=[]).status == "pass"  # not gathered
    assert run(obs, "state_dict_set", set="broadcast", fqn=Q, gathered_dtype=None).status == "pass"


def test_set_one_key(obs):
    assert run(obs, "state_dict_set", set="broadcast", fqn=UP, device="meta", equal=False).status == "pass"
    assert run(obs, "state_dict_set", set="broadcast", fqn=UP, device="cpu").status == "fail"


@pytest.mark.parametrize(
    "kind, values, words",
    [
        (
            "state_dict_get",
            {"get": "nope", "keys": 1},
            "rank 0: no get_model call 'nope'; calls: ['sharded', 'full_on_cpu']",
        ),
        ("state_dict_set", {"set": "strict", "fqn": "layers.0.extra", "equal": True}, "has no state-dict key"),
        ("state_dict_get", {"get": "sharded", "ranks": [7], "keys": 1}, "rank(s) [7] not in the run"),
    ],
)
def test_what_the_observation_lacks_is_an_error(obs, kind, values, words):
    r = run(obs, kind, **values)
    assert r.status == "error" and words in r.message, r.message


def test_a_run_without_the_calls_is_an_error_and_a_simulated_one_skips():
    bare = walkthrough_observation()
    r = run(bare, "state_dict_get", get="sharded", keys=1)
    assert r.status == "error" and "recorded no state-dict calls" in r.message
    bare["environment"]["simulated"] = True
    result = evaluate_item(SpecItem(make_entry("state_dict_set", {"set": "strict", "error": None}, id="x")), bare)
    assert result.status == "skip" and "makes no state-dict calls" in result.message


# --- setup keys and the kinds' rules at load ----------------------------------------------------

BASE = """\
spec: sdo
title: state dict options
document: a document
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 1}}
  mesh: {shape: [3], dim_names: [dp]}
  state_dict:
    get_model:
      - {id: full_on_cpu, full_state_dict: true, cpu_offload: true}
    set_model:
      - {id: recipe, into: meta, full_state_dict: true, broadcast_from_rank0: true}
      - {id: lenient, strict: false, drop: [layers.0.mlp.up_proj.weight], add: [extra]}
tables:
  - section: "S"
    check: CHECK
    entries:
      - ENTRY
"""


def spec_text(check: str, entry: str) -> str:
    return BASE.replace("CHECK", check).replace("ENTRY", entry)


def line_of(text: str, marker: str) -> int:
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if marker in line]
    assert len(hits) == 1, (marker, hits)
    return hits[0]


def test_the_calls_load(tmp_path):
    spec = load_spec(write(tmp_path, spec_text("state_dict_set", "{set: recipe, ranks: [1, 2], given_keys: 0}")))
    sd = spec.setup.state_dict
    assert [c.id for c in sd.get_model] == ["full_on_cpu"] and sd.get_model[0].cpu_offload
    recipe, lenient = sd.set_model
    assert (recipe.into, recipe.broadcast_from_rank0, recipe.strict) == ("meta", True, True)
    assert lenient.drop == ("layers.0.mlp.up_proj.weight",) and lenient.add == ("extra",) and not sd.round_trip


# (replace in BASE, replacement, marker of the line blamed, key path, words)
SETUP_BAD = [
    (
        "{id: recipe, into: meta, full_state_dict: true, broadcast_from_rank0: true}",
        "{id: recipe, into: meta, broadcast_from_rank0: true}",
        "{id: recipe",
        "setup.state_dict.set_model[0].broadcast_from_rank0",
        "expected full_state_dict: true with it",
    ),
    (
        "drop: [layers.0.mlp.up_proj.weight]",
        "drop: [layers.0.mlp.up.weight]",
        "{id: lenient",
        "setup.state_dict.set_model[1].drop[0]",
        "no parameter 'layers.0.mlp.up.weight' to leave out",
    ),
    (
        "add: [extra]",
        "add: [layers.0.mlp.down_proj.weight]",
        "{id: lenient",
        "setup.state_dict.set_model[1].add[0]",
        "is a parameter of the model; expected a key it does not have",
    ),
    (
        "{id: lenient,",
        "{id: recipe,",
        "strict: false",
        "setup.state_dict.set_model[1].id",
        "id 'recipe' used twice",
    ),
    (
        "into: meta",
        "into: cuda",
        "{id: recipe",
        "setup.state_dict.set_model[0].into",
        "expected one of ['sharded', 'meta'], got 'cuda'",
    ),
    (
        "{id: full_on_cpu,",
        "{id: 'full on cpu',",
        "cpu_offload: true",
        "setup.state_dict.get_model[0].id",
        "does not match",
    ),
]


@pytest.mark.parametrize("old, new, marker, key_path, words", SETUP_BAD, ids=[s[3] for s in SETUP_BAD])
def test_bad_calls_fail_at_load(tmp_path, old, new, marker, key_path, words):
    text = spec_text("state_dict_get", "{get: full_on_cpu, keys: 0}")
    assert text.count(old) == 1
    text = text.replace(old, new)
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert len(info.value.errors) == 1, str(info.value)
    assert str(info.value).startswith(f"{path}:{line_of(text, marker)}: {key_path}: "), str(info.value)
    assert words in str(info.value), str(info.value)


# (check kind, entry, key path blamed, words)
ENTRY_BAD = [
    ("state_dict_get", "{keys: 0}", "tables[0].entries[0]", "a 'state_dict_get' entry names its call: get: <id"),
    (
        "state_dict_get",
        "{get: full, keys: 0}",
        "tables[0].entries[0].get",
        "no setup.state_dict.get_model call with id 'full'; ids: ['full_on_cpu']",
    ),
    (
        "state_dict_set",
        "{set: lenient, equal: true}",
        "tables[0].entries[0]",
        "['equal'] describe one key: name 'param' with 'layer', or 'fqn'",
    ),
    (
        "state_dict_set",
        "{set: lenient, fqn: layers.0.mlp.up_proj.weight, missing_keys: []}",
        "tables[0].entries[0]",
        "['missing_keys'] describe the whole state dict",
    ),
    (
        "state_dict_get",
        "{get: full_on_cpu, param: mlp.up_proj.weight, present: true}",
        "tables[0].entries[0]",
        "names 'param' with its 'layer'",
    ),
    ("state_dict_set", "{set: recipe, ranks: [3], given_keys: 0}", "tables[0].entries[0].ranks", "outside the world"),
    (
        "state_dict_get",
        "{get: full_on_cpu, fqn: layers.1.mlp.up_proj.weight, present: true}",
        "tables[0].entries[0].fqn",
        "has no parameter 'layers.1.mlp.up_proj.weight'",
    ),
    ("state_dict_set", "{set: recipe, error: 3}", "tables[0].entries[0]", "error: expected a string (exact)"),
]


@pytest.mark.parametrize("kind, entry, key_path, words", ENTRY_BAD, ids=[e[3][:40] for e in ENTRY_BAD])
def test_entries_that_can_never_hold_fail_at_load(tmp_path, kind, entry, key_path, words):
    text = spec_text(kind, entry)
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert len(info.value.errors) == 1, str(info.value)
    assert str(info.value).startswith(f"{path}:{line_of(text, entry)}: {key_path}: "), str(info.value)
    assert words in str(info.value), str(info.value)


def test_an_entry_without_calls_in_the_setup_fails_at_load(tmp_path):
    text = spec_text("state_dict_get", "{get: full_on_cpu, keys: 0}")
    start, end = text.index("  state_dict:"), text.index("tables:")
    text = text[:start] + text[end:]
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert "the setup makes no get_model calls: add setup.state_dict.get_model" in str(info.value), str(info.value)
