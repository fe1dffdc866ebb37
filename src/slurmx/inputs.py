"""What the commands read: master configs, cluster profiles, serving recipes and the expanded points."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from slurmx import paths, runtimes
from slurmx.config.clusters import ClusterProfile
from slurmx.config.inferencex import open_checkout
from slurmx.config.load import Clusters, Masters, load_clusters, load_masters, overlay_figures, with_workspace
from slurmx.errors import UserError
from slurmx.plan import Point, expand_each
from slurmx.recipes.load import Recipes, load_recipes
from slurmx.recipes.resolve import match_values


@dataclass
class Inputs:
    masters: Masters
    clusters: Clusters
    points: list[Point]
    errors: list[UserError] = field(default_factory=list)  # one per bad key: the other keys go on without it
    # --inferencex DIR: the user's InferenceX checkout (its benchmarks/ and runners/ are read from here)
    inferencex: Path | None = None
    jobs_dir: Path | None = None  # the recipes' directory; None: paths.jobs_dir()
    _recipes: Recipes | None = field(default=None, repr=False)

    def recipes(self) -> Recipes:
        """Loaded on first use: `slurmx plan` of a key without recipes never reads jobs/."""
        if self._recipes is None:
            self._recipes = load_recipes(self.jobs_dir or paths.jobs_dir())
        return self._recipes

    def recipe_name(self, point: Point) -> str | None:
        found = self.recipes().find(match_values(point))
        return found.recipe.recipe if found else None

    @property
    def warnings(self) -> list[str]:
        return [*self.masters.warnings, *self.clusters.warnings]

    def submittable_profile(self, point: Point) -> ClusterProfile:
        """The point's cluster profile, which must say how to ask Slurm for a node."""
        profile = self.clusters.profile(point.runner)
        if profile is None or point.runner in self.clusters.figures_only:
            figures = self.clusters.figures_only.get(point.runner, -1)
            only = f" (only hardware figures, in {self.clusters.figures_path}:{figures})" if figures != -1 else ""
            raise UserError(
                f"{self.clusters.path}: hardware.{point.runner}: no entry for this label{only}, cannot submit"
            )
        if profile.slurm is None:
            line = self.clusters.lines.get(point.runner)
            raise UserError(f"{self.clusters.path}:{line}: hardware.{point.runner}: no slurm section, cannot submit")
        return profile

    def key_points(self, key: str) -> list[Point]:
        return [p for p in self.points if p.config_key == key]

    def config_keys(self) -> list[str]:
        return list(dict.fromkeys(p.config_key for p in self.points))


def load_inputs(
    config_files: list[Path] | None,
    clusters_file: Path | None,
    keys: list[str],
    all_keys: bool = False,
    keep_going: bool = False,
    inferencex: Path | None = None,
) -> Inputs:
    """`keep_going`: a named key's own problem goes into `errors` (as always with `all_keys`) instead of
    being raised, so a command serves the other keys and reports that one.

    `inferencex`: a user's InferenceX checkout. Its configs/*-master.yaml are the masters unless
    `config_files` names others; its runners.yaml's figures are laid over the cluster profiles
    (`clusters_file`, else slurmx's own), which add how Slurm is asked and how processes start."""
    checkout = open_checkout(inferencex) if inferencex is not None else None
    config_files = config_files or (checkout.masters if checkout else paths.default_masters())
    if not config_files:
        raise UserError(f"no master config found in {paths.config_dir()}; pass --config FILE")
    masters = load_masters(config_files)
    clusters = load_clusters(clusters_file or paths.default_clusters())
    if checkout is not None:
        clusters = with_workspace(overlay_figures(clusters, load_clusters(checkout.runners)), checkout.root)
    clusters.errors |= runtimes.kind_errors(clusters.path, clusters.profiles, clusters.lines)
    if all_keys:
        keys = list(masters.sources)
    if not keys:
        raise UserError("name at least one config key, or --all")
    points, errors = expand_each(keys, masters, clusters)
    if errors and not (all_keys or keep_going):
        raise errors[0]
    return Inputs(masters, clusters, points, list(errors), checkout.root if checkout else None)
