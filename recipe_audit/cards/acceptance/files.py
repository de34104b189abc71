"""The acceptance card as files: :func:`write_card` writes the JSON, the Markdown and the two
figures, everything or nothing. The only module of the acceptance card that touches disk."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recipe_audit.cards.acceptance.document import AcceptanceCard, as_card, validate
from recipe_audit.cards.acceptance.render import alpha_plot, delta_plot, to_markdown
from recipe_audit.stats import acceptance as gates


def _dump(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2, allow_nan=False, ensure_ascii=False)


def write_card(card: AcceptanceCard | Mapping[str, Any], *, json_path: Path | None = None,
               out_dir: Path | None = None, markdown_path: Path | None = None,
               stem: str = "acceptance_card") -> dict[str, Path]:
    """Write the card (an :class:`AcceptanceCard` or its JSON): ``json_path`` (JSON only),
    ``markdown_path`` (Markdown only), and/or ``out_dir`` (JSON, Markdown and the two PNGs).
    Everything is rendered into temporary files first and moved into place only when all of it
    succeeded. Returns the written paths."""
    card = as_card(card)
    doc = card.to_json()
    validate(doc)
    staged: list[tuple[Path, Path]] = []
    files: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix=".acceptance-card-") as tmp:
        t = Path(tmp)
        if out_dir is not None:
            images = {"cells in (Δdeploy, Δgap)": f"{stem}_deltas.png"}
            delta_plot(card).savefig(t / images["cells in (Δdeploy, Δgap)"])
            if any(c.diagnostics.c.status != gates.MISSING for c in card.cells):
                images["α_T against α_A"] = f"{stem}_alphas.png"
                alpha_plot(card).savefig(t / images["α_T against α_A"])
            (t / f"{stem}.md").write_text(to_markdown(card, images), encoding="utf-8")
            (t / f"{stem}.json").write_text(_dump(doc), encoding="utf-8")
            for name in [*images.values(), f"{stem}.md", f"{stem}.json"]:
                staged.append((t / name, Path(out_dir) / name))
            files.update({"json_in_out": Path(out_dir) / f"{stem}.json", "markdown_in_out": Path(out_dir) / f"{stem}.md"})
            for title, name in images.items():
                files["deltas_png" if "Δgap" in title else "alphas_png"] = Path(out_dir) / name
        if json_path is not None:
            (t / "card.json").write_text(_dump(doc), encoding="utf-8")
            staged.append((t / "card.json", Path(json_path)))
            files["json"] = Path(json_path)
        if markdown_path is not None:
            (t / "card.md").write_text(to_markdown(card), encoding="utf-8")
            staged.append((t / "card.md", Path(markdown_path)))
            files["markdown"] = Path(markdown_path)
        for src, dst in staged:  # rendering succeeded: move into place (atomic per file)
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp_dst = dst.with_name(f".{dst.name}.tmp")
            with open(src, "rb") as fi, open(tmp_dst, "wb") as fo:
                fo.write(fi.read())
            os.replace(tmp_dst, dst)
    return files
