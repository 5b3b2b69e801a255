"""A study's declared claims and how they are decided: the declaration (`declared`, the study block in
`study`), the claim types (`claim_types`), the engine that decides them look by look (`engine`), the
registration kept before the first run (`registration`, `block_diff`) and the standing of each claim
against it (`standing`)."""
