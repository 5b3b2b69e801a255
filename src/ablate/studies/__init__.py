"""Studies: the commands and documents above both training (ablate.train) and statistics (ablate.stats).

    python -m ablate.studies.register experiment=<study>   # registration, before a study's first run
    python -m ablate.studies.next_look SWEEP_DIR           # continue a study by its seed plan
    python -m ablate.studies.calibrate / calibrate_level   # the engine's error rates, planted
    python -m ablate.studies.probe                         # the testbed probe (docs/testbed.md)

They read what training writes and what ablate.stats decides; nothing below imports them. The repository's own
documents (docs/findings.md, docs/testbed.md) are rendered by its `tools/` (`python -m tools.findings`), which
the package does not ship.
"""
