"""How one stage hands its output to the next: JSON files, one per asset and session.

`LIBRARIAN_HOME/staging/<asset>/<session>.json`, easy to open and read. Only redacted data is ever
stored here: the `transcript` stage hands on nothing but its metadata, so `redacted_session` is
the first stage that stores, and the one unredacted copy of a session stays the file Claude Code
wrote.

Each value is (de)serialised by a pydantic `TypeAdapter` for the type the asset declares (its
return annotation when stored, the downstream parameter's annotation when loaded), so a stage
reads back the same dataclass or model it was handed, with no hand-written converters. Writes are
atomic (temporary file + rename): a crashed stage never leaves half a file for the next one.

A plain `ConfigurableIOManager` rather than `UPathIOManager`: the files are always local, one
partition is loaded at a time, and the session key is checked against a strict pattern before it
becomes a file name (docs/decisions/0009).
"""

import os
import re
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import TypeAdapter

_SAFE_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$")


class StagingIOManager(dg.ConfigurableIOManager):
    """Stage outputs as JSON under `<home>/staging/<asset>/<session>.json`, redacted only."""

    home: str

    def path_for(self, asset: str, session_id: str) -> Path:
        if not _SAFE_KEY.match(session_id):
            raise ValueError(f"not a usable session key: {session_id!r}")
        return Path(self.home) / "staging" / asset / f"{session_id}.json"

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        target = self.path_for(context.asset_key.path[-1], context.partition_key)
        payload = _adapter(context.dagster_type.typing_type).dump_json(obj)
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
        context.add_output_metadata({"path": dg.MetadataValue.path(str(target))})

    def load_input(self, context: dg.InputContext) -> Any:
        upstream = context.upstream_output
        if upstream is None:
            raise dg.Failure(f"input {context.name} has no upstream asset to load")
        asset = upstream.asset_key.path[-1]
        target = self.path_for(asset, context.partition_key)
        try:
            data = target.read_bytes()
        except FileNotFoundError:
            raise dg.Failure(
                f"no {asset} output for session {context.partition_key}: materialize {asset} first"
            ) from None
        return _adapter(context.dagster_type.typing_type).validate_json(data)


def _cannot_stage(target: Path, exc: OSError) -> dg.Failure:
    """A full disk or a read-only home, said in the run's one line: where, and why.

    The file that was there before, if any, is untouched: it is replaced only once whole.
    """
    return dg.Failure(f"cannot stage {target}: {exc.strerror or exc}")


@cache
def _adapter(python_type: Any) -> TypeAdapter[Any]:
    # Building an adapter compiles a validator: once per type per process, not once per session.
    return TypeAdapter(python_type)
