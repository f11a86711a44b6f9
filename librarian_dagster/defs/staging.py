"""How one stage hands its output to the next: JSON files, one per asset and session.

`LIBRARIAN_HOME/staging/<asset>/<session>.json`, easy to open and read. Only redacted data is ever
stored here: the `transcript` stage hands on nothing but its metadata, so `redacted_session` is
the first stage that stores, and the one unredacted copy of a session stays the file Claude Code
wrote.

A run may cover many sessions (a partition range, docs/decisions/0014), so every stage hands on a
`dict` partition key -> value: one file per entry. A session of the run missing from the dict
(nothing to remember, or it failed at this stage) has its file of this stage removed, so a later
stage never reads a stale one; loading gives the sessions of the run that have a file.

Each value is (de)serialised by a pydantic `TypeAdapter` for the value type the asset declares
(of its return annotation when stored, of the downstream parameter's annotation when loaded), so
a stage reads back the same dataclass or model it was handed, with no hand-written converters.
Writes are atomic (temporary file + rename): a crashed stage never leaves half a file.

A plain `ConfigurableIOManager` rather than `UPathIOManager`: the files are always local, and the
session id is checked against a strict pattern before it becomes a file name (0009).
"""

import collections
import os
import tempfile
import typing
from functools import cache
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import TypeAdapter

from librarian_dagster.core.capture.keys import staged_file
from librarian_dagster.defs.partitions import session_id_of


class StagingIOManager(dg.ConfigurableIOManager):
    """Stage outputs as JSON under `<home>/staging/<asset>/<session>.json`, redacted only."""

    home: str

    def path_for(self, asset: str, partition_key: str) -> Path:
        return staged_file(Path(self.home), asset, session_id_of(partition_key))

    def handle_output(self, context: dg.OutputContext, obj: dict[str, Any]) -> None:
        asset = context.asset_key.path[-1]
        declared = _value_type(context.dagster_type.typing_type)
        adapter = _adapter(declared)
        for key in context.asset_partition_keys:
            target = self.path_for(asset, key)
            if key in obj:
                _write_atomically(target, adapter.dump_json(obj[key]))
                _recent.keep(target, declared, obj[key])
            else:
                _recent.drop(target)
                target.unlink(missing_ok=True)
        if len(obj) == 1:
            [key] = obj
            context.add_output_metadata(
                {"path": dg.MetadataValue.path(str(self.path_for(asset, key)))}
            )

    def load_input(self, context: dg.InputContext) -> dict[str, Any]:
        upstream = context.upstream_output
        if upstream is None:
            raise dg.Failure(f"input {context.name} has no upstream asset to load")
        asset = upstream.asset_key.path[-1]
        declared = _value_type(context.dagster_type.typing_type)
        adapter = _adapter(declared)
        loaded: dict[str, Any] = {}
        for key in context.asset_partition_keys:
            path = self.path_for(asset, key)
            try:
                kept = _recent.get(path, declared)
                loaded[key] = kept if kept is not None else adapter.validate_json(path.read_bytes())
            except FileNotFoundError:
                continue  # nothing to remember, or failed upstream: the session drops out
        if not loaded:
            raise dg.Failure(
                f"no {asset} output for session(s) {', '.join(context.asset_partition_keys)}: "
                f"materialize {asset} first"
            )
        return loaded


class _Recent:
    """What this process staged last, kept beside the files: a later stage of the same run (one
    process runs all of a run's steps) takes the value back instead of parsing its file again,
    which was 1.5 s of an ingest of 100 sessions (decision 0044).

    A value is taken only while its file is still the one written (same inode, size and
    modification time: another process may have staged the session since) and only for the type
    it was written as. Stages never change their inputs, so one object can serve several.
    """

    def __init__(self, most: int) -> None:
        self._most = most
        self._values: collections.OrderedDict[Path, tuple[tuple[int, int, int], Any, Any]] = (
            collections.OrderedDict()
        )

    def keep(self, path: Path, declared: object, value: Any) -> None:
        self._values[path] = (_identity(path), declared, value)
        self._values.move_to_end(path)
        while len(self._values) > self._most:
            self._values.popitem(last=False)

    def drop(self, path: Path) -> None:
        self._values.pop(path, None)

    def get(self, path: Path, declared: object) -> Any | None:
        kept = self._values.get(path)
        if kept is None:
            return None
        identity, written_as, value = kept
        if identity != _identity(path):  # raises FileNotFoundError when it is gone
            return None
        if declared == written_as and declared is not Any:
            return value
        # A generator stage writes as `Any`: its value serves a reader of its class.
        return value if written_as is Any and type(value) is declared else None


def _identity(path: Path) -> tuple[int, int, int]:
    found = path.stat()
    return found.st_ino, found.st_size, found.st_mtime_ns


# A run's sessions times its stages, and some: a run of 25 sessions stages 150 values.
_recent = _Recent(most=256)


def _write_atomically(target: Path, payload: bytes) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}.", suffix=".tmp")
    except OSError as exc:
        raise _cannot_stage(target, exc) from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(payload)
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _cannot_stage(target, exc) from None
        raise


def _value_type(declared: Any) -> Any:
    """`V` of a declared `dict[str, V]`: what one session's file holds.

    A generator stage's output is typed `Any` by Dagster: written as what it is, it is read
    back through the downstream parameter's `dict[str, V]`.
    """
    if declared is Any:
        return Any
    if typing.get_origin(declared) is not dict:
        raise TypeError(f"a stage hands on dict[str, V] (partition key -> value), not {declared}")
    return typing.get_args(declared)[1]


def _cannot_stage(target: Path, exc: OSError) -> dg.Failure:
    """A full disk or a read-only home, said in the run's one line: where, and why.

    The file that was there before, if any, is untouched: it is replaced only once whole.
    """
    return dg.Failure(f"cannot stage {target}: {exc.strerror or exc}")


@cache
def _adapter(python_type: Any) -> TypeAdapter[Any]:
    # Building an adapter compiles a validator: once per type per process, not once per session.
    return TypeAdapter(python_type)
