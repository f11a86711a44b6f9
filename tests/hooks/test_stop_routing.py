"""stop.py: scratch blocks routed to <path>/<type>.md, kept when untyped, never duplicated."""

import pytest
from hookutil import make_library, old_stop_event, stop_event

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


SCRATCH = """# Scratch

Free text before the first block stays.

## [TAG: models/launch/btbi, type: patterns]
- retry the launch twice
- log the btbi id

## [TAG: global, type: tech]
- python 3.11 everywhere

## [TAG: models]
- no type yet: stays in scratch

## [TAG: models/launch, type: tech.md]
### a sub-heading belongs to the block
- grpc with deadlines
"""


def _lib(tmp_path):
    return make_library(tmp_path / "repo", {".scratch.md": SCRATCH})


def test_blocks_are_routed_and_untyped_ones_stay(hooks, tmp_path):
    lib = _lib(tmp_path)
    proc = hooks.run("stop", stop_event(str(lib.parent)))
    assert proc.returncode == 0 and proc.stdout == b"", proc.stderr

    patterns = (lib / "models" / "launch" / "btbi" / "patterns.md").read_text(encoding="utf-8")
    assert patterns.startswith("# Patterns: models/launch/btbi\n")
    assert "- retry the launch twice\n- log the btbi id" in patterns
    tech = (lib / "tech.md").read_text(encoding="utf-8")
    assert tech.startswith("# Tech: global\n") and "- python 3.11 everywhere" in tech
    launch = (lib / "models" / "launch" / "tech.md").read_text(encoding="utf-8")
    assert "### a sub-heading belongs to the block\n- grpc with deadlines" in launch

    scratch = (lib / ".scratch.md").read_text(encoding="utf-8")
    assert "Free text before the first block stays." in scratch
    assert "## [TAG: models]\n- no type yet: stays in scratch" in scratch
    assert "retry the launch" not in scratch and "grpc" not in scratch
    assert "routed=3" in hooks.log_lines()[-1] and "kept=1" in hooks.log_lines()[-1]


def test_appends_to_existing_notes_without_a_new_heading(hooks, tmp_path):
    lib = _lib(tmp_path)
    (lib / "tech.md").write_text("# Tech\n\n- existing fact\n", encoding="utf-8")
    hooks.run("stop", stop_event(str(lib.parent)))
    tech = (lib / "tech.md").read_text(encoding="utf-8")
    assert tech.startswith("# Tech\n\n- existing fact\n")
    assert tech.count("# Tech") == 1 and "- python 3.11 everywhere" in tech


def test_second_run_changes_nothing(hooks, tmp_path):
    lib = _lib(tmp_path)
    hooks.run("stop", stop_event(str(lib.parent)))
    before = {p: p.read_bytes() for p in lib.rglob("*.md")}
    hooks.run("stop", stop_event(str(lib.parent)))
    assert {p: p.read_bytes() for p in lib.rglob("*.md")} == before


def test_crash_between_append_and_scratch_rewrite_leaves_no_duplicate(hooks, tmp_path):
    lib = _lib(tmp_path)
    hooks.run("stop", stop_event(str(lib.parent)))
    # Simulate a crash after the appends were flushed but before scratch was rewritten.
    (lib / ".scratch.md").write_text(SCRATCH, encoding="utf-8")
    hooks.run("stop", stop_event(str(lib.parent)))
    patterns = (lib / "models" / "launch" / "btbi" / "patterns.md").read_text(encoding="utf-8")
    assert patterns.count("- retry the launch twice") == 1
    assert "retry the launch" not in (lib / ".scratch.md").read_text(encoding="utf-8")
    assert "duplicates=3" in hooks.log_lines()[-1]


def test_identical_blocks_in_one_scratch_are_filed_once(hooks, tmp_path):
    block = "## [TAG: a, type: patterns]\n- same learning\n\n"
    lib = make_library(tmp_path / "repo", {".scratch.md": block * 3})
    hooks.run("stop", stop_event(str(lib.parent)))
    assert (lib / "a" / "patterns.md").read_text(encoding="utf-8").count("- same learning") == 1
    assert "same learning" not in (lib / ".scratch.md").read_text(encoding="utf-8")


def test_stop_hook_active_does_nothing(hooks, tmp_path):
    lib = _lib(tmp_path)
    proc = hooks.run("stop", stop_event(str(lib.parent), active=True))
    assert proc.returncode == 0 and proc.stdout == b""
    assert (lib / ".scratch.md").read_text(encoding="utf-8") == SCRATCH
    assert "stop_hook_active" in hooks.log_lines()[-1]


def test_old_event_without_cwd_uses_the_process_folder(hooks, tmp_path):
    lib = _lib(tmp_path)
    proc = hooks.run("stop", old_stop_event(), cwd=str(lib.parent))
    assert proc.returncode == 0 and proc.stdout == b""
    assert (lib / "tech.md").exists()


def test_no_library_no_writes(hooks, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    proc = hooks.run("stop", stop_event(str(bare)))
    assert proc.returncode == 0 and proc.stdout == b""
    assert list(bare.iterdir()) == []
    assert "no library" in hooks.log_lines()[-1]


def test_walks_up_from_a_subfolder_to_the_nearest_library(hooks, tmp_path):
    lib = _lib(tmp_path)
    deep = lib.parent / "models" / "launch"
    deep.mkdir(parents=True)
    hooks.run("stop", stop_event(str(deep)))
    assert (lib / "tech.md").exists()
    assert not (deep / "_memory_library").exists()


def test_librarian_path_library_is_routed_instead_of_the_nearest(hooks, tmp_path):
    near = _lib(tmp_path)
    named = make_library(tmp_path / "elsewhere", {".scratch.md": SCRATCH})
    hooks.run("stop", stop_event(str(near.parent)), {"LIBRARIAN_PATH": str(named)})
    assert (named / "tech.md").exists()
    assert (near / ".scratch.md").read_text(encoding="utf-8") == SCRATCH
