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
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio_rustls::TlsAcceptor;

/// Runs the hello server until killed: TLS from `cert`/`key` exactly as `parasol serve` builds
/// it, the same hyper connection settings, on a multi-threaded runtime like the server's. Every
/// request's body is read in full and answered with a small JSON body. Prints `ready ADDR`.
pub fn serve_hello(cert: &Path, key: &Path) -> Result<(), String> {
    let tls = parasol::tls::server_config(cert, key)?;
    serve_until_killed(Some(TlsAcceptor::from(tls)), StatusCode::OK, None)
}

/// The bare server of `--compare-binaries`: the hello server over plain HTTP, answering 202 (as
/// the server answers an accepted event).
pub fn serve_bare() -> Result<(), String> {
    serve_until_killed(None, StatusCode::ACCEPTED, None)
}

/// The durable bare server of `--compare-binaries`: the bare server, except that it answers only
/// once the request's body is on disk. A thread of its own appends the bodies handed to it to
/// `log` and makes each group durable with one `fdatasync`, gathering the group as Parasol's
/// writer does (whatever is queued when the last sync ends, up to 256; under concurrency one
/// short wait for more when the group is small); the answer waits for its group's sync. Nothing
/// is parsed, looked up or indexed: it is the cost of "answered after a durable write" alone, the
/// floor under any server that keeps that promise on this machine.
pub fn serve_bare_durable(log: &Path) -> Result<(), String> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| format!("{log:?}: {e}"))?;
    let durable = move |bytes: &[u8]| file.write_all(bytes).and_then(|()| file.sync_data());
    let (tx, rx) = tokio::sync::mpsc::channel::<Durable>(1024);
    std::thread::Builder::new()
        .name("bare-log".into())
        .spawn(move || append_in_groups(durable, rx))
        .map_err(|e| e.to_string())?;
    serve_until_killed(None, StatusCode::ACCEPTED, Some(tx))
}

/// A body to make durable, and where to say it is.
type Durable = (Bytes, tokio::sync::oneshot::Sender<()>);

/// The durable bare server's log thread (see `serve_bare_durable`): each group's records (a
/// body's length, then the body) handed to `append`, which makes them durable, and only then
/// each body's sender told. Exits the process if the log cannot be written: a floor measured
/// without its syncs would be no floor.
fn append_in_groups(
    mut append: impl FnMut(&[u8]) -> std::io::Result<()>,
    mut rx: tokio::sync::mpsc::Receiver<Durable>,
) {
    const MAX_GROUP: usize = 256;
    let mut group: Vec<Durable> = Vec::with_capacity(MAX_GROUP);
    let mut bytes: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut previous = 0;
    let gather = |rx: &mut tokio::sync::mpsc::Receiver<Durable>, group: &mut Vec<Durable>| {
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(d) => group.push(d),
                Err(_) => break,
            }
        }
    };
    while let Some(first) = rx.blocking_recv() {
        group.push(first);
        gather(&mut rx, &mut group);
        if group.len() < 16 && previous > 1 {
            std::thread::sleep(Duration::from_micros(300));
            gather(&mut rx, &mut group);
        }
        previous = group.len();
        bytes.clear();
        for (body, _) in &group {
            bytes.extend_from_slice(&(body.len() as u32).to_le_bytes());
            bytes.extend_from_slice(body);
        }
        if let Err(e) = append(&bytes) {
            eprintln!("parasol-bench --serve-bare-durable: {e}");
            std::process::exit(1);
        }
        for (_, done) in group.drain(..) {
            let _ = done.send(());
        }
    }
}

fn serve_until_killed(
    acceptor: Option<TlsAcceptor>,
    status: StatusCode,
    log: Option<tokio::sync::mpsc::Sender<Durable>>,
) -> Result<(), String> {
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
            let log = log.clone();
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                match acceptor {
                    Some(acceptor) => {
                        if let Ok(tls) = acceptor.accept(stream).await {
                            answer(tls, status, log).await;
                        }
                    }
                    None => answer(stream, status, log).await,
                }
            });
        }
    })
}

/// Serves one connection with the server's hyper settings: every request's body read in full
/// (and, with `log`, made durable there), answered with `status` and a small JSON body.
async fn answer<IO>(io: IO, status: StatusCode, log: Option<tokio::sync::mpsc::Sender<Durable>>)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
        let log = log.clone();
        async move {
            let body = req.into_body().collect().await.map(|b| b.to_bytes());
            if let (Some(log), Ok(body)) = (log, body) {
                let (done, durable) = tokio::sync::oneshot::channel();
                if log.send((body, done)).await.is_ok() {
                    let _ = durable.await;
                }
            }
            let mut res = Response::new(Full::new(Bytes::from_static(
                br#"{"id":"6ece47ef,7afc,4a50,89e6-b0a10adc2d8a"}"#,
            )));
            *res.status_mut() = status;
            res.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            Ok::<_, Infallible>(res)
        }
    });
    let _ = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .max_buf_size(1024 * 1024 + 64 * 1024)
        .half_close(true)
        .serve_connection(TokioIo::new(io), service)
        .await;
}

/// The disk's commit latency, the floor under a durable write's: for `duration`, appends of one
/// page (`parasol::store::DB_PAGE_BYTES` bytes) to a file, each followed by fsync, as a WAL commit
/// does. Every 202 of the server waits for at least one of these.
pub fn fsync_latency(dir: &Path, duration: Duration) -> Result<crate::load::Stats, String> {
    use std::io::Write;
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path).map_err(|e| format!("{path:?}: {e}"))?;
    let page = vec![0x5au8; parasol::store::DB_PAGE_BYTES as usize];
    let mut stats = crate::load::Stats::default();
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
    let conn = ceiling_db(&path)?;
    let err = |e: rusqlite::Error| e.to_string();
    // The rows are made before the clock starts, as the server gets them already parsed.
    let requests: Vec<(Vec<String>, [String; 4])> = (0..batches)
        .map(|b| {
            let names: Vec<String> = (b * batch_events..(b + 1) * batch_events)
                .map(|n| crate::data::domain(9, n))
                .collect();
            let bodies: Vec<String> = (b * batch_events..(b + 1) * batch_events)
                .zip(&names)
                .map(|(n, d)| crate::data::event_json(d, n))
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
    let now = parasol::timefmt::now();
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
            let mut dom = tx.prepare_cached(INSERT_DOMAIN).map_err(err)?;
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
    remove_db(&path);
    Ok(rate)
}

/// A new domain row of the storage loops (the request's domain: its name, position and second).
const INSERT_DOMAIN: &str =
    "INSERT INTO domains (organization_id, name, seq, created_at, last_seen_at)
     VALUES (1, ?1, ?2, ?3, ?3)";

/// A fresh database for a storage loop at `path`, shaped as the server's: its page size, WAL,
/// synchronous=FULL, and the request and domain tables with the same columns and indexes
/// (`schema.sql`). Checkpoints are SQLite's own (inside a COMMIT now and then), as in any plain
/// rusqlite program.
fn ceiling_db(path: &Path) -> Result<rusqlite::Connection, String> {
    let conn = rusqlite::Connection::open(path).map_err(|e| e.to_string())?;
    let err = |e: rusqlite::Error| e.to_string();
    conn.pragma_update(None, "page_size", parasol::store::DB_PAGE_BYTES)
        .map_err(err)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(err)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(err)?;
    conn.execute_batch(
        "CREATE TABLE event_batches (id INTEGER PRIMARY KEY, organization_id INTEGER NOT NULL,
             uuid TEXT NOT NULL, received_at INTEGER NOT NULL, event_count INTEGER NOT NULL,
             domains TEXT NOT NULL, listed TEXT NOT NULL, events TEXT NOT NULL);
         CREATE TABLE domains (id INTEGER PRIMARY KEY,
             organization_id INTEGER NOT NULL, name TEXT NOT NULL, seq INTEGER NOT NULL,
             created_at INTEGER NOT NULL, last_seen_at INTEGER NOT NULL,
             UNIQUE (organization_id, name));
         CREATE UNIQUE INDEX domains_org_seq ON domains(organization_id, seq);",
    )
    .map_err(err)?;
    Ok(conn)
}

fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}

/// Transactions of the single-event storage loop: about the size of the server's own groups in
/// the closed loop of 64 connections (29-31 writes a commit on the benchmark's 2-core VM, from
/// its fsync count).
pub const SINGLE_GROUP: usize = 30;

/// The storage part of a single event, measured alone: a plain loop that stores what the server
/// stores for the single-event workload (90% of the events naming one of the already-listed hot
/// domains, 10% a new one), into tables shaped as the server's, `SINGLE_GROUP` requests a
/// transaction, WAL and synchronous=FULL. Per request: its row (one event, its name and verdict);
/// for a new name the domain row; for a listed name its `lastSeenAt`, once a second (as the
/// server, which skips a name already written this second). What it leaves out is the server's
/// own share: HTTP, validation, the hand-off to the writer, the list position and paging counts.
/// Returns requests a second and this thread's CPU time a request (microseconds, fsync's
/// included).
pub fn single_event_storage(dir: &Path, requests: u64) -> Result<(f64, f64), String> {
    let path = dir.join("single-ceiling.db");
    let conn = ceiling_db(&path)?;
    let measured = store_single_events(&conn, requests);
    drop(conn);
    remove_db(&path);
    let (elapsed, cpu_us) = measured?;
    Ok((requests as f64 / elapsed, cpu_us / requests.max(1) as f64))
}

/// The loop of `single_event_storage` on `conn` (a `ceiling_db`): lists the hot domains, then
/// stores `requests` single events. Returns the seconds and the thread's CPU microseconds the
/// stores took.
fn store_single_events(conn: &rusqlite::Connection, requests: u64) -> Result<(f64, f64), String> {
    let err = |e: rusqlite::Error| e.to_string();
    let now = parasol::timefmt::now();
    let hot = crate::data::HOT_DOMAINS;
    {
        let tx = conn.unchecked_transaction().map_err(err)?;
        let mut dom = tx
            .prepare(
                "INSERT INTO domains (id, organization_id, name, seq, created_at, last_seen_at)
                 VALUES (?1, 1, ?2, ?1, ?3, ?3)",
            )
            .map_err(err)?;
        for n in 0..hot {
            let name = crate::data::domain(crate::data::SPACE_HOT, n);
            dom.execute(rusqlite::params![n as i64 + 1, name, now - 1])
                .map_err(err)?;
        }
        drop(dom);
        tx.commit().map_err(err)?;
    }
    // The rows are made before the clock starts, as the server gets them already parsed:
    // (the hot name's index or none for a new name, its name, the row's texts).
    let rows: Vec<(Option<usize>, String, [String; 4])> = (0..requests)
        .map(|i| {
            let r = crate::data::mix(i ^ 25 << 48);
            let (hot_index, name) = if r.is_multiple_of(10) {
                (None, crate::data::domain(25, i))
            } else {
                let h = r % hot;
                (
                    Some(h as usize),
                    crate::data::domain(crate::data::SPACE_HOT, h),
                )
            };
            let texts = [
                uuid::Uuid::new_v4().to_string(),
                serde_json::to_string(&[&name]).unwrap_or_default(),
                "[1]".to_string(),
                format!("[{}]", crate::data::event_json(&name, i)),
            ];
            (hot_index, name, texts)
        })
        .collect();
    let mut seen = vec![now - 1; hot as usize];
    let mut seq = hot as i64;
    let cpu = thread_cpu_us();
    let start = Instant::now();
    for group in rows.chunks(SINGLE_GROUP) {
        let tx = conn.unchecked_transaction().map_err(err)?;
        {
            let mut row = tx
                .prepare_cached(
                    "INSERT INTO event_batches (organization_id, uuid, received_at, event_count,
                         domains, listed, events) VALUES (1, ?1, ?2, 1, ?3, ?4, ?5)",
                )
                .map_err(err)?;
            let mut dom = tx.prepare_cached(INSERT_DOMAIN).map_err(err)?;
            let mut touch = tx
                .prepare_cached("UPDATE domains SET last_seen_at = ?2 WHERE id = ?1")
                .map_err(err)?;
            for (hot_index, name, [uuid, names_json, listed_json, events_json]) in group {
                let now = parasol::timefmt::now();
                row.execute(rusqlite::params![
                    uuid,
                    now,
                    names_json,
                    listed_json,
                    events_json
                ])
                .map_err(err)?;
                match *hot_index {
                    Some(h) if seen[h] != now => {
                        touch
                            .execute(rusqlite::params![h as i64 + 1, now])
                            .map_err(err)?;
                        seen[h] = now;
                    }
                    Some(_) => {}
                    None => {
                        seq += 1;
                        dom.execute(rusqlite::params![name, seq, now])
                            .map_err(err)?;
                    }
                }
            }
        }
        tx.commit().map_err(err)?;
    }
    Ok((start.elapsed().as_secs_f64(), thread_cpu_us() - cpu))
}

/// CPU time (user and system) of the calling thread so far, in microseconds.
fn thread_cpu_us() -> f64 {
    // SAFETY: rusage is plain data that getrusage fills in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let us = |tv: libc::timeval| tv.tv_sec as f64 * 1e6 + tv.tv_usec as f64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh temporary directory, removed when dropped (after a failed assertion too).
    struct TempDir(std::path::PathBuf);

    impl TempDir {
        fn new(what: &str) -> TempDir {
            let name = format!("parasol-bench-{what}-{}", uuid::Uuid::new_v4());
            let p = std::env::temp_dir().join(name);
            std::fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_durable_bare_server_answers_once_its_group_is_durable() {
        // `append` stands for the write and the sync: it reports each group it is given, and
        // returns only when the test lets it.
        let (entered_tx, entered) = std::sync::mpsc::channel::<Vec<u8>>();
        let (go, go_rx) = std::sync::mpsc::channel::<()>();
        let append = move |bytes: &[u8]| {
            entered_tx.send(bytes.to_vec()).unwrap();
            go_rx.recv().unwrap();
            Ok(())
        };
        let (tx, rx) = tokio::sync::mpsc::channel::<Durable>(16);
        let thread = std::thread::spawn(move || append_in_groups(append, rx));
        for n in 0..20u32 {
            let body = Bytes::from(format!(r#"{{"n":{n}}}"#));
            let (done, mut durable) = tokio::sync::oneshot::channel();
            tx.blocking_send((body.clone(), done)).unwrap();
            let mut record = (body.len() as u32).to_le_bytes().to_vec();
            record.extend_from_slice(&body);
            assert_eq!(entered.recv().unwrap(), record, "body {n}");
            // Not answered while its write and sync are under way...
            assert_eq!(
                durable.try_recv(),
                Err(tokio::sync::oneshot::error::TryRecvError::Empty),
                "body {n} answered before it was durable"
            );
            go.send(()).unwrap();
            // ...and answered once they are done.
            durable.blocking_recv().unwrap();
        }
        drop(tx);
        thread.join().unwrap();
    }

    #[test]
    fn the_single_event_loop_stores_a_row_per_request_and_lists_only_new_names() {
        let dir = TempDir::new("single-loop");
        let conn = ceiling_db(&dir.0.join("t.db")).unwrap();
        let requests = 2_000;
        store_single_events(&conn, requests).unwrap();
        let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        // The hot names were listed first: ids 1 to HOT_DOMAINS.
        let hot = crate::data::HOT_DOMAINS as i64;
        assert_eq!(count("SELECT count(*) FROM event_batches"), requests as i64);
        // Every request names its domain once, in its row as in its event.
        assert_eq!(
            count(
                "SELECT count(*) FROM event_batches WHERE json_array_length(domains) = 1
                 AND json_extract(events, '$[0].dstDomain') = json_extract(domains, '$[0]')"
            ),
            requests as i64
        );
        // About one request in ten names a new domain; each gets a row, the hot ones keep theirs.
        let new = count("SELECT count(*) FROM domains") - hot;
        assert!((120..=280).contains(&new), "{new} new domains");
        let named_new = count(&format!(
            "SELECT count(*) FROM event_batches b JOIN domains d
             ON d.name = json_extract(b.domains, '$[0]') WHERE d.id > {hot}"
        ));
        assert_eq!(named_new, new);
        // Each hot name an event named was written at most once a second: its lastSeenAt is
        // the latest second it was named.
        assert_eq!(
            count(&format!(
                "SELECT count(*) FROM domains d WHERE d.id <= {hot} AND d.last_seen_at <>
                 coalesce((SELECT max(received_at) FROM event_batches b
                           WHERE json_extract(b.domains, '$[0]') = d.name), d.last_seen_at)"
            )),
            0
        );
    }
}
