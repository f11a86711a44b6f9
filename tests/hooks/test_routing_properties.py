"""Property tests for the tag router: whatever a scratch file says, nothing is written outside
the library, and a block either lands in `<library>/<path>/<type>.md` or stays in the scratch."""

import os
import sys
from pathlib import Path

from hookutil import HOOKS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(HOOKS))
import librarian_routing as routing  # a hook module, found beside the scripts

# Path pieces chosen to try every way out: parents, roots, drives, home, separators, NUL, links.
pieces = st.sampled_from(
    ["..", ".", "", "a", "b", "out", "~", "C:", "\\", "/", "//", "\x00", "é", " ", "link", "..."]
)
tag_paths = st.lists(pieces, max_size=6).map("/".join) | st.text(max_size=40)
type_names = st.sampled_from(["tech", "patterns", "../x", "a/b", ".md", "x.md", "", " "]) | st.text(
    max_size=12
)


def _library(root: Path) -> Path:
    lib = root / "repo" / "_memory_library"
    (lib / "a").mkdir(parents=True, exist_ok=True)
    outside = root / "outside"
    outside.mkdir(exist_ok=True)
    link = lib / "link"
    if not link.is_symlink():
        link.symlink_to(outside, target_is_directory=True)  # a way out, if anything followed it
    return lib


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


_settings = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_settings
@given(tag=tag_paths, type_name=type_names)
def test_a_resolved_note_is_always_inside_the_library(tmp_path, tag, type_name):
    lib = _library(tmp_path)
    try:
        note, _label = routing.resolve_target(str(lib), tag, type_name)
    except routing.InvalidBlock:
        return
    real = os.path.realpath(note)
    assert os.path.commonpath([os.path.realpath(lib), real]) == os.path.realpath(lib)
    assert real.endswith(".md") and not os.path.islink(note)


@_settings
@given(blocks=st.lists(st.tuples(tag_paths, type_names, st.text(max_size=60)), max_size=6))
def test_routing_any_scratch_writes_only_inside_the_library(tmp_path, blocks):
    lib = _library(tmp_path)
    scratch = "".join(f"## [TAG: {tag}, type: {kind}]\n- {body}\n\n" for tag, kind, body in blocks)
    (lib / ".scratch.md").write_text(scratch, encoding="utf-8", newline="")
    outside_before = _files(tmp_path / "outside")
    others_before = {p for p in _files(tmp_path) if not p.startswith("repo/_memory_library")}
    routing.route_scratch(str(lib))
    assert _files(tmp_path / "outside") == outside_before
    others_after = {p for p in _files(tmp_path) if not p.startswith("repo/_memory_library")}
    assert others_after == others_before
    # Whatever was filed went to a plain note inside the library.
    for path in lib.rglob("*.md"):
        assert not path.is_symlink() or path.name == ".scratch.md"
