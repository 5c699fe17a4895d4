#!/usr/bin/env bash
# Prometheus and promtool from Debian's `prometheus` package (bookworm), cached, for cmset's monitoring
# checks and the e2e harness (e2e/src/prometheus.rs). No Docker, no service: only the two binaries are
# unpacked from the .deb (`apt-get download` + `dpkg-deb -x`, nothing is installed), and once cached they
# are used offline.
#
#   prometheus.sh install          download and cache (once); prints the prometheus path, then the promtool
#                                  path, one per line, on stdout (everything else goes to stderr)
#   prometheus.sh promtool ARGS... install, then run promtool with ARGS
#   prometheus.sh check            `make monitoring-check`: promtool check rules and test rules on
#                                  config/monitoring, and every dashboard query parsed by promtool
#
# Environment:
#   CMSET_CACHE   cache root (default ~/.cache/cmset, as e2e/cluster/cluster.sh); binaries in
#                 $CMSET_CACHE/prometheus/bin/, the package's version in $CMSET_CACHE/prometheus/VERSION
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
CACHE_ROOT=${CMSET_CACHE:-${HOME:-/root}/.cache/cmset}
PROM_CACHE=$CACHE_ROOT/prometheus
BIN_DIR=$PROM_CACHE/bin
PACKAGE=prometheus/bookworm
MONITORING=$REPO_ROOT/config/monitoring

export DEBIAN_FRONTEND=noninteractive

log() { printf '[prometheus] %s\n' "$*" >&2; }
die() { printf '[prometheus] ERROR: %s\n' "$*" >&2; exit 1; }

# Temporary directories, removed on exit.
SCRATCH=()
cleanup() { [[ ${#SCRATCH[@]} -eq 0 ]] || rm -rf "${SCRATCH[@]}"; }
trap cleanup EXIT
scratch_dir() { mktemp -d "${TMPDIR:-/tmp}/cmset-$1.XXXXXX"; }

cached() {
  [[ -s $BIN_DIR/prometheus && -x $BIN_DIR/prometheus && -s $BIN_DIR/promtool && -x $BIN_DIR/promtool ]]
}

# apt-get update needs root; `apt-get download` itself does not.
apt_update() {
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "the package lists do not know $PACKAGE, and apt-get update needs root or sudo"
    sudo=(sudo -n DEBIAN_FRONTEND=noninteractive)
  fi
  log "apt-get update"
  "${sudo[@]}" apt-get update -q >&2
}

download() {
  local dl=$1
  # Root downloads into a private temporary directory that apt's sandbox user could not write to.
  local sandbox=()
  [[ $(id -u) -ne 0 ]] || sandbox=(-o APT::Sandbox::User=root)
  (cd "$dl" && apt-get download -q "${sandbox[@]}" "$PACKAGE" >&2)
}

# Downloads and unpacks the binaries unless they are cached.
ensure_cached() {
  mkdir -p "$PROM_CACHE"
  exec 8>"$PROM_CACHE/.lock"
  flock -w 600 8 || die "timed out waiting for another install ($PROM_CACHE/.lock)"
  if ! cached; then
    local work
    work=$(scratch_dir prometheus)
    SCRATCH+=("$work")
    log "downloading Debian's $PACKAGE (~20 MB)"
    if ! download "$work"; then
      apt_update
      download "$work" || die "apt-get download $PACKAGE failed"
    fi
    local deb
    deb=$(ls "$work"/prometheus_*.deb 2>/dev/null | head -n1 || true)
    [[ -n $deb ]] || die "apt-get download left no prometheus_*.deb"
    dpkg-deb -x "$deb" "$work/root"
    mkdir -p "$BIN_DIR"
    local b
    for b in prometheus promtool; do
      [[ -s $work/root/usr/bin/$b ]] || die "no usr/bin/$b in $(basename "$deb")"
      # Copied under a temporary name and renamed: a reader never sees half a binary.
      install -m 0755 "$work/root/usr/bin/$b" "$BIN_DIR/.$b.new"
      mv "$BIN_DIR/.$b.new" "$BIN_DIR/$b"
    done
    dpkg-deb -f "$deb" Version >"$PROM_CACHE/VERSION"
    rm -rf "$work"
    log "cached prometheus and promtool $(cat "$PROM_CACHE/VERSION") in $BIN_DIR"
  fi
  exec 8>&-
}

cmd_install() {
  ensure_cached
  printf '%s\n' "$BIN_DIR/prometheus" "$BIN_DIR/promtool"
}

# Every `expr` of the dashboard's panels as a recording rule, Grafana's variables replaced by what
# Prometheus would see, so that promtool parses each query.
dashboard_rules() {
  python3 - "$MONITORING/dashboard.json" <<'PY'
import json, re, sys

with open(sys.argv[1]) as f:
    dashboard = json.load(f)
# Panels, and those inside collapsed rows.
panels = [p for top in dashboard["panels"] for p in [top, *top.get("panels", [])]]
rules = []
for panel in panels:
    for target in panel.get("targets", []):
        expr = target["expr"]
        for variable, value in (("__rate_interval", "5m"), ("__interval", "1m"), ("__range", "1h")):
            expr = re.sub(r"\$\{?" + variable + r"\}?", value, expr)
        if "$" in expr:
            sys.exit(f"panel {panel['title']!r}: a variable promtool cannot stand in for: {expr}")
        rules.append({"record": f"dashboard:panel_{panel['id']}:{target['refId']}", "expr": expr})
# JSON is YAML: promtool reads it as is.
print(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}, indent=2))
PY
}

cmd_check() {
  local promtool=$BIN_DIR/promtool scratch
  ensure_cached
  log "promtool check rules config/monitoring/rules.yaml"
  "$promtool" check rules "$MONITORING/rules.yaml" >&2
  log "promtool test rules config/monitoring/rules_test.yaml"
  (cd "$MONITORING" && "$promtool" test rules rules_test.yaml >&2)
  scratch=$(scratch_dir dashboard)
  SCRATCH+=("$scratch")
  dashboard_rules >"$scratch/dashboard-queries.yaml"
  log "promtool check rules on the dashboard's $(grep -c '"record"' "$scratch/dashboard-queries.yaml") queries"
  "$promtool" check rules "$scratch/dashboard-queries.yaml" >&2
  log "monitoring checks passed"
}

case "${1:-}" in
  install) cmd_install ;;
  promtool)
    shift
    ensure_cached
    exec "$BIN_DIR/promtool" "$@"
    ;;
  check) cmd_check ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2
    exit 2
    ;;
esac
