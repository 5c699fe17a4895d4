#!/usr/bin/env bash
# make profile: where the operator's CPU goes during steady churn, on the default install (two
# replicas, webhook served). Runs the bench's churn stage alone, samples the leader and the standby with
# Linux perf while it runs, and writes per replica a flame graph (<role>.svg), the folded stacks
# (<role>.folded) and a table of where each millisecond of a change goes (profile.md), with the bench's
# own figures (results.json) beside them.
#
# The binary profiled is the one the bench measures (the release build, as installed): no debug info is
# added, so the flame graph names functions, not lines; small functions the compiler inlined count to
# their caller. Stacks are unwound from DWARF call frame information, which release builds keep.
#
# Settings (environment): CMSET_PROFILE_OUT (default target/profile/<UTC timestamp>),
# CMSET_PROFILE_SETS (1000), CMSET_PROFILE_RATE (20 changes/s), CMSET_PROFILE_SECONDS (sampled, 40),
# CMSET_PROFILE_HZ (sampling frequency, 199). The cluster is chosen as `make bench` chooses it.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

out=${CMSET_PROFILE_OUT:-target/profile/$(date -u +%Y%m%dT%H%M%SZ)}
sets=${CMSET_PROFILE_SETS:-1000}
rate=${CMSET_PROFILE_RATE:-20}
seconds=${CMSET_PROFILE_SECONDS:-40}
hz=${CMSET_PROFILE_HZ:-199}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# Tools, installed once: perf from Debian, the folding and flame-graph tools from crates.io.
if ! command -v perf >/dev/null; then
  echo "profile: installing linux-perf" >&2
  apt-get install -y -q linux-perf >/dev/null
fi
tools=$root/target/tools
if [[ ! -x $tools/bin/inferno-flamegraph ]]; then
  echo "profile: installing inferno (flame graphs)" >&2
  cargo install --locked -q inferno --version "^0.12" --root "$tools"
fi
# perf reads other processes' samples only when the kernel lets it.
if [[ $(cat /proc/sys/kernel/perf_event_paranoid) -gt 1 && $(id -u) -ne 0 ]]; then
  echo "profile: perf needs root or kernel.perf_event_paranoid <= 1" >&2
  exit 1
fi

# The churn lasts long enough to cover the floor measured before it, a settling period and the
# sampled seconds.
duration=$((seconds + 40))
echo "profile: bench churn stage, $sets sets at $rate/s for $duration s; output in $out" >&2
bash e2e/bench/run.sh --configurations webhook --sets "$sets" --rate "$rate" --duration "$duration" \
  --skip-burst --skip-failover --skip-restart --skip-leak --skip-memory --skip-scales --skip-noop \
  --skip-large-set --skip-fanout --skip-readers-churn \
  --out "$out/bench" >"$out/bench.log" 2>&1 &
bench=$!
# This run's cmset-bench (run.sh's child), found by its output directory.
bench_process() {
  pgrep -f -- "--out $out/bench" | while read -r p; do
    [[ $(basename "$(readlink "/proc/$p/exe" 2>/dev/null)") == cmset-bench ]] && echo "$p"
  done | head -1
}
# On an early exit the bench is interrupted as by Ctrl-C, so that it stops its replicas and deletes
# its namespaces and registrations; killing run.sh alone would leave them running.
stop_bench() {
  local p
  p=$(bench_process)
  if [[ -n $p ]]; then kill -INT "$p" 2>/dev/null || true; fi
  wait $bench 2>/dev/null || true
}
trap stop_bench EXIT

# The replicas of this run: the operator processes whose metrics address answers, by role.
role_of() { # pid -> leader | standby
  local address
  address=$(tr '\0' '\n' <"/proc/$1/cmdline" | grep -A1 -x -- --metrics-address | tail -1)
  if curl -fsS "http://$address/metrics" | grep -Eq '^cmset_leader(\{[^}]*\})? 1'; then
    echo leader
  else
    echo standby
  fi
}
until grep -q "steady churn" "$out/bench.log"; do
  kill -0 $bench 2>/dev/null || { cat "$out/bench.log" >&2; echo "profile: the bench ended early" >&2; exit 1; }
  sleep 2
done
# The floor is measured first (10 to 20 s); sample once the churn has settled in.
until grep -q "floor before churn" "$out/bench.log"; do sleep 1; done
sleep 10
# The bench's own replicas: children of this run's cmset-bench (other operators may run beside it,
# e.g. an e2e suite's).
# A replica is a child with a metrics address: the binary may have any name
# (CMSET_BENCH_OPERATOR_BIN).
bench_pid=$(bench_process)
declare -A pids=()
for pid in $(pgrep -P "$bench_pid"); do
  tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qx -- --metrics-address || continue
  pids[$(role_of "$pid")]=$pid
done
if [[ -z ${pids[leader]:-} || -z ${pids[standby]:-} ]]; then
  echo "profile: expected a leader and a standby, found: ${!pids[*]}" >&2
  exit 1
fi
echo "profile: sampling leader ${pids[leader]} and standby ${pids[standby]} for $seconds s at $hz Hz" >&2
recorders=()
for role in leader standby; do
  perf record -q -F "$hz" --call-graph dwarf,65528 -p "${pids[$role]}" -o "$out/$role.data" \
    -- sleep "$seconds" 2>"$out/perf-$role.log" &
  recorders+=($!)
done
wait "${recorders[@]}"
wait $bench || { tail -20 "$out/bench.log" >&2; echo "profile: the bench failed" >&2; exit 1; }
trap - EXIT

for role in leader standby; do
  perf script -i "$out/$role.data" --no-inline 2>/dev/null |
    "$tools/bin/inferno-collapse-perf" >"$out/$role.folded"
  "$tools/bin/inferno-flamegraph" --title "cmset $role, steady churn ($rate changes/s, $sets sets)" \
    <"$out/$role.folded" >"$out/$role.svg"
  rm -f "$out/$role.data"
done
python3 e2e/bench/profile_table.py --results "$out/bench/results.json" \
  --leader "$out/leader.folded" --standby "$out/standby.folded" >"$out/profile.md"
cat "$out/profile.md"
