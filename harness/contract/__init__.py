"""The contract every other layer builds on, torch-free: the names a run writes (:mod:`.names`:
phases, memory states and categories, collective ops, backends), the observation document and
its schema (:mod:`.observation`), and the closed-form formulas of FSDP2's shards, buffers and
ring bytes (:mod:`.calculator`), and the CPUs a run may use (:mod:`.machine`)."""
