"""mkdocs hooks: links from a page to repository files outside ``docs/``; Sphinx roles.

The pages are also read on the forge and in a checkout, where ``../simulations/`` or
``../BENCHMARKS.md`` resolve; the built site holds only ``docs/``. A relative link to a file or
folder of the repository outside ``docs/`` becomes a link to it on ``repo_url`` when
``mkdocs.yml`` sets one, and otherwise plain text naming the path. A link whose target does not
exist is left alone, so that ``mkdocs build --strict`` still fails on it.

The docstrings cite names as Sphinx does (``:func:`~rvfedprs.config.load_config```), which
mkdocstrings renders as the role's text followed by the code; the role is dropped from the
rendered page, and a ``~`` keeps only the last component, as Sphinx shows it.
"""

from __future__ import annotations

import re
from pathlib import Path

_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s]+)\)")
_ROLE = re.compile(
    r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const):<code>(~?)([^<]*)</code>"
)
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


def _outside(target: str, page_dir: Path, docs: Path, repo: Path) -> str | None:
    """The repository path ``target`` names when it lies outside ``docs/`` and exists, or None."""
    if re.match(r"^[a-z]+:", target) or target.startswith(("#", "/")):
        return None
    path = target.split("#", 1)[0]
    resolved = (page_dir / path).resolve()
    if resolved == docs or docs in resolved.parents or not resolved.exists():
        return None
    if repo != resolved and repo not in resolved.parents:
        return None
    name = resolved.relative_to(repo).as_posix() or "."
    return name + ("/" if resolved.is_dir() and name != "." else "")


def _rewrite(markdown: str, page_dir: Path, docs: Path, repo: Path, repo_url: str | None) -> str:
    def replace(match: re.Match[str]) -> str:
        target = match.group("target")
        name = _outside(target, page_dir, docs, repo)
        if name is None:
            return match.group(0)
        text = match.group("text")
        if repo_url:
            anchor = "#" + target.split("#", 1)[1] if "#" in target else ""
            kind = "tree" if name.endswith("/") else "blob"
            return f"[{text}]({repo_url.rstrip('/')}/{kind}/main/{name.rstrip('/')}{anchor})"
        if text.strip("`").rstrip("/") in (name.rstrip("/"), Path(name).name):
            return text
        return f"{text} (`{name}`)"

    pieces, last = [], 0
    for fence in _FENCE.finditer(markdown):  # code blocks are left as written
        pieces.append(_LINK.sub(replace, markdown[last : fence.start()]))
        pieces.append(fence.group(0))
        last = fence.end()
    pieces.append(_LINK.sub(replace, markdown[last:]))
    return "".join(pieces)


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 (mkdocs hook signature)
    """The page's Markdown with its links out of ``docs/`` rewritten (mkdocs event)."""
    docs = Path(config["docs_dir"]).resolve()
    repo = Path(config["config_file_path"]).resolve().parent
    page_dir = (docs / page.file.src_path).parent
    return _rewrite(markdown, page_dir, docs, repo, config.get("repo_url"))


def _drop_roles(html: str) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2)
        return f"<code>{name}</code>"

    return _ROLE.sub(replace, html)


def on_page_content(html, page, config, files):  # noqa: ARG001 (mkdocs hook signature)
    """The rendered page without the Sphinx roles of its docstrings (mkdocs event)."""
    return _drop_roles(html)
