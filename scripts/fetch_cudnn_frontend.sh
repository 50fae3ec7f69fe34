#!/usr/bin/env bash
# Fetches the cuDNN frontend's headers (NVIDIA's header-only C++ API over cuDNN's graph backend)
# into third_party/cudnn_frontend/include (git-ignored), for the cuDNN backend of the CUDA step
# kernels (docs/gpu.md § cuDNN; CMake's BURST_CUDNN_FRONTEND_DIR points there by default).
# Source: the pinned PyPI wheel nvidia-cudnn-frontend (its include/ folder; the Python parts are
# not used), downloaded with pip into a temporary folder and checked against its pinned SHA-256.
# Idempotent and offline-safe: nothing is fetched when the headers of the pinned version are
# there already; without network (or pip) it says so and exits 0, and burst builds without the
# backend. Called by scripts/setup.sh (the tests group); BURST_CUDNN_FRONTEND=skip skips it.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
version=1.32.0
wheel=nvidia_cudnn_frontend-${version}-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
sha256=8b354a8e550c083eb247f1eb39a7d69a4a269075f5a01e4fcbd2531680b17239
dest=third_party/cudnn_frontend
stamp=$dest/VERSION
if [[ ${BURST_CUDNN_FRONTEND:-} == skip ]]; then
  echo "cudnn_frontend: skipped (BURST_CUDNN_FRONTEND=skip)" >&2
  exit 0
fi
if [[ -f $dest/include/cudnn_frontend.h && $(cat "$stamp" 2>/dev/null) == "$version" ]]; then
  echo "cudnn_frontend: $version present in $dest" >&2
  exit 0
fi
py=${BURST_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The wheel's headers are the same for every Python; the cp312 wheel is the one pinned.
if ! "$py" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --abi cp312 --platform manylinux_2_28_x86_64 -d "$tmp" "nvidia-cudnn-frontend==$version" >"$tmp/pip.log" 2>&1; then
  echo "cudnn_frontend: could not download nvidia-cudnn-frontend $version (offline?): the cuDNN step backend" \
    "stays off ($(tail -1 "$tmp/pip.log"))" >&2
  exit 0
fi
if [[ ! -f $tmp/$wheel ]] || ! echo "$sha256  $tmp/$wheel" | sha256sum --check --quiet; then
  echo "cudnn_frontend: the downloaded wheel is not $wheel with SHA-256 $sha256: not used" >&2
  exit 1
fi
rm -rf "$dest"
mkdir -p "$dest"
"$py" - "$tmp/$wheel" "$dest" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.startswith("include/") and not m.endswith("/")]
    z.extractall(dest, members)
    for m in z.namelist():  # the frontend's licence (MIT) travels with its headers
        if "LICENSE" in m.rsplit("/", 1)[-1].upper():
            with open(f"{dest}/LICENSE", "wb") as f:
                f.write(z.read(m))
print(f"cudnn_frontend: {len(members)} headers into {dest}/include", file=sys.stderr)
PY
echo "$version" >"$stamp"
