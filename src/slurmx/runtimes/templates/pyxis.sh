#!/bin/bash
# Setup lines of a job whose processes run in a pyxis/enroot container (runtime kind pyxis).
# Import the image once per node, under a lock, as InferenceX's launchers do. A reused squash file must
# read as squashfs (an import killed mid-write leaves a torn one): else it is imported again, to a
# temporary name renamed into place, so a squash file that exists under its final name is whole.
export PYTHONDONTWRITEBYTECODE=1
mkdir -p {squash_dir}
slurmx_squash_ok() { if command -v unsquashfs >/dev/null; then unsquashfs -s "$1" >/dev/null 2>&1; else [ -s "$1" ]; fi; }
exec 9>{squash_path}.lock && flock 9
if ! slurmx_squash_ok {squash_path}; then rm -f {squash_path}; enroot import -o {squash_path}.partial.$SLURM_JOB_ID docker://{image} && mv -f {squash_path}.partial.$SLURM_JOB_ID {squash_path}; fi
exec 9>&-
slurmx_squash_ok {squash_path} || { echo "slurmx: the image {image} did not import to a valid squash file {squash_path}" >&2; exit 1; }
