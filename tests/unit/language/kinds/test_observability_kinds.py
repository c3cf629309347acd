"""The observability vocabulary of issue 23 measured on hand-written observations: param_state at
the new points (after a fully_shard call, backward hooks, loop points) with step_index and
microbatch, the FSDP label chain of collectives, buffers, pinned and finite parameters, and
numerics' non-finite counts. The real runs are the shipped specs (param_states_through_a_step,
between_fully_shard_calls, fsdp_label_chains, meta_init_without_repair, cpu_offload)."""

from __future__ import annotations

from harness.judge.checks import check
from harness.language.entry import make_entry


def run(kind: str, obs, /, **values):
    entry = make_entry(kind, values, id="e", says="", section="S", table="t", spec="specs/x.yaml", line=1)
    return check(entry, obs)


def _row(fqn, dtensor, shape, full):
    return {
        "fqn": fqn,
        "is_dtensor": dtensor,
        "shape": shape,
        "full_shape": full,
        "placements": ["Shard(dim=0)"] if dtensor else [],
        "device": "cpu",
        "dtype": "float32",
    }


def _obs() -> dict:
    """Two units (layers.0 with a, b; the root with c), 2 ranks' worth on one rank, calls layers.0 then root."""
    params = [
        {
            "fqn": f,
            "unit": u,
            "full_shape": [4, 2],
            "local_shape": [2, 2],
            "numel": 8,
            "local_numel": 4,
            "dtype": "float32",
            "element_size": 4,
            "is_dtensor": True,
            "placements": ["Shard(dim=0)"],
            "mesh_dim_names": ["dp"],
        }
        for f, u in (("layers.0.a", "layers.0"), ("layers.0.b", "layers.0"), ("c", ""))
    ]

    def state(unit, point, step, mb, dtensor, grad, fqns):
        return {
            "unit": unit,
            "point": point,
            "step_index": step,
            "microbatch": mb,
            "bytes": 16 * len(fqns) if dtensor else 32 * len(fqns),
            "params": [
                {
                    "fqn": f,
                    "is_dtensor": dtensor,
                    "shape": [2, 2] if dtensor else [4, 2],
                    "dtype": "float32",
                    "placements": ["Shard(dim=0)"] if dtensor else [],
                    "device": "cpu",
                    "grad": grad,
                }
                for f in fqns
            ],
        }

    layer = ["layers.0.a", "layers.0.b"]
    rank = {
        "rank": 0,
        "params": params,
        "buffers": [{"fqn": "rotary_emb.inv_freq", "shape": [8], "dtype": "float32", "device": "cpu", "finite": False}],
        "param_states": [
            state("layers.0", "pre_backward", 0, 0, False, False, layer),
            state("layers.0", "post_backward", 0, 0, True, True, layer),
            state("layers.0", "after_zero_grad", 1, None, True, False, layer),
            state("layers.0", "pre_backward", 1, 0, False, False, layer),
            state("layers.0", "post_backward", 1, 0, True, True, layer),
        ],
        "fully_shard_calls": {
            "before": [_row(f, False, [4, 2], [4, 2]) for f in ("layers.0.a", "layers.0.b", "c")],
            "calls": [
                {"unit": "layers.0", "changed": [_row(f, True, [2, 2], [4, 2]) for f in layer]},
                {"unit": "", "changed": [_row("c", True, [2, 2], [4, 2])]},
            ],
        },
        "collectives": [],
    }
    return {
        "fsdp_units": [
            {"name": "layers.0", "role": "layer", "layer": 0, "params": layer},
            {"name": "", "role": "root", "layer": None, "params": ["c"]},
        ],
        "ranks": [rank],
    }


def test_after_a_fully_shard_call_earlier_calls_hold_and_later_ones_not_yet():
    obs = _obs()
    assert run("param_state", obs, layer=0, point="after_fully_shard", call="layers.0", dtensors=2, bytes=32).ok
    after_first = run("param_state", obs, unit="root", point="after_fully_shard", call="layers.0", plain_tensors=1)
    assert (
        after_first.ok
        and run(
            "param_state",
            obs,
            unit="root",
            point="after_fully_shard",
            call="layers.0",
            full_shapes=True,
            bytes=32,
            placements=[],
        ).ok
    )
    assert run("param_state", obs, unit="root", point="after_fully_shard", call="root", dtensors=1, bytes=16).ok
    wrong = run("param_state", obs, unit="root", point="after_fully_shard", call="layers.0", dtensors=1)
    assert not wrong.ok and "expected 1" in wrong.explain()


def test_a_call_the_rank_did_not_make_is_an_error_naming_the_calls():
    obs = _obs()
    obs["ranks"][0]["fully_shard_calls"]["calls"].pop()  # the root's call never happened (an error before it)
    r = run("param_state", obs, unit="root", point="after_fully_shard", call="root", dtensors=1)
    assert not r.ok and "no fully_shard call of unit 'root'; calls: ['layers.0']" in r.explain()


def test_step_index_and_microbatch_choose_the_states():
    obs = _obs()
    assert run("param_state", obs, layer=0, point="post_backward", with_grad=2, dtensors=2).ok  # both steps agree
    assert run("param_state", obs, layer=0, point="after_zero_grad", step_index=1, with_grad=0).ok
    r = run("param_state", obs, layer=0, point="after_zero_grad", step_index=0, with_grad=0)
    assert not r.ok and "no param state at 'after_zero_grad'" in r.explain() and "step_index 0" in r.explain()
    obs["ranks"][0]["param_states"][4]["params"][0]["grad"] = False  # step 1's post-backward lost one gradient
    r = run("param_state", obs, layer=0, point="post_backward", with_grad=2)
    assert not r.ok and "[2, 1]" in r.explain()
    assert run("param_state", obs, layer=0, point="post_backward", step_index=0, microbatch=0, with_grad=2).ok


def test_label_chain_is_the_common_chain_or_each_one():
    obs = _obs()
    chain = ["FSDP::pre_forward (layers.0)", "FSDP::all_gather (layers.0)"]

    def c(labels, unit="layers.0"):
        return {
            "op": "all_gather",
            "unit": unit,
            "phase": "forward",
            "fsdp_labels": labels,
            "buffer_bytes": 8,
            "group_size": 2,
            "step_index": 0,
            "microbatch": 0,
        }

    obs["ranks"][0]["collectives"] = [c(chain), c(chain), c([], None)]
    assert run("collectives", obs, select={"unit": "layers.0"}, fsdp_labels=chain, count=2).ok
    joined = "FSDP::pre_forward (layers.0) > FSDP::all_gather (layers.0)"
    assert run("collectives", obs, select={"phase": "forward"}, label_chains=[joined, joined, "-"]).ok
    r = run("collectives", obs, select={"phase": "forward"}, fsdp_labels=chain)  # the third has no chain
    assert not r.ok


def test_buffer_and_a_missing_one():
    obs = _obs()
    assert run("buffer", obs, fqn="rotary_emb.inv_freq", shape=[8], finite=False).ok
    r = run("buffer", obs, fqn="model.rotary_emb.inv_freq", finite=False)
    assert not r.ok and "buffers: ['rotary_emb.inv_freq']" in r.explain()


def test_pinned_and_finite_parameters_and_nonfinite_numerics():
    obs = _obs()
    obs["ranks"][0]["params"][2].update(pinned=False, grad_pinned=None, finite=False)
    assert run("param", obs, fqn="c", pinned=False, grad_pinned=None, finite=False).ok
    assert not run("param", obs, fqn="c", finite=True).ok
    obs["ranks"][0]["numerics"] = {
        "replica_dtype": "float32",
        "forward_output": {"max_abs_diff": float("nan"), "max_abs_ref": 1.0, "nonfinite": 16},
        "loss": {"max_abs_diff": float("nan"), "max_abs_ref": 1.0, "nonfinite": 1},
        "grads": [
            {"fqn": "c", "max_abs_diff": float("nan"), "max_abs_ref": 1.0, "nonfinite": 4},
            {"fqn": "layers.0.a", "max_abs_diff": 0.0, "max_abs_ref": 1.0, "nonfinite": 0},
        ],
    }
    assert run("numerics", obs, forward_nonfinite=16, loss_nonfinite=1, grads_nonfinite=1, grads_count=2).ok
    assert not run("numerics", obs, grads_nonfinite=2).ok
