#!/usr/bin/env bash
# The README's main job. (Grows into: prepare the KJV, train briefly, evaluate the whole
# Bible on 2 ranks, print a summary table — issue 4.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
./build/tools/burst info
