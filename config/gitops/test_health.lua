-- Runs argocd/health.lua on sample objects the way Argo CD does (a global `obj`, the script returns hs).
local script = assert(loadfile("argocd/health.lua"))
local failures = 0
local checks = 0
local function check(name, object, want_status, want_message)
  checks = checks + 1
  obj = object
  local hs = script()
  local ok = hs.status == want_status and (want_message == nil or string.find(hs.message, want_message, 1, true))
  if not ok then
    failures = failures + 1
    print(string.format("FAIL %s: got %s %q", name, tostring(hs.status), tostring(hs.message)))
  else
    print("ok   " .. name)
  end
end
local function cond(type_, status, reason, message)
  return { type = type_, status = status, reason = reason, message = message }
end
check("no status yet", { metadata = { generation = 1 } }, "Progressing")
check("status behind the spec",
  { metadata = { generation = 2 }, status = { observedGeneration = 1, conditions = { cond("Ready", "True", "RolledOut", "ok") } } },
  "Progressing", "generation 2")
check("ready", { metadata = { generation = 3 }, status = { observedGeneration = 3,
  conditions = { cond("Ready", "True", "RolledOut", "Revision 3 (app-config-abc) is current") } } },
  "Healthy", "Revision 3")
check("rollout pending", { metadata = { generation = 3 }, status = { observedGeneration = 3,
  conditions = { cond("Ready", "False", "RolloutPending", "1 of 2 workloads are being moved") } } },
  "Progressing", "being moved")
check("invalid spec", { metadata = { generation = 4 }, status = { observedGeneration = 4,
  conditions = { cond("Ready", "False", "InvalidSpec", "bad key"), cond("Stalled", "True", "InvalidSpec", "spec.template.data[\"a b\"]: bad key") } } },
  "Degraded", "a b")
check("collision being resolved", { metadata = { generation = 1 }, status = { observedGeneration = 1,
  conditions = { cond("Ready", "False", "RevisionCollision", "taken") } } },
  "Progressing", "taken")
check("rollout failed in a wave", { metadata = { generation = 5 }, status = { observedGeneration = 5,
  conditions = { cond("Ready", "False", "RolloutFailed", "failed in wave 0"), cond("Stalled", "True", "RolloutFailed", "Revision 5 (app-x): the rollout of app-x failed in wave 0: Deployment web was not healthy") } } },
  "Degraded", "Deployment web")
check("a later wave waiting", { metadata = { generation = 5 }, status = { observedGeneration = 5,
  conditions = { cond("Ready", "False", "RolloutProgressing", "wave 0 of [0, 1] in progress") } } },
  "Progressing", "wave 0")
-- The set's health does not depend on the kinds of its workloads: CronJobs, Jobs and Argo Rollouts read
-- it like Deployments do, and their states reach it through the same conditions.
check("CronJob, Job and Rollout current", { metadata = { generation = 6 }, status = { observedGeneration = 6,
  conditions = { cond("Ready", "True", "RolledOut", "Revision 6 (app-y) is current") },
  workloads = { { kind = "CronJob", name = "report", revision = "app-y", state = "Current" },
                { kind = "Job", name = "migrate", revision = "app-y", state = "Current" },
                { kind = "Rollout", name = "web-canary", revision = "app-y", state = "Current" } } } },
  "Healthy", "Revision 6")
check("a Rollout being moved", { metadata = { generation = 6 }, status = { observedGeneration = 6,
  conditions = { cond("Ready", "False", "RolloutPending", "1 of 3 workloads are being moved") },
  workloads = { { kind = "Rollout", name = "web-canary", revision = "app-x", state = "Pending" } } } },
  "Progressing", "being moved")
check("a Degraded Rollout failed its wave", { metadata = { generation = 7 }, status = { observedGeneration = 7,
  conditions = { cond("Ready", "False", "RolloutFailed", "failed in wave 0"), cond("Stalled", "True", "RolloutFailed", "Revision 7 (app-z): the rollout of app-z failed in wave 0: Rollout web-canary reported Degraded") } } },
  "Degraded", "Rollout web-canary")
if failures > 0 then
  os.exit(1)
end
print("health check: " .. checks .. " passed, 0 failed")
