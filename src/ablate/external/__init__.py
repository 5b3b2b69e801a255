"""Verdicts for runs trained with any trainer (TRL, verl, OpenRLHF, ...): a tidy table of runs read into
ablate's own run records (`tidy`), the readers that turn what trainers write into that table (`tensorboard`,
`trl`, `wandb`, `verl`, `summaries`, one command: `python -m ablate.external.convert`), and the claims of an
external study decided by ablate.stats' own engine (`decide`, `report`). docs/any_runs.md is the guide."""
