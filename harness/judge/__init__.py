"""Judge: pure checks of (spec entry, observation document) and the spec's gating (torch range, deviations)."""
