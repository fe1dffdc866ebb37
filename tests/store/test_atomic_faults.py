"""store.atomic, step by step and under storage faults: where the new text is written, what is fsynced and when,
and what each fault leaves (one StorageError line, the old file whole, no temporary file left).

Real faults where the kernel can make them (a file where a directory should be, a directory where the file
should be, a read-only bind mount, `chattr +i`; the last two need root). An fsync failure cannot be made on
demand on a healthy disk: those tests replace os.fsync with one that fails, and say so.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmx.store import atomic
from slurmx.store.atomic import StorageError
from slurmx.store.state import load_state

ROOT = Path(__file__).resolve().parents[2]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts and chattr +i need root")


def listing(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def eio(fd: int) -> None:
    raise OSError(errno.EIO, os.strerror(errno.EIO))


def test_a_write_makes_missing_directories_and_replaces_the_file_leaving_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "key" / "s1" / "data.txt"
    atomic.write_text(path, "first\n")
    atomic.write_text(path, "µs — second\n")  # the directories exist now: no error
    assert path.read_bytes() == b"\xc2\xb5s \xe2\x80\x94 second\n"  # UTF-8, by hand
    assert listing(path.parent) == ["data.txt"]


def test_the_file_is_readable_by_every_user_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    old = os.umask(0o077)  # a user's private umask: a plain open() would give rw-------
    try:
        atomic.write_text(path, "{}\n")
    finally:
        os.umask(old)
    assert stat.filemode(path.stat().st_mode) == "-rw-r--r--"


def test_the_text_is_whole_under_a_hidden_name_beside_the_file_before_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "points" / "p1" / "state.json"
    seen: list[tuple[Path, bytes]] = []
    real_replace = os.replace

    def replace(src: str, dst: str) -> None:
        seen.append((Path(src), Path(src).read_bytes()))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    atomic.write_text(path, "new\n")
    [(tmp, data)] = seen
    assert tmp.parent == path.parent  # same directory: the rename cannot cross filesystems
    assert re.fullmatch(r"\.state\.json\.[A-Za-z0-9_]+\.tmp", tmp.name), tmp.name  # hidden: no reader globs it
    assert data == b"new\n"
    assert path.read_bytes() == b"new\n" and listing(path.parent) == ["state.json"]


def test_the_data_is_fsynced_whole_before_the_rename_and_the_directory_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # os.fsync is observed here, not failed: each call records what it syncs and what that file holds then.
    path = tmp_path / "data.txt"
    path.write_text("old\n")
    events: list[tuple[str, str, bytes | None]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        target = fd_path(fd)
        held = None if os.path.isdir(target) else Path(target).read_bytes()
        events.append(("fsync", target, held))
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append(("replace", str(src), None))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    atomic.write_text(path, "new text\n")
    tmp = events[1][1]
    assert events == [
        ("fsync", tmp, b"new text\n"),  # flushed before the fsync: the synced file holds every byte
        ("replace", tmp, None),
        ("fsync", str(tmp_path), None),  # the rename is durable only once its directory is
    ]
    assert Path(tmp).parent == tmp_path


def test_an_fsync_of_the_data_that_fails_is_one_line_and_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Simulated: a disk that fails the flush (EIO) cannot be made on demand.
    path = tmp_path / "data.txt"
    atomic.write_text(path, "old\n")
    monkeypatch.setattr(os, "fsync", eio)
    with pytest.raises(StorageError) as caught:
        atomic.write_text(path, "new\n")
    assert str(caught.value) == f"{path}: cannot write: Input/output error"
    assert (caught.value.path, caught.value.errno, caught.value.exit_code) == (path, errno.EIO, 1)
    assert path.read_text() == "old\n" and listing(tmp_path) == ["data.txt"]


def test_a_directory_that_cannot_be_fsynced_is_accepted_only_when_the_filesystem_refuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Simulated: some filesystems answer a directory fsync with EINVAL (they cannot sync one); any other
    # error means the rename may not be on disk.
    path = tmp_path / "data.txt"
    real_fsync = os.fsync
    failure = errno.EINVAL

    def dir_fails(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(failure, os.strerror(failure))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", dir_fails)
    atomic.write_text(path, "one\n")
    assert path.read_text() == "one\n"
    failure = errno.EIO
    with pytest.raises(StorageError) as caught:
        atomic.write_text(path, "two\n")
    assert str(caught.value) == f"{path}: cannot write: Input/output error" and caught.value.errno == errno.EIO
    assert listing(tmp_path) == ["data.txt"]


def test_an_interrupt_mid_write_removes_the_temporary_file_and_is_not_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "data.txt"
    atomic.write_text(path, "old\n")

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_text(path, "new\n")
    assert path.read_text() == "old\n" and listing(tmp_path) == ["data.txt"]


def test_a_cleanup_that_fails_still_reports_the_write_that_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Simulated: the fsync fails (EIO) and the directory refuses the temporary file's removal.
    path = tmp_path / "data.txt"
    monkeypatch.setattr(os, "fsync", eio)

    def unlink(self: Path, missing_ok: bool = False) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))

    monkeypatch.setattr(Path, "unlink", unlink)
    with pytest.raises(StorageError, match=r": cannot write: Input/output error$"):
        atomic.write_text(path, "new\n")


def test_a_file_where_a_directory_should_be(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("not a directory\n")
    with pytest.raises(StorageError) as caught:
        atomic.write_text(tmp_path / "key" / "state.json", "{}\n")
    assert str(caught.value) == f"{tmp_path / 'key' / 'state.json'}: cannot write: File exists"
    assert caught.value.errno == errno.EEXIST
    deeper = tmp_path / "key" / "s1" / "state.json"
    with pytest.raises(StorageError) as caught:
        atomic.write_text(deeper, "{}\n")
    assert str(caught.value) == f"{deeper}: cannot write: Not a directory" and caught.value.errno == errno.ENOTDIR
    assert listing(tmp_path) == ["key"] and (tmp_path / "key").read_text() == "not a directory\n"


def test_a_directory_where_the_file_should_be(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    (path / "inside").mkdir(parents=True)
    with pytest.raises(StorageError) as caught:
        atomic.write_text(path, "{}\n")
    assert str(caught.value) == f"{path}: cannot write: Is a directory" and caught.value.errno == errno.EISDIR
    assert listing(tmp_path) == ["result.json"] and listing(path) == ["inside"]  # the temporary file is gone


@pytest.fixture
def read_only_view(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    tree, view = tmp_path / "tree", tmp_path / "view"
    tree.mkdir()
    view.mkdir()
    (tree / "data.txt").write_text("old\n")
    subprocess.run(["mount", "--bind", str(tree), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        yield tree, view
    finally:
        subprocess.run(["umount", "-l", str(view)], check=False)


@needs_root
def test_a_read_only_mount(read_only_view: tuple[Path, Path]) -> None:
    tree, view = read_only_view
    with pytest.raises(StorageError) as caught:
        atomic.write_text(view / "data.txt", "new\n")
    assert str(caught.value) == f"{view / 'data.txt'}: cannot write: Read-only file system"
    assert caught.value.errno == errno.EROFS
    assert listing(tree) == ["data.txt"] and (tree / "data.txt").read_text() == "old\n"


@pytest.fixture
def immutable(tmp_path: Path) -> Iterator[list[Path]]:
    """Paths made immutable with chattr +i (root bypasses permission bits, not this); made mutable again after."""
    paths: list[Path] = []
    yield paths
    for path in paths:
        subprocess.run(["chattr", "-i", str(path)], check=False)


def chattr_i(path: Path, immutable: list[Path]) -> None:
    proc = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"chattr +i not supported here: {proc.stderr.strip()}")
    immutable.append(path)


@needs_root
def test_an_immutable_directory_or_file(tmp_path: Path, immutable: list[Path]) -> None:
    locked_dir = tmp_path / "locked"
    locked_dir.mkdir()
    chattr_i(locked_dir, immutable)
    with pytest.raises(StorageError) as caught:
        atomic.write_text(locked_dir / "data.txt", "new\n")  # no temporary file can be made there
    assert str(caught.value) == f"{locked_dir / 'data.txt'}: cannot write: Operation not permitted"
    assert caught.value.errno == errno.EPERM and listing(locked_dir) == []

    path = tmp_path / "data.txt"
    path.write_text("old\n")
    chattr_i(path, immutable)
    with pytest.raises(StorageError) as caught:
        atomic.write_text(path, "new\n")  # the temporary file is written, the rename onto the file refused
    assert str(caught.value) == f"{path}: cannot write: Operation not permitted" and caught.value.errno == errno.EPERM
    assert path.read_text() == "old\n" and listing(tmp_path) == ["data.txt", "locked"]  # and the temporary is gone


def test_an_error_without_a_strerror_is_named_by_its_text(tmp_path: Path) -> None:
    error = StorageError(tmp_path / "x.json", OSError("bare"))
    assert str(error) == f"{tmp_path / 'x.json'}: cannot write: bare" and error.errno is None


def test_write_json_is_indented_in_the_given_key_order_with_a_final_newline(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    atomic.write_json(path, {"zeta": 1, "alpha": [2, "µ"]})
    assert path.read_text(encoding="ascii") == '{\n  "zeta": 1,\n  "alpha": [\n    2,\n    "\\u00b5"\n  ]\n}\n'
    assert atomic.read_json(path) == {"zeta": 1, "alpha": [2, "µ"]}


# ASCII only: the command line itself is decoded in the C locale.
LOCALE_C = """
import sys
from pathlib import Path
from slurmx.store import atomic
from slurmx.store.state import load_state, update_state
d = Path(sys.argv[1])
assert open(d / "probe", "w").encoding.lower() in ("ascii", "ansi_x3.4-1968"), "the locale is UTF-8 here"
atomic.write_text(d / "text.txt", "\\u00b5s\\n")
print(atomic.read_json(d / "utf8.json")["unit"])
state, why = load_state(d / "state.json")
assert why is None, why
print(state.reason)
update_state(d / "state.json", lambda s: s.advance("failed", "TTFT > 5 \\u00b5s"))
"""


def test_the_tree_is_utf8_on_a_node_whose_locale_is_not(tmp_path: Path) -> None:
    # A job's environment may carry LANG=C; the files must read and write as UTF-8 all the same.
    atomic.write_text(tmp_path / "utf8.json", '{"unit": "µs"}')  # here, in a UTF-8 locale, for the node to read
    assert (tmp_path / "utf8.json").read_bytes() == b'{"unit": "\xc2\xb5s"}'
    (tmp_path / "state.json").write_bytes('{"point_id": "p1", "reason": "ünreadable"}'.encode())
    # read here first (a UTF-8 locale): the node must read the same
    here = (atomic.read_json(tmp_path / "utf8.json")["unit"], load_state(tmp_path / "state.json")[0])
    assert here[1] is not None and [here[0], here[1].reason] == ["µs", "ünreadable"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "LC_ALL": "C", "LANG": "C"}
    env.update(PYTHONUTF8="0", PYTHONCOERCECLOCALE="0", PYTHONIOENCODING="utf-8")
    proc = subprocess.run(
        [sys.executable, "-c", LOCALE_C, str(tmp_path)], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["µs", "ünreadable"]
    assert (tmp_path / "text.txt").read_bytes() == b"\xc2\xb5s\n"
    assert json.loads((tmp_path / "state.json").read_bytes())["reason"] == "TTFT > 5 µs"
