#!/usr/bin/env bash
# `burst calibrate` on the emulated cluster (docs/multinode.md): 2 hosts × 2
# ranks, each host's link limited to 200 Mbit/s (tc tbf). The written cluster spec must have
# nodes = 2, devices_per_node = 2, an inter-node bandwidth within [0.7, 1.05] × 25 MB/s (the tbf
# rate; measured 24.9 MB/s), the intra-node link faster than that, an inter-node latency > 0, and
# one inter-node link per host (the two ranks of a host crossing at once share its shaped link).
# Usage: tests/multinode_calibrate.sh BUILD_DIR. Exit: 0 pass, 1 fail, 77 skipped (no
# namespaces here). The cluster is removed on exit, whatever happens.
set -euo pipefail
build=$(cd "${1:?build directory}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
cluster=$root/scripts/cluster.sh
name=burstc$$
tmp=$(mktemp -d /tmp/burst-calibrate.XXXXXX)
trap '"$cluster" --name "$name" down 2>/dev/null || true; rm -rf "$tmp"' EXIT
"$cluster" --name "$name" up --hosts 2 --rate 200mbit || exit $?
OMP_NUM_THREADS=1 "$cluster" --name "$name" run --ranks-per-host 2 --timeout 170 -- \
  "$build/tools/burst" calibrate --threads 1 --seqs 256,512 --repeats 2 -o "$tmp/spec.json" >/dev/null
"${BURST_PYTHON:-/usr/bin/python3}" - "$tmp/spec.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
rate = 200e6 / 8
checks = [("nodes == 2", c["nodes"] == 2), ("devices_per_node == 2", c["devices_per_node"] == 2),
          ("inter_bandwidth within [0.7, 1.05] x 25 MB/s", 0.7 * rate <= c["inter_bandwidth"] <= 1.05 * rate),
          ("intra_bandwidth > inter_bandwidth", c["intra_bandwidth"] > c["inter_bandwidth"]),
          ("inter_latency > 0", c["inter_latency"] > 0),
          # One tbf shapes each host's egress: both ranks of a host cross on one link.
          ("inter_links_per_node == 1 (one shaped link per host)", c.get("inter_links_per_node") == 1)]
print(f"calibrate on 2 emulated hosts at 200 Mbit/s: inter {c['inter_bandwidth'] / 1e6:.1f} MB/s, "
      f"{c['inter_latency'] * 1e6:.0f} us, {c.get('inter_links_per_node')} link(s) per host; intra {c['intra_bandwidth'] / 1e6:.0f} MB/s, {c['intra_latency'] * 1e6:.0f} us")
bad = [what for what, ok in checks if not ok]
if bad:
    print("FAIL: " + "; ".join(bad), file=sys.stderr)
    sys.exit(1)
PY
