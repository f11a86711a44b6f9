"""A session as `librarian push` sends it: every string redacted on the laptop, the file still the
agent's format, so the server reads it as a session of its own machine."""

import json

import pytest

from librarian_dagster.core.push.bundle import redacted_json_text
from librarian_dagster.core.redaction.scan import redact
from tests.core.test_redaction import SECRETS_DEV

SAMPLES = [json.loads(line) for line in SECRETS_DEV.read_text(encoding="utf-8").splitlines()]
SAMPLES = [s for s in SAMPLES if s["secrets"]]  # the `none` lines hold none
CAUGHT = [s for s in SAMPLES if all(x not in redact(s["text"])[0] for x in s["secrets"])]


def test_the_pipeline_catches_most_of_the_samples_so_this_test_says_something():
    assert len(CAUGHT) >= len(SAMPLES) * 0.7


@pytest.mark.parametrize("sample", CAUGHT, ids=lambda s: s["id"])
def test_what_the_pipeline_catches_never_leaves_the_laptop_wherever_it_sits(sample):
    """In a prompt, deep in a tool's input, as a line's bare string, or a line that is not JSON."""
    text = sample["text"]
    record = {"type": "user", "sessionId": "s1", "message": {"content": [{"text": text}]}}
    tool = {"type": "assistant", "message": {"content": [{"input": {"command": [text]}}]}}
    raw = text.replace("\n", " ")  # a line of its own that is not JSON
    source = "\n".join([json.dumps(record), "", json.dumps(tool), json.dumps(text), raw, ""])
    sent, found = redacted_json_text(source, lines=True)
    assert found >= 4
    for secret in sample["secrets"]:
        assert secret not in sent
    lines = sent.split("\n")
    assert len(lines) == 6 and lines[1] == "" and lines[5] == ""
    kept = json.loads(lines[0])
    assert kept["sessionId"] == "s1" and kept["type"] == "user"  # names and ids stay
    assert "[REDACTED:" in kept["message"]["content"][0]["text"]
    assert isinstance(json.loads(lines[3]), str)  # still a JSON line


def test_a_json_document_stays_one_and_clean_text_is_unchanged():
    doc = {"sessionId": "g1", "messages": [{"content": "plain words about the flag parser"}]}
    sent, found = redacted_json_text(json.dumps(doc), lines=False)
    assert found == 0 and json.loads(sent) == doc
    lines = '{"a":"plain"}\nnot json at all\n'
    assert redacted_json_text(lines, lines=True) == (lines, 0)


def test_a_copilot_session_goes_with_its_name_from_workspace_yaml(tmp_path):
    import shutil

    from librarian_dagster.core.capture.readers import READERS, parse_session
    from librarian_dagster.core.capture.uploads import stage
    from librarian_dagster.core.push.bundle import content_sha256, redacted_files
    from tests.test_push import FIXTURES

    root = tmp_path / "session-state"
    shutil.copytree(FIXTURES / "copilot" / "session-state", root)
    (files,) = [s for s in READERS["copilot"].discover(root) if s.main.name == "events.jsonl"]
    sent, _ = redacted_files(files, root)
    assert sorted(f.name.rsplit("/", 1)[-1] for f in sent) == ["events.jsonl", "workspace.yaml"]
    here = parse_session(files)
    staged = stage(tmp_path / "up", "copilot", files.session_id, sent,
                   content_sha256("copilot", files.session_id, sent))  # fmt: skip
    there = parse_session(staged)
    assert here.title and there.title == here.title
