"""Tags, one spelling each: lower case, hyphens for spaces, a small map of synonyms.

Applied on the write path to every digest, whoever wrote it, so that `--tag postgres` finds the
sessions an LLM tagged "PostgreSQL", "postgresql" or "Postgres" alike, and the vocabulary
converges (the most used tags are also offered to the LLM in its prompt). The canonical
spellings are the offline digester's, so its tags are unchanged by normalisation.
"""

import re
from collections.abc import Iterable

MAX_TAGS = 8
MAX_TAG_CHARS = 40

SYNONYMS: dict[str, str] = {
    "py": "python", "python3": "python",
    "postgresql": "postgres", "psql": "postgres", "pg": "postgres", "pgsql": "postgres",
    "js": "javascript", "node": "nodejs", "node-js": "nodejs",
    "ts": "typescript",
    "golang": "go",
    "k8s": "kubernetes", "kube": "kubernetes",
    "tests": "testing", "test": "testing", "unit-tests": "testing", "unit-testing": "testing",
    "ci-cd": "ci", "cicd": "ci", "continuous-integration": "ci",
    "gh": "github", "github-actions": "github",
    "documentation": "docs",
    "bash": "shell", "sh": "shell", "zsh": "shell",
    "llms": "llm", "large-language-models": "llm",
    "gcp": "google-cloud", "vertex-ai": "vertex", "vertexai": "vertex",
    "db": "database", "databases": "database",
    "dagster-io": "dagster",
    "yml": "yaml",
    "c++": "cpp", "c#": "csharp",
}  # fmt: skip


def normalize_tag(tag: str) -> str:
    """One tag's spelling: `PostgreSQL` -> `postgres`, `Unit Tests` -> `testing`, `#CI` -> `ci`."""
    text = tag.strip().lower().lstrip("#")
    if text in SYNONYMS:  # before punctuation goes: "c++", "c#"
        return SYNONYMS[text]
    text = re.sub(r"[\s_/]+", "-", text)
    text = re.sub(r"[^a-z0-9.+#-]", "", text).strip("-.")
    text = re.sub(r"-{2,}", "-", text)[:MAX_TAG_CHARS].strip("-")
    return SYNONYMS.get(text, text)


def normalize_tags(tags: Iterable[str]) -> list[str]:
    """Each tag in its one spelling, empty ones dropped, duplicates removed, at most MAX_TAGS."""
    out: list[str] = []
    for tag in tags:
        canonical = normalize_tag(tag)
        if canonical and canonical not in out:
            out.append(canonical)
    return out[:MAX_TAGS]
