"""Each engine is known in its engine module: code (not comments or docstrings) naming it elsewhere is confined to
the registries and the backends that are the engine's own (vLLM's CPU offload connector, SGLang's HiCache,
TensorRT-LLM's native host pool). `python tests/test_engine_confinement.py [ENGINE]` lists the files that name it."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "slurmx"


@dataclass(frozen=True)
class Naming:
    """What names an engine in a word of code: a substring (a name no other word holds), or a whole token where
    the name is also a part of ordinary words ('atom' of 'atomic', 'trt' of a longer identifier)."""

    substrings: tuple[str, ...] = ()
    tokens: tuple[str, ...] = ()

    def names(self, word: str) -> bool:
        lower = word.lower()
        return any(s in lower for s in self.substrings) or not self.tokens_in(word).isdisjoint(self.tokens)

    @staticmethod
    def tokens_in(word: str) -> set[str]:
        """The word's identifier parts: split at every non-alphanumeric and at camelCase (AtomEngine: atom, engine)."""
        return {t.lower() for t in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+", word)}


@dataclass(frozen=True)
class Confinement:
    engine: str
    naming: Naming
    allowed: frozenset[str]


REGISTRIES = {"engines/__init__.py"}  # the engine registry registers each engine
CONFINEMENTS = [
    Confinement("vllm", Naming(substrings=("vllm",)), frozenset({
        *REGISTRIES,
        "engines/vllm.py",
        "backends/__init__.py",  # the backend registry registers vllm_simple
        "backends/vllm_simple.py",  # vLLM's own CPU offload connector
        "advise/seed_models.py",  # each KV figure names its source, vLLM's docs among them (strings only)
    })),
    # SGLang's image is /sgl-workspace, its kernels sgl_kernel, its env SGL_*; HiCache is its own host tier
    Confinement("sglang", Naming(substrings=("sglang", "hicache"), tokens=("sgl",)), frozenset({
        *REGISTRIES,
        "engines/sglang.py",
        "backends/__init__.py",  # the backend registry registers hicache
        "backends/hicache.py",  # SGLang's own host-memory tier
    })),
    Confinement("trtllm", Naming(substrings=("trtllm", "tensorrt"), tokens=("trt",)), frozenset({
        *REGISTRIES,
        "engines/trtllm.py",
        "backends/native.py",  # TensorRT-LLM's own host pool (kv-offload-backend: native, refused for other engines)
    })),
    Confinement("atom", Naming(tokens=("atom",)), frozenset({*REGISTRIES, "engines/atom.py"})),
]  # fmt: skip
BY_ENGINE = {c.engine: c for c in CONFINEMENTS}


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


def naming(naming: Naming, root: Path = SRC) -> list[str]:
    return sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if any(naming.names(w) for w in code_words(path.read_text(encoding="utf-8")))
    )


@pytest.mark.parametrize("confinement", CONFINEMENTS, ids=lambda c: c.engine)
def test_an_engine_is_named_in_code_only_where_allowed(confinement: Confinement) -> None:
    named = naming(confinement.naming)
    outside = [name for name in named if name not in confinement.allowed]
    assert not outside, f"{confinement.engine} named in code outside its modules and the registries: {outside}"
    # an allowance no file needs any more is dropped, so the list stays the closing note's list
    assert sorted(confinement.allowed) == named


def test_the_lister_sees_code_and_skips_comments_and_docstrings(tmp_path: Path) -> None:
    (tmp_path / "quiet.py").write_text('"""vLLM here is prose."""\n# vllm in a comment\nX = 1\n')
    (tmp_path / "loud.py").write_text('"""Fine."""\nNAME = "vllm:prefix_cache_hits"\n')
    (tmp_path / "imports.py").write_text("from slurmx.engines.vllm import ENGINE\n")
    assert naming(BY_ENGINE["vllm"].naming, tmp_path) == ["imports.py", "loud.py"]


def test_the_lister_matches_token_names_as_whole_identifiers(tmp_path: Path) -> None:
    (tmp_path / "atomic.py").write_text("import atomicwrites\nATOMIC = True\ndef anatomy(atoms): ...\n")
    (tmp_path / "prose.py").write_text('"""ATOM serves here."""\n# atom, sgl, trt in a comment\n')
    (tmp_path / "constant.py").write_text("ATOM_ENGINE = 1\n")
    (tmp_path / "camel.py").write_text("class AtomServer: ...\n")
    (tmp_path / "dotted.py").write_text('MODULE = "atom.entrypoints.openai_server"\n')
    (tmp_path / "image.py").write_text('ROOT = "/sgl-workspace/"\n')
    (tmp_path / "suffix.py").write_text('TAG = "_trt"\n')
    (tmp_path / "words.py").write_text('TEXT = "a strtok of trtx, an sglx"\n')
    assert naming(BY_ENGINE["atom"].naming, tmp_path) == ["camel.py", "constant.py", "dotted.py"]
    assert naming(BY_ENGINE["sglang"].naming, tmp_path) == ["image.py"]
    assert naming(BY_ENGINE["trtllm"].naming, tmp_path) == ["suffix.py"]


if __name__ == "__main__":
    for confinement in CONFINEMENTS if len(sys.argv) < 2 else [BY_ENGINE[sys.argv[1]]]:
        print("\n".join(f"{confinement.engine}: {name}" for name in naming(confinement.naming)))
