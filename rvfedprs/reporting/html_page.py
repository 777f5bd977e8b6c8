"""The page skeleton and style shared by the HTML reports (data report, assessment report).

One self-contained page: a title, the shared CSS, the caller's body parts and figures embedded
as base64 PNGs (:func:`png_img`).
"""

from __future__ import annotations

import html
from collections.abc import Iterable

__all__ = ["page_css", "png_img", "html_page"]


def page_css(text_columns: int = 1) -> str:
    """The reports' CSS; table cells are right-aligned but for the first ``text_columns``."""
    left = f"td:nth-child(-n+{text_columns}), th:nth-child(-n+{text_columns})"
    return f"""
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
th {{ background: #f0f0f0; }} {left} {{ text-align: left; }}
img {{ max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }}
.note {{ color: #555; font-size: 0.9em; }}
"""


def png_img(png: str, alt: str) -> str:
    """An ``<img>`` showing a base64 PNG."""
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{png}'>"


def html_page(title: str, body: Iterable[str], *, text_columns: int = 1) -> str:
    """A whole HTML page: head (title, :func:`page_css`), ``<h1>`` title, ``body``, one a line.

    Parameters
    ----------
    title : str
        Plain text (escaped here).
    body : iterable of str
        HTML fragments, in order.
    text_columns : int
        Left-aligned leading table columns.
    """
    escaped = html.escape(title)
    return "\n".join(
        [
            f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escaped}</title>",
            f"<style>{page_css(text_columns)}</style></head><body><h1>{escaped}</h1>",
            *body,
            "</body></html>",
        ]
    )
