"""What a run's numbers are, per run: per-prompt metric blocks (`blocks`), steps to reach a target
(`reach`) and the tidy values table the claims are decided on (`table`)."""
