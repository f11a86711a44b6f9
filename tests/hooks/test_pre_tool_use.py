"""pre_tool_use.py: nearest library, notes most specific first, budget, once per session."""

import json

import pytest
from hookutil import make_library, pre_tool_use_event

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


def _context(proc) -> str:
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    specific = out["hookSpecificOutput"]
    assert specific["hookEventName"] == "PreToolUse"
    # Context only: the user's permission prompt must still decide.
    assert "permissionDecision" not in specific
    assert "decision" not in out
    return specific["additionalContext"]


def _repo(tmp_path):
    repo = tmp_path / "repo"
    (repo / "src" / "models" / "launch").mkdir(parents=True)
    make_library(
        repo,
        {
            "tech.md": "- global: python 3.11",
            "src/patterns.md": "- src: dataclasses everywhere",
            "src/models/launch/patterns.md": "- launch: retry twice",
            "src/models/launch/tech.md": "- launch: uses grpc",
            "src/models/launch/.scratch.md": "- must never be injected",
            ".scratch.md": "## [TAG: global, type: tech]\n- scratch must not be injected",
        },
    )
    return repo


def test_injects_most_specific_first_with_global_last(hooks, tmp_path):
    repo = _repo(tmp_path)
    target = repo / "src" / "models" / "launch" / "run.py"
    ctx = _context(hooks.run("pre_tool_use", pre_tool_use_event(str(target), str(repo))))
    order = [
        ctx.index("### src/models/launch/patterns.md"),
        ctx.index("### src/models/launch/tech.md"),
        ctx.index("### src/patterns.md"),
        ctx.index("### global/tech.md"),
    ]
    assert order == sorted(order)
    assert "- launch: retry twice" in ctx and "- global: python 3.11" in ctx
    assert "scratch" not in ctx
    assert "src/models/launch/run.py" in ctx.splitlines()[0]


def test_every_file_tool_shape_is_understood(hooks, tmp_path):
    repo = _repo(tmp_path)
    target = str(repo / "src" / "models" / "launch" / "nb.ipynb")
    for i, tool in enumerate(["Edit", "Write", "MultiEdit", "NotebookEdit"]):
        event = pre_tool_use_event(target, str(repo), tool=tool, session=f"s{i}")
        assert "launch: retry twice" in _context(hooks.run("pre_tool_use", event))


def test_same_notes_not_injected_twice_in_a_session_unless_changed(hooks, tmp_path):
    repo = _repo(tmp_path)
    target = str(repo / "src" / "models" / "launch" / "run.py")
    event = pre_tool_use_event(target, str(repo), session="sess-1")
    first = _context(hooks.run("pre_tool_use", event))
    assert "retry twice" in first
    second = hooks.run("pre_tool_use", event)
    assert second.returncode == 0 and second.stdout == b""

    note = repo / "_memory_library" / "src" / "models" / "launch" / "patterns.md"
    note.write_text("- launch: retry three times, with jitter", encoding="utf-8")
    third = _context(hooks.run("pre_tool_use", event))
    assert "retry three times" in third
    assert "uses grpc" not in third  # unchanged notes stay out

    other_session = pre_tool_use_event(target, str(repo), session="sess-2")
    assert "uses grpc" in _context(hooks.run("pre_tool_use", other_session))


def test_budget_keeps_most_specific_and_names_the_rest(hooks, tmp_path):
    repo = tmp_path / "repo"
    make_library(
        repo,
        {
            "a/b/patterns.md": "- specific " + "x" * 300,
            "a/tech.md": "- middle " + "y" * 300,
            "product.md": "- global " + "z" * 300,
        },
    )
    event = pre_tool_use_event(str(repo / "a" / "b" / "f.py"), str(repo))
    ctx = _context(hooks.run("pre_tool_use", event, {"LIBRARIAN_CONTEXT_BUDGET": "800"}))
    assert len(ctx) <= 800
    assert "- specific" in ctx
    assert "- global" not in ctx
    closing = ctx.splitlines()[-1]
    assert closing.startswith("Not shown") and "global/product.md" in closing


def test_budget_is_capped_at_claude_codes_limit(hooks, tmp_path):
    repo = tmp_path / "repo"
    make_library(repo, {f"n{i:02d}.md": f"- note {i} " + "w" * 900 for i in range(30)})
    event = pre_tool_use_event(str(repo / "f.py"), str(repo))
    ctx = _context(hooks.run("pre_tool_use", event, {"LIBRARIAN_CONTEXT_BUDGET": "50000"}))
    assert 9000 < len(ctx) <= 10000
    assert "Not shown" in ctx


def test_default_budget_is_8000(hooks, tmp_path):
    repo = tmp_path / "repo"
    make_library(repo, {f"n{i:02d}.md": "- " + "v" * 900 for i in range(20)})
    ctx = _context(hooks.run("pre_tool_use", pre_tool_use_event(str(repo / "f.py"), str(repo))))
    assert 7000 < len(ctx) <= 8000


def test_librarian_path_overrides_the_walk(hooks, tmp_path):
    elsewhere = make_library(tmp_path / "notes-home", {"tech.md": "- from LIBRARIAN_PATH"})
    repo = _repo(tmp_path)
    event = pre_tool_use_event(str(repo / "src" / "x.py"), str(repo))
    ctx = _context(hooks.run("pre_tool_use", event, {"LIBRARIAN_PATH": str(elsewhere)}))
    assert "from LIBRARIAN_PATH" in ctx
    assert "python 3.11" not in ctx


def test_librarian_path_mirrors_its_parent_folder(hooks, tmp_path):
    notes = make_library(tmp_path / "other", {"src/patterns.md": "- src of the other tree"})
    notes = notes.rename(tmp_path / "other" / "notes")  # any name: LIBRARIAN_PATH names it
    event = pre_tool_use_event(str(tmp_path / "other" / "src" / "x.py"), str(tmp_path))
    ctx = _context(hooks.run("pre_tool_use", event, {"LIBRARIAN_PATH": str(notes)}))
    assert "### src/patterns.md\n- src of the other tree" in ctx


def test_librarian_path_to_no_folder_means_no_library_not_the_walk(hooks, tmp_path):
    repo = _repo(tmp_path)
    event = pre_tool_use_event(str(repo / "src" / "x.py"), str(repo))
    proc = hooks.run("pre_tool_use", event, {"LIBRARIAN_PATH": str(tmp_path / "missing")})
    assert proc.returncode == 0 and proc.stdout == b""
    assert "no library" in hooks.log_lines()[-1]


def test_silent_without_library_for_other_tools_and_inside_the_library(hooks, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    proc = hooks.run("pre_tool_use", pre_tool_use_event(str(bare / "f.py"), str(bare)))
    assert proc.returncode == 0 and proc.stdout == b""

    repo = _repo(tmp_path)
    bash = pre_tool_use_event("", str(repo))
    bash["tool_name"], bash["tool_input"] = "Bash", {"command": "npm test"}
    proc = hooks.run("pre_tool_use", bash)
    assert proc.returncode == 0 and proc.stdout == b""

    inside = repo / "_memory_library" / "src" / "patterns.md"
    proc = hooks.run("pre_tool_use", pre_tool_use_event(str(inside), str(repo)))
    assert proc.returncode == 0 and proc.stdout == b""
    assert any("editing the library itself" in line for line in hooks.log_lines())


def test_routing_markers_are_not_injected(hooks, tmp_path):
    repo = tmp_path / "repo"
    make_library(
        repo, {"patterns.md": "# Patterns: global\n\n<!-- librarian id=0123456789abcdef x -->\n- k"}
    )
    ctx = _context(hooks.run("pre_tool_use", pre_tool_use_event(str(repo / "f.py"), str(repo))))
    assert "<!--" not in ctx and "- k" in ctx


def test_log_line_has_hook_outcome_and_ms_but_no_note_contents(hooks, tmp_path):
    repo = _repo(tmp_path)
    event = pre_tool_use_event(str(repo / "src" / "models" / "launch" / "r.py"), str(repo))
    _context(hooks.run("pre_tool_use", event))
    lines = hooks.log_lines()
    assert len(lines) == 1
    assert " pre_tool_use " in lines[0] and "ms injected=4" in lines[0]
    assert "retry" not in lines[0]


def test_output_is_ascii_json_whatever_the_notes_hold(hooks, tmp_path):
    note = '- caf\u00e9 \u2603 \U0001f600 "quoted" \\ tab\there'
    repo = tmp_path / "repo"
    make_library(repo, {"tech.md": note})
    proc = hooks.run("pre_tool_use", pre_tool_use_event(str(repo / "f.py"), str(repo)))
    assert proc.stdout.isascii()  # no Windows console code page can garble it
    assert note in _context(proc)
