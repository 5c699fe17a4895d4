use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use cmset_controller::engine::context::system_clock;
use cmset_controller::engine::runtime::{Scope, Scopes};
use cmset_controller::engine::tasks::spawn_owned_on;
use cmset_controller::platform::api_client;
use cmset_controller::platform::leader::{Elector, LeaseConfig, Term};
use cmset_controller::platform::metrics::Metrics;
use cmset_controller::serving::cert_keeper;
use cmset_controller::serving::drain::{self, Readiness};
use cmset_controller::serving::http::Stop;
use cmset_controller::serving::server::{Health, bind, serve};
use cmset_controller::serving::webhook::{self, ServingCert};
use cmset_controller::wiring::cli::{Cli, LogFormat};
use cmset_controller::wiring::lead::{Settings, lead_scope};
use cmset_controller::wiring::runtimes;
use futures::FutureExt;
use prometheus_client::registry::Registry;
use tracing::{error, info, warn};

/// Logs to stdout, filtered by `CMSET_LOG` and, whatever it says, without kube's events that print
/// response bodies (`redact::log_filter`).
fn init_logging(cli: &Cli) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{Layer, fmt};
    let filter = cmset_controller::platform::redact::log_filter(&cli.log_level);
    let logs = match cli.log_format {
        LogFormat::Json => fmt::layer()
            .json()
            .flatten_event(true)
            // The current span only (reconciles open theirs at DEBUG): a line never repeats a list.
            .with_span_list(false)
            .with_filter(filter)
            .boxed(),
        LogFormat::Text => fmt::layer().with_filter(filter).boxed(),
    };
    tracing_subscriber::registry().with(logs).init();
}

/// Resolves on SIGTERM or SIGINT.
async fn termination() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler can be installed");
    tokio::select! {
        _ = term.recv() => info!("SIGTERM received; shutting down"),
        _ = tokio::signal::ctrl_c() => info!("interrupt received; shutting down"),
    }
}

// With `--features dhat-heap`, every allocation is recorded, and SIGUSR2 writes what is live then to
// `dhat-heap-<pid>.json` (view it with dhat's viewer): what a long-running replica holds, without
// stopping it. Slow; for profiling only.
#[cfg(feature = "dhat-heap")]
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

#[cfg(all(feature = "mimalloc", not(feature = "dhat-heap")))]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(feature = "dhat-heap")]
fn profile_heap_until_sigusr2() {
    // dhat keeps 10 frames of each allocation by default, too few to reach from serde's or hashbrown's
    // frames up to the table of cmset's that holds the block.
    let profiler = dhat::Profiler::builder()
        .file_name(format!("dhat-heap-{}.json", std::process::id()))
        .trim_backtraces(Some(64))
        .build();
    tokio::spawn(async move {
        let mut usr2 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined2())
            .expect("a SIGUSR2 handler can be installed");
        usr2.recv().await;
        info!("SIGUSR2 received; writing the heap profile");
        drop(profiler);
    });
}

/// The engine runs on the main thread, serving on a thread of its own (see `wiring::runtimes`).
fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging(&cli);
    let (engine, serving) = match (runtimes::engine(cli.engine_runtime), runtimes::serving()) {
        (Ok(engine), Ok(serving)) => (engine, serving),
        (Err(e), _) | (_, Err(e)) => {
            error!(error = %e, "cannot start the runtimes");
            return std::process::ExitCode::FAILURE;
        }
    };
    let serving_runtime = serving.handle().clone();
    let outcome = engine.block_on(async move {
        #[cfg(feature = "dhat-heap")]
        profile_heap_until_sigusr2();
        run(cli, serving_runtime).await
    });
    let code = match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            error!(error = %e, "cmset-controller stopped");
            std::process::ExitCode::FAILURE
        }
    };
    // As `#[tokio::main]` did with its one runtime: what still runs is dropped, and each runtime waits
    // for the blocking work it started (a content judgement, bounded by its budget). The engine goes
    // first: serving has nothing left but its finished or aborted servers.
    drop(engine);
    drop(serving);
    code
}

/// The operator, on the engine runtime; what serves is bound and spawned on `serving_runtime`.
async fn run(cli: Cli, serving_runtime: tokio::runtime::Handle) -> Result<(), Box<dyn std::error::Error>> {
    if cli.delete_webhook_configurations {
        let client = kube::Client::try_default()
            .await
            .map_err(|e| cmset_controller::platform::redact::api_error(&e).to_string())?;
        let name = &cli.webhook_configuration;
        let deleted = cert_keeper::delete_configurations(client, name)
            .await
            .map_err(|e| cmset_controller::platform::redact::api_error(&e).to_string())?;
        info!(?deleted, "deleted the webhook configurations named {name}");
        return Ok(());
    }
    // A bad declaration stops the operator before it does anything.
    let kinds = cli.kinds()?;
    // So does a Prometheus setting that cannot work.
    let prometheus = cli.prometheus()?.map(Arc::new);
    // Bound on the serving runtime, whose reactor then wakes whoever accepts on it.
    let endpoints = serving_runtime.spawn(bind(cli.metrics_address)).await??;
    let protocols = match cli.api_http2 {
        true => api_client::Protocols::Http2OrHttp1,
        false => api_client::Protocols::Http1,
    };
    let config = kube::Config::infer().await.map_err(|e| e.to_string())?;
    let connect = |config: kube::Config| {
        api_client::build(config, protocols)
            .map_err(|e| cmset_controller::platform::redact::api_error(&e).to_string())
    };
    let client = connect(config.clone())?;
    // The Lease is renewed over a connection of its own: over HTTP/2 every watch shares the main one,
    // and a renewal must not wait behind a large list's bytes.
    let lease_client = connect(config)?;
    let metrics = Arc::new(Metrics::default());
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let ready = Arc::new(Readiness::default());
    // `shutdown` stops the controllers; `serving` the HTTP servers, after the drain (only a replica that
    // answers admission has anything to drain). The signals are awaited on the serving runtime, which
    // also drains: `/readyz` fails at once whatever the engine is doing.
    let shutdown = spawn_owned_on(&serving_runtime, termination()).shared();
    let drain_period = match cli.webhook_address {
        Some(_) => Duration::from_secs(cli.shutdown_drain_seconds),
        None => Duration::ZERO,
    };
    let serving = drain::serving_until(shutdown.clone(), ready.clone(), drain_period)
        .boxed()
        .shared();

    let health = Health {
        ready: ready.clone(),
        registry: Arc::new(registry),
    };
    let server = serving_runtime.spawn(serve(endpoints, health, serving.clone()));
    // Freed heap goes back to the kernel once enough of it piles up (see `platform::heap`).
    tokio::spawn(cmset_controller::platform::heap::keep_trimmed());

    // Every replica watches and keeps its index warm, leader or not: admission answers from it, and a
    // replica that takes the lease reconciles from it at once, with no relist.
    let namespaces: Vec<Option<String>> = if cli.namespaces.is_empty() {
        vec![None]
    } else {
        cli.namespaces.iter().cloned().map(Some).collect()
    };
    info!(namespaces = ?cli.namespaces, engine_runtime = ?cli.engine_runtime, "watching");
    let mut scopes = Scopes {
        scopes: Vec::new(),
        multi_set_window: cli.multi_set_window(),
        kinds: kinds.clone(),
        budgeted: cli.max_moving_workloads.is_some(),
    };
    let budget = cli.rollout_budget();
    if let Some(budget) = &budget {
        budget.report_to(metrics.clone());
    }
    let mut watches = Vec::new();
    for namespace in namespaces {
        let served = cmset_controller::engine::served::Settings {
            kinds: kinds.clone(),
            discovery: cli.kind_discovery(),
        };
        let analysis = prometheus.is_some();
        let (scope, watch) = Scope::watch(
            &client,
            namespace,
            cli.secret_sets,
            analysis,
            cli.change_windows,
            served,
            budget.clone(),
        );
        scope.index.count_watch_events(metrics.watch_events.clone());
        scope
            .index
            .count_windows_unknown(metrics.change_windows_unknown.clone());
        scopes.scopes.push(scope);
        watches.push(watch);
    }
    let watches = tokio::spawn(futures::future::join_all(watches));
    // Ready once every index is filled: a standby is ready too, since it serves admission.
    let readiness = tokio::spawn({
        let (scopes, ready) = (scopes.clone(), ready.clone());
        async move {
            while !scopes.are_ready() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            info!("caches synced; ready");
            ready.set_synced();
        }
    });

    let webhook = match cli.webhook_address {
        Some(address) => {
            let cert = Arc::new(ServingCert::default());
            // Kept on the engine, with the API client it talks through; the webhook reads `cert`.
            cert_keeper::start(
                client.clone(),
                cli.webhook_cert_source(),
                cert.clone(),
                shutdown.clone(),
            )
            .await?;
            let client_ca = match &cli.webhook_client_ca {
                Some(path) => Some(webhook::client_verifier(path)?),
                None => None,
            };
            let bound = serving_runtime
                .spawn(webhook::bind(address, cert, client_ca))
                .await??;
            Some(serving_runtime.spawn(webhook::serve(
                bound,
                scopes.clone(),
                metrics.clone(),
                cli.secret_sets,
                Stop {
                    draining: ready.draining(),
                    stopped: serving.clone(),
                },
            )))
        }
        None => None,
    };
    let stop_serving = |outcome| {
        readiness.abort();
        watches.abort();
        outcome
    };

    let elector = cli.leader_election.then(|| {
        Arc::new(Elector::new(
            lease_client.clone(),
            LeaseConfig::with_duration(
                cli.lease_namespace(),
                cli.lease_name.clone(),
                cli.identity(),
                Duration::from_secs(cli.lease_duration_seconds),
            ),
        ))
    });
    let term = elector.clone().map(Term::of);
    // Told when this replica takes over, so that it publishes what it owes (see config_watch).
    let (took_over, took_over_rx) = tokio::sync::watch::channel(elector.is_none());
    // The notification configuration is read once for every scope, and by a standby too, so that a
    // replica taking over lists nothing (its Events wait for its term as leader).
    let notifications = cli.notifications.then(|| {
        let reporting = cmset_controller::notify::config_watch::Reporting {
            client: client.clone(),
            reporter: kube::runtime::events::Reporter {
                controller: cmset_api::labels::FIELD_MANAGER.to_string(),
                instance: Some(cli.identity()),
            },
            metrics: metrics.clone(),
            term: term.clone(),
            took_over: took_over_rx,
        };
        let (loaded, watch) = cmset_controller::notify::config_watch::watch(
            &cli.notifications_namespace(),
            cli.secret_sets,
            reporting,
        );
        tokio::spawn(watch);
        loaded
    });
    if let Some(elector) = &elector {
        tokio::select! {
            _ = elector.acquire() => {}
            _ = shutdown.clone() => {
                let _ = server.await;
                if let Some(webhook) = webhook {
                    let _ = webhook.await;
                }
                return stop_serving(Ok(()));
            }
        }
    }
    metrics.leader.set(1);
    took_over.send_replace(true);

    let settings = Settings {
        concurrency: cli.concurrency.max(1),
        workload_concurrency: cli.workload_concurrency.max(1),
        multi_set_window: cli.multi_set_window(),
        instance: Some(cli.identity()),
        secret_sets: cli.secret_sets,
        prometheus,
        analysis_concurrency: cli.analysis_concurrency,
        term,
        notifications,
        notification_policy: cli.notification_policy(),
    };
    info!("leading: reconciling");
    // A task of its own rather than part of this function's future (which `block_on` polls on the main
    // thread, outside the workers of a multi-thread engine); dropped (the lease lost), it is aborted.
    let leading = cmset_controller::engine::tasks::spawn_owned(futures::future::join_all(
        scopes.scopes.iter().map(|scope| {
            let (scope, client, settings) = (scope.clone(), client.clone(), settings.clone());
            let (metrics, shutdown) = (metrics.clone(), shutdown.clone());
            async move { lead_scope(&scope, client, settings, metrics, system_clock(), shutdown).await }
        }),
    ));
    let lost = async {
        match &elector {
            Some(e) => e.hold().await,
            None => futures::future::pending().await,
        }
    };
    let mut leading = leading;
    tokio::pin!(lost);
    let grace = Duration::from_secs(cli.shutdown_grace_seconds);
    // On SIGTERM the controllers take no new work and finish the reconciles in flight (kube's graceful
    // shutdown), within the grace period; losing the lease drops them at once (no further write). The
    // webhook drains meanwhile, and the process exits once both are done.
    let outcome: Result<(), Box<dyn std::error::Error>> = tokio::select! {
        _ = &mut leading => Ok(()),
        _ = &mut lost => Err("lost the leader lease; exiting so that only one replica acts".into()),
        _ = shutdown.clone() => tokio::select! {
            finished = tokio::time::timeout(grace, &mut leading) => {
                match finished {
                    Ok(_) => info!("reconciles in flight finished"),
                    Err(_) => warn!(?grace, "reconciles in flight did not finish within the grace period; stopping them"),
                }
                Ok(())
            }
            _ = &mut lost => Err("lost the leader lease while shutting down".into()),
        },
    };
    // Whatever still runs stops here, before the lease is released: a replica that lost it, or
    // whose reconciles outlived the grace period, sends nothing more.
    drop(leading);
    metrics.leader.set(0);
    if let Some(e) = &elector {
        e.release().await;
    }
    if outcome.is_err() {
        // The HTTP servers wait for SIGTERM and the drain; a replica that lost its lease does not.
        server.abort();
        if let Some(webhook) = &webhook {
            webhook.abort();
        }
        return stop_serving(outcome);
    }
    let _ = server.await;
    if let Some(webhook) = webhook {
        let _ = webhook.await;
    }
    stop_serving(outcome)
}
