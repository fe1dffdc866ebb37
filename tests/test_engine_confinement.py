"""vLLM is known in engines/vllm.py: code (not comments or docstrings) naming it elsewhere is confined to the
registries and the backend that is vLLM's own connector. `python tests/test_engine_confinement.py` lists the
files that name it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "slurmx"
ALLOWED = {
    "engines/vllm.py",
    "engines/__init__.py",  # the registry registers it
    "backends/__init__.py",  # the registry registers vllm_simple
    "backends/vllm_simple.py",  # vLLM's own CPU offload connector
    "advise/seed_models.py",  # each KV figure names its source, vLLM's docs among them (strings only)
}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def code_words(source: str) -> Iterator[str]:
    """Every name and string literal of the code (comments never reach the tree; docstrings are skipped)."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.value
        elif isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, ast.alias):
            yield from (node.name, node.asname or "")
        elif isinstance(node, ast.ImportFrom):
            yield node.module or ""
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, ast.arg):
            yield node.arg
        elif isinstance(node, ast.keyword):
            yield node.arg or ""


def naming(word: str, root: Path = SRC) -> list[str]:
    return sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if any(word in w.lower() for w in code_words(path.read_text(encoding="utf-8")))
    )


def test_vllm_is_named_in_code_only_where_allowed() -> None:
    outside = [name for name in naming("vllm") if name not in ALLOWED]
    assert not outside, f"vLLM named in code outside engines/vllm.py and the registries: {outside}"


def test_the_lister_sees_code_and_skips_comments_and_docstrings(tmp_path: Path) -> None:
    (tmp_path / "quiet.py").write_text('"""vLLM here is prose."""\n# vllm in a comment\nX = 1\n')
    (tmp_path / "loud.py").write_text('"""Fine."""\nNAME = "vllm:prefix_cache_hits"\n')
    (tmp_path / "imports.py").write_text("from slurmx.engines.vllm import ENGINE\n")
    assert naming("vllm", tmp_path) == ["imports.py", "loud.py"]


if __name__ == "__main__":
    print("\n".join(naming("vllm")))
