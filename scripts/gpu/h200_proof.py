"""On a GPU machine: the telemetry sampler next to a bf16 matmul load (the engine's stand-in), energy
over windows against NVML's own energy counter, InferenceX's aggregate_power.py on the same samples,
and preflight hygiene against a process holding GPU memory. Everything it saw goes to OUT.

    PYTHONPATH=src python3 scripts/gpu/h200_proof.py OUT
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from slurmx.node import gpu_hygiene, telemetry
from slurmx.node.supervisor import Supervisor
from slurmx.results import energy

REPO = Path(__file__).resolve().parents[2]
# InferenceX's aggregate_power.py as the oracle: the shared fixtures' copy, or a folder carried to the device
sys.path.insert(
    0, os.environ.get("IX_UPSTREAM", str(REPO.parent / "shared" / "fixtures" / "inferencex" / "upstream-code"))
)
import aggregate_power as ix  # noqa: E402  # InferenceX's own code, run as an oracle

LOAD = """
import sys, time, torch
seconds = float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
print("load start", time.time(), flush=True)
end = time.time() + seconds
n = 0
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    n += 20
print("load end", time.time(), "matmuls", n, flush=True)
"""
HOLD = """
import time, torch
x = torch.empty(4 * 2**30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("holding", x.numel() >> 20, "MiB", flush=True)
time.sleep(600)
"""
IX_QUERY = "timestamp,index,power.draw,temperature.gpu,clocks.current.sm,clocks.current.memory,utilization.gpu,utilization.memory"


def sh(out: Path, name: str, argv: list[str]) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    (out / name).write_text(res.stdout + (f"\n# stderr:\n{res.stderr}" if res.stderr.strip() else ""))


def nvml_energy_j() -> float:
    import pynvml

    pynvml.nvmlInit()
    try:
        total = 0.0
        for i in range(pynvml.nvmlDeviceGetCount()):
            total += pynvml.nvmlDeviceGetTotalEnergyConsumption(pynvml.nvmlDeviceGetHandleByIndex(i)) / 1000.0
        return total
    finally:
        pynvml.nvmlShutdown()


def wait_for_line(path: Path, text: str, timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.2)
    raise TimeoutError(f"{text!r} not in {path}")


def compare(name: str, csv_path: Path, start: float, end: float, counter_j: float, gpus: int) -> dict[str, object]:
    window = energy.Window(start, end, completed=100, total_input_tokens=400_000, total_output_tokens=50_000)
    ours = energy.integrate(energy.read_telemetry(csv_path, window), window, gpus)
    theirs = ix.integrate_power(csv_path, start_unix=start, end_unix=end, expected_num_gpus=gpus)
    row: dict[str, object] = {
        "window": name,
        "start_unix": start,
        "end_unix": end,
        "duration_s": end - start,
        "nvml_counter_delta_j": counter_j,
        "slurmx_energy_j": ours.total_gpu_energy_j,
        "slurmx_counter_interp_j": ours.counter_energy_j,
        "slurmx_reasons": ours.reasons,
        "slurmx_avg_power_w": ours.avg_power_w,
        "slurmx_peak_power_w": ours.peak_power_w,
        "slurmx_metrics": ours.metrics(window),
        "inferencex_energy_j": theirs.total_gpu_energy_j,
        "inferencex_reasons": list(theirs.invalid_reasons),
        "inferencex_avg_power_w": theirs.avg_power_w,
    }
    if ours.total_gpu_energy_j:
        row["slurmx_vs_counter_pct"] = 100.0 * (ours.total_gpu_energy_j - counter_j) / counter_j
    if ours.total_gpu_energy_j and theirs.total_gpu_energy_j:
        row["slurmx_vs_inferencex_pct"] = (
            100.0 * (ours.total_gpu_energy_j - theirs.total_gpu_energy_j) / theirs.total_gpu_energy_j
        )
    # InferenceX's full run(): a benchmark JSON for the window, an aggregate it patches, its sidecar
    bench = csv_path.parent / f"bench_{name}.json"
    agg = csv_path.parent / f"agg_{name}.json"
    bench.write_text(
        json.dumps(
            {
                "benchmark_start_time_unix": start,
                "benchmark_end_time_unix": end,
                "duration": end - start,
                "completed": window.completed,
                "total_input_tokens": window.total_input_tokens,
                "total_output_tokens": window.total_output_tokens,
            }
        )
    )
    agg.write_text("{}")
    ix.run(csv_path, bench, agg, expected_num_gpus=gpus, validation_result=csv_path.parent / f"ixval_{name}.json")
    row["inferencex_aggregate"] = json.loads(agg.read_text())
    return row


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    cap = out / "captures"
    cap.mkdir(exist_ok=True)
    sh(cap, "nvidia-smi-L.txt", ["nvidia-smi", "-L"])
    sh(cap, "nvidia-smi-topo-m.txt", ["nvidia-smi", "topo", "-m"])
    sh(cap, "nvidia-smi-q.txt", ["nvidia-smi", "-q"])
    sh(
        cap,
        "query-gpu-slurmx.csv",
        ["nvidia-smi", f"--query-gpu={telemetry.SMI_QUERY}", "--format=csv,noheader,nounits"],
    )
    sh(cap, "help-query-gpu-energy.txt", ["sh", "-c", "nvidia-smi --help-query-gpu | grep -i -A2 energy"])
    sh(
        cap,
        "numa.txt",
        [
            "sh",
            "-c",
            "ls /sys/devices/system/node/; cat /sys/devices/system/node/node*/cpulist; nproc; "
            "for d in /sys/bus/pci/devices/*; do [ -f $d/numa_node ] && grep -q 0x0300\\\\\\|0x0302 $d/class "
            "&& echo $d $(cat $d/numa_node) $(cat $d/local_cpulist); done; which numactl",
        ],
    )
    env = dict(os.environ)
    summary: dict[str, object] = {"python": sys.version}

    # ---- hygiene: clean, then with a foreign process holding 4 GiB, then clean again
    clean = gpu_hygiene.node_hygiene(env, remove_shm=False)
    summary["hygiene_clean"] = clean.__dict__
    holder = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    summary["holder_said"] = holder.stdout.readline().strip()
    time.sleep(1.0)
    dirty = gpu_hygiene.node_hygiene(env, remove_shm=False)
    summary["hygiene_dirty"] = {**dirty.__dict__, "failure": dirty.failure()}
    states, _ = gpu_hygiene.read_gpus_nvml(env)
    summary["gpu_states_dirty"] = [s.__dict__ | {"processes": [p.__dict__ for p in s.processes]} for s in states or []]
    summary["holder_pid"] = holder.pid
    holder.terminate()
    holder.wait(30)
    time.sleep(2.0)
    summary["hygiene_after"] = gpu_hygiene.node_hygiene(env, remove_shm=False).__dict__

    # ---- telemetry next to the load, both samplers supervised
    run_dir = out / "run"
    tdir = run_dir / "telemetry"
    with Supervisor(run_dir, "h200-proof") as sup:
        sampler = sup.start("telemetry", telemetry.telemetry_argv(sys.executable, tdir, 0.5))
        ix_smi = sup.start("nvidia-smi-monitor", ["nvidia-smi", f"--query-gpu={IX_QUERY}", "--format=csv", "-l", "1"])
        time.sleep(4.0)
        idle_start, idle_counter0 = time.time(), nvml_energy_j()
        time.sleep(3.0)
        ramp_start, ramp_counter0 = time.time(), nvml_energy_j()
        load = sup.start("load", [sys.executable, "-c", LOAD, "30"])
        wait_for_line(load.log_path, "load start", 120)
        time.sleep(5.0)
        steady_start, steady_counter0 = time.time(), nvml_energy_j()
        sup.wait(load, timeout_s=120)
        steady_end = float(load.log_tail().split("load end")[1].split()[0]) - 0.5
        time.sleep(3.0)
        ramp_end, ramp_counter1 = time.time(), nvml_energy_j()
        time.sleep(3.0)
        sup.stop(sampler)
        sup.stop(ix_smi)
    # the steady window's end counter: read from the sampler's own stream is not independent, so
    # steady uses the NVML counter read at its start and an interpolation of a second direct read
    summary["load_log"] = load.log_tail()
    csv_path = tdir / telemetry.METRICS_CSV
    gpus = len(json.loads((tdir / telemetry.INFO_JSON).read_text())["devices"])
    rows = [
        compare("idle", csv_path, idle_start, ramp_start, ramp_counter0 - idle_counter0, gpus),
        compare("ramp", csv_path, ramp_start, ramp_end, ramp_counter1 - ramp_counter0, gpus),
    ]
    # steady window: its counter comes from the sampler's energy column (the NVML counter as sampled)
    tel = energy.read_telemetry(csv_path)
    counter_steady = energy.counter_energy(tel, energy.Window(steady_start, steady_end, 1, 1, 1)) or 0.0
    rows.append(compare("steady", csv_path, steady_start, steady_end, counter_steady, gpus))
    summary["steady_counter0_direct_j"] = steady_counter0
    summary["windows"] = rows
    summary["inferencex_cross_check"] = ix.cross_check_accumulator(csv_path)
    smi_csv = run_dir / "logs" / "nvidia-smi-monitor.log"
    summary["inferencex_own_sampler_ramp"] = {
        k: v
        for k, v in ix.integrate_power(
            smi_csv, start_unix=ramp_start, end_unix=ramp_end, expected_num_gpus=gpus
        ).__dict__.items()
        if k in ("power_valid", "invalid_reasons", "total_gpu_energy_j", "avg_power_w", "per_gpu_sample_counts")
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    shutil.copy(csv_path, out / "gpu_metrics.csv")
    print(json.dumps({"windows": rows, "hygiene_dirty": summary["hygiene_dirty"]}, indent=1, default=str)[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
