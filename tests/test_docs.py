"""The documentation site (``mkdocs.yml``, ``docs/``): its code blocks and generated pages.

Every fenced block of every page is checked by what it is: ``python`` blocks run, page by page
in one interpreter (a tutorial's blocks build on each other), in a reader's folder rebuilt as
``tests/test_readme_snippets.py`` rebuilds it for the README (``repo/`` as the working
directory, a small synthetic federation in ``results/``, ``../shared`` linked where this
checkout has one); every ``rvfedprs`` command of a shell block names a sub-command and options
the parser has; YAML, TOML and JSON blocks parse. A block that cannot run says why on the line
before it (``<!-- docs-test: not run, REASON -->``). The generated reference pages
(``scripts/reference_pages.py``) must match what the schemas, the parser and
``rvfedprs.__all__`` give now. ``.ci/run`` builds the site with warnings as errors.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
SHARED = REPO.parent / "shared"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reference_pages = _load("reference_pages", REPO / "scripts" / "reference_pages.py")
repo_links = _load("repo_links", DOCS / "_hooks" / "repo_links.py")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    not_run: str | None  # the reason given on the line before, when it is not run

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)(?P<lang>[\w+-]*)[^\n]*\n"
    r"(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
_NOT_RUN = re.compile(r"<!--\s*docs-test:\s*not run,\s*(?P<reason>.+?)\s*-->\s*$")

SHELL = {"bash", "sh", "shell", "console"}
#: Languages whose blocks are output or listings, not something a reader runs.
TEXT = {"text", "tsv"}


def code_blocks(page: Path, markdown: str | None = None) -> list[Block]:
    """Every fenced block of ``page`` (or of ``markdown``, read as that page)."""
    markdown = page.read_text() if markdown is None else markdown
    blocks = []
    for match in _FENCE.finditer(markdown):
        indent = match.group("indent")
        body = "".join(
            line[len(indent) :] if line.startswith(indent) else line
            for line in match.group("body").splitlines(keepends=True)
        )
        before = markdown[: match.start()].rstrip().rsplit("\n", 1)[-1]
        reason = _NOT_RUN.search(before)
        blocks.append(
            Block(
                page,
                markdown.count("\n", 0, match.start()) + 1,
                match.group("lang").lower(),
                body,
                reason.group("reason") if reason else None,
            )
        )
    return blocks


BLOCKS = [block for page in PAGES for block in code_blocks(page)]


def test_block_extraction_reads_languages_indents_and_reasons():
    text = (
        "a\n```python\nx = 1\n```\n- item\n\n    ```bash\n    rvfedprs train --help\n    ```\n"
        "<!-- docs-test: not run, a sketch -->\n```python\nf(...)\n```\n"
    )
    found = code_blocks(DOCS / "x.md", text)
    assert [(b.line, b.lang, b.code, b.not_run) for b in found] == [
        (2, "python", "x = 1\n", None),
        (7, "bash", "rvfedprs train --help\n", None),
        (11, "python", "f(...)\n", "a sketch"),
    ]


def test_every_block_is_of_a_kind_the_tests_check():
    known = SHELL | TEXT | {"python", "yaml", "toml", "json", ""}
    assert [b.where for b in BLOCKS if b.lang not in known] == []


# --- shell blocks: every rvfedprs command names what the parser has -------------------------


def rvfedprs_commands(code: str) -> list[list[str]]:
    """The argument lists of the ``rvfedprs ...`` commands of a shell block (without prompts)."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        line = line.strip().removeprefix("$ ")
        if "rvfedprs" not in line or line.startswith("#"):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split, lexer.commenters = True, "#"
        try:
            tokens = list(lexer)
        except ValueError:  # a quote that spans lines: a python -c, not an rvfedprs command
            if line.startswith("rvfedprs "):
                raise
            continue
        words: list[str] = []
        target = False
        for token in [*tokens, ";"]:
            if target:  # the file of a redirection
                target = False
            elif token in (">", ">>", "<", "<<", ">&", "&>"):
                if words and words[-1] in ("1", "2"):
                    words.pop()
                target = True
            elif set(token) <= set(";&|()<>"):
                while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
                    words.pop(0)  # VAR=value before the command
                if words[:1] == ["rvfedprs"]:
                    commands.append(words[1:])
                words = []
            else:
                words.append(token)
    return commands


def _sub_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def command_problems(args: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """What in ``rvfedprs ARGS`` the parser does not have: a sub-command, an option."""
    problems = []
    words = list(args)
    while subs := _sub_parsers(parser):
        own = {s for action in parser._actions for s in action.option_strings}
        while words and words[0] in own:  # rvfedprs -v train ...
            if words.pop(0) in ("-h", "--help", "--version"):
                return []
        if not words:
            return [f"{parser.prog}: the sub-command is missing"]
        name = words.pop(0)
        if name not in subs:
            return [f"no sub-command {name!r} (choose from {sorted(subs)})"]
        parser = subs[name]
    options = {s for action in parser._actions for s in action.option_strings}
    for word in words:
        if word.startswith("-") and not re.fullmatch(r"-\d.*", word):
            option = word.split("=", 1)[0]
            if option not in options:
                problems.append(f"{parser.prog} has no option {option}")
    return problems


def test_command_checks_name_a_missing_option_and_sub_command():
    from rvfedprs.cli import build_parser

    parser = build_parser()
    assert rvfedprs_commands("X=1 rvfedprs train --out a \\\n  --strategy fedce  # c\n") == [
        ["train", "--out", "a", "--strategy", "fedce"]
    ]
    assert rvfedprs_commands("cd x && rvfedprs site --dry-run 2> log | tee y; python -c 'a;b'") == [
        ["site", "--dry-run"]
    ]
    assert command_problems(["train", "--strategy", "fedce"], parser) == []
    assert command_problems(["train", "--no-such"], parser) == [
        "rvfedprs train has no option --no-such"
    ]
    assert command_problems(["trian"], parser)[0].startswith("no sub-command 'trian'")
    assert command_problems(["prepare", "score", "--scorefile", "x"], parser) == []


SHELL_BLOCKS = [b for b in BLOCKS if b.lang in SHELL or (b.lang == "" and "rvfedprs " in b.code)]


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=lambda b: b.where)
def test_shell_block_commands_exist(block):
    from rvfedprs.cli import build_parser

    parser = build_parser()
    problems = [
        f"rvfedprs {' '.join(args)}: {problem}"
        for args in rvfedprs_commands(block.code)
        for problem in command_problems(args, parser)
    ]
    assert problems == [], f"{block.where}:\n" + "\n".join(problems)


# --- data blocks parse ---------------------------------------------------------------------

_PARSERS = {"yaml": yaml.safe_load, "toml": tomllib.loads, "json": json.loads}


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if b.lang in _PARSERS and not b.not_run], ids=lambda b: b.where
)
def test_data_block_parses(block):
    _PARSERS[block.lang](block.code)


# --- python blocks run ---------------------------------------------------------------------

_RUNNER = """
import json, sys, traceback

_rvf_page, _rvf_blocks = sys.argv[1], json.load(open(sys.argv[2]))
for _rvf_line, _rvf_code in _rvf_blocks:  # in this module's namespace: __main__:Class resolves
    try:
        exec(compile(_rvf_code, f"{_rvf_page}:{_rvf_line}", "exec"), globals())
    except BaseException:
        traceback.print_exc()
        sys.exit(f"the block at {_rvf_page}:{_rvf_line} failed")
"""

PYTHON_PAGES = sorted(
    {b.page for b in BLOCKS if b.lang == "python" and not b.not_run}, key=lambda p: str(p)
)


def _needs_absent_data(code: str) -> str | None:
    if "../shared/data" in code and not (SHARED / "data").is_dir():
        return f"a block reads ../shared/data, absent here ({SHARED / 'data'})"
    return None


@pytest.fixture(scope="module")
def federation_folder(tmp_path_factory) -> Path:
    """The workflow's per-site inputs (``results/``) of a small synthetic federation."""
    root = tmp_path_factory.mktemp("workflow")
    return write_federation(root, n_clients=4, n_clusters=2, samples_per_client=200)["data"]


def test_not_run_python_blocks_give_a_reason():
    sketches = [b for b in BLOCKS if b.lang == "python" and b.not_run]
    assert all(len(b.not_run) > 5 for b in sketches)


@pytest.mark.slow
@pytest.mark.parametrize("page", PYTHON_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_python_blocks_run(page, tmp_path, federation_folder):
    blocks = [b for b in code_blocks(page) if b.lang == "python" and not b.not_run]
    reason = next(filter(None, (_needs_absent_data(b.code) for b in blocks)), None)
    if reason:
        pytest.skip(reason)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "results").symlink_to(federation_folder)
    if SHARED.is_dir():
        (tmp_path / "shared").symlink_to(SHARED)
    listing = tmp_path / "blocks.json"
    listing.write_text(json.dumps([(b.line, b.code) for b in blocks]))
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER, str(page.relative_to(REPO)), str(listing)],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]


# --- generated pages -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["configuration.md", "cli.md", "python.md"])
def test_generated_reference_page_is_current(name):
    page = DOCS / "reference" / name
    text = reference_pages.pages()[page]
    assert page.is_file() and page.read_text() == text, (
        f"{page.relative_to(REPO)} is stale: run python scripts/reference_pages.py"
    )


def _leaves(config: dict, prefix: str = ""):
    for key, value in config.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value:
            yield from _leaves(value, name)
        else:
            yield name, value


def test_configuration_reference_lists_every_key_with_its_default():
    from rvfedprs.config import validate_config

    text = (DOCS / "reference" / "configuration.md").read_text()
    rows = dict(re.findall(r"^\| `([^`]+)` \| .*? \| `(.*?)` \| ", text, re.MULTILINE))
    missing, wrong = [], []
    for name, value in _leaves(validate_config({})):
        # a mapping-valued default (a key whose values are free) is one row, its default whole
        while name not in rows and "." in name:
            name, value = name.rsplit(".", 1)[0], None
        if name not in rows:
            missing.append(name)
        elif value is not None and rows[name] != json.dumps(value, ensure_ascii=False).replace(
            "|", "\\|"
        ):
            wrong.append((name, rows[name], value))
    assert missing == [] and wrong == []
    assert len(rows) >= 300


def test_the_api_reference_documents_every_public_name():
    text = (DOCS / "reference" / "python.md").read_text()
    assert [path for path in reference_pages.public_paths() if f"::: {path}\n" not in text] == []


# --- the site build --------------------------------------------------------------------------


def test_out_of_docs_links_become_repository_paths(tmp_path):
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (tmp_path / "BENCHMARKS.md").write_text("x")
    (tmp_path / "simulations").mkdir()
    page_dir = docs / "sub"
    text = (
        "[the benchmarks](../../BENCHMARKS.md#a) and [`simulations/`](../../simulations/), "
        "[gone](../../gone.md), [inside](../x.md)\n```\n[code](../../BENCHMARKS.md)\n```\n"
    )
    plain = repo_links._rewrite(text, page_dir, docs, tmp_path, None)
    assert plain.startswith("the benchmarks (`BENCHMARKS.md`) and `simulations/`, [gone](")
    assert "[inside](../x.md)" in plain and "[code](../../BENCHMARKS.md)" in plain
    linked = repo_links._rewrite(text, page_dir, docs, tmp_path, "https://forge/o/r")
    assert "[the benchmarks](https://forge/o/r/blob/main/BENCHMARKS.md#a)" in linked
    assert "[`simulations/`](https://forge/o/r/tree/main/simulations)" in linked


def test_sphinx_roles_are_dropped_from_rendered_docstrings():
    html = "(:func:<code>~rvfedprs.config.load_config</code>, :class:<code>a.B</code>)"
    assert repo_links._drop_roles(html) == "(<code>load_config</code>, <code>a.B</code>)"


def test_ci_builds_the_site_strictly_after_the_tests():
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    tests = next(i for i, line in enumerate(lines) if "python -m pytest" in line)
    build = next(i for i, line in enumerate(lines) if "mkdocs build --strict" in line)
    assert build > tests
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text().replace("!!python", "#"))["nav"]
    assert [list(section)[0] for section in nav] == [
        "Home",
        "Tutorials",
        "How-to guides",
        "Reference",
        "Explanation",
    ]


def _github_slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_benchmarks_opens_with_one_summary_table_whose_links_resolve():
    text = (REPO / "BENCHMARKS.md").read_text()
    headings = re.findall(r"^#{2,3} (.+)$", text, re.MULTILINE)
    assert headings[0] == "Summary"
    summary = text.split("\n## Summary\n", 1)[1].split("\n## ", 1)[0]
    assert summary.count("\n|---|") == 1
    slugs = {_github_slug(h) for h in headings}
    anchors = re.findall(r"\]\(#([^)]+)\)", summary)
    assert len(anchors) >= 10 and [a for a in anchors if a not in slugs] == []
