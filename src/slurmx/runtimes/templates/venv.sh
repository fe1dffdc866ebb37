#!/bin/bash
# Setup lines of a job whose processes run from Python environments on the node (runtime kind venv).
# Stop Python from writing bytecode into shared environments from many nodes at once.
export PYTHONDONTWRITEBYTECODE=1
