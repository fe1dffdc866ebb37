"""What the commands read: master configs, cluster profiles, serving recipes and the expanded points."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from slurmx import paths, runtimes
from slurmx.config.clusters import ClusterProfile
from slurmx.config.load import Clusters, Masters, load_clusters, load_masters
from slurmx.errors import UserError
from slurmx.plan import Point, expand
from slurmx.recipes.load import Recipes, load_recipes


@dataclass
class Inputs:
    masters: Masters
    clusters: Clusters
    points: list[Point]
    _recipes: Recipes | None = field(default=None, repr=False)

    def recipes(self) -> Recipes:
        """Loaded on first use: `slurmx plan` of a key without recipes never reads jobs/."""
        if self._recipes is None:
            self._recipes = load_recipes(paths.jobs_dir())
        return self._recipes

    def recipe_name(self, point: Point) -> str | None:
        found = self.recipes().find(point.model_prefix, point.precision, point.framework, point.runner)
        return found.recipe.recipe if found else None

    def profile(self, point: Point) -> ClusterProfile:
        return self.clusters.profiles[point.runner]

    def submittable_profile(self, point: Point) -> ClusterProfile:
        """The point's cluster profile, which must say how to ask Slurm for a node."""
        profile = self.profile(point)
        if profile.slurm is None:
            line = self.clusters.lines.get(point.runner)
            raise UserError(f"{self.clusters.path}:{line}: hardware.{point.runner}: no slurm section, cannot submit")
        return profile

    def key_points(self, key: str) -> list[Point]:
        return [p for p in self.points if p.config_key == key]

    def config_keys(self) -> list[str]:
        return list(dict.fromkeys(p.config_key for p in self.points))


def load_inputs(
    config_files: list[Path] | None, clusters_file: Path | None, keys: list[str], all_keys: bool = False
) -> Inputs:
    config_files = config_files or paths.default_masters()
    if not config_files:
        raise UserError(f"no master config found in {paths.config_dir()}; pass --config FILE")
    masters = load_masters(config_files)
    clusters = load_clusters(clusters_file or paths.default_clusters())
    runtimes.check_kinds(clusters.path, clusters.profiles, clusters.lines)
    if all_keys:
        keys = list(masters.configs)
    if not keys:
        raise UserError("name at least one config key, or --all")
    return Inputs(masters, clusters, expand(keys, masters, clusters))
