"""A bound printed on a card never reads on the other side of ε than the verdict beside it: 6 of
103 reruns failed gives U = 0.1000081 > ε = 0.1 (unsupported), which three decimals would print
as 0.100."""

from __future__ import annotations

import io
import re

import pandas as pd

import recipe_audit
from recipe_audit.cards.summary import print_card_summary
from recipe_audit.stats.exact import tail_bound


def test_u_just_above_eps_is_printed_above_it():
    tb = tail_bound(6, 103)
    assert 0.1 < tb.upper < 0.1005 and tb.verdict == "unsupported"  # the case: three decimals say 0.100
    runs = pd.DataFrame({"seed": range(103), "acc": [0.5] * 6 + [0.9] * 97})
    card = recipe_audit.card_from_runs(runs, "acc")
    (e,) = card.cells
    assert (e["n_failures"], e["verdict"]) == (6, "unsupported")
    out = io.StringIO()
    print_card_summary(card.card, stream=out)
    texts = {"markdown": card.markdown(), "summary": out.getvalue(), "reason": e["reason"]}
    for where, text in texts.items():
        shown = re.findall(r"(?:U =|upper bound|\| 6/103 \| [0-9.]+ \|) ?([0-9]+\.[0-9]+)", text)
        assert shown, where
        for u in shown:
            if float(u) < 0.09:  # L, not U
                continue
            assert float(u) > 0.1, (where, u)
