"""The card as one self-contained HTML page, for MLflow's artifact viewer.

MLflow shows a ``.md`` artifact as Markdown but leaves its images as text (the viewer has no
way to fetch a picture named relatively), while it shows an ``.html`` artifact as a page. So the
card's Markdown is also rendered to ``card.html``, with every plot it names embedded as a
``data:image/png;base64`` URI: the page needs nothing beside it, and opens the same in the
viewer, from a downloaded artifact, or from the sweep directory.

The HTML is rendered from the card's own Markdown (CommonMark with tables, by markdown-it-py),
so the two never say different things.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from pathlib import Path

_STYLE = """
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; font-size: 14px;
       line-height: 1.45; color: #1f2328; margin: 16px; max-width: 1000px; }
h1 { font-size: 1.6em; border-bottom: 1px solid #d0d7de; padding-bottom: .2em; }
h2 { font-size: 1.3em; border-bottom: 1px solid #d0d7de; padding-bottom: .2em; margin-top: 1.4em; }
h3 { font-size: 1.1em; }
table { border-collapse: collapse; margin: .6em 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
code { background: #f6f8fa; padding: .1em .3em; border-radius: 4px; font-size: 90%; }
img { max-width: 100%; height: auto; display: block; margin: .6em 0; }
hr { border: 0; border-top: 1px solid #d0d7de; margin: 1.5em 0 .5em; }
"""


def _parser():
    from markdown_it import MarkdownIt

    # no raw HTML from the card's text: every string in it (labels, reasons) is shown as text
    return MarkdownIt("commonmark", {"html": False}).enable("table")


def to_html(markdown: str, images: Mapping[str, bytes] | Path | None = None, title: str = "Recipe card") -> str:
    """A complete HTML page of the card's ``markdown``. Each image the Markdown names by a plain
    file name found in ``images`` (file name -> PNG bytes, or a folder holding the files) is
    embedded as a base64 ``data:`` URI (a PNG); an image that is not there keeps its name."""
    md = _parser()
    tokens = md.parse(markdown)
    for tok in tokens:
        for child in tok.children or ():
            if child.type != "image":
                continue
            src = str(child.attrGet("src") or "")
            png = _image(images, src) if images is not None and src and "/" not in src else None
            if png is not None:
                child.attrSet("src", f"data:image/png;base64,{base64.b64encode(png).decode('ascii')}")
    body = md.renderer.render(tokens, md.options, {})
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n")


def _image(images: Mapping[str, bytes] | Path, name: str) -> bytes | None:
    """The bytes of the plain file name ``name`` in ``images``; None when it is not there."""
    if isinstance(images, Path):
        path = images / name
        return path.read_bytes() if path.is_file() else None
    return images.get(name)
