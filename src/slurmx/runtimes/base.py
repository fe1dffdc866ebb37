"""A runtime: where a point's tools, model and caches are on the node, and how a process starts there.

Each kind (venv, pyxis, command) is one module with a `Runtime` subclass; `runtimes.register` adds one.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import ClassVar, Self

from slurmx import paths
from slurmx.config.clusters import RuntimeProfile
from slurmx.errors import UserError

_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)")


def expand(value: str, env: dict[str, str] | None = None) -> str:
    """Shell-style ${VAR:-default} and $VAR expansion of profile paths (no other shell syntax)."""
    env = dict(os.environ) if env is None else env

    def sub(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        default = match.group(2)
        return env.get(name) or (default if default is not None else "")

    return _VAR.sub(sub, value)


def template_text(name: str) -> tuple[str, str]:
    """(text, where it came from) of an sbatch preamble: the site's <templates_dir>/<name> when there is one
    (paths.templates_dir), else the one shipped in the package (slurmx/runtimes/templates/<name>)."""
    site = paths.templates_dir() / name
    try:
        return site.read_text(encoding="utf-8"), str(site)
    except FileNotFoundError:
        pass
    except OSError as exc:  # there but unreadable: a site's preamble silently replaced would mislead
        raise UserError(f"sbatch template {site}: {exc.strerror or exc}") from None
    resource = resources.files("slurmx.runtimes").joinpath("templates", name)
    try:
        return resource.read_text(encoding="utf-8"), f"slurmx/runtimes/templates/{name} (packaged)"
    except FileNotFoundError:
        raise UserError(f"sbatch template {name} is missing from the slurmx package (reinstall slurmx)") from None


@dataclass(frozen=True)
class Runtime:
    """Resolved for one point. Subclasses set `kind` and say how processes start."""

    kind: ClassVar[str] = ""
    template: ClassVar[str | None] = None  # sbatch preamble (a site's sbatch_templates/ or templates/), None for none
    serves: ClassVar[bool] = True  # False: the point's work is the profile's command, not a server stack
    tools_on_host: ClassVar[bool] = False  # True: preflight can check the tools from the job's own host
    passes_sigint: ClassVar[bool] = True  # a SIGINT to the wrapped argv reaches the process (no srun in between)
    installs: ClassVar[bool] = False  # True: provisioning installs pinned versions (a disposable container)
    downloads: ClassVar[bool] = False  # True: provisioning may download models and datasets

    engine_python: str = "python3"
    lmcache_bin: str = "lmcache"
    aiperf_bin: str = "aiperf"
    aiperf_python: str = "python3"  # the interpreter of aiperf's environment (the lock reads versions with it)
    aiperf_source: str | None = None  # pip requirement provisioning installs into aiperf's own venv
    mooncake_master_bin: str = "mooncake_master"
    model_root: str | None = None
    hf_home: str | None = None
    trace_dir: str | None = None
    image: str | None = None
    engine_pythonpath: str | None = None  # the engine process's PYTHONPATH, when the profile names one
    command: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # the profile's runtime.env: exported by the job script

    @classmethod
    def from_profile(cls, profile: RuntimeProfile, image: str | None) -> Self:
        raise NotImplementedError

    def inferencex_dir(self) -> str | None:
        """Where the point's processes see an InferenceX checkout (its scripts run from there), or None."""
        return None

    def model_path(self, model: str) -> str:
        return str(Path(self.model_root) / model) if self.model_root else model

    def head(self, launcher: list[str]) -> list[str]:
        """A recipe launcher with {engine_python} filled in."""
        return [part.replace("{engine_python}", self.engine_python) for part in launcher]

    def wrap(self, argv: list[str], name: str) -> list[str]:
        """The argv that starts `argv` on this node (as is, unless the runtime adds a container)."""
        return list(argv)

    def place(self, wrapped: list[str], name: str, prefix: list[str]) -> list[str]:
        """A wrapped argv with a placement launcher (numactl ...) right before the process's own argv:
        on the host here, inside the container where the runtime adds one."""
        return [*prefix, *wrapped]

    def template_values(self) -> dict[str, str]:
        return {"image": self.image or "", "hf_home": self.hf_home or ""}

    def setup_lines(self) -> list[str]:
        """The job script's setup lines: the profile's env exported, then the kind's template with this
        runtime's values filled in (the template's own first line names which preamble ran)."""
        lines = [f"export {name}={shlex.quote(value)}" for name, value in self.env]
        if self.template is None:
            return lines
        text, where = template_text(self.template)
        lines.append(f"# sbatch template: {where}")  # which preamble ran, in the script itself and in `render`
        for line in text.splitlines():
            if line.startswith("#!") or not line.strip():
                continue
            for key, value in self.template_values().items():
                line = line.replace("{" + key + "}", shlex.quote(value))
            lines.append(line)
        return lines
