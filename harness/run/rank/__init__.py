"""The rank body: what one rank does once its process group exists, real or simulated
(``step.run_step``). Nothing here imports ``harness.run.launch``; import-linter keeps it so."""
