"""The harness on Qwen3 MoE models (issue 24): a config named once, built by its type, drafted
from a transformers-written qwen3_moe config.json and run green on real ranks and on the fake
backend."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.judge.evaluate import FAILING, evaluate_spec
from harness.load.spec import load_spec
from tests.support import REPO


@pytest.fixture(scope="module")
def hf():
    return pytest.importorskip("transformers")


def _moe_config_json(hf, folder: Path) -> Path:
    """A small Qwen3 MoE config.json as transformers 5 writes it: ``num_local_experts``, no
    ``head_dim`` (64 / 4 heads = 16), ``rope_parameters``, ``dtype``."""
    hf.Qwen3MoeConfig(
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=96,
        num_hidden_layers=2,
        vocab_size=100,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
        dtype="float32",
    ).save_pretrained(str(folder))
    return folder / "config.json"


def _draft(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "drafted.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "draft", *args, "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return out


def test_build_dispatches_on_the_config_type():
    torch = pytest.importorskip("torch")
    import model
    from harness.load.setup import RunSetup
    from harness.run.rank.build import build_model

    for name, body, cls in [
        ("moe-tiny", "decoder_layers", model.Qwen3MoeDecoderStack),
        ("moe-tiny", "causal_lm", model.Qwen3MoeForCausalLM),
        ("walkthrough", "decoder_layers", model.Qwen3DecoderStack),
        ("walkthrough", "causal_lm", model.Qwen3ForCausalLM),
    ]:
        setup = RunSetup.from_mapping({"model": {"config": name, "body": body}})
        built = build_model(setup, model.get_config(name), torch.float32, torch.device("meta"), init=False)
        assert type(built) is cls, (name, body)  # exactly: the MoE classes subclass the dense ones
    sparse = build_model(
        RunSetup.from_mapping({"model": {"config": "moe-tiny"}}),
        model.get_config("moe-tiny"),
        torch.float32,
        torch.device("meta"),
        init=False,
    )
    assert "layers.0.mlp.experts.gate_up_proj" in dict(sparse.named_parameters())


def test_spec_loading_knows_the_sparse_layer_names(tmp_path):
    """A spec naming a MoE config selects its experts and router and its Step 9 at load."""
    spec = load_spec(REPO / "specs" / "moe_tiny_4_ranks.yaml")
    assert spec.items
    bad = (
        (REPO / "specs" / "moe_tiny_4_ranks.yaml")
        .read_text()
        .replace("[mlp.gate.weight, [8, 64], 512]", "[mlp.gate.wieght, [8, 64], 512]")
    )
    path = tmp_path / "bad.yaml"
    path.write_text(bad)
    with pytest.raises(Exception, match="mlp.gate.wieght"):
        load_spec(path)
    dense = bad.replace("config: moe-tiny", "config: walkthrough").replace("mlp.gate.wieght", "mlp.gate.weight")
    path.write_text(dense)  # a dense model's layers have no router or experts
    with pytest.raises(Exception, match="'mlp.experts.gate_up_proj' is not the name of a parameter"):
        load_spec(path)


def test_drafted_moe_spec_has_the_experts_and_the_router(hf, tmp_path):
    from harness import calculator as calc
    from harness.author.draft import draft
    from model.config import read_config_file

    config = _moe_config_json(hf, tmp_path / "moe")
    _, spec = draft(str(config), 16, output=str(tmp_path / "drafted.yaml"))
    assert spec["backend"] == "fake" and spec["setup"]["model"]["dtype"] == "float32"
    rows = {e["param"]: e for t in spec["tables"] if t["title"] == "parameter list" for e in t["entries"]}
    assert rows["mlp.experts.gate_up_proj"]["full_shape"] == [8, 32, 64]
    assert rows["mlp.experts.down_proj"]["full_shape"] == [8, 64, 16]
    assert rows["mlp.gate.weight"]["full_shape"] == [8, 64] and "mlp.gate_proj.weight" not in rows
    shards = [e for t in spec["tables"] if t["title"] == "shard per rank" for e in t["entries"]]
    empty = next(e for e in shards if e["param"] == "mlp.experts.gate_up_proj" and e["ranks"] == [15])
    assert empty["local_shape"] == [0, 32, 64]  # 8 experts on 16 ranks: rank 15 holds none
    steps = {e["step"]: e for t in spec["tables"] if t["check"] == "step" for e in t["entries"]}
    assert steps["step9.router_logits"]["shape"] == [16, 8] and steps["step9.topk_indices"]["dtype"] == "int64"
    assert "step9.gate" not in steps
    assert load_spec(_write(tmp_path, spec)).items  # the drafted spec loads (its config path relative to it)
    tables = calc.layer_tables(calc.to_dims(read_config_file(config).config), 16, storage_dtype="float32")
    ag = next(e for t in spec["tables"] for e in t["entries"] if e.get("id") == "forward_all_gather")
    assert ag["numel_out"] == tables.padded_numel


def _write(tmp_path: Path, spec: dict) -> Path:
    from harness.author.draft import to_yaml

    path = tmp_path / "drafted.yaml"  # where draft(output=...) was told it would be written
    path.write_text(to_yaml([], spec))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("world, backend", [(4, "gloo"), (16, "fake")])
def test_drafted_spec_from_a_transformers_qwen3_moe_config_json_runs_green(
    hf, tmp_path, spec_observation, world, backend
):
    config = _moe_config_json(hf, tmp_path)
    path = _draft(tmp_path, "--config", str(config), "--world-size", str(world))
    spec = load_spec(path)
    assert spec.raw["setup"]["model"]["config"] == "config.json"
    assert spec.setup.model.config["num_experts"] == 8  # the file's fields, num_local_experts read as num_experts
    assert spec.items and all(item.drafted for item in spec.items)
    results = evaluate_spec(spec, spec_observation(spec))
    assert [r.explain() for r in results if r.status in FAILING] == []
    assert {r.status for r in results} == {"pass"}
    assert yaml.safe_load(path.read_text())["setup"]["mesh"]["shape"] == [world]
    assert spec_observation(spec)["environment"]["backend"] == backend


def test_the_aux_loss_is_transformers_and_its_router_gradients_are_the_models():
    """harness/run/rank/aux_loss.py against model.Qwen3MoeForCausalLM.forward_moe (itself checked
    against transformers in tests/unit/model/test_model_moe.py): same loss, same router gradients."""
    torch = pytest.importorskip("torch")
    import model
    from harness.run.rank.aux_loss import RouterAuxLoss, with_router_aux_loss
    from harness.run.rank.step_plan import loss_function

    config = model.get_config("moe-tiny", output_router_logits=True, router_aux_loss_coef=0.5)
    base = loss_function("cross_entropy")
    assert with_router_aux_loss(base, model.get_config("moe-tiny")) is base  # the switch is off by default
    assert with_router_aux_loss(base, model.get_config("walkthrough")) is base
    ids = torch.randint(0, config.vocab_size, (2, 8), generator=torch.Generator().manual_seed(0))
    lm = model.init_weights(model.Qwen3MoeForCausalLM(config), generator=torch.Generator().manual_seed(1))
    reference = lm.forward_moe(ids, labels=ids)
    assert reference.aux_loss is not None and float(reference.aux_loss.detach()) > 0
    reference.loss.backward()
    router_grads = [lm.get_parameter(f"model.layers.{i}.mlp.gate.weight").grad.clone() for i in range(2)]
    lm.zero_grad(set_to_none=True)

    loss_fn = with_router_aux_loss(base, config)
    assert isinstance(loss_fn, RouterAuxLoss)
    with torch.no_grad():  # a forward that builds no graph leaves nothing to balance
        assert torch.equal(loss_fn(lm(ids), ids), base(lm(ids), ids))
    loss = loss_fn(lm(ids), ids)
    torch.testing.assert_close(loss, reference.loss, rtol=0, atol=1e-6)
    with torch.no_grad():
        assert not torch.allclose(loss, base(lm(ids), ids))  # the auxiliary term is in it
    loss.backward()
    for i, expected in enumerate(router_grads):
        torch.testing.assert_close(
            lm.get_parameter(f"model.layers.{i}.mlp.gate.weight").grad, expected, rtol=1e-5, atol=1e-7
        )
    loss_fn.remove()


def test_experts_kind_measures_held_tokens_and_zero_rows():
    from harness.language.kinds.experts import KIND
    from harness.language.observed import CheckError

    def rank(r, held, counts, zero):
        return {
            "rank": r,
            "experts": {
                "shards": [
                    {
                        "layer": 0,
                        "param": "mlp.experts.gate_up_proj",
                        "fqn": "layers.0.mlp.experts.gate_up_proj",
                        "placements": ["Shard(dim=0)"],
                        "shard_dim": 0,
                        "num_experts": 4,
                        "experts": held,
                    }
                ],
                "tokens": [{"layer": 0, "step_index": 0, "microbatch": 0, "counts": counts}],
                "zero_grad_rows": [
                    {
                        "layer": 0,
                        "param": "mlp.experts.gate_up_proj",
                        "step_index": 0,
                        "microbatch": 0,
                        "experts": held,
                        "zero_rows": zero,
                    }
                ],
            },
        }

    obs = {
        "environment": {"world_size": 2},
        "ranks": [rank(0, [0, 1], [2, 0, 0, 0], [1]), rank(1, [2, 3], [0, 0, 1, 1], [])],
    }
    got = KIND.measure({"layer": 0}, obs)
    assert got[0] == {
        "held": [0, 1],
        "held_count": 2,
        "placements": ["Shard(dim=0)"],
        "tokens": [2, 0, 0, 0],
        "tokens_total": 2,
        "unrouted_here": 3,
        "unrouted_anywhere": 1,
        "zero_grad_rows": [1],
        "zero_grad_rows_are_unrouted": True,
    }
    assert got[1]["zero_grad_rows_are_unrouted"] is True and got[1]["unrouted_here"] == 2
    obs["ranks"][1]["experts"]["zero_grad_rows"][0]["zero_rows"] = [3]  # a routed expert with a zero row
    assert KIND.measure({"layer": 0}, obs)[1]["zero_grad_rows_are_unrouted"] is False
    simulated = {"environment": {"world_size": 2}, "ranks": [rank(0, [], None, None)]}
    assert "tokens_total" not in KIND.measure({"layer": 0}, simulated)[0]  # fake tensors: no counts
    with pytest.raises(CheckError, match="no sparse MoE layer"):
        KIND.measure({"layer": 0}, {"environment": {}, "ranks": [{"rank": 0}]})
