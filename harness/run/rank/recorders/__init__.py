"""Recorders: what one rank observes during the step, each from torch's own signals.

- :mod:`.phases`: which phase the step is in (setup / zero_grad / unshard / forward / reshard / backward /
  clip_grad_norm / optimizer) and the
  wall time of each; every other recorder reads the current phase from here.
- :mod:`.collectives`: c10d collectives in issue order, from a ``TorchDispatchMode`` (dtype,
  element counts, group, reduce op), with its parts in their own modules: the op table
  (:mod:`.c10d_ops`), argument resolution (:mod:`.c10d_arguments`), hang progress without
  holding any ``Work`` (:mod:`.hang_progress`), attribution to an FSDP unit and hook by
  ``torch.profiler``'s ``FSDP::`` labels (:mod:`.attribution`).
- :mod:`.quiesce`: the settle point before each memory snapshot (the rank's other threads idle).
- :mod:`.memory`: ``FSDPMemTracker`` snapshots per FSDP unit and state, bytes by category.
- :mod:`.params`: the parameter table after ``fully_shard`` and what each unit holds right
  after FSDP's pre-forward and post-forward hooks (the document's Step 0 and Step 11).
- :mod:`.numerics`: the FSDP step against a plain replica with the same weights and inputs.
- :mod:`.events`: FSDP's own event order (its ``FSDP::`` profiler labels with the unit's
  training state) and each unit's reshard/unshard as the harness sees it, per step and
  microbatch.
- :mod:`.updates`: which rows of each shard each step changed, against a single-process
  reference run of the same schedule (its clipping norm and last gradients too).

None of them keeps a torch object (``Work``, tensor, storage) past the call that produced it or
issues a collective (``tests/integration/test_passive_instruments.py``). None of them decides pass or fail: they write
fields of the observation document
(``harness/contract/observation.schema.json``).
"""
