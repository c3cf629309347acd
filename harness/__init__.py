"""FSDP2 conformance harness: spec -> run -> observation -> checks -> report."""
