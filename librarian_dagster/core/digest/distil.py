"""What a session's own words say it did, picked out line by line for the offline digest.

Pure text functions over prompts, replies and commands (core/digest/offline.py assembles them):
which prompts ask for nothing (fillers), the plan a session was started from, the commit subjects
and pull requests it wrote, the sentences that state an outcome, a cause, a decision or what is
left, and the one line of a failed command's output worth keeping. Each returns short lines in
the session's own words, so the digest stays searchable by them.
"""

import re
from dataclasses import dataclass

TEXT_CHARS = 20_000
"""What distilling reads of one prompt, reply or command: its lines come from a text's first
sentences, its labelled paragraphs and its outcome sentences; the rest of a pasted log of
megabytes would cost seconds and add none."""

LINE_CHARS = 180
"""A distilled line's length at most: one fact, readable in a result (the prompt hook shows
several sessions in 1,500 characters)."""

# -- prompts --------------------------------------------------------------------------------------

# Words of a prompt that only steers the work (approve, continue, commit): a prompt made of
# these alone asks for nothing a later question would name. English and Portuguese (the dev
# projects' languages); a prompt in another language is kept whole, never wrongly dropped.
_FILLER_WORDS = frozenset({
    "yes", "yeah", "yep", "yup", "ok", "okay", "k", "sure", "please", "pls", "thanks", "thank",
    "you", "cool", "great", "good", "nice", "perfect", "fine", "lgtm", "go", "ahead", "do", "it",
    "this", "that", "these", "those", "them", "now", "then", "again", "all", "too", "also", "and",
    "or", "the", "a", "an", "changes", "change", "commit", "commits", "push", "pushed", "merge",
    "continue", "proceed", "carry", "on", "keep", "going", "next", "run", "rerun", "fix", "tests",
    "test", "retry", "try", "lets", "let's", "let", "us", "we", "can", "just", "it's", "its",
    "looks", "works", "work", "done", "no", "nope", "stop", "wait", "hmm", "hm", "right",
    "alright", "awesome", "sounds", "option", "options", "one", "two", "three", "sim", "pode",
    "faça", "isso", "de", "onde", "parou", "obrigado", "beleza", "tool", "loaded",
})  # fmt: skip
_WORD = re.compile(r"[\w'\u2019]+")


def is_filler(prompt: str) -> bool:
    """A prompt that asks for nothing by itself: an approval, "commit this", a shell command
    typed with `!`, a bare number picking an option."""
    text = prompt.strip()
    # A hook's refusal that Claude Code records as the user's turn: the user typed none of it.
    if text.startswith("Operation stopped by hook:"):
        return True
    # Claude Code's bash mode (`! git pull`) and its own commands (`/model sonnet`): the tool
    # is steered, nothing is asked.
    if text.startswith("!") or re.match(r"/[\w:-]+(\s|$)", text):
        return True
    words = [w.lower().replace("\u2019", "'") for w in _WORD.findall(text)]
    return all(w in _FILLER_WORDS or w.isdigit() for w in words)


@dataclass(frozen=True)
class Plan:
    title: str
    context: str
    steps: tuple[str, ...] = ()
    """The headings of the plan's other sections (its steps, files, tests), each cut short."""


_PLAN_START = re.compile(r"^\s*implement the following plan:?\s*", re.IGNORECASE)
_HEADING = re.compile(r"(?:^|\s)#{1,6}\s+")


def plan_of(prompt: str) -> Plan | None:
    """The plan a session was started from ("Implement the following plan: # Title ## Context
    ..."): its title, the first sentences of its context and its sections' headings, not the
    boilerplate."""
    match = _PLAN_START.match(prompt)
    if not match:
        return None
    plan = prompt[match.end() :]
    joined = "\n" not in plan.strip()  # its lines joined into one (a prompt from elsewhere)
    sections = [_heading_and_body(s, joined) for s in _HEADING.split(plan) if s.strip()]
    if not sections:
        return None
    title = cut(re.sub(r"^plan:\s*", "", sections[0][0], flags=re.IGNORECASE), 140)
    context, steps = "", []
    for heading, body in sections[1:]:
        if not context and _PLAN_CONTEXT.match(heading):
            context = lead(body)
        elif len(steps) < 8:
            steps.append(cut(heading, 90))
    return Plan(title=title.rstrip("."), context=context, steps=tuple(steps))


def _heading_and_body(section: str, joined: bool) -> tuple[str, str]:
    if not joined:
        heading, _, body = section.strip().partition("\n")
        return heading.strip(), body.strip()
    # Lines joined into one: the heading ends where a capitalised sentence begins.
    parts = re.split(r"(?<=[a-z)`])\s+(?=[A-Z][a-z])", section.strip(), maxsplit=1)
    return parts[0].strip(), (parts[1] if len(parts) > 1 else "").strip()


_PLAN_CONTEXT = re.compile(r"(context|background|problem|overview|summary|goal|why)\b", re.I)


# -- replies --------------------------------------------------------------------------------------

_CODE_BLOCK = re.compile(r"```.*?(```|$)", re.DOTALL)
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$", re.MULTILINE)
_HEADING_LINE = re.compile(r"^\s*#{1,6}\s.*$", re.MULTILINE)  # a title, not a statement
_MARKUP = re.compile(r"\*\*|__|^\s*(?:#{1,6}|[-*+]|\d+[.)])\s+", re.MULTILINE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"'(\[])|\n+")
# Narration of what the assistant is about to do, not what was done.
_NARRATION = re.compile(
    r"^(let me|let's|now let me|now i'?ll|i'?ll|i will|i need to|i'?m going to|first,? i|"
    r"looking at|checking|i see|i can see|now i|next,? i|running|reading)\b",
    re.IGNORECASE,
)
# ... or said on the way to it: "Since the backend is not here, let me check whether ...".
_NARRATION_INSIDE = re.compile(
    r"\b(let me|i'?ll (?:check|look|try|run|read|verify|investigate|see))\b", re.IGNORECASE
)
_INTERJECTION = re.compile(
    r"^(done|perfect|great|excellent|good|ok(ay)?|all set|got it|sure|yes|right|alright|"
    r"nice|ah|hmm)\b[.!:,]*\s*",
    re.IGNORECASE,
)
_OUTCOME = re.compile(
    r"\b(fixed|added|removed|changed|updated|implemented|created|moved|renamed|replaced|"
    r"refactored|switched|resolved|merged|committed|pushed|opened|now (?:uses|shows|returns|"
    r"handles|groups|works|passes|fails)|all (?:\d+ )?tests pass\w*|extracted|simplified|"
    r"dropped|introduced|migrated|deleted|wrote|built|enabled|disabled|raised|lowered|"
    r"increased|reduced|bumped|pinned|upgraded|reverted|restored|wrapped|guarded|"
    r"corrig\w+|adicion\w+|implement\w+|remov\w+|alter\w+|atualiz\w+|cri(?:ei|ou|ado))\b",
    re.IGNORECASE,
)
# A sentence that starts with its label ("Problem: ..."): a cause, and its paragraph goes on.
_LABEL = re.compile(r"^(?:problem|cause|root cause|issue|bug|why)\s*:", re.IGNORECASE)
# A paragraph headed by a label of its own ("**CI lint failure cause:**", "**Fix (2 files):**",
# "**Next steps:**") says that kind of thing in the lines under it.
_LABEL_WORDS = {
    "cause": r"cause|problem|issue|bug|why\b.*|diagnosis",
    "outcome": r"fix|fixed|solution|workaround|resolution|changes?|what changed",
    "decision": r"decision|decided|approach|trade-?offs?",
    "open": r"next steps?|todo|follow[- ]ups?|remaining|open questions?|left to do",
}
_LABELLED = {
    kind: re.compile(rf"^[\w`'\s-]{{0,40}}?\b(?:{words})\b[^:\n]{{0,30}}:$", re.IGNORECASE)
    for kind, words in _LABEL_WORDS.items()
}


def labelled(text: str, kind: str) -> list[str]:
    """What the paragraphs of `text` headed by a label of `kind` say, each as one line (a label
    standing alone heads the paragraph after it)."""
    found = []
    paragraphs = [p.strip().replace("**", "") for p in re.split(r"\n\s*\n", text)]
    for i, paragraph in enumerate(paragraphs):
        head, _, body = paragraph.partition("\n")
        if not body.strip() and i + 1 < len(paragraphs):
            body = paragraphs[i + 1]
        if body.strip() and _LABELLED[kind].match(_MARKUP.sub("", head).strip()):
            found.append(lead(f"{head}\n{body}"))
    return found


_CAUSE = re.compile(
    _LABEL.pattern + r"|"
    r"\b(root cause|the (?:issue|bug|problem|culprit) (?:was|is)|caused by|because of|"
    r"the reason (?:was|is)|happens because|happened because|fails because|failed because|"
    r"o problema (?:é|era|estava)|a causa)\b",
    re.IGNORECASE,
)
_DECISION = re.compile(
    r"\b(we'?ll go with|go(?:ing)? with|went with|decided|decision|chose|opted|instead of|"
    r"rather than|trade-?off|prefer(?:red)? to)\b",
    re.IGNORECASE,
)
_OPEN = re.compile(
    r"\b(todo|next steps?|follow[- ]ups?|not yet|still needs?|still to|left to|remaining|"
    r"later|out of scope|open questions?|unresolved|pending)\b",
    re.IGNORECASE,
)


_INTRO = re.compile(r"^(here'?s|here is|summary|what was)\b", re.IGNORECASE)


def sentences(text: str) -> list[str]:
    """The prose sentences of a reply: code blocks, tables and headings out, Markdown marks
    off."""
    text = _HEADING_LINE.sub("\n", _TABLE_ROW.sub("\n", _CODE_BLOCK.sub("\n", text)))
    text = _MARKUP.sub("", text)
    out = []
    for raw in _SENTENCE_END.split(text):
        sentence = re.sub(r"\s+", " ", raw).strip(" -")
        # "Here's what changed:" introduces a list; it states nothing itself.
        if sentence.endswith(":") or _INTRO.match(sentence):
            continue
        if len(sentence) >= 12 and len(_WORD.findall(sentence)) >= 3:
            out.append(sentence)
    return out


def outcomes(reply: str, limit: int = 3) -> list[str]:
    """What a closing reply says was done: what it labels a fix, then its first sentences that
    state an outcome, `limit` in all."""
    found = labelled(reply, "outcome")[:limit]
    for sentence in sentences(reply):
        sentence = _INTERJECTION.sub("", sentence).strip(" -:")
        if _narration(sentence) or sentence.endswith("?"):
            continue
        if len(found) >= limit:
            break
        if _OUTCOME.search(sentence) and len(_WORD.findall(sentence)) >= 4:
            found.append(cut(sentence, LINE_CHARS))
    return found


_BOLD = re.compile(r"\*\*([^*\n]{20,240}?)\*\*")


def findings(reply: str) -> list[str]:
    """What a reply puts in bold as a whole statement ("**`FirstPrompt` is never populated
    during `InitializeSession`.**"): the conclusions it wants read, not its labels ("**Fix:**")."""
    return [
        cut(text.strip(), LINE_CHARS)
        for text in _BOLD.findall(reply)
        if not text.rstrip().endswith(":") and "://" not in text and len(_WORD.findall(text)) >= 5
    ]


MIN_STATEMENT_WORDS = 6
"""A cause, decision or open item said in fewer words ("So the issue is different.") names
nothing a later question would ask about."""


def _narration(sentence: str) -> bool:
    return bool(_NARRATION.match(sentence) or _NARRATION_INSIDE.search(sentence))


def closing_lead(reply: str) -> str | None:
    """What a closing reply says first, without its "Done." or "Perfect!"; None when that is
    what it is about to do ("Now let me read the call sites")."""
    first = lead(_INTERJECTION.sub("", _MARKUP.sub("", reply).lstrip()).lstrip(" -:\u2013\u2014"))
    return None if _narration(first) else first


def marked(text: str, kind: str) -> list[str]:
    """Sentences of `text` that state a cause, a decision or what is left open (`kind`)."""
    pattern = {"cause": _CAUSE, "decision": _DECISION, "open": _OPEN}[kind]
    found = labelled(text, kind)
    for paragraph in re.split(r"\n\s*\n", text):
        for s in sentences(paragraph):
            if pattern.search(s) and not _narration(s) and not s.endswith("?"):
                s = _INTERJECTION.sub("", s).strip(" -:")
                if len(_WORD.findall(s)) < MIN_STATEMENT_WORDS:
                    continue
                # A labelled statement ("Problem: ...") goes on to its paragraph's next sentences.
                found.append(lead(paragraph.replace("**", "")) if _LABEL.match(s) else cut(s))
    return found


# -- commands and their output --------------------------------------------------------------------

_COMMIT_MESSAGE = re.compile(
    r"git\s+commit\b[^\n]*?(?:-m|--message)[ =]+"
    r"(?:\"\$\(cat <<\\?'?(?P<tag>\w+)'?\n(?P<heredoc>.*?)\n\s*(?P=tag)"
    r"|\"(?P<double>(?:[^\"\\]|\\.)*)\"|'(?P<single>[^']*)')",
    re.DOTALL,
)
_PR_CREATE = re.compile(r"gh\s+pr\s+create\b.*?--title[ =]+(?:\"([^\"]+)\"|'([^']+)')", re.DOTALL)
_PR_NUMBER = re.compile(
    r"(?:/pulls?/|\bgh\s+pr\s+(?:view|checkout|diff|review|comment|checks|edit|merge)\s+)"
    r"#?(\d+)\b"
)


def commit_subjects(command: str) -> list[str]:
    """The subject lines of the commits a shell command writes (`-m "..."` or a heredoc)."""
    subjects = []
    for match in _COMMIT_MESSAGE.finditer(command):
        message = match.group("heredoc") or match.group("double") or match.group("single") or ""
        first = next((line.strip() for line in message.splitlines() if line.strip()), "")
        if first and not first.startswith("$("):
            subjects.append(cut(first, LINE_CHARS))
    return subjects


def pull_request_title(command: str) -> str | None:
    """The title of a pull request a command opens (`gh pr create --title`)."""
    match = _PR_CREATE.search(command)
    return cut(match.group(1) or match.group(2), LINE_CHARS) if match else None


def pull_request_numbers(text: str) -> list[str]:
    """Pull requests a command or a reply works on (`.../pull/112`, `gh pr view 112`)."""
    return list(dict.fromkeys(_PR_NUMBER.findall(text)))


_BARE_FAILURE = re.compile(
    r"^(exit code \d+|error|command failed|failed|traceback \(most recent call last\):|"
    r"<tool_use_error>.*|the user doesn't want.*|"
    r"\(no output\)|.*tool use was rejected.*)$",
    re.IGNORECASE,
)
_ERROR_LINE = re.compile(
    r"\b(error|fail\w*|panic|exception|traceback|cannot|can't|unable|not found|denied|"
    r"undefined|invalid|refused|timed? ?out|fatal)\b",
    re.IGNORECASE,
)


def error_line(result: str) -> str | None:
    """The line of a failed tool's output that says what failed, not "Exit code 1"."""
    found = error_lines(result, 1)
    return found[0] if found else None


def error_lines(result: str, limit: int) -> list[str]:
    """Up to `limit` lines of a failed tool's first 40 that say what failed, in order."""
    found: list[str] = []
    for line in result.splitlines()[:40]:
        line = line.strip()
        if len(line) < 8 or _BARE_FAILURE.match(line):
            continue
        if _ERROR_LINE.search(line):
            found.append(cut(line, LINE_CHARS))
            if len(found) == limit:
                break
    return found


# -- text -----------------------------------------------------------------------------------------


# A sentence ends at . ! or ? before a space, not after a list's number ("approaches: 1. ...").
_SENTENCE = re.compile(r"(.{12,}?(?<![\s(]\d)[.!?])(?:\s|$)")


def first_sentence(text: str) -> str:
    text = re.sub(r"\s+", " ", _MARKUP.sub("", text)).strip()
    match = _SENTENCE.match(text)
    return cut(match.group(1) if match else text, LINE_CHARS).rstrip(".")


def lead(text: str, limit: int = LINE_CHARS) -> str:
    """The first sentences of `text` that fit in `limit` characters (the first one, cut, if
    none does)."""
    text = re.sub(r"\s+", " ", _MARKUP.sub("", text)).strip()
    taken, rest = "", text
    while rest and (match := _SENTENCE.match(rest)):
        if len(taken) + len(match.group(1)) + 1 > limit:
            break
        taken = f"{taken} {match.group(1)}".strip()
        rest = rest[match.end() :]
    if not taken:
        return first_sentence(text)
    if rest and len(taken) + len(rest) + 1 <= limit:  # a last sentence with no full stop
        taken = f"{taken} {rest}"
    return taken.rstrip(".")


def cut(text: str, limit: int = LINE_CHARS) -> str:
    """At most `limit` characters, cut on a word and marked with an ellipsis when cut."""
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit * 0.6 else cut).rstrip(",;:-\u2013 ") + "…"
