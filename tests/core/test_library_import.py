"""librarian library import: a Cline memory bank becomes root library notes; never overwrites."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from librarian_dagster.cli.main import main
from librarian_dagster.core.library.cline_import import apply_plan, demote_headings, plan_import

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "tests" / "fixtures" / "memory-bank-samples" / "1w2w3y__gpt-image-1-playground"


def test_real_memory_bank_imports(tmp_path, capsys):
    into = tmp_path / "_memory_library"
    assert main(["library", "import", str(SAMPLE), "--into", str(into)]) == 0
    out = capsys.readouterr().out
    assert "Wrote 5 note(s)" in out
    assert sorted(p.name for p in into.iterdir()) == [
        "active.md",
        "patterns.md",
        "product.md",
        "progress.md",
        "tech.md",
    ]
    product = (into / "product.md").read_text(encoding="utf-8")
    assert product.startswith("# Product\n")
    # The brief comes before the product context, as in Cline's hierarchy.
    assert product.index("## From projectbrief.md") < product.index("## From productContext.md")
    assert "### Project Brief: GPT-IMAGE-1 Playground" in product
    patterns = (into / "patterns.md").read_text(encoding="utf-8")
    assert "Builds on: [product.md](product.md)." in patterns
    assert "System Patterns: GPT-IMAGE-1 Playground" in patterns
    source = (SAMPLE / "memory-bank" / "techContext.md").read_text(encoding="utf-8")
    last_line = source.strip().splitlines()[-1]
    assert last_line.lstrip("#").strip() in (into / "tech.md").read_text(encoding="utf-8")


def test_dry_run_writes_nothing(tmp_path, capsys):
    into = tmp_path / "lib"
    assert main(["library", "import", str(SAMPLE), "--into", str(into), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "create  product.md" in out and "projectbrief.md, productContext.md" in out
    assert "Dry run" in out
    assert not into.exists()


def test_never_overwrites(tmp_path, capsys):
    into = tmp_path / "lib"
    into.mkdir()
    (into / "tech.md").write_text("# Tech\n- mine\n", encoding="utf-8")
    assert main(["library", "import", str(SAMPLE / "memory-bank"), "--into", str(into)]) == 0
    out = capsys.readouterr().out
    assert "skip    tech.md" in out and "Wrote 4 note(s)" in out
    assert (into / "tech.md").read_text(encoding="utf-8") == "# Tech\n- mine\n"


def test_extra_files_and_missing_core_files(tmp_path):
    bank = tmp_path / "memory-bank"
    (bank / "features").mkdir(parents=True)
    (bank / "techContext.md").write_text("# Tech Context\n- uv\n", encoding="utf-8")
    (bank / "features" / "auth.md").write_text("# Auth\n- oauth2\n", encoding="utf-8")
    (bank / "tech.md").write_text("# An extra called tech\n", encoding="utf-8")
    (bank / "empty.md").write_text("\n", encoding="utf-8")
    (bank / "diagram.png").write_bytes(b"\x89PNG")
    plan = plan_import(str(tmp_path), str(tmp_path / "lib"))
    targets = {n.target: n.sources for n in plan.notes}
    assert targets == {
        "tech.md": ["techContext.md"],
        "features-auth.md": ["features/auth.md"],
        "tech-2.md": ["tech.md"],
    }
    assert plan.ignored == ["diagram.png"]
    assert apply_plan(plan) == 3
    assert "## From features/auth.md" in (tmp_path / "lib" / "features-auth.md").read_text("utf-8")


def test_missing_bank_is_an_error(tmp_path, capsys):
    assert main(["library", "import", str(tmp_path / "nope"), "--into", str(tmp_path)]) == 2
    assert "no memory bank" in capsys.readouterr().err


def test_headings_demoted_outside_code_fences():
    text = "# Title\n## Sub\n```\n# comment in code\n```\n#hashtag\n###### deep"
    assert demote_headings(text) == (
        "### Title\n#### Sub\n```\n# comment in code\n```\n#hashtag\n###### deep"
    )


def test_default_target_is_the_nearest_library_above_the_current_folder(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv("LIBRARIAN_PATH", raising=False)
    lib = tmp_path / "repo" / "_memory_library"
    deep = tmp_path / "repo" / "src" / "deep"
    lib.mkdir(parents=True)
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert main(["library", "import", str(SAMPLE)]) == 0
    assert (lib / "product.md").exists()
    assert not (deep / "_memory_library").exists()
    bare = tmp_path / "bare"
    bare.mkdir()
    monkeypatch.chdir(bare)
    assert main(["library", "import", str(SAMPLE), "--dry-run"]) == 0
    assert f"-> {bare / '_memory_library'}\n" in capsys.readouterr().out


def test_librarian_path_is_the_default_target_and_into_beats_it(tmp_path, monkeypatch):
    (tmp_path / "repo" / "_memory_library").mkdir(parents=True)
    named = tmp_path / "notes" / "lib"  # need not exist yet: the import creates it
    monkeypatch.setenv("LIBRARIAN_PATH", str(named))
    monkeypatch.chdir(tmp_path / "repo")
    assert main(["library", "import", str(SAMPLE)]) == 0
    assert (named / "tech.md").exists()
    assert list((tmp_path / "repo" / "_memory_library").iterdir()) == []
    into = tmp_path / "into"
    assert main(["library", "import", str(SAMPLE), "--into", str(into)]) == 0
    assert (into / "tech.md").exists()


@pytest.mark.process
def test_script_finds_the_library_like_the_hooks(tmp_path):
    """Without the package installed: the walk-up, then LIBRARIAN_PATH over it."""
    script = REPO / "librarian_dagster" / "core" / "library" / "cline_import.py"
    lib = tmp_path / "repo" / "_memory_library"
    deep = tmp_path / "repo" / "a" / "b"
    lib.mkdir(parents=True)
    deep.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "LIBRARIAN_PATH"}
    named = tmp_path / "named"
    for extra, target in (({}, lib), ({"LIBRARIAN_PATH": str(named)}, named)):
        proc = subprocess.run(
            [sys.executable, "-E", "-S", str(script), str(SAMPLE)],
            capture_output=True,
            cwd=deep,
            env={**env, **extra},
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert (target / "active.md").exists()
    assert len(list(lib.iterdir())) == 5  # the second run did not write here


@pytest.mark.process
def test_runs_as_a_stdlib_script_for_the_plugin(tmp_path):
    script = REPO / "librarian_dagster" / "core" / "library" / "cline_import.py"
    proc = subprocess.run(
        [sys.executable, "-E", "-S", str(script), str(SAMPLE), "--into", str(tmp_path / "l")],
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "l" / "progress.md").exists()
