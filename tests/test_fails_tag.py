"""One name for "this rerun fails the bar τ on this metric" (keys.fails_tag): the sweep's tags as
each rerun ends and the tags a card logged later writes are the same tags."""

from __future__ import annotations

from recipe_audit import keys
from recipe_audit.app.callback import RecipeAuditCallback
from recipe_audit.cards.document import CardEntry, Rerun
from recipe_audit.release.card_runs import rerun_bar_tags


def _card_tags(metric: str, taus, value, status="FINISHED") -> dict[str, str]:
    entries = [CardEntry(metric=metric, tau=t, higher_is_better=True, reruns=(Rerun(0, "r1", value, status),))
               for t in taus]
    return rerun_bar_tags(entries)["r1"]


def test_the_sweep_and_a_later_card_write_the_same_tags():
    cb = RecipeAuditCallback(metric="val_accuracy", taus=[0.7, 0.75])
    sweep = cb.bar_tags({"status": "FINISHED", "metrics": {"val_accuracy": 0.72}})
    assert sweep == _card_tags("val_accuracy", (0.7, 0.75), 0.72) == {
        "recipe_audit.fails.val_accuracy.tau_0.7": "false", "recipe_audit.fails.val_accuracy.tau_0.75": "true"}
    assert not any(k.startswith(keys.LEGACY_FAILS_TAG_PREFIX) for k in sweep)  # the old one-metric name


def test_several_metrics_one_tag_each_and_unfinished_fails_every_bar():
    cb = RecipeAuditCallback(metric=["accuracy/calibration", "accuracy/shift_gadgets"], taus=[0.7])
    sweep = cb.bar_tags({"status": "FAILED", "metrics": {}})
    assert sweep == {keys.fails_tag("accuracy/calibration", 0.7): "true",
                     keys.fails_tag("accuracy/shift_gadgets", 0.7): "true"}
    assert _card_tags("accuracy/calibration", (0.7,), None, status="KILLED") == {
        "recipe_audit.fails.accuracy/calibration.tau_0.7": "true"}


def test_the_name_spells_tau_as_the_card_does():
    assert keys.fails_tag("m", 0.70) == keys.fails_tag("m", 7e-1) == "recipe_audit.fails.m.tau_0.7"
    assert keys.fails_tag("m", 1) == "recipe_audit.fails.m.tau_1"
