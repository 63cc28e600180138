//! The running sidecar: the one place that wires config, store, clock, HTTP
//! server, silence timer and delivery worker together, and owns their
//! lifecycle (start, reload, graceful shutdown).

pub mod adaptive;
pub mod app;
mod core;
pub mod crosscheck;
pub mod crosscheck_delta;
pub mod crosscheck_heal;
pub mod crosscheck_report;
pub mod delivery;
mod fallback;
mod feed;
pub mod forward;
mod http_api;
pub mod leader;
mod maintenance;
mod reconcile;
pub mod replicas;
pub mod silences;
mod stale_grants;
mod status;
pub(crate) mod subscriptions;
pub mod svix;
mod timer;
mod wake;
pub mod watchdog;

use crate::clock::Clock;
use crate::config::{self, Config};
use crate::http::api::Api;
use crate::http::Routes;
use crate::store::{Store, StoreError};
use app::App;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Name of the state file inside `data_dir`.
pub const STATE_FILE: &str = "hushwatch.sqlite3";

/// A started sidecar. Tests hold one of these; `serve` waits for signals.
pub struct Running {
    pub addr: SocketAddr,
    /// The `[server] admin_listen` listener's address, when configured.
    pub admin_addr: Option<SocketAddr>,
    pub app: Arc<App>,
    replicas: Arc<replicas::Replicas>,
    shutdown: watch::Sender<bool>,
    /// Each background task, by name (a shutdown that has to stop one says which).
    tasks: Vec<(&'static str, JoinHandle<()>)>,
}

/// How long a shutdown may take in all, from SIGTERM to the store closed:
/// the chart's `terminationGracePeriodSeconds` (30 s) minus a margin, so
/// the kubelet's SIGKILL never lands while the store is being closed.
/// Every part of a shutdown fits inside it: the HTTP drain
/// (`http::DRAIN_TIMEOUT`), each task's last work (a final audit checkpoint,
/// the learned gaps), leaving the leadership and closing the store.
pub const SHUTDOWN_WITHIN: std::time::Duration = std::time::Duration::from_secs(25);
/// The end of `SHUTDOWN_WITHIN` kept for leaving the leadership and closing
/// the store, however long the tasks took.
const CLOSE_RESERVE: std::time::Duration = std::time::Duration::from_secs(5);

/// Opens the store, restores every clock and starts serving on `listener`
/// (and on `[server] admin_listen`, bound here, when configured).
pub async fn start(
    config: Config,
    clock: Arc<dyn Clock>,
    listener: TcpListener,
) -> Result<Running, StartError> {
    let admin = match config.server.admin_listen {
        Some(at) => Some(
            bind(at).map_err(|e| StartError(format!("cannot listen on admin_listen {at}: {e}")))?,
        ),
        None => None,
    };
    let data_dir = config.server.data_dir.clone();
    std::fs::create_dir_all(&data_dir).map_err(|e| {
        StartError(format!(
            "cannot create data_dir {}: {e}",
            data_dir.display()
        ))
    })?;
    let path = data_dir.join(STATE_FILE);
    let store_clock = Arc::clone(&clock);
    let store = Store::open_configured(&config.store, path, store_clock)
        .await
        .map_err(StartError::store)?;
    let app = Arc::new(
        App::new(config, store, clock)
            .await
            .map_err(StartError::store)?,
    );
    let replicas = replicas::join(app.core()).await;
    app.set_replicas(Arc::clone(&replicas));
    let addr = listener
        .local_addr()
        .map_err(|e| StartError(format!("listener: {e}")))?;
    let admin_addr = match &admin {
        Some(l) => Some(
            l.local_addr()
                .map_err(|e| StartError(format!("admin listener: {e}")))?,
        ),
        None => None,
    };
    let (shutdown, rx) = watch::channel(false);
    let main_routes = if admin.is_some() {
        Routes::Public
    } else {
        Routes::All
    };
    // Each task gets a handle with what it needs, not the whole `App`:
    // the shared handles (`Core`), its own concern's state, and the
    // capabilities of the stream mirror it uses (`App` implements them).
    let core = app.core_handle();
    let lead = app.lead();
    let replica_id = replicas.shared().then(|| replicas.id().to_owned());
    let mut tasks = vec![
        (
            "http",
            tokio::spawn(crate::http::serve(
                listener,
                Arc::clone(&app) as Arc<dyn Api>,
                main_routes,
                rx.clone(),
            )),
        ),
        (
            "timer",
            tokio::spawn(timer::run(
                Arc::clone(&core),
                Arc::clone(&app) as Arc<dyn timer::Evaluate>,
                rx.clone(),
            )),
        ),
        (
            "delivery",
            tokio::spawn(delivery::run(
                Arc::new(delivery::DeliveryTask {
                    core: Arc::clone(&core),
                    operator: Arc::clone(app.operator()),
                    lead: lead.clone(),
                }),
                rx.clone(),
            )),
        ),
        (
            "forward",
            tokio::spawn(forward::run(
                Arc::new(forward::ForwardTask {
                    core: Arc::clone(&core),
                    mirror: Arc::clone(&app) as Arc<dyn feed::Mirror>,
                    replica: replicas.me().to_owned(),
                }),
                rx.clone(),
            )),
        ),
        (
            "maintenance",
            tokio::spawn(maintenance::run(
                Arc::clone(&core),
                lead.clone(),
                rx.clone(),
            )),
        ),
        (
            "svix",
            tokio::spawn(svix::regroup_loop(
                Arc::clone(app.svix()),
                lead.clone(),
                rx.clone(),
            )),
        ),
        (
            "subscriptions",
            tokio::spawn(subscriptions::run(Arc::clone(&core), rx.clone())),
        ),
        (
            "watchdog",
            tokio::spawn(watchdog::run(
                Arc::new(watchdog::WatchdogTask {
                    core: Arc::clone(&core),
                    watchdog: Arc::clone(app.watchdog()),
                    health: Arc::clone(&app) as Arc<dyn Api>,
                    lead: lead.clone(),
                    replica: replica_id,
                }),
                rx.clone(),
            )),
        ),
        (
            "reconcile",
            tokio::spawn(reconcile::run(
                Arc::clone(&core),
                Arc::clone(&app) as Arc<dyn feed::Mirror>,
                rx.clone(),
            )),
        ),
        (
            "adaptive",
            tokio::spawn(adaptive::run(
                Arc::clone(&core),
                Arc::clone(&app) as Arc<dyn adaptive::Learner>,
                lead.clone(),
                rx.clone(),
            )),
        ),
        (
            "crosscheck",
            tokio::spawn(crosscheck::run(
                Arc::new(crosscheck::CrosscheckTask {
                    core: Arc::clone(&core),
                    intake: Arc::clone(&app) as Arc<dyn crosscheck_heal::Ingest>,
                    mirror: Arc::clone(&app) as Arc<dyn feed::Mirror>,
                    lead,
                }),
                rx.clone(),
            )),
        ),
    ];
    tasks.extend(replicas::spawn(
        &replicas,
        feed::Feed {
            store: core.store().clone(),
            mirror: Arc::clone(&app) as Arc<dyn feed::Mirror>,
        },
        &rx,
    ));
    if let Some(admin) = admin {
        tasks.push((
            "admin http",
            tokio::spawn(crate::http::serve(
                admin,
                Arc::clone(&app) as Arc<dyn Api>,
                Routes::Admin,
                rx,
            )),
        ));
    }
    Ok(Running {
        addr,
        admin_addr,
        app,
        replicas,
        shutdown,
        tasks,
    })
}

impl Running {
    /// Stops accepting, lets in-flight requests and each task's last work
    /// finish, then closes the store: all within `SHUTDOWN_WITHIN`. A task
    /// still running when its share is spent is stopped where it is and
    /// named in the log; what it had not finished stays in the store
    /// (a page not marked sent, a forward under its lease) and goes out
    /// after the restart under the same key, as after a crash.
    pub async fn shutdown(self) {
        let deadline = tokio::time::Instant::now() + SHUTDOWN_WITHIN;
        let _ = self.shutdown.send(true);
        let tasks_by = deadline - CLOSE_RESERVE;
        for (name, mut task) in self.tasks {
            if tokio::time::timeout_at(tasks_by, &mut task).await.is_err() {
                task.abort();
                tracing::warn!(
                    task = name,
                    within_seconds = SHUTDOWN_WITHIN.as_secs(),
                    "shutdown: task still running at its bound; stopped (its unfinished work stays stored and is retried after the restart)"
                );
            }
        }
        let close = async {
            // After the last checkpoint, so the lease covered it.
            self.replicas.leadership.resign().await;
            if let Err(e) = self.app.store.clone().close().await {
                tracing::error!(error = %e, "closing the store failed");
            }
        };
        if tokio::time::timeout_at(deadline, close).await.is_err() {
            tracing::error!(
                within_seconds = SHUTDOWN_WITHIN.as_secs(),
                "shutdown: the store did not close within the bound; exiting (committed work is durable, the rest is retried after the restart)"
            );
        }
    }
}

#[derive(Debug)]
pub struct StartError(pub String);

impl StartError {
    fn store(e: StoreError) -> StartError {
        StartError(format!("cannot open state: {e}"))
    }
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `hushwatch serve`: runs until SIGTERM or SIGINT; SIGHUP reloads config.
pub fn run_blocking(config_path: &Path, config: Config) -> ExitCode {
    init_logging();
    for w in &config.warnings {
        tracing::warn!("config: {w}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::from(crate::exit::EXIT_FAILURE);
        }
    };
    let served = runtime.block_on(serve(config_path, config));
    // Whatever a bounded shutdown stopped waiting for (a request past the
    // drain, a blocking store call) must not hold the exit either.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(ServeError::Start(e)) => {
            tracing::error!("{e}");
            eprintln!("hushwatch: {e}");
            ExitCode::from(crate::exit::EXIT_FAILURE)
        }
        Err(ServeError::Config(e)) => {
            tracing::error!("{e}");
            eprintln!("hushwatch: {e}");
            ExitCode::from(crate::exit::EXIT_CONFIG)
        }
    }
}

/// Why `serve` ended with an error: exit 1, or exit 2 for what only a
/// config edit fixes (a refused PostgreSQL login, a missing database, an
/// unverified server certificate), naming the key.
enum ServeError {
    Start(StartError),
    Config(String),
}

impl From<StartError> for ServeError {
    fn from(e: StartError) -> ServeError {
        ServeError::Start(e)
    }
}

/// Base and cap of the wait between two attempts to reach PostgreSQL at start.
const REACH_RETRY: (std::time::Duration, std::time::Duration) = (
    std::time::Duration::from_millis(500),
    std::time::Duration::from_secs(10),
);

/// The serve clock, once the store can be reached. With PostgreSQL
/// unreachable this keeps trying (backoff up to 10 s, one log line when it
/// becomes unreachable and one when it is back) and returns only a
/// permanent failure; the caller answers unready meanwhile.
async fn reach_store(
    store: &crate::store::location::StoreConfig,
    addr: Option<SocketAddr>,
) -> Result<Arc<dyn Clock>, ServeError> {
    use crate::store::pg::reach::{reach, Unreachable};
    let Some(pg) = &store.postgres else {
        return Store::serve_clock(store)
            .await
            .map_err(|e| StartError::store(e).into());
    };
    let mut delay = REACH_RETRY.0;
    let mut waiting = false;
    loop {
        let failed = match reach(&pg.settings).await {
            Err(Unreachable::Permanent(reason)) => {
                return Err(ServeError::Config(format!("store.url: {reason}")));
            }
            Err(Unreachable::Transient(reason)) => reason,
            Ok(()) => match Store::serve_clock(store).await {
                Ok(clock) => {
                    if waiting {
                        tracing::info!("store: PostgreSQL reachable; starting");
                    }
                    return Ok(clock);
                }
                Err(e) => e.to_string(),
            },
        };
        if !waiting {
            let addr = addr.map(|a| a.to_string()).unwrap_or_default();
            tracing::warn!(
                url = %pg.settings.redacted,
                error = %failed,
                "store: PostgreSQL unreachable; retrying; hushwatch answering on {addr} meanwhile (/healthz 200, /readyz and every other route 503 until it is back)"
            );
            waiting = true;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(REACH_RETRY.1);
    }
}

/// Connections the kernel completes and queues for us before it starts
/// dropping SYNs. `TcpListener::bind` uses 128, so a burst of more clients
/// than that (a Svix retry wave, 256 load-test connections) made some wait
/// a whole SYN retransmit (1 s, then 3 s…). The kernel caps it at somaxconn.
const ACCEPT_BACKLOG: u32 = 1024;

fn bind(listen: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if listen.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(listen)?;
    socket.listen(ACCEPT_BACKLOG)
}

async fn serve(config_path: &Path, config: Config) -> Result<(), ServeError> {
    use tokio::signal::unix::{signal, SignalKind};
    let listen = config.server.listen;
    let listener =
        bind(listen).map_err(|e| StartError(format!("cannot listen on {listen}: {e}")))?;
    let sig =
        |kind| signal(kind).map_err(|e| StartError(format!("cannot install signal handler: {e}")));
    let (mut term, mut int, mut hup) = (
        sig(SignalKind::terminate())?,
        sig(SignalKind::interrupt())?,
        sig(SignalKind::hangup())?,
    );
    let clock = tokio::select! {
        clock = crate::http::unready::serve_until(&listener, reach_store(&config.store, listener.local_addr().ok())) => clock?,
        _ = term.recv() => return Ok(()),
        _ = int.recv() => return Ok(()),
    };
    let running = start(config, clock, listener).await?;
    crate::heap::release_free_memory();
    // The first pass of each per-stream task (evaluation, status, gauges)
    // runs in the seconds after start and frees what it built; trimming
    // once more after it keeps that burst from staying resident for the
    // process's life (issue #46: 10,000 streams).
    tokio::spawn(async {
        tokio::time::sleep(crate::heap::STARTUP_SETTLE).await;
        crate::heap::release_free_memory();
    });
    // Tests and operators look for this exact line to learn the port.
    tracing::info!(addr = %running.addr, "hushwatch listening on {}", running.addr);
    if let Some(admin) = running.admin_addr {
        tracing::info!(addr = %admin, "hushwatch admin listening on {admin} (status page, /v1/status, /metrics, admin routes)");
    }
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => reload(config_path, &running.app).await,
        }
    }
    tracing::info!("shutting down: draining requests and closing the store");
    running.shutdown().await;
    Ok(())
}

/// Validates first; on any error keeps the running config.
async fn reload(config_path: &Path, app: &App) {
    match config::load(config_path) {
        Ok(new) => {
            for w in &new.warnings {
                tracing::warn!("config: {w}");
            }
            // The listener is bound once at start; a reload cannot move it.
            let listening = app.config().server.listen;
            if new.server.listen != listening {
                tracing::warn!(
                    running = %listening,
                    configured = %new.server.listen,
                    "config reload: server.listen changed; it takes effect only after a restart (still listening on the old address)"
                );
            }
            match app.reload(new).await {
                Ok(()) => {
                    crate::heap::release_free_memory();
                    tracing::info!("config reloaded")
                }
                Err(e) => {
                    app.metrics.reload_successful.set(0);
                    tracing::error!(error = %e, "config reload could not update state; new config is active, state writes failing");
                }
            }
        }
        Err(errors) => {
            app.metrics.reload_successful.set(0);
            for e in &errors.0 {
                tracing::error!(key = %e.path, reason = %e.reason, "config reload rejected; keeping the running config");
            }
        }
    }
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_env("HUSHWATCH_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    // Logs go to stderr: stdout carries the `log` notifier's pages.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}
