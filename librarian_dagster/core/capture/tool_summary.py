"""A tool call as every agent's reader reads it: the strings its arguments give under the keys
that agent uses (its paths, its detail), and the tool use on one line: the command it ran, else
the file it worked on, else what it looked for or was about, else its name.

Standard library only: hooks and the MCP server import this without dagster.
"""

from collections.abc import Iterable, Mapping
from typing import Any

from librarian_dagster.core.capture.session import one_line

__all__ = ["detail_of", "strings_of", "summary_of"]


def summary_of(name: str, command: str | None, path: str | None, detail: str) -> str:
    """A tool use on one line, as every reader says it: the command it ran, else the file it
    worked on, else what it looked for or was about (`detail`), else its name."""
    if command is not None:
        said = f"{name}: {one_line(command, 80)}"
    elif path:
        said = f"{name} {path}"
    else:
        said = f"{name}: {one_line(detail, 80)}" if detail else name
    return one_line(said, 120)


def strings_of(args: Mapping[str, Any], keys: Iterable[str]) -> list[str]:
    """The strings, not empty, that `args` gives under `keys`, in their order."""
    return [args[k] for k in keys if isinstance(args.get(k), str) and args[k]]


def detail_of(args: Mapping[str, Any], keys: Iterable[str]) -> str:
    """The first of `keys` that `args` gives as a string that is not empty, else ""."""
    return next(iter(strings_of(args, keys)), "")
