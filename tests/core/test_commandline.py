"""What the `librarian` command and the recall server share: here, how a process imports its
heavy libraries (`imports_uncollected`)."""

import gc
import importlib
import subprocess
import sys

import pytest

from librarian_dagster.core.commandline import imports_uncollected


@pytest.fixture
def unfrozen():
    """The worker with nothing frozen, as a process starts (an earlier test may have run
    `librarian ingest` in it), and the collector on after the test."""
    gc.unfreeze()
    yield
    gc.enable()
    gc.unfreeze()


def test_the_collector_is_off_inside_and_on_after_with_what_was_made_frozen(unfrozen):
    assert gc.isenabled() and gc.get_freeze_count() == 0
    with imports_uncollected():
        assert not gc.isenabled()
        made = [[] for _ in range(1000)]  # objects the collector tracks
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(made)


def test_only_the_first_use_freezes(unfrozen):
    with imports_uncollected():
        pass
    frozen = gc.get_freeze_count()
    with imports_uncollected():
        _alive = [[] for _ in range(1000)]  # tracked objects the second use leaves unfrozen
    assert gc.isenabled() and gc.get_freeze_count() <= frozen


def test_an_import_that_fails_leaves_the_collector_on(unfrozen):
    with pytest.raises(ModuleNotFoundError), imports_uncollected():
        importlib.import_module("librarian_dagster.no_such_module")
    assert gc.isenabled()


def test_nested_or_with_the_collector_off_it_does_nothing(unfrozen):
    gc.disable()
    with imports_uncollected():
        pass
    assert not gc.isenabled() and gc.get_freeze_count() == 0
    gc.enable()
    with imports_uncollected():
        with imports_uncollected():
            pass
        assert not gc.isenabled()  # the inner one left it to the outer
    assert gc.isenabled()


def _collections_while_importing(*modules: str) -> list[str]:
    """In a new process, each module imported in turn: how many collections Python ran while
    it imported, whether the collector was on after, as lines `module on runs`."""
    code = (
        "import gc, importlib, sys\n"
        "runs = [0]\n"
        "gc.callbacks.append(lambda phase, _: runs.__setitem__(0, runs[0] + (phase == 'start')))\n"
        "for module in sys.argv[1:]:\n"
        "    before = runs[0]\n"
        "    importlib.import_module(module)\n"
        "    print(module, gc.isenabled(), runs[0] - before)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *modules], capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


@pytest.mark.parametrize(
    "modules",
    [
        # Each after the one before: what it imports beyond them (the code server's is Dagster).
        ("librarian_dagster.dagster_code_server", "librarian_dagster.definitions",
         "librarian_dagster.dagster_webserver", "mcp_server.__main__"),
        ("librarian_dagster.dagster_daemon",),  # after the others, it would import little
    ],
)  # fmt: skip
@pytest.mark.process
def test_the_modules_that_start_our_processes_import_uncollected(modules):
    """The collections that come are those before a module's own `imports_uncollected` (its
    first lines' imports): without it, 100 to 300 each."""
    for line, module in zip(_collections_while_importing(*modules), modules, strict=True):
        name, enabled, runs = line.split()
        assert name == module and enabled == "True", line
        assert int(runs) <= 20, line
