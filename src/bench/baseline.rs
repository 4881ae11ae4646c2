//! The ceilings the benchmark measures Parasol against, in the same run: a hyper "hello" server
//! with Parasol's own TLS settings (the HTTP ceiling) and a plain rusqlite loop that inserts the
//! same rows, in transactions of the same size, with the same durability (the storage ceiling).

use std::convert::Infallible;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio_rustls::TlsAcceptor;

/// Runs the hello server until killed: TLS from `cert`/`key` exactly as `parasol serve` builds
/// it, the same hyper connection settings, on a multi-threaded runtime like the server's. Every
/// request's body is read in full and answered with a small JSON body. Prints `ready ADDR`.
pub fn serve_hello(cert: &Path, key: &Path) -> Result<(), String> {
    let tls = crate::tls::server_config(cert, key)?;
    let acceptor = TlsAcceptor::from(tls);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        println!("ready {addr}");
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = service_fn(|req: Request<hyper::body::Incoming>| async move {
                    let _ = req.into_body().collect().await;
                    let mut res = Response::new(Full::new(Bytes::from_static(
                        br#"{"id":"6ece47ef,7afc,4a50,89e6-b0a10adc2d8a"}"#,
                    )));
                    res.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        hyper::header::HeaderValue::from_static("application/json"),
                    );
                    Ok::<_, Infallible>(res)
                });
                let _ = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(30))
                    .max_buf_size(1024 * 1024 + 64 * 1024)
                    .half_close(true)
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    })
}

/// The disk's commit latency, the floor under a durable write's: for `duration`, appends of one
/// page (`crate::store::PAGE_SIZE` bytes) to a file, each followed by fsync, as a WAL commit
/// does. Every 202 of the server waits for at least one of these.
pub fn fsync_latency(dir: &Path, duration: Duration) -> Result<super::load::Stats, String> {
    use std::io::Write;
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path).map_err(|e| format!("{path:?}: {e}"))?;
    let page = vec![0x5au8; crate::store::PAGE_SIZE as usize];
    let mut stats = super::load::Stats::default();
    let start = Instant::now();
    while start.elapsed() < duration {
        let t = Instant::now();
        f.write_all(&page)
            .and_then(|()| f.sync_all())
            .map_err(|e| format!("{path:?}: {e}"))?;
        stats
            .lat_us
            .push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
        stats.ok += 1;
        stats.units += 1;
    }
    let elapsed = start.elapsed();
    drop(f);
    let _ = std::fs::remove_file(&path);
    Ok(stats.finish(elapsed))
}

/// Storage ceiling: a plain loop that stores what the server stores for an all-new batch, into
/// tables shaped as the server's (`schema.sql`: the same columns and indexes), in a fresh database
/// with WAL and synchronous=FULL: per transaction one request's row (the JSON arrays of
/// `batch_events` event bodies, the same text the benchmark sends, their names and verdicts) and
/// `batch_events` new domain rows. What it leaves out is the server's own work: HTTP, parsing,
/// the acceptance checks, looking each name up first and the paging counts. Returns events per
/// second.
pub fn storage_ceiling(dir: &Path, batches: u64, batch_events: u64) -> Result<f64, String> {
    let path = dir.join("ceiling.db");
    let conn = rusqlite::Connection::open(&path).map_err(|e| e.to_string())?;
    let err = |e: rusqlite::Error| e.to_string();
    conn.pragma_update(None, "page_size", crate::store::PAGE_SIZE)
        .map_err(err)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(err)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(err)?;
    conn.execute_batch(
        "CREATE TABLE event_batches (id INTEGER PRIMARY KEY, organization_id INTEGER NOT NULL,
             uuid TEXT NOT NULL, received_at INTEGER NOT NULL, event_count INTEGER NOT NULL,
             domains TEXT NOT NULL, listed TEXT NOT NULL, events TEXT NOT NULL);
         CREATE INDEX event_batches_org ON event_batches(organization_id);
         CREATE TABLE domains (id INTEGER PRIMARY KEY AUTOINCREMENT,
             organization_id INTEGER NOT NULL, name TEXT NOT NULL, seq INTEGER NOT NULL,
             created_at INTEGER NOT NULL, last_seen_at INTEGER NOT NULL,
             UNIQUE (organization_id, name));
         CREATE UNIQUE INDEX domains_org_seq ON domains(organization_id, seq);",
    )
    .map_err(err)?;
    // The rows are made before the clock starts, as the server gets them already parsed.
    let requests: Vec<(Vec<String>, [String; 4])> = (0..batches)
        .map(|b| {
            let names: Vec<String> = (b * batch_events..(b + 1) * batch_events)
                .map(|n| super::data::domain(9, n))
                .collect();
            let bodies: Vec<String> = (b * batch_events..(b + 1) * batch_events)
                .zip(&names)
                .map(|(n, d)| super::data::event_json(d, n))
                .collect();
            let texts = [
                uuid::Uuid::new_v4().to_string(),
                serde_json::to_string(&names).unwrap_or_default(),
                format!("[{}]", vec!["1"; names.len()].join(",")),
                format!("[{}]", bodies.join(",")),
            ];
            (names, texts)
        })
        .collect();
    let now = crate::timefmt::now();
    let mut seq = 0i64;
    let start = Instant::now();
    for (names, [uuid, names_json, listed_json, events_json]) in &requests {
        let tx = conn.unchecked_transaction().map_err(err)?;
        {
            tx.prepare_cached(
                "INSERT INTO event_batches (organization_id, uuid, received_at, event_count,
                     domains, listed, events) VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .map_err(err)?
            .execute(rusqlite::params![
                uuid,
                now,
                names.len() as i64,
                names_json,
                listed_json,
                events_json
            ])
            .map_err(err)?;
            let mut dom = tx
                .prepare_cached(
                    "INSERT INTO domains (organization_id, name, seq, created_at, last_seen_at)
                     VALUES (1, ?1, ?2, ?3, ?3)",
                )
                .map_err(err)?;
            for d in names {
                seq += 1;
                dom.execute(rusqlite::params![d, seq, now]).map_err(err)?;
            }
        }
        tx.commit().map_err(err)?;
    }
    let rows = batches * batch_events;
    let rate = rows as f64 / start.elapsed().as_secs_f64();
    drop(conn);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.join(format!("ceiling.db{suffix}")));
    }
    Ok(rate)
}
