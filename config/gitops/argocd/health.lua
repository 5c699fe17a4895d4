-- Argo CD health check for configmapsets.cmset.dev: follows cmset's kstatus-style status.
-- Healthy when Ready=True for the current generation; Degraded when the spec cannot be rolled out
-- (Stalled=True: an invalid key, or a rollout that failed in its waves); Progressing otherwise (a revision
-- being made, workloads moving, a later wave waiting).
local hs = { status = "Progressing", message = "Waiting for cmset to observe the ConfigMapSet" }
if obj.status == nil then
  return hs
end
if obj.metadata ~= nil and obj.metadata.generation ~= nil and obj.status.observedGeneration ~= obj.metadata.generation then
  hs.message = "Waiting for cmset to observe generation " .. tostring(obj.metadata.generation)
  return hs
end
local ready = nil
for _, condition in ipairs(obj.status.conditions or {}) do
  if condition.type == "Stalled" and condition.status == "True" then
    hs.status = "Degraded"
    hs.message = condition.message or condition.reason or "Stalled"
    return hs
  end
  if condition.type == "Ready" then
    ready = condition
  end
end
if ready == nil then
  return hs
end
hs.message = ready.message or ready.reason or ""
if ready.status == "True" then
  hs.status = "Healthy"
end
return hs
