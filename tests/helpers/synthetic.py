"""Synthetic but schema-valid results and results trees, for tests, benchmarks and demos.

The numbers follow a simple serving model (throughput rises and per-user speed falls with
concurrency; an offload arm trades a little throughput for a lower TTFT at high concurrency) so
tables and plots look like real sweeps. Nothing here is used on a real run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from slurmx.results.schema import (
    ComponentMeta,
    Latency,
    PerGpu,
    Rate,
    RequestAccounting,
    RequestMetrics,
    Result,
    ServerCache,
    ServerMetrics,
    SlurmxMeta,
    Stats,
    Throughput,
    TokenStats,
)
from slurmx.store import atomic


def _stats(p50: float, spread: float = 0.25) -> Stats:
    return Stats(
        mean=p50 * (1 + spread / 3),
        p50=p50,
        p75=p50 * (1 + spread / 2),
        p90=p50 * (1 + spread),
        p95=p50 * (1 + 1.3 * spread),
        std=p50 * spread / 2,
    )


def make_result(
    *,
    point_id: str,
    config_key: str = "synthetic-key",
    sweep_id: str = "sweep-1",
    conc: int = 8,
    tp: int = 8,
    ep: int = 1,
    dp_attn: bool = False,
    arm: str = "none",
    tput_per_gpu: float | None = None,
    ttft_p90_s: float | None = None,
    ttft_p50_s: float | None = None,
    requests: int = 200,
    errors: int = 0,
    ended_at: float | None = None,
    was_cancelled: bool = False,
) -> Result:
    offload = arm != "none"
    gpus = tp
    dep = dp_attn and ep > 1  # data-parallel attention: slower per user at low load, more throughput at high load
    itl_s = 0.008 * (1 + conc / 16) * (1.25 if dep else 1.0) / (1 + conc / 96 if dep else 1.0)
    tput = (
        tput_per_gpu
        if tput_per_gpu is not None
        else (900.0 * conc / (1 + conc / 24) * (0.95 if offload else 1.0) * ((0.8 + conc / 80) if dep else 1.0))
    )
    ttft90 = ttft_p90_s if ttft_p90_s is not None else 0.4 * (1 + conc / 8) * (0.6 if offload else 1.0)
    ttft = _stats(ttft90 / 1.25)
    if ttft_p50_s is not None:  # a median that does not follow p90, so a test can tell the two apart
        ttft = ttft.model_copy(update={"p50": ttft_p50_s})
    total = tput * gpus
    output = total / 11
    itl = _stats(itl_s, 0.3)
    e2e_tok = _stats(itl_s * 1.4, 0.3)
    now = time.time() if ended_at is None else ended_at
    return Result(
        hw="b300",
        conc=conc,
        image="vllm/vllm-openai:v0.32.0",
        recipe_fingerprint="f" * 64,
        model="moonshotai/Kimi-K3",
        infmax_model_prefix="kimik3",
        framework="vllm",
        precision="fp4",
        spec_decoding="none",
        num_gpus=gpus,
        tp=tp,
        ep=ep,
        dp_attention="true" if dp_attn else "false",
        pp=1,
        dcp_size=1,
        pcp_size=1,
        kv_offloading="dram" if offload else "none",
        kv_offload_backend=ComponentMeta(name=arm, version="0.5.6") if offload else None,
        allocated_cpu_dram_gb=1889 if offload else 0,
        num_requests_total=requests + errors,
        num_requests_successful=requests,
        request_accounting=RequestAccounting(
            records_total=requests + errors,
            records_profiled=requests,
            records_dropped_total=errors,
            records_error_dropped=errors,
            error_categories={"HTTPStatusError": errors} if errors else {},
        ),
        request_metrics=RequestMetrics(
            latency=Latency(
                ttft=ttft,
                e2el=_stats(30.0 * (1 + conc / 16)),
                itl=itl,
                tpot=itl,
                intvty=Stats(**{k: 1 / v for k, v in itl.model_dump().items() if k != "std" and v}),
                e2e_norm_intvty=Stats(**{k: 1 / v for k, v in e2e_tok.model_dump().items() if k != "std" and v}),
            ),
            tokens=TokenStats(input=_stats(60000.0), output_actual=_stats(600.0)),
            throughput=Throughput(
                input=Rate(tokens_per_second=total - output),
                output=Rate(tokens_per_second=output),
                total=Rate(tokens_per_second=total),
                duration_seconds=1800.0,
                per_gpu=PerGpu(
                    total_tput_tps=tput, output_tput_tps=output / gpus, input_tput_tps=(total - output) / gpus
                ),
            ),
        ),
        server_metrics=ServerMetrics(
            present=True,
            adapter="vllm",
            metric_count=120,
            cache=ServerCache(
                gpu_cache_hit_rate=0.55 - conc / 200,
                cpu_cache_hit_rate=0.3 if offload else None,
                external_cache_hit_rate=0.3 if offload else None,
                overall_cache_hit_rate=(0.85 if offload else 0.55) - conc / 200,
            ),
        ),
        slurmx=SlurmxMeta(
            point_id=point_id,
            config_key=config_key,
            exp_name=f"kimik3_tp{tp}_conc{conc}_{'kvdram-' + arm if offload else 'kvnone'}",
            sweep_id=sweep_id,
            slurm_job_id="1234_0",
            node="node01",
            started_at=now - 1900,
            ended_at=now,
            was_cancelled=was_cancelled,
        ),
    )


def write_sweep(root: Path, config_key: str, sweep_id: str, results: list[Result]) -> Path:
    """A results-tree sweep holding `results` (each under points/<its point id>/result.json)."""
    sweep = root / config_key / sweep_id
    atomic.write_json(sweep / "sweep.json", {"config_key": config_key, "sweep_id": sweep_id, "synthetic": True})
    for result in results:
        assert result.slurmx is not None
        write_result(sweep / "points" / result.slurmx.point_id / "result.json", result)
    return sweep


def write_result(path: Path, result: Result) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.dump(), indent=1), encoding="utf-8")


def write_many(root: Path, count: int, *, points_per_sweep: int = 100) -> int:
    """`count` result files spread over sweeps of two keys; returns the number written."""
    template = make_result(point_id="p").dump()
    written = 0
    sweep_no = 0
    while written < count:
        key = f"synthetic-key-{sweep_no % 2}"
        sweep = root / key / f"sweep-{sweep_no:04d}"
        (sweep / "points").mkdir(parents=True, exist_ok=True)
        (sweep / "sweep.json").write_text(json.dumps({"config_key": key}), encoding="utf-8")
        for i in range(min(points_per_sweep, count - written)):
            point_id = f"{sweep_no:04d}{i:08x}"
            arm = ("none", "lmcache")[i % 2]
            conc = (4, 8, 16, 32, 64)[(i // 2) % 5]
            data: dict[str, Any] = dict(template)
            data["conc"] = conc
            data["kv_offloading"] = "none" if arm == "none" else "dram"
            data["kv_offload_backend"] = None if arm == "none" else {"name": arm, "version": "0.5.6"}
            data["slurmx"] = {**template["slurmx"], "point_id": point_id, "config_key": key,
                              "sweep_id": sweep.name}  # fmt: skip
            target = sweep / "points" / point_id / "result.json"
            target.parent.mkdir(exist_ok=True)
            target.write_text(json.dumps(data), encoding="utf-8")
            written += 1
        sweep_no += 1
    return written
