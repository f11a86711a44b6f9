"""The layout's promises (decision 0028): `core` is Dagster- and MCP-free, every module is short."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "librarian_dagster"
CORE = PACKAGE / "core"


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return roots


def test_core_imports_neither_dagster_nor_mcp():
    offenders = {
        str(path.relative_to(CORE)): sorted(_imported_roots(path) & {"dagster", "mcp"})
        for path in CORE.rglob("*.py")
    }
    assert {name: roots for name, roots in offenders.items() if roots} == {}


def test_every_core_module_lives_in_a_folder_of_its_concern():
    top = sorted(p.name for p in CORE.glob("*.py") if p.name != "__init__.py")
    assert top == ["commandline.py", "settings.py"]
    for folder in (p for p in CORE.iterdir() if p.is_dir() and p.name != "__pycache__"):
        init = folder / "__init__.py"
        assert init.is_file(), f"{folder.name}/ is not a package"
        assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), (
            f"{folder.name}/__init__.py says in a docstring what the folder holds"
        )
