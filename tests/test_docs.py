"""The docs match the house: every module has a place in docs/design.md's layer table, and every
source path the user pages name exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mxlite"
USER_PAGES = ["README.md", "CONTRIBUTING.md", "kernels/README.md", "benchmarks/RESULTS.md", *(
    str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").glob("*.md")))]
SOURCE_PATH = re.compile(r"`\.?/?((?:[A-Za-z_][\w]*/)*[A-Za-z_][\w]*\.(?:py|cu|cpp|h))(?![\w.])")
SYSTEM_HEADERS = {"cuda_fp16.h", "cuda_bf16.h"}  # CUDA's, installed by the cpu extra


def _layer_table() -> str:
    text = (ROOT / "docs" / "design.md").read_text()
    start = text.index("## Layers as built")
    return text[start:text.index("\n## ", start + 1)]


def test_the_layer_table_places_every_module():
    """A module is placed when its file or one of its folders is named in the table (a named folder
    places every file in it); the emulated CuPy mirrors CuPy's own tree and is placed as a whole."""
    names = set(re.findall(r"`([^`]+)`", _layer_table()))
    unplaced = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        folders = {f"{p}/" for p in parts[:-1]}
        if parts[-1] not in names and not folders & names:
            unplaced.append("/".join(parts))
    assert not unplaced, f"modules missing from docs/design.md's layer table: {unplaced}"


def test_the_pages_name_only_source_files_that_exist():
    """A path such as `mxlite/device/copy.py`, `ops/conv.py` or `kernels/rnn.cu` in a page is a
    file of the repository: a path that ends a repository path matches, a bare file name must exist."""
    files = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
             if p.is_file() and not {".git", ".venv", "build", "out"} & set(p.relative_to(ROOT).parts)]
    names = {f.rsplit("/", 1)[-1] for f in files}
    missing = []
    for page in USER_PAGES:
        for number, line in enumerate((ROOT / page).read_text().splitlines(), 1):
            for path in set(SOURCE_PATH.findall(line)) - SYSTEM_HEADERS:
                found = path in names if "/" not in path else any(f == path or f.endswith("/" + path)
                                                                   for f in files)
                if not found:
                    missing.append(f"{page}:{number}: {path}")
    assert not missing, "pages name source files that do not exist:\n" + "\n".join(missing)
