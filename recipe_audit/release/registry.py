"""Recipe cards on registered model versions (``recipe-audit attach``).

A card is useful where the release decision is made: on the registered model version, in the
pipeline that promotes it. :func:`attach` puts cards on a version of the MLflow model registry;
the release gate (:func:`recipe_audit.release.gate.gate`, ``recipe-audit gate``) decides from them
whether that version may be released.

Where things live (a model version has no artifact store of its own):

- the card itself: :func:`attach` logs each attached cell as an MLflow *card run* (kind ``card``,
  in the card's experiment, tagged ``recipe_audit.attached_to = <model>/<version>``) with
  ``card.json``, ``card.md`` and the histogram as artifacts, exactly as ``recipe-audit card``
  logs cards; the version's tag ``...card_uri`` records ``runs:/<card run id>/card.json``; a card
  attached with a signing key has its signature bundle beside it (``card.sig`` in the card run:
  :mod:`recipe_audit.cards.signing`), found from that link;
- the version's tags, three short ones for a card: two per card, keyed by audit set and τ
  (:func:`recipe_audit.keys.card_tag_stem`, ``recipe_audit.card.<audit set>.tau_<τ>``): the
  summary, named by the stem alone (e.g. ``release-supported · 0/59 failed τ 0.7 · U 0.038 ≤ ε
  0.1``) and ``<stem>.card_uri`` (``runs:/<card run>/card.json``), and the version's recipe,
  ``recipe_audit.recipe_id`` (its source run's recipe identity). The digests (the card's, its
  reruns') and the per-audit details are in the card the link names (``card.json`` and the files
  beside it, :func:`attached_cards` reads them back) and in the description's verdict table.
  Several cards (audit sets, τ) sit side by side and attaching the same (audit set, τ) again
  replaces that card. Versions attached before kept ``<stem>.card_digest`` (until 2026-12-06), or
  every field of :data:`CARD_FIELDS`, as tags; they still read, and attaching that card again
  removes them;
- the registered model's tag ``recipe_audit``: the verdict of the card attached last and
  its version (``insufficient-evidence · 1/5 failed τ 0.7 · U 0.584 > ε 0.1 · version 1``), which
  the registered-models list shows in its row;
- the version's description: one plain line of the verdicts first (what the registered model's
  versions table shows of it), then the verdict table of every attached card (each row with a
  link to its card run in the MLflow UI), a link to the card run of the card attached last, then
  that card's Markdown (as many of its sections as fit MLflow's 5,000-character column), its
  tables spaced for MLflow's renderer; text a person wrote above it is kept.

Everything is checked before anything is written (the model, version or run, the card's cell for
the version's recipe, and the card itself: its digest over its content and files, and its cells
recomputed from the tracking store, :func:`check_card`); a failure while writing undoes what this
call wrote (the version it registered, the tags and description it changed, the card runs it
logged): nothing is left half-attached.

The gate (:mod:`recipe_audit.release.gate`) holds a version to its own release policy
(:class:`recipe_audit.release.evidence.GatePolicy`: command-line options or a policy file kept with
the code under review, never the card or tags the attacher can write), recomputes the card from the
store's history over every rerun of the version's recipe, and passes only a card that covers
exactly that evidence and verifies.

Over 400 lines, kept whole: it is one path, attaching, and each of its parts (the cells for the
version, the tag fields, the description's section, the undo) is written for it alone; the gate,
which reads what it writes, is :mod:`recipe_audit.release.gate`.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from recipe_audit import keys, stats
from recipe_audit.errors import first_line
from recipe_audit.store.registry import ModelRegistry, RegistryError

CARD_FIELDS = ("verdict", "upper_bound", "lower_bound", "n_reruns", "n_failures", "tau", "eps", "delta",
               "audit_set", "metric", "recipe_id", "recipe", "reason", "card_uri", "card_digest",
               "reruns_digest", "experiment", "source_run_in_card", "attached", "reading", "family_size",
               "family_verdict", "family_upper_bound", "family_members")
# what a version's tags hold of each attached card, beside its summary tag (the stem alone); the
# card digest is the card's own (card.json's ``digest``), read through the link
VERSION_TAG_FIELDS = ("card_uri",)
# on the registered model: the verdict of the card attached last (the registered-models list shows
# its tags in a narrow column, the key first: the key is the short namespace alone)
TAG_MODEL_VERDICT = keys.PREFIX.rstrip(".")
TAG_ATTACHED_TO = keys.PREFIX + "attached_to"
# where the cards' section of a version's description begins: the line after its summary line
SECTION_MARKER = "<!-- recipe_audit cards: this section and the line above it are rewritten by recipe-audit attach -->"
# descriptions written before the cards' section began with its table kept their section after this line
DESCRIPTION_MARKER = "<!-- recipe_audit cards: written by recipe-audit attach; text above this line is kept -->"
# the first column's header is also what the model's versions table shows of the description (its
# first 32 characters, as plain text): "| recipe cards (audit set) | τ |"
DESCRIPTION_COLUMNS = ("recipe cards (audit set)", "τ", "verdict", "failures/N", "U", "ε", "δ", "card")
DESCRIPTION_HEADER = "| " + " | ".join(DESCRIPTION_COLUMNS) + " |"  # the section starts here
MAX_DESCRIPTION = 5000  # MLflow's model_versions.description column

# ------------------------------------------------------------------------------------------
# Selecting the card's cells for a version
# ------------------------------------------------------------------------------------------


def select_cells(doc: dict[str, Any], source_run_id: str | None, run_recipe_id: str | None, *,
                 audits: Sequence[str] = (), taus: Sequence[float] = (), recipe_id: str | None = None,
                 where: str = "the version") -> list[dict[str, Any]]:
    """The entries of ``doc`` to attach to a version whose source run is ``source_run_id`` (of
    recipe ``run_recipe_id``): the cells whose reruns include that run, else the cells of its
    recipe; narrowed by ``audits``, ``taus`` and ``recipe_id``. ``RegistryError`` when the card
    holds no such cell (another recipe, audit set or τ) or several cells would share one tag."""
    cells = list(doc["cells"])
    recipes = sorted({str(e["recipe_id"]) for e in cells})
    if recipe_id is not None:
        if run_recipe_id is not None and recipe_id != run_recipe_id:
            raise RegistryError(f"--recipe-id {recipe_id} is not the recipe of {where} ({run_recipe_id}).")
        cells = [e for e in cells if e["recipe_id"] == recipe_id]
        if not cells:
            raise RegistryError(f"The card holds no cell of recipe {recipe_id} (it holds {', '.join(recipes)}).")
    elif source_run_id is not None:
        with_run = [e for e in cells if any(r["run_id"] == source_run_id for r in e["reruns"])]
        same_recipe = [e for e in cells if run_recipe_id is not None and e["recipe_id"] == run_recipe_id]
        cells = with_run or same_recipe
        if not cells:
            raise RegistryError(
                f"The card is of recipe {', '.join(recipes)}, not of {where}, whose source run {source_run_id} "
                f"is of recipe {run_recipe_id or 'unknown'} and is not among the card's reruns.")
    elif len({e["recipe_id"] for e in cells}) > 1:
        raise RegistryError(f"{where[0].upper() + where[1:]} has no source run, and the card holds several recipes; "
                            f"choose one with --recipe-id.")
    if audits:
        have = sorted({str(e["audit_set"]) for e in cells})
        cells = [e for e in cells if e["audit_set"] in set(audits)]
        if not cells:
            raise RegistryError(f"The card holds no cell for audit set(s) {', '.join(audits)} of this recipe "
                                f"(it holds {', '.join(have)}).")
    if taus:
        have_t = sorted({e["tau"] for e in cells})
        cells = [e for e in cells if any(math.isclose(e["tau"], t, rel_tol=0, abs_tol=1e-12) for t in taus)]
        if not cells:
            raise RegistryError(f"The card holds no cell at τ = {', '.join(f'{t:g}' for t in taus)} for this recipe "
                                f"(it holds τ = {', '.join(f'{t:g}' for t in have_t)}).")
    stems: dict[str, dict] = {}
    for e in cells:
        stem = keys.card_tag_stem(e["audit_set"] or e["metric"], e["tau"])
        if stem in stems:
            raise RegistryError(f"The card holds several cells for audit set {e['audit_set']} at τ = {e['tau']:g} "
                                f"(groups {stems[stem]['group']} and {e['group']}); choose one with --recipe-id.")
        stems[stem] = e
    return cells


# ------------------------------------------------------------------------------------------
# Attaching
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttachResult:
    model_name: str
    version: str
    registered: bool  # a new version was registered from the run
    cards: tuple[dict[str, str], ...]  # the fields of each attached card
    card_run_ids: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"model_name": self.model_name, "version": self.version, "registered": self.registered,
                "cards": list(self.cards), "card_run_ids": list(self.card_run_ids)}


def _own(e: dict[str, Any]) -> dict[str, Any]:
    """The entry's own reading, which the ``verdict``, bound and reason fields carry: a family-wise
    reading the user asked for (``--family-size``) leads the card entry and its pointwise values are
    under ``pointwise``; the family-wise one goes in the ``family_*`` fields."""
    from recipe_audit.cards.family import own_reading

    return own_reading(e)


def _card_fields(e: dict[str, Any], card_uri: str, card_digest: str, source_run_id: str | None,
                 experiment: str) -> dict[str, str]:
    def num(x):
        return "" if x is None else repr(float(x)) if isinstance(x, float) else str(x)

    own = _own(e)
    return {
        "verdict": own["verdict"], "upper_bound": num(own["upper_bound"]), "lower_bound": num(own["lower_bound"]),
        "n_reruns": str(e["n_reruns"]), "n_failures": num(e["n_failures"]), "tau": repr(float(e["tau"])),
        "eps": repr(float(e["eps"])), "delta": repr(float(e["delta"])), "audit_set": e["audit_set"] or e["metric"],
        "metric": e["metric"], "recipe_id": str(e["recipe_id"] or ""), "recipe": e.get("recipe_summary") or "",
        "reason": own["reason"], "card_uri": card_uri, "card_digest": card_digest, "reruns_digest": e["digest"],
        "experiment": experiment,
        "source_run_in_card": str(any(r["run_id"] == source_run_id for r in e["reruns"])).lower()
        if source_run_id else "false",
        "attached": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **_family_fields(e, num),
    }


def _family_fields(e: dict[str, Any], num) -> dict[str, str]:
    """The family a cell was chosen from, as tags: its size M, the family-wise verdict and bound
    and the recipe identities counted (a card of one recipe: M = 1, the pointwise reading)."""
    fam = e.get("family")
    if not fam:
        return {"reading": e.get("reading") or "fixed-n", "family_size": "1", "family_verdict": e["verdict"],
                "family_upper_bound": num(e["upper_bound"]), "family_members": str(e["recipe_id"] or "")}
    members = ",".join(str(x) for x in fam.get("recipe_ids") or [] if x)
    if len(members) > 4000:  # MLflow's tag values end at 8,000 characters; the card holds the whole family
        members = members[:4000].rsplit(",", 1)[0] + ",..."
    return {"reading": e.get("reading") or "fixed-n", "family_size": str(fam["size"]),
            "family_verdict": fam["verdict"], "family_upper_bound": num(fam["upper_bound"]),
            "family_members": members}


def attached_cards(tags: dict[str, str], tracking_uri: str | None = None) -> dict[str, dict[str, str]]:
    """The cards on a version, from its tags: card tag stem -> {field: value} (the fields of
    :data:`CARD_FIELDS`). A card whose tags say only where it is (its summary and ``card_uri``:
    what :func:`attach` writes; ``card_digest`` too before 2026-12-06) is read from its card run
    in ``tracking_uri`` (its ``card_digest`` is the card's own ``digest``)
    for the rest; one that cannot be read keeps what its tags say (its audit set and τ, the
    verdict its summary begins with). Versions attached before kept every field as a tag."""
    out: dict[str, dict[str, str]] = {}
    for k, v in tags.items():
        if k.startswith(keys.CARD_TAG_PREFIX) and "." in k[len(keys.CARD_TAG_PREFIX):]:
            stem, _, name = k.rpartition(".")
            if name in CARD_FIELDS:
                out.setdefault(stem, {})[name] = v
    cards = {}
    for stem, f in out.items():
        if "verdict" in f and "audit_set" in f and "tau" in f:
            cards[stem] = f
        elif f.get("card_uri"):
            cards[stem] = {**_fields_from_card(stem, f, tags.get(stem, ""), tracking_uri), **f}
    return cards


def _fields_from_card(stem: str, f: dict[str, str], summary: str, tracking_uri: str | None) -> dict[str, str]:
    """The fields of the attached card ``stem`` read from the card its ``card_uri`` names."""
    from recipe_audit.cards.model import CardError
    from recipe_audit.release.card_files import load_card

    audit, _, tau = stem[len(keys.CARD_TAG_PREFIX):].rpartition(".tau_")
    fallback = {"audit_set": audit, "tau": tau, "verdict": summary.split(" · ")[0] or "unknown",
                "reason": "the card could not be read back"}
    try:
        doc = load_card(f["card_uri"], tracking_uri)
    except (CardError, OSError, ValueError):
        return fallback
    for e in doc.get("cells") or []:
        if keys.card_tag_stem(e["audit_set"] or e["metric"], e["tau"]) == stem:
            got = _card_fields(e, f["card_uri"], f.get("card_digest") or doc.get("digest", ""), None,
                               (doc.get("source") or {}).get("experiment") or "")
            for name in ("attached", "source_run_in_card"):  # what only the attach knew
                got.pop(name, None)
            return got
    return fallback


def summary_tag(f: dict[str, str]) -> str:
    """One attached card in a line, the value of its summary tag (the tag named by the card's tag
    stem alone, which sorts first among its tags): ``release-supported · 0/59 failed τ 0.7 · U
    0.038 ≤ ε 0.1``."""
    if not f.get("upper_bound"):
        return f"{f['verdict']} · {f.get('reason', '')}"[:250]
    from recipe_audit.stats.exact import shown_beside

    u, eps = float(f["upper_bound"]), float(f["eps"])
    above = f["verdict"] != stats.SUPPORTED  # U printed on the side of ε its verdict says (more decimals if need be)
    return (f"{f['verdict']} · {f.get('n_failures') or 0}/{f['n_reruns']} failed τ {float(f['tau']):g} · "
            f"U {shown_beside(u, eps, above, digits=3, fixed=True)} {'>' if above else '≤'} ε {eps:g}")


def model_verdict(cards: dict[str, dict[str, str]], version: str) -> str:
    """The registered model's verdict tag: the summaries of the cards just attached (the default
    audit set first) and the version: ``insufficient-evidence · 1/5 failed τ 0.7 · U 0.584 > ε 0.1
    · version 1``."""
    text = "; ".join(summary_tag(f) for f in _ordered(cards)) + f" · version {version}"
    return text if len(text) <= 5000 else text[:4990] + "…"


def summary_line(cards: dict[str, dict[str, str]]) -> str:
    """The attached cards' verdicts in one plain line (no Markdown: the registered model's
    versions table shows the first characters of a version's description as text), in the
    order of the verdict table: ``release-supported on calibration at τ 0.7 (0/59 failed, U
    0.038); unsupported on shift_x at τ 0.7 (10/29 failed, U 0.484)``."""
    parts = []
    for f in _ordered(cards):
        u = f"U {float(f['upper_bound']):.3f}" if f.get("upper_bound") else "no U"
        parts.append(f"{f['verdict']} on {f['audit_set']} at τ {_g(f['tau'])} "
                     f"({f.get('n_failures') or '—'}/{f.get('n_reruns') or '—'} failed, {u})")
    return "; ".join(parts)


def _g(x: str | None) -> str:
    try:
        return f"{float(x):g}"
    except (TypeError, ValueError):
        return "—"


def _ordered(cards: dict[str, dict[str, str]]) -> list[dict[str, str]]:
    """The default audit set first, then by audit set and τ."""
    def tau(f):
        try:
            return float(f["tau"])
        except (TypeError, ValueError):
            return math.inf

    return sorted(cards.values(), key=lambda f: (f["audit_set"] != keys.DEFAULT_AUDIT, f["audit_set"], tau(f)))


def card_run_link(card_uri: str, experiment_id: str | None) -> str:
    """A link to a card run's page in the MLflow UI, relative to the UI's own address (so it works
    on any host the UI is served from): its artifacts, opened on ``card.html``, in the UI's
    model-training view (see ``cards.store.ui_experiment_path``)."""
    run_id = card_uri.removeprefix("runs:/").split("/", 1)[0]
    if not experiment_id:
        return ""
    return f"#/experiments/{experiment_id}/runs/{run_id}/artifacts/card.html?workflowType=machine_learning"


def _find_section(previous: str) -> int:
    """Where the cards' section starts in a description written earlier (len when it has none):
    the summary line above :data:`SECTION_MARKER`, or, in descriptions written before it, the
    verdict table's header or the older marker."""
    i = previous.find(SECTION_MARKER)
    if i >= 0:
        return previous.rfind("\n", 0, max(i - 1, 0)) + 1
    for mark in (DESCRIPTION_HEADER, DESCRIPTION_MARKER):
        i = previous.find(mark)
        if i >= 0:
            return i
    return len(previous)


def _description(previous: str | None, cards: dict[str, dict[str, str]], latest_md: str, latest_uri: str,
                 links: dict[str, str] | None = None, signed_by: str | None = None) -> str:
    """The version's description: the text a person wrote above the cards' section, kept; then
    the verdicts in one plain line (what the registered model's versions table shows), the
    marker that finds the section again, the verdict table of every attached card, a link to the
    card run of the card attached last, and that card's Markdown when it fits MLflow's 5,000
    characters (else as many of its sections as fit, and where the rest is). Tables are spaced
    for MLflow's renderer (:func:`recipe_audit.cards.tables.spaced_tables`). ``signed_by``: the key
    the card attached last is signed with (its ``card.sig``, named after the link)."""
    from recipe_audit.cards.tables import spaced_tables

    links = links or {}
    previous = previous or ""
    kept = previous[:_find_section(previous)].rstrip()
    rows = []
    for f in _ordered(cards):
        u = "—" if not f.get("upper_bound") else f"{float(f['upper_bound']):.3f}"
        k = f.get("n_failures") or "—"
        link = links.get(f["card_uri"])
        run = f"[card run]({link})" if link else f"`{f['card_uri']}`"
        rows.append([f"`{f['audit_set']}`", _g(f["tau"]), f"**{f['verdict']}**", f"{k}/{f.get('n_reruns') or '—'}",
                     u, _g(f.get("eps")), _g(f.get("delta")), run])
    lines = [DESCRIPTION_HEADER, "|" + "|".join("---" for _ in DESCRIPTION_COLUMNS) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    link = links.get(latest_uri)
    where = f"[the card run in MLflow]({link}) (`{latest_uri}`)" if link else f"`{latest_uri}`"
    if signed_by:
        where += f"; signed: `{latest_uri.rpartition('/')[0]}/card.sig` (key sha256:{signed_by[:16]})"
    head = "\n\n".join(p for p in [kept, summary_line(cards) + "\n" + SECTION_MARKER,
                                   spaced_tables("\n".join(lines)),
                                   f"The card attached last, with its plots: {where}."] if p)
    latest_md = spaced_tables(latest_md)
    full = head + "\n\n" + latest_md
    if len(full) <= MAX_DESCRIPTION:
        return full
    note = "\n\n(The rest of this card: `card.html` and `card.md` in its card run.)"
    sections = latest_md.split("\n## ")
    out = head + "\n\n" + sections[0]
    if len(out) + len(note) > MAX_DESCRIPTION:
        return (head + note)[:MAX_DESCRIPTION]
    for sec in sections[1:]:
        if len(out) + len(sec) + 4 + len(note) > MAX_DESCRIPTION:
            break
        out += "\n## " + sec
    return out + note


def check_card(doc: dict[str, Any], cells: Sequence[dict[str, Any]], tracking_uri: str, card=None) -> None:
    """Raise :class:`RegistryError` (one sentence) unless the card matches its own content (its
    digest, and the files beside it when ``card``, a ``cards.verify.CardFiles``, says where it was
    read from) and the ``cells`` to attach recompute from the tracking store."""
    from recipe_audit.cards.verify import self_check
    from recipe_audit.release.verify import verify_card

    own = self_check(doc, card)
    if own:
        f = own[0]
        raise RegistryError(f"The card was not attached: it does not verify ({f.kind}: {f.message}).")
    sub = _sub_document(doc, cells)
    ver = verify_card(sub, tracking_uri)
    if not ver.ok:
        f = ver.findings[0]
        more = f" (and {len(ver.findings) - 1} more difference(s))" if len(ver.findings) > 1 else ""
        raise RegistryError(f"The card was not attached: it does not recompute from the tracking store "
                            f"({f.kind}: {f.message}{more}).")


def _sub_document(doc: dict[str, Any], cells: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The card of ``cells`` alone, sealed (the split audit, responsiveness and shift table are
    about the other cells too)."""
    import copy

    from recipe_audit.cards.digest import seal

    sub = {k: v for k, v in doc.items() if k not in ("split_audit", "responsiveness", "shift")}
    sub["cells"] = list(cells)
    return seal(copy.deepcopy(sub))


def attach(tracking_uri: str, model_name: str, doc: dict[str, Any], *, version: str | None = None,
           run_id: str | None = None, audits: Sequence[str] = (), taus: Sequence[float] = (),
           recipe_id: str | None = None, set_alias: str | None = None, card=None, signer=None) -> AttachResult:
    """Attach the card ``doc`` (validated) to version ``version`` of ``model_name``, or to a new
    version registered from the model rerun ``run_id`` logged. The card must verify first (its
    digest over its content and, with ``card`` (a ``cards.verify.CardFiles``), the files beside
    it; its cells recomputed from the store): else ``RegistryError`` and nothing is written. See
    the module docstring. ``signer`` (a :class:`recipe_audit.cards.signing.SigningKey`): the
    card runs attached are signed with it (``card.sig`` beside their ``card.json``), once the
    card has recomputed from the store. Without one, a card read with its signature (``card``'s
    bundle: a card run signed at the end of its sweep) keeps it where the attached card run holds
    the very files it signs (the whole card run attached, every τ)."""
    from recipe_audit.cards.document import RecipeCard
    from recipe_audit.cards.render import to_markdown
    from recipe_audit.release.card_runs import CardOutput

    if (version is None) == (run_id is None):
        raise RegistryError("Name the model version with --version or register one with --run-id (one of them).")
    reg = ModelRegistry(tracking_uri)
    experiment = doc["source"].get("experiment")
    # ---- everything is checked before anything is written
    if run_id is not None:
        source, model_id, run = reg.logged_model(run_id)
        source_run_id, where = run_id, f"run {run_id}"
        existing = reg.model_or_none(model_name)
        mv = None
    else:
        mv = reg.version(model_name, version=version)
        existing = True
        source_run_id, where = mv.run_id or None, f"version {mv.version} of '{model_name}'"
        run = reg.run_or_none(source_run_id) if source_run_id else None
    run_recipe = run.data.tags.get(keys.TAG_RECIPE_ID) if run is not None else None
    cells = select_cells(doc, source_run_id, run_recipe, audits=audits, taus=taus, recipe_id=recipe_id,
                         where=where)
    exp = reg.experiment_or_none(experiment) if experiment else None
    if exp is None:
        raise RegistryError(f"The card's experiment '{experiment}' is not in the tracking store {tracking_uri}, "
                            f"so the card cannot be kept beside its reruns.")
    if set_alias is not None and (not set_alias or set_alias.isdigit()):
        raise RegistryError(f"An alias must be a name, not '{set_alias}'.")
    for e in cells:
        fam = e.get("family")
        if fam and e.get("recipe_id") and e["recipe_id"] not in (fam.get("recipe_ids") or []):
            raise RegistryError(f"The card's family of {fam['size']} recipes does not include the recipe being "
                                f"attached ({e['recipe_id']}); nothing was attached.")
    check_card(doc, cells, tracking_uri, card)

    # ---- writes, undone on failure
    created_model = created_version = False
    card_runs: list[str] = []
    old_tags: dict[str, str | None] = {}
    old_model_tags: dict[str, str | None] = {}
    old_description = None
    try:
        if run_id is not None:
            if existing is None:
                reg.create_model(model_name)
                created_model = True
            mv = reg.create_version(model_name, source, run_id, model_id)
            created_version = True
        sub = _sub_document(doc, cells)
        typed = RecipeCard.from_json(sub)  # typed once: the card runs and the cells below
        logged = CardOutput(typed, signer, card.signature if card is not None else None).log(
            tracking_uri, experiment, attached_to=f"{model_name}/{mv.version}")
        card_runs = [c.run_id for c in logged if not c.reused]  # a reused card run is not ours to undo
        entries_of: dict[tuple, list[dict[str, Any]]] = {}
        for t, e in zip(typed.cells, sub["cells"], strict=True):
            entries_of.setdefault(t.cell_key, []).append(e)
        fields_by_stem: dict[str, dict[str, str]] = {}
        for entries, run in zip(entries_of.values(), logged, strict=True):
            rid, cell_digest = run.run_id, run.digest
            for e in entries:
                stem = keys.card_tag_stem(e["audit_set"] or e["metric"], e["tau"])
                fields_by_stem[stem] = _card_fields(e, f"runs:/{rid}/card.json", cell_digest, source_run_id,
                                                    experiment)
        current = dict(mv.tags or {})
        old_description = mv.description
        new_tags: dict[str, str] = {}
        for stem, f in fields_by_stem.items():  # a handful of tags per card: the rest is in the card
            new_tags[stem] = summary_tag(f)  # first of its tags
            new_tags.update({f"{stem}.{name}": f[name] for name in VERSION_TAG_FIELDS})
        if run_recipe:
            new_tags[keys.TAG_RECIPE_ID] = run_recipe
        # the fields an earlier attach of the same (audit set, τ) kept as tags go with its card
        stale = [k for k in current if k not in new_tags and k.rpartition(".")[0] in fields_by_stem
                 and k.rpartition(".")[2] in CARD_FIELDS]
        for k in stale:
            old_tags.setdefault(k, current[k])
            reg.delete_version_tag(model_name, mv.version, k)
        for k, v in new_tags.items():
            old_tags.setdefault(k, current.get(k))
            reg.set_version_tag(model_name, mv.version, k, v)
        others = {k: v for k, v in current.items() if k not in stale and k not in new_tags}
        all_cards = {**attached_cards(others, tracking_uri), **fields_by_stem}
        latest_md = to_markdown(typed)
        exp_ids = {experiment: exp.experiment_id}
        for f in all_cards.values():  # cards attached earlier may come from another experiment
            if f.get("experiment") and f["experiment"] not in exp_ids:
                other = reg.experiment_or_none(f["experiment"])
                exp_ids[f["experiment"]] = other.experiment_id if other is not None else None
        links = {f["card_uri"]: card_run_link(f["card_uri"], exp_ids.get(f.get("experiment"))) for f in all_cards.values()}
        desc = _description(old_description, all_cards, latest_md, next(iter(fields_by_stem.values()))["card_uri"],
                            links, signed_by=logged[0].signed_by)
        reg.set_description(model_name, mv.version, desc)
        if not created_model:
            old_model_tags[TAG_MODEL_VERDICT] = reg.model_tags(model_name).get(TAG_MODEL_VERDICT)
        reg.set_model_tag(model_name, TAG_MODEL_VERDICT, model_verdict(fields_by_stem, str(mv.version)))
        if set_alias:
            reg.set_alias(model_name, set_alias, mv.version)
    except Exception as exc:
        reg.undo(model_name, None if mv is None else mv.version, created_model=created_model,
                 created_version=created_version, old_tags=old_tags, old_description=old_description,
                 runs=card_runs, old_model_tags=old_model_tags)
        if isinstance(exc, (RegistryError,)):
            raise
        raise RegistryError(f"Attaching the card to model '{model_name}' failed and was undone: "
                            f"{first_line(exc, 300)}") from None
    return AttachResult(model_name, str(mv.version), created_version, tuple(fields_by_stem.values()),
                        tuple(card_runs))
