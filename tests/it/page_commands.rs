//! Every command a page or a runbook prints runs as printed (issue #44).
//!
//! The relay's pages are produced through the real binary (`hushwatch
//! serve --config FILE`, pages on the `log` notifier's stdout), every
//! `hushwatch …` command in their text is taken out exactly as printed and
//! run by a shell (`sh -c`, the binary on `PATH`, the admin token in
//! `$HUSHWATCH_ADMIN_TOKEN`, from another directory), and each must exit 0
//! and do what it says. The commands of each runbook section
//! (docs/src/operating/runbooks.md) run the same way, with the `--config`
//! the runbook tells the reader to add.
//!
//! The config file names the port the sidecar bound: it starts on port 0
//! and the test then writes that port into the file, which is what the
//! CLI's `--config` reads (the running sidecar keeps its listener; no port
//! is bound and released).
//!
//! Page kinds produced here: `forward_failing`, `forward_dead_letter`,
//! `forward_held`, `forward_revocation_overdue` and `silence` in relay
//! mode (`clock = "delivered"`). The operator hint ("To silence: …") of
//! every firing page is run too, as printed (it names the sidecar's
//! `--config`, which says where the admin listener is). The other kinds' page texts print no
//! command of their own (their hint is the same `silence add` for another
//! `--kind`, run below for every silenceable kind).

use crate::common::{wait_for, Sidecar, Workdir};
use crate::relay_ops::{clerk_event, send, App, ADMIN, APP_SECRET, SECRET};

use hushwatch::domain::alert_kind::AlertKind;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(90);

/// The sidecar's config: `port` 0 to start, then the bound port; the
/// stream relays while `app_url` is given.
fn config(port: u16, app_url: Option<&str>) -> String {
    let forward = app_url.map_or(String::new(), |url| {
        format!(
            r#"[streams.identity.forward]
url = "{url}"
secret = "{APP_SECRET}"
timeout = "2s"
retry = ["1h"]
clock = "delivered"
critical_after = "2s"
"#
        )
    });
    format!(
        r#"[server]
listen = "127.0.0.1:{port}"
data_dir = "data"
admin_token = "{ADMIN}"

[streams.identity]
calendar = "always"
silence_threshold = "4s"
notify = ["stdout"]
[streams.identity.ingest]
webhook_secret = "{SECRET}"
{forward}
[notifiers.stdout]
kind = "log"
"#
    )
}

/// A relaying sidecar whose config file names its real address.
struct Running {
    work: Workdir,
    hw: Sidecar,
    config: PathBuf,
    app_url: String,
}

impl Running {
    fn start(app: &App) -> Running {
        let work = Workdir::new(&config(0, Some(&app.url())));
        let hw = Sidecar::start(&work.config_path());
        work.write_config(&config(hw.addr.port(), Some(&app.url())));
        let config = std::fs::canonicalize(work.config_path()).unwrap();
        Running {
            work,
            hw,
            config,
            app_url: app.url(),
        }
    }

    /// Rewrites the config (same port) and reloads it with SIGHUP.
    fn reload(&mut self, forwarding: bool) {
        let url = forwarding.then_some(self.app_url.as_str());
        self.work.write_config(&config(self.hw.addr.port(), url));
        let before = self.reloads();
        self.hw.signal("HUP");
        wait_for(LIMIT, "the config reloaded", || {
            (self.reloads() > before).then_some(())
        });
    }

    fn reloads(&self) -> usize {
        self.hw.stderr_text().matches("config reloaded").count()
    }

    /// The first page of `kind` with `status`, as the `log` notifier wrote it.
    fn page(&self, kind: &str, status: &str) -> Value {
        wait_for(LIMIT, &format!("a {status} {kind} page"), || {
            self.hw
                .stdout_lines()
                .iter()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|p| p["alert_kind"] == kind && p["status"] == status)
        })
    }
}

/// Every `hushwatch …` command a page's text prints between backticks.
fn commands_in(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|c| c.starts_with("hushwatch "))
        .map(str::to_owned)
        .collect()
}

/// The commands of a page's operator hint (`how_to_ack`): "CMD  (or: CMD;
/// token …)" or "CMD  (token …)", each naming the sidecar's `--config`.
fn hint_commands(hint: &str, _addr: SocketAddr) -> Vec<String> {
    assert!(hint.contains(" --config "), "{hint}");
    let (first, rest) = hint.split_once("  (").expect(hint);
    let mut out = vec![first.to_string()];
    if let Some(second) = rest.strip_prefix("or: ") {
        out.push(second.split_once(';').expect(hint).0.to_string());
    }
    for c in &out {
        assert!(c.starts_with("hushwatch "), "{c}");
    }
    out
}

/// Runs `command` exactly as printed, through a shell, from a directory
/// that is neither the config's nor the data's.
fn run_printed(command: &str) -> (i32, String, String) {
    let bin = Path::new(env!("CARGO_BIN_EXE_hushwatch")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let out = Command::new("sh")
        .args(["-c", command])
        .current_dir(elsewhere.path())
        .env("PATH", path)
        .env("HUSHWATCH_ADMIN_TOKEN", ADMIN)
        .output()
        .expect("run sh");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs it and checks it did what its subcommand says.
fn run_ok(command: &str) -> String {
    let (code, out, err) = run_printed(command);
    assert_eq!(code, 0, "`{command}` exited {code}:\n{out}{err}");
    let does = if command.contains(" forward retry ") {
        "due now"
    } else if command.contains(" forward skip ") {
        "is a dead letter now"
    } else if command.contains(" forward list ") && command.contains("--format json") {
        "\"events\""
    } else if command.contains(" forward list ") {
        "event(s)"
    } else if command.contains(" --dead-letters") {
        "sent again:"
    } else {
        ""
    };
    assert!(
        out.contains(does),
        "`{command}` did not say {does:?}:\n{out}"
    );
    out
}

fn json_list(config: &Path, state: &str) -> Value {
    let command = format!(
        "hushwatch forward list --config {} --stream identity --state {state} --format json",
        config.display()
    );
    serde_json::from_str(&run_ok(&command)).unwrap()
}

fn ids(list: &Value) -> Vec<String> {
    list["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["id"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn every_command_a_relay_page_prints_runs_as_printed() {
    let app = App::start();
    app.mode("down");
    let mut on = Running::start(&app);
    let addr = on.hw.addr;
    let config = on.config.display().to_string();
    send(
        addr,
        "identity",
        "msg_pc_1",
        &clerk_event("user.deleted", "user_pc1"),
    );
    send(
        addr,
        "identity",
        "msg_pc_2",
        &clerk_event("user.created", "user_pc2"),
    );
    let mut hints = Vec::new();

    // Failing: retry now, or set the oldest aside (it becomes a dead letter).
    let failing = on.page("forward_failing", "firing");
    let printed = commands_in(failing["summary"].as_str().unwrap());
    assert_eq!(
        printed,
        [
            format!("hushwatch forward retry --config {config} --stream identity"),
            format!(
                "hushwatch forward skip --config {config} --stream identity --id msg_pc_1 \
                 --comment \"why it is skipped\""
            ),
        ],
        "{failing}"
    );
    for c in &printed {
        run_ok(c);
    }
    assert_eq!(ids(&json_list(&on.config, "dead")), ["msg_pc_1"]);
    hints.push(failing["how_to_ack"].as_str().unwrap().to_owned());

    // The revocation, now a dead letter, is still undelivered past
    // critical_after.
    let overdue = on.page("forward_revocation_overdue", "firing");
    let printed = commands_in(overdue["summary"].as_str().unwrap());
    assert_eq!(printed.len(), 2, "{overdue}");
    assert!(overdue["summary"].as_str().unwrap().contains("msg_pc_1"));
    for c in &printed {
        run_ok(c);
    }
    hints.push(overdue["how_to_ack"].as_str().unwrap().to_owned());

    let dead = on.page("forward_dead_letter", "firing");
    let replay = commands_in(dead["summary"].as_str().unwrap());
    assert_eq!(
        replay,
        [format!(
            "hushwatch replay --config {config} --stream identity --dead-letters"
        )],
        "{dead}"
    );
    hints.push(dead["how_to_ack"].as_str().unwrap().to_owned());

    // Silence in relay mode names the app, and its hint acknowledges it.
    let silence = on.page("silence", "firing");
    let summary = silence["summary"].as_str().unwrap();
    assert!(summary.contains("the app has not accepted"), "{silence}");
    assert!(commands_in(summary).is_empty(), "{silence}");
    let hint = hint_commands(silence["how_to_ack"].as_str().unwrap(), addr);
    assert!(
        hint[0].starts_with("hushwatch ack --config ") && hint[0].contains(" --stream identity "),
        "{hint:?}"
    );
    run_ok(&hint[0]);
    hints.push(silence["how_to_ack"].as_str().unwrap().to_owned());

    // Held: the stream stops forwarding with events waiting; the page
    // names each with the skip that sets it aside.
    send(
        addr,
        "identity",
        "msg_pc_3",
        &clerk_event("user.deleted", "user_pc3"),
    );
    // Every waiting event's attempt settled (its next try an hour out), so
    // none is in flight when the stream stops forwarding.
    wait_for(LIMIT, "msg_pc_3 tried once, nothing in flight", || {
        let l = json_list(&on.config, "pending");
        let soon = chrono::Utc::now() + chrono::TimeDelta::minutes(30);
        let settled = |e: &Value| {
            e["last_status"] == 502
                && e["next_attempt_at"]
                    .as_str()
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    .is_some_and(|t| t > soon)
        };
        let events = l["events"].as_array().unwrap();
        (ids(&l).iter().any(|i| i == "msg_pc_3") && events.iter().all(settled)).then_some(())
    });
    on.reload(false);
    let held = on.page("forward_held", "firing");
    let printed = commands_in(held["summary"].as_str().unwrap());
    assert!(!printed.is_empty(), "{held}");
    for c in &printed {
        assert!(
            c.starts_with(&format!(
                "hushwatch forward skip --config {config} --stream identity --id msg_pc_"
            )),
            "{c}"
        );
        run_ok(c);
    }
    hints.push(held["how_to_ack"].as_str().unwrap().to_owned());
    // Whatever the page did not name (held after it fired, as an attempt
    // in flight at the reload settles) is set aside the same way, so that
    // the replay below sends all three.
    wait_for(LIMIT, "all three events dead letters", || {
        for id in ids(&json_list(&on.config, "held")) {
            run_ok(&format!(
                "hushwatch forward skip --config {config} --stream identity --id {id} --comment \"test\""
            ));
        }
        (json_list(&on.config, "dead")["total"] == 3).then_some(())
    });

    // Forwarding again and the app fixed: the dead-letter page's replay
    // delivers every event under its own id.
    on.reload(true);
    app.mode("up");
    let out = run_ok(&replay[0]);
    assert!(out.contains("sent again: 3"), "{out}");
    app.wait_accepted(
        &["msg_pc_1", "msg_pc_2", "msg_pc_3"],
        "every event after the printed replay",
    );

    // Every firing page's hint (silences are added last: they would mute
    // the pages above).
    for h in &hints {
        for c in hint_commands(h, addr) {
            if !c.starts_with("hushwatch ack ") {
                run_ok(&c);
            }
        }
    }
    on.hw.stop();
}

/// The runbook's sections, each with the commands of its `text` blocks.
fn runbook_sections() -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/src/operating/runbooks.md"
    ))
    .unwrap();
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            out.push((h.trim().to_string(), Vec::new()));
        } else if line.starts_with("```") {
            in_block = !in_block && line.trim() == "```text";
        } else if in_block && line.starts_with("hushwatch ") {
            if let Some((_, cmds)) = out.last_mut() {
                cmds.push(line.trim().to_string());
            }
        }
    }
    out
}

#[test]
fn every_command_in_each_runbook_section_runs_with_the_config_it_says_to_add() {
    let sections = runbook_sections();
    for kind in AlertKind::ALL {
        let section = sections.iter().find(|(h, _)| h == kind.as_str());
        assert!(
            section.is_some_and(|(_, c)| !c.is_empty()),
            "runbooks.md has no section with a command for {}",
            kind.as_str()
        );
    }
    let app = App::start();
    app.mode("down");
    let on = Running::start(&app);
    // The event the forward_held section skips, waiting on a down app.
    send(
        on.hw.addr,
        "identity",
        "msg_2VJSxYp1u",
        &clerk_event("user.deleted", "user_rb"),
    );
    // The silence section acknowledges a firing silence.
    on.page("silence", "firing");
    let config = on.config.display().to_string();
    let mut ran = 0;
    for (heading, commands) in &sections {
        for c in commands {
            // "add `--config` with your config file" (the runbook's preface).
            let command = format!("{c} --config {config}");
            let (code, out, err) = run_printed(&command);
            // `hushwatch status` exits 1 while anything is wrong (documented).
            let allowed: &[i32] = if c == "hushwatch status" {
                &[0, 1]
            } else {
                &[0]
            };
            assert!(
                allowed.contains(&code),
                "## {heading}: `{command}` exited {code}:\n{out}{err}"
            );
            if c.contains("forward skip") {
                assert!(out.contains("msg_2VJSxYp1u is a dead letter now"), "{out}");
            }
            ran += 1;
        }
    }
    assert!(ran >= 20, "only {ran} runbook commands");

    // The hint every silenceable page carries, for each kind.
    for kind in AlertKind::ALL.into_iter().filter(|k| k.silenceable()) {
        run_ok(&format!(
            "hushwatch silence add --stream identity --kind {} --for 2h --comment \"...\" --config {config}",
            kind.as_str()
        ));
    }
    on.hw.stop();
}
