"""The report's stages, each a small result of its own: conditions, summary (and robust aggregates),
comparisons, curves, mechanisms; `analysis` runs them all (and the claims) into one `Analysis`.
`settings` holds the knobs they share."""
