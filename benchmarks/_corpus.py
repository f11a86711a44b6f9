"""The dev corpus, unpacked once into a folder outside the repository, and an ingest into a home."""

import tarfile
import tempfile
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TARBALL = SHARED / "corpus" / "entire-dev.tar.xz"
GOLDEN = SHARED / "eval" / "golden-dev.jsonl"


def unpack_corpus(target: Path | None = None) -> Path:
    """Return the folder of the 199 sessions, unpacking the tarball if it is not there yet."""
    target = target or Path(tempfile.gettempdir()) / "librarian-dev-corpus"
    sessions = target / "dev"
    if not sessions.is_dir() or len(list(sessions.glob("*.jsonl"))) < 199:
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(TARBALL) as tar:
            tar.extractall(target, filter="data")
    return sessions
