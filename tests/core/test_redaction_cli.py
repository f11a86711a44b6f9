"""`librarian redact`: stdin to stdout, findings (never values) on stderr or in the JSON."""

import io
import json
import sys

from librarian_dagster.cli.main import main

AWS = "AKIA" + "QWERTY234567ASDFGH"[:16]


def _run(argv: list[str], data: bytes, monkeypatch, capsys) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_redact_text_mode(monkeypatch, capsys):
    code, out, err = _run(["redact"], f"id={AWS}\n".encode(), monkeypatch, capsys)
    assert code == 0
    assert out == "id=[REDACTED:aws_access_key_id]\n"
    assert "aws_access_key_id at 3-23" in err
    assert AWS not in out + err


def test_redact_json_mode_and_bad_bytes(monkeypatch, capsys):
    code, out, err = _run(["redact", "--json"], b"\xff " + AWS.encode(), monkeypatch, capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["findings"] == [{"family": "aws_access_key_id", "start": 2, "end": 22}]
    assert AWS not in out + err


def test_parse_cli_reports_stats_and_skip_reason(tmp_path, capsys):
    sid = "11111111-2222-3333-4444-555555555555"
    rec = {
        "type": "user",
        "uuid": "u1",
        "sessionId": sid,
        "cwd": "/x/app",
        "timestamp": "2026-01-01T00:00:00Z",
        "message": {"role": "user", "content": f"my key is {AWS}"},
    }
    (tmp_path / f"{sid}.jsonl").write_text(json.dumps(rec) + "\n{broken\n", encoding="utf-8")
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert main(["parse", "--json", str(tmp_path)]) == 0
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_id = {r["session_id"]: r for r in reports}
    rep = by_id[sid]
    assert rep["records_by_type"] == {"user": 1}
    assert rep["malformed_lines"] == 1
    assert rep["redactions"] == {"aws_access_key_id": 1}
    assert rep["project"] == "app"
    assert by_id["empty"]["skip_reason"] == "empty file"
    assert AWS not in json.dumps(reports)
    assert main(["parse", str(tmp_path / f"{sid}.jsonl")]) == 0
    text = capsys.readouterr().out
    assert "malformed:    1" in text and "aws_access_key_id=1" in text
