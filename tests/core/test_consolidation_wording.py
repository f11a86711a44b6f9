"""A configured model may only say a line shorter: a rewording that drops, changes or adds a
quote, names a path or flag the line does not, or runs longer is refused and the mined words
stay; a line mined the same as before keeps its wording with no request."""

import json

from librarian_dagster.core.consolidation.evidence import evidence_of
from librarian_dagster.core.consolidation.mining import COMMAND, FAILURE, mine
from librarian_dagster.core.consolidation.wording import acceptable, reword
from tests.core.test_consolidation import ESM, ROOT, session

TWO = mine([evidence_of(session(f"s{i}", i), ROOT) for i in (1, 2)])
[FAILED] = [x for x in TWO if x.kind == FAILURE]
[RAN] = [x for x in TWO if x.kind == COMMAND]


def test_a_shorter_wording_that_keeps_every_quote_is_taken():
    shorter = FAILED.text.replace(" failed with ", ": ").replace("; then ", "; ")
    assert acceptable(shorter, FAILED)


def test_a_wording_that_drops_changes_or_adds_a_quote_or_names_more_is_refused():
    refused = [
        FAILED.text.replace("`npm test --`", "the tests"),  # a quote dropped
        FAILED.text.replace("`src/db/migrate.js`", "`src/db/migrate.ts`"),  # a quote changed
        FAILED.text.replace(" failed with ", " (try `npm ci`) failed with "),  # one added
        FAILED.text.replace(" after a change to ", " after editing package.json and "),
        FAILED.text.replace(" passed", " passed with --no-cache"),  # a flag nobody quoted
        FAILED.text + " Always use ESM.",  # longer
        "",
    ]
    assert not [w for w in refused if acceptable(w, FAILED)]


def test_rewording_asks_once_keeps_what_it_gave_and_asks_no_more_for_the_same_lines():
    asked: list[str] = []

    def model(request: str) -> str:
        asked.append(request)
        notes = json.loads(request.split("\n", 1)[1])
        return json.dumps({"notes": [
            {"id": n["id"], "text": n["note"].replace(" failed with ", ": ")
             .replace(" ran and passed", " passes")} for n in notes]})  # fmt: skip

    worded, refused = reword(TWO, model, {})
    assert refused == 0 and len(asked) == 1 and ESM in asked[0]
    by_key = {x.key: x for x in worded}
    assert by_key[FAILED.key].text.startswith("`npm test`: ") and ESM in by_key[FAILED.key].text
    assert by_key[RAN.key].text == "`npm test --` passes"
    assert all(x.mined for x in worded)
    held = {x.key: (x.mined or "", x.text) for x in worded}
    again, _ = reword(TWO, model, held)
    assert len(asked) == 1 and again == worded  # no request: the same words as before


def test_a_reply_that_is_not_the_shape_asked_keeps_the_mined_words():
    worded, refused = reword(TWO, lambda _: "Sorry, I cannot help with that.", {})
    assert refused == len(TWO) and [x.text for x in worded] == [x.text for x in TWO]
