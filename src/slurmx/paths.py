"""Where slurmx finds its shipped configs, recipes and site templates, and writes results by default."""

from __future__ import annotations

import os
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2]


def config_dir() -> Path:
    """SLURMX_CONFIG_DIR, else ./configs, else the checkout's configs/."""
    if env := os.environ.get("SLURMX_CONFIG_DIR"):
        return Path(env)
    local = Path.cwd() / "configs"
    if (local / "clusters.yaml").exists():
        return local
    return _CHECKOUT / "configs"


def default_masters() -> list[Path]:
    return sorted(config_dir().glob("*master*.yaml"))


def default_clusters() -> Path:
    return config_dir() / "clusters.yaml"


def jobs_dir() -> Path:
    """SLURMX_JOBS_DIR, else ./jobs, else the checkout's jobs/ (serving recipes)."""
    if env := os.environ.get("SLURMX_JOBS_DIR"):
        return Path(env)
    local = Path.cwd() / "jobs"
    if local.is_dir() and any(local.glob("*.yaml")):
        return local
    return _CHECKOUT / "jobs"


def templates_dir() -> Path:
    """SLURMX_TEMPLATES_DIR, else ./sbatch_templates when it holds a *.sh, else the checkout's sbatch_templates/:
    where a site's sbatch preambles override the packaged ones, one <runtime kind>.sh each (a kind with no
    file there keeps the packaged preamble)."""
    if env := os.environ.get("SLURMX_TEMPLATES_DIR"):
        return Path(env)
    local = Path.cwd() / "sbatch_templates"
    if local.is_dir() and any(local.glob("*.sh")):
        return local
    return _CHECKOUT / "sbatch_templates"


def cache_dir() -> Path | None:
    """SLURMX_CACHE_DIR (empty: no cache), else $XDG_CACHE_HOME/slurmx, else ~/.cache/slurmx: files slurmx
    can always rebuild (the parsed form of YAML files), never results."""
    env = os.environ.get("SLURMX_CACHE_DIR")
    if env is not None:
        return Path(env) if env else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "slurmx"


def default_results() -> Path:
    if env := os.environ.get("SLURMX_RESULTS"):
        return Path(env)
    return Path.cwd() / "results"
