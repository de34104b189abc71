"""The one path from a computed card to its files and its card runs: each file is rendered once
(:func:`recipe_audit.cards.files.render_card`), and the same bytes are written to a folder and
logged to MLflow (:mod:`recipe_audit.store.cards`, which renders nothing).

The end of a sweep (:func:`recipe_audit.release.sweep.cards_for_sweep`), ``recipe-audit card
--out/--log-run`` and ``recipe-audit attach`` all go through :class:`CardOutput`: the card's own
folder and the card run of each of its cells share one drawing of each plot (:class:`Plots`).
With a signing key, each card's files are signed as they are rendered, and the bundle is kept
beside its JSON (``card.sig``: :mod:`recipe_audit.cards.signing`).
"""

from __future__ import annotations

from pathlib import Path

from recipe_audit.cards.document import RecipeCard
from recipe_audit.cards.files import Plots, RenderedCard, cell_cards, render_card, write_files
from recipe_audit.cards.signing import SigningKey, covers, sign, signature_name
from recipe_audit.store import cards as card_store
from recipe_audit.store.cards import LoggedCard


class CardOutput:
    """The outputs of one computed card: its folder (:meth:`write`) and its card runs
    (:meth:`log`), every plot drawn once for both."""

    def __init__(self, card: RecipeCard, signer: SigningKey | None = None, signed: bytes | None = None) -> None:
        self.card = card
        self.plots = Plots()
        self.signer = signer
        self.signed = signed  # the bundle of the card this one was read from (attach): kept where it still fits

    def _signature(self, card: RecipeCard, rendered: RenderedCard) -> bytes | None:
        """The bundle signing ``rendered`` (the files of ``card``) and its cells' reruns digests:
        made with the signing key, else the bundle the card was read with when it covers these
        very bytes (a card run attached as it was logged), else None."""
        reruns = [e.digest for e in card.cells]
        if self.signer is not None:
            return sign(rendered.files, reruns, self.signer)
        return self.signed if covers(self.signed, rendered.files, reruns) else None

    def write(self, out_dir: Path, stem: str = "card") -> dict[str, Path]:
        """The card's files in ``out_dir`` (``<stem>.json``, ``.md``, ``.html``, the plots), by kind;
        with a signing key, the bundle beside them (``<stem>.sig``, kind ``signature``)."""
        rendered = render_card(self.card, stem, self.plots)
        bundle = self._signature(self.card, rendered)
        sig = signature_name(rendered.kinds["json"])
        if bundle is not None:
            rendered = RenderedCard({**rendered.files, sig: bundle}, {**rendered.kinds, "signature": sig},
                                    rendered.digest)
        files = write_files(rendered, out_dir)
        if bundle is None:  # a bundle an earlier card left there signs other files
            (out_dir / sig).unlink(missing_ok=True)
        return files

    def log(self, tracking_uri: str, experiment: str, *, reuse: bool = True, attached_to: str | None = None,
            tag_reruns: bool = True) -> list[LoggedCard]:
        """One card run per cell of the card (:func:`recipe_audit.cards.files.cell_cards`), in
        ``experiment``, one :class:`LoggedCard` per cell in card order. With ``reuse``, a cell
        whose card (:func:`~recipe_audit.store.cards.card_key`) is already logged, in a finished
        card run attached to the same ``attached_to`` (``<model>/<version>``, or nothing), reuses
        that run (nothing is rendered for it); ``attached_to`` also tags and names new runs. With
        ``tag_reruns``, each rerun of a new card run is tagged pass/fail at each τ of its card
        (:func:`~recipe_audit.store.cards.tag_reruns_at_bars`). All runs of one computation share
        the tag ``recipe_audit.card_id``. With a signing key, each new card run holds its card's
        bundle, and only a card run signed by the same key is reused."""
        client, experiment_id = card_store.card_experiment(tracking_uri, experiment)
        card_id = self.card.digest[:12]
        out = []
        for cell in cell_cards(self.card):
            key = card_store.card_key(cell)
            signed_by = self.signer.fingerprint if self.signer is not None else None
            found = (card_store.find_card_run(client, tracking_uri, experiment_id, key, attached_to, signed_by)
                     if reuse else None)
            if found is not None:
                out.append(found)
                continue
            rendered = render_card(cell, "card", self.plots)
            out.append(card_store.log_card_run(client, experiment_id, cell, rendered, key=key, card_id=card_id,
                                               attached_to=attached_to, signature=self._signature(cell, rendered)))
            if tag_reruns:
                card_store.tag_reruns_at_bars(client, list(cell.cells), experiment_id)
        return out
