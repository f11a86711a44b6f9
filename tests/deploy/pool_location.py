"""A code location for tests/deploy/test_production_instance.py: one op in pool `llm`.

It stands for the digest's LLM call: it holds its `llm` slot until the test releases it, and
records which other runs were inside the same op when it began.
"""

import time
from pathlib import Path

import dagster as dg

RELEASE = "release"


class Markers(dg.Config):
    folder: str


@dg.op(pool="llm")
def call_llm(context: dg.OpExecutionContext, config: Markers) -> None:
    folder = Path(config.folder)
    me = context.run_id
    # Written before looking at the others: of two ops that start together, one sees the other.
    (folder / f"{me}.started").write_text("", encoding="utf-8")
    inside = [
        p.stem
        for p in folder.glob("*.started")
        if p.stem != me and not (folder / f"{p.stem}.done").exists()
    ]
    (folder / f"{me}.overlap").write_text(",".join(inside), encoding="utf-8")
    deadline = time.monotonic() + 600
    while not (folder / RELEASE).exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the test never released the op")
        time.sleep(0.2)
    (folder / f"{me}.done").write_text("", encoding="utf-8")


@dg.job
def llm_job():
    call_llm()


defs = dg.Definitions(jobs=[llm_job])
