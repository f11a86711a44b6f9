"""What the `librarian` command and the recall server share: here, how a process imports its
heavy libraries (`imports_uncollected`)."""

import gc
import importlib
import subprocess
import sys

import pytest

from librarian_dagster.core.commandline import imports_uncollected


@pytest.fixture
def collector_as_found():
    """The worker's collector as it was: on, and nothing frozen by the test."""
    frozen = gc.get_freeze_count()
    yield
    gc.enable()
    if gc.get_freeze_count() > frozen:
        gc.unfreeze()


def test_the_collector_is_off_inside_and_on_after_with_what_was_made_frozen(collector_as_found):
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with imports_uncollected():
        assert not gc.isenabled()
        made = [[] for _ in range(1000)]  # objects the collector tracks
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen + len(made)


def test_an_import_that_fails_leaves_the_collector_on(collector_as_found):
    with pytest.raises(ModuleNotFoundError), imports_uncollected():
        importlib.import_module("librarian_dagster.no_such_module")
    assert gc.isenabled()


def test_nested_or_with_the_collector_off_it_does_nothing(collector_as_found):
    gc.disable()
    frozen = gc.get_freeze_count()
    with imports_uncollected():
        pass
    assert not gc.isenabled() and gc.get_freeze_count() == frozen
    gc.enable()
    with imports_uncollected():
        with imports_uncollected():
            pass
        assert not gc.isenabled()  # the inner one left it to the outer
    assert gc.isenabled()


ENTRIES = ("librarian_dagster.dagster_code_server", "librarian_dagster.definitions",
           "librarian_dagster.dagster_webserver", "librarian_dagster.dagster_daemon",
           "mcp_server.__main__")  # fmt: skip
"""The modules that start a process of ours (or, the definitions, that a run worker loads)."""


def test_each_process_of_ours_imports_uncollected_and_has_its_collector_on_after():
    code = (
        "import gc, importlib, sys\n"
        "for module in sys.argv[1:]:\n"
        "    frozen = gc.get_freeze_count()\n"
        "    importlib.import_module(module)\n"
        "    print(module, gc.isenabled(), gc.get_freeze_count() - frozen)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *ENTRIES], capture_output=True, text=True, check=True
    ).stdout
    for line, module in zip(out.splitlines(), ENTRIES, strict=True):
        name, enabled, frozen = line.split()
        assert name == module and enabled == "True", line
        assert int(frozen) > 0, line  # what its imports made, frozen uncollected
