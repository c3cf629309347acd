"""Load: spec YAML (safe loading) -> schema validation -> a RunSetup and entries to check."""
