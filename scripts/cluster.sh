#!/usr/bin/env bash
# An emulated cluster of N hosts on this machine, for multi-node runs over a real network stack.
#
# Each host is a network namespace (own TCP/IP stack, own address) whose processes run under
# `unshare -u` with their own hostname, so Open MPI sees separate nodes and talks TCP between
# them (shared memory only inside a host). The hosts hang off a bridge that lives in a switch
# namespace of its own: nothing is created in the caller's namespace, and the test subnet exists
# only on these links. Default subnet 198.18.7.0/24 (RFC 2544's range for network benchmark
# tests); host i (0-based) is 198.18.7.(i+1).
#
# Usage: scripts/cluster.sh [--name NAME] COMMAND [options]
#   up    [--hosts N] [--rate R] [--delay D] [--loss L] [--link auto|veth|vde]
#                                  build (after removing any old one)
#   shape [--host I|all] [--rate R] [--delay D] [--loss L]  change a link while jobs run
#   run   [--ranks-per-host L] [--timeout SEC] [--mca K V]... -- CMD...
#                                  mpirun from host 0 across all hosts (rank = host·L + local)
#   exec  I -- CMD...              a command on host I (its namespace and hostname)
#   with  [up options] [run options] -- CMD...   up, run, down (also on error / Ctrl-C)
#   down                           remove namespaces, links, state; kill processes left in them
#   status                         hosts, addresses and qdiscs
# Links: R is a tc rate ("10gbit", "200mbit"), D a delay ("50ms"), L a loss ("1%"). They shape the
# egress of each host's link (host → bridge): one-way delay host→host is D, each direction is
# limited by the sender's R. Unset = unshaped.
# A host's link is a veth pair into the bridge, shaped by tc (tbf, netem) — or, where the kernel
# has no netem qdisc and a delay is asked for at `up` (--link auto, the default; or --link vde),
# a tap device carried by vde2 in userspace: host tap ← vde_switch (in the host) → wirefilter
# (its delay on the host → switch direction only, so one-way host→host is D as with netem) →
# vde_switch (in the switch namespace). Rate (tbf) and loss (nftables) act on the tap as on the
# veth. The vde link moves ~34 MB/s unshaped on this 2-core host: for delay and loss tests,
# not for bandwidth benchmarks.
# NAME (default $BURST_CLUSTER_NAME or "burst"; "auto" = burst<pid>) keeps concurrent clusters
# apart: namespaces are NAME-h0.., NAME-sw; state in /run/burst-cluster/NAME (rsh agent, hosts).
# The hosts share this machine's cores, so ranks yield when idle (mpi_yield_when_idle: without it
# 4 polling ranks on 2 cores made a 4-byte MPI_Allreduce over the links take 52 ms instead of 1).
# `run` forwards the BURST_* and OMP_* environment variables to every rank (mpirun -x).
# Exit status: the command's; 77 when namespaces cannot be made here (not root, no
# CAP_NET_ADMIN, no `ip`/`tc`/`unshare`/`mpirun`) — ctest's "skipped".
set -euo pipefail

name=${BURST_CLUSTER_NAME:-burst}
subnet_prefix=${BURST_CLUSTER_SUBNET:-198.18.7}
hosts=2
ranks_per_host=2
timeout_s=0
rate="" delay="" loss="" target=all given="" link=${BURST_CLUSTER_LINK:-auto}
mca=()

die() { echo "cluster.sh: $*" >&2; exit 2; }
skip() { echo "cluster.sh: SKIP: $*" >&2; exit 77; }
needs="multi-node tests need root with CAP_NET_ADMIN and ip, tc, unshare, mpirun"

[[ ${1:-} == --name ]] && { name=$2; shift 2; }
[[ $name == auto ]] && name=burst$$   # unique while this process lives (ctest -j, parallel users)
[[ $name =~ ^[A-Za-z0-9_.-]{1,24}$ ]] || die "cluster name '$name' must be 1-24 of [A-Za-z0-9_.-]"
cmd=${1:-}; [[ -n $cmd ]] || { sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
shift
state=/run/burst-cluster/$name
sw=$name-sw
ns_of() { echo "$name-h$1"; }

parse_opts() {   # the options of up/shape/run/with; stops at "--"
  while [[ $# -gt 0 ]]; do
    case $1 in
      --hosts) hosts=$2; shift 2 ;;
      --rate) rate=$2; given+=r; shift 2 ;;
      --delay) delay=$2; given+=d; shift 2 ;;
      --loss) loss=$2; given+=l; shift 2 ;;
      --link) link=$2; shift 2 ;;
      --host) target=$2; shift 2 ;;
      --ranks-per-host|-L) ranks_per_host=$2; shift 2 ;;
      --timeout) timeout_s=$2; shift 2 ;;
      --mca) mca+=(--mca "$2" "$3"); shift 3 ;;
      --) shift; rest=("$@"); return ;;
      *) die "unknown option '$1'" ;;
    esac
  done
  rest=()
}

check_support() {
  for tool in ip tc unshare mpirun; do command -v "$tool" >/dev/null || skip "'$tool' not found; $needs"; done
  [[ $(id -u) == 0 ]] || skip "not root; $needs"
  ip netns add "$name-probe" 2>/dev/null || skip "cannot create a network namespace; $needs"
  ip netns del "$name-probe"
}

# Shapes one host's egress: tbf for the rate, netem for the delay (tbf as its child), an
# nftables rule dropping a random fraction of the packets for the loss (kernels without netem —
# CONFIG_NET_SCH_NETEM unset, as on some development hosts — still get rate and loss).
shape_dev() {
  local ns=$1 dev=$2
  tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
  ip netns exec "$ns" nft delete table inet burst_link 2>/dev/null || true
  if [[ -n $loss && $loss != 0 && $loss != 0% ]]; then
    command -v nft >/dev/null || skip "--loss needs nft (Debian package nftables)"
    local permille
    permille=$(awk -v x="${loss%\%}" 'BEGIN { printf "%d", x * 10 + 0.5 }')
    local match="numgen random mod 1000 < $permille"
    ((permille >= 1000)) && match=""
    printf 'table inet burst_link {\n chain out {\n  type filter hook output priority 0;\n  oifname "%s" %s counter drop\n }\n}\n' \
      "$dev" "$match" | ip netns exec "$ns" nft -f - || skip "nftables rejected the loss rule"
  fi
  local parent=root
  if [[ -S $state/vde/$ns.wf.mgmt ]]; then
    vde_delay "$ns" "$(delay_ms "${delay:-0}")"
  elif has_delay; then
    tc -n "$ns" qdisc add dev "$dev" root handle 1: netem delay "$delay" limit 100000 2>/dev/null ||
      skip "--delay needs the netem qdisc, which this kernel lacks (CONFIG_NET_SCH_NETEM); bring the" \
           "cluster up with the delay (up --delay D) to carry its links through vde2 instead"
    parent="parent 1:1"
  fi
  if [[ -n $rate ]]; then
    # burst: 2 ms at the rate, at least 256 KiB (veth hands tbf GSO super-packets up to 64 KiB).
    local bps burst
    bps=$(tc_rate_bytes "$rate")
    burst=$(( bps / 500 > 262144 ? bps / 500 : 262144 ))
    tc -n "$ns" qdisc add dev "$dev" $parent handle 10: tbf rate "$rate" burst "$burst" latency 200ms
  fi
  # Recorded once applied: a refused setting (no netem) leaves the link's record as it was.
  printf '%s\n%s\n%s\n' "$rate" "$delay" "$loss" > "$state/link.$ns"
  return 0
}

has_delay() { [[ -n $delay && $delay != 0 && $delay != 0ms ]]; }

delay_ms() {   # "50ms", "0.2s", "50" (ms) → whole milliseconds, as wirefilter takes them
  local v=${1,,}
  case $v in
    *ms) v=${v%ms} ;;
    *us) v=$(awk -v x="${v%us}" 'BEGIN { print x / 1000 }') ;;
    *s) v=$(awk -v x="${v%s}" 'BEGIN { print x * 1000 }') ;;
  esac
  [[ $v =~ ^[0-9]*\.?[0-9]+$ ]] || die "delay '$1': use ms, s or us"
  awk -v x="$v" 'BEGIN { printf "%d", x + 0.5 }'
}

# True when this kernel has the netem qdisc (tried on the loopback of a scratch namespace).
have_netem() {
  local probe=$name-netem ok=1
  ip netns add "$probe" 2>/dev/null || return 1
  ip -n "$probe" link set lo up
  tc -n "$probe" qdisc add dev lo root netem delay 1ms 2>/dev/null || ok=0
  ip netns del "$probe"
  ((ok))
}

# Sets the one-way delay (ms) of host NS's vde link: its wirefilter's host → switch direction,
# through the wirefilter's management socket; read back, since unixcmd's status says nothing.
vde_delay() {
  local sock=$state/vde/$1.wf.mgmt
  unixcmd -f /etc/vde2/vdecmd -s "$sock" delay "LR$2" >/dev/null 2>&1 || true
  { unixcmd -f /etc/vde2/vdecmd -s "$sock" showinfo 2>/dev/null || true; } | tr -d '\0' | grep "Delay  L->R $2+" >/dev/null ||
    die "could not set the delay of $1's vde link to $2 ms (wirefilter $sock)"
}

# Host NS's link through vde2 (see the header): a tap named eth0 in NS, owned by a vde_switch
# running in NS; a wirefilter in the switch namespace plugs that switch into the cluster's.
# Every process runs inside one of the cluster's namespaces, so `down` ends them with the
# namespaces; their logs are in $state/vde.
vde_host_link() {
  local ns=$1 dir=$state/vde
  ip netns exec "$ns" vde_switch --tap eth0 --sock "$dir/$ns.sock" --daemon --pidfile "$dir/$ns.sw.pid" \
    </dev/null >>"$dir/$ns.log" 2>&1 || die "vde_switch for $ns failed (see $dir/$ns.log)"
  ip netns exec "$sw" wirefilter --vde-plug "$dir/$ns.sock:$dir/switch.sock" --mgmt "$dir/$ns.wf.mgmt" \
    --daemon --pidfile "$dir/$ns.wf.pid" </dev/null >>"$dir/$ns.log" 2>&1 || die "wirefilter for $ns failed (see $dir/$ns.log)"
  local i
  for ((i = 0; i < 50; ++i)); do   # the daemons come up asynchronously
    [[ -S $dir/$ns.wf.mgmt ]] && ip -n "$ns" link show eth0 >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "the vde link of $ns did not come up within 5 s (see $dir/$ns.log)"
}

tc_rate_bytes() {   # "10gbit" → bytes/s
  local v=${1,,} mult
  case $v in
    *gbit) mult=125000000; v=${v%gbit} ;;
    *mbit) mult=125000; v=${v%mbit} ;;
    *kbit) mult=125; v=${v%kbit} ;;
    *) die "rate '$1': use kbit, mbit or gbit" ;;
  esac
  awk -v x="$v" -v m="$mult" 'BEGIN { printf "%d", x * m }'
}

do_down() {
  local ns pids
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${name//./\\.}-(h[0-9]+|sw)$" || true); do
    # Processes still inside the namespace (ranks, orted of an interrupted run) were started by
    # this cluster; end them by id before the namespace goes.
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -n $pids ]] && kill -9 $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$state"
}

do_up() {
  check_support
  [[ $hosts =~ ^[0-9]+$ && $hosts -ge 1 && $hosts -le 200 ]] || die "--hosts $hosts must be 1..200"
  do_down
  trap 'do_down' EXIT   # a failed or skipped up leaves nothing behind
  mkdir -p "$state"
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  if [[ $link == auto ]]; then
    link=veth
    has_delay && ! have_netem && link=vde
  fi
  if [[ $link == vde ]]; then
    for tool in vde_switch wirefilter unixcmd; do
      command -v "$tool" >/dev/null ||
        skip "'$tool' not found: a delay on a kernel without netem needs vde2 (Debian package vde2)"
    done
    mkdir -p "$state/vde"
    ip netns exec "$sw" vde_switch --sock "$state/vde/switch.sock" --daemon --pidfile "$state/vde/switch.pid" \
      </dev/null >>"$state/vde/switch.log" 2>&1 || die "vde_switch failed (see $state/vde/switch.log)"
  else
    [[ $link == veth ]] || die "--link $link: use auto, veth or vde"
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up
  fi
  local i ns list=""
  for ((i = 0; i < hosts; ++i)); do
    ns=$(ns_of $i)
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    if [[ $link == vde ]]; then
      vde_host_link "$ns"
    else
      ip -n "$sw" link add "p$i" type veth peer name eth0 netns "$ns"
      ip -n "$sw" link set "p$i" master br0 up
    fi
    ip -n "$ns" addr add "$subnet_prefix.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    shape_dev "$ns" eth0
    list+="$subnet_prefix.$((i + 1)) $ns"$'\n'
  done
  printf '%s' "$list" > "$state/hosts"
  # The rsh agent mpirun calls as `agent HOST COMMAND...`: run COMMAND in HOST's namespace
  # under its own hostname.
  cat > "$state/agent" <<EOF
#!/bin/sh
host=\$1; shift
ns=\$(awk -v h="\$host" '\$1 == h { print \$2 }' "$state/hosts")
[ -n "\$ns" ] || { echo "burst cluster agent: unknown host \$host" >&2; exit 1; }
exec ip netns exec "\$ns" unshare -u sh -c "hostname \$ns; exec \$*"
EOF
  chmod +x "$state/agent"
  trap - EXIT
  echo "cluster $name: $hosts hosts on $subnet_prefix.0/24 ($link links)${rate:+ rate $rate}${delay:+ delay $delay}${loss:+ loss $loss}" >&2
}

require_up() { [[ -f $state/hosts ]] || die "cluster '$name' is not up (scripts/cluster.sh --name $name up)"; }

do_shape() {
  require_up
  local i n
  n=$(wc -l < "$state/hosts")
  for ((i = 0; i < n; ++i)); do
    [[ $target == all || $target == "$i" ]] || continue
    # Options not given keep the link's current value.
    local old=() ns
    ns=$(ns_of $i)
    mapfile -t old < "$state/link.$ns"
    ( [[ $given == *r* ]] || rate=${old[0]:-}; [[ $given == *d* ]] || delay=${old[1]:-}
      [[ $given == *l* ]] || loss=${old[2]:-}; shape_dev "$ns" eth0 )
  done
  return 0
}

do_run() {
  require_up
  [[ ${#rest[@]} -gt 0 ]] || die "run: no command (run [options] -- CMD...)"
  local n hostlist
  n=$(wc -l < "$state/hosts")
  hostlist=$(awk -v L="$ranks_per_host" '{ printf "%s%s:%d", (NR > 1 ? "," : ""), $1, L }' "$state/hosts")
  local net="$subnet_prefix.0/24"
  local mpi=(mpirun --mca plm_rsh_agent "$state/agent" --mca oob_tcp_if_include "$net"
             --mca btl_tcp_if_include "$net" --mca btl self,vader,tcp --mca pml ob1
             --mca mpi_yield_when_idle 1
             --host "$hostlist" -n $((n * ranks_per_host)) --map-by slot --oversubscribe
             --bind-to none "${mca[@]}" "${rest[@]}")
  local v
  for v in $(compgen -e | grep -E '^(BURST_|OMP_)' || true); do mpi=("${mpi[0]}" -x "$v" "${mpi[@]:1}"); done
  local quoted
  quoted=$(printf '%q ' "${mpi[@]}")
  local wrap=()
  [[ $timeout_s != 0 ]] && wrap=(timeout -s KILL "$timeout_s")
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  "${wrap[@]}" ip netns exec "$(ns_of 0)" unshare -u sh -c "hostname $(ns_of 0); exec $quoted"
}

do_exec() {
  require_up
  local i=$1; shift
  [[ ${1:-} == -- ]] && shift
  local quoted
  quoted=$(printf '%q ' "$@")
  ip netns exec "$(ns_of "$i")" unshare -u sh -c "hostname $(ns_of "$i"); exec $quoted"
}

case $cmd in
  up) parse_opts "$@"; do_up ;;
  down) do_down ;;
  shape) parse_opts "$@"; do_shape ;;
  run) parse_opts "$@"; do_run ;;
  exec) do_exec "$@" ;;
  with)
    parse_opts "$@"
    trap 'exit 130' INT TERM
    do_up
    trap 'do_down' EXIT
    set +e
    do_run
    rc=$?
    exit $rc ;;
  status)
    require_up
    cat "$state/hosts"
    while read -r _ ns; do
      echo "== $ns"; ip -n "$ns" -br addr show dev eth0; tc -n "$ns" qdisc show dev eth0
      [[ -S $state/vde/$ns.wf.mgmt ]] && { echo -n "vde wirefilter (L = host → switch): "
        { unixcmd -f /etc/vde2/vdecmd -s "$state/vde/$ns.wf.mgmt" showinfo 2>/dev/null || true; } | tr -d '\0' | grep "Delay  "; }
    done < "$state/hosts" ;;
  *) die "unknown command '$cmd' (up, shape, run, exec, with, down, status)" ;;
esac
