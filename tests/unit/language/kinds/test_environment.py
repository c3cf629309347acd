"""The ``environment`` check kind on synthetic observations (no ranks launched): ranks that agree
pass; a rank that differs fails naming its host, its rank and what the others have; a GPU shared
by two ranks of a host fails naming both; CPU ranks skip ``distinct_devices``; a spec whose one
figure is changed fails exactly that entry."""

from __future__ import annotations

import copy

import jsonschema
import pytest

from harness.contract.observation import load_schema
from harness.judge.checks import check
from harness.judge.evaluate import FAILING, evaluate_spec
from harness.language.entry import make_entry
from harness.load.spec import load_spec
from tests.support.observations import walkthrough_observation


def rank_env(rank: int, *, hosts=("node-a", "node-b"), per_host=2, device="cuda") -> dict:
    host = hosts[rank // per_host]
    env = {
        "host": host,
        "node_rank": rank // per_host,
        "local_rank": rank % per_host,
        "local_world_size": per_host,
        "pid": 1000 + rank,
        "torch_version": "2.13.0",
        "python_version": "3.11.9",
        "backend": "nccl",
        "device_type": device,
        "device_index": rank % per_host if device == "cuda" else None,
        "device_name": "NVIDIA H200" if device == "cuda" else "a CPU",
        "device_uuid": f"GPU-{host}-{rank % per_host}" if device == "cuda" else None,
        "device_pci_bus_id": f"0000:{rank % per_host + 4:02x}:00.0" if device == "cuda" else None,
        "cuda_version": "12.8" if device == "cuda" else None,
        "nccl_version": "2.27.3" if device == "cuda" else None,
        "cuda_visible_devices": None,
        "variables": {"NCCL_DEBUG": "WARN"},
    }
    return env


def cluster_observation(**kwargs) -> dict:
    obs = walkthrough_observation()
    for r in obs["ranks"]:
        r["environment"] = rank_env(r["rank"], **kwargs)
    return obs


def run(obs, **values):
    return check(make_entry("environment", values, id="env", section="environment"), obs)


def test_the_observation_with_environments_matches_the_schema():
    jsonschema.validate(cluster_observation(), load_schema())


def test_ranks_that_agree_pass():
    result = run(
        cluster_observation(),
        same_torch_version=True,
        same_device_type=True,
        same_nccl_version=True,
        same_variables=True,
        distinct_devices=True,
        hosts=2,
        nodes=2,
        ranks_per_host=2,
        ranks_per_node=2,
    )
    assert result.status == "pass", result.explain()


def test_a_rank_with_another_torch_fails_naming_its_host_and_the_others():
    obs = cluster_observation()
    obs["ranks"][3]["environment"]["torch_version"] = "2.12.0"
    result = run(obs, same_torch_version=True)
    assert result.status == "fail"
    text = result.explain()
    assert "torch 2.12.0 on node-b; ranks 0, 1 (host node-a); 2 (host node-b) have 2.13.0" in text, text
    assert "failing ranks: 3 (host node-b)" in text


def test_differing_variables_are_shown():
    obs = cluster_observation()
    obs["ranks"][0]["environment"]["variables"]["NCCL_IB_DISABLE"] = "1"
    text = run(obs, same_variables=True).explain()
    assert "variables NCCL_DEBUG=WARN, NCCL_IB_DISABLE=1 on node-a" in text and "failing ranks: 0 (host node-a)" in text


def test_two_ranks_on_one_gpu_fail_naming_both():
    obs = cluster_observation()
    env = obs["ranks"][1]["environment"]
    env["device_uuid"] = obs["ranks"][0]["environment"]["device_uuid"]
    result = run(obs, distinct_devices=True)
    assert result.status == "fail"
    text = result.explain()
    assert "shares GPU-node-a-0 with rank 1 on node-a" in text and "shares GPU-node-a-0 with rank 0 on node-a" in text
    assert "failing ranks: 0, 1 (host node-a)" in text


def test_ranks_per_host_names_the_host_that_differs():
    obs = cluster_observation()
    obs["ranks"][2]["environment"]["host"] = "node-a"  # three ranks on node-a, one on node-b
    result = run(obs, ranks_per_host=2)
    assert result.status == "fail"
    assert "failing ranks: 0-2 (host node-a); 3 (host node-b)" in result.explain()


def test_cpu_ranks_do_not_measure_distinct_devices():
    obs = cluster_observation(hosts=("h",), per_host=4, device="cpu")
    result = run(obs, distinct_devices=True)
    assert result.status == "skip" and "share the host's cores" in result.message
    # said once, not once per rank: the report groups the ranks that share a value
    assert result.message.count("share the host's cores") == 1, result.message
    assert {v for f in result.fields for v in f.observed.values()} == {
        "n/a: runs on cpu: ranks on CPU share the host's cores, devices per rank apply to CUDA"
    }
    assert run(obs, distinct_devices=True, ranks_per_host=4).status == "pass"  # the other field is compared


def test_a_simulated_run_skips():
    obs = walkthrough_observation()
    obs["environment"]["simulated"] = True
    result = run(obs, same_torch_version=True)
    assert result.status == "skip" and "simulated" in result.message


SPEC = """\
spec: env
title: environment
document: a cluster's layout
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 2}}
tables:
  - section: cluster
    check: environment
    entries:
      - {id: agree, same_torch_version: true, same_device_type: true}
      - {id: layout, hosts: 2, ranks_per_host: 2}
      - {id: gpus, distinct_devices: true}
"""


@pytest.mark.parametrize(
    "old, new, failing",
    [
        ("ranks_per_host: 2", "ranks_per_host: 4", "layout"),
        ("hosts: 2", "hosts: 1", "layout"),
    ],
)
def test_one_changed_figure_fails_exactly_that_entry(tmp_path, old, new, failing):
    path = tmp_path / "env.yaml"
    path.write_text(SPEC, encoding="utf-8")
    obs = cluster_observation()
    assert not [r for r in evaluate_spec(load_spec(path), obs) if r.status in FAILING]
    path.write_text(SPEC.replace(old, new), encoding="utf-8")
    failed = [r for r in evaluate_spec(load_spec(path), obs) if r.status in FAILING]
    assert [r.entry.id for r in failed] == [failing]
    assert new.split(": ")[1] in failed[0].explain()


def test_an_agreement_field_takes_only_true(tmp_path):
    from harness.load.spec import SpecError

    path = tmp_path / "env.yaml"
    path.write_text(SPEC.replace("same_device_type: true", "same_device_type: cuda"), encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value) == (
        f"{path}:10: tables[0].entries[0]: same_device_type: expected true (every selected "
        "rank has the value most ranks have), got 'cuda'"
    )


def test_a_copy_is_untouched():
    obs = cluster_observation()
    before = copy.deepcopy(obs)
    run(obs, same_torch_version=True, distinct_devices=True)
    assert obs == before
