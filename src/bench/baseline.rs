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
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    })
}

/// Storage ceiling: inserts `batches` transactions of `batch_events` rows, each an event row (the
/// same body text the benchmark sends) and a new domain in a UNIQUE-indexed table, into a fresh
/// database with WAL and synchronous=FULL. Returns rows per second.
pub fn storage_ceiling(dir: &Path, batches: u64, batch_events: u64) -> Result<f64, String> {
    let path = dir.join("ceiling.db");
    let conn = rusqlite::Connection::open(&path).map_err(|e| e.to_string())?;
    let err = |e: rusqlite::Error| e.to_string();
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(err)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(err)?;
    conn.execute_batch(
        "CREATE TABLE events (batch INTEGER NOT NULL, idx INTEGER NOT NULL, domain TEXT NOT NULL,
             body TEXT NOT NULL, PRIMARY KEY (batch, idx)) WITHOUT ROWID;
         CREATE TABLE domains (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
             last_seen_at INTEGER NOT NULL);",
    )
    .map_err(err)?;
    // The rows are made before the clock starts, as the server gets them already parsed.
    let rows: Vec<(String, String)> = (0..batches * batch_events)
        .map(|n| {
            let d = super::data::domain(9, n);
            let body = super::data::event_json(&d, n);
            (d, body)
        })
        .collect();
    let start = Instant::now();
    for (b, chunk) in rows.chunks(batch_events as usize).enumerate() {
        let tx = conn.unchecked_transaction().map_err(err)?;
        {
            let mut ev = tx
                .prepare_cached(
                    "INSERT INTO events (batch, idx, domain, body) VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(err)?;
            let mut dom = tx
                .prepare_cached("INSERT INTO domains (name, last_seen_at) VALUES (?1, 0)")
                .map_err(err)?;
            for (i, (d, body)) in chunk.iter().enumerate() {
                ev.execute(rusqlite::params![b as i64, i as i64, d, body])
                    .map_err(err)?;
                dom.execute([d]).map_err(err)?;
            }
        }
        tx.commit().map_err(err)?;
    }
    let rate = rows.len() as f64 / start.elapsed().as_secs_f64();
    drop(conn);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.join(format!("ceiling.db{suffix}")));
    }
    Ok(rate)
}
