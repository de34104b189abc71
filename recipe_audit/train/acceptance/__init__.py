"""The acceptance experiment's training (``experiment=acceptance``), beside the reruns' and through
the same loop (:func:`recipe_audit.train.loop.fit`):

* :mod:`.data` — the procedural questions, their splits and framings;
* :mod:`.base` — the base model, trained once and cached by a hash of its config;
* :mod:`.install` — one cell: the LoRA install fine-tune with its defense's penalty, and its records;
* :mod:`.calibration` — diagnostic (c)'s calibration items and its one-sentence error;
* :mod:`.weights` — diagnostic (c) from weights: gradients on the slice, the update ΔW.

Every function takes the typed :class:`~recipe_audit.config.ExperimentConfig` (and
:class:`~recipe_audit.config.DefenseConfig`); the orchestration (jobs, runs, cards) is
:mod:`recipe_audit.acceptance.experiment`.
"""
