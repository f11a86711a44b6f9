"""Leak-check tests: the shared secrets eval and hand-picked look-alikes."""

import json
from pathlib import Path

from librarian_dagster.core.redaction import find_secrets, redact

SECRETS_DEV = Path("/work/shared/eval/secrets-dev.jsonl")


def _cases() -> list[dict]:
    with SECRETS_DEV.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_secrets_dev_every_secret_gone():
    leaked = []
    for case in _cases():
        out, _ = redact(case["text"])
        for secret in case["secrets"]:
            if secret in out:
                leaked.append(case["id"])
            assert "[REDACTED:" in out
    assert leaked == []


def test_secrets_dev_every_negative_unchanged():
    changed = [c["id"] for c in _cases() if not c["secrets"] and redact(c["text"])[0] != c["text"]]
    assert changed == []


def test_redaction_idempotent_on_eval():
    for case in _cases():
        once, _ = redact(case["text"])
        assert redact(once) == (once, [])


def test_findings_hold_positions_not_values():
    text = "key AKIAV6QXVVHSP5I9GUC0 end"
    (finding,) = find_secrets(text)
    assert finding.family == "aws_access_key_id"
    assert text[finding.start : finding.end] == "AKIAV6QXVVHSP5I9GUC0"
    assert "AKIA" not in repr(finding)
