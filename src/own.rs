//! Parasol's own paths, outside both interfaces and without authentication (decisions.md):
//! `GET /healthz` (the process answers), `GET /readyz` (the store takes writes), `GET /metrics`
//! (the Prometheus text format) and `GET /openapi.yaml` (the OpenAPI document). Errors on these
//! paths (405, the size and Host rules) take the enforcement interface's shape, like those of
//! paths under neither interface.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Response, StatusCode};

use crate::http::{json, Body};
use crate::metrics::{escape, family, sample};
use crate::router::OwnEndpoint;
use crate::state::AppState;

/// The OpenAPI document of both interfaces (and of these paths), as the repository holds it.
pub const OPENAPI: &str = include_str!("../openapi.yaml");

/// Organizations whose domain lists `/metrics` reports, at most (the lowest ids): one series
/// each, and a bounded read per scrape however many organizations there are.
pub const DOMAIN_COUNT_ORGANIZATIONS: i64 = 10_000;

pub async fn handle(state: &AppState, ep: OwnEndpoint) -> Response<Body> {
    match ep {
        OwnEndpoint::Healthz => json(StatusCode::OK, &serde_json::json!({"status": "ok"})),
        OwnEndpoint::Readyz => readiness(&state.store.health(), state.store.is_shared()),
        OwnEndpoint::Metrics => text(
            "text/plain; version=0.0.4; charset=utf-8",
            metrics(state).await,
        ),
        OwnEndpoint::OpenApi => text("application/yaml", OPENAPI.to_string()),
    }
}

fn text(content_type: &'static str, body: String) -> Response<Body> {
    let mut res = Response::new(Full::new(Bytes::from(body)));
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    res
}

/// `/readyz`: 200 while the store takes writes; 503 with the fault's kind as the reason (and
/// `Retry-After`) while it does not: the disk is full, the device fails, or the writer is down.
/// Reads only what the store keeps in memory: no I/O, so a load balancer may ask often. The
/// engine's own words about the fault go to the log, not to this unauthenticated answer; the
/// message is worded for the engine (`shared`: PostgreSQL), whose faults of a kind differ.
fn readiness(health: &crate::store::StorageHealth, shared: bool) -> Response<Body> {
    if health.writable {
        return json(StatusCode::OK, &serde_json::json!({"status": "ready"}));
    }
    let reason = health
        .last_fault
        .as_ref()
        .map_or("unknown", |(kind, _)| kind.as_str());
    let message = match reason {
        "disk_full" => "The storage is full: writes are refused until space is freed",
        "io_error" => "The storage failed a read, write or sync: writes are refused",
        // PostgreSQL: a statement cancelled or a commit not confirmed in time (most often one
        // waiting for its synchronous standby), a deadlock, too many connections.
        "busy" if shared => {
            "The database did not complete a write in time (a commit may be waiting for its synchronous standby, or the server is overloaded): writes are refused"
        }
        "busy" => "The database stayed locked by another process: writes are refused",
        "read_only" => "The database cannot be written: writes are refused",
        "writer_down" => "The database writer is not running: writes are refused",
        "disconnected" => "The connection to the database is lost: writes are refused",
        "outcome_unknown" => "The database did not confirm a commit in time: writes are refused",
        _ => "The storage refuses writes",
    };
    let mut res = json(
        StatusCode::SERVICE_UNAVAILABLE,
        &serde_json::json!({"status": "unavailable", "reason": reason, "message": message}),
    );
    res.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("5"));
    res
}

/// The whole exposition: requests, events and connections (`Metrics`), then the store, the
/// reputation data, the domain lists and the process.
async fn metrics(state: &AppState) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let store = &state.store;
    state.metrics.render(
        &mut out,
        store.clients().load(Ordering::Relaxed),
        state.limits.max_connections,
    );

    let m = store.metrics();
    family(
        &mut out,
        "parasol_store_commit_group_size",
        "histogram",
        "Writes (requests' changes) committed together in one transaction.",
    );
    m.group_size
        .render(&mut out, "parasol_store_commit_group_size", "", 1.0);
    family(
        &mut out,
        "parasol_store_transaction_duration_seconds",
        "histogram",
        "Write transactions, from their start to their commit or rollback.",
    );
    m.transaction.render(
        &mut out,
        "parasol_store_transaction_duration_seconds",
        "",
        1e9,
    );
    family(
        &mut out,
        "parasol_store_commit_duration_seconds",
        "histogram",
        "Commits of write transactions: the log's write and its fsync.",
    );
    m.commit
        .render(&mut out, "parasol_store_commit_duration_seconds", "", 1e9);
    family(
        &mut out,
        "parasol_store_sync_duration_seconds",
        "histogram",
        "The store's own fsyncs of its files outside commits (the database file after a checkpoint).",
    );
    m.sync
        .render(&mut out, "parasol_store_sync_duration_seconds", "", 1e9);
    family(
        &mut out,
        "parasol_store_commits_total",
        "counter",
        "Write transactions committed.",
    );
    sample(
        &mut out,
        "parasol_store_commits_total",
        "",
        store.commit_count(),
    );
    family(
        &mut out,
        "parasol_store_writes_total",
        "counter",
        "Writes run (committed or not); with the commits, the mean group size.",
    );
    sample(
        &mut out,
        "parasol_store_writes_total",
        "",
        store.write_count(),
    );

    let health = store.health();
    family(
        &mut out,
        "parasol_store_writable",
        "gauge",
        "1 while the store takes writes, 0 from a storage fault (or with the writer down) until it does again.",
    );
    sample(
        &mut out,
        "parasol_store_writable",
        "",
        u8::from(health.writable),
    );
    family(
        &mut out,
        "parasol_store_faults_total",
        "counter",
        "Storage faults (disk full, I/O errors, writer failures) since start.",
    );
    sample(&mut out, "parasol_store_faults_total", "", health.faults);
    family(
        &mut out,
        "parasol_store_last_fault_info",
        "gauge",
        "1, labelled with the kind of the last storage fault; absent before the first.",
    );
    if let Some((kind, _)) = &health.last_fault {
        sample(
            &mut out,
            "parasol_store_last_fault_info",
            &format!("kind=\"{}\"", escape(kind)),
            1,
        );
    }

    let stats = store.storage_stats();
    for (name, help, value) in [
        (
            "parasol_store_database_bytes",
            "Size of the database's main file.",
            stats.database_bytes,
        ),
        (
            "parasol_store_wal_bytes",
            "Size of the write-ahead log file.",
            stats.wal_bytes,
        ),
        (
            "parasol_store_filesystem_free_bytes",
            "Space still writable on the file system holding the database.",
            stats.free_bytes,
        ),
        (
            "parasol_store_filesystem_size_bytes",
            "Size of the file system holding the database.",
            stats.filesystem_bytes,
        ),
    ] {
        family(&mut out, name, "gauge", help);
        if let Some(v) = value {
            sample(&mut out, name, "", v);
        }
    }

    let reputation = state.reputation.get();
    let (scores, known_good) = reputation.counts();
    family(
        &mut out,
        "parasol_reputation_entries",
        "gauge",
        "Entries of the reputation data in force, by list.",
    );
    sample(
        &mut out,
        "parasol_reputation_entries",
        "list=\"scores\"",
        scores,
    );
    sample(
        &mut out,
        "parasol_reputation_entries",
        "list=\"known_good\"",
        known_good,
    );
    family(
        &mut out,
        "parasol_reputation_loaded_timestamp_seconds",
        "gauge",
        "When the reputation data in force was loaded (start or the last successful SIGHUP reload), Unix time.",
    );
    sample(
        &mut out,
        "parasol_reputation_loaded_timestamp_seconds",
        "",
        state.reputation.loaded_at(),
    );
    family(
        &mut out,
        "parasol_reputation_reloads_refused_total",
        "counter",
        "SIGHUP reloads refused (a bad line or an unreadable file); the previous data stayed in force.",
    );
    sample(
        &mut out,
        "parasol_reputation_reloads_refused_total",
        "",
        state.reputation.reloads_refused(),
    );

    match store.domain_counts(DOMAIN_COUNT_ORGANIZATIONS).await {
        Ok((organizations, counts)) => {
            family(
                &mut out,
                "parasol_organizations",
                "gauge",
                "Organizations (customers) in the database.",
            );
            sample(&mut out, "parasol_organizations", "", organizations);
            family(
                &mut out,
                "parasol_domains",
                "gauge",
                "Entries of each organization's domain list (the first 10000 organizations by id).",
            );
            for (org, n) in counts {
                sample(
                    &mut out,
                    "parasol_domains",
                    &format!("organization=\"{org}\""),
                    n,
                );
            }
        }
        // The rest of the exposition still serves; the storage's state says why.
        Err(e) => log::warn!("metrics: cannot count the domain lists: {e}"),
    }

    process(&mut out);
    out
}

/// The process's standard metrics (Prometheus' `process_` names), from `/proc/self`.
fn process(out: &mut String) {
    family(
        out,
        "parasol_build_info",
        "gauge",
        "1, labelled with the version of the running binary.",
    );
    sample(
        out,
        "parasol_build_info",
        &format!("version=\"{}\"", env!("CARGO_PKG_VERSION")),
        1,
    );
    let Some(stat) = std::fs::read_to_string("/proc/self/stat").ok() else {
        return;
    };
    // The fields after the command name (which is in parentheses and may hold spaces).
    let Some(fields) = stat.rsplit_once(')').map(|(_, rest)| {
        rest.split_whitespace()
            .map(|f| f.parse::<u64>().unwrap_or(0))
            .collect::<Vec<u64>>()
    }) else {
        return;
    };
    // SAFETY: sysconf only reads a system constant.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK).max(1) as f64,
            libc::sysconf(libc::_SC_PAGESIZE).max(1) as u64,
        )
    };
    // stat(5) numbers the fields from 1 (pid), 2 (comm), 3 (state: index 0 here).
    let field = |n: usize| fields.get(n - 3).copied().unwrap_or(0);
    family(
        out,
        "process_cpu_seconds_total",
        "counter",
        "User and system CPU time of the process.",
    );
    sample(
        out,
        "process_cpu_seconds_total",
        "",
        (field(14) + field(15)) as f64 / ticks,
    );
    family(
        out,
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory of the process.",
    );
    sample(out, "process_resident_memory_bytes", "", field(24) * page);
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<u64>().ok())
    });
    if let Some(boot) = boot {
        family(
            out,
            "process_start_time_seconds",
            "gauge",
            "When the process started, Unix time.",
        );
        sample(
            out,
            "process_start_time_seconds",
            "",
            boot as f64 + field(22) as f64 / ticks,
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        family(
            out,
            "process_open_fds",
            "gauge",
            "Open file descriptors of the process.",
        );
        sample(out, "process_open_fds", "", fds.count());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StorageHealth;

    #[tokio::test]
    async fn readiness_follows_the_storage() {
        use http_body_util::BodyExt;
        let ready = readiness(
            &StorageHealth {
                writable: true,
                last_fault: Some(("disk_full".into(), "earlier".into())),
                faults: 1,
            },
            false,
        );
        assert_eq!(ready.status(), 200);
        for (kind, words) in [("disk_full", "full"), ("writer_down", "writer")] {
            let r = readiness(
                &StorageHealth {
                    writable: false,
                    last_fault: Some((kind.into(), "/secret/path: details".into())),
                    faults: 2,
                },
                false,
            );
            assert_eq!(r.status(), 503);
            assert!(r.headers().contains_key(RETRY_AFTER));
            let body = r.into_body().collect().await.unwrap().to_bytes();
            let body = String::from_utf8(body.to_vec()).unwrap();
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["status"], "unavailable");
            assert_eq!(v["reason"], kind);
            assert!(v["message"].as_str().unwrap().contains(words), "{v}");
            assert!(
                !body.contains("/secret/path"),
                "the engine's words stay in the log"
            );
        }
    }
}
