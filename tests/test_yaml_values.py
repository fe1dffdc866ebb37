"""slurmx's line-keeping YAML loader gives exactly the values PyYAML's own safe_load gives: on every config and
recipe of the repository, InferenceX's masters and runners, and a file of the scalar kinds and aliases."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import yaml

from slurmx.config import yamlfile
from slurmx.config.yamlfile import load_yaml
from slurmx.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]

KINDS = """\
base: &base
  ints: [0, 7, -3, +4, 0x1F, 017, 1_000, 0b101]
  floats: [1.5, -0.25, 1e3, .inf, -.inf, 6.02e+23]
  bools: [true, false, True, FALSE, yes, no, on, off]
  nulls: [~, null, Null, NULL]
  strings: ["007", '1.0', "true", plain text, 1.2.3, "", !!str 12]
  tagged: [!!int "12", !!float "3", !!bool "true", !!null ""]
  when: 2024-03-05
  stamp: 2024-03-05T06:07:08Z
  same: [1, 1, true, true, 1.0]
  clash: [1, !!float 1, 2, !!str 2]
copy: *base
merged:
  <<: *base
  ints: [1]
"""


def same(a: object, b: object) -> bool:
    """Equal and of the same types all the way down (1 == 1.0 == True would hide a wrong constructor)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def repository_files() -> list[Path]:
    return sorted([*(ROOT / "configs").glob("*.yaml"), *(ROOT / "jobs").glob("*.yaml")])


def test_the_scalar_kinds_anchors_and_merges_load_as_pyyaml_loads_them(tmp_path: Path) -> None:
    path = tmp_path / "kinds.yaml"
    path.write_text(KINDS, encoding="utf-8")
    data, _ = load_yaml(path)
    assert same(data, yaml.safe_load(KINDS))
    # what PyYAML's YAML 1.1 rules say, written out: a wrong tag or constructor shows here
    assert data["base"]["ints"] == [0, 7, -3, 4, 31, 15, 1000, 5]
    assert data["base"]["bools"] == [True, False, True, False, True, False, True, False]
    assert data["base"]["nulls"] == [None, None, None, None]
    assert data["base"]["strings"] == ["007", "1.0", "true", "plain text", "1.2.3", "", "12"]
    assert same(data["base"]["tagged"], [12, 3.0, True, None])
    assert same(data["base"]["clash"], [1, 1.0, 2, "2"])  # one text, two tags: two values
    assert data["base"]["when"] == datetime.date(2024, 3, 5)
    assert data["base"]["stamp"] == datetime.datetime(2024, 3, 5, 6, 7, 8, tzinfo=datetime.UTC)
    assert data["copy"] is data["base"]  # an alias is the same object, as in PyYAML
    assert data["merged"]["ints"] == [1] and data["merged"]["floats"][0] == 1.5


@pytest.mark.parametrize("path", repository_files(), ids=lambda p: p.name)
def test_every_config_and_recipe_loads_as_pyyaml_loads_it(path: Path) -> None:
    assert same(load_yaml(path, duplicates="warn")[0], yaml.safe_load(path.read_text(encoding="utf-8")))


def test_inferencex_masters_and_runners_load_as_pyyaml_loads_them(fixtures: Path) -> None:
    for name in ("nvidia-master.yaml", "amd-master.yaml", "runners.yaml"):
        path = fixtures / name
        assert same(load_yaml(path, duplicates="warn")[0], yaml.safe_load(path.read_text(encoding="utf-8"))), name


def test_a_duplicate_key_is_an_error_naming_file_line_and_key_unless_warned_about(tmp_path: Path) -> None:
    """The default mode (recipes, InferenceX's srt files) refuses a duplicate at the second one's line; "warn" (the
    masters and cluster profiles) keeps PyYAML's answer, the last value, and names both lines. A key a `<<` merge
    brought in and the mapping overrides is no duplicate in either mode."""
    text = "base: &b {x: 1, y: 0}\nm:\n  <<: *b\n  x: 2\n  z: 3\n  z: 4\n"
    path = tmp_path / "dup.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_yaml(path)
    error = caught.value
    assert (error.path, error.line, error.field, error.message) == (path, 6, "z", "duplicate key")
    assert str(error) == f"{path}:6: z: duplicate key"
    data, index = load_yaml(path, duplicates="warn")
    assert same(data, yaml.safe_load(text))
    assert data["m"] == {"x": 2, "y": 0, "z": 4}
    assert index.warnings == [f"{path}:6: z: duplicate key (also at line 5); the last one wins"]
    plain = tmp_path / "plain.yaml"
    plain.write_text("a: 1\nb:\n  c: 2\n  c: 3\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_yaml(plain)
    assert str(caught.value) == f"{plain}:4: c: duplicate key"
    overridden = tmp_path / "override.yaml"
    overridden.write_text(text.replace("  z: 4\n", ""), encoding="utf-8")
    assert load_yaml(overridden)[0]["m"] == {"x": 2, "y": 0, "z": 3}


def test_an_alias_of_a_merged_mapping_is_the_same_object_as_pyyaml_gives_it(tmp_path: Path) -> None:
    text = "base: &b {x: 1}\nm: &m\n  <<: *b\n  y: 2\ncopy: *m\n"
    path = tmp_path / "alias.yaml"
    path.write_text(text, encoding="utf-8")
    theirs = yaml.safe_load(text)
    assert theirs["copy"] is theirs["m"]  # PyYAML's own answer: one object
    data, index = load_yaml(path)
    assert same(data, theirs)
    assert data["copy"] is data["m"]
    assert index.line_of(data, ("copy", "y")) == 4  # the alias reads the lines of the mapping it names
    listed = tmp_path / "list.yaml"
    listed.write_text("l: &l [1, 2]\nm: *l\n", encoding="utf-8")
    theirs = yaml.safe_load(listed.read_text(encoding="utf-8"))
    data = load_yaml(listed)[0]
    assert theirs["m"] is theirs["l"] and data["m"] is data["l"] and data == theirs


# Each with the line of its problem counted by hand: the stream's end after an open `[` is line 2.
SYNTAX = [
    ("a: [1, 2\n", 2), ("a:\n\tb: 1\n", 2), ("a: 1\n---\nb: 2\n", 2), ("a: 1\n  b: 2\n", 2), ("k: {x: 1\ny: 2\n", 2),
    ("a: *nope\n", 1), ("a:\n  b: !foo 1\n", 2), ("a: !!python/name:os.system x\n", 1),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "line"),
    SYNTAX,
    ids=[
        "open flow",
        "tab",
        "two documents",
        "bad indent",
        "unclosed mapping",
        "unknown alias",
        "unknown tag",
        "unsafe tag",
    ],
)
def test_a_syntax_error_is_pyyamls_problem_at_its_line(tmp_path: Path, text: str, line: int) -> None:
    """The problem and line PyYAML's own loader reports (libyaml's, where PyYAML has it, as slurmx loads)."""
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(yaml.MarkedYAMLError) as theirs:
        yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    mark = theirs.value.problem_mark or theirs.value.context_mark
    assert mark is not None and mark.line + 1 == line
    problem = (theirs.value.problem or theirs.value.context or "").strip()
    with pytest.raises(ConfigError) as caught:
        load_yaml(path)
    assert (caught.value.path, caught.value.line, caught.value.field) == (path, mark.line + 1, "")
    assert caught.value.message == f"YAML syntax error: {problem}"
    assert str(caught.value) == f"{path}:{mark.line + 1}: YAML syntax error: {problem}"


def test_a_file_that_cannot_be_read_as_text_is_one_line(tmp_path: Path) -> None:
    binary = tmp_path / "latin1.yaml"
    binary.write_bytes("k: caf\xe9\n".encode("latin-1"))
    cases = [
        (tmp_path / "missing.yaml", "file not found"),
        (tmp_path, "cannot read: IsADirectoryError"),
        (binary, "cannot read: UnicodeDecodeError"),
    ]
    for path, message in cases:
        with pytest.raises(ConfigError) as caught:
            load_yaml(path)
        assert str(caught.value) == f"{path}: {message}"


def test_an_empty_file_is_none_as_pyyaml_loads_it(tmp_path: Path) -> None:
    for text in ("", "# only a comment\n", "---\n"):
        path = tmp_path / "empty.yaml"
        path.write_text(text, encoding="utf-8")
        assert load_yaml(path)[0] is None is yaml.safe_load(text)


def test_the_line_of_a_path_is_that_of_its_deepest_part_that_exists(tmp_path: Path) -> None:
    """A validation error's field may name a key the file lacks (a missing field), an item past a list's end or a
    part under a scalar: the line is the deepest one that is there (counted by hand)."""
    path = tmp_path / "lines.yaml"
    path.write_text("a:\n  b:\n    - 1\n    - 2\n  c: 3\nd: x\n", encoding="utf-8")
    data, index = load_yaml(path)
    expected = {
        ("a", "b", 1): 4,
        ("a", "b", 5): 2,  # no sixth item
        ("a", "zz", "c"): 1,  # no key zz: not c of a either
        ("a", "c", "x"): 5,  # under a scalar
        ("d", 0): 6,  # the characters of a string have no lines
        ("q",): None,
        (): None,
    }
    assert {p: index.line_of(data, p) for p in expected} == expected


def test_a_character_yaml_refuses_is_one_line_with_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PyYAML's own text for it is two lines without a line number; slurmx's names the line. libyaml reports the
    position in UTF-8 bytes (three 2-byte characters before the refused one: byte 6, character 3), PyYAML's reader
    in characters."""
    text = "ééé\x07\n\n\n"
    path = tmp_path / "ctl.yaml"
    path.write_text(text, encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with pytest.raises(yaml.reader.ReaderError) as theirs:
        yaml.load(text, Loader=loader)
    assert theirs.value.position == (6 if loader is not yaml.SafeLoader else 3)
    reason = str(theirs.value).splitlines()[0]
    assert reason.startswith("unacceptable character #x0007: ")
    with pytest.raises(ConfigError) as caught:
        load_yaml(path)
    assert str(caught.value) == f"{path}:1: YAML error: {reason}"
    later = tmp_path / "later.yaml"
    later.write_text("a: 1\nb: é\nc: \x07\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_yaml(later)
    assert caught.value.line == 3
    first = tmp_path / "first.yaml"
    first.write_text("\n\x07\n", encoding="utf-8")  # a newline as the file's first character counts too
    with pytest.raises(ConfigError) as caught:
        load_yaml(first)
    assert caught.value.line == 2
    monkeypatch.setattr(yamlfile, "_BaseLoader", yaml.SafeLoader)  # the position PyYAML's own reader gives
    assert yamlfile._reader_line(text, 3) == 1 and yamlfile._reader_line("a: 1\nb: é\nc: \x07\n", 13) == 3
    assert yamlfile._reader_line("\n\x07\n", 1) == 2
