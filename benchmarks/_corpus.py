"""The dev corpus, unpacked once into a folder outside the repository, and an ingest into a home."""

import tarfile
import tempfile
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TARBALL = SHARED / "corpus" / "entire-dev.tar.xz"
GOLDEN = SHARED / "eval" / "golden-dev.jsonl"
AGENTS_TARBALL = SHARED / "corpus" / "agents-dev.tar.xz"
"""Native transcripts of Codex, OpenCode, Copilot CLI, Pi and Gemini CLI, beside 50 of Claude
Code's: `agents/<agent>/<project>/<session>.jsonl` (or `.json`) and `agents/manifest.jsonl`."""


def unpack_corpus(target: Path | None = None) -> Path:
    """Return the folder of the 199 sessions, unpacking the tarball if it is not there yet."""
    target = target or Path(tempfile.gettempdir()) / "librarian-dev-corpus"
    sessions = target / "dev"
    if not sessions.is_dir() or len(list(sessions.glob("*.jsonl"))) < 199:
        extract(TARBALL, target)
    return sessions


def unpack_agents(target: Path | None = None) -> Path:
    """Return the `agents/` folder of the agents corpus, unpacking it if it is not there yet."""
    target = target or Path(tempfile.gettempdir()) / "librarian-agents-corpus"
    agents = target / "agents"
    if not (agents / "manifest.jsonl").is_file():
        extract(AGENTS_TARBALL, target)
    return agents


def extract(tarball: Path, target: Path) -> None:
    """Unpack a tarball safely: the "data" filter where this Python has it (3.11.4+, 3.12+)."""
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(target, filter="data")
        else:  # Debian 12's Python 3.11.2: the corpus is our own, shipped in shared/
            tar.extractall(target)
