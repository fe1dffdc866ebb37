"""Options and loading shared by the subcommands that read configs."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from slurmx import paths
from slurmx.config.load import Clusters, Masters, load_clusters, load_masters
from slurmx.errors import UserError
from slurmx.plan import Point, expand
from slurmx.recipes.load import Recipes, load_recipes


def add_config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        action="append",
        type=Path,
        metavar="FILE",
        help="master config file (repeatable; default: configs/*master*.yaml)",
    )
    parser.add_argument(
        "--clusters", type=Path, metavar="FILE", help="cluster profiles (default: configs/clusters.yaml)"
    )


@dataclass
class Loaded:
    masters: Masters
    clusters: Clusters
    points: list[Point]
    _recipes: Recipes | None = None

    def recipes(self) -> Recipes:
        if self._recipes is None:
            self._recipes = load_recipes(paths.jobs_dir())
        return self._recipes

    def recipe_name(self, point: Point) -> str | None:
        found = self.recipes().find(point.model_prefix, point.precision, point.framework, point.runner)
        return found.recipe.recipe if found else None


def load_points(args: argparse.Namespace, keys: list[str], all_keys: bool = False) -> Loaded:
    config_files = args.config or paths.default_masters()
    if not config_files:
        raise UserError(f"no master config found in {paths.config_dir()}; pass --config FILE")
    masters = load_masters(config_files)
    clusters = load_clusters(args.clusters or paths.default_clusters())
    if all_keys:
        keys = list(masters.configs)
    if not keys:
        raise UserError("name at least one config key, or --all")
    return Loaded(masters, clusters, expand(keys, masters, clusters))
