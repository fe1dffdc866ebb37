"""The package's layers, checked on its import graph: data flows one way and nothing imports in a circle.

Every `import` counts, also those inside functions (a local import hides a cycle, it does not remove it).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "slurmx"

# Lowest first. A module may import its own layer and the layers below it, never one above.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "errors", "paths", "flags", "digest", "process"),  # vocabulary every layer may use
    ("config",),  # master configs and cluster profiles
    ("plan",),  # key -> points
    ("runtimes",),  # registries of how processes start, which engine serves, which tier offloads
    ("engines", "backends"),
    ("recipes", "inputs"),  # serving recipes -> ServingSpec; what commands read
    ("slurm",),  # the Slurm client: requests, sbatch, accounting
    ("store",),  # the results tree and the ledger: the floor every stage below stands on
    ("results",),  # what the node writes: artifacts -> result.json, gate
    ("collect",),  # what the login node reads: rows, repeats, compare, plots, report (never node/)
    ("history",),  # the index of every result across sweeps and trees (a database), series and their changes
    ("node",),  # the job body
    ("advise",),  # a point's trace through a model of the engine's prefix cache (reads node/trace.py's rows)
    ("submit", "status"),  # stages run from a login node
    ("upstream",),  # InferenceX's scripts captured as the oracle, compared with slurmx's resolved points
    ("commands", "cli", "__main__"),  # argument parsing and printing
)
LAYER_OF = {name: index for index, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    assert top in LAYER_OF, f"{module}: not in any layer of tests/test_architecture.py"
    return LAYER_OF[top]


def imports_of(path: Path, module: str) -> set[str]:
    """slurmx modules `path` imports (a `from slurmx.x import y` counts y when y is a module)."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("slurmx"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            if not base.startswith("slurmx"):
                continue
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in SRC.rglob("*.py")}
    return {name: {m for m in imports_of(path, name) if m in modules and m != name} for name, path in modules.items()}


def test_no_module_imports_a_higher_layer() -> None:
    upward = [
        f"{source} ({LAYERS[layer(source)][0]}) imports {target} ({LAYERS[layer(target)][0]})"
        for source, targets in graph().items()
        for target in targets
        if layer(target) > layer(source)
    ]
    assert not upward, "\n".join(sorted(upward))


def test_the_import_graph_has_no_cycle() -> None:
    edges = graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(edges[node]):
            if state.get(target) == 1:
                cycles.append(stack[stack.index(target) :] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_the_two_stages_of_results_never_import_each_other() -> None:
    """collect/ reads what node/ and results/ wrote; results/ and node/ never read a collection."""
    crossing = [
        f"{source} imports {target}"
        for source, targets in graph().items()
        for target in targets
        if source.split(".")[1:2] in (["node"], ["results"]) and target.split(".")[1:2] == ["collect"]
    ]
    assert not crossing, "\n".join(sorted(crossing))


def test_the_checker_sees_a_planted_upward_import(tmp_path: Path) -> None:
    planted = tmp_path / "slurmx" / "config" / "bad.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("def f():\n    from slurmx.node import body\n    from ..store import tree\n")
    found = imports_of(planted, "slurmx.config.bad")
    assert {"slurmx.node.body", "slurmx.store.tree"} <= found
    assert layer("slurmx.node.body") > layer("slurmx.config.bad")
