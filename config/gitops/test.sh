#!/usr/bin/env bash
# Checks the Argo CD health check: it runs on sample ConfigMapSets under a real Lua interpreter (Argo CD
# embeds gopher-lua, a Lua 5.1 dialect; lua5.1 from Debian is installed when missing), and argocd-cm.yaml
# embeds exactly health.lua.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v lua5.1 >/dev/null; then
  echo "gitops: installing lua5.1"
  if [[ $(id -u) -eq 0 ]]; then sudo=""; else sudo="sudo -n"; fi
  $sudo apt-get install -y -qq lua5.1 >/dev/null 2>&1 || { $sudo apt-get update -qq && $sudo apt-get install -y -qq lua5.1 >/dev/null; }
fi
lua5.1 test_health.lua
embedded=$(python3 - <<'PY'
import re
text = open("argocd/argocd-cm.yaml").read()
block = text.split("resource.customizations.health.cmset.dev_ConfigMapSet: |\n", 1)[1]
print("\n".join(line[4:] for line in block.splitlines()))
PY
)
diff <(printf '%s\n' "$embedded") argocd/health.lua >/dev/null \
  || { echo "argocd/argocd-cm.yaml does not embed argocd/health.lua as is"; exit 1; }
echo "gitops: Argo CD health check passed"
