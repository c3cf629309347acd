"""``environment``: the ranks agree on what they run (torch, device type, versions, variables)
and are laid out as the cluster should be (ranks per host and per node, one device per rank).

Reads each rank's ``environment`` (``harness/run/rank/recorders/environment.py``). Agreement fields
(``same_*``) hold on a rank whose value is the one most ranks have (ties: the lowest rank's);
on a rank that differs, the observed value says what it has and what the others have, and on
which hosts, e.g. ``torch 2.12.0 on node-b; ranks 0-5 (node-a, node-c) have 2.13.0``. Layout
fields count over the whole world, whatever ranks the entry selects. A simulated run records
no environment: its entries are skipped.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Mapping

from harness.language.kinds.common import RANKS
from harness.language.observed import CheckError, NotMeasured, rank_docs, ranks_on_hosts
from harness.language.vocabulary import COUNT, TEXT, CheckKind, Field, Reads, ValueType, one_of

AGREES = ValueType(
    "agreement",
    "true (every selected rank has the value most ranks have)",
    lambda e: e.form == "exact" and e.value is True,
)

_AGREEMENT: dict[str, tuple[str, Callable[[Mapping[str, Any]], Any]]] = {
    "same_torch_version": ("torch", lambda e: e["torch_version"]),
    "same_python_version": ("python", lambda e: e.get("python_version")),
    "same_backend": ("backend", lambda e: e["backend"]),
    "same_device_type": ("device type", lambda e: e["device_type"]),
    "same_device_name": ("device", lambda e: e["device_name"]),
    "same_cuda_version": ("CUDA", lambda e: e.get("cuda_version")),
    "same_nccl_version": ("NCCL", lambda e: e.get("nccl_version")),
    "same_variables": ("variables", lambda e: _show_variables(e.get("variables", {}))),
}


def _show_variables(variables: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(variables.items())) or "none set"


def _device_id(env: Mapping[str, Any]) -> str:
    """A CUDA device's identity on its host: UUID, else PCI bus id, else its index."""
    return env.get("device_uuid") or env.get("device_pci_bus_id") or f"cuda:{env.get('device_index')}"


def _agreement(what: str, values: dict[int, Any], hosts: dict[int, str]) -> dict[int, Any]:
    """Per rank: True when its value is the majority's, else the text of the difference."""
    counts = Counter(values.values())
    top = max(counts.values())
    majority = next(v for r, v in sorted(values.items()) if counts[v] == top)
    agreeing = [r for r, v in values.items() if v == majority]
    out: dict[int, Any] = {}
    for rank, value in values.items():
        out[rank] = (
            True
            if value == majority
            else (f"{what} {value} on {hosts[rank]}; ranks {ranks_on_hosts(agreeing, hosts)} have {majority}")
        )
    return out


def measure(sel, obs):
    world = obs["ranks"]
    if obs["environment"]["simulated"]:
        reason = NotMeasured("a simulated run (fake backend) has no per-rank host or device")
        return {doc["rank"]: {f.name: reason for f in KIND.fields} for doc in rank_docs(obs, sel.get("ranks"))}
    missing = [r["rank"] for r in world if not r.get("environment")]
    if missing:
        raise CheckError(f"ranks {missing} recorded no environment")
    envs = {r["rank"]: r["environment"] for r in world}
    hosts = {r: e["host"] for r, e in envs.items()}
    per_host = Counter(hosts.values())
    per_node = Counter(e["node_rank"] for e in envs.values())
    agreement = {
        name: _agreement(what, {r: get(e) for r, e in envs.items()}, hosts) for name, (what, get) in _AGREEMENT.items()
    }
    devices: dict[tuple[str, str], list[int]] = {}
    for r, e in envs.items():
        if e["device_type"] == "cuda":
            devices.setdefault((e["host"], _device_id(e)), []).append(r)
    out = {}
    for doc in rank_docs(obs, sel.get("ranks")):
        r = doc["rank"]
        e = envs[r]
        values: dict[str, Any] = {
            "torch_version": e["torch_version"],
            "device_type": e["device_type"],
            "hosts": len(per_host),
            "nodes": len(per_node),
            "ranks_per_host": per_host[e["host"]],
            "ranks_per_node": per_node[e["node_rank"]],
        }
        values.update({name: agreement[name][r] for name in _AGREEMENT})
        if e["device_type"] != "cuda":
            values["distinct_devices"] = NotMeasured(
                f"runs on {e['device_type']}: ranks on CPU share the host's cores, devices per rank apply to CUDA"
            )
        else:
            sharing = [o for o in devices[(e["host"], _device_id(e))] if o != r]
            values["distinct_devices"] = (
                True
                if not sharing
                else (
                    f"shares {_device_id(e)} with rank{'s' if len(sharing) > 1 else ''} "
                    f"{', '.join(map(str, sharing))} on {e['host']}"
                )
            )
        out[r] = values
    return out


KIND = CheckKind(
    name="environment",
    order=170,
    reads=(Reads("environment"), Reads("rank_environment")),
    doc="where each rank runs: the ranks agree on torch, device type and versions; ranks per host and node; "
    "one device per rank",
    selectors=(RANKS,),
    fields=(
        Field("same_torch_version", AGREES, "the rank runs the torch version most ranks run"),
        Field("same_python_version", AGREES, "the rank runs the Python version most ranks run"),
        Field("same_backend", AGREES, "the rank's process group backend is the one most ranks use"),
        Field("same_device_type", AGREES, "the rank's device type (cpu, cuda) is the one most ranks have"),
        Field("same_device_name", AGREES, "the rank's device model (GPU or CPU name) is the one most ranks have"),
        Field("same_cuda_version", AGREES, "torch.version.cuda is the one most ranks have"),
        Field("same_nccl_version", AGREES, "torch.cuda.nccl.version() is the one most ranks have"),
        Field(
            "same_variables", AGREES, "the NCCL_*, TORCH_NCCL_* and GLOO_* variables set are the ones most ranks have"
        ),
        Field(
            "distinct_devices",
            AGREES,
            "no other rank on the rank's host uses its GPU (UUID, else PCI bus id); not measured on CPU",
        ),
        Field("torch_version", TEXT, "torch.__version__ on the rank"),
        Field("device_type", one_of("device type", ("cpu", "cuda")), "the rank's device type"),
        Field("hosts", COUNT, "distinct host names in the world"),
        Field("nodes", COUNT, "launcher nodes in the world (torchrun agents; 1 for the local launcher)"),
        Field("ranks_per_host", COUNT, "ranks on the rank's host"),
        Field("ranks_per_node", COUNT, "ranks started by the rank's launcher node (torchrun's --nproc-per-node)"),
    ),
    measure=measure,
)
