//! The integration tests, as one test crate: each former `tests/X.rs` is the
//! module `X` here (`cargo test --test it X::` runs one of them), and the
//! shared helpers are `common` (the app, HTTP, polling, PostgreSQL) and
//! `support` (receivers and the external components the notifiers meet).
//! One crate links the library once instead of once per file.

mod common;
mod support;

mod ack_links;
mod adaptive;
mod alerts;
mod architecture;
mod audit;
mod cli;
mod crash;
mod crosscheck;
mod crosscheck_auth0;
mod crosscheck_entra;
mod crosscheck_heal;
mod crosscheck_okta;
mod crosscheck_view;
mod differential;
mod doc_names;
mod fuzz_seeds;
mod holidays;
mod hostile;
mod idempotency;
mod ingest;
mod lifecycle;
mod notify_alertmanager;
mod notify_check;
mod notify_cli;
mod notify_email;
mod notify_golden;
mod notify_limits;
mod notify_pagerduty_slack;
mod notify_queues;
mod notify_reminders;
mod notify_webhook;
mod outbox_unreadable;
mod page_commands;
mod providers;
mod readme;
mod reconcile;
mod relay;
mod relay_ops;
mod replicas;
mod scale;
mod schema_upgrade;
mod shutdown;
mod sign;
mod silences;
mod status_cli;
mod status_page;
mod storage_faults;
mod store_migrate;
mod store_pg;
mod subscriptions;
mod svix;
mod unsafe_code;
mod watchdog;
mod watchdog_replicas;

/// Every integration test lives here: no `tests/X.rs` beside this crate
/// (it would link the whole library again as its own binary), and every
/// `tests/it/X.rs` is declared above (an undeclared file is never compiled,
/// so its tests would silently not run).
#[test]
fn file_layout() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let names = |dir: &std::path::Path| -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "rs"))
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        out.sort();
        out
    };
    let stray = names(&root);
    assert!(
        stray.is_empty(),
        "move these into tests/it/ as modules of tests/it/main.rs: {stray:?}"
    );
    let main = std::fs::read_to_string(root.join("it/main.rs")).unwrap();
    let undeclared: Vec<String> = names(&root.join("it"))
        .into_iter()
        .filter(|m| m != "main" && !main.lines().any(|l| l == format!("mod {m};")))
        .collect();
    assert!(
        undeclared.is_empty(),
        "declare these in tests/it/main.rs (`mod X;`): {undeclared:?}"
    );
}
