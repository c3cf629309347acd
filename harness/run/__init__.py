"""Run: launch ranks (local, joined under torchrun, or simulated), run the FSDP2 step, record the observation."""
