"""Library notes mined from what sessions repeat.

Mined, not generated (docs/decisions/0049): a line exists only where sessions agree on the same
words (a failure's line, a command), it cites them, and it sits in the deepest folder that holds
the files they changed, so the PreToolUse hook's walk-up delivers it before an edit there.
`evidence` reads a redacted session; `mining` clusters and scopes; `notes` writes the files and
their diff; `consolidate` puts them together over a store and a checkout.
"""
