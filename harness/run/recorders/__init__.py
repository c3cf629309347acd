"""Recorders: what one rank observes during the step, each from torch's own signals.

- :mod:`.phases`: which phase the step is in (setup / zero_grad / unshard / forward / reshard / backward /
  clip_grad_norm / optimizer) and the
  wall time of each; every other recorder reads the current phase from here.
- :mod:`.collectives`: c10d collectives in issue order, from a ``TorchDispatchMode`` (dtype,
  element counts, group), attributed to an FSDP unit and hook by ``torch.profiler``'s
  ``FSDP::`` labels.
- :mod:`.memory`: ``FSDPMemTracker`` snapshots per FSDP unit and state, bytes by category.
- :mod:`.params`: the parameter table after ``fully_shard`` and what each unit holds right
  after FSDP's pre-forward and post-forward hooks (the document's Step 0 and Step 11).
- :mod:`.numerics`: the FSDP step against a plain replica with the same weights and inputs.
- :mod:`.events`: FSDP's own event order (its ``FSDP::`` profiler labels with the unit's
  training state) and each unit's reshard/unshard as the harness sees it, per step and
  microbatch.
- :mod:`.updates`: which rows of each shard each step changed, against a single-process
  reference run of the same schedule (its clipping norm and last gradients too).

None of them decides pass or fail: they write fields of the observation document
(``harness/contract/observation.schema.json``).
"""
