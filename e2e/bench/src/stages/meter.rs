//! Counters at the start and end of a measured window: requests, writes and CPU, per client.

use super::*;

/// Counters at the start of a measured window.
pub struct Meter {
    api: Option<RequestCounts>,
    /// Requests dispatched by flow schema (the operator's own, when `Ctx::identity` is set).
    dispatched: Option<BTreeMap<String, f64>>,
    op: crate::metrics::Scrape,
    cpu: Option<Duration>,
    slots: Vec<Option<Duration>>,
    others: Vec<(String, Option<Duration>)>,
    machine: Option<crate::machine::MachineCpu>,
    audit_offset: Option<u64>,
    started: Instant,
}

impl Meter {
    pub async fn start(ctx: &Ctx, install: &Install) -> Self {
        let body = cluster::apiserver_metrics(&ctx.client).await.ok();
        Self {
            api: body.as_deref().map(cluster::parse_request_counts),
            dispatched: body.as_deref().map(crate::identity::parse_dispatched),
            op: install.scrape().await,
            cpu: install.cpu(),
            slots: install.cpu_by_slot(),
            others: ctx.pids.iter().map(|(n, p)| (n.clone(), cpu_of(*p))).collect(),
            machine: crate::machine::MachineCpu::now(),
            audit_offset: ctx.audit.as_ref().map(|a| a.offset()),
            started: Instant::now(),
        }
    }

    /// The window's cost per change; `bench` holds the requests the bench sent in it, by (verb, resource).
    pub async fn finish(
        self,
        ctx: &mut Ctx,
        install: &Install,
        changes: usize,
        bench: &RequestCounts,
    ) -> Cost {
        let per = |v: f64| v / changes.max(1) as f64;
        let window = self.started.elapsed();
        let cpu_share = self.cpu_share(ctx, install, window);
        let lists = match (&ctx.audit, self.audit_offset) {
            (Some(log), Some(offset)) => match log.lists_since(offset) {
                Ok(lists) => Some(lists),
                Err(e) => {
                    ctx.fail(format!("audit log {}: {e}", log.path.display()));
                    None
                }
            },
            _ => None,
        };
        let cpu_ms = match (self.cpu, install.cpu()) {
            (Some(a), Some(b)) => Some(per(ms(b.saturating_sub(a)))),
            _ => None,
        };
        let leader = install.leader().await;
        let cpu_by_role = install
            .cpu_by_slot()
            .iter()
            .zip(&self.slots)
            .enumerate()
            .filter_map(|(slot, (now, before))| {
                Some((
                    role(leader, slot).to_string(),
                    per(ms((*now)?.saturating_sub((*before)?))),
                ))
            })
            .collect();
        let other_cpu = self
            .others
            .iter()
            .filter_map(|(name, before)| {
                let pid = ctx.pids.iter().find(|(n, _)| n == name)?.1;
                Some((name.clone(), per(ms(cpu_of(pid)?.saturating_sub((*before)?)))))
            })
            .collect();
        let body = cluster::apiserver_metrics(&ctx.client).await;
        let after = body.as_deref().map(cluster::parse_request_counts);
        let op_delta = install.scrape().await.since(&self.op);
        let identity = match (&ctx.identity, &self.dispatched, &body) {
            (Some(schemas), Some(before), Ok(body)) => {
                let after = crate::identity::parse_dispatched(body);
                Some(schemas.requests(&crate::identity::delta(&after, before)))
            }
            _ => None,
        };
        let writes = match (self.api, after) {
            (Some(before), Ok(after)) => {
                let mut w = writes_from(&cluster::delta(&after, &before), bench, changes);
                if let Some(identity) = identity {
                    w.operator_identity = identity.iter().map(|(k, v)| (k.clone(), per(*v))).collect();
                    w.operator_identity_per_change = Some(w.operator_identity.values().sum::<f64>() + 0.0);
                }
                w.operator_self = op_delta
                    .writes
                    .iter()
                    .map(|(k, v)| (k.clone(), per(*v)))
                    .filter(|(_, v)| *v > 0.0)
                    .collect();
                w.operator_self_per_change = w.operator_self.values().sum();
                Some(w)
            }
            (_, Err(e)) => {
                ctx.fail(format!("API server /metrics: {e}"));
                None
            }
            (None, _) => None,
        };
        // Both replicas hear the same events; one replica's share is what one of them costs.
        let replicas = install.replicas.len().max(1) as f64;
        let watch_events_per_change = op_delta
            .watch_events
            .iter()
            .map(|(k, v)| (k.clone(), per(*v) / replicas))
            .filter(|(_, v)| *v > 0.0)
            .collect();
        let reconciles_per_change = op_delta
            .reconciles
            .iter()
            .map(|(k, v)| (k.clone(), per(*v)))
            .filter(|(_, v)| *v > 0.0)
            .collect();
        Cost {
            cpu_ms_per_change: cpu_ms,
            watch_events_per_change,
            reconciles_per_change,
            cpu_x_floor: cpu_ms.zip(ctx.floor.as_ref()).map(|(c, f)| c / f.seq_p50_ms),
            cpu_ms_per_change_by_role: cpu_by_role,
            other_cpu_ms_per_change: other_cpu,
            writes,
            admission: Some(Admission::from_delta(&op_delta)),
            settle_s: None,
            cpu_share,
            lists,
        }
    }

    /// Every watched process's CPU from the window's start until now as a share of the machine's: the
    /// replicas together (`operator`), the control plane's processes, the bench. A burst reads it when
    /// its last change landed, before the window goes on to wait for kube-controller-manager.
    pub fn share_so_far(&self, ctx: &Ctx, install: &Install) -> Option<crate::machine::CpuShare> {
        self.cpu_share(ctx, install, self.started.elapsed())
    }

    fn cpu_share(&self, ctx: &Ctx, install: &Install, window: Duration) -> Option<crate::machine::CpuShare> {
        let before = self.machine?;
        let after = crate::machine::MachineCpu::now()?;
        let mut processes = BTreeMap::new();
        if let (Some(a), Some(b)) = (self.cpu, install.cpu()) {
            processes.insert("operator".to_string(), b.saturating_sub(a));
        }
        for (name, before) in &self.others {
            let Some(pid) = ctx.pids.iter().find(|(n, _)| n == name).map(|p| p.1) else {
                continue;
            };
            if let (Some(now), Some(before)) = (cpu_of(pid), before) {
                processes.insert(name.clone(), now.saturating_sub(*before));
            }
        }
        crate::machine::CpuShare::of(before, after, window, &processes)
    }
}

pub(super) fn writes_from(delta: &RequestCounts, bench: &RequestCounts, changes: usize) -> Writes {
    let per = changes.max(1) as f64;
    let mut w = Writes {
        changes,
        bench_requests_subtracted: bench.values().sum(),
        ..Writes::default()
    };
    for ((verb, resource), count) in delta {
        let count = count
            - bench
                .get(&(verb.clone(), resource.clone()))
                .copied()
                .unwrap_or(0.0);
        if count <= 0.0 || verb == "WATCH" {
            continue;
        }
        let key = format!("{verb} {resource}");
        let map = match cluster::writer(verb, resource) {
            Writer::Operator => &mut w.operator,
            Writer::ControllerManager => &mut w.controller_manager,
            Writer::Other => &mut w.other,
            Writer::Read => &mut w.reads,
        };
        map.insert(key, count / per);
    }
    w.operator_per_change = w.operator.values().sum();
    w.operator_excl_events_per_change = w
        .operator
        .iter()
        .filter(|(k, _)| !k.ends_with(" events.events.k8s.io"))
        .map(|(_, v)| v)
        .sum();
    w.controller_manager_per_change = w.controller_manager.values().sum();
    w
}

pub(crate) fn set_patches(n: usize) -> RequestCounts {
    [(
        ("PATCH".to_string(), "configmapsets.cmset.dev".to_string()),
        n as f64,
    )]
    .into()
}
