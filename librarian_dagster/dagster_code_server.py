"""`python -m librarian_dagster.dagster_code_server api grpc ARGS`: `dagster api grpc ARGS` as
`librarian up` runs it, Dagster imported with the collector off (`imports_uncollected`).

The run workers it starts (multiprocessing's spawn) import this module first, as the parent's
main module, so theirs is too; the definitions they load take care of their own
(definitions.py)."""

import runpy

from librarian_dagster.core.commandline import imports_uncollected

with imports_uncollected():
    import dagster  # noqa: F401

if __name__ == "__main__":
    # `python -m dagster` itself, which reads sys.argv.
    runpy.run_module("dagster", run_name="__main__")
