"""The leak-check: secrets found and replaced before anything is stored, logged or sent.

`scan` is the entry point (`find_secrets`, `redact`, `redact_session`); `rules` holds what each
family of secret looks like, `checks` whether a matched value is one, and `commands` the
passwords given on command lines.
"""
