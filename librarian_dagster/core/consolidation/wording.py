"""A configured model may only shorten a line's wording (decision 0049): never what it quotes.

The lines are mined in the sessions' own words; with a model configured (the digest provider),
one request per run asks it to say each line shorter. A rewording is taken only when it is no
longer than the line, keeps every quote of the line verbatim as code, quotes nothing else, and
names no path or identifier outside code that the line does not: else the mined wording stays.
A line whose mined wording is what it was keeps the wording it was given, with no request, so
the same input gives the same library."""

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from pydantic import BaseModel, ValidationError

from librarian_dagster.core.consolidation.mining import Line
from librarian_dagster.core.digest.llm import Ask, LLMDigester
from librarian_dagster.core.digest.schema import Digester

SYSTEM = (
    "You shorten notes that coding sessions wrote about a repository. Each note quotes, between "
    "backticks, commands, error messages and file paths exactly as the sessions said them. Say "
    "each note in fewer words. Keep every backtick quote exactly as it is, character for "
    "character, and add none. Name no command, path, file, function or flag that the note does "
    "not quote. Do not generalise, advise or add facts. Answer with every note, by its id."
)
_CODE = re.compile(r"``\s(.+?)\s``|`([^`]+)`")
# Outside code: what looks like a path, a file, a flag or a name in code.
_NAMED = re.compile(r"[\w.-]*/[\w./-]+|\b\w+\.\w{1,5}\b|(?<!\w)--?\w[\w-]*|\b\w*[_0-9]\w*\b")


class WordedLine(BaseModel):
    id: int
    text: str


class Worded(BaseModel):
    """The model's reply: each note by its id, shorter."""

    notes: list[WordedLine]


WORDING = Ask(SYSTEM, Worded)


def model_of(digester: Digester) -> Callable[[str], str] | None:
    """The configured model's reply to a wording request; None with the offline digester."""
    if isinstance(digester, LLMDigester):
        model: LLMDigester = digester
        return lambda text: model.answer(text, WORDING)
    return None


def acceptable(worded: str, line: Line) -> bool:
    """Whether `worded` may stand for `line`: no longer, every quote kept, nothing new named."""
    if not worded.strip() or len(worded) > len(line.text):
        return False
    spans = [a or b for a, b in _CODE.findall(worded)]
    if sorted(set(spans)) != sorted(set(line.quotes)):
        return False
    outside = _CODE.sub(" ", worded)
    mined = _CODE.sub(" ", line.text)
    return all(named in mined for named in _NAMED.findall(outside))


def request(lines: Sequence[Line]) -> str:
    notes = [{"id": i, "note": line.text} for i, line in enumerate(lines)]
    return "Shorten these notes:\n" + json.dumps(notes, ensure_ascii=False)


def reword(
    lines: Sequence[Line],
    answer: Callable[[str], str],
    held: Mapping[str, tuple[str, str]],
) -> tuple[list[Line], int]:
    """`lines`, each in the wording a model gave it where acceptable (and how many rewordings
    were refused); `held`: a line's key -> (its mined wording, the wording it was given) as the
    library holds them, reused while the mined wording is the same."""
    out = [replace(line, text=held[line.key][1], mined=line.text)
           if line.key in held and held[line.key][0] == line.text else line
           for line in lines]  # fmt: skip
    asked = [i for i, line in enumerate(out) if line.mined is None]
    if not asked:
        return out, 0
    reply = answer(request([out[i] for i in asked]))
    try:
        given = {n.id: n.text for n in Worded.model_validate_json(reply).notes}
    except ValidationError:
        given = {}
    refused = 0
    for n, i in enumerate(asked):
        worded = given.get(n, "")
        if not acceptable(worded, out[i]):
            refused += 1
            worded = out[i].text  # kept as mined, and not asked again while it is the same
        out[i] = replace(out[i], text=worded, mined=out[i].text)
    return out, refused
