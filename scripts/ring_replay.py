#!/usr/bin/env python3
"""Replays the waits of the ring skeleton (RingExecutor::Run, src/strategies/ring_skeleton.h) on a
flat ring when one rank's steps cost F times the others' (docs/manycore.md § A slow rank,
emulated): who waits for whom, the pass's wall time against the slowest rank's busy time.

The dependencies, as the executor has them (transfers taken as free; every rank starts at 0):
  * rank r starts step t + 1 when its step t's compute is done, when its left neighbour has
    started step t (the payload for t + 1 and, backward, the chain partial of step t are posted
    then), and when its right neighbour has started step t - lag (the sends of step t - lag are
    matched then): lag 1 now ("prev": a step waits for the previous step's sends), 0 before
    ("own"), 2 for a buffer one deeper ("deep2");
  * backward: rank r's block is complete when its left neighbour, the last to compute on it,
    has finished its last step (the final hop), and after its own block's second half
    (split_own: half of the own block at step 0, half after the last step).
Step costs: forward 1 per step; backward 1 per full step, the own block's halves `own_first`
and 1 - own_first (causal zigzag: the query side's first half of query rows is the early chunk,
1/4 of the block's pairs, so burst computes 1/4 at step 0 and 3/4 after the last step; the KV
side's first half of key rows is the early keys, 3/4, so ring computes 3/4 first and 1/4 last);
the slow rank's steps F times that. Prints a Markdown table: wall, the slowest rank's busy time,
the longest wait of any rank (what `bench dist` reports as exposed_comm_seconds) and the sum of
the waits, per completion rule.

With --timeline FILE (`burst bench dist --timeline` of burst or ring, flat ring): replays each
timed pass with its own measured per-rank, per-step compute + copy seconds instead, and prints
per pass the wall time, the slowest rank's busy time, and every rank's measured and replayed wait.

Usage: scripts/ring_replay.py [--ranks 2 8 16] [--factors 1.15 1.3 1.6] [--own-first 0.25 0.75]
       scripts/ring_replay.py --timeline TL.jsonl
"""
import argparse
import collections
import json


def replay(P, cost, fin, lag, backward, start=None):
    """cost[r][t]: rank r's compute at step t; fin[r]: its work after the last step; start[r]:
    when rank r enters the pass (default 0). Returns each rank's end time."""
    S = [[0.0] * (P + 1) for _ in range(P)]  # S[r][t]: rank r starts step t (S[r][P]: its finish)
    for r in range(P):
        S[r][0] = start[r] if start else 0.0
    for t in range(P):
        for r in range(P):
            left, right = (r - 1) % P, (r + 1) % P
            ready = [S[r][t] + cost[r][t]]
            if P > 1:
                if t < P - 1 or (backward and t >= 1):  # a receive from the left posted at step t
                    ready.append(S[left][t])
                ts = t - lag  # the sends that must be out by the end of step t
                if ts >= 0 and (ts < P - 1 or (backward and ts >= 1)):
                    ready.append(S[right][ts])
            S[r][t + 1] = max(ready)
    end = []
    for r in range(P):
        e = S[r][P] + fin[r]
        if backward and P > 1:
            e = max(e, S[(r - 1) % P][P])  # the final hop from the chain's last rank
        end.append(e)
    return end


def case(P, F, backward, lag, own_first=0.5, slow=0):
    """Wall time, the slowest rank's busy time and each rank's waits (in step costs)."""
    f = [F if r == slow else 1.0 for r in range(P)]
    if backward:
        cost = [[(own_first if t == 0 else 1.0) * f[r] for t in range(P)] for r in range(P)]
        fin = [(1.0 - own_first) * f[r] for r in range(P)]
    else:
        cost = [[f[r]] * P for r in range(P)]
        fin = [0.0] * P
    end = replay(P, cost, fin, lag, backward)
    busy = [sum(cost[r]) + fin[r] for r in range(P)]
    return max(end), max(busy), [end[r] - busy[r] for r in range(P)]


def from_timeline(path):
    """Each pass of a bench dist timeline, replayed with its measured step times."""
    passes = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            if line.startswith("{"):
                r = json.loads(line)
                if r.get("bench") == "timeline" and not r.get("whole_pass"):
                    passes[(r["pass"], r["repeat"])].append(r)
    for (p, rep), rs in sorted(passes.items()):
        P = max(r["rank"] for r in rs) + 1
        cost, fin = [[0.0] * P for _ in range(P)], [0.0] * P
        wait, wall = [0.0] * P, [0.0] * P
        for r in rs:
            k, t, c = r["rank"], r["step"], r["compute_seconds"] + r["copy_seconds"]
            if t < P:
                cost[k][t] += c
            else:  # the backward's final hop record: the own block's second half, the sums
                fin[k] += c
            wait[k] += r["wait_seconds"]
            wall[k] = r["pass_seconds"]
        end = replay(P, cost, fin, 1, p == "bwd")
        busy = [sum(cost[k]) + fin[k] for k in range(P)]
        print(f"{p} repeat {rep}: wall {max(wall):.3f} s, slowest busy {max(busy):.3f} s; waits measured "
              + " ".join(f"{w:.3f}" for w in wait) + ", replayed "
              + " ".join(f"{end[k] - busy[k]:.3f}" for k in range(P)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 8, 16])
    ap.add_argument("--factors", type=float, nargs="+", default=[1.15, 1.3, 1.6])
    ap.add_argument("--own-first", type=float, nargs="+", default=[0.25, 0.75],
                    help="the own block's share computed at step 0 (backward); the rest after the last step")
    ap.add_argument("--timeline", help="replay the passes of this bench dist --timeline file instead")
    a = ap.parse_args()
    if a.timeline:
        from_timeline(a.timeline)
        return
    rules = (("own", 0), ("prev", 1), ("deep2", 2))
    print("| P | F | pass (own block first / last) | wall | slowest busy | longest wait ("
          + " / ".join(n for n, _ in rules) + ") | sum of waits (" + " / ".join(n for n, _ in rules) + ") |")
    print("|---|---|---|---:|---:|---:|---:|")
    for P in a.ranks:
        for F in a.factors:
            for backward, first in [(False, 0.0)] + [(True, x) for x in a.own_first]:
                res = [case(P, F, backward, lag, first) for _, lag in rules]
                wall, busy, _ = res[1]
                assert all(abs(r[0] - busy) < 1e-9 for r in res), "a rule ended after the slowest rank"
                longest = " / ".join(f"{max(w for w in r[2]):.2f}" for r in res)
                total = " / ".join(f"{sum(r[2]):.2f}" for r in res)
                name = f"bwd ({first:g} / {1 - first:g})" if backward else "fwd"
                print(f"| {P} | {F} | {name} | {wall:.2f} | {busy:.2f} | {longest} | {total} |")


if __name__ == "__main__":
    main()
