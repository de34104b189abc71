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
  the store (``recipe_audit.release`` computes cards from the store, on top of both);
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
    app sit above it."""
    bad = [f"{name}:{line} imports {mod}" for name, found in IMPORTS.items() if _in(name, "recipe_audit.store")
           for mod, line in found if _in(mod, "recipe_audit.release", "recipe_audit.app")]
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


#: A library's private modules imported on purpose, each with its reason (a new one fails the
#: test below until it is listed here, with its reason, or replaced by a public API).
FRAMEWORK_PRIVATE_MODULES = {
    # the parallel seed launcher is the joblib launcher's launch with another job function
    "hydra_plugins.hydra_joblib_launcher._core": "process_joblib_cfg",
    # the REST reader of the runs asks MLflow's store for the host's credentials
    "mlflow.tracking._tracking_service.utils": "_get_store",
    # MLflow's process-wide tracking URI is restored exactly (its global and the variable)
    "mlflow.tracking._tracking_service": "utils",
}


def _private_module_imports(name: str) -> list[str]:
    """Imports of a private module (``recipe_audit.stats._helpers``, ``hydra._internal``) from
    outside the package that holds it: a module other packages use is public, and a library's
    private module is used only where :data:`FRAMEWORK_PRIVATE_MODULES` says why."""
    bad = []
    for mod, line in IMPORTS[name]:
        parts = mod.split(".")
        for i, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                if not _in(name, ".".join(parts[:i])) and mod not in FRAMEWORK_PRIVATE_MODULES:
                    bad.append(f"{name}:{line} imports {mod}")
                break
    return bad


def test_the_allowed_private_uses_are_still_used():
    """Each library-private module or attribute listed as allowed is still used somewhere: a use
    that is gone (replaced by a public API) leaves the list, so the list cannot grow stale."""
    imported = {mod for found in IMPORTS.values() for mod, _ in found}
    attributes = {ast.unparse(node) for path in MODULES.values()
                  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.Attribute)}
    assert [m for m in FRAMEWORK_PRIVATE_MODULES if m not in imported] == []
    assert [a for a in ALLOWED_PRIVATE if a not in attributes] == []


def test_no_private_module_is_imported_from_another_package():
    bad = [hit for name in MODULES for hit in _private_module_imports(name)]
    assert bad == []


def test_the_private_module_check_finds_an_import(monkeypatch):
    """The check itself: a private stats module imported from cards is caught, from stats not; a
    library's private module not listed is caught."""
    monkeypatch.setitem(IMPORTS, "recipe_audit.app.main", [("hydra._internal.utils", 3)])
    assert _private_module_imports("recipe_audit.app.main") == ["recipe_audit.app.main:3 imports hydra._internal.utils"]
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


#: Private attributes of other objects used on purpose, each with its reason. The namedtuple API
#: (``_asdict``, ``_replace``, ``_fields``, ``_make``) is public despite its underscore.
NAMEDTUPLE_API = {"_asdict", "_replace", "_fields", "_make", "_field_defaults"}
ALLOWED_PRIVATE = {
    # submitit's local executor waits up to 15 s for a result file on a network filesystem; a
    # local disk needs none (app/tolerant_submitit.py): no public setting exists
    "job._results_timeout_s",
}


def _foreign_private_attributes(name: str, source: str) -> list[str]:
    """``obj._attr`` where ``obj`` is not ``self``, ``cls`` or ``super()`` and ``_attr`` is no name
    the module itself defines (a function, class, variable or ``self._attr``): a private attribute
    of another module's object, of a library's (Hydra's ``JobReturn._return_value``) or a module's
    private name reached through a dotted path (``recipe_audit.stats.exact._floor``)."""
    tree = ast.parse(source)
    own = set()
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
    bad = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in ("self", "cls"):
            continue
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super":
            continue
        text = ast.unparse(node)
        if node.attr in own or node.attr in NAMEDTUPLE_API or text in ALLOWED_PRIVATE:
            continue
        bad.append(f"{name}:{node.lineno} uses {text}")
    for node in ast.walk(tree):  # a private field set through another's constructor: JobReturn(_return_value=x)
        if isinstance(node, ast.Call):
            bad += [f"{name}:{node.lineno} passes {kw.arg}=" for kw in node.keywords
                    if kw.arg and kw.arg.startswith("_") and not kw.arg.endswith("_") and kw.arg not in own]
    return bad


def test_no_private_attribute_of_another_object_is_used():
    """A private attribute read or written on an object the module does not own is a leak the
    import checks above cannot see: Hydra's ``JobReturn._return_value`` has a public
    ``return_value``; another module's helper gets a public name."""
    bad = [hit for name, path in MODULES.items()
           for hit in _foreign_private_attributes(name, path.read_text(encoding="utf-8"))]
    assert bad == []


@pytest.mark.parametrize("source, hit", [
    ("def f(job_return):\n    return job_return._return_value\n", "job_return._return_value"),
    ("import recipe_audit.stats.exact\nrecipe_audit.stats.exact._floor(0.1, 0.1)\n",
     "recipe_audit.stats.exact._floor"),
    ("def f(obj):\n    obj._cache = None\n", "obj._cache"),
])
def test_the_foreign_attribute_check_finds_a_use(source, hit):
    """The check itself: a planted use is caught; the module's own private names, ``self._x``,
    ``super()._x``, the namedtuple API and dunders are not."""
    assert _foreign_private_attributes("planted", source) == [f"planted:2 uses {hit}"]
    own = ("class A:\n    def __init__(self):\n        self._x = 1\n    def g(self, other):\n"
           "        return other._x + super()._y() + self._z + other._asdict()['a'] + other.__dict__\n"
           "_helper = 1\ndef h(m):\n    return m._helper\n")
    assert _foreign_private_attributes("planted", own) == []
    assert _foreign_private_attributes("planted", "x = 1\nJobReturn(_return_value=None, _target_=x)\n") == [
        "planted:2 passes _return_value="]
