"""report.html opened in a real headless browser (Debian's Chromium): the page renders its table and its
embedded plots, offline. Skips without Chromium, except under CI=true, where scripts/test installs it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from slurmx.cli import main
from slurmx.store.tree import SweepDir
from tests.helpers.browser import browse
from tests.helpers.browser import chromium as find_chromium
from tests.helpers.synthetic import make_result, write_result, write_sweep

KEY = "kimik3-fp4-b300-vllm-agentic-dspark-lmcache"
WIDTH, HEIGHT = 1400, 2200


def _tree(root: Path) -> SweepDir:
    sweep = SweepDir(write_sweep(root, KEY, "s1", []))
    wiggle = (0.97, 1.0, 1.04)
    for conc in (4, 8, 16):
        for arm in ("none", "lmcache"):
            point_id = f"{arm}{conc}"
            for repeat in (1, 2, 3):
                r = make_result(point_id=point_id, config_key=KEY, sweep_id="s1", conc=conc, arm=arm)
                assert r.slurmx is not None
                r.request_metrics.throughput.per_gpu.total_tput_tps *= wiggle[repeat - 1]  # type: ignore[operator]  # set by make_result
                r.slurmx.repeat, r.slurmx.repeats, r.slurmx.repeat_mode = repeat, 3, "shared-server"
                write_result(sweep.point(point_id, repeat).result_json, r)
    bad = sweep.point("broken1").result_json
    bad.parent.mkdir(parents=True)
    bad.write_text("{")
    return sweep


def _browser(chromium: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return browse(chromium, WIDTH, HEIGHT, *argv)


def test_report_renders_its_table_and_images_in_a_headless_browser(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chromium = find_chromium()
    sweep = _tree(tmp_path / "results")
    assert main(["collect", "--no-plots", "--results", str(tmp_path / "results")]) == 0
    report = sweep.report_html
    html = report.read_text()
    assert "http://" not in html and "https://" not in html  # nothing to fetch: opens offline
    url = report.resolve().as_uri()

    dom = _browser(chromium, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    arms = re.search(r'<table id="arms">.*?</table>', dom.stdout, re.S)
    assert arms is not None and arms.group(0).count("<tr>") == 1 + 6  # header + six points
    assert dom.stdout.count('src="data:image/png;base64,') == 2
    assert "broken1" in dom.stdout and "not valid JSON" in dom.stdout  # the invalid point and its reason
    # the Pareto plot is drawn against the headline metric, with the North Star frontier of each arm
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", dom.stdout, re.S)
    assert "E2E-normalized interactivity P90" in captions[0]
    assert "North Star frontier · none" in captions[0] and "North Star frontier · lmcache" in captions[0]
    table = re.search(r'<table id="frontier">.*?</table>', dom.stdout, re.S)
    assert table is not None
    shown = set(re.findall(r'<td class="l">((?:none|lmcache)\d+)</td>', table.group(0)))
    summary = json.loads(sweep.summary_json.read_text())
    winners = {w["point_id"] for g in summary["frontier"] for w in g["north_star"]}
    assert shown == winners and winners  # the winners table is summary.json's North Star winners

    shot = tmp_path / "report.png"
    run = _browser(chromium, f"--screenshot={shot}", url)
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    keep = os.environ.get("SLURMX_REPORT_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)

    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))[..., :3]
    assert pixels.shape[:2] == (HEIGHT, WIDTH)
    rgb = (pixels * 255).round().astype(int)
    not_white = (rgb.sum(axis=2) < 3 * 250).mean()
    assert not_white > 0.02, f"only {not_white:.1%} of the page is not white: an empty page?"
    # matplotlib's first two colours (C0 blue, C1 orange) are only in the plots: the images rendered
    for colour in ((31, 119, 180), (255, 127, 14)):
        hits = (abs(rgb - colour).sum(axis=2) < 30).sum()
        assert hits > 500, f"colour {colour} on {hits} pixels: the plots did not render"
    gold = (abs(rgb - (230, 161, 0)).sum(axis=2) < 30).sum()  # plots.FRONTIER_COLOUR: the frontier is drawn
    assert gold > 300, f"the frontier's gold on {gold} pixels: no frontier drawn"
