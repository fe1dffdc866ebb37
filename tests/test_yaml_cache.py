"""The parsed-YAML cache gives what a fresh parse gives (values, every line, warnings), and any edit, a torn
entry or an unwritable cache only costs a parse: on a master with anchors, a merge and a duplicate key, and on
the whole `slurmx plan` process run twice from a fresh directory."""

from __future__ import annotations

import marshal
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from slurmx.config import yamlcache, yamlfile
from slurmx.config.yamlfile import LineIndex, load_yaml

ROOT = Path(__file__).resolve().parents[1]

MASTER = """\
defaults: &d
  image: vllm/vllm-openai:v0.11.0
  precision: fp4
k1:
  <<: *d
  model: m
  model: n
  search-space:
    - {tp: 4, conc-list: [1, 8]}
    - tp: 8
      conc-list: [16]
k2: *d
"""
# The line of each path as counted by hand in MASTER (1-based).
LINES = {
    ("defaults",): 1,
    ("defaults", "precision"): 3,
    ("k1",): 4,
    ("k1", "model"): 7,  # the duplicate: the last one wins, with its line
    ("k1", "search-space"): 8,
    ("k1", "search-space", 0): 9,
    ("k1", "search-space", 0, "conc-list"): 9,
    ("k1", "search-space", 1, "tp"): 10,
    ("k1", "search-space", 1, "conc-list", 0): 11,
    ("k2",): 12,
}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("SLURMX_CACHE_DIR", str(root))
    return root


def entries(root: Path) -> list[Path]:
    return sorted((root / "yaml").glob("*.marshal")) if (root / "yaml").is_dir() else []


def lines(data: Any, index: LineIndex) -> dict[tuple[Any, ...], int | None]:
    return {path: index.line_of(data, path) for path in LINES}


def test_a_second_load_reads_the_cache_and_gives_the_same_values_lines_and_warnings(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(MASTER, encoding="utf-8")
    first, first_index = load_yaml(path, duplicates="warn")
    assert len(entries(cache)) == 1
    assert lines(first, first_index) == LINES
    with monkeypatch.context() as m:
        m.setattr(yamlfile, "_parse", lambda *_: pytest.fail("parsed, not read from the cache"))
        again, index = load_yaml(path, duplicates="warn")
    assert again == first
    assert lines(again, index) == LINES
    assert index.warnings == [f"{path}:7: model: duplicate key (also at line 6); the last one wins"]
    assert again["k2"] is again["defaults"]  # an alias stays one object, as a fresh parse gives it
    assert again["k1"]["search-space"][0] == {"tp": 4, "conc-list": [1, 8]}


def test_an_edit_that_keeps_size_and_time_parses_anew(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(MASTER, encoding="utf-8")
    load_yaml(path, duplicates="warn")
    stat = path.stat()
    path.write_text(MASTER.replace("tp: 8", "tp: 2"), encoding="utf-8")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size
    data, _ = load_yaml(path, duplicates="warn")
    assert data["k1"]["search-space"][1]["tp"] == 2
    assert len(entries(cache)) == 1  # one entry per file, replaced: the cache does not grow with edits


def test_a_torn_or_foreign_entry_parses_anew_and_is_replaced(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(MASTER, encoding="utf-8")
    good, _ = load_yaml(path, duplicates="warn")
    (entry,) = entries(cache)
    blob = entry.read_bytes()
    entry.write_bytes(blob[: len(blob) // 2])  # the digest matches, the payload is cut
    data, index = load_yaml(path, duplicates="warn")
    assert data == good and lines(data, index) == LINES
    assert entry.read_bytes() == blob


def test_each_load_mode_and_each_spelling_of_the_path_has_its_own_entry(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(MASTER.replace("  model: n\n", ""), encoding="utf-8")
    load_yaml(path)
    load_yaml(path, duplicates="warn")
    monkeypatch.chdir(tmp_path)
    _, index = load_yaml(Path("m.yaml"), duplicates="warn")
    assert len(entries(cache)) == 3


def test_the_warning_names_the_path_as_given_when_read_from_the_cache(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "m.yaml").write_text(MASTER, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    load_yaml(tmp_path / "m.yaml", duplicates="warn")
    load_yaml(Path("m.yaml"), duplicates="warn")
    with monkeypatch.context() as m:
        m.setattr(yamlfile, "_parse", lambda *_: pytest.fail("parsed, not read from the cache"))
        _, index = load_yaml(Path("m.yaml"), duplicates="warn")
    assert index.warnings == ["m.yaml:7: model: duplicate key (also at line 6); the last one wins"]


def test_what_marshal_cannot_hold_and_what_fails_to_parse_is_never_cached(tmp_path: Path, cache: Path) -> None:
    stamp = tmp_path / "stamp.yaml"
    stamp.write_text("when: 2024-03-05\n", encoding="utf-8")
    assert str(load_yaml(stamp)[0]["when"]) == "2024-03-05"
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\n", encoding="utf-8")
    for _ in range(2):
        with pytest.raises(Exception, match="YAML syntax error"):
            load_yaml(broken)
    assert entries(cache) == []


def test_an_unwritable_cache_only_costs_the_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("", encoding="utf-8")
    monkeypatch.setenv("SLURMX_CACHE_DIR", str(blocker))
    path = tmp_path / "m.yaml"
    path.write_text(MASTER, encoding="utf-8")
    for _ in range(2):
        data, index = load_yaml(path, duplicates="warn")
        assert lines(data, index) == LINES
    monkeypatch.setenv("SLURMX_CACHE_DIR", "")  # empty: no cache at all
    assert load_yaml(path, duplicates="warn")[0] == data


# configs/local-master.yaml's key with one bad value, on line 14
BAD_MASTER = """\
tiny-fp32-local-vllm-agentic-lmcache:
  image: local-venv
  model: local/tiny-llama
  model-prefix: tiny
  runner: cluster:local
  precision: fp32
  framework: vllm
  multinode: false
  scenarios:
    agentic-coding:
    - dram-utilization: 1.0
      search-space:
      - { tp: 1, kv-offloading: none, conc-list: [2, 4] }
      - { tp: four, kv-offloading: none, conc-list: [2, 4] }
"""


def test_the_whole_process_twice_gives_the_same_plan_and_the_same_located_error(tmp_path: Path, fixtures: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "SLURMX_CACHE_DIR": str(tmp_path / "cache")}
    args = ["--config", str(fixtures / "nvidia-master.yaml"), "--clusters", str(fixtures / "runners.yaml")]
    work = tmp_path / "work"
    work.mkdir()
    runs = [
        subprocess.run([sys.executable, "-m", "slurmx", "plan", "--all", "--json", *args], cwd=work, env=env,
                       capture_output=True, text=True, check=True)
        for _ in range(2)
    ]  # fmt: skip
    assert entries(tmp_path / "cache"), "the first run left no cache entry"
    assert runs[0].stdout == runs[1].stdout and runs[0].stdout.startswith("[")
    bad = work / "bad-master.yaml"
    bad.write_text(BAD_MASTER, encoding="utf-8")
    errors = [
        subprocess.run([sys.executable, "-m", "slurmx", "plan", "--all", "--config", str(bad), "--clusters",
                        str(ROOT / "configs" / "clusters.yaml")], cwd=work, env=env, capture_output=True, text=True)
        for _ in range(2)
    ]  # fmt: skip
    assert [e.returncode for e in errors] == [2, 2]
    assert errors[0].stderr == errors[1].stderr
    assert f"{bad}:14: " in errors[0].stderr and ".tp:" in errors[0].stderr  # line 14 holds `tp: four`
    assert len(errors[0].stderr.strip().splitlines()) == 1


def test_the_cache_directory_is_private_to_its_user(tmp_path: Path, cache: Path) -> None:
    """A parsed config can hold a site's env values and paths: the directory is made 0700, as the digest files'
    own mkstemp mode (0600) already is."""
    path = tmp_path / "m.yaml"
    path.write_text(MASTER, encoding="utf-8")
    old = os.umask(0)  # the mode asked for, not the one a umask leaves of it
    try:
        load_yaml(path, duplicates="warn")
    finally:
        os.umask(old)
    assert (cache / "yaml").stat().st_mode & 0o777 == 0o700
    (entry,) = entries(cache)
    assert entry.stat().st_mode & 0o777 == 0o600


def test_a_write_that_fails_leaves_no_temporary_file_and_the_parse_still_answers(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(MASTER, encoding="utf-8")

    def full_disk(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    data, index = load_yaml(path, duplicates="warn")
    assert lines(data, index) == LINES
    assert list((cache / "yaml").iterdir()) == []  # neither an entry nor the temporary file it was written to


def test_an_entry_of_another_shape_with_the_right_digest_parses_anew(tmp_path: Path, cache: Path) -> None:
    """A foreign file in the entry's place (a marshalled list of three, say) is not taken for a parse."""
    path = tmp_path / "m.yaml"
    path.write_text(MASTER, encoding="utf-8")
    good, _ = load_yaml(path, duplicates="warn")
    (entry,) = entries(cache)
    blob = entry.read_bytes()
    entry.write_bytes(blob[:20] + marshal.dumps([1, 2, 3]))
    data, index = load_yaml(path, duplicates="warn")
    assert data == good and lines(data, index) == LINES
    assert entry.read_bytes() == blob  # replaced by the new parse


def test_an_entry_of_another_builder_is_not_read(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slurmx whose YAML builder (or PyYAML) differs must not answer from an entry the other one parsed: the same
    bytes parse anew into an entry of their own."""
    path = tmp_path / "m.yaml"
    path.write_text(MASTER, encoding="utf-8")
    load_yaml(path, duplicates="warn")
    parses: list[Path] = []
    real = yamlfile._parse

    def counted(*args: Any) -> Any:
        parses.append(args[0])
        return real(*args)

    monkeypatch.setattr(yamlfile, "_parse", counted)
    monkeypatch.setattr(yamlcache, "_version", lambda: b"another builder")
    data, index = load_yaml(path, duplicates="warn")
    assert parses == [path] and lines(data, index) == LINES
    assert len(entries(cache)) == 2
