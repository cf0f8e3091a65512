"""The package's layers (docs/architecture.md › Layers), checked by reading every module's imports (ast):

- a module imports only modules on its own floor or below;
- module-level imports form no cycle;
- outside the CLI no function imports a bertkit module (a lazy import is how a cycle gets dodged; the CLI imports
  its jobs lazily so that `bertkit --help` starts fast);
- a job calls another job only from `demo`, `ablate` and `glue` (shared library code lives below the jobs);
- `tasks/` and `train/` share a floor and import nothing from each other (the loop reads objectives through its
  Protocols).

Importing `bertkit.a.b` runs `bertkit/a/__init__.py` first, so an import also counts as one of every package above
its target (other than the importer's own packages).

The checker is tested on small made-up packages first, so a green run means the rules were applied.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bertkit"

# Lowest floor first. A module's floor is the one of its longest matching prefix; "=name" matches only that module
# (a package's __init__: the run package's is on the base floor, so the durable-file primitives below it stay light).
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("base: errors, paths, config, recipes, durable files", (
        "=bertkit", "bertkit.errors", "bertkit.paths", "bertkit.config", "bertkit.recipes", "=bertkit.run",
        "bertkit.run.files", "bertkit.run.faults", "bertkit.run.lock")),
    ("modules, text, measures", ("bertkit.nn", "bertkit.text", "bertkit.hardware", "bertkit.metrics", "=bertkit.deploy",
                                 "bertkit.deploy.manifest", "bertkit.deploy.runtime")),
    ("run directories", ("bertkit.run",)),
    ("library", ("bertkit.inference", "bertkit.embedding", "bertkit.arrays", "bertkit.generation",
                 "bertkit.translation", "bertkit.probing", "bertkit.index", "bertkit.index_codec",
                 "bertkit.index_files", "bertkit.ablation",
                 "bertkit.interop",
                 "bertkit.deploy")),
    ("training", ("bertkit.tasks", "bertkit.train")),
    ("jobs", ("bertkit.jobs",)),
    ("cli", ("bertkit.cli", "bertkit.__main__")),
]
LAZY_IMPORTS_ALLOWED = ("bertkit.cli",)
JOBS_THAT_CALL_JOBS = ("bertkit.jobs.demo", "bertkit.jobs.ablate", "bertkit.jobs.glue")
APART = (("bertkit.tasks", "bertkit.train"),)  # same floor, no imports either way


def module_sources(root: Path) -> dict[str, tuple[str, bool]]:
    """{dotted module name: (source, is a package __init__)} for every .py file under `root`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts.pop()
        found[".".join(parts)] = (path.read_text(encoding="utf-8"), package)
    return found


def imports(name: str, source: str, package: bool, known: set[str]) -> list[tuple[str, bool, int]]:
    """(imported bertkit module, inside a function, line) for every import statement of one module. `from a import
    b` names module a.b when that is a module, else a."""

    class Visitor(ast.NodeVisitor):
        def __init__(self):
            self.depth, self.found = 0, []

        def visit_FunctionDef(self, node):
            self.depth += 1
            self.generic_visit(node)
            self.depth -= 1

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_Import(self, node):
            for alias in node.names:
                self.found.append((alias.name, self.depth > 0, node.lineno))

        def visit_ImportFrom(self, node):
            if node.level:  # relative: from the module's package
                base = name.split(".") if package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                self.found.append((full if full in known else target, self.depth > 0, node.lineno))

    visitor = Visitor()
    visitor.visit(ast.parse(source))
    found = []
    for target, inner, line in visitor.found:
        if not target.startswith("bertkit."):
            continue
        found.append((target, inner, line))
        parts = target.split(".")
        for end in range(2, len(parts)):  # the packages above the target run first
            package = ".".join(parts[:end])
            if package in known and not (name == package or name.startswith(package + ".")):
                found.append((package, inner, line))
    return found


def floor_of(module: str) -> int | None:
    """The floor index of a module (longest matching prefix), None when no floor names it."""
    best, best_len = None, -1
    for index, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            exact = prefix.startswith("=")
            prefix = prefix.lstrip("=")
            inside = module.startswith(prefix + ".") and not exact
            if (module == prefix or inside) and len(prefix) + exact > best_len:
                best, best_len = index, len(prefix) + exact
    return best


def violations(sources: dict[str, tuple[str, bool]]) -> list[str]:
    """Every broken rule, one line each."""
    known = set(sources)
    problems, graph = [], {}
    for name, (source, package) in sources.items():
        floor = floor_of(name)
        if floor is None:
            problems.append(f"{name}: on no floor (add it to FLOORS in tests/test_layers.py and to the docs)")
            continue
        graph[name] = set()
        for target, inner, line in imports(name, source, package, known):
            target_floor = floor_of(target)
            if target_floor is not None and target_floor > floor:
                problems.append(f"{name}:{line}: imports {target} from a higher floor ({FLOORS[target_floor][0]})")
            if inner and not name.startswith(LAZY_IMPORTS_ALLOWED):
                problems.append(f"{name}:{line}: imports {target} inside a function")
            if (name.startswith("bertkit.jobs.") and (target == "bertkit.jobs" or target.startswith("bertkit.jobs."))
                    and name not in JOBS_THAT_CALL_JOBS and target != name):
                problems.append(f"{name}:{line}: a job imports another job ({target}); move shared code down")
            for a, b in APART:
                for source_pkg, target_pkg in ((a, b), (b, a)):
                    into = target == target_pkg or target.startswith(target_pkg + ".")
                    if name.startswith(source_pkg + ".") and into:
                        problems.append(f"{name}:{line}: imports {target}; {a} and {b} stay apart")
            if not inner and target in known and target != name:
                graph[name].add(target)
    problems += [f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(graph)]
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One example cycle per strongly connected group of modules (Tarjan), as a closed path."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    found = []
    for group in groups:  # walk inside the group from its first member back to it
        members, start = set(group), sorted(group)[0]
        path, seen = [start], {start}
        while True:
            nxt = sorted(graph[path[-1]] & members)
            back = [n for n in nxt if n == start]
            if back and len(path) > 1:
                found.append(path + [start])
                break
            step = next((n for n in nxt if n not in seen), None)
            if step is None:
                found.append(path + [start])
                break
            path.append(step)
            seen.add(step)
    return found


def _fake(**modules: str) -> dict[str, tuple[str, bool]]:
    return {name.replace("__", "."): (source, False) for name, source in modules.items()}


def test_the_checker_finds_an_import_from_a_higher_floor():
    found = violations(_fake(bertkit__nn__block="from bertkit.train.loop import train\n", bertkit__train__loop=""))
    assert found == ["bertkit.nn.block:1: imports bertkit.train.loop from a higher floor (training)"]


def test_the_checker_finds_a_cycle_on_one_floor():
    found = violations(_fake(bertkit__inference="import bertkit.embedding\n",
                             bertkit__embedding="from bertkit.inference import run_sorted\n"))
    assert found == ["import cycle: bertkit.embedding -> bertkit.inference -> bertkit.embedding"]


def test_the_checker_finds_an_import_hidden_in_a_function():
    source = "def load():\n    from bertkit.run.directory import load_run\n    return load_run\n"
    found = violations(_fake(bertkit__translation=source, bertkit__run__directory=""))
    assert found == ["bertkit.translation:2: imports bertkit.run.directory inside a function"]
    # ... which the CLI may do (lazy imports keep `bertkit --help` fast)
    assert violations(_fake(bertkit__cli__pretrain=source, bertkit__run__directory="")) == []


def test_the_checker_finds_a_job_calling_a_job_and_a_module_on_no_floor():
    found = violations(_fake(bertkit__jobs__probe="from bertkit.jobs.finetune import hold_out\n",
                             bertkit__jobs__finetune="", bertkit__jobs__demo="from bertkit.jobs import finetune\n",
                             bertkit__elsewhere=""))
    assert found == ["bertkit.jobs.probe:1: a job imports another job (bertkit.jobs.finetune); move shared code down",
                     "bertkit.elsewhere: on no floor (add it to FLOORS in tests/test_layers.py and to the docs)"]


def test_the_checker_counts_the_packages_above_a_target():
    """`from bertkit.interop.hf import …` runs `bertkit/interop/__init__.py` first: a higher floor imported there is
    found on the package's own line, and every import through the package counts the package too."""
    sources = {"bertkit.interop": ("import bertkit.jobs.embed\n", True), "bertkit.interop.hf": ("", False),
               "bertkit.jobs": ("", True), "bertkit.jobs.embed": ("", False),
               "bertkit.inference": ("from bertkit.interop.hf import copy_tokenizer\n", False),
               "bertkit.run": ("", True), "bertkit.run.files": ("", False),
               "bertkit.text.cache": ("from bertkit.run.files import atomic_dir\n", False), "bertkit.text": ("", True)}
    found = violations(sources)
    assert found == ["bertkit.interop:1: imports bertkit.jobs.embed from a higher floor (jobs)",
                     "bertkit.interop:1: imports bertkit.jobs from a higher floor (jobs)"]
    # text may use run.files: the run package's __init__ (docstring only) sits on the base floor
    assert imports("bertkit.inference", *sources["bertkit.inference"], set(sources))[-1] == (
        "bertkit.interop", False, 1)


def test_the_checker_keeps_tasks_and_train_apart():
    found = violations(_fake(bertkit__train__loop="from bertkit.tasks.mlm import MLMObjective\n",
                             bertkit__tasks__mlm=""))
    assert found == ["bertkit.train.loop:1: imports bertkit.tasks.mlm; bertkit.tasks and bertkit.train stay apart"]


def test_relative_imports_resolve_from_the_package():
    sources = {"bertkit.nn": ("from .train import loop\n", True), "bertkit.nn.train": ("", False)}
    assert imports("bertkit.nn", *sources["bertkit.nn"], set(sources)) == [("bertkit.nn.train", False, 1)]


def test_the_package_keeps_its_layers():
    sources = module_sources(PACKAGE)
    assert len(sources) > 50  # the walk found the package
    problems = violations(sources)
    if problems:
        pytest.fail("the package breaks its layers:\n" + "\n".join(problems))


def test_no_function_is_over_80_lines_and_no_module_over_600():
    """Small modules with one job each, and functions that read as steps (docs/architecture.md)."""
    long = []
    for name, (source, _) in module_sources(PACKAGE).items():
        lines = source.count("\n") + 1
        if lines > 600:
            long.append(f"{name}: {lines} lines (at most ~600)")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                long.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines (at most 80)")
    assert not long, "split these into steps with names that say what they do:\n" + "\n".join(long)


def test_the_run_layer_does_not_read_tokenizers():
    """Issue 36: run directories know the tokenizer's file, the text layer reads it (`load_run_tokenizer`)."""
    for path in (PACKAGE / "run").glob("*.py"):
        assert "bertkit.text.tokenizer" not in path.read_text(encoding="utf-8"), path.name
