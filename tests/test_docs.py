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


# A path in a page: folders (`ops/`, `mxlite/device/_hostcuda/`) and files with a repository
# extension (`mxlite/ops/conv.py`, `kernels/rnn.cu`, `docs/graphs.md`, `pyproject.toml` when it has a `/`).
_PATH_IN_CODE = re.compile(
    r"(?<![\w.~/$<>-])((?:\.\.?/)?(?:[A-Za-z_][\w.-]*/)+(?:[\w-][\w.-]*\.(?:py|cu|cuh|md|toml)(?![\w.])|(?![\w.])))")
_TOP_FOLDERS = r"(?:mxlite|kernels|docs|tests|benchmarks|tools)"
# A code span that is a path below a top-level folder, with or without extension (`mxlite/device/_hostcuda`).
_WHOLE_SPAN_PATH = re.compile(_TOP_FOLDERS + r"(?:/[\w.-]+)+/?")
# A file path in running text (docs/design.md, tests/test_docs.py).
_PATH_IN_TEXT = re.compile(r"(?<![\w.~/$<>-])(" + _TOP_FOLDERS + r"/[\w./-]*\.(?:py|cu|cuh|md|toml))(?![\w.])")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
# Paths the user's machine or another project holds, not this repository.
_NOT_IN_THE_REPOSITORY = ("out/", "python/mxnet/")


def _repository_entries() -> set[str]:
    skipped = {".git", ".venv", "build", "out", "mxlite.egg-info", "__pycache__", ".pytest_cache"}
    return {p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if not skipped & set(p.relative_to(ROOT).parts)}


def _named_paths(line: str) -> list[str]:
    spans = _CODE_SPAN.findall(line)
    paths = [m for span in spans for m in _PATH_IN_CODE.findall(span)]
    paths += [span for span in spans if _WHOLE_SPAN_PATH.fullmatch(span)]
    paths += _PATH_IN_TEXT.findall(line)
    paths += [target.split("#", 1)[0] for target in _LINK.findall(line) if not target.startswith(("http", "#"))]
    return list(dict.fromkeys(p for p in paths if p and not p.startswith(_NOT_IN_THE_REPOSITORY)))


def _exists(path: str, page: str, entries: set[str]) -> bool:
    """A path exists relative to the repository root or to the page's folder, or ends a repository path
    (`ops/conv.py` in a page about the package names `mxlite/ops/conv.py`)."""
    for base in (ROOT, (ROOT / page).parent):
        if (base / path).exists():
            return True
    tail = path.lstrip("./").rstrip("/")
    return any(entry == tail or entry.endswith("/" + tail) for entry in entries)


def test_the_pages_name_only_paths_and_links_that_exist():
    """Every folder, source, kernel, page or TOML path named in backticks, and every link target, in
    README.md, CONTRIBUTING.md, kernels/README.md, benchmarks/RESULTS.md and docs/*.md exists."""
    entries = _repository_entries()
    missing = [f"{page}:{number}: {path}"
               for page in USER_PAGES
               for number, line in enumerate((ROOT / page).read_text().splitlines(), 1)
               for path in _named_paths(line) if not _exists(path, page, entries)]
    assert not missing, "pages name paths that do not exist:\n" + "\n".join(missing)


def test_the_path_check_sees_folders_files_and_links():
    """The check above finds the paths it must judge, and leaves code that is not a path alone."""
    line = ("`mxlite/_hostcuda/`, `mxlite/autograd/ops.py`, [x](docs/nope.md), `-x/(x+1)`, `mxlite/rnn`, "
            "`~/.mxnet/models`, `out/model.npz`, `kernels/conv.cu`, see docs/old.md, mxlite/torch ratios")
    assert _named_paths(line) == ["mxlite/_hostcuda/", "mxlite/autograd/ops.py", "kernels/conv.cu", "mxlite/rnn",
                                  "docs/nope.md", "docs/old.md"]
    entries = _repository_entries()
    assert not _exists("mxlite/_hostcuda/", "README.md", entries)
    assert _exists("_hostcuda/", "docs/design.md", entries)
    assert _exists("sharding.md", "docs/design.md", entries)
    assert _exists("../benchmarks/scaling_model.png", "docs/scaling.md", entries)
