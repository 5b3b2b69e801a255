"""The statistics, pure: intervals, sequential boundaries, multiplicity, power, the exact tests' level, rates and
the verdict rules. Functions of numbers and arrays; nothing here imports any other part of ablate."""
