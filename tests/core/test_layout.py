"""The layout's promises (decision 0028): every core module lives in a folder of its concern, every
function is short. What may import what is pyproject.toml's import contracts
(tests/test_import_contracts.py)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "librarian_dagster"
CORE = PACKAGE / "core"


def test_every_core_module_lives_in_a_folder_of_its_concern():
    top = sorted(p.name for p in CORE.glob("*.py") if p.name != "__init__.py")
    assert top == ["commandline.py", "settings.py"]
    for folder in (p for p in CORE.iterdir() if p.is_dir() and p.name != "__pycache__"):
        init = folder / "__init__.py"
        assert init.is_file(), f"{folder.name}/ is not a package"
        assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), (
            f"{folder.name}/__init__.py says in a docstring what the folder holds"
        )


def test_no_function_is_longer_than_sixty_lines():
    """docs/architecture.md: a function that needs more is split into named steps."""
    longer = []
    for root in (PACKAGE, PACKAGE.parent / "mcp_server"):
        for path in root.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > 60:
                        longer.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name}")
    assert longer == []


ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
# Bottom-up, as docs/architecture.md's table of layers reads from the foot.
FOLDERS = ("capture", "redaction", "models", "digest", "push", "store", "recall", "library",
           "connect", "service", "consolidation", "assembly")  # fmt: skip
DATA_FILES = {
    "models": ["`minilm_graph.onnx` (the MiniLM graph, decision 0024)"],
    "service": ["`dagster_instance.yaml` (shared with deploy/dagster.yaml)"],
}
BEGIN, END = "<!-- modules: begin -->", "<!-- modules: end -->"


def _first_line(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = doc.split("\n\n")[0].replace("\n", " ")
    return paragraph.split(". ")[0].rstrip(".")


def module_listing() -> str:
    """Every folder of core with its docstring's first line, and the modules it holds."""
    out = ["**`librarian_dagster/core/`**: " + _names(CORE)]
    for folder in FOLDERS:
        holds = _first_line(CORE / folder / "__init__.py")
        names = [_names(CORE / folder), *DATA_FILES.get(folder, [])]
        packages = sorted(p.parent for p in (CORE / folder).glob("*/__init__.py"))
        # A folder of its own inside a concern (an agent's reader): its modules beside its name.
        names += [f"`{p.name}/` ({_names(p)})" for p in packages]
        out += ["", f"**`librarian_dagster/core/{folder}/`**: {holds}: {', '.join(names)}."]
    return "\n".join(out)


def _names(folder: Path) -> str:
    return ", ".join(f"`{p.name}`" for p in sorted(folder.glob("*.py")) if p.name != "__init__.py")


def _documented() -> str:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip("\n")


def test_the_architecture_lists_every_module_as_its_docstring_says():
    assert set(FOLDERS) == {p.name for p in CORE.iterdir() if (p / "__init__.py").is_file()}
    assert _documented() == module_listing(), "python -m tests.core.test_layout rewrites it"


if __name__ == "__main__":  # rewrite docs/architecture.md's listing
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    ARCHITECTURE.write_text(f"{text[:start]}\n{module_listing()}\n{text[end:]}", encoding="utf-8")
