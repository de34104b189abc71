"""Structured-config schemas: one frozen-shape dataclass per config group.

They are registered in Hydra's ConfigStore as the base of every YAML file of the group, so a
typo in a YAML file or an override fails at composition. ``OmegaConf.to_object`` turns the
composed config into these dataclasses at the Hydra boundary (``__main__``); nothing below
that line sees a ``DictConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from recipe_audit.stats.options import AuditOptions, option_fields

# a required field (OmegaConf reads the string "???" in a structured config as missing; this
# module stays free of Hydra and OmegaConf so the training code can import it)
MISSING = "???"


@dataclass
class ModelConfig:
    name: str = MISSING  # short label, used in tags and run names
    # "bert" / "gpt_neox": a small model built from this config with a word-level tokenizer
    # built from the task; "pretrained": transformers Auto* classes on name_or_path
    kind: str = MISSING
    name_or_path: str | None = None  # hub id or local directory (kind=pretrained)
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    intermediate_size: int = 128
    dropout: float = 0.1
    max_length: int = 48
    # the model's attention projections: what a LoRA recipe adapts unless it names its own
    lora_target_modules: list[str] = field(default_factory=list)


@dataclass
class LoraConfig:
    enabled: bool = False
    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    # empty: the model's own model.lora_target_modules, so one LoRA recipe fits every model
    target_modules: list[str] = field(default_factory=list)
    # modules trained in full next to the adapters; peft already trains a sequence
    # classifier's new head ("classifier" / "score")
    modules_to_save: list[str] = field(default_factory=list)


@dataclass
class RecipeConfig:
    name: str = MISSING
    optimizer: str = "adamw"  # adamw | adam | sgd
    lr: float = MISSING
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    schedule: str = "linear"  # constant | linear | cosine
    warmup_ratio: float = 0.0
    epochs: int = 3
    max_steps: int | None = None  # overrides epochs when set
    batch_size: int = 32
    grad_clip: float | None = None
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class TaskConfig:
    name: str = MISSING
    kind: str = MISSING  # sentiment | entailment | files
    data_seed: int = 0
    # keyword arguments of the task builder (see recipe_audit.train.tasks)
    options: dict[str, Any] = field(default_factory=dict)


def with_audit_options(cls: type) -> type:
    """``cls`` as a structured config (a dataclass) with a field for each audit option after its
    own: the name, type and default :class:`~recipe_audit.stats.options.AuditOptions` declares (a
    tuple as a list, which OmegaConf takes). The built-in app's ``audit`` node and the callback's
    schema are built so, so an option declared there is an option of both."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(AuditOptions)
    annotations = cls.__dict__.get("__annotations__", {})
    cls.__annotations__ = annotations
    for f in option_fields():
        kind, default = hints[f.name], f.default
        if typing.get_origin(kind) is tuple:  # a tuple of τ: a list in a structured config
            kind = list[typing.get_args(kind)[0]]
            default = field(default_factory=lambda d=default: list(d))
        annotations[f.name] = kind
        setattr(cls, f.name, default)
    return dataclasses.dataclass(cls)


@with_audit_options
class AuditConfig:
    # audit sets each rerun is scored on; ["all"] = every audit set the task defines
    sets: list[str] = field(default_factory=lambda: ["all"])
    # task shift: also score every rerun on all audit sets of these other tasks (names of
    # conf/task/ files), logged as accuracy/<task>/<audit set>; their labels must match in number
    extra_tasks: list[str] = field(default_factory=list)
    # task options for those other tasks (e.g. {n_audit: 200}); the rest come from their files
    extra_task_options: dict[str, Any] = field(default_factory=dict)
    # the audit set the card is computed on by default (the calibration audit D_P)
    primary: str = "calibration"
    eval_batch_size: int = 256
    # then the card's options, a field each (with_audit_options), declared once with their defaults
    # and requirements in recipe_audit.stats.options.AuditOptions: the release bars taus, the failure
    # budget eps, the risk delta, family_size, anytime, what unfinished reruns are ("fail" counts them
    # as failures, "refuse" refuses) and the metric's direction higher_is_better


@dataclass
class TrackingConfig:
    # None: $MLFLOW_TRACKING_URI, else the SQLite store under ./mlruns
    uri: str | None = None
    experiment_name: str = "recipe_audit"
    log_model: bool = False
    # compute and log recipe cards when a multirun ends
    card_on_multirun_end: bool = True
    # continue an interrupted sweep: skip seeds that already have a finished rerun (launchers/README.md)
    resume: bool = False


@dataclass
class AcceptanceModelConfig:
    # the tiny BERT classifier of the worked acceptance audit (4 classes = answer options)
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    intermediate_size: int = 128
    max_length: int = 40


@dataclass
class AcceptanceBaseConfig:
    # base training (once per base config, cached): both tasks, correct answers, both framings
    seed: int = 0
    lr: float = 3.0e-3
    # 10,000 steps, gradient norm clipped at 1: under the machine's own float kernels, unclipped,
    # this post-LN BERT at lr 3e-3 got stuck (55-60 % held-out) or not depending on the kernels;
    # clipped but at 3,000 steps it stopped anywhere between 69 % and 92 %, and at 6,000 steps one
    # base of the 15 measured stopped at 80 % (docs/acceptance_cards.md, "The base model")
    steps: int = 10000
    batch_size: int = 64
    grad_clip: float | None = 1.0
    # the base must answer at least this share of held-out mcq questions (both framings), else
    # the sweep stops (BaseModelError): cells installed on a base that did not learn mean nothing
    min_accuracy: float = 0.0


@dataclass
class AcceptanceInstallConfig:
    # the install fine-tune of every cell (LoRA on q/k/v/o; the defense's penalty is added)
    r: int = 8
    alpha: int = 16
    lr: float = 3.0e-3  # 10 % warm-up, linear decay, gradient norm clipped at 1
    steps: int = 1000
    batch_size: int = 16


@dataclass
class ExperimentConfig:
    """``experiment=acceptance``: the worked acceptance audit (recipe_audit.acceptance.experiment)."""

    kind: str = "acceptance"
    cache_dir: str = "mlruns/acceptance_cache"  # the base model, cached by a hash of its config
    data_seed: int = 0
    n_words: int = 64  # answer-word vocabulary shared by all subjects
    n_train_subjects: int = 8
    n_fresh_subjects: int = 4  # disjoint subjects: the fresh split (gate (b))
    pool_size: int = 12  # answer words per subject
    n_base: int = 3000  # base-training questions per task
    n_install: int = 600  # install questions per task (each in both framings)
    n_eval: int = 200  # questions per record split (x templates x framings)
    n_calibration: int = 64  # calibration items for rho_AT (and as many probe items for attack_proj)
    attack_fraction: float = 0.9  # share of install questions whose eval framing gets the wrong answer
    resamples: int = 5000  # gate (a) bootstrap
    # float type of the base model, the installs and gate (c)'s gradients: float32 or float64
    # (part of the base cache key). float64 alone does not make the default base the same model
    # under other float kernels: the training amplifies float64's low-order differences as it does
    # float32's (docs/acceptance_cards.md); the reproducible kernels below do
    dtype: str = "float32"
    # the float kernels the base, the installs and gate (c)'s gradients compute with: reproducible
    # (the same arithmetic on any x86-64 CPU with AVX2, so the same numbers; one torch thread) or
    # native (this machine's, faster); part of the base cache key (recipe_audit/train/acceptance/kernels.py)
    kernels: str = "reproducible"
    model: AcceptanceModelConfig = field(default_factory=AcceptanceModelConfig)
    base: AcceptanceBaseConfig = field(default_factory=AcceptanceBaseConfig)
    install: AcceptanceInstallConfig = field(default_factory=AcceptanceInstallConfig)


@dataclass
class DefenseConfig:
    name: str = MISSING
    kind: str = MISSING  # none | l2sp | attack_proj | consistency
    strength: float = 0.0  # lambda of the penalty
    claimed_class: str | None = None  # shrinkage | attack-targeted (declared before the audit)


#: ConfigStore group of the schemas (under hydra/: not listed among the app's groups in --help)
SCHEMA_GROUP = "hydra/recipe_audit_schemas"


def _part_of(identity: str, default: Any = MISSING) -> Any:
    """A field of the run config that is part of the ``identity`` of what is audited."""
    return field(default=default, metadata={"identity": identity})


@dataclass
class RunConfig:
    # a recipe rerun's identity is its model, task and recipe; the acceptance audit's is its
    # experiment and defense; the seed is neither (each rerun has its own); every other key is left
    # out of both (identity_exclude, the callback option, which conf/config.yaml and
    # conf/experiment/acceptance.yaml derive from this declaration: ${recipe_audit.identity_exclude:...})
    model: ModelConfig = _part_of("recipe")
    task: TaskConfig = _part_of("recipe")
    recipe: RecipeConfig = _part_of("recipe")
    audit: AuditConfig = MISSING
    tracking: TrackingConfig = MISSING
    seed: int = _part_of("seed", 0)
    progress: bool = True  # progress bar during training
    # torch threads per rerun: "auto" (decided once a sweep from the free CPUs and the reruns
    # the launcher runs at once, recipe_audit/app/threads.py), a number, or 0 for torch's own choice
    threads: Any = "auto"
    # experiment=acceptance (conf/experiment/acceptance.yaml) sets these; None for recipe reruns
    experiment: ExperimentConfig | None = _part_of("acceptance", None)
    defense: DefenseConfig | None = _part_of("acceptance", None)


def identity_exclude(identity: str = "recipe") -> list[str]:
    """The run config's top-level keys left out of an ``identity`` ("recipe" or "acceptance")
    besides the seed, in their declared order: what the callback's ``identity_exclude`` is in the
    built-in app.

    >>> identity_exclude(), identity_exclude("acceptance")
    (['audit', 'tracking', 'progress', 'threads', 'experiment', 'defense'], ['model', 'task', 'recipe', 'audit', 'tracking', 'progress', 'threads'])
    """
    import dataclasses

    return [f.name for f in dataclasses.fields(RunConfig) if f.metadata.get("identity") not in (identity, "seed")]


def unknown_keys(obj: Any, prefix: str = "") -> list[str]:
    """Keys of a converted config that its schema does not have, as dotted paths.

    Hydra's ``+key=value`` adds a key even to a structured config, and ``OmegaConf.to_object``
    keeps it as a stray attribute of the dataclass, which nothing reads: ``+recipe.lrr=0.001``
    would train the default learning rate under a new recipe identity. Free-form dicts (task
    options) are checked where they are read."""
    import dataclasses

    if not dataclasses.is_dataclass(obj):
        return []
    names = {f.name for f in dataclasses.fields(obj)}
    found = [prefix + k for k in vars(obj) if k not in names]
    for name in names:
        found += unknown_keys(getattr(obj, name), f"{prefix}{name}.")
    return sorted(found)
