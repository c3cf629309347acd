"""The state-dict round trip: setup.state_dict, the ``state_dict`` check kind, and the temporary folder.

The check kind's measure is tested on a synthetic observation (the walkthrough's, plus
``state_dict`` records derived from the Shard(0) rule and a reload on 3 ranks); the setup key
and the kind's rules as ``file:line: key.path: expected`` load errors; then (slow) real gloo
runs: the round trip's folder is gone after a run and after a failing one, whoever made it.
"""

from __future__ import annotations

import copy
import json
import math

import jsonschema
import pytest

from harness.judge.checks import CheckResult, check
from harness.judge.evaluate import evaluate_item
from harness.language.entry import make_entry
from harness.load.setup import RunSetup, SetupError
from harness.load.spec import SpecError, SpecItem, load_spec
from tests.support import REPO
from tests.support.observations import layer_param_shapes, walkthrough_observation
from tests.support.specs import write_spec as write

OBSERVATION_SCHEMA = json.loads((REPO / "harness" / "contract" / "observation.schema.json").read_text())
STATES = ["exp_avg", "exp_avg_sq", "step"]


# --- a synthetic observation with the round trip ---------------------------------------------


def shard(rows: int, rank: int, world: int) -> tuple[int, int]:
    """(offset, length) of ``rank``'s Shard(0) rows: torch.chunk's chunk = ceil(rows / world),
    the offset never past the end."""
    chunk = math.ceil(rows / world)
    offset = min(rank * chunk, rows)
    return offset, max(0, min(chunk, rows - offset))


def record(rank: int, world: int, saved_world: int, layers: int = 2) -> dict:
    entries = []
    for layer in range(layers):
        for name, full in layer_param_shapes():
            offset, length = shard(full[0], rank, world)
            chunks = sorted({shard(full[0], r, saved_world) for r in range(saved_world)})  # equal offsets kept once
            numel = length * math.prod(full[1:])
            entries.append(
                {
                    "fqn": f"layers.{layer}.{name}",
                    "full_shape": full,
                    "dtype": "float16",
                    "placements": ["Shard(dim=0)"],
                    "local_shape": [length, *full[1:]],
                    "global_offset": [offset] + [0] * (len(full) - 1),
                    "local_length": length,
                    "local_numel": numel,
                    "equal_before_load": numel == 0,
                    "round_trip_equal": True,
                    "max_abs_diff": 0.0,
                    "checkpoint_offsets": [o for o, _ in chunks],
                    "checkpoint_lengths": [n for _, n in chunks],
                    "optimizer": [
                        {"name": s, "equal": True, "equal_before_load": s == "step" or numel == 0, "max_abs_diff": 0.0}
                        for s in STATES
                    ],
                }
            )
    return {"saved_world_size": saved_world, "world_size": world, "entries": entries}


def round_trip_observation() -> dict:
    """The walkthrough's 4 ranks with a round trip, and a reload on 3 ranks."""
    obs = walkthrough_observation()
    for doc in obs["ranks"]:
        doc["state_dict"] = record(doc["rank"], 4, 4)
    obs["reloads"] = [
        {
            "world_size": 3,
            "mesh_shape": [3],
            "mesh_dim_names": ["dp"],
            "ranks": [{"rank": r, "state_dict": record(r, 3, 4)} for r in range(3)],
        }
    ]
    obs["setup"]["state_dict"] = {"round_trip": True, "reload_world_sizes": [3]}
    return obs


@pytest.fixture(scope="module")
def obs():
    return round_trip_observation()


def run(obs, /, **values) -> CheckResult:
    entry = make_entry(
        "state_dict",
        values,
        id="test-state_dict",
        says="it says so",
        section="Some section",
        table="some table",
        spec="specs/x.yaml",
        line=7,
    )
    return check(entry, obs)


def field(result: CheckResult, name: str):
    return next(f for f in result.fields if f.field == name)


def test_synthetic_observation_is_schema_valid(obs):
    jsonschema.Draft202012Validator(OBSERVATION_SCHEMA).validate(obs)


def test_one_shard_pass(obs):
    # q_proj [512, 512] on 4 ranks: 128 rows each, rank 2 starts at 256
    r = run(
        obs,
        layer=0,
        param="self_attn.q_proj.weight",
        ranks=[2],
        local_shape=[128, 512],
        global_offset=[256, 0],
        local_length=128,
        equal_before_load=False,
        round_trip_equal=True,
        optimizer_equal=True,
        optimizer_states=STATES,
        optimizer_equal_before_load=["step"],
        checkpoint_chunks=4,
        checkpoint_offsets=[0, 128, 256, 384],
        checkpoint_lengths=[128] * 4,
        placements=["Shard(dim=0)"],
        full_shape=[512, 512],
    )
    assert r.status == "pass", r.explain()


def test_every_entry_pass(obs):
    r = run(
        obs,
        entries=22,
        round_trip_equal=True,
        optimizer_equal=True,
        max_abs_diff=0,
        optimizer_max_abs_diff=0,
        local_numel=2 * 590_112,
    )
    assert r.status == "pass", r.explain()
    assert run(obs, layer=1, entries=11, local_numel=590_112).status == "pass"


def test_a_shard_that_differs_on_one_rank_fails_there(obs):
    bad = copy.deepcopy(obs)
    entry = next(e for e in bad["ranks"][2]["state_dict"]["entries"] if e["fqn"] == "layers.1.mlp.up_proj.weight")
    entry.update(round_trip_equal=False, max_abs_diff=0.5)
    entry["optimizer"][0].update(equal=False, max_abs_diff=0.25)
    r = run(bad, round_trip_equal=True, optimizer_equal=True, max_abs_diff="<= 0.1")
    assert r.status == "fail"
    assert [f.failed_ranks for f in r.fields] == [[2], [2], [2]]
    text = r.explain()
    assert "FAIL round_trip_equal: expected true; observed true (ranks 0, 1, 3); false (rank 2)" in text
    assert "FAIL max_abs_diff: expected <= 0.1; observed 0 (ranks 0, 1, 3); 0.5 (rank 2)" in text
    one = run(bad, layer=1, param="mlp.up_proj.weight", optimizer_equal=True, optimizer_max_abs_diff=0)
    assert one.status == "fail" and field(one, "optimizer_max_abs_diff").failed_ranks == [2]


def test_an_offset_figure_fails_on_the_ranks_it_does_not_match(obs):
    r = run(obs, layer=0, param="self_attn.q_norm.weight", global_offset=[16])
    assert r.status == "fail"
    assert field(r, "global_offset").failed_ranks == [0, 2, 3]
    assert "observed [0] (rank 0); [16] (rank 1); [32] (rank 2); [48] (rank 3)" in r.explain()


def test_reload_world(obs):
    # q_norm [64] on 3 ranks: 22, 22, 20 rows at 0, 22, 44; the checkpoint holds the 4-rank chunks
    r = run(
        obs,
        load_world_size=3,
        layer=0,
        param="self_attn.q_norm.weight",
        ranks=[2],
        local_shape=[20],
        global_offset=[44],
        local_length=20,
        checkpoint_offsets=[0, 16, 32, 48],
    )
    assert r.status == "pass", r.explain()
    wrong = run(obs, load_world_size=3, fqn="layers.0.self_attn.q_norm.weight", local_length=22)
    assert field(wrong, "local_length").failed_ranks == [2]


def test_empty_shards_and_deduplicated_chunks():
    # q_norm [64] on 48 ranks: chunk 2, ranks 0-31 hold 2 rows, ranks 32-47 none, all at offset 64
    rec = record(40, 48, 48, layers=1)
    q_norm = next(e for e in rec["entries"] if e["fqn"].endswith("q_norm.weight"))
    assert (q_norm["local_length"], q_norm["global_offset"], q_norm["equal_before_load"]) == (0, [64], True)
    assert len(q_norm["checkpoint_offsets"]) == 33 and q_norm["checkpoint_lengths"][-1] == 0


@pytest.mark.parametrize(
    "values, words",
    [
        (
            dict(load_world_size=2, round_trip_equal=True),
            "the checkpoint was not loaded on 2 ranks; loaded on: the run's 4 ranks and [3]",
        ),
        (
            dict(load_world_size=3, ranks=[3], round_trip_equal=True),
            "rank(s) [3] not in the reload on 3 ranks; its ranks: 0-2",
        ),
        (
            dict(fqn="layers.0.mlp.gate.weight", round_trip_equal=True),
            "rank 0: no state-dict entry 'layers.0.mlp.gate.weight'",
        ),
    ],
)
def test_what_the_observation_lacks_is_an_error(obs, values, words):
    r = run(obs, **values)
    assert r.status == "error" and words in r.message, r.message


def test_a_run_without_the_round_trip_is_an_error_naming_the_setup_key():
    r = run(walkthrough_observation(), round_trip_equal=True)
    assert r.status == "error"
    assert "rank 0 of the run recorded no state-dict round trip (setup.state_dict.round_trip is off" in r.message


def test_a_simulated_run_skips_state_dict_entries():
    obs = walkthrough_observation()
    obs["environment"]["simulated"] = True
    entry = make_entry("state_dict", {"round_trip_equal": True}, id="x")
    result = evaluate_item(SpecItem(entry), obs)
    assert result.status == "skip" and "saves no checkpoint" in result.message


# --- the setup key and the kind's rules at load ------------------------------------------------

BASE = """\
spec: sd
title: state dict
document: a document
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 1}}
  mesh: {shape: [3], dim_names: [dp]}
  state_dict: {round_trip: true, reload_world_sizes: [2]}
tables:
  - section: "S"
    check: state_dict
    entries:
      - ENTRY
"""


GOOD = [
    "{round_trip_equal: true, optimizer_equal: true, entries: 11}",
    "{layer: 0, param: self_attn.q_norm.weight, ranks: [2], global_offset: [12], local_length: 4}",
    "{load_world_size: 2, ranks: [1], fqn: layers.0.self_attn.q_norm.weight, global_offset: [8]}",
    "{layer: 0, local_numel: 12600, ranks: [0, 1]}",
]


@pytest.mark.parametrize("entry", GOOD)
def test_entries_that_can_hold_load(tmp_path, entry):
    spec = load_spec(write(tmp_path, BASE.replace("ENTRY", entry)))
    assert len(spec.items) == 1
    assert spec.setup.state_dict.round_trip and spec.setup.state_dict.reload_world_sizes == (2,)


# (replace in BASE, the entry, marker of the line blamed, key path, words)
BAD = [
    (
        "state_dict: {round_trip: true, reload_world_sizes: [2]}",
        "{round_trip_equal: true}",
        "- {round_trip_equal",
        "tables[0].entries[0]",
        "the setup saves no checkpoint: a 'state_dict' entry needs setup.state_dict: {round_trip: true}",
    ),
    (
        None,
        "{load_world_size: 4, round_trip_equal: true}",
        "- {load_world_size",
        "tables[0].entries[0].load_world_size",
        "the checkpoint is loaded on world size 3 (the run's own) and on [2] "
        "(setup.state_dict.reload_world_sizes), not 4",
    ),
    (
        None,
        "{load_world_size: 2, ranks: [2], round_trip_equal: true}",
        "- {load_world_size",
        "tables[0].entries[0].ranks",
        "rank(s) [2] outside the world that loads the checkpoint: world size 2, ranks 0-1",
    ),
    (
        None,
        "{ranks: [3], round_trip_equal: true}",
        "- {ranks",
        "tables[0].entries[0].ranks",
        "rank(s) [3] outside the world that loads the checkpoint: world size 3",
    ),
    (
        None,
        "{global_offset: [0], round_trip_equal: true}",
        "- {global_offset",
        "tables[0].entries[0]",
        "['global_offset'] describe one parameter's shard: name 'param' with 'layer', or 'fqn'",
    ),
    (
        None,
        "{param: self_attn.q_norm.weight, global_offset: [0]}",
        "- {param",
        "tables[0].entries[0]",
        "a 'state_dict' entry names 'param' with its 'layer'",
    ),
    (
        None,
        "{fqn: layers.1.self_attn.q_norm.weight, local_length: 4}",
        "- {fqn",
        "tables[0].entries[0].fqn",
        "the model of this setup has no parameter 'layers.1.self_attn.q_norm.weight'",
    ),
    (
        None,
        "{layer: 0, param: self_attn.q_norm.weight, global_offset: [0, x]}",
        "- {layer",
        "tables[0].entries[0]",
        "global_offset: expected a list of integers",
    ),
    (
        None,
        "{round_trip_equal: equal}",
        "- {round_trip_equal",
        "tables[0].entries[0]",
        "round_trip_equal: expected true or false",
    ),
]

SETUP_BAD = [
    (
        "state_dict: {reload_world_sizes: [2]}",
        "setup.state_dict.reload_world_sizes",
        "reloading on world sizes [2] needs the round trip: add round_trip: true",
    ),
    (
        "state_dict: {round_trip: true, reload_world_sizes: [3]}",
        "setup.state_dict.reload_world_sizes",
        "world size 3 is the run's own (the round trip loads there already); expected other world sizes, got [3]",
    ),
    (
        "state_dict: {round_trip: true, reload_world_sizes: [2, 2]}",
        "setup.state_dict.reload_world_sizes",
        "expected distinct world sizes, got [2, 2]",
    ),
    (
        "state_dict: {round_trip: true, reload_world_sizes: [0]}",
        "setup.state_dict.reload_world_sizes[0]",
        "0 is less than the minimum of 1",
    ),
    ("state_dict: {round_trip: yes please}", "setup.state_dict.round_trip", "'yes please' is not of type 'boolean'"),
    (
        "state_dict: {roundtrip: true}",
        "setup.state_dict.roundtrip",
        "('roundtrip' was unexpected); did you mean 'round_trip'? "
        "allowed keys: ['round_trip', 'get_model', 'reload_world_sizes', 'set_model']",
    ),
]


def line_of(text: str, marker: str) -> int:
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if marker in line]
    assert len(hits) == 1, (marker, hits)
    return hits[0]


@pytest.mark.parametrize("old, entry, marker, key_path, words", BAD, ids=[b[4][:50] for b in BAD])
def test_entries_that_can_never_hold_fail_at_load(tmp_path, old, entry, marker, key_path, words):
    text = BASE.replace("ENTRY", entry)
    if old:
        text = text.replace(old, "numerics: true")
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert len(info.value.errors) == 1, str(info.value)
    assert str(info.value).startswith(f"{path}:{line_of(text, marker)}: {key_path}: "), str(info.value)
    assert words in str(info.value), str(info.value)


@pytest.mark.parametrize("new, key_path, words", SETUP_BAD, ids=[s[2][:40] for s in SETUP_BAD])
def test_bad_setup_state_dict_fails_at_load(tmp_path, new, key_path, words):
    text = BASE.replace("state_dict: {round_trip: true, reload_world_sizes: [2]}", new).replace(
        "ENTRY", "{round_trip_equal: true}"
    )
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}:{line_of(text, 'state_dict:')}: {key_path}: "), str(info.value)
    assert words in str(info.value), str(info.value)


def test_setup_defaults_to_no_round_trip():
    setup = RunSetup.from_mapping({})
    assert not setup.state_dict.round_trip and setup.state_dict.reload_world_sizes == ()
    assert setup.to_dict()["state_dict"] == {
        "round_trip": False,
        "reload_world_sizes": [],
        "get_model": [],
        "set_model": [],
    }
    with pytest.raises(SetupError) as info:
        RunSetup.from_mapping({"mesh": {"shape": [2]}, "state_dict": {"reload_world_sizes": [2, 2]}})
    assert [k for k, _ in info.value.errors] == ["setup.state_dict.reload_world_sizes"] * 3
