#!/usr/bin/env bash
# build.sh [BUILD_DIR] [CMAKE_ARGS...] — configure and build with two jobs.
# Release (GCC 12 at -O3, -Werror as the top-level project): the build a
# newcomer makes, so README command 2 also proves it; pass
# -DCMAKE_BUILD_TYPE=RelWithDebInfo for a tree to debug in.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true
bash scripts/install-deps.sh
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "$@" >/dev/null
cmake --build "$build_dir" -j2
