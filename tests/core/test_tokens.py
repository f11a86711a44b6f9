"""The token file: hashes only, scopes, revocation, and a server's view that follows the file."""

import json
import os

import pytest

from librarian_dagster.core.service import tokens


def test_a_token_is_found_by_its_hash_and_never_stored(tmp_path):
    path = tmp_path / "tokens.json"
    token, entry = tokens.add(path, "laptop")
    assert token.startswith(tokens.TOKEN_PREFIX) and len(token) > 40
    assert token not in path.read_text(encoding="utf-8")
    assert entry.scopes == (tokens.READ,)
    found = tokens.find(tokens.load(path), token)
    assert found is not None and found.name == "laptop"
    assert tokens.find(tokens.load(path), token + "x") is None
    assert tokens.find(tokens.load(path), token[:-1]) is None
    assert os.stat(path).st_mode & 0o077 == 0


def test_the_private_scope_and_unknown_scopes(tmp_path):
    path = tmp_path / "tokens.json"
    _, entry = tokens.add(path, "me", tokens.PRIVATE)
    assert entry.scopes == (tokens.READ, tokens.PRIVATE)
    with pytest.raises(tokens.TokenFileError, match="unknown scope"):
        tokens.add(path, "other", "admin")


def test_two_tokens_never_share_a_hash_or_a_salt(tmp_path):
    path = tmp_path / "tokens.json"
    a, _ = tokens.add(path, "a")
    b, _ = tokens.add(path, "b")
    entries = tokens.load(path)
    assert a != b
    assert entries[0].salt != entries[1].salt and entries[0].digest != entries[1].digest
    assert [e.name for e in entries] == ["a", "b"]
    assert tokens.find(entries, b).name == "b"  # type: ignore[union-attr]


def test_names_are_unique_and_checked(tmp_path):
    path = tmp_path / "tokens.json"
    tokens.add(path, "ci")
    with pytest.raises(tokens.TokenFileError, match="exists"):
        tokens.add(path, "ci")
    for bad in ("", "-x", "a b", "x" * 65, "../etc"):
        with pytest.raises(tokens.TokenFileError, match="bad token name"):
            tokens.add(path, bad)
    assert [e.name for e in tokens.load(path)] == ["ci"]


def test_revoke_removes_only_that_token(tmp_path):
    path = tmp_path / "tokens.json"
    keep, _ = tokens.add(path, "keep")
    gone, _ = tokens.add(path, "gone")
    tokens.revoke(path, "gone")
    entries = tokens.load(path)
    assert tokens.find(entries, gone) is None and tokens.find(entries, keep) is not None
    with pytest.raises(tokens.TokenFileError, match="no token named"):
        tokens.revoke(path, "gone")


def test_a_missing_file_is_no_tokens_and_a_broken_one_an_error(tmp_path):
    assert tokens.load(tmp_path / "absent.json") == []
    broken = tmp_path / "broken.json"
    broken.write_text('{"tokens": [{"name": "x"}]}', encoding="utf-8")
    with pytest.raises(tokens.TokenFileError, match="not a Librarian token file"):
        tokens.load(broken)
    broken.write_text("not json", encoding="utf-8")
    with pytest.raises(tokens.TokenFileError):
        tokens.TokenFile(broken)


def test_the_servers_view_follows_the_file(tmp_path):
    path = tmp_path / "tokens.json"
    view = tokens.TokenFile(path)
    assert view.entries() == []
    token, _ = tokens.add(path, "late")
    assert view.find(token) is not None
    tokens.revoke(path, "late")
    assert view.find(token) is None


def test_the_file_is_plain_json_with_a_format(tmp_path):
    path = tmp_path / "tokens.json"
    tokens.add(path, "x")
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["format"] == 1
    assert set(doc["tokens"][0]) == {"name", "scopes", "created", "salt", "sha256"}
