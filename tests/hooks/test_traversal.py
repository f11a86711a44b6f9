"""Tag paths that try to leave the library write nothing outside it and stay in scratch."""

import os

import pytest
from hookutil import make_library, stop_event

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


def _snapshot(root):
    """Every path under root but the hooks' own data folder (their bytecode cache) in HOME."""
    paths = (str(p.relative_to(root)) for p in root.rglob("*"))
    return sorted(p for p in paths if not p.startswith("home/.claude"))


@pytest.mark.parametrize(
    "tag",
    [
        "../outside",
        "a/../../outside",
        "..",
        "/tmp/outside-abs",
        "\\\\server\\share",
        "C:/Windows",
        "~/outside",
        "a/..\\..\\outside",
    ],
)
def test_traversal_paths_are_refused(hooks, tmp_path, tag):
    repo = tmp_path / "repo"
    block = f"## [TAG: {tag}, type: patterns]\n- evil\n"
    lib = make_library(repo, {".scratch.md": block})
    before = _snapshot(tmp_path)
    proc = hooks.run("stop", stop_event(str(repo)))
    assert proc.returncode == 0 and proc.stdout == b""
    # Only the lock file and the log may appear; nothing outside the library.
    added = set(_snapshot(tmp_path)) - set(before)
    assert added <= {"librarian.log", "repo/_memory_library/.librarian.lock"}
    assert (lib / ".scratch.md").read_text(encoding="utf-8") == block
    assert "invalid=1" in hooks.log_lines()[-1]
    assert not os.path.exists("/tmp/outside-abs/patterns.md")


@pytest.mark.parametrize("type_name", ["../x", "a/b", ".hidden", "x y", ""])
def test_bad_type_names_are_refused(hooks, tmp_path, type_name):
    repo = tmp_path / "repo"
    block = f"## [TAG: a, type: {type_name}]\n- evil\n"
    lib = make_library(repo, {".scratch.md": block})
    hooks.run("stop", stop_event(str(repo)))
    assert not (lib / "a").exists()
    assert (lib / ".scratch.md").read_text(encoding="utf-8") == block


def test_symlinked_folder_out_of_the_library_is_refused(hooks, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    repo = tmp_path / "repo"
    block = "## [TAG: linked/deeper, type: patterns]\n- evil\n"
    lib = make_library(repo, {".scratch.md": block})
    (lib / "linked").symlink_to(outside, target_is_directory=True)
    hooks.run("stop", stop_event(str(repo)))
    assert list(outside.iterdir()) == []
    assert (lib / ".scratch.md").read_text(encoding="utf-8") == block
    assert "symlink" in hooks.log_lines()[-1]


def test_symlinked_note_file_is_refused(hooks, tmp_path):
    outside = tmp_path / "outside.md"
    outside.write_text("precious\n", encoding="utf-8")
    repo = tmp_path / "repo"
    block = "## [TAG: a, type: patterns]\n- evil\n"
    lib = make_library(repo, {".scratch.md": block})
    (lib / "a").mkdir()
    (lib / "a" / "patterns.md").symlink_to(outside)
    hooks.run("stop", stop_event(str(repo)))
    assert outside.read_text(encoding="utf-8") == "precious\n"
    assert (lib / ".scratch.md").read_text(encoding="utf-8") == block


def test_symlink_inside_the_library_is_allowed(hooks, tmp_path):
    repo = tmp_path / "repo"
    lib = make_library(repo, {".scratch.md": "## [TAG: alias, type: patterns]\n- fine\n"})
    (lib / "real").mkdir()
    (lib / "alias").symlink_to(lib / "real", target_is_directory=True)
    hooks.run("stop", stop_event(str(repo)))
    assert "- fine" in (lib / "real" / "patterns.md").read_text(encoding="utf-8")


def test_valid_blocks_route_while_invalid_ones_stay(hooks, tmp_path):
    repo = tmp_path / "repo"
    evil = "## [TAG: ../x, type: patterns]\n- evil\n"
    text = evil + "## [TAG: ok, type: patterns]\n- good\n"
    lib = make_library(repo, {".scratch.md": text})
    hooks.run("stop", stop_event(str(repo)))
    assert "- good" in (lib / "ok" / "patterns.md").read_text(encoding="utf-8")
    assert (lib / ".scratch.md").read_text(encoding="utf-8") == evil
