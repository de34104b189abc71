"""The package's rooms and who may import what, read from the source (every import, including
those inside functions): the layout is the data path, configs -> train -> store -> reruns ->
stats -> cards -> store / registry, with one door to each framework.

* ``recipe_audit.app`` (and the ``hydra_plugins`` registrations) is the only importer of Hydra
  and OmegaConf;
* ``recipe_audit.store`` is the only importer of MLflow and SQLAlchemy;
* ``recipe_audit.stats`` imports the standard library, NumPy and SciPy only;
* ``recipe_audit.keys``, ``recipe_audit.errors`` and ``recipe_audit.identity`` import the standard
  library only;
* ``recipe_audit.cards`` and ``recipe_audit.stats`` import no training code (torch & co.);
* ``recipe_audit.acceptance`` (the acceptance audit's records, mechanism config, signatures and
  the experiment's orchestration) imports no training library: its training code lives in
  ``recipe_audit.train.acceptance``, and no Hydra (it is given typed configs);
* ``recipe_audit.cards`` builds, renders and checks cards from data it is given: it does not read
  the store, and the store imports nothing of it (``recipe_audit.release`` computes cards from the
  store and logs them there, on top of both);
* ``recipe_audit.app`` does not import the command line (``cli``, ``commands``);
* no two modules import each other, directly or through others.
* no module uses another's private names (``from x import _y``, ``x._y`` or a private module of
  another package): a shared helper is public; nor does it read or write another object's private
  attributes (``job_return._return_value`` on an object of Hydra, a library or another module),
  and a library's private module or attribute is used only where the test says why.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("recipe_audit", "hydra_plugins")
TRAINING = ("torch", "transformers", "peft", "accelerate", "datasets")


def _modules() -> dict[str, Path]:
    out = {}
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import statement in the module, at any depth; ``from
    package import module`` counts as importing the module (not the package's ``__init__``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{name}:{node.lineno}: a relative import"
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.append((sub if sub in MODULES else node.module, node.lineno))
    return found


IMPORTS = {name: _imports(name, path) for name, path in MODULES.items()}


def _top(module: str) -> str:
    return module.split(".")[0]


def _in(name: str, *rooms: str) -> bool:
    return any(name == r or name.startswith(r + ".") for r in rooms)


def _offenders(allowed_rooms: tuple[str, ...], forbidden) -> list[str]:
    return [f"{name}:{line} imports {mod}" for name, found in IMPORTS.items() for mod, line in found
            if forbidden(mod) and not _in(name, *allowed_rooms)]


def test_the_walk_sees_the_package():
    assert len(MODULES) > 60 and "recipe_audit.store.tracking" in MODULES and "recipe_audit.stats.exact" in MODULES
    assert any(mod == "mlflow.tracking" for mod, _ in IMPORTS["recipe_audit.store.tracking"] + [
        m for n in MODULES if n.startswith("recipe_audit.store") for m in IMPORTS[n]])


def test_only_app_imports_hydra_and_omegaconf():
    assert _offenders(("recipe_audit.app", "hydra_plugins"), lambda m: _top(m) in ("hydra", "omegaconf")) == []


def test_only_store_imports_mlflow_and_sqlalchemy():
    assert _offenders(("recipe_audit.store",), lambda m: _top(m) in ("mlflow", "sqlalchemy")) == []


def test_stats_is_numpy_and_scipy_only():
    stdlib = sys.stdlib_module_names
    bad = [f"{name}:{line} imports {mod}" for name, found in IMPORTS.items() if _in(name, "recipe_audit.stats")
           for mod, line in found
           if not (_top(mod) in stdlib or _top(mod) in ("numpy", "scipy") or _in(mod, "recipe_audit.stats"))]
    assert bad == []


def test_cards_and_stats_import_no_training_code():
    bad = [f"{name}:{line} imports {mod}" for name, found in IMPORTS.items()
           if _in(name, "recipe_audit.cards", "recipe_audit.stats") for mod, line in found
           if _top(mod) in TRAINING or _in(mod, "recipe_audit.train", "recipe_audit.app")]
    assert bad == []


def test_acceptance_imports_no_training_library():
    bad = [f"{name}:{line} imports {mod}" for name, found in IMPORTS.items() if _in(name, "recipe_audit.acceptance")
           for mod, line in found if _top(mod) in TRAINING]
    assert bad == []


def test_the_acceptance_card_is_a_card():
    """The acceptance card's modules sit in ``cards/`` (so the two tests above hold them: no
    training code, no store) and are split like the recipe card's: document, build (with each
    diagnostic's words in ``diagnostics``), render, files."""
    card = sorted(n for n in MODULES if _in(n, "recipe_audit.cards.acceptance"))
    assert card == ["recipe_audit.cards.acceptance", *(f"recipe_audit.cards.acceptance.{m}" for m in
                                                        ("build", "diagnostics", "document", "files", "render"))]
    assert not [n for n in MODULES if _in(n, "recipe_audit.acceptance") and "card" in n.rsplit(".", 1)[-1]]


@pytest.mark.parametrize("room", ["recipe_audit.acceptance", "recipe_audit.cards"])
def test_the_room_check_finds_a_training_import(monkeypatch, room):
    """The checks themselves: a planted ``import torch`` in the acceptance audit or in a card module is caught."""
    name = f"{room}.records" if room == "recipe_audit.acceptance" else f"{room}.acceptance.render"
    monkeypatch.setitem(IMPORTS, name, [*IMPORTS[name], ("torch", 1)])
    with pytest.raises(AssertionError):
        test_acceptance_imports_no_training_library() if room == "recipe_audit.acceptance" \
            else test_cards_and_stats_import_no_training_code()


def test_cards_do_not_read_the_store():
    rooms = ("recipe_audit.store", "recipe_audit.release", "recipe_audit.app")
    bad = [f"{name}:{line} imports {mod}" for name, found in IMPORTS.items() if _in(name, "recipe_audit.cards")
           for mod, line in found if _in(mod, *rooms)]
    assert bad == []


def test_keys_errors_and_identity_import_the_standard_library_only():
    """``keys`` (the store's names), ``errors`` (one sentence from an error), ``identity`` (a
    recipe's hash) and ``files`` (a small input file read bounded) sit under every room that imports
    them: nothing of the package, no third-party library (no MLflow, no Hydra)."""
    stdlib = sys.stdlib_module_names
    bad = [f"{name}:{line} imports {mod}" for name in ("recipe_audit.keys", "recipe_audit.errors", "recipe_audit.identity",
                                                       "recipe_audit.files")
           for mod, line in IMPORTS[name] if _top(mod) not in stdlib]
    assert bad == []


def test_the_store_is_below_release_and_app():
    """The store reads and writes; the decisions made on what it holds (``release``) and the Hydra
    app sit above it. It writes what it is given (a card's files, tags and description text, made
    in ``cards``), so it imports nothing of ``cards`` either."""
    bad = [f"{name}:{line} imports {mod}" for name, found in IMPORTS.items() if _in(name, "recipe_audit.store")
           for mod, line in found if _in(mod, "recipe_audit.release", "recipe_audit.app", "recipe_audit.cards")]
    assert bad == []


def test_the_app_does_not_import_the_command_line():
    """The Hydra app and the ``recipe-audit`` commands are two doors side by side: ``python -m
    recipe_audit card ...`` is routed in ``recipe_audit/__main__.py`` before Hydra is imported, so
    nothing under ``app/`` (or the Hydra plugins) imports ``cli`` or ``commands/``."""
    bad = [f"{name}:{line} imports {mod}" for name, found in IMPORTS.items()
           if _in(name, "recipe_audit.app", "hydra_plugins")
           for mod, line in found if _in(mod, "recipe_audit.cli", "recipe_audit.commands")]
    assert bad == []


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph = defaultdict(set)
    for name, found in IMPORTS.items():
        graph[name] |= {mod for mod, _ in found if mod in MODULES and mod != name}
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in sorted(MODULES):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_import_cycles():
    assert _cycles() == []


@pytest.mark.parametrize("a, b", [("recipe_audit.stats.bounds", "recipe_audit.stats.verdicts")])
def test_the_cycle_finder_finds_a_cycle(monkeypatch, a, b):
    """The finder itself: an import added from ``b`` back to ``a``'s importer is a cycle."""
    monkeypatch.setitem(IMPORTS, a, [*IMPORTS[a], (b, 0)])
    monkeypatch.setitem(IMPORTS, b, [*IMPORTS[b], (a, 0)])
    assert any(a in c and b in c for c in _cycles())


def test_no_private_name_is_imported_from_another_module():
    """``from recipe_audit.x import _helper`` in another module means the helper is shared: it
    gets a public name (a private module may be imported within its own package only: see
    :func:`test_no_private_module_is_imported_from_another_package`)."""
    bad = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and _top(node.module) in ROOTS:
                bad += [f"{name}:{node.lineno} imports {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")
                        and f"{node.module}.{a.name}" not in MODULES]
    assert bad == []


def _ours(module: str) -> bool:
    return _in(module, "recipe_audit", "hydra_plugins.recipe_audit")


def _private_module_imports(name: str) -> list[str]:
    """Imports of a private module of the package (``recipe_audit.stats._helpers``) from outside
    the package that holds it: a module other packages use is public. (A library's private module,
    ``hydra._internal``, is a third-party private name: see :data:`THIRD_PARTY_PRIVATE`.)"""
    bad = []
    for mod, line in IMPORTS[name]:
        if not _ours(mod):
            continue
        parts = mod.split(".")
        for i, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                if not _in(name, ".".join(parts[:i])):
                    bad.append(f"{name}:{line} imports {mod}")
                break
    return bad


def test_no_private_module_is_imported_from_another_package():
    bad = [hit for name in MODULES for hit in _private_module_imports(name)]
    assert bad == []


def test_the_private_module_check_finds_an_import(monkeypatch):
    """The check itself: a private stats module imported from cards is caught, from stats not (a
    library's private module is :func:`test_the_third_party_check_finds_a_use`'s)."""
    monkeypatch.setitem(IMPORTS, "recipe_audit.cards.render", [("recipe_audit.stats._planted", 7)])
    monkeypatch.setitem(IMPORTS, "recipe_audit.stats.exact", [("recipe_audit.stats._planted", 9)])
    assert _private_module_imports("recipe_audit.cards.render") == [
        "recipe_audit.cards.render:7 imports recipe_audit.stats._planted"]
    assert _private_module_imports("recipe_audit.stats.exact") == []


def _private_attributes(name: str, source: str) -> list[str]:
    """``mod._helper`` where ``mod`` names a module of the package imported into ``name``
    (``import recipe_audit.x as mod`` or ``from recipe_audit import x``): the helper is shared."""
    tree = ast.parse(source)
    mods = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and _top(node.module) in ROOTS:
            mods.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names
                         if f"{node.module}.{a.name}" in MODULES})
        elif isinstance(node, ast.Import):
            mods.update({a.asname: a.name for a in node.names if a.asname and a.name in MODULES})
    return [f"{name}:{node.lineno} uses {mods[node.value.id]}.{node.attr}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in mods
            and node.attr.startswith("_") and not node.attr.startswith("__")]


def test_no_private_name_is_used_from_another_module():
    """``exact._helper`` through an imported module is the same leak as importing ``_helper``."""
    bad = [hit for name, path in MODULES.items()
           for hit in _private_attributes(name, path.read_text(encoding="utf-8"))]
    assert bad == []


@pytest.mark.parametrize("source", [
    "from recipe_audit.stats import exact\nexact._floor(0.1, 0.1)\n",
    "import recipe_audit.stats.exact as ex\nex._floor(0.1, 0.1)\n",
])
def test_the_private_attribute_check_finds_a_use(source):
    """The check itself: a planted ``mod._name`` on an imported module of the package is caught,
    a dunder or a private name of a non-package module is not."""
    assert _private_attributes("planted", source) == ["planted:2 uses recipe_audit.stats.exact._floor"]
    assert _private_attributes("planted", source + "import os\nos._exit\nexact.__name__\n") == [
        "planted:2 uses recipe_audit.stats.exact._floor"]


def test_pyproject_lists_every_package():
    """pyproject.toml names the packages the wheel carries (discovery would miss
    ``recipe_audit.conf``, which lives in ``conf/`` at the top): a folder of modules left out of the
    list would be missing from an installed recipe_audit, and a listed one must exist."""
    tomllib = pytest.importorskip("tomllib")
    setup = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    dirs = setup.get("package-dir", {})
    assert dirs == {"recipe_audit.conf": "conf"} and (REPO / "conf" / "config.yaml").is_file()
    folders = {".".join(p.parent.relative_to(REPO).parts) for root in ROOTS
               for p in (REPO / root).rglob("*.py")}
    assert folders - set(setup["packages"]) == set()
    missing = [name for name in setup["packages"]
               if not (REPO / dirs.get(name, name.replace(".", "/"))).is_dir()]
    assert missing == [] and list((REPO / "recipe_audit").rglob("conf/*.yaml")) == []


def test_mlruns_is_the_default_store_with_its_readme():
    """``mlruns/`` (the default local store) is in git with its README only: ``.gitignore`` ignores
    everything else there and excepts exactly the README, which exists."""
    lines = (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert "mlruns/*" in lines and [line for line in lines if line.startswith("!mlruns/")] == ["!mlruns/README.md"]
    assert (REPO / "mlruns" / "README.md").is_file()


#: The private names of other libraries recipe_audit uses, each with the one module that may use it
#: and why no public API does: a private module (``hydra_plugins.hydra_joblib_launcher._core``), a
#: private function or variable of a module (``mlflow.store.db.utils._initialize_tables``), reached
#: by an import, an attribute or ``getattr``/``hasattr``/``setattr`` with the name as a string, or
#: a private attribute of a library's object (``job._results_timeout_s``, as the module writes it).
#: A new use fails :func:`test_no_private_attribute_of_another_object_is_used` until it is listed
#: here with its reason (or replaced by a public API); a listed use that is gone fails
#: :func:`test_every_listed_third_party_private_name_is_still_used`, so the list cannot grow stale.
THIRD_PARTY_PRIVATE: dict[str, tuple[str, str]] = {
    "hydra_plugins.hydra_joblib_launcher._core.process_joblib_cfg": (
        "recipe_audit.app.parallel", "the parallel seed launcher is hydra-joblib-launcher's launch with another "
        "job function, and prepares joblib's settings as that launch does; the plugin has no public helper"),
    "mlflow.tracking._tracking_service.utils._get_store": (
        "recipe_audit.store.read_client", "the credentials MLflow's REST client sends to a server (user and "
        "password, token, TLS settings) for the requests the REST reader makes itself; MLflow exposes them "
        "only through its store"),
    "mlflow.tracking._tracking_service.utils": (
        "recipe_audit.store.tracking", "the module that holds MLflow's process-wide tracking URI, restored "
        "exactly after use_tracking_uri's block"),
    "mlflow.tracking._tracking_service.utils._tracking_uri": (
        "recipe_audit.store.tracking", "whether MLflow's process-wide tracking URI was set at all: "
        "mlflow.get_tracking_uri() answers a default when it is not, so 'unset' could not be put back"),
    "mlflow.store.db.utils._get_latest_schema_revision": (
        "recipe_audit.store.sqlite", "the schema revision that names the cached template of an empty store "
        "and tells a store that is still being migrated; MLflow has no public way to read it"),
    "mlflow.store.db.utils._initialize_tables": (
        "recipe_audit.store.sqlite", "builds the template store's tables exactly as MLflow builds a new "
        "store's (the template is then MLflow's own store, copied)"),
    "module._default_root_dir": (
        "recipe_audit.store.sqlite", "the folder MLflow's file store writes to when given none (the "
        "refusal of a file store in the folder of the rerun's SQLite store must see where it would go)"),
    "hydra.core.utils._flush_loggers": (
        "recipe_audit.app.launchers", "the seed launcher's job runner ends a job as Hydra's run_job does, which "
        "flushes every logging handler with this helper; logging has no public list of its handlers"),
    "visible.hydra._set_parent": (
        "recipe_audit.app.launchers", "the seed launcher's job runner sets HydraConfig as HydraConfig.set_config "
        "does (a copy of the hydra node whose parent is the job's configuration), from a copy made once per "
        "recipe instead of a masked copy per job; OmegaConf has no public way to set a node's parent"),
    "job._results_timeout_s": (
        "recipe_audit.app.tolerant_submitit", "submitit's local executor waits up to 15 s for a result file "
        "on a network filesystem; a local disk needs none, and no public setting exists"),
}

#: Private attributes that are public API despite their underscore (the namedtuple API).
NAMEDTUPLE_API = {"_asdict", "_replace", "_fields", "_make", "_field_defaults"}
_ATTR_CALLS = ("getattr", "hasattr", "setattr", "delattr")


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _private_uses(name: str, source: str) -> list[tuple[int, str]]:
    """(line, what) for each private name of another module, object or library that the module
    ``name`` uses:

    * ``obj._attr`` and ``getattr(obj, "_attr")`` (also ``hasattr``/``setattr``/``delattr``) where
      ``obj`` is not ``self``, ``cls`` or ``super()`` and ``_attr`` is no name the module itself
      defines (a function, class, variable or ``self._attr``); ``obj`` named by an import is
      written as the module it names (``_tu._tracking_uri`` after ``from mlflow.tracking.
      _tracking_service import utils as _tu`` is ``mlflow.tracking._tracking_service.utils.
      _tracking_uri``);
    * an import of another library's private module or name (``import a._b``, ``from joblib._x
      import y``, ``from mlflow.store.db.utils import _initialize_tables``: the name imported);
    * a private field set through another's constructor (``JobReturn(_return_value=x)``).
    """
    tree = ast.parse(source)
    own, aliases, uses = set(), {}, []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            own.add(node.target.id)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            own.add(node.attr)
        elif isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                if not _ours(a.name) and any(_private(p) for p in a.name.split(".")):
                    uses.append((node.lineno, a.name))
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                aliases[a.asname or a.name] = full
                if not _ours(node.module) and any(_private(p) for p in full.split(".")):
                    uses.append((node.lineno, full))

    def reached(obj: ast.expr, attr: str) -> str | None:
        if isinstance(obj, ast.Name) and obj.id in ("self", "cls"):
            return None
        if isinstance(obj, ast.Call) and isinstance(obj.func, ast.Name) and obj.func.id == "super":
            return None
        if attr in own or attr in NAMEDTUPLE_API:
            return None
        text = ast.unparse(obj)
        head, _, rest = text.partition(".")
        return f"{aliases.get(head, head)}{'.' + rest if rest else ''}.{attr}"

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            what = reached(node.value, node.attr)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _ATTR_CALLS
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and _private(node.args[1].value)):
            what = reached(node.args[0], node.args[1].value)
        else:
            what = None
        if what is not None:
            uses.append((node.lineno, what))
        if isinstance(node, ast.Call):  # a private field set through another's constructor: JobReturn(_return_value=x)
            uses += [(node.lineno, f"{kw.arg}=") for kw in node.keywords
                     if kw.arg and kw.arg.startswith("_") and not kw.arg.endswith("_") and kw.arg not in own]
    return sorted(set(uses))


def _foreign_private_attributes(name: str, source: str) -> list[str]:
    """The uses of :func:`_private_uses` that :data:`THIRD_PARTY_PRIVATE` does not allow in ``name``."""
    return [f"{name}:{line} {'passes' if what.endswith('=') else 'uses'} {what}"
            for line, what in _private_uses(name, source) if THIRD_PARTY_PRIVATE.get(what, ("",))[0] != name]


def test_no_private_attribute_of_another_object_is_used():
    """A private name of another module, object or library (Hydra's ``JobReturn._return_value``
    has a public ``return_value``; another module's helper gets a public name) is used only where
    :data:`THIRD_PARTY_PRIVATE` says why."""
    bad = [hit for name, path in MODULES.items()
           for hit in _foreign_private_attributes(name, path.read_text(encoding="utf-8"))]
    assert bad == []


def test_every_listed_third_party_private_name_is_still_used():
    """Each listed private name is still used, in the module the list names: a use that is gone
    (replaced by a public API) leaves the list. And each says why."""
    used = {(name, what) for name, path in MODULES.items()
            for _, what in _private_uses(name, path.read_text(encoding="utf-8"))}
    assert [what for what, (where, _) in THIRD_PARTY_PRIVATE.items() if (where, what) not in used] == []
    assert all(where in MODULES and len(why) > 40 for where, why in THIRD_PARTY_PRIVATE.values())


@pytest.mark.parametrize("source, hit", [
    ("def f(job_return):\n    return job_return._return_value\n", "job_return._return_value"),
    ("import recipe_audit.stats.exact\nrecipe_audit.stats.exact._floor(0.1, 0.1)\n",
     "recipe_audit.stats.exact._floor"),
    ("def f(obj):\n    obj._cache = None\n", "obj._cache"),
    ("def f(obj):\n    return getattr(obj, '_cache', None)\n", "obj._cache"),
    ("def f(obj):\n    setattr(obj, '_cache', 1)\n", "obj._cache"),
    ("import mlflow\nhasattr(mlflow, '_x')\n", "mlflow._x"),
    ("x = 1\nfrom joblib._parallel_backends import LokyBackend\n", "joblib._parallel_backends.LokyBackend"),
    ("x = 1\nimport a._b\n", "a._b"),
    ("x = 1\nimport a._b as ab\nab.c\n", "a._b"),
    ("x = 1\nfrom mlflow.store.db.utils import _initialize_tables\n", "mlflow.store.db.utils._initialize_tables"),
    ("from mlflow.tracking._tracking_service import utils as _tu\ngetattr(_tu, '_tracking_uri', None)\n",
     "mlflow.tracking._tracking_service.utils._tracking_uri"),
])
def test_the_third_party_check_finds_a_use(source, hit):
    """The check itself: a planted use is caught (in a module the list does not name, also when the
    name is listed for another); the module's own private names, ``self._x``, ``getattr(self, "_x")``,
    ``super()._x``, the namedtuple API and dunders are not."""
    found = _foreign_private_attributes("planted", source)
    assert f"planted:2 uses {hit}" in found
    own = ("class A:\n    def __init__(self):\n        self._x = 1\n    def g(self, other):\n"
           "        return other._x + super()._y() + self._z + other._asdict()['a'] + other.__dict__\n"
           "    def h(self):\n        return getattr(self, '_w', None) or getattr(self, '__name__')\n"
           "_helper = 1\ndef h(m):\n    return m._helper + getattr(m, '_helper')\n"
           "from recipe_audit.stats import exact\n")
    assert _foreign_private_attributes("planted", own) == []
    assert _foreign_private_attributes("planted", "x = 1\nJobReturn(_return_value=None, _target_=x)\n") == [
        "planted:2 passes _return_value="]


def test_a_listed_name_is_allowed_only_where_the_list_says(monkeypatch):
    """A listed private name is allowed in its module; the same use elsewhere is caught."""
    source = "from mlflow.store.db.utils import _initialize_tables\n"
    assert _foreign_private_attributes("recipe_audit.store.sqlite", source) == []
    assert _foreign_private_attributes("recipe_audit.store.tracking", source) == [
        "recipe_audit.store.tracking:1 uses mlflow.store.db.utils._initialize_tables"]
    monkeypatch.delitem(THIRD_PARTY_PRIVATE, "mlflow.store.db.utils._initialize_tables")
    assert _foreign_private_attributes("recipe_audit.store.sqlite", source) == [
        "recipe_audit.store.sqlite:1 uses mlflow.store.db.utils._initialize_tables"]
