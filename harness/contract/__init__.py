"""The contract every other layer builds on, torch-free: the names a run writes (:mod:`.names`:
phases, memory states and categories, collective ops, backends), every field the observation
document holds, declared once (:mod:`.fields`, built of :mod:`.field_tree`), the document and
its schema generated from those declarations (:mod:`.observation`, :mod:`.observation_schema`),
and the CPUs a run may use (:mod:`.machine`). The closed-form formulas of FSDP2's shards, buffers
and ring bytes sit beside it, in :mod:`harness.calculator`."""
