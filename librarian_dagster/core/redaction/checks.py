"""Whether a value a context rule matched is a secret: not a placeholder, a reference (`$VAR`,
`os.environ[...]`), a plain identifier or a path, and random enough (entropy, character classes).

Token rules know a secret by its prefix and need none of this; rules that know one only by what
stands before it (`password=`, `Bearer `, `://user:...@`) ask these checks about the value.
"""

import base64
import math
import re
from collections import Counter
from collections.abc import Callable

_PLACEHOLDER_WORDS = (
    "redacted",
    "your",
    "example",
    "placeholder",
    "changeme",
    "change_me",
    "dummy",
    "sample",
    "****",
    "...",
    "<",
    ">",
    "{{",
    "}}",
    "${",
    "$(",
    "%(",
    "process.env",
    "os.environ",
    "getenv",
    "env(",
    "env.",
    "secrets.",
    "vault:",
    "none",
    "null",
    "undefined",
    "todo",
    "fixme",
    "foobar",
    "test-",
    "-test",
    "fake",
    "mock",
    "dummy",
    "insert",
    "replace",
)


# A placeholder word counts where it stands as a word: at an end of the value or beside a
# non-letter (`your_api_key`, `sk_test_xxxx`, `MOCK-TOKEN`, `AKIA...EXAMPLE`). Inside a run of
# random letters it is chance: one 32-character token in 5,000 holds a `todo`, `mock`, `null`...
def _placeholder_re(word: str) -> re.Pattern[str]:
    """The words, each matched where `word` (a pattern around `{w}`) says it stands as one;
    those with a non-letter in them anywhere."""
    return re.compile(
        "|".join(
            word.format(w=re.escape(w)) if w.isalpha() else re.escape(w) for w in _PLACEHOLDER_WORDS
        )
    )


_PLACEHOLDER_RE = _placeholder_re(r"(?<![a-z]){w}|{w}(?![a-z])")
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:\(\))?$")


# A run of x's stands for a value (`sk_test_xxxx`, `AKIAXXXXXXXXXXXXXXXX`, `xxxx-xxxx`) when it is
# of one case and long, or a good part of the value: a random token holds `XXXx` or `xxxx`
# beside a digit about once in 100,000 (hypothesis found `4weYbBayRbF4ZXXXx5Cws471kliwWJDA`).
_X_RUN_RE = re.compile(r"x{4,}|X{4,}")


def _says_x_placeholder(value: str) -> bool:
    return any(len(run) >= 8 or len(run) * 4 >= len(value) for run in _X_RUN_RE.findall(value))


def says_placeholder(value: str) -> bool:
    return _PLACEHOLDER_RE.search(value.lower()) is not None or _says_x_placeholder(value)


# The same words standing alone, a non-letter on both sides (`YOUR_DB_PASS`, `dummy123`): in a
# quoted password one side is not enough, as random letters hold `your`, `todo` or `null` at an
# end one time in 25,000 (hypothesis found `"zjG0TcYC0=z5iToDO"`).
_PLACEHOLDER_ALONE_RE = _placeholder_re(r"(?<![a-z]){w}(?![a-z])")


def says_placeholder_alone(value: str) -> bool:
    return _PLACEHOLDER_ALONE_RE.search(value.lower()) is not None or _says_x_placeholder(value)


def _entropy(value: str) -> float:
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


_WORD_CHUNK_RE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def is_identifier(value: str) -> bool:
    """snake_case, CONSTANT, camelCase or dotted.names: code that names a secret, not one."""
    if not _IDENT_RE.match(value):
        return False
    if sum(c.isdigit() for c in value) > 2:
        return False
    # Words average 3+ letters (PostHogAPIKey: 3.25); random tokens split into 1-2 letter chunks.
    return _word_length(value) >= 3.0


def _word_length(value: str) -> float:
    """The average length of the words a name splits into (`PostHogAPIKey`: Post Hog API Key)."""
    chunks = _WORD_CHUNK_RE.findall(value)
    return sum(map(len, chunks)) / len(chunks) if chunks else 0.0


def looks_secret(
    value: str,
    min_len: int = 8,
    min_entropy: float = 3.0,
    *,
    word_shape: bool = False,
    placeholder: Callable[[str], bool] = says_placeholder,
) -> bool:
    """A high-entropy value that is not a reference, placeholder or plain identifier.

    `word_shape`: whether a value shaped like camelCase may still be a secret. Some 7% of random
    34-letter tokens have at most two digits and split into chunks of 3+ letters, so a token
    family known by its prefix and length must not be judged by that shape (hypothesis found an
    `hf_` token the leak-check let through this way).
    """
    if len(value) < min_len:
        return False
    if placeholder(value):
        return False
    if value.startswith("$") or (value.startswith("%") and value.endswith("%")):
        return False  # $VAR, %VAR%
    if not word_shape and is_identifier(value):
        return False
    classes = sum(
        (
            any(c.islower() for c in value),
            any(c.isupper() for c in value),
            any(c.isdigit() for c in value),
            any(not c.isalnum() for c in value),
        )
    )
    if classes < 2:
        return False
    if len(set(value)) <= 3:
        return False
    return _entropy(value) >= min_entropy


def quoted_password_ok(value: str) -> bool:
    """A quoted literal under a password key (`DB_PASSWORD="..."`): a password, unless it is a
    placeholder, a reference or a name that says password.

    Quoted, it is not code naming a secret, so an identifier's shape does not clear it, and its
    entropy is judged for its length: a random 12-character password with a few repeated
    characters reaches 2.9 bits where the generic bar is 3.0 (hypothesis found
    `DB_PASSWORD="ntLptLn4F4E="` and `"yRcu_3dpqtoyd"` let through).
    """
    if "passw" in value.lower():
        return False
    return looks_secret(
        value, min_len=8, min_entropy=2.5, word_shape=True, placeholder=says_placeholder_alone
    )


def b64_says_private(value: str) -> bool:
    head = value[:120]
    head = head[: len(head) - len(head) % 4]
    try:
        return b"PRIVATE KEY" in base64.b64decode(head)
    except ValueError:
        return False


# Well-known defaults and words written where a password goes (`postgres:postgres@`,
# `-p root`): examples and local set-ups, not secrets.
DEFAULT_PASSWORDS = frozenset(
    {
        "pass",
        "pwd",
        "secret",
        "root",
        "admin",
        "user",
        "guest",
        "test",
        "changeme",
        "example",
        "mysql",
        "redis",
        "postgres",
    }
)
_URL_DEFAULTS = DEFAULT_PASSWORDS | {"password", "passwd", "x"}


def url_password_ok(value: str) -> bool:
    low = value.lower()
    if low in _URL_DEFAULTS:
        return False
    if value.startswith(("$", "%", "<", "{", "[")) or "***" in value or "REDACTED" in value:
        return False
    return len(value) >= 3


def bearer_ok(value: str) -> bool:
    return looks_secret(value, min_len=16, min_entropy=3.2)


_PATH_RE = re.compile(r"^[\w.\-]*(?:/[\w.\-]+)+/?$")
# Path segments such as `my-app`, `src`, `Users`, `v2`: words, not base64.
_WORDISH_RE = re.compile(r"^[A-Za-z][a-z]*\d{0,2}(?:[-_][A-Za-z0-9][a-z0-9]*)*$")
HEX_RE = re.compile(r"^[0-9a-fA-F]+$")
_NUMERIC_RE = re.compile(r"^[\d.,:+\-]+[a-zµ%]{0,3}$")


def generic_ok(value: str) -> bool:
    # Assignments in code: calls, address-of, dereference, numbers with units.
    if "(" in value or value[0] in "&*@!" or _NUMERIC_RE.match(value):
        return False
    if "/" in value and _PATH_RE.match(value):
        # `git show branch:cmd/cli/x.go`: a path of word-like segments, not base64.
        segments = [seg for seg in re.split(r"[/.]", value) if seg]
        if value.startswith(("/", "~/", "./", "../")) or all(
            is_identifier(seg.replace("-", "_")) or seg.isdigit() or _WORDISH_RE.match(seg)
            for seg in segments
        ):
            return False
    if value.isalnum() and len(value) >= 16 and (len(value) >= 24 or _word_length(value) < 3.5):
        # Under a key named secret, token or key, a long run of letters and digits is not let
        # through for splitting like a name: 0.2% of random 32-character tokens do (hypothesis
        # found `client_secret: EeNQnWrqfMURssdkpmcyaFaxgkReWQNG`), and of 274,000 names in
        # Python sources 0.03% are that long and split less evenly (so would be redacted here).
        return looks_secret(value, min_len=8, min_entropy=3.0, word_shape=True)
    return looks_secret(value, min_len=8, min_entropy=3.0)
