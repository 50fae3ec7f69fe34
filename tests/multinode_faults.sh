#!/usr/bin/env bash
# Fault tests on the emulated cluster (docs/multinode.md § No hang): 2 hosts × 2 ranks over TCP.
#
# Usage: tests/multinode_faults.sh CASE BUILD_DIR
# The job that is killed or cut is BUILD_DIR/tests/fault_target (burst forward + backward passes
# in a loop; its argument is DistConfig::comm_timeout_seconds).
#   kill     kill -9 one rank of host 1 mid-ring: every rank gone and mpirun exited non-zero
#            within 10 s of the kill
#   cut      100 % loss on every host's link mid-run, BURST_COMM_TIMEOUT=20: every rank exits
#            within 40 s of the cut, each host's ranks with the watchdog's message (naming the
#            rank, host, peer, strategy and ring step)
#   lossy    50 ms one-way delay (netem, or vde2 where the kernel has none: cluster.sh) and 1 %
#            loss on every link: the Multinode.* tests of test_strategies (zigzag layout) complete,
#            exact against fp64
#   resume   `burst-lm train` (tiny model, synthetic corpus from lm_test_corpus,
#            checkpoint every 3 steps) is killed with kill -9 of one rank on host 1 after its
#            first checkpoint; rerun, it resumes from the checkpoint and ends bitwise equal to an
#            uninterrupted run: every tensor of the final checkpoint (weights, AdamW moments),
#            step, AdamW t, and the loss log (tests/lm_runs_equal.py). Skipped (77) in builds
#            without the language model.
# Exit: 0 pass, 1 fail, 77 skipped (no namespaces here). Every cluster this script makes is
# removed on exit (cluster.sh down), whatever happens.
set -euo pipefail
case_=${1:?case: kill, cut, lossy or resume}
build=$(cd "${2:?build directory}" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
target=$build/tests/fault_target
[[ $case_ == resume ]] && target=$build/tools/burst-lm
cluster=$root/scripts/cluster.sh
name=burstf$$
state=/run/burst-cluster/$name
log=$(mktemp -d /tmp/burst-faults.XXXXXX)
mpirun_pid=""

cleanup() {
  [[ -n $mpirun_pid ]] && kill -9 "$mpirun_pid" 2>/dev/null || true
  "$cluster" --name "$name" down 2>/dev/null || true
  rm -rf "$log"
}
trap cleanup EXIT
fail() {
  echo "FAIL ($case_): $*" >&2
  local pid
  for pid in $(ranks_on 0) $(ranks_on 1); do
    echo "alive: pid $pid state $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) wchan $(cat "/proc/$pid/wchan" 2>/dev/null)" >&2
  done
  echo "--- job stderr" >&2
  tail -n 40 "$log/err" >&2 || true
  [[ -d $log/ranks ]] && find "$log/ranks" -name stderr -exec tail -n 5 {} + >&2
  exit 1
}

# Ranks of the job still alive on host I: the processes in that namespace running the target.
ranks_on() {
  local pid
  for pid in $(ip netns pids "$name-h$1" 2>/dev/null); do
    [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$target" ]] && echo "$pid"
  done
  return 0
}
ranks_alive() { { ranks_on 0; ranks_on 1; } | wc -l; }

# Starts fault_target (watchdog timeout $1 s) on 2 hosts × 2 ranks in the background.
start_job() {
  # Each rank's output also goes to a file written by its own host's daemon (mpirun
  # --output-filename): what a rank prints after its link is cut never reaches mpirun.
  OMP_NUM_THREADS=1 "$cluster" --name "$name" run --ranks-per-host 2 --timeout 170 -- \
    --output-filename "$log/ranks" "$target" "$1" >"$log/out" 2>"$log/err" &
  mpirun_pid=$!
  # Mid-ring = host 1 has sent 4 MB over its link: far more than MPI_Init's wire-up (a few KB;
  # cutting the link during MPI_Init would test Open MPI's start-up, not burst), a few dozen
  # passes of this case. At most 60 s on a loaded host.
  local i tx
  for ((i = 0; i < 600; ++i)); do
    tx=$(ip netns exec "$name-h1" cat /sys/class/net/eth0/statistics/tx_bytes)
    ((tx > 4000000)) && break
    kill -0 "$mpirun_pid" 2>/dev/null || fail "the job ended before the fault"
    sleep 0.1
  done
  ((tx > 4000000)) || fail "the job did not reach its passes within 60 s"
  [[ $(ranks_alive) == 4 ]] || fail "not all 4 ranks are running"
  kill -0 "$mpirun_pid" 2>/dev/null || fail "the job ended before the fault"
}

# Waits up to $1 s for every rank to be gone; prints the seconds it took.
wait_ranks_gone() {
  local t0 now
  t0=$(date +%s.%N)
  while (($(ranks_alive) > 0)); do
    now=$(date +%s.%N)
    awk -v a="$t0" -v b="$now" -v l="$1" 'BEGIN { exit !(b - a > l) }' && return 1
    sleep 0.1
  done
  awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'
}

up_opts=(--hosts 2)
# 50 ms one-way on every host's link from the start (netem, or vde2 where the kernel lacks it).
[[ $case_ == lossy ]] && up_opts+=(--delay 50ms)
"$cluster" --name "$name" up "${up_opts[@]}" || exit $?

case $case_ in
  resume)
    corpus=$build/tests/lm_test_corpus
    if [[ ! -x $corpus || ! -x $target ]]; then
      echo "resume: SKIP: this build has no language model (burst-lm needs BURST_WITH_TORCH)"
      exit 77
    fi
    "$corpus" "$log/data" 11 6 700 140
    steps=24 every=3
    train=("$target" train --data "$log/data" --strategy burst --layout zigzag --threads 1 --seq-len 1024
           --layers 2 --d-model 32 --heads 4 --kv-heads 2 --head-dim 8 --ffn 48 --lr 1e-2 --warmup 2
           --steps $steps --checkpoint-every $every --head-chunk 256 --no-plot)
    run_train() {  # OUT_DIR: the training job on 2 hosts x 2 ranks, in the background
      OMP_NUM_THREADS=1 "$cluster" --name "$name" run --ranks-per-host 2 --timeout 170 -- \
        "${train[@]}" --out "$1" >"$log/out" 2>"$log/err" &
      mpirun_pid=$!
    }
    lines() { [[ -f $1/train_log.jsonl ]] && wc -l <"$1/train_log.jsonl" || echo 0; }
    # 1. The uninterrupted run.
    t0=$(date +%s)
    run_train "$log/full"
    wait "$mpirun_pid" || fail "the uninterrupted run failed"
    mpirun_pid=""
    echo "resume: uninterrupted run: $steps steps in $(($(date +%s) - t0)) s"
    # 2. The same run, killed after its first checkpoint with steps done past it.
    run_train "$log/run"
    for ((i = 0; i < 1200; ++i)); do
      (($(lines "$log/run") >= every + 2)) && break
      kill -0 "$mpirun_pid" 2>/dev/null || fail "the training job ended before the kill"
      sleep 0.05
    done
    done_steps=$(lines "$log/run")
    ((done_steps >= every + 2 && done_steps < steps)) || fail "kill point missed: $done_steps of $steps steps logged"
    victims=($(ranks_on 1))
    ((${#victims[@]} == 2)) || fail "expected 2 ranks on host 1, found ${#victims[@]}"
    kill -9 "${victims[0]}"
    set +e; wait "$mpirun_pid"; rc=$?; set -e
    mpirun_pid=""
    ((rc != 0)) || fail "mpirun exited 0 after a rank was killed"
    killed_at=$(lines "$log/run")
    ((killed_at < steps)) || fail "the job finished all $steps steps before it was killed"
    echo "resume: killed one rank on host 1 after $done_steps logged steps (mpirun rc=$rc, $killed_at steps logged)"
    # 3. Rerun: it resumes from the checkpoint and finishes.
    run_train "$log/run"
    wait "$mpirun_pid" || fail "the resumed run failed"
    mpirun_pid=""
    from=$(sed -n 's/^train: resuming .* after step \([0-9]*\)$/\1/p' "$log/err")
    [[ -n $from ]] || fail "the rerun did not resume from a checkpoint"
    # (The kill may land just after a checkpoint: rank 0 logs a step, then saves it.)
    ((from >= every && from % every == 0 && from <= killed_at && from < steps)) ||
      fail "resumed after step $from: not a checkpoint between step $every and the kill at $killed_at"
    echo "resume: the rerun resumed after step $from and ran steps $((from + 1))..$steps"
    # 4. Bitwise equal to the uninterrupted run.
    "${BURST_PYTHON:-/usr/bin/python3}" "$root/tests/lm_runs_equal.py" "$log/full" "$log/run" || fail "the resumed run differs"
    ;;
  kill)
    start_job 300
    victims=($(ranks_on 1))
    victim=${victims[0]}
    t0=$(date +%s.%N)
    kill -9 "$victim"
    took=$(wait_ranks_gone 10) || fail "ranks still alive 10 s after kill -9 of pid $victim"
    # mpirun must exit too, non-zero, within the same 10 s.
    while kill -0 "$mpirun_pid" 2>/dev/null; do
      awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { exit !(b - a > 10) }' && fail "mpirun alive 10 s after the kill"
      sleep 0.1
    done
    set +e
    wait "$mpirun_pid"
    rc=$?
    set -e
    mpirun_pid=""
    total=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    ((rc != 0)) || fail "mpirun exited 0 after a rank was killed"
    echo "kill: every rank gone ${took} s and mpirun exited rc=$rc ${total} s after kill -9 of one rank on host 1"
    ;;
  cut)
    start_job 20
    t0=$(date +%s.%N)
    "$cluster" --name "$name" shape --host all --loss 100%
    took=$(wait_ranks_gone 40) || fail "ranks still alive 40 s after the link was cut"
    # Every host's ranks reach the watchdog (ranks that mpirun's abort reached first may be
    # killed by it before their own watchdog fires; the message names the host).
    find "$log/ranks" -name stderr -exec cat {} + > "$log/rank_err" 2>/dev/null || true
    for h in 0 1; do
      grep -q "on host $name-h$h\] burst comm watchdog: .* did not complete within the timeout" "$log/rank_err" ||
        fail "no watchdog message from host $name-h$h"
    done
    grep "burst comm watchdog" "$log/rank_err" | grep -v "during strategy burst" >/dev/null &&
      fail "a watchdog message does not name the strategy"
    grep -q "waiting on .*rank" "$log/rank_err" || fail "the watchdog's message does not name the peer"
    n=$(grep -c "burst comm watchdog" "$log/rank_err" || true)
    echo "cut: every rank gone ${took} s after 100 % loss on the links (timeout 20 s); $n watchdog messages:"
    grep "burst comm watchdog" "$log/rank_err" | sed 's/^/  /'
    # mpirun (host 0) cannot reach host 1's daemon over the cut link; restoring the link lets
    # Open MPI's teardown finish, and cluster.sh down removes whatever is left.
    "$cluster" --name "$name" shape --host all --loss 0
    for ((i = 0; i < 100; ++i)); do kill -0 "$mpirun_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$mpirun_pid" 2>/dev/null; then
      echo "cut: mpirun still waiting for host 1's daemon 10 s after the link came back (removed by down)"
    else
      set +e; wait "$mpirun_pid"; rc=$?; set -e; mpirun_pid=""
      ((rc != 0)) || fail "mpirun exited 0 after the watchdog aborted"
      echo "cut: mpirun exited rc=$rc"
    fi
    ;;
  lossy)
    tests_exe=$build/tests/test_strategies
    "$cluster" --name "$name" shape --host all --loss 1%
    "$cluster" --name "$name" status | grep -E "qdisc|==|Delay" || true
    # The ruleset is captured before grep reads it: with pipefail, grep -q quitting at the match
    # killed nft with SIGPIPE mid-listing (exit 141) in ~15 % of runs.
    ruleset=$(ip netns exec "$name-h0" nft list ruleset)
    grep -q "numgen random mod 1000 < 10 counter" <<<"$ruleset" ||
      fail "the 1 % loss rule is not installed"
    # The delay is in place: a TCP connect to a closed port of host 1 is refused after one round
    # trip (SYN out, RST back), 2 × 50 ms; the fastest of 3 (a lost SYN costs a 1 s retransmit).
    rtt=$(ip netns exec "$name-h0" bash -c 'best=999999; for k in 1 2 3; do
            t0=$(date +%s%N); (exec 3<>/dev/tcp/'"$(sed -n 2p "$state/hosts" | cut -d' ' -f1)"'/9) 2>/dev/null
            t=$((($(date +%s%N) - t0) / 1000)); ((t < best)) && best=$t; done; echo $best')
    ((rtt >= 100000)) || fail "round trip host 0 → host 1 took $rtt µs: the 50 ms delay is not in place"
    start=$(date +%s)
    # One layout (zigzag): the whole sweep takes ~4 min of round trips at 50 ms.
    BURST_TEST_NODES=2 BURST_TEST_LAYOUTS=zigzag OMP_NUM_THREADS=1 BURST_COMM_TIMEOUT=60 \
      "$cluster" --name "$name" run --ranks-per-host 2 --timeout 240 -- \
      "$tests_exe" --gtest_filter='Multinode.*' >"$log/out" 2>"$log/err" ||
      fail "Multinode.* failed under 50 ms delay and 1 % loss"
    grep -q "PASSED" "$log/out" || fail "no gtest verdict"
    grep -q "SKIPPED" "$log/out" && fail "Multinode.* skipped"
    ruleset=$(ip netns exec "$name-h0" nft list ruleset)
    drops=$(sed -n 's/.*counter packets \([0-9]*\).*/\1/p' <<<"$ruleset" | sed -n 1p)
    echo "lossy: Multinode.* passed (exact vs fp64) under 50 ms one-way delay (TCP round trip" \
         "$((rtt / 1000)) ms) and 1 % loss in $(( $(date +%s) - start )) s${drops:+; $drops packets dropped on host 0}"
    ;;
  *) echo "unknown case '$case_' (kill, cut, lossy, resume)" >&2; exit 2 ;;
esac
