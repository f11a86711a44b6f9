"""library_paths: one folder name, one walk-up, one LIBRARIAN_PATH rule for hooks and importer."""

from pathlib import Path

from librarian_dagster.core.library import cline_import as library
from librarian_dagster.core.library import paths as library_paths
from librarian_dagster.core.library.paths import find_library, library_for, nearest_library

HOOKS = Path(__file__).resolve().parents[2] / "hooks"


def test_walk_up_finds_the_nearest_library_and_its_tree(tmp_path):
    outer = tmp_path / "outer" / "_memory_library"
    inner = tmp_path / "outer" / "inner" / "_memory_library"
    inner.mkdir(parents=True)
    outer.mkdir()
    deep = tmp_path / "outer" / "inner" / "src" / "not-created-yet"
    assert nearest_library(str(deep)) == str(inner)
    assert find_library(str(deep), env={}) == (str(inner), str(inner.parent))
    assert find_library(str(tmp_path / "outer" / "x"), env={}) == (str(outer), str(outer.parent))
    assert find_library(str(tmp_path), env={}) is None


def test_a_file_named_like_the_library_is_not_one(tmp_path):
    (tmp_path / "_memory_library").write_text("not a folder", encoding="utf-8")
    assert nearest_library(str(tmp_path / "a")) is None


def test_librarian_path_wins_and_its_parent_is_the_tree(tmp_path):
    (tmp_path / "repo" / "_memory_library").mkdir(parents=True)
    named = tmp_path / "notes"
    env = {"LIBRARIAN_PATH": str(named)}
    # Named but not there yet: the importer may create it; the hooks see no library.
    assert library_for(str(tmp_path / "repo"), env) == str(named)
    assert find_library(str(tmp_path / "repo"), env) is None
    named.mkdir()
    assert find_library(str(tmp_path / "repo"), env) == (str(named), str(tmp_path))


def test_librarian_path_expands_home_and_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert library_for("/anywhere", {"LIBRARIAN_PATH": "~/lib/"}) == str(tmp_path / "lib")
    assert library_for("/anywhere", {"LIBRARIAN_PATH": "rel"}) == str(tmp_path / "rel")
    assert library_for(str(tmp_path), {"LIBRARIAN_PATH": ""}) is None  # empty = unset


def test_hooks_and_importer_use_this_module(monkeypatch):
    monkeypatch.syspath_prepend(str(HOOKS))
    import librarian_hooklib

    assert librarian_hooklib.find_library is library_paths.find_library
    assert librarian_hooklib.LIBRARY_DIRNAME == library_paths.LIBRARY_DIRNAME
    assert library.library_paths is library_paths
