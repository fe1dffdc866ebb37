#!/bin/bash
# Setup lines of a job whose processes run in a pyxis/enroot container (runtime kind pyxis).
# Import the image once per node, under a lock, as InferenceX's launchers do.
export PYTHONDONTWRITEBYTECODE=1
mkdir -p {squash_dir}
if [ ! -f {squash_path} ]; then flock {squash_path}.lock bash -c '[ -f {squash_path} ] || enroot import -o {squash_path} docker://{image}'; fi
