"""`slurmx dashboard` over two results trees in one database, opened in headless Chromium: the trend plots per
arm, both clusters, the newest frontier, and the flagged change linked to its two sweeps' report.html."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from slurmx.cli import main
from slurmx.history import dashboard
from slurmx.store.tree import SweepDir
from tests.helpers.browser import browse, chromium
from tests.helpers.history import KEY, write_series

WIDTH, HEIGHT = 1400, 1600
OLD, NEW = "vllm/vllm-openai:v0.32.0", "vllm/vllm-openai:v0.33.0"


def _trees(tmp_path: Path) -> tuple[Path, Path]:
    """Cluster alpha: 24 sweeps, a 15 % throughput drop at its 15th (alpha-0014) with a new image, and a steady
    lmcache arm; cluster beta, another tree: 6 later sweeps of the no-offload point only."""
    a, b = tmp_path / "a" / "results", tmp_path / "b" / "results"
    images = [OLD] * 14 + [NEW] * 10
    write_series(a, [1000.0] * 14 + [850.0] * 10, repeats=3, seed=1, images=images, point_id="tp8c8", cluster="alpha")
    write_series(a, [1500.0] * 24, repeats=3, seed=2, point_id="lmc8", cluster="alpha", arm="lmcache")
    write_series(b, [850.0] * 6, repeats=3, seed=3, point_id="tp8c8", cluster="beta", first_day=24)
    return a, b


def _cells(row: str) -> list[str]:
    return [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


def _table(dom: str, cls: str) -> list[str]:
    found = re.search(rf'<table class="{cls}">.*?<tbody>(.*?)</tbody>', dom, re.S)
    assert found is not None, f"no table {cls}"
    return re.findall(r"<tr[^>]*>.*?</tr>", found.group(1), re.S)


def test_the_dashboard_shows_trends_both_clusters_and_the_flagged_change_in_a_browser(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    browser = chromium()
    a, b = _trees(tmp_path)
    before, after = SweepDir(a / KEY / "alpha-0013"), SweepDir(a / KEY / "alpha-0014")
    targets = [f"{KEY}/alpha-0013", f"{KEY}/alpha-0014"]
    assert main(["collect", *targets, "--results", str(a), "--no-plots"]) == 0  # the two sweeps' reports
    out = tmp_path / "dash"
    capsys.readouterr()
    argv = ["dashboard", "--results", str(a), "--results", str(b), "--db", str(tmp_path / "team.sqlite")]
    assert main([*argv, "--out", str(out)]) == 0
    assert "1 change(s) beyond noise" in capsys.readouterr().out
    page = out / dashboard.PAGE
    text = page.read_text()
    assert "http://" not in text and "https://" not in text  # nothing to fetch: opens offline

    dom = browse(browser, WIDTH, HEIGHT, "--dump-dom", page.resolve().as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    html_ = dom.stdout
    # a trend figure per arm, each an embedded PNG
    figures = re.findall(r'<figure class="trend" data-arm="(\w+)">\s*<img src="data:image/png;base64,', html_)
    assert figures == ["none", "lmcache"]
    # the one change: throughput of the no-offload point at alpha-0014, with the image that changed there
    (change,) = _table(html_, "changes")
    cells = _cells(change)
    assert cells[0] == "tok/s/GPU" and cells[1].endswith("TP8 none conc 8")
    assert cells[2].startswith("alpha-0013 (alpha,") and cells[3].startswith("alpha-0014 (alpha,")
    assert -19.0 < float(cells[4].rstrip("%")) < -11.0 and cells[6] == "worse"
    assert cells[7] == f"image: {OLD} → {NEW}"
    links = dict(re.findall(r'<a class="report (before|after)" href="([^"]+)">', change))
    assert (out / links["before"]).resolve() == before.report_html.resolve() and before.report_html.is_file()
    assert (out / links["after"]).resolve() == after.report_html.resolve() and after.report_html.is_file()
    # both trees' sweeps, each with its cluster
    sweeps = [_cells(r) for r in _table(html_, "sweeps")]
    assert [(c[0], c[1]) for c in sweeps] == [(f"alpha-{d:04d}", "alpha") for d in range(24)] + [
        (f"beta-{d:04d}", "beta") for d in range(24, 30)
    ]
    assert {c[4] for c in sweeps} == {str(a.resolve()), str(b.resolve())}
    # the newest frontier: each arm's winner from the newest sweep that ran it (beta's for no offload)
    winners = [_cells(r) for r in _table(html_, "frontier")]
    assert [(w[0], w[2].split(" ")[0], w[3]) for w in winners] == [
        ("none", "beta-0029", "tp8c8"),
        ("lmcache", "alpha-0023", "lmc8"),
    ]
    assert 800 < float(winners[0][7]) < 900 and 1400 < float(winners[1][7]) < 1600

    shot = tmp_path / "dashboard.png"
    run = browse(browser, WIDTH, HEIGHT, f"--screenshot={shot}", page.resolve().as_uri())
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    import matplotlib.image

    rgb = (matplotlib.image.imread(str(shot))[..., :3] * 255).round().astype(int)
    assert rgb.shape[:2] == (HEIGHT, WIDTH)
    blue = (abs(rgb - (31, 119, 180)).sum(axis=2) < 30).sum()  # matplotlib's C0: the trend lines drew
    assert blue > 500, f"the trend lines' blue on {blue} pixels"
    red = (abs(rgb - (214, 39, 40)).sum(axis=2) < 40).sum()  # dashboard.FLAG_COLOUR: the change is ringed
    assert red > 40, f"the change's red ring on {red} pixels"


def test_a_key_the_index_does_not_hold_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "results"
    write_series(root, [1000.0] * 3)
    capsys.readouterr()
    assert main(["dashboard", "no-such-key", "--results", str(root), "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("slurmx: error: no key no-such-key in the index") and KEY in err[-1]
    assert not (tmp_path / "d").exists()
