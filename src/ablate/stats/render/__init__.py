"""Rendering an `Analysis`, which computes nothing: the claims tables (`claims`), the console summary
(`console`), report.md (`markdown`), figures (`figures`), and the files of a report (`report`)."""
