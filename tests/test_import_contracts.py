"""The import contracts of pyproject.toml catch what they promise: a copy of the packages with one
forbidden import added breaks exactly the contracts that forbid it (docs/architecture.md)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("librarian_dagster", "mcp_server")

# what is added -> the module it goes into, the import, the contracts it breaks
VIOLATIONS = {
    "core imports Dagster": (
        "librarian_dagster/core/digest/tags.py",
        "import dagster",
        "core imports no Dagster, no MCP and nothing that uses core",
    ),
    "core imports a Dagster definition, lazily": (
        "librarian_dagster/core/recall/cards.py",
        "def _late():\n    from librarian_dagster.defs import partitions",
        "core imports no Dagster, no MCP and nothing that uses core",
        # and so, through core, the recall server would import Dagster too
        "the recall server imports no Dagster",
    ),
    "the recall server forgets through Dagster": (
        "mcp_server/page.py",
        "def _late():\n    from librarian_dagster.forget import DagsterRunHistory",
        "the recall server imports no Dagster",
    ),
    "a Dagster sensor imports the command": (
        "librarian_dagster/defs/sensors.py",
        "from librarian_dagster.cli import main",
        "nothing imports the command line",
    ),
    "the page imports the app that serves it": (
        "mcp_server/page.py",
        "def _late():\n    from mcp_server.app import http_app",
        "the recall server's modules import downward only",
    ),
    "the store imports recall": (
        "librarian_dagster/core/store/files.py",
        "from librarian_dagster.core.recall import terms",
        "core's layers import downward only",
    ),
}

CONTRACTS = {contract for _, _, *broken in VIOLATIONS.values() for contract in broken}


@pytest.fixture(scope="module")
def lint_imports():
    """lint-imports over a copy of the packages, with the repository's contracts."""
    binary = Path(sys.executable).with_name("lint-imports")
    if not binary.exists():
        pytest.skip("lint-imports is not installed beside this Python")

    def run(root: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(binary), "--no-cache", str(REPO / "pyproject.toml")],
            cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    return run


def _copy(tmp_path: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(
            REPO / package,
            tmp_path / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.onnx", "static", "templates"),
        )
    return tmp_path


def test_the_packages_as_they_are_keep_every_contract(tmp_path, lint_imports):
    done = lint_imports(_copy(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    kept = {line.removesuffix(" KEPT") for line in done.stdout.splitlines()}
    assert kept >= CONTRACTS  # each is checked, and each is one a violation below breaks


@pytest.mark.parametrize("violation", sorted(VIOLATIONS))
def test_a_forbidden_import_breaks_its_contract(tmp_path, lint_imports, violation):
    module, added, *contracts = VIOLATIONS[violation]
    root = _copy(tmp_path)
    path = root / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n\n{added}\n", encoding="utf-8")
    done = lint_imports(root)
    assert done.returncode == 1, done.stdout + done.stderr
    broken = {line.removesuffix(" BROKEN") for line in done.stdout.splitlines()}
    assert broken & CONTRACTS == set(contracts)
