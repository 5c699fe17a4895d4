#!/usr/bin/env bash
# Local Kubernetes control plane for cmset's e2e tests, without Docker.
#
#   cluster.sh install   build (once) and cache kube-apiserver + kube-controller-manager v1.20.2
#   cluster.sh up        install, then start etcd + API server + controller manager + simulated node;
#                        prints the admin kubeconfig path on stdout (everything else goes to stderr)
#   cluster.sh down      stop everything `up` started and delete the cluster data (logs are kept)
#   cluster.sh status    say whether it runs (exit 0 when healthy, 1 otherwise)
#   cluster.sh env       print `export KUBECONFIG=...` for the running cluster
#   cluster.sh stop|start|restart COMPONENT
#                        stop, start or restart one of etcd, kube-apiserver, kube-controller-manager of the running
#                        cluster, keeping its ports and data (idempotent; start waits until it serves)
#
# Environment:
#   CMSET_CACHE        cache root (default ~/.cache/cmset); binaries in $CMSET_CACHE/k8s-v1.20.2/bin/
#   CMSET_CLUSTER_DIR  state dir (default <repo>/.cluster): data, certs, tokens, kubeconfigs, logs, pids
#
# See e2e/README-cluster.md.
set -euo pipefail

K8S_VERSION=1.20.2
NODE_NAME=cmset-fake-node
OPERATOR_USER=system:serviceaccount:cmset-system:cmset-controller
OPERATOR_GROUPS=system:serviceaccounts,system:serviceaccounts:cmset-system,system:authenticated

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
CACHE_ROOT=${CMSET_CACHE:-${HOME:-/root}/.cache/cmset}
K8S_CACHE=$CACHE_ROOT/k8s-v$K8S_VERSION
BIN_DIR=$K8S_CACHE/bin
STATE_RAW=${CMSET_CLUSTER_DIR:-$REPO_ROOT/.cluster}
ETCD_BIN=${ETCD_BIN:-/usr/bin/etcd}
DEBIAN_GO=/usr/lib/go/bin   # Debian's golang-go (1.19 on bookworm): the toolchain the recipe was checked with

export DEBIAN_FRONTEND=noninteractive

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] ERROR: %s\n' "$*" >&2; exit 1; }

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || die "not root and no sudo: cannot install apt packages"
  SUDO=(sudo -n DEBIAN_FRONTEND=noninteractive)
fi

# ---------------------------------------------------------------------------------------------------------------------
# install
# ---------------------------------------------------------------------------------------------------------------------

pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

binaries_cached() {
  [[ -f $BIN_DIR/BUILD-INFO && -s $BIN_DIR/kube-apiserver && -x $BIN_DIR/kube-apiserver \
    && -s $BIN_DIR/kube-controller-manager && -x $BIN_DIR/kube-controller-manager ]]
}

deb_src_present() {
  # Any configured deb-src entry for bookworm (one-line or deb822 format) will do.
  apt-get indextargets --format '$(RELEASE) $(CODENAME)' 'Created-By: Sources' 2>/dev/null | grep -qw bookworm
}

APT_UPDATED=0
apt_update() {
  if [[ $APT_UPDATED -eq 0 ]]; then
    log "apt-get update"
    "${SUDO[@]}" apt-get update -q >&2
    APT_UPDATED=1
  fi
}

ensure_packages() {
  local missing=() p
  # Runtime needs. python3/curl/openssl may come from elsewhere (pyenv, ...): a working command is enough.
  pkg_installed etcd-server || missing+=(etcd-server)
  command -v openssl >/dev/null || missing+=(openssl)
  command -v python3 >/dev/null || missing+=(python3)
  command -v curl >/dev/null || missing+=(curl)
  command -v flock >/dev/null && command -v setsid >/dev/null || missing+=(util-linux)
  # Build needs, only when the binaries are not cached yet.
  if ! binaries_cached; then
    for p in golang-go rsync golang-github-modern-go-reflect2-dev make ca-certificates; do
      pkg_installed "$p" || missing+=("$p")
    done
  fi
  local need_src=0
  if ! binaries_cached && ! ls "$K8S_CACHE"/src/kubernetes_*"$K8S_VERSION".orig.tar.gz >/dev/null 2>&1 && ! deb_src_present; then
    need_src=1
  fi
  if [[ ${#missing[@]} -eq 0 && $need_src -eq 0 ]]; then
    return 0
  fi
  if [[ $need_src -eq 1 ]]; then
    log "adding a deb-src entry for bookworm: /etc/apt/sources.list.d/cmset-deb-src.sources"
    printf '%s\n' 'Types: deb-src' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm' 'Components: main' \
      'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' \
      | "${SUDO[@]}" tee /etc/apt/sources.list.d/cmset-deb-src.sources >/dev/null
  fi
  apt_update
  if [[ ${#missing[@]} -gt 0 ]]; then
    log "apt-get install ${missing[*]}"
    "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
  fi
}

fetch_source() {
  local src_dir=$K8S_CACHE/src tarball
  tarball=$(ls "$src_dir"/kubernetes_*"$K8S_VERSION".orig.tar.gz 2>/dev/null | head -n1 || true)
  if [[ -n $tarball ]]; then
    printf '%s\n' "$tarball"
    return 0
  fi
  mkdir -p "$src_dir"
  local dl
  dl=$(mktemp -d "${TMPDIR:-/tmp}/cmset-k8s-src.XXXXXX")
  log "downloading the Debian source package of kubernetes $K8S_VERSION (~34 MB)"
  local sandbox=()
  [[ $(id -u) -ne 0 ]] || sandbox=(-o APT::Sandbox::User=root)   # root downloading into a private temp dir
  if ! (cd "$dl" && apt-get source -q "${sandbox[@]}" --download-only kubernetes/bookworm >&2); then
    apt_update
    (cd "$dl" && apt-get source -q "${sandbox[@]}" --download-only kubernetes/bookworm >&2) || { rm -rf "$dl"; die "apt-get source kubernetes failed"; }
  fi
  tarball=$(ls "$dl"/kubernetes_*"$K8S_VERSION".orig.tar.gz 2>/dev/null | head -n1 || true)
  [[ -n $tarball ]] || { ls -l "$dl" >&2; rm -rf "$dl"; die "no kubernetes_*$K8S_VERSION.orig.tar.gz in the source package"; }
  mv "$tarball" "$src_dir/"
  rm -rf "$dl"
  printf '%s\n' "$src_dir/$(basename "$tarball")"
}

build_binaries() {
  local tarball=$1 build root
  [[ -x $DEBIAN_GO/go ]] || die "$DEBIAN_GO/go missing (golang-go)"
  local reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
  [[ -d $reflect2 ]] || die "$reflect2 missing (golang-github-modern-go-reflect2-dev)"

  build=$(mktemp -d "${TMPDIR:-/tmp}/cmset-k8s-build.XXXXXX")
  BUILD_DIR=$build   # removed by the EXIT trap (kept with CMSET_KEEP_BUILD=1)
  mkdir -p "$build/src" "$build/home" "$build/tmp"
  log "unpacking $(basename "$tarball") into $build"
  tar -xzf "$tarball" -C "$build/src"
  root=$(find "$build/src" -maxdepth 3 -path '*/cmd/kube-apiserver' -type d | head -n1)
  [[ -n $root ]] || die "no cmd/kube-apiserver in $(basename "$tarball")"
  root=${root%/cmd/kube-apiserver}
  [[ -f $root/Makefile && -d $root/vendor ]] || die "unexpected source layout under $build/src"

  # The reflect2 fix: k8s 1.20 vendors reflect2 v1.0.1, which makes the API server crash (SIGSEGV in map iteration)
  # under Go >= 1.18 on the first custom resource. Debian ships the fixed v1.0.2.
  log "replacing vendor/github.com/modern-go/reflect2 with $reflect2"
  rm -rf "$root/vendor/github.com/modern-go/reflect2"
  cp -a "$reflect2" "$root/vendor/github.com/modern-go/reflect2"
  rm -f "$root/vendor/github.com/modern-go/reflect2/go.mod" "$root/vendor/github.com/modern-go/reflect2/go.sum"

  # GOPATH-mode layout, as Debian's packaging builds it.
  mkdir -p "$root/.go/src/k8s.io"
  ln -s ../../.. "$root/.go/src/k8s.io/kubernetes"
  # No git history in the tarball: give the build its version explicitly.
  cat >"$build/version.env" <<VEOF
KUBE_GIT_VERSION='v$K8S_VERSION'
KUBE_GIT_MAJOR='${K8S_VERSION%%.*}'
KUBE_GIT_MINOR='$(cut -d. -f2 <<<"$K8S_VERSION")'
VEOF

  local jobs_note
  jobs_note=$(nproc 2>/dev/null || echo '?')
  log "building kube-apiserver and kube-controller-manager ($jobs_note cores; ~5 min on 2 cores); log: $K8S_CACHE/build.log"
  local t0=$SECONDS
  if ! (cd "$root" && env -i \
      PATH="$DEBIAN_GO:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
      HOME="$build/home" TMPDIR="$build/tmp" LANG=C.UTF-8 \
      GOPATH="$root/.go" GOCACHE="$build/home/go-build" GOFLAGS= GOTOOLCHAIN=local CGO_ENABLED=0 \
      KUBE_GIT_VERSION_FILE="$build/version.env" \
      make WHAT="cmd/kube-apiserver cmd/kube-controller-manager") >"$K8S_CACHE/build.log" 2>&1; then
    tail -n 40 "$K8S_CACHE/build.log" >&2
    die "build failed (full log: $K8S_CACHE/build.log; keep the tree with CMSET_KEEP_BUILD=1)"
  fi
  log "build took $((SECONDS - t0)) s"

  local out=$BIN_DIR.tmp.$$ b f
  rm -rf "$out"
  mkdir -p "$out"
  for b in kube-apiserver kube-controller-manager; do
    f=$(find "$root/_output" -type f -name "$b" -perm -u+x | head -n1)
    [[ -n $f && -s $f ]] || die "$b was not built (or is empty); see $K8S_CACHE/build.log"
    cp "$f" "$out/$b"
    "$out/$b" --version 2>&1 | grep -q "v$K8S_VERSION" || die "$b --version does not report v$K8S_VERSION"
  done
  {
    echo "kubernetes v$K8S_VERSION from $(basename "$tarball")"
    echo "vendor/github.com/modern-go/reflect2 replaced by $(dpkg-query -W -f='${Package} ${Version}' golang-github-modern-go-reflect2-dev)"
    echo "built with $("$DEBIAN_GO/go" version) on $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  } >"$out/BUILD-INFO"
  rm -rf "$BIN_DIR"
  mv "$out" "$BIN_DIR"
  if [[ ${CMSET_KEEP_BUILD:-0} != 1 ]]; then
    rm -rf "$build"
  fi
}

BUILD_DIR=
cleanup_build() {
  if [[ -n $BUILD_DIR && -d $BUILD_DIR && ${CMSET_KEEP_BUILD:-0} != 1 ]]; then
    rm -rf "$BUILD_DIR"
  elif [[ -n $BUILD_DIR && -d $BUILD_DIR ]]; then
    log "build tree kept in $BUILD_DIR"
  fi
}
trap cleanup_build EXIT

cmd_install() {
  mkdir -p "$K8S_CACHE"
  exec 8>"$K8S_CACHE/.lock"
  flock -w 1800 8 || die "timed out waiting for another install ($K8S_CACHE/.lock)"
  ensure_packages
  if binaries_cached; then
    log "kubernetes v$K8S_VERSION binaries cached in $BIN_DIR"
  else
    local tarball
    tarball=$(fetch_source)
    build_binaries "$tarball"
    log "cached kube-apiserver and kube-controller-manager in $BIN_DIR"
  fi
  [[ -x $ETCD_BIN ]] || die "$ETCD_BIN missing (etcd-server)"
  exec 8>&-
}

# ---------------------------------------------------------------------------------------------------------------------
# state, processes
# ---------------------------------------------------------------------------------------------------------------------

COMPONENTS=(etcd kube-apiserver kube-controller-manager fake-node)

init_state_paths() {
  mkdir -p "$STATE_RAW"
  STATE=$(cd "$STATE_RAW" && pwd)
  CERTS=$STATE/certs PIDS=$STATE/pids LOGS=$STATE/logs DATA=$STATE/data
  KUBECONFIG_ADMIN=$STATE/kubeconfig
  KUBECONFIG_OPERATOR=$STATE/operator.kubeconfig
  # Never let git pick the state up, whatever the repo's .gitignore says.
  [[ -f $STATE/.gitignore ]] || printf '*\n' >"$STATE/.gitignore"
}

lock_state() {
  exec 9>"$STATE/.state.lock"
  flock -w 600 9 || die "timed out waiting for another cluster.sh on $STATE"
}

# The process behind a pid file counts as ours only if it is alive (not a zombie) and its command line names the
# component and our state dir. Protects against stale pid files and reused pids.
proc_is_ours() {
  local pid=$1 name=$2 argv=()
  [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
  mapfile -d '' -t argv <"/proc/$pid/cmdline" 2>/dev/null || return 1
  [[ ${#argv[@]} -gt 0 ]] || return 1   # zombie or kernel thread
  [[ "${argv[*]}" == *"$STATE/"* ]] || return 1
  case $name in
    fake-node) # python3 [-u] .../fake-node.py ...
      local a
      for a in "${argv[@]:1:3}"; do [[ $a == */fake-node.py ]] && return 0; done
      return 1 ;;
    *) [[ ${argv[0]##*/} == "$name" ]] ;;
  esac
}

pid_of() { # prints the pid of a running component, fails otherwise
  local name=$1 pid
  [[ -f $PIDS/$name.pid ]] || return 1
  pid=$(<"$PIDS/$name.pid")
  proc_is_ours "$pid" "$name" || return 1
  printf '%s\n' "$pid"
}

start_proc() { # name cmd...
  local name=$1; shift
  printf '\n===== %s: starting %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$name" >>"$LOGS/$name.log"
  # setsid: own session, so a Ctrl-C or the end of the calling shell's job does not take the cluster down.
  # 8>&- 9>&-: the children must not inherit (and so hold forever) the install and state locks.
  setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null 8>&- 9>&- &
  echo $! >"$PIDS/$name.pid"
}

stop_proc() {
  local name=$1 pid i
  if pid=$(pid_of "$name"); then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
      proc_is_ours "$pid" "$name" || break
      sleep 0.1
    done
    if proc_is_ours "$pid" "$name"; then
      log "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do
        proc_is_ours "$pid" "$name" || break
        sleep 0.1
      done
    fi
    proc_is_ours "$pid" "$name" && die "could not stop $name (pid $pid)"
  fi
  rm -f "$PIDS/$name.pid"
}

# Processes of ours that are not (or no longer) recorded in a pid file, e.g. after a lost state dir.
stray_pids() {
  local d pid name
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
    for name in "${COMPONENTS[@]}"; do
      if proc_is_ours "$pid" "$name" 2>/dev/null; then
        printf '%s %s\n' "$pid" "$name"
      fi
    done
  done
}

stop_all() {
  local i name pid strays
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    stop_proc "${COMPONENTS[i]}"
  done
  strays=$(stray_pids)
  if [[ -n $strays ]]; then
    while read -r pid name; do
      log "stopping stray $name (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
    done <<<"$strays"
    for ((i = 0; i < 100; i++)); do
      [[ -n $(stray_pids) ]] || break
      sleep 0.1
    done
    while read -r pid name; do
      [[ -n ${pid:-} ]] || continue
      log "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    done < <(stray_pids)
    sleep 0.5
  fi
  if [[ -n $(stray_pids) ]]; then
    stray_pids >&2
    die "processes of this cluster are still running"
  fi
}

free_ports() { # n: prints n distinct free loopback ports (the kernel picks them: bind to port 0)
  python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

load_ports() { [[ -f $STATE/ports.env ]] && source "$STATE/ports.env"; }

api() { # path [curl args...]: GET with the admin token
  local path=$1; shift
  curl -fsS --noproxy '*' --max-time 5 --cacert "$CERTS/ca.crt" \
    -H "Authorization: Bearer $(<"$STATE/admin.token")" "$@" "https://127.0.0.1:$API_PORT$path"
}

api_ready() { [[ $(api /readyz 2>/dev/null) == ok ]]; }

healthy() {
  load_ports || return 1
  pid_of etcd >/dev/null && pid_of kube-apiserver >/dev/null && pid_of kube-controller-manager >/dev/null \
    && [[ -f $CERTS/ca.crt && -f $STATE/admin.token ]] && api_ready
}

wait_for() { # description timeout-seconds component-that-must-stay-alive command...
  local what=$1 timeout=$2 comp=$3; shift 3
  local deadline=$((SECONDS + timeout))
  while ! "$@" >/dev/null 2>&1; do
    if ! pid_of "$comp" >/dev/null; then
      log "$comp exited while waiting for $what; last lines of $LOGS/$comp.log:"
      tail -n 25 "$LOGS/$comp.log" >&2
      return 1
    fi
    if ((SECONDS >= deadline)); then
      log "timed out after ${timeout}s waiting for $what; last lines of $LOGS/$comp.log:"
      tail -n 25 "$LOGS/$comp.log" >&2
      return 1
    fi
    sleep 0.5
  done
}

# ---------------------------------------------------------------------------------------------------------------------
# up
# ---------------------------------------------------------------------------------------------------------------------

make_certs() {
  rm -rf "$CERTS"
  mkdir -p "$CERTS"
  (
    cd "$CERTS"
    cat >openssl.cnf <<'CNF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = cmset-e2e-ca
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1
CNF
    openssl req -x509 -new -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
      -config openssl.cnf -extensions ca 2>/dev/null
    openssl req -new -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
      -subj /CN=kube-apiserver -config openssl.cnf 2>/dev/null
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 3650 \
      -extfile openssl.cnf -extensions server 2>/dev/null
    # Service-account token signing key pair.
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    chmod 600 ./*.key
  )
}

make_tokens() {
  local admin operator
  admin=$(openssl rand -hex 24)
  operator=$(openssl rand -hex 24)
  (umask 077
    printf '%s\n' "$admin" >"$STATE/admin.token"
    printf '%s\n' "$operator" >"$STATE/operator.token"
    {
      printf '%s,cmset-admin,cmset-admin,"system:masters"\n' "$admin"
      printf '%s,%s,cmset-controller,"%s"\n' "$operator" "$OPERATOR_USER" "$OPERATOR_GROUPS"
    } >"$STATE/tokens.csv")
}

write_kubeconfig() { # file user-name token context namespace
  local file=$1 user=$2 token=$3 ctx=$4 ns=$5 ca
  ca=$(base64 -w0 <"$CERTS/ca.crt")
  (umask 077
    cat >"$file" <<KC
apiVersion: v1
kind: Config
clusters:
- name: cmset-e2e
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $ca
users:
- name: $user
  user:
    token: $token
contexts:
- name: $ctx
  context:
    cluster: cmset-e2e
    user: $user
    namespace: $ns
current-context: $ctx
KC
  )
}

node_ready() {
  api "/api/v1/nodes/$NODE_NAME" | python3 -c '
import json, sys
n = json.load(sys.stdin)
ok = any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
sys.exit(0 if ok else 1)'
}

start_fake_node() {
  start_proc fake-node python3 -u "$SCRIPT_DIR/fake-node.py" \
    --server "https://127.0.0.1:$API_PORT" --token-file "$STATE/admin.token" --ca-file "$CERTS/ca.crt" \
    --node-name "$NODE_NAME" --log "$LOGS/fake-node.log"
  wait_for "node $NODE_NAME to be Ready" 60 fake-node node_ready
}

start_etcd() { # keeps $DATA/etcd: a restart finds the same data
  local etcd_url=http://127.0.0.1:$ETCD_PORT peer_url=http://127.0.0.1:$ETCD_PEER_PORT
  start_proc etcd "$ETCD_BIN" --name cmset-e2e --data-dir "$DATA/etcd" \
    --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
    --listen-peer-urls "$peer_url" --initial-advertise-peer-urls "$peer_url" \
    --initial-cluster "cmset-e2e=$peer_url" --logger zap --log-outputs stderr
  wait_for "etcd" 60 etcd curl -fsS --noproxy '*' --max-time 3 "$etcd_url/health"
}

# The API server's audit log, $LOGS/audit.log (who, verb, resource, user agent; never a body):
#   - by default, LISTs, and GETs of cmset's own kinds: they are few and cheap to log, and the
#     benchmark reads them to say which client read what in each window (e2e/bench/src/audit.rs);
#   - CMSET_CLUSTER_AUDIT=1: every request, to tell which client sends which request;
#   - CMSET_CLUSTER_AUDIT=0: none.
audit_args() {
  local rules
  case ${CMSET_CLUSTER_AUDIT:-lists} in
    0) return 0 ;;
    1) rules='  - level: Metadata' ;;
    *) rules=$'  - level: Metadata\n    verbs: ["list"]\n  - level: Metadata\n    verbs: ["get"]\n    resources: [{group: cmset.dev}]\n  - level: None' ;;
  esac
  cat >"$STATE/audit-policy.yaml" <<POLICY
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
$(printf '%b' "$rules")
POLICY
  echo "--audit-policy-file=$STATE/audit-policy.yaml --audit-log-path=$LOGS/audit.log --audit-log-maxsize=2000"
}

start_apiserver() {
  # shellcheck disable=SC2046 # the audit flags are words of their own
  start_proc kube-apiserver "$BIN_DIR/kube-apiserver" $(audit_args) \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --secure-port="$API_PORT" --advertise-address=127.0.0.1 \
    --cert-dir="$CERTS" --tls-cert-file="$CERTS/apiserver.crt" --tls-private-key-file="$CERTS/apiserver.key" \
    --service-account-key-file="$CERTS/sa.pub" --service-account-signing-key-file="$CERTS/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc \
    --token-auth-file="$STATE/tokens.csv" --authorization-mode=RBAC \
    --service-cluster-ip-range=10.0.0.0/24 --allow-privileged=true \
    --endpoint-reconciler-type=none --profiling=false
  wait_for "kube-apiserver /readyz" 180 kube-apiserver api_ready
}

start_kcm() {
  start_proc kube-controller-manager "$BIN_DIR/kube-controller-manager" \
    --kubeconfig="$KUBECONFIG_ADMIN" --authentication-kubeconfig="$KUBECONFIG_ADMIN" \
    --authorization-kubeconfig="$KUBECONFIG_ADMIN" \
    --service-account-private-key-file="$CERTS/sa.key" --root-ca-file="$CERTS/ca.crt" \
    --use-service-account-credentials=false \
    --controllers='*,-nodeipam,-nodelifecycle,-csrsigning' --leader-elect=false \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --port=0 --cert-dir="$CERTS/kcm" --profiling=false
  # The ServiceAccount controller creating default/default shows the controller manager works.
  wait_for "ServiceAccount default/default" 120 kube-controller-manager \
    api /api/v1/namespaces/default/serviceaccounts/default
}

start_all() {
  rm -rf "$DATA" "$PIDS"
  mkdir -p "$DATA" "$PIDS" "$LOGS"
  make_certs
  make_tokens
  read -r ETCD_PORT ETCD_PEER_PORT API_PORT KCM_PORT <<<"$(free_ports 4)"
  printf 'ETCD_PORT=%s\nETCD_PEER_PORT=%s\nAPI_PORT=%s\nKCM_PORT=%s\n' \
    "$ETCD_PORT" "$ETCD_PEER_PORT" "$API_PORT" "$KCM_PORT" >"$STATE/ports.env"
  log "ports: etcd $ETCD_PORT (peer $ETCD_PEER_PORT), kube-apiserver $API_PORT, kube-controller-manager $KCM_PORT"
  write_kubeconfig "$KUBECONFIG_ADMIN" cmset-admin "$(<"$STATE/admin.token")" cmset-e2e default
  write_kubeconfig "$KUBECONFIG_OPERATOR" cmset-controller "$(<"$STATE/operator.token")" cmset-e2e-operator cmset-system

  start_etcd || return 1
  start_apiserver || return 1
  wait_for "namespace default" 60 kube-apiserver api /api/v1/namespaces/default || return 1
  start_kcm || return 1
  start_fake_node || return 1
}

print_result() {
  log "cluster ready: kube-apiserver https://127.0.0.1:$API_PORT (v$K8S_VERSION)"
  log "  admin:    export KUBECONFIG=$KUBECONFIG_ADMIN"
  log "  operator: $KUBECONFIG_OPERATOR ($OPERATOR_USER)"
  log "  logs:     $LOGS/"
  printf '%s\n' "$KUBECONFIG_ADMIN"
}

cmd_up() {
  cmd_install
  init_state_paths
  lock_state
  if healthy; then
    if ! pid_of fake-node >/dev/null; then
      log "simulated node not running: restarting it"
      start_fake_node || die "simulated node failed to start"
    fi
    log "already running (state $STATE); reusing it"
    print_result
    return 0
  fi
  if [[ -n $(ls "$PIDS"/*.pid 2>/dev/null || true) || -n $(stray_pids) ]]; then
    log "found a partial or unhealthy cluster: restarting from scratch"
  fi
  stop_all
  local attempt
  for attempt in 1 2 3; do
    log "starting the control plane in $STATE (attempt $attempt)"
    if start_all; then
      print_result
      return 0
    fi
    stop_all
  done
  die "could not start the cluster; logs in $LOGS/"
}

# ---------------------------------------------------------------------------------------------------------------------
# down, status
# ---------------------------------------------------------------------------------------------------------------------

cmd_down() {
  if [[ ! -d $STATE_RAW ]]; then
    log "nothing to stop ($STATE_RAW does not exist)"
    return 0
  fi
  init_state_paths
  lock_state
  stop_all
  # Remove everything but the logs (kept for post-mortems; truncated by marker lines on the next `up`).
  rm -rf "$DATA" "$PIDS" "$CERTS" "$STATE/ports.env" "$STATE/tokens.csv" "$STATE/admin.token" \
    "$STATE/operator.token" "$KUBECONFIG_ADMIN" "$KUBECONFIG_OPERATOR"
  log "stopped; removed cluster data in $STATE (logs kept in $LOGS/)"
}

cmd_status() {
  if [[ ! -d $STATE_RAW ]]; then
    echo "not running (no state dir $STATE_RAW)"
    return 1
  fi
  init_state_paths
  local name pid rc=0
  for name in "${COMPONENTS[@]}"; do
    if pid=$(pid_of "$name"); then
      printf '%-24s running (pid %s)\n' "$name" "$pid"
    else
      printf '%-24s not running\n' "$name"
      rc=1
    fi
  done
  if healthy; then
    echo "kube-apiserver           https://127.0.0.1:$API_PORT ready"
    echo "kubeconfig               $KUBECONFIG_ADMIN"
    echo "operator kubeconfig      $KUBECONFIG_OPERATOR"
    echo "logs                     $LOGS/"
  else
    echo "cluster not running/healthy"
    rc=1
  fi
  return $rc
}

cmd_env() {
  init_state_paths
  healthy || die "cluster not running; run: $0 up"
  printf 'export KUBECONFIG=%q\n' "$KUBECONFIG_ADMIN"
}

# ---------------------------------------------------------------------------------------------------------------------
# stop / start / restart one component (for tests of API server and etcd outages)
# ---------------------------------------------------------------------------------------------------------------------

component_arg() {
  case ${1:-} in
    etcd | kube-apiserver | kube-controller-manager) ;;
    *) die "component must be one of: etcd kube-apiserver kube-controller-manager (got '${1:-}')" ;;
  esac
}

# Same ports, certificates, tokens and data: only the process goes away. Idempotent.
cmd_stop_component() {
  component_arg "${1:-}"
  init_state_paths
  lock_state
  load_ports || die "no cluster in $STATE; run: $0 up"
  stop_proc "$1"
}

# Starts it again as `up` did, if it is not running, and waits until it serves. Idempotent.
cmd_start_component() {
  component_arg "${1:-}"
  init_state_paths
  lock_state
  load_ports || die "no cluster in $STATE; run: $0 up"
  if pid_of "$1" >/dev/null; then
    log "$1 already running"
    return 0
  fi
  log "starting $1"
  case $1 in
    etcd) start_etcd ;;
    kube-apiserver) start_apiserver ;;
    kube-controller-manager) start_kcm ;;
  esac || die "$1 failed to start; logs in $LOGS/$1.log"
}

cmd_restart_component() {
  cmd_stop_component "$1"
  exec 9>&-
  cmd_start_component "$1"
}

usage() {
  sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

case ${1:-} in
  install) cmd_install ;;
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  stop) cmd_stop_component "${2:-}" ;;
  start) cmd_start_component "${2:-}" ;;
  restart) cmd_restart_component "${2:-}" ;;
  *) usage ;;
esac
