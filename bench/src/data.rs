//! Test data for the benchmark: event bodies, pseudo-random domain names, the pre-loaded domain
//! list (written through the store, not over HTTP, so that a million entries take seconds) and a
//! reputation file.

use std::io::Write;
use std::path::Path;

use bytes::Bytes;

use parasol::store::{
    CustomerKey, Ingest, Ingested, OrgFields, Parent, PreparedBatch, PreparedEvent, Scope, Store,
};

/// Largest batch body: the 1 MiB rule counts the request line and headers too.
pub const MAX_BATCH_BYTES: usize = 1024 * 1024 - 2048;

/// A pseudo-random 64-bit value for `n` (splitmix64): names spread over the index like real ones.
pub fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The `n`-th name of a family (`space` keeps families apart), e.g. `h3f9a0c21d4e5.b2.example`.
pub fn domain(space: u64, n: u64) -> String {
    format!("h{:012x}.b{space}.example", mix(space << 40 ^ n) >> 16)
}

/// The name of event `n` of family `space`: with `mixed`, nine in ten are one of the hot names
/// (listed beforehand, as most names a product reports are), the others new names of the family;
/// without, all new.
pub fn event_name(space: u64, n: u64, mixed: bool) -> String {
    let r = mix(n ^ space << 48);
    if mixed && !r.is_multiple_of(10) {
        domain(SPACE_HOT, r % HOT_DOMAINS)
    } else {
        domain(space, n)
    }
}

/// The body of a single event: event `n` of family `space` (see `event_name`).
pub fn single_event(space: u64, n: u64, mixed: bool) -> bytes::Bytes {
    bytes::Bytes::from(event_json(&event_name(space, n, mixed), n))
}

/// One event as a client sends it: the eight required fields, about 260 bytes.
pub fn event_json(domain: &str, n: u64) -> String {
    format!(
        concat!(
            r#"{{"deviceId":"ba6a59f4-e692-4724-ba36-{:012x}","deviceVersion":"13.7a","#,
            r#""eventTime":"2026-11-23T10:00:00Z","alertTime":"2026-11-23T10:00:01Z","#,
            r#""dstDomain":"{d}","dstUrl":"http://{d}/","#,
            r#""protocolVersion":"1.0a","providerName":"Security Platform"}}"#
        ),
        n & 0xffff_ffff_ffff,
        d = domain,
    )
}

/// A JSON array of events named by `names`, stopping before `max_bytes`. Returns the body and the
/// number of events in it.
pub fn batch(names: impl Iterator<Item = (String, u64)>, max_bytes: usize) -> (Bytes, u64) {
    let mut out = String::with_capacity(max_bytes);
    out.push('[');
    let mut count = 0;
    for (name, n) in names {
        let e = event_json(&name, n);
        if out.len() + e.len() + 2 > max_bytes {
            break;
        }
        if count > 0 {
            out.push(',');
        }
        out.push_str(&e);
        count += 1;
    }
    out.push(']');
    (Bytes::from(out), count)
}

/// The organizations of a benchmark run.
pub struct World {
    /// All-new-domain ingest target.
    pub ingest_key: String,
    /// 90%-repeat ingest and single events.
    pub mixed_key: String,
    /// The big list (`domains` entries).
    pub list_key: String,
    /// Management workload: organization id and its Basic credential.
    pub mgmt_org: i64,
    pub mgmt_auth: String,
}

/// Family numbers of the names.
pub const SPACE_LIST: u64 = 1;
pub const SPACE_HOT: u64 = 2;
pub const SPACE_REPUTATION: u64 = 3;

/// Names of the repeat mix's already-listed domains.
pub const HOT_DOMAINS: u64 = 1000;

/// Creates the organizations and pre-loads `list_domains` entries (with one stored event each) for
/// the list workload and `HOT_DOMAINS` for the repeat mix.
pub fn prepare(db: &Path, list_domains: u64) -> Result<World, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let store =
        Store::open_sqlite(db, parasol::store::OpenRole::Server).map_err(|e| e.to_string())?;
    let world = runtime.block_on(preload(&store, list_domains));
    // Closing checkpoints the whole WAL into the database file and truncates it.
    store.close();
    world
}

/// `prepare` for a server on PostgreSQL (the database at `url`, its schema created here): the
/// organizations and the hot names, no big list.
pub async fn prepare_postgres(url: &str) -> Result<World, String> {
    let store = Store::open_postgres(url, parasol::store::OpenRole::Server)
        .await
        .map_err(|e| e.to_string())?;
    let world = preload(&store, 0).await;
    store.close();
    world
}

async fn preload(store: &Store, list_domains: u64) -> Result<World, String> {
    let now = parasol::timefmt::now();
    let e = |e: parasol::store::StoreError| e.to_string();
    let org = async |name: &str| {
        let f = OrgFields {
            name: name.into(),
            seats: 10,
            ..Default::default()
        };
        store.create_organization(Parent::None, f, now).await
    };
    let ingest = org("bench ingest").await.map_err(e)?;
    let mixed = org("bench mixed").await.map_err(e)?;
    let list = org("bench list").await.map_err(e)?;
    let mgmt = org("bench management").await.map_err(e)?;
    let (api_key, secret, credential) = parasol::demo::new_credential(Some("bench"))?;
    store
        .create_credential(Scope::Organization(mgmt.id), credential, now)
        .await
        .map_err(e)?;
    let load = async |key: &str, batch: PreparedBatch| {
        let key = CustomerKey::parse(key).ok_or("a malformed customer key")?;
        let request = Ingest {
            key,
            batch_id: uuid::Uuid::new_v4(),
            now,
            batch,
            new_domain_budget: None,
        };
        match store.ingest(request).await.map_err(e)? {
            Ingested::Stored { .. } => Ok(()),
            other => Err(format!("pre-loading refused: {other:?}")),
        }
    };
    let hot = prepared((0..HOT_DOMAINS).map(|n| domain(SPACE_HOT, n)).collect(), 0);
    load(&mixed.customer_key, hot).await?;
    const CHUNK: u64 = 50_000;
    let mut done = 0;
    while done < list_domains {
        let n = CHUNK.min(list_domains - done);
        let events = prepared(
            (done..done + n).map(|i| domain(SPACE_LIST, i)).collect(),
            done,
        );
        load(&list.customer_key, events).await?;
        done += n;
    }
    Ok(World {
        ingest_key: ingest.customer_key,
        mixed_key: mixed.customer_key,
        list_key: list.customer_key,
        mgmt_org: mgmt.id,
        mgmt_auth: basic_auth(&api_key, &secret),
    })
}

/// The batch of benchmark events numbered `first..`, one for each name, all listed.
pub fn prepared(names: Vec<String>, first: u64) -> PreparedBatch {
    let bodies: Vec<String> = (first..)
        .zip(&names)
        .map(|(n, name)| event_json(name, n))
        .collect();
    let events = names
        .into_iter()
        .map(|domain| PreparedEvent {
            domain,
            listed: true,
        })
        .collect();
    PreparedBatch::new(events, format!("[{}]", bodies.join(",")))
}

/// Writes a reputation file of `lines` entries with scores -1, 0 and 1 (one in three is known
/// safe), none of which names a benchmark domain.
pub fn write_reputation(path: &Path, lines: u64) -> Result<(), String> {
    let f = std::fs::File::create(path).map_err(|e| format!("{path:?}: {e}"))?;
    let mut w = std::io::BufWriter::new(f);
    writeln!(w, "# benchmark reputation data").map_err(|e| e.to_string())?;
    for i in 0..lines {
        let score = ["-1", "0", "1"][(i % 3) as usize];
        writeln!(w, "{},{score}", domain(SPACE_REPUTATION, i)).map_err(|e| e.to_string())?;
    }
    w.flush().map_err(|e| e.to_string())
}

/// The `authorization` header value of HTTP Basic credentials.
pub fn basic_auth(key: &str, secret: &str) -> String {
    format!(
        "Basic {}",
        base64_basic::encode(format!("{key}:{secret}").as_bytes())
    )
}

/// Standard base64, for the Basic header (no dependency for twenty lines).
mod base64_basic {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub fn encode(input: &[u8]) -> String {
        let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
        for chunk in input.chunks(3) {
            let b = [
                chunk[0],
                chunk.get(1).copied().unwrap_or(0),
                chunk.get(2).copied().unwrap_or(0),
            ];
            let v = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(ALPHABET[(v >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    #[cfg(test)]
    #[test]
    fn known_values() {
        assert_eq!(encode(b"a:b"), "YTpi");
        assert_eq!(encode(b"ab"), "YWI=");
        assert_eq!(encode(b"a"), "YQ==");
    }
}
