"""What one collected row holds, column by column, and the edges of collect's reading: reasons for
unreadable files, ratios without a usable baseline, ties in end time, the progress count."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

from slurmx.collect import collect as col
from slurmx.store.tree import SweepDir
from tests.helpers.synthetic import make_result, write_result, write_sweep

KEY = "kimik3-fp4-b300-vllm-agentic-dspark-lmcache"


def test_a_row_carries_every_column_from_its_result(tmp_path: Path) -> None:
    result = make_result(point_id="p1", config_key=KEY, sweep_id="s1", conc=16, arm="lmcache", ended_at=5000.0)
    sweep = SweepDir(write_sweep(tmp_path, KEY, "s1", [result]))
    (row,) = col.collect([sweep]).rows
    rm, lat, cache, meta = (
        result.request_metrics,
        result.request_metrics.latency,
        result.server_metrics.cache,
        result.slurmx,
    )
    assert meta is not None
    assert row.columns() == {
        "config_key": KEY, "sweep_id": "s1", "point_id": "p1", "exp_name": "kimik3_tp8_conc16_kvdram-lmcache",
        "parallelism": "TP8", "arm": "lmcache", "spec_decoding": "none", "conc": 16, "num_gpus": 8,
        "tput_per_gpu": rm.throughput.per_gpu.total_tput_tps,
        "output_tput_per_gpu": rm.throughput.per_gpu.output_tput_tps,
        "input_tput_per_gpu": rm.throughput.per_gpu.input_tput_tps,
        "intvty_p50": lat.intvty.p50, "intvty_p90": lat.intvty.p90,
        "e2e_norm_intvty_p50": lat.e2e_norm_intvty.p50, "e2e_norm_intvty_p90": lat.e2e_norm_intvty.p90,
        "ttft_p50_s": lat.ttft.p50, "ttft_p90_s": lat.ttft.p90, "e2el_p50_s": lat.e2el.p50,
        "e2el_p90_s": lat.e2el.p90, "itl_p50_s": lat.itl.p50, "error_rate": 0.0,
        "requests_successful": 200, "requests_total": 200,
        "gpu_hit_rate": cache.gpu_cache_hit_rate, "cpu_hit_rate": 0.3, "external_hit_rate": 0.3,
        "overall_hit_rate": cache.overall_cache_hit_rate,
        "baseline_arm": None, "tput_ratio": None, "ttft_p90_ratio": None, "ratio_uncertified": None,
        "slurm_job_id": "1234_0", "node": "node01", "nodes": None, "requests_by_rank": None, "attempt": meta.attempt, "ended_at": 5000.0,
        "path": str(sweep.path / "points" / "p1" / "result.json"),
        # the offload evidence (none recorded in this synthetic result), validity, what ran, the repeat
        "tier_hit_rate": None, "tier_side_hit_rate": None, "tier_tokens": None, "valid": True,
        "invalid_reason": None, "invalid_rule": None, "labels": "", "uncertified": "", "engine_version": None, "backend_version": None,
        "image": result.image, "repeat": 1, "repeat_mode": None,
        # no GPU telemetry in this result: no energy figures, and no power verdict
        "gpu_energy_j": None, "avg_gpu_w": None, "j_per_out_tok": None, "j_per_tok": None, "tok_s_per_kw": None,
        "power_invalid": None,
        # the one valid point of its comparison group wins the North Star frontier and every gated view
        "north_star": True, "frontier_views": "e2e_norm_intvty_p90;intvty_p50;ttft_p90_s;e2el_p90_s",
    }  # fmt: skip
    # every metric differs from the others, so a column fed from the wrong field shows
    numbers = [v for k, v in row.columns().items() if k.endswith(("_s", "_p50", "_p90", "_gpu"))]
    assert len(set(numbers)) == len(numbers)
    lines = list(csv.reader(io.StringIO(col.csv_text([row]))))
    assert lines[0] == list(col.CSV_COLUMNS) and len(lines) == 2
    cells = dict(zip(lines[0], lines[1]))
    assert cells["baseline_arm"] == "" and cells["tput_ratio"] == ""  # None is an empty cell
    assert cells["conc"] == "16" and cells["point_id"] == "p1" and cells["exp_name"] == row.exp_name


def test_a_result_written_elsewhere_takes_its_point_id_from_its_directory(tmp_path: Path) -> None:
    result = make_result(point_id="p1", config_key=KEY, conc=4)
    result.slurmx = None  # InferenceX's own aggregate has no slurmx block
    write_result(tmp_path / KEY / "s1" / "points" / "d1" / "result.json", result)
    (tmp_path / KEY / "s1" / "sweep.json").write_text("{}")
    (row,) = col.collect([SweepDir(tmp_path / KEY / "s1")]).rows
    assert (row.point_id, row.exp_name, row.config_key) == ("d1", "", KEY)
    assert (row.ended_at, row.node) == (None, None)


def test_unreadable_files_name_the_first_problem_and_count_the_rest(tmp_path: Path) -> None:
    points = tmp_path / KEY / "s1" / "points"
    data = make_result(point_id="two").dump()
    data["conc"] = "many"
    data["tp"] = "eight"
    write_result(points / "one" / "result.json", make_result(point_id="one"))
    (points / "one" / "result.json").write_text(json.dumps([1, 2]))
    (points / "two").mkdir(parents=True)
    (points / "two" / "result.json").write_text(json.dumps(data))
    (tmp_path / KEY / "s1" / "sweep.json").write_text("{}")
    skipped = {s.path.parent.name: s.reason for s in col.collect([SweepDir(tmp_path / KEY / "s1")]).skipped}
    assert skipped["one"].startswith("does not match the result schema: (top level): ")
    assert skipped["two"].startswith("does not match the result schema: conc: ")
    assert skipped["two"].endswith(" (+1 more)")


def test_a_ratio_needs_both_values_and_a_non_zero_baseline() -> None:
    assert col._ratio(3.0, 2.0) == 1.5
    assert col._ratio(None, 2.0) is None
    assert col._ratio(3.0, None) is None
    assert col._ratio(3.0, 0.0) is None
    assert col._ratio(0.0, 1.0) == 0.0


def test_on_equal_end_times_the_newer_file_wins_and_a_missing_end_time_loses(tmp_path: Path) -> None:
    s1 = write_sweep(tmp_path, KEY, "s1", [make_result(point_id="tie", sweep_id="s1", ended_at=100.0),
                                           make_result(point_id="noend", sweep_id="s1", ended_at=100.0)])  # fmt: skip
    undated = make_result(point_id="noend", sweep_id="s2")
    assert undated.slurmx is not None
    undated.slurmx.ended_at = None
    s2 = write_sweep(tmp_path, KEY, "s2", [make_result(point_id="tie", sweep_id="s2", ended_at=100.0), undated])
    os.utime(s1 / "points" / "tie" / "result.json", (2_000_000.0, 2_000_000.0))
    os.utime(s2 / "points" / "tie" / "result.json", (1_000_000.0, 1_000_000.0))
    os.utime(s2 / "points" / "noend" / "result.json", (3_000_000.0, 3_000_000.0))
    rows = {r.point_id: r for r in col.collect([SweepDir(s1), SweepDir(s2)]).rows}
    assert rows["tie"].sweep_id == "s1"  # same end time: the newer file
    assert rows["noend"].sweep_id == "s1"  # an end time beats none, however new the file


def test_progress_counts_each_file_once_and_a_given_file_list_is_used(tmp_path: Path) -> None:
    sweep = SweepDir(write_sweep(tmp_path, KEY, "s1", [make_result(point_id=f"p{i}") for i in range(3)]))
    (sweep.path / "points" / "p2" / "result.json").write_text("")
    counted: list[int] = []
    assert len(col.collect([sweep], on_file=counted.append).rows) == 2
    assert counted == [1, 1, 1]
    only = [sweep.path / "points" / "p0" / "result.json"]
    collection = col.collect([sweep], files={sweep.path: only})
    assert [r.point_id for r in collection.rows] == ["p0"] and collection.skipped == []
    assert col.collect([sweep]).skipped[0].reason == "empty file"


def test_collect_judges_a_result_with_the_error_threshold_the_node_gated_with(tmp_path: Path) -> None:
    def collected(threshold: float | None, errors: int) -> dict[str, object]:
        result = make_result(point_id=f"p{errors}", config_key=KEY, sweep_id="s1", requests=170, errors=errors)
        assert result.slurmx is not None
        data = result.model_dump(mode="json")
        if threshold is None:  # a result written before the node recorded its threshold
            del data["slurmx"]["failed_request_threshold"]
        else:
            data["slurmx"]["failed_request_threshold"] = threshold
        sweep = SweepDir(write_sweep(tmp_path / f"{threshold}-{errors}", KEY, "s1", [result]))
        (path,) = (sweep.path / "points").glob("*/result.json")
        path.write_text(json.dumps(data))
        (row,) = col.collect([sweep]).rows
        return row.columns()  # Row has no `values` (a stale name): its columns are what the test reads

    # 30 errors of 200: 15 %, over the default 10 % but under a recipe's 20 %
    assert collected(0.20, 30)["valid"] is True
    assert collected(None, 30)["valid"] is False
    # 15 errors of 185: 8.1 %, under the default but over a recipe's 5 %
    strict = collected(0.05, 15)
    # InferenceX's message (issue 23): the threshold as its gate prints it
    assert strict["valid"] is False and "> 5.000%" in str(strict["invalid_reason"])
    assert collected(None, 15)["valid"] is True
