"""The run setup: everything the harness needs to reproduce one FSDP2 training step.

A spec's ``setup:`` mapping (already validated by ``harness/schemas/spec.schema.json``)
becomes a :class:`RunSetup`. Defaults follow the walkthrough document's setup code
(section "FSDP2 设置"): ``fully_shard`` on every decoder layer, then on the root, over a
1-D mesh named ``dp``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from harness.load.schedule import Schedule

DTYPES = ("float16", "bfloat16", "float32")


class SetupError(ValueError):
    """A ``setup:`` mapping the schema accepts but the harness cannot run.

    Attributes:
        key_path: where, as a spec key path (``setup.mesh.dim_names``).
        message: what was expected (without the key path).
        errors: every problem found, as (key_path, message) pairs; the first is the one above.
    """

    def __init__(self, key_path: str, message: str, errors: list[tuple[str, str]] | None = None):
        self.key_path, self.message = key_path, message
        self.errors = list(errors) if errors else [(key_path, message)]
        super().__init__("\n".join(f"{k}: {m}" for k, m in self.errors))


@dataclass(frozen=True)
class ModelSetup:
    """Which model to build.

    Attributes:
        config: a name in ``model.KNOWN_CONFIGS`` ("walkthrough", "Qwen3-8B", ...) or an
            inline mapping of ``Qwen3Config`` fields.
        overrides: ``Qwen3Config`` fields replacing the named config's (e.g. num_hidden_layers).
        body: "decoder_layers" (the document's focus: N_L decoder layers, input is
            hidden_states [B, L, d]) or "causal_lm" (embed_tokens, layers, norm, lm_head;
            input is token ids [B, L]).
        dtype: dtype the parameters are built in, before ``fully_shard`` (the document: float16);
            not ``MixedPrecisionPolicy.param_dtype``, which is what the all-gather casts to.
    """

    config: str | Mapping[str, Any] = "walkthrough"
    overrides: Mapping[str, Any] = field(default_factory=dict)
    body: str = "decoder_layers"
    dtype: str = "float16"


@dataclass(frozen=True)
class MixedPrecision:
    """``torch.distributed.fsdp.MixedPrecisionPolicy`` fields, as dtype names (None: keep)."""

    param_dtype: str | None = None
    reduce_dtype: str | None = None
    output_dtype: str | None = None
    cast_forward_inputs: bool = True


@dataclass(frozen=True)
class FSDPSetup:
    """How ``fully_shard`` is applied.

    Attributes:
        reshard_after_forward: for the layer units: True, False, or an int (reshard to a
            group of that size after forward).
        root_reshard_after_forward: for the root unit; None passes nothing, so torch's own
            default for the root applies, as in the document's ``fully_shard(model, mesh=mesh)``.
        mixed_precision: None for no ``MixedPrecisionPolicy``.
    """

    reshard_after_forward: bool | int = True
    root_reshard_after_forward: bool | int | None = None
    mixed_precision: MixedPrecision | None = None


@dataclass(frozen=True)
class OptimizerSetup:
    """The optimizer stepped after backward: "sgd" or "adamw", with its learning rate."""

    name: str = "sgd"
    lr: float = 1e-2


@dataclass(frozen=True)
class RunSetup:
    """One FSDP2 training step, fully specified.

    Attributes:
        model: see :class:`ModelSetup`.
        mesh_shape: DeviceMesh shape; (4,) for the document, (2, 2) for HSDP.
        mesh_dim_names: one name per mesh dim; ("dp",) for the document,
            ("dp_replicate", "dp_shard") for HSDP.
        batch_per_rank: B, samples per data-parallel rank (document: 2).
        seq_len: L, tokens per sample (document: 8).
        fsdp: see :class:`FSDPSetup`.
        optimizer: see :class:`OptimizerSetup`.
        seed: seeds weights and the global batch.
        observe_ranks: simulated runs only: which global ranks to record (None: every rank up
            to 8 ranks, else rank 0).
        numerics: compare with a non-sharded replica (real runs; every rank then holds the
            full model, its full gradients and runs one more forward and backward). Off: the
            model is built on the meta device and each rank materializes only its shards
            after fully_shard (values then differ from init_weights'), for models too big to
            hold unsharded on every rank at once. The observation is otherwise the same.
        schedule: the steps to run (``harness.load.schedule``); None: the walkthrough's one
            step (one forward, the body's loss, backward, optimizer step).
    """

    model: ModelSetup = field(default_factory=ModelSetup)
    mesh_shape: tuple[int, ...] = (4,)
    mesh_dim_names: tuple[str, ...] = ("dp",)
    batch_per_rank: int = 2
    seq_len: int = 8
    fsdp: FSDPSetup = field(default_factory=FSDPSetup)
    optimizer: OptimizerSetup = field(default_factory=OptimizerSetup)
    seed: int = 0
    observe_ranks: tuple[int, ...] | None = None
    numerics: bool = True
    schedule: Schedule | None = None

    @property
    def world_size(self) -> int:
        size = 1
        for n in self.mesh_shape:
            size *= n
        return size

    def unit_names(self, num_layers: int) -> tuple[str, ...]:
        """FQNs of the FSDP units this setup creates, in ``fully_shard`` order ("" is the root):
        one per decoder layer, then the root (the document's section "FSDP2 设置")."""
        prefix = "layers" if self.model.body == "decoder_layers" else "model.layers"
        return tuple(f"{prefix}.{i}" for i in range(num_layers)) + ("",)

    @property
    def data_parallel_size(self) -> int:
        """Ranks that each hold distinct samples: every rank of the mesh (FSDP and HSDP)."""
        return self.world_size

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists)."""
        return json.loads(json.dumps(asdict(self)))

    def cache_key(self) -> str:
        """A stable hash of the setup; callers add torch version and backend."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "RunSetup":
        """Build from a spec's ``setup:`` mapping (schema-validated; unknown keys rejected).

        Keys: model {config, overrides, body, dtype}, mesh {shape, dim_names},
        batch_per_rank, seq_len, fsdp {reshard_after_forward, root_reshard_after_forward,
        mixed_precision {param_dtype, reduce_dtype, output_dtype, cast_forward_inputs}},
        optimizer {name, lr}, seed, observe_ranks, numerics, schedule (harness.load.schedule).

        Raises:
            SetupError: naming the key path, for values the schema cannot catch (a mesh whose
                dim names do not match its shape, an observed rank outside the world).
        """
        data = dict(data)
        model = ModelSetup(**data.pop("model", {}))
        mesh = data.pop("mesh", {})
        shape = tuple(mesh.get("shape", (4,)))
        names = tuple(mesh.get("dim_names", ("dp",) if len(shape) == 1 else ()))
        problems: list[tuple[str, str]] = []
        if len(names) != len(shape):
            problems.append(("setup.mesh.dim_names",
                             f"expected {len(shape)} name{'s' if len(shape) != 1 else ''} for shape {list(shape)}, "
                             f"got {list(names)}"))
        fsdp = dict(data.pop("fsdp", {}))
        mp = fsdp.pop("mixed_precision", None)
        fsdp_setup = FSDPSetup(**fsdp, mixed_precision=MixedPrecision(**mp) if mp else None)
        optimizer = OptimizerSetup(**data.pop("optimizer", {}))
        observe = data.pop("observe_ranks", None)
        world = 1
        for n in shape:
            world *= n
        outside = [r for r in (observe or ()) if not 0 <= r < world]
        if outside:
            problems.append(("setup.observe_ranks",
                             f"rank(s) {outside} outside the world: world size {world} (mesh shape {list(shape)}), "
                             f"ranks 0-{world - 1}"))
        schedule = None
        if "schedule" in data:
            schedule, schedule_problems = Schedule.from_mapping(data.pop("schedule") or {})
            problems += schedule_problems
        if problems:
            raise SetupError(*problems[0], errors=problems)
        return cls(
            model=model,
            mesh_shape=shape,
            mesh_dim_names=names,
            fsdp=fsdp_setup,
            optimizer=optimizer,
            observe_ranks=tuple(observe) if observe is not None else None,
            schedule=schedule,
            **data,
        )
