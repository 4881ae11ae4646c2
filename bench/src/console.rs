//! `parasol-bench --console`: the console's pages on an organization of `--domains` names
//! (default 1,000,000), on SQLite and, with `--database URL`, on PostgreSQL.
//!
//! A release server on a data directory (or database) holding a service provider with one
//! organization of `--domains` names and a few small ones, written through the store before the
//! server starts. The benchmark signs in over HTTPS as a browser does (the form, the session
//! cookie, the CSRF token of the pages, the `Origin` header of every form), then requests each
//! page in turn, one request at a time on one keep-alive connection. A page's server time is the
//! `duration_ms` of its access-log line, found by the answer's `X-Request-Id`: from the request
//! read to the answer made, without the network or the client. Beside it, the server's CPU time
//! over the page's requests (`/proc/PID/stat`) per request.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request};

use crate::data;
use crate::load::{Req, Target};
use crate::postgres::Databases;
use crate::run::{self, cores, note, pin_current_thread, proc_cpu_secs, ChildProc, Options};
use parasol::store::{
    CustomerKey, Ingest, Ingested, NewServiceProvider, OrgFields, Parent, Scope, Store,
};

/// Small organizations beside the large one, and their names each.
const SMALL_ORGS: u64 = 4;
const SMALL: u64 = 100;
/// Name families of the large and the small lists.
const SPACE_BIG: u64 = 50;
const SPACE_SMALL: u64 = 51;
/// Requests per page (fewer with `--quick`), after `WARM_UP` unmeasured ones.
const REPEAT: usize = 200;
const QUICK_REPEAT: usize = 20;
const WARM_UP: usize = 5;
/// Event batches posted to the large organization's key before the pages, so that its journal
/// holds entries: accepted ones and, one in three, a refused one.
const JOURNALED: u64 = 60;
/// The bound every page is held to, at the 99th percentile of its server time.
const BOUND_MS: f64 = 50.0;

/// What the pages are asked about.
struct World {
    api_key: String,
    secret: String,
    big: i64,
    big_key: String,
}

/// One page of the run: what it is called, its requests, and what answers it.
struct Page {
    name: &'static str,
    method: Method,
    /// The path of request `i`, and its form body (without the CSRF token) for a POST.
    request: Box<dyn Fn(usize) -> (String, Option<String>)>,
    expect: u16,
}

/// What one page measured.
struct Measured {
    name: &'static str,
    /// The server's time for each request, from the access log, in milliseconds.
    server_ms: Vec<f64>,
    /// Each request's time at the client over loopback, in milliseconds.
    client_ms: Vec<f64>,
    /// Server CPU seconds over the page's requests, if `/proc` told.
    cpu_secs: Option<f64>,
}

pub fn run(opts: &Options, dir: &Path, quick: bool) -> Result<(), String> {
    let ncores = cores();
    let pinned = opts.pin && ncores >= 2 && pin_current_thread(run::CLIENT_CPU);
    let server_cpu = pinned.then_some(run::SERVER_CPU);
    let repeat = if quick { QUICK_REPEAT } else { REPEAT };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let load = || {
        let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        l.split(' ').take(3).collect::<Vec<_>>().join(" ")
    };
    let load_before = load();
    let mut rows = Vec::new();

    // SQLite: the data directory's own database.
    let sqlite_dir = dir.join("sqlite");
    std::fs::create_dir_all(&sqlite_dir).map_err(|e| e.to_string())?;
    let store = Store::open_sqlite(
        &sqlite_dir.join("parasol.db"),
        parasol::store::OpenRole::Server,
    )
    .map_err(|e| e.to_string())?;
    let world = runtime.block_on(preload(&store, opts.domains));
    // Closing checkpoints the whole WAL into the database file.
    store.close();
    let world = world?;
    rows.extend(engine(
        &runtime,
        opts,
        "SQLite",
        &sqlite_dir,
        None,
        &world,
        server_cpu,
        repeat,
    )?);

    // PostgreSQL: a database of its own on the server at `--database`, dropped at the end.
    if let Some(admin) = &opts.database {
        let mut dbs = Databases {
            admin: admin.clone(),
            names: Vec::new(),
        };
        let tag = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
        let result = runtime.block_on(async {
            let url = dbs.create(&format!("bench_console_{tag}")).await?;
            let store = Store::open_postgres(&url, parasol::store::OpenRole::Server)
                .await
                .map_err(|e| e.to_string())?;
            let world = preload(&store, opts.domains).await;
            store.close();
            Ok::<_, String>((url, world?))
        });
        let result = result.and_then(|(url, world)| {
            let pg_dir = dir.join("postgres");
            std::fs::create_dir_all(&pg_dir).map_err(|e| e.to_string())?;
            engine(
                &runtime,
                opts,
                "PostgreSQL",
                &pg_dir,
                Some(&url),
                &world,
                server_cpu,
                repeat,
            )
        });
        runtime.block_on(dbs.drop_all());
        rows.extend(result?);
    }

    println!();
    println!(
        "console pages, {} names in one organization (and {SMALL_ORGS} of {SMALL}); {repeat} requests a page, one at a time, after {WARM_UP} unmeasured; {}; load average before {load_before}, after {}",
        opts.domains,
        if pinned {
            "server on CPU 0, client on CPU 1"
        } else {
            "not pinned"
        },
        load()
    );
    println!();
    println!("| engine | page | server ms p50 | p99 | max | client ms p50 | p99 | server CPU us per request | p99 under {BOUND_MS:.0} ms |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---|");
    for (engine, m) in &rows {
        let s = sorted(&m.server_ms);
        let p99 = percentile(&s, 0.99);
        let server = format!(
            "{} | {} | {}",
            run::fmt_ms(percentile(&s, 0.5)),
            run::fmt_ms(p99),
            run::fmt_ms(s.last().copied().unwrap_or(f64::NAN)),
        );
        if m.client_ms.is_empty() {
            // A baseline: its own time, nothing of the server's.
            println!("| {engine} | {} | {server} |  |  |  | baseline |", m.name);
            continue;
        }
        let c = sorted(&m.client_ms);
        let cpu = m.cpu_secs.map_or("?".to_string(), |cpu| {
            format!("{:.0}", cpu * 1e6 / m.server_ms.len().max(1) as f64)
        });
        println!(
            "| {engine} | {} | {server} | {} | {} | {cpu} | {} |",
            m.name,
            run::fmt_ms(percentile(&c, 0.5)),
            run::fmt_ms(percentile(&c, 0.99)),
            if p99 < BOUND_MS { "met" } else { "**not met**" }
        );
    }
    let missed = rows
        .iter()
        .filter(|(_, m)| !m.client_ms.is_empty())
        .filter(|(_, m)| percentile(&sorted(&m.server_ms), 0.99) >= BOUND_MS)
        .count();
    if missed > 0 {
        note(format!(
            "console: {missed} page(s) over {BOUND_MS} ms at p99"
        ));
    }
    Ok(())
}

/// Creates the service provider with its credential, its small organizations and the large one,
/// and lists their names, through the store.
async fn preload(store: &Store, big: u64) -> Result<World, String> {
    let now = parasol::timefmt::now();
    let e = |e: parasol::store::StoreError| e.to_string();
    let package = store
        .list_packages()
        .await
        .map_err(e)?
        .first()
        .map(|p| p.id)
        .ok_or("no package in a new database")?;
    let sp = store
        .create_service_provider(
            NewServiceProvider {
                name: "console bench".into(),
                package_id: package,
                seats_total: 1000,
                rebill_at: None,
                expires_at: None,
            },
            now,
        )
        .await
        .map_err(e)?;
    let (api_key, secret, credential) = parasol::demo::new_credential(Some("console bench"))?;
    store
        .create_credential(Scope::ServiceProvider(sp), credential, now)
        .await
        .map_err(e)?;
    let org = async |name: String| {
        let f = OrgFields {
            name,
            seats: 10,
            ..Default::default()
        };
        store
            .create_organization(Parent::ServiceProvider(sp), f, now)
            .await
            .map_err(e)
    };
    let list = async |key: &str, names: Vec<String>, first: u64| {
        let key = CustomerKey::parse(key).ok_or("a malformed customer key")?;
        let request = Ingest {
            key,
            batch_id: uuid::Uuid::new_v4(),
            now,
            batch: data::prepared(names, first),
            new_domain_budget: None,
        };
        match store.ingest(request).await.map_err(e)? {
            Ingested::Stored { .. } => Ok::<(), String>(()),
            other => Err(format!("pre-loading refused: {other:?}")),
        }
    };
    for i in 0..SMALL_ORGS {
        let small = org(format!("console small {i}")).await?;
        let names = (0..SMALL).map(|n| data::domain(SPACE_SMALL, i * SMALL + n));
        list(&small.customer_key, names.collect(), 0).await?;
    }
    let large = org("console large".into()).await?;
    let started = Instant::now();
    let mut done = 0;
    while done < big {
        let n = 50_000.min(big - done);
        let names = (done..done + n).map(|i| data::domain(SPACE_BIG, i));
        list(&large.customer_key, names.collect(), done).await?;
        done += n;
    }
    note(format!(
        "console: {big} names listed through the store in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(World {
        api_key,
        secret,
        big: large.id,
        big_key: large.customer_key,
    })
}

/// Starts a server on one engine, signs in and measures every page; stops the server.
#[allow(clippy::too_many_arguments)]
fn engine(
    runtime: &tokio::runtime::Runtime,
    opts: &Options,
    label: &'static str,
    dir: &Path,
    database: Option<&str>,
    world: &World,
    server_cpu: Option<usize>,
    repeat: usize,
) -> Result<Vec<(&'static str, Measured)>, String> {
    let names = parasol::tls::CertNames::for_listener(([127, 0, 0, 1], 0).into());
    let (cert, _key) = parasol::tls::ensure_self_signed(dir, &names)?;
    let dir_arg = dir.to_str().ok_or("temp path is not UTF-8")?;
    let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--data-dir", dir_arg];
    if let Some(url) = database {
        args.extend(["--database", url]);
    }
    args.extend(opts.serve_args.iter().map(String::as_str));
    let (server, _) = ChildProc::spawn(&opts.binary, &args, server_cpu, "ready: serving ", false)?;
    let target = Target::new(server.addr(), &cert)?;
    let mut measured = runtime.block_on(pages(&target, &server, world, repeat))?;
    let url = database.map(str::to_string);
    let db = dir.join("baseline.db");
    let commits = run::on_cpu(server_cpu, "the commit baseline", move || {
        commit_baseline(url.as_deref(), &db, repeat)
    })?;
    measured.push(Measured {
        name: if database.is_some() {
            "baseline: plain tokio-postgres, one-row DELETE a commit"
        } else {
            "baseline: plain rusqlite (WAL, synchronous=FULL), one-row DELETE a commit"
        },
        server_ms: commits,
        client_ms: Vec::new(),
        cpu_secs: None,
    });
    server.stop()?;
    Ok(measured.into_iter().map(|m| (label, m)).collect())
}

/// The engine's own commit on this machine now, beside the pages that write: `n` one-row
/// deletes, each committed on its own and timed, by a plain client on the server's core, on the
/// server's database (PostgreSQL, a table of its own) or on a SQLite database beside the
/// server's with its durability. What a write page's tail shares with the disk and the
/// database, without any of Parasol.
fn commit_baseline(database: Option<&str>, sqlite: &Path, n: usize) -> Result<Vec<f64>, String> {
    let mut took = Vec::with_capacity(n);
    let n = i64::try_from(n).map_err(|e| e.to_string())?;
    let Some(url) = database else {
        let e = |e: rusqlite::Error| e.to_string();
        let c = rusqlite::Connection::open(sqlite).map_err(e)?;
        c.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
             CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
             INSERT INTO t (id, name)
                 WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 100000)
                 SELECT i, 'h' || i || '.example' FROM s;",
        )
        .map_err(e)?;
        let mut stmt = c.prepare("DELETE FROM t WHERE id = ?1").map_err(e)?;
        for id in 1..=n {
            let t = Instant::now();
            stmt.execute([id]).map_err(e)?;
            took.push(t.elapsed().as_secs_f64() * 1e3);
        }
        return Ok(took);
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let c = crate::postgres::connect(url).await?;
        let e = |e: tokio_postgres::Error| e.to_string();
        c.batch_execute(
            "CREATE TABLE bench_commits (id bigint PRIMARY KEY, name text NOT NULL);
             INSERT INTO bench_commits SELECT i, 'h' || i || '.example'
                 FROM generate_series(1, 100000) i;",
        )
        .await
        .map_err(e)?;
        let stmt = c
            .prepare("DELETE FROM bench_commits WHERE id = $1")
            .await
            .map_err(e)?;
        for id in 1..=n {
            let t = Instant::now();
            c.execute(&stmt, &[&id]).await.map_err(e)?;
            took.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok(took)
    })
}

/// The session of a signed-in browser: its connection, cookie and CSRF token.
struct Browser {
    sender: SendRequest<Full<Bytes>>,
    host: String,
    cookie: String,
    csrf: String,
}

/// One answer: status, `X-Request-Id`, `Set-Cookie`, body.
struct Answer {
    status: u16,
    id: String,
    set_cookie: Option<String>,
    body: String,
}

impl Browser {
    async fn send(
        &mut self,
        method: Method,
        path: &str,
        form: Option<String>,
    ) -> Result<Answer, String> {
        self.sender.ready().await.map_err(|e| e.to_string())?;
        let mut b = Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.host);
        if !self.cookie.is_empty() {
            b = b.header("cookie", &self.cookie);
        }
        if form.is_some() {
            b = b
                .header("content-type", "application/x-www-form-urlencoded")
                .header("origin", format!("https://{}", self.host));
        }
        let req = b
            .body(Full::new(Bytes::from(form.unwrap_or_default())))
            .map_err(|e| e.to_string())?;
        let res = self
            .sender
            .send_request(req)
            .await
            .map_err(|e| e.to_string())?;
        let header = |name: &str| {
            res.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let (status, id, set_cookie) = (
            res.status().as_u16(),
            header("x-request-id").unwrap_or_default(),
            header("set-cookie"),
        );
        let body = res
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok(Answer {
            status,
            id,
            set_cookie,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }
}

/// The values of `attr="..."` right after each `marker` in a page.
fn values_after<'a>(page: &'a str, marker: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    page.split(marker)
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
}

async fn pages(
    target: &Target,
    server: &ChildProc,
    world: &World,
    repeat: usize,
) -> Result<Vec<Measured>, String> {
    // The journal: accepted batches and refused ones (an event without its dstDomain).
    let mut poster = target.connect().await?;
    for n in 0..JOURNALED {
        let (body, expect) = if n % 3 == 2 {
            ("[{\"deviceId\":\"x\"}]".to_string(), 400)
        } else {
            let name = data::domain(SPACE_BIG, n);
            (format!("[{}]", data::event_json(&name, n)), 202)
        };
        let req = Req::post(
            format!("/1.0/events?customerKey={}", world.big_key),
            Bytes::from(body),
            expect,
            1,
        );
        let (status, _) = target.send(&mut poster, req).await?;
        if status != expect {
            return Err(format!(
                "an event batch answered {status}, {expect} expected"
            ));
        }
    }

    let host = target.addr.to_string();
    let mut b = Browser {
        sender: target.connect().await?,
        host,
        cookie: String::new(),
        csrf: String::new(),
    };
    let form = format!(
        "api_key={}&secret={}",
        parasol::http::query_encode(&world.api_key),
        parasol::http::query_encode(&world.secret)
    );
    let signed = b.send(Method::POST, "/console/signin", Some(form)).await?;
    let cookie = signed
        .set_cookie
        .filter(|_| signed.status == 303)
        .and_then(|c| c.split(';').next().map(str::to_string))
        .ok_or_else(|| format!("sign-in answered {} without a cookie", signed.status))?;
    b.cookie = cookie;
    let overview = b.send(Method::GET, "/console/", None).await?;
    b.csrf = values_after(&overview.body, "name=\"csrf\" value=\"")
        .next()
        .ok_or("the overview holds no CSRF token: not signed in")?
        .to_string();

    let org = format!("/console/organizations/{}", world.big);
    // Listed entries to delete, by id: pages of names from the middle of the list on.
    let need = repeat + WARM_UP;
    let mut ids = Vec::new();
    let mut after = "h8".to_string();
    while ids.len() < need {
        let page = b
            .send(Method::GET, &format!("{org}?after={after}"), None)
            .await?;
        let found: Vec<String> = values_after(&page.body, "name=\"id\" value=\"")
            .map(str::to_string)
            .collect();
        let last = values_after(&page.body, "aria-label=\"Delete ")
            .last()
            .map(str::to_string);
        let Some(last) = last else {
            return Err(format!("no listed entries after {after} to delete"));
        };
        ids.extend(found);
        after = last;
    }
    let listed = data::domain(SPACE_BIG, 7);
    let get = |name: &'static str, path: String| Page {
        name,
        method: Method::GET,
        request: Box::new(move |_| (path.clone(), None)),
        expect: 200,
    };
    let allowed = |i: usize| data::domain(SPACE_BIG, 100 + i as u64);
    let pages = vec![
        get("overview", "/console/".into()),
        get("organization, page 1", org.clone()),
        // Past fifteen sixteenths of the names (they start with h and 12 hex digits).
        get("organization, deep page", format!("{org}?after=hf")),
        get("search by prefix, hit", format!("{org}?q=h3f")),
        get("search by prefix, miss", format!("{org}?q=h3fz")),
        get("decision, listed name", format!("{org}?name={listed}")),
        get("decision, subdomain", format!("{org}?name=www.{listed}")),
        get(
            "decision, not listed",
            format!("{org}?name=clean.example.net"),
        ),
        get("journal", format!("{org}/journal")),
        get("journal, status 400", format!("{org}/journal?status=400")),
        Page {
            name: "allow list, add",
            method: Method::POST,
            request: Box::new({
                let org = org.clone();
                move |i| {
                    (
                        format!("{org}/allowlist/add"),
                        Some(format!("name={}", allowed(i))),
                    )
                }
            }),
            expect: 303,
        },
        Page {
            name: "allow list, remove",
            method: Method::POST,
            request: Box::new({
                let org = org.clone();
                move |i| {
                    let path = format!("{org}/allowlist/remove");
                    (path, Some(format!("name={}", allowed(i))))
                }
            }),
            expect: 303,
        },
        Page {
            name: "delete",
            method: Method::POST,
            request: Box::new({
                let org = org.clone();
                move |i| {
                    (
                        format!("{org}/domains/delete"),
                        Some(format!("id={}", ids[i])),
                    )
                }
            }),
            expect: 303,
        },
    ];

    let mut out = Vec::new();
    let mut last_id = String::new();
    let mut by_page = Vec::new();
    for p in &pages {
        let mut ids = Vec::with_capacity(repeat);
        let mut client_ms = Vec::with_capacity(repeat);
        let mut cpu0 = None;
        for i in 0..need {
            if i == WARM_UP {
                cpu0 = proc_cpu_secs(server.pid());
            }
            let (path, form) = (p.request)(i);
            let form = form.map(|f| format!("csrf={}&{f}", b.csrf));
            let t = Instant::now();
            let a = b.send(p.method.clone(), &path, form).await?;
            let took = t.elapsed().as_secs_f64() * 1e3;
            if a.status != p.expect {
                return Err(format!(
                    "{}: {path} answered {}, {} expected",
                    p.name, a.status, p.expect
                ));
            }
            if i >= WARM_UP {
                client_ms.push(took);
                ids.push(a.id.clone());
            }
            last_id = a.id;
        }
        let cpu_secs = proc_cpu_secs(server.pid()).zip(cpu0).map(|(a, b)| a - b);
        by_page.push(ids);
        out.push(Measured {
            name: p.name,
            server_ms: Vec::new(),
            client_ms,
            cpu_secs,
        });
    }
    // The access log is written in batches shortly after the answers: wait for the last line.
    server
        .wait_for_log(&format!("request_id={last_id}"), Duration::from_secs(30))
        .ok_or("the access log did not show the last request")?;
    let durations: HashMap<String, f64> = server
        .lines()
        .iter()
        .filter(|l| l.contains(" access "))
        .filter_map(|l| {
            let field = |k: &str| l.split(' ').find_map(|f| f.strip_prefix(k));
            let ms = field("duration_ms=")?.parse().ok()?;
            Some((field("request_id=")?.to_string(), ms))
        })
        .collect();
    for (m, ids) in out.iter_mut().zip(by_page) {
        m.server_ms = ids
            .iter()
            .map(|id| {
                durations
                    .get(id)
                    .copied()
                    .ok_or_else(|| format!("no access-log line for request {id}"))
            })
            .collect::<Result<_, _>>()?;
    }
    Ok(out)
}

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// The `p` percentile of sorted values, by nearest rank.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_read_after_their_marker() {
        let page = r#"<input name="csrf" value="ab12"><input name="id" value="7"><input name="id" value="9">"#;
        assert_eq!(
            values_after(page, "name=\"csrf\" value=\"").collect::<Vec<_>>(),
            ["ab12"]
        );
        assert_eq!(
            values_after(page, "name=\"id\" value=\"").collect::<Vec<_>>(),
            ["7", "9"]
        );
        assert_eq!(values_after(page, "nothing").count(), 0);
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let v = sorted(&(1..=100).map(f64::from).rev().collect::<Vec<_>>());
        assert_eq!(percentile(&v, 0.5), 51.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert!(percentile(&[], 0.5).is_nan());
    }
}
