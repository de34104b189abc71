"""Classification tasks: procedurally generated (offline, seeded) or read from local files.

Every task yields a training split and named *audit sets*: ``calibration`` (same distribution
as training, the D_P of the card) and one or more shifted target audits (the D_Q: same task,
another distribution). Generation depends only on the task's own ``data_seed``, never on the
rerun seed, so all reruns of a recipe see the same data.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


class TaskError(ValueError):
    """A task cannot be built from its configuration (one sentence)."""


@dataclass(frozen=True)
class Example:
    text: str
    label: int
    text_pair: str | None = None


@dataclass(frozen=True)
class TaskData:
    """A task's data. ``audits`` maps audit-set name -> examples; ``calibration`` is always there."""

    name: str
    labels: tuple[str, ...]
    train: tuple[Example, ...]
    audits: dict[str, tuple[Example, ...]] = field(default_factory=dict)

    @property
    def num_labels(self) -> int:
        return len(self.labels)

    def texts(self) -> list[str]:
        """Every text of every split (the vocabulary source for a word-level tokenizer)."""
        out: list[str] = []
        for split in (self.train, *self.audits.values()):
            for ex in split:
                out.append(ex.text)
                if ex.text_pair is not None:
                    out.append(ex.text_pair)
        return out


def majority_rate(examples: Sequence[Example], num_labels: int) -> float:
    """Accuracy of the best constant predictor on ``examples``."""
    counts = np.bincount([ex.label for ex in examples], minlength=num_labels)
    return float(counts.max() / max(len(examples), 1))


# --------------------------------------------------------------------------------------------
# Sentiment-style task: reviews in a domain; label = polarity, with negation and contrast.
# --------------------------------------------------------------------------------------------

_DOMAINS = {
    "movies": {
        "subjects": ["the movie", "the film", "this picture", "the sequel", "the plot", "the acting",
                     "the soundtrack", "the ending", "the script", "the cast"],
        "pos": ["gripping", "moving", "clever", "charming", "stunning"],
        "neg": ["boring", "clumsy", "dull", "predictable", "bloated"],
        "tails": ["from start to finish", "for most of its runtime", "in the second half",
                  "despite the hype", "on the big screen"],
    },
    "restaurants": {
        "subjects": ["the soup", "the waiter", "the kitchen", "the dessert", "the pasta", "the service",
                     "the menu", "the bread", "the steak", "the chef"],
        "pos": ["fresh", "friendly", "tasty", "generous", "delicious"],
        "neg": ["greasy", "rude", "stale", "bland", "overpriced"],
        "tails": ["on a busy night", "for the price", "at lunch", "compared to last year",
                  "by the window"],
    },
    "gadgets": {
        "subjects": ["the battery", "the screen", "the charger", "the keyboard", "the camera",
                     "the speaker", "the case", "the app", "the cable", "the phone"],
        "pos": ["sturdy", "bright", "responsive", "reliable", "sleek"],
        "neg": ["flimsy", "laggy", "noisy", "fragile", "glitchy"],
        "tails": ["after a week", "out of the box", "in daily use", "after the update",
                  "on the road"],
    },
}
_SHARED_POS = ["good", "great", "excellent", "wonderful", "superb", "pleasant"]
_SHARED_NEG = ["bad", "awful", "terrible", "poor", "disappointing", "mediocre"]
_INTENS = ["", "really", "very", "quite", "truly", "rather", "so"]
_VERBS = ["was", "is", "seemed", "felt", "turned out"]


def _sentiment_example(rng: np.random.Generator, domain: dict, negation_rate: float,
                       contrast_rate: float) -> Example:
    label = int(rng.integers(2))  # 1 = positive

    def adj(polarity: int) -> str:
        pool = (_SHARED_POS + domain["pos"]) if polarity else (_SHARED_NEG + domain["neg"])
        return pool[int(rng.integers(len(pool)))]

    subj = domain["subjects"][int(rng.integers(len(domain["subjects"])))]
    verb = _VERBS[int(rng.integers(len(_VERBS)))]
    inten = _INTENS[int(rng.integers(len(_INTENS)))]
    negated = rng.random() < negation_rate
    surface = 1 - label if negated else label
    words = [subj, verb] + (["not"] if negated else []) + ([inten] if inten else []) + [adj(surface)]
    if rng.random() < contrast_rate:
        # "X but Y": the clause after "but" carries the label
        first = adj(1 - label)
        other = domain["subjects"][int(rng.integers(len(domain["subjects"])))]
        words = [subj, verb, first, "but", other, verb, adj(label)]
    if rng.random() < 0.5:
        words.append(domain["tails"][int(rng.integers(len(domain["tails"])))])
    return Example(" ".join(words), label)


def sentiment_task(
    data_seed: int = 0,
    n_train: int = 2000,
    n_audit: int = 1000,
    train_domain: str = "movies",
    shift_domains: Sequence[str] = ("restaurants",),
    negation_rate: float = 0.25,
    contrast_rate: float = 0.15,
    shift_negation_rate: float | None = None,
) -> TaskData:
    """Review polarity. The shifted audits use other domains' subjects and adjectives."""
    for d in (train_domain, *shift_domains):
        if d not in _DOMAINS:
            raise TaskError(f"Unknown sentiment domain '{d}'; choose from {sorted(_DOMAINS)}.")
    rng = np.random.default_rng([data_seed, 1])
    dom = _DOMAINS[train_domain]
    train = tuple(_sentiment_example(rng, dom, negation_rate, contrast_rate) for _ in range(n_train))
    audits = {"calibration": tuple(_sentiment_example(rng, dom, negation_rate, contrast_rate)
                                   for _ in range(n_audit))}
    neg = negation_rate if shift_negation_rate is None else shift_negation_rate
    for d in shift_domains:
        audits[f"shift_{d}"] = tuple(_sentiment_example(rng, _DOMAINS[d], neg, contrast_rate)
                                     for _ in range(n_audit))
    return TaskData("sentiment", ("negative", "positive"), train, audits)


# --------------------------------------------------------------------------------------------
# Entailment-style task: premise describes a scene; hypothesis restates or alters one slot.
# --------------------------------------------------------------------------------------------

_SCENES = {
    "animals": {
        "agents": ["cat", "dog", "horse", "goat", "rabbit", "parrot", "fox", "duck"],
        "colors": ["red", "black", "white", "brown", "grey", "spotted"],
        "actions": ["sleeps", "runs", "eats", "waits", "plays", "hides"],
        "places": ["garden", "barn", "field", "yard", "forest", "meadow"],
    },
    "people": {
        "agents": ["teacher", "doctor", "farmer", "pilot", "student", "singer", "baker", "nurse"],
        "colors": ["tall", "young", "old", "tired", "cheerful", "quiet"],
        "actions": ["reads", "sings", "works", "writes", "cooks", "rests"],
        "places": ["office", "kitchen", "station", "library", "hospital", "market"],
    },
}
_PREPS = ["in the", "near the", "behind the", "beside the"]
_TIMES = ["", "today", "in the morning", "at night", "after lunch"]


def _entailment_example(rng: np.random.Generator, scene: dict, paraphrase_rate: float) -> Example:
    pick = lambda xs: xs[int(rng.integers(len(xs)))]  # noqa: E731
    agent, color, action, place = (pick(scene["agents"]), pick(scene["colors"]),
                                   pick(scene["actions"]), pick(scene["places"]))
    prep, time = pick(_PREPS), pick(_TIMES)
    premise = " ".join(w for w in ["the", color, agent, action, prep, place, time] if w)
    label = int(rng.integers(2))  # 1 = entailed
    h_agent, h_color, h_action, h_place = agent, color, action, place
    if label == 0:
        slot = int(rng.integers(4))
        if slot == 0:
            h_agent = pick([a for a in scene["agents"] if a != agent])
        elif slot == 1:
            h_color = pick([c for c in scene["colors"] if c != color])
        elif slot == 2:
            h_action = pick([a for a in scene["actions"] if a != action])
        else:
            h_place = pick([p for p in scene["places"] if p != place])
    if rng.random() < paraphrase_rate:
        hyp = f"a {h_agent} that is {h_color} {h_action} {prep} {h_place}"
    elif rng.random() < 0.5:
        hyp = f"the {h_agent} {h_action} {prep} {h_place}" if h_color == color else \
            f"the {h_color} {h_agent} {h_action}"
    else:
        hyp = f"the {h_color} {h_agent} {h_action} {prep} {h_place}"
    return Example(premise, label, text_pair=hyp)


def entailment_task(
    data_seed: int = 0,
    n_train: int = 2000,
    n_audit: int = 1000,
    train_scene: str = "animals",
    shift_scenes: Sequence[str] = ("people",),
    paraphrase_rate: float = 0.2,
) -> TaskData:
    """Sentence-pair entailment. Shifted audits describe other scenes (other nouns and verbs)."""
    for s in (train_scene, *shift_scenes):
        if s not in _SCENES:
            raise TaskError(f"Unknown entailment scene '{s}'; choose from {sorted(_SCENES)}.")
    rng = np.random.default_rng([data_seed, 2])
    sc = _SCENES[train_scene]
    train = tuple(_entailment_example(rng, sc, paraphrase_rate) for _ in range(n_train))
    audits = {"calibration": tuple(_entailment_example(rng, sc, paraphrase_rate)
                                   for _ in range(n_audit))}
    for s in shift_scenes:
        audits[f"shift_{s}"] = tuple(_entailment_example(rng, _SCENES[s], paraphrase_rate)
                                     for _ in range(n_audit))
    return TaskData("entailment", ("not_entailed", "entailed"), train, audits)


# --------------------------------------------------------------------------------------------
# Local files: CSV or JSONL with a text column, an optional text_pair column and a label column.
# --------------------------------------------------------------------------------------------


def _read_rows(path: Path) -> list[dict]:
    if not path.is_file():
        raise TaskError(f"Task file '{path}' does not exist.")
    if path.suffix.lower() == ".csv":
        with path.open(newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))
    if path.suffix.lower() in (".jsonl", ".json"):
        rows = []
        with path.open(encoding="utf-8") as fh:
            for i, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise TaskError(f"Line {i} of '{path}' is not valid JSON ({exc.msg}).") from None
        return rows
    raise TaskError(f"Task file '{path}' must end in .csv or .jsonl.")


def file_task(
    train: str,
    audits: dict[str, str],
    text_column: str = "text",
    label_column: str = "label",
    text_pair_column: str | None = None,
    name: str = "files",
) -> TaskData:
    """A task from local CSV/JSONL files. Labels may be strings or integers; they are mapped to
    ids in sorted order of the training labels. ``audits`` must contain ``calibration``."""
    if "calibration" not in audits:
        raise TaskError("A file task needs a 'calibration' audit file.")
    splits = {"train": _read_rows(Path(train))}
    splits.update({k: _read_rows(Path(v)) for k, v in audits.items()})
    for split, rows in splits.items():
        if not rows:
            raise TaskError(f"The '{split}' file of task '{name}' has no rows.")
        needed = [text_column, label_column] + ([text_pair_column] if text_pair_column else [])
        missing = [c for c in needed if c not in rows[0]]
        if missing:
            raise TaskError(f"The '{split}' file of task '{name}' lacks the column(s) {missing}.")
    labels = sorted({str(r[label_column]) for r in splits["train"]})
    index = {lab: i for i, lab in enumerate(labels)}

    def convert(split: str) -> tuple[Example, ...]:
        out = []
        for r in splits[split]:
            lab = str(r[label_column])
            if lab not in index:
                raise TaskError(f"Label '{lab}' in the '{split}' file of task '{name}' never occurs in training.")
            out.append(Example(str(r[text_column]), index[lab],
                               str(r[text_pair_column]) if text_pair_column else None))
        return tuple(out)

    return TaskData(name, tuple(labels), convert("train"), {k: convert(k) for k in audits})


_BUILDERS = {"sentiment": sentiment_task, "entailment": entailment_task, "files": file_task}


def build_task(tcfg) -> TaskData:
    """Build the task a ``TaskConfig`` describes; unknown options fail with one sentence."""
    import inspect

    builder = _BUILDERS.get(tcfg.kind)
    if builder is None:
        raise TaskError(f"Unknown task kind '{tcfg.kind}'; choose from {sorted(_BUILDERS)}.")
    options = dict(tcfg.options)
    accepted = set(inspect.signature(builder).parameters)
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise TaskError(f"Task '{tcfg.name}' ({tcfg.kind}) has no option {unknown}; "
                        f"it accepts {sorted(accepted - {'data_seed'})}.")
    for key in ("n_train", "n_audit"):
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise TaskError(f"task.options.{key} must be a positive whole number of examples, not {value!r}.")
    for key, value in options.items():
        if key.endswith("_rate") and value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1):
            raise TaskError(f"task.options.{key} is a probability between 0 and 1, not {value!r}.")
    if "data_seed" in accepted:
        options["data_seed"] = tcfg.data_seed
    if tcfg.kind == "files":
        options.setdefault("name", tcfg.name)
    task = builder(**options)
    return task
