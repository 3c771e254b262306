"""Imports point inward: the layering of docs/architecture.md, checked on every module's imports.

Every module of ``sunk``, ``scheduler``, ``extender``, ``sunk_dev`` (dev/, the dev tools'
sibling distribution) and ``benchmarks`` belongs to one layer
(LAYERS, innermost first). A module may import from its own layer and from layers further
in, never from a layer further out. The imports are read with ``ast``, not by importing:

- absolute imports (``import a.b``, ``from a.b import c``), with ``from a import b`` read as
  the module ``a.b`` when there is one;
- relative imports (``from . import x``, ``from ..y import z``), resolved against the
  importing module's package;
- imports inside functions (lazy imports are still dependencies) and under
  ``if TYPE_CHECKING:`` too: a type from an outer layer in an inner layer's signatures is
  the same coupling, only deferred, and keeping it out keeps the layers honest for mypy
  as well.

What the check does not see: importing ``a.b.c`` also runs ``a/__init__.py`` and
``a/b/__init__.py``. Since each folder is one layer and none sits inside a folder of a layer
further out (``test_no_layer_folder_sits_inside_one_further_out``), those run in the imported
module's layer or further in, so nothing outward runs unseen.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sunk", "scheduler", "extender", "sunk_dev", "benchmarks")
# Where a package's directory is, when not at the root: the dev tools are a distribution of their own.
SOURCE_ROOTS = {"sunk_dev": ROOT / "dev"}
# What the product's wheel and image carry; nothing in them may import the rest (the dev tools, the
# benchmarks), which would then be missing where the product runs.
PRODUCT = ("sunk", "scheduler", "extender")

# (layer, module prefixes), innermost first. A prefix names a module and everything under
# it; a module belongs to the layer of its longest matching prefix. Keep this table and the
# one in docs/architecture.md in step (test_the_docs_name_every_layer_and_prefix).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("pure", (
        "sunk",  # the root package's __init__ (only __version__): see EXACT
        "sunk.base",  # leaf helpers: backoff, the Lease fence, flag spellings, timestamps, JSON depth
        "sunk.model",  # the names SUNK fixes, Slurm's domain values, the hostlist grammar
        "sunk.translate",  # every decision, from facts to intents
    )),
    ("clients", (
        "sunk.slurm",
        "sunk.kube",
        "sunk.scripts",  # the Slurm-side shell scripts, read as they ship: file reads
    )),
    ("runtime", (
        "sunk.controller",
    )),
    ("reconcilers", (
        "sunk.syncer",
        "sunk.nodeset",
        "sunk.slurmcluster",
        "sunk.locking",
        "sunk.metrics",
        "sunk.hooks",
        "scheduler",
        "extender",
    )),
    ("entry points", (
        "sunk.commands",
        "sunk_dev",
        "benchmarks",
    )),
]

# Prefixes that name only the module itself, not what is under it. ``sunk`` as a prefix
# would quietly put every new, unclassified sunk module in the pure layer.
EXACT = frozenset({"sunk"})

# (importing module, imported module) -> why this outward import is allowed for now.
# Each entry is a debt with its reason; test_no_stale_exceptions fails once it is paid.
EXCEPTIONS: dict[tuple[str, str], str] = {}

# The pure layer does no I/O: none of these, at any depth of the import.
IO_MODULES = frozenset({
    "socket", "ssl", "select", "selectors", "subprocess", "multiprocessing", "asyncio",
    "http", "urllib", "urllib3", "requests", "kubernetes", "pyslurm", "flask", "werkzeug",
    "gunicorn", "prometheus_client",
})

LAYER_INDEX = {name: i for i, (name, _) in enumerate(LAYERS)}


@attrs.frozen
class Import:
    path: Path  # the importing file
    line: int
    module: str  # the importing module
    target: str  # the first-party module it imports (resolved)
    written: str  # the import as written, for the message


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def discover(root: Path = ROOT) -> dict[str, Path]:
    """Every first-party module, by dotted name."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        base = SOURCE_ROOTS.get(package, ROOT) if root == ROOT else root
        for path in sorted((base / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[module_name(path, base)] = path
    return found


def layer_of(module: str) -> str | None:
    best: tuple[int, str] | None = None
    for layer, prefixes in LAYERS:
        for prefix in prefixes:
            matches = module == prefix or (prefix not in EXACT and module.startswith(prefix + "."))
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), layer)
    return best[1] if best else None


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` or its longest prefix that is a module (``sunk.slurm.connect`` -> ``sunk.slurm``)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path], source: str | None = None) -> Iterator[Import]:
    """Every first-party module ``module`` imports, anywhere in the file."""
    tree = ast.parse(source if source is not None else path.read_text(), filename=str(path))
    package = module if _is_package(path) else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    yield Import(path, node.lineno, module, _known(alias.name, modules) or alias.name,
                                 f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".") if package else []
                if node.level > 1:
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            if base.split(".")[0] not in PACKAGES:
                continue
            dots = "." * node.level
            for alias in node.names:
                # ``from a import b``: the module a.b if there is one, else a name in a.
                target = _known(f"{base}.{alias.name}", modules) or _known(base, modules) or base
                yield Import(path, node.lineno, module, target,
                             f"from {dots}{node.module or ''} import {alias.name}")


def violations(modules: dict[str, Path], sources: dict[str, str] | None = None) -> list[str]:
    found = []
    for module, path in modules.items():
        source = (sources or {}).get(module)
        here = layer_of(module)
        if here is None:
            continue  # reported by test_every_module_has_a_layer
        for imp in imports_of(module, path, modules, source):
            there = layer_of(imp.target)
            if there is None:
                found.append(f"{_where(imp)}: `{imp.written}` imports {imp.target}, which is in no layer")
            elif LAYER_INDEX[there] > LAYER_INDEX[here] and (module, imp.target) not in EXCEPTIONS:
                found.append(f"{_where(imp)}: `{imp.written}`: {module} ({here}) imports {imp.target} ({there}), "
                             f"a layer further out")
    return found


def _where(imp: Import) -> str:
    try:
        shown = imp.path.relative_to(ROOT)
    except ValueError:
        shown = imp.path
    return f"{shown}:{imp.line}"


MODULES = discover()


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in MODULES if layer_of(m) is None)
    assert not unplaced, ("modules in no layer (add them to LAYERS here and to docs/architecture.md): "
                          + ", ".join(unplaced))


def test_imports_point_inward():
    found = violations(MODULES)
    assert not found, ("imports that point outward (move the code, or list the import in EXCEPTIONS with "
                       "the reason):\n  " + "\n  ".join(found))


def test_no_stale_exceptions():
    every = {(imp.module, imp.target) for module, path in MODULES.items()
             for imp in imports_of(module, path, MODULES)}
    stale = sorted(pair for pair in EXCEPTIONS if pair not in every)
    assert not stale, f"exceptions no longer needed (delete them): {stale}"


def product_imports_of_the_rest(modules: dict[str, Path], sources: dict[str, str] | None = None) -> list[str]:
    """Imports from a product module of a module the product does not ship (the layers allow some:
    ``sunk.commands.web`` and ``sunk_dev`` are both entry points)."""
    return [f"{_where(imp)}: `{imp.written}`" for module, path in modules.items()
            if module.split(".")[0] in PRODUCT
            for imp in imports_of(module, path, modules, (sources or {}).get(module))
            if imp.target.split(".")[0] not in PRODUCT]


def test_the_product_imports_no_dev_tool_nor_benchmark():
    found = product_imports_of_the_rest(MODULES)
    assert not found, "the product imports what its wheel does not carry:\n  " + "\n  ".join(found)


def test_a_product_module_importing_the_dev_tools_is_reported():
    sources = {"sunk.commands.web": "from sunk_dev import fakeslurm\n",
               "sunk.commands.scheduler": "def f():\n    import benchmarks.scheduler\n"}
    assert sorted(product_imports_of_the_rest(MODULES, sources)) == [
        "sunk/commands/scheduler.py:2: `import benchmarks.scheduler`",
        "sunk/commands/web.py:1: `from sunk_dev import fakeslurm`"]
    assert not violations(MODULES, sources)  # the layers alone would let both through


def test_the_dev_tools_are_found_and_are_an_entry_point():
    assert MODULES["sunk_dev.fakeslurm"] == ROOT / "dev" / "sunk_dev" / "fakeslurm.py"
    assert layer_of("sunk_dev.cluster") == "entry points"
    assert not [m for m in MODULES if m.startswith(("sunk.dev", "sunk.slurm.fake"))]


def test_the_pure_layer_does_no_io():
    found = []
    for module, path in MODULES.items():
        if layer_of(module) != "pure":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {name}" for name in names
                      if name.split(".")[0] in IO_MODULES]
    assert not found, "the pure layer imports I/O:\n  " + "\n  ".join(found)


def test_the_docs_name_every_layer_and_prefix():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    missing = [f"layer {name!r}" for name, _ in LAYERS if name not in doc]
    for _, prefixes in LAYERS:
        for prefix in prefixes:
            if prefix in EXACT:
                continue
            top = SOURCE_ROOTS.get(prefix.split(".")[0], ROOT)
            base = top.joinpath(*prefix.split("."))
            path = base.relative_to(ROOT).as_posix()
            shown = f"`{path}/`" if base.is_dir() else f"`{path}.py`"
            if shown not in doc:
                missing.append(shown)
    assert not missing, f"docs/architecture.md does not name: {', '.join(missing)}"


# -- the checker itself -------------------------------------------------------------------------


@pytest.mark.parametrize(("module", "filename", "source", "expected"), [
    ("sunk.translate.extra", "sunk/translate/extra.py", "import sunk.kube.client\n", "sunk.kube.client (clients)"),
    ("sunk.translate.extra", "sunk/translate/extra.py", "from sunk.kube import client\n",
     "sunk.kube.client (clients)"),
    ("sunk.translate.extra", "sunk/translate/extra.py", "from sunk.slurm import connect\n", "sunk.slurm (clients)"),
    ("sunk.slurm.cache", "sunk/slurm/cache.py", "from ..controller import runtime\n",
     "sunk.controller.runtime (runtime)"),
    ("sunk.kube.store", "sunk/kube/store.py",
     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sunk.controller.manager import Manager\n",
     "sunk.controller.manager (runtime)"),
    ("sunk.controller.runtime", "sunk/controller/runtime.py", "def f():\n    from scheduler import reconciler\n",
     "scheduler.reconciler (reconcilers)"),
    ("scheduler.reconciler", "scheduler/reconciler.py", "from sunk.commands import scheduler\n",
     "sunk.commands.scheduler (entry points)"),
    ("sunk.hooks.api", "sunk/hooks/api.py", "from sunk.commands import web\n", "sunk.commands.web (entry points)"),
])
def test_an_outward_import_is_reported_with_both_layers(module, filename, source, expected):
    found = violations({module: ROOT / filename, **{m: p for m, p in MODULES.items() if m != module}},
                       sources={module: source})
    mine = [line for line in found if line.startswith(filename + ":")]
    assert len(mine) == 1 and expected in mine[0], found
    assert f"{module} ({layer_of(module)})" in mine[0]


def test_inward_and_sideways_imports_pass():
    sources = {
        "scheduler.reconciler": "from sunk.translate import podjob\nfrom sunk.model import names\n"
                                "from sunk.syncer import context\nfrom .decide import decide\n",
    }
    found = violations({"scheduler.reconciler": ROOT / "scheduler/reconciler.py",
                        **{m: p for m, p in MODULES.items() if m != "scheduler.reconciler"}}, sources=sources)
    assert not [line for line in found if line.startswith("scheduler/reconciler.py:")]


def test_layer_of_uses_the_longest_prefix_and_exact_entries():
    assert layer_of("sunk.commands.syncer") == "entry points"
    assert layer_of("sunk.syncer.kubeside") == "reconcilers"
    assert layer_of("sunk.model.slurm") == "pure"
    assert layer_of("sunk.slurm.rest") == "clients"
    assert layer_of("sunk") == "pure"
    assert layer_of("sunk.something_new") is None  # must be placed, not defaulted


def test_each_layer_is_named_by_folders():
    """One line per folder: a layer is a set of packages, never single modules, so where a new module is
    written says which layer it is in."""
    modules_named = []
    for _, prefixes in LAYERS:
        for prefix in prefixes:
            if prefix in EXACT:
                continue
            top = SOURCE_ROOTS.get(prefix.split(".")[0], ROOT)
            if not (top.joinpath(*prefix.split(".")) / "__init__.py").is_file():
                modules_named.append(prefix)
    assert not modules_named, f"LAYERS names modules, not folders: {modules_named}"
    loose = sorted(m for m, path in MODULES.items() if m.count(".") == 1 and m.split(".")[0] == "sunk"
                   and path.name != "__init__.py")
    assert not loose, f"modules directly in sunk/ belong in a layer's folder: {loose}"


def nesting_problems(layers: list[tuple[str, tuple[str, ...]]]) -> list[str]:
    """A folder listed twice, or inside a folder of a layer further out: importing it would run that
    folder's ``__init__``, an outward import the import check never sees."""
    where: dict[str, int] = {}
    problems = []
    for index, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if prefix in where:
                problems.append(f"{prefix} is in two layers")
            where[prefix] = index
    for prefix, index in where.items():
        parts = prefix.split(".")
        for cut in range(1, len(parts)):
            parent = ".".join(parts[:cut])
            if where.get(parent, -1) > index:
                problems.append(f"{prefix} ({layers[index][0]}) is inside {parent} "
                                f"({layers[where[parent]][0]}), a layer further out")
    return problems


def test_no_layer_folder_sits_inside_one_further_out():
    assert not nesting_problems(LAYERS)


def test_a_folder_inside_an_outer_one_or_in_two_layers_is_reported():
    bad = [("pure", ("sunk", "sunk.commands.values", "sunk.model")), ("clients", ("sunk.slurm", "sunk.model")),
           ("entry points", ("sunk.commands",))]
    assert nesting_problems(bad) == [
        "sunk.model is in two layers",
        "sunk.commands.values (pure) is inside sunk.commands (entry points), a layer further out"]
