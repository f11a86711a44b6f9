"""Import a Cline memory bank into a Librarian `_memory_library/` (root-level notes).

Cline's bank is six well-known markdown files plus optional extras, in a fixed hierarchy:
projectbrief -> productContext / systemPatterns / techContext -> activeContext -> progress.
Each becomes (part of) a library note at the root, with its place in that hierarchy kept as a
"Builds on" line. Existing notes are never overwritten: the plan says which are skipped.

Standard library only, and runnable as a script, so the Claude Code plugin can use it without the
`librarian` package installed:
`python3 librarian_dagster/core/library/cline_import.py BANK [--into PATH] [--dry-run]`.
"""

import argparse
import os
import sys
from dataclasses import dataclass, field

if __package__:
    from . import paths as library_paths
else:  # run as a script: Python puts the script's own folder, which holds it, on sys.path
    import paths as library_paths

# Library note -> Cline files merged into it, in order. Matching is case-insensitive on the stem.
CORE_NOTES = {
    "product.md": ("projectbrief", "productContext"),
    "patterns.md": ("systemPatterns",),
    "tech.md": ("techContext",),
    "active.md": ("activeContext",),
    "progress.md": ("progress",),
}
# Cline's hierarchy, expressed on the library notes: note -> the notes it builds on.
BUILDS_ON = {
    "product.md": (),
    "patterns.md": ("product.md",),
    "tech.md": ("product.md",),
    "active.md": ("product.md", "patterns.md", "tech.md"),
    "progress.md": ("active.md",),
}
TITLES = {
    "product.md": "Product",
    "patterns.md": "Patterns",
    "tech.md": "Tech",
    "active.md": "Active context",
    "progress.md": "Progress",
}


@dataclass
class PlannedNote:
    target: str  # file name inside the library root
    sources: list[str]  # bank-relative paths, in merge order
    text: str
    exists: bool = False
    written: bool = False


@dataclass
class ImportPlan:
    bank: str
    library: str
    notes: list[PlannedNote] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"Import {self.bank} -> {self.library}"]
        width = max((len(n.target) for n in self.notes), default=0)
        for note in self.notes:
            if note.exists:
                action, tail = "skip  ", " (exists; not overwritten)"
            else:
                action, tail = "create", f" ({len(note.text):,} characters)"
            sources = ", ".join(note.sources)
            lines.append(f"  {action}  {note.target:<{width}}  <- {sources}{tail}")
        if self.ignored:
            lines.append("  ignored: " + ", ".join(self.ignored))
        return "\n".join(lines)


def find_bank(path: str) -> str:
    """Accept either the `memory-bank/` folder itself or the project folder that holds it."""
    nested = os.path.join(path, "memory-bank")
    return nested if os.path.isdir(nested) else path


def default_library(start: str, env=None) -> str:
    """The library that applies at start (see library_paths), else a new one in start."""
    found = library_paths.library_for(start, env)
    return found or os.path.join(os.path.abspath(start), library_paths.LIBRARY_DIRNAME)


def _bank_files(bank: str) -> tuple[list[str], list[str]]:
    """(markdown files, ignored files), bank-relative with `/`; symlinked files are skipped."""
    found, ignored = [], []
    for dirpath, dirnames, filenames in os.walk(bank):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, bank).replace(os.sep, "/")
            if name.lower().endswith(".md") and not os.path.islink(full):
                found.append(rel)
            else:
                ignored.append(rel)
    return found, ignored


def demote_headings(text: str) -> str:
    """Two levels down (capped at 6), outside code fences: under the note's `#` title and its
    `## From <file>` sections."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            if level <= 6 and line[level : level + 1] in (" ", ""):
                line = "#" * min(6, level + 2) + line[level:]
        out.append(line)
    return "\n".join(out)


def _read(bank: str, rel: str) -> str:
    with open(os.path.join(bank, *rel.split("/")), encoding="utf-8", errors="replace") as fh:
        return fh.read().strip()


def _compose(title: str, sources: list[str], builds_on, bank: str) -> str:
    parts = [f"# {title}", ""]
    parts.append("Imported from the Cline memory bank: " + ", ".join(sources) + ".")
    if builds_on:
        parts.append("Builds on: " + ", ".join(f"[{b}]({b})" for b in builds_on) + ".")
    for rel in sources:
        parts += ["", f"## From {rel}", "", demote_headings(_read(bank, rel))]
    return "\n".join(parts).rstrip() + "\n"


def plan_import(bank_dir: str, library_dir: str) -> ImportPlan:
    bank = os.path.abspath(find_bank(bank_dir))
    library = os.path.abspath(library_dir)
    if not os.path.isdir(bank):
        raise FileNotFoundError(f"no memory bank at {bank_dir}")
    files, ignored = _bank_files(bank)
    by_stem = {}
    for rel in files:
        if "/" not in rel:
            by_stem.setdefault(rel[:-3].lower(), rel)
    plan = ImportPlan(bank=bank, library=library, ignored=ignored)
    used = set()
    for target, stems in CORE_NOTES.items():
        sources = [by_stem[s.lower()] for s in stems if s.lower() in by_stem]
        sources = [s for s in sources if _read(bank, s)]
        if not sources:
            continue
        used.update(sources)
        text = _compose(TITLES[target], sources, BUILDS_ON[target], bank)
        plan.notes.append(PlannedNote(target, sources, text))
    taken = {n.target for n in plan.notes}
    for rel in files:
        if rel in used or not _read(bank, rel):
            continue
        # Extras become root notes too; sub-folders would mean repository paths in the library.
        stem = rel[:-3].replace("/", "-")
        target, k = f"{stem}.md", 2
        while target.lower() in taken:
            target, k = f"{stem}-{k}.md", k + 1
        taken.add(target.lower())
        text = _compose(stem, [rel], ("product.md",), bank)
        plan.notes.append(PlannedNote(target, [rel], text))
    for note in plan.notes:
        note.exists = os.path.lexists(os.path.join(library, note.target))
    return plan


def apply_plan(plan: ImportPlan) -> int:
    """Write the planned notes that do not exist yet; return how many were written."""
    os.makedirs(plan.library, exist_ok=True)
    written = 0
    for note in plan.notes:
        if note.exists:
            continue
        try:
            # "x": never overwrite, even a note that appeared after the plan was made.
            with open(os.path.join(plan.library, note.target), "x", encoding="utf-8") as fh:
                fh.write(note.text)
        except FileExistsError:
            note.exists = True
            continue
        note.written = True
        written += 1
    return written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "memory_bank_dir",
        metavar="MEMORY_BANK_DIR",
        help="a Cline memory-bank/ folder, or the project folder holding one",
    )
    parser.add_argument(
        "--into",
        metavar="PATH",
        default=None,
        help="library folder (default: $LIBRARIAN_PATH, else the nearest _memory_library/ "
        "above the current folder, else ./_memory_library)",
    )
    parser.add_argument("--dry-run", action="store_true", help="show the plan, write nothing")


def run_import(args: argparse.Namespace) -> int:
    library = args.into or default_library(os.getcwd())
    try:
        plan = plan_import(args.memory_bank_dir, library)
    except FileNotFoundError as exc:
        print(f"librarian library import: {exc}", file=sys.stderr)
        return 2
    if not plan.notes:
        print(f"librarian library import: no markdown notes in {plan.bank}", file=sys.stderr)
        return 2
    print(plan.render())
    if args.dry_run:
        print("Dry run: nothing written.")
        return 0
    written = apply_plan(plan)
    skipped = sum(1 for n in plan.notes if n.exists)
    print(f"Wrote {written} note(s) to {plan.library}; skipped {skipped} existing.")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="library-import", description="Import a Cline memory bank into a Librarian library."
    )
    add_arguments(parser)
    return run_import(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
