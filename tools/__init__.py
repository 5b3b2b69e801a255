"""The repository's own publication machinery, not part of the installable package: what renders and checks
the documents of this repository from its committed reports. Run from the repository root:

    python -m tools.findings [--check]                        # docs/findings.md (and each study's claims section)
    python -m tools.testbed_doc docs/testbed.md [--check]     # docs/testbed.md's tables, from docs/testbed/

`tools.findings` re-decides each published study's claims from its committed files (`tools.confirmatory`: the
third edition's side-by-side table) and `--check` also runs `tools.prose`, the check of numbers typed in the
prose. The tests import them (pytest's `pythonpath` puts the repository root on the path).
"""
