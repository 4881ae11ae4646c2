//! The RPZ primary (`parasol serve --rpz-listen`): each organization's effective block list as the response-policy zone `org-<id>.<suffix>.`, served to resolvers by zone transfer.
//!
//! - The zones are kept in memory by the resolver exporter's rounds (`crate::export`), from the
//!   same reading of the lists and the same change tracking as the files, so they follow the
//!   lists within the same second, on either engine and on every node.
//! - A round that changes a zone gives it a new serial (one more than the last, or the time in
//!   seconds when later; the last is kept in the data directory, so serials only grow across
//!   restarts) and records the difference in the zone's journal: IXFR (RFC 1995) sends the
//!   differences since the secondary's serial, or the whole zone when the journal does not
//!   reach back that far; AXFR (RFC 5936) sends the whole zone. Both over TCP only.
//! - The journals are kept in the data directory too (`journal`): after a restart a zone whose
//!   list did not change meanwhile keeps its serial and its journal, so secondaries still get
//!   IXFR.
//! - On several nodes (PostgreSQL) each node serves the zones with serials of its own: they
//!   follow the same lists, but each node's rounds see the changes at their own moments, so a
//!   resolver follows one node (a resolver moved to another node is told to transfer the zone
//!   whole once).
//! - After a round that changed zones, each `--rpz-notify` address gets a NOTIFY (RFC 1996) per
//!   changed zone, repeated until answered (a few times at most). Unsigned: a NOTIFY only makes
//!   the secondary ask for the serial, with its own authentication, and Unbound refuses a
//!   signed one.
//! - Transfers and SOA queries are answered to requests signed with the `--rpz-tsig-key` key
//!   (RFC 8945) or coming from an `--rpz-allow` range; a request signed with another key or a
//!   wrong signature gets NOTAUTH, everything else REFUSED: other names, other types, other
//!   opcodes. Over UDP only SOA queries are answered (no amplification).
//! - With the console on, each transfer answered and each request for a zone refused, the zones'
//!   serials and each NOTIFY's outcome are recorded in memory for its overview (`crate::feeds`).

pub mod access;
pub mod journal;
pub mod triggers;
pub mod wire;
pub mod zone;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::tsig::TsigError;
use hickory_proto::rr::{DNSClass, Name, RData, RecordType, TSigner};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::feeds::{Answer, Feeds, Kind, NotifyOutcome, Pull, RpzFacts, Signed};
use access::Cidr;
use wire::{Part, Signing, Transfer};
pub use zone::Zones;

/// What the `--rpz-*` flags ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpzConfig {
    pub listen: SocketAddr,
    /// The zones' common suffix, without the final dot (`rpz.parasol`).
    pub suffix: String,
    pub notify: Vec<SocketAddr>,
    pub tsig_key: Option<PathBuf>,
    pub allow: Vec<Cidr>,
}

/// The default of `--rpz-zone-suffix`.
pub const DEFAULT_SUFFIX: &str = "rpz.parasol";

/// Connections served at once; more wait to be accepted.
const CONNECTIONS: usize = 64;
/// A connection that sends nothing for this long is closed.
const IDLE: Duration = Duration::from_secs(30);
/// A NOTIFY is sent again after this long without an answer, this many times at most.
const NOTIFY_WAIT: Duration = Duration::from_secs(2);
const NOTIFY_TRIES: u32 = 5;

/// Checks a zone suffix: a domain name with room under it for the zones' names and triggers.
pub fn parse_suffix(s: &str) -> Result<String, String> {
    let t = s.trim().trim_end_matches('.').to_ascii_lowercase();
    let ok = !t.is_empty()
        && t.len() <= 64
        && t.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if !ok {
        return Err(format!(
            "--rpz-zone-suffix {s:?}: not a domain name of at most 64 characters"
        ));
    }
    Ok(t)
}

struct Shared {
    zones: Arc<Zones>,
    suffix: Name,
    key: Option<TSigner>,
    allow: Vec<Cidr>,
    notify: Vec<SocketAddr>,
    /// The address NOTIFYs are sent from (the listener's, so that secondaries recognise their
    /// primary), port chosen by the system.
    notify_from: SocketAddr,
    /// Where transfers and NOTIFYs are recorded for the console, if they are.
    feeds: Option<Arc<Feeds>>,
}

/// The running primary: its zones, and the tasks that answer on its sockets.
pub struct Primary {
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Primary {
    /// Reads the key, binds the UDP and TCP sockets and starts answering (every zone is empty
    /// and unknown until the exporter's first round fills them: queries for them are REFUSED
    /// until then). The last serial and the zones' journals are kept in `data_dir`; transfers
    /// and NOTIFYs are recorded in `feeds`, if given.
    pub fn start(
        config: &RpzConfig,
        data_dir: &Path,
        feeds: Option<Arc<Feeds>>,
    ) -> Result<Primary, String> {
        let key = config
            .tsig_key
            .as_deref()
            .map(access::read_key_file)
            .transpose()?;
        if key.is_none() && config.allow.is_empty() {
            return Err(
                "--rpz-listen needs --rpz-tsig-key or --rpz-allow (or both): nobody could \
                 transfer the zones"
                    .into(),
            );
        }
        let suffix = Name::from_ascii(format!("{}.", config.suffix))
            .map_err(|e| format!("--rpz-zone-suffix {}: {e}", config.suffix))?;
        let listen = config.listen;
        let tcp = std::net::TcpListener::bind(listen)
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .and_then(tokio::net::TcpListener::from_std)
            .map_err(|e| format!("--rpz-listen {listen} (TCP): {e}"))?;
        let local = tcp.local_addr().map_err(|e| e.to_string())?;
        // The same port for UDP (the one TCP got, when asked for port 0).
        let udp = std::net::UdpSocket::bind(local)
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .and_then(tokio::net::UdpSocket::from_std)
            .map_err(|e| format!("--rpz-listen {local} (UDP): {e}"))?;
        let notify_from = SocketAddr::new(local.ip(), 0);
        let shared = Arc::new(Shared {
            zones: Arc::new(Zones::in_data_dir(data_dir)),
            suffix,
            key,
            allow: config.allow.clone(),
            notify: config.notify.clone(),
            notify_from,
            feeds,
        });
        if let Some(feeds) = &shared.feeds {
            feeds.serving_zones(RpzFacts {
                listen: local,
                suffix: config.suffix.clone(),
                key: shared.key.as_ref().map(|k| k.signer_name().to_string()),
                allow: config.allow.iter().map(|c| c.to_string()).collect(),
                notify: config.notify.clone(),
            });
        }
        log::info!(
            "rpz: serving the zones org-<id>.{} on {local} (UDP and TCP){}{}",
            config.suffix,
            match &shared.key {
                Some(k) => format!(", to requests signed with key {}", k.signer_name()),
                None => String::new(),
            },
            if config.allow.is_empty() {
                String::new()
            } else {
                format!(", to {} address range(s)", config.allow.len())
            }
        );
        let tasks = vec![
            tokio::spawn(serve_udp(shared.clone(), udp)),
            tokio::spawn(serve_tcp(shared.clone(), tcp)),
        ];
        Ok(Primary { shared, tasks })
    }

    pub fn zones(&self) -> Arc<Zones> {
        self.shared.zones.clone()
    }

    /// The zones of these organizations changed: NOTIFY every `--rpz-notify` address.
    pub fn changed(&self, orgs: &[i64]) {
        for &org in orgs {
            let Some(serial) = self.shared.zones.serial(org) else {
                continue;
            };
            if let Some(feeds) = &self.shared.feeds {
                feeds.zone_serial(org, serial, crate::timefmt::now());
            }
            let Some(zone) = wire::zone_name(org, &self.shared.suffix) else {
                continue;
            };
            for &to in &self.shared.notify {
                tokio::spawn(send_notify(
                    self.shared.clone(),
                    (org, zone.clone()),
                    serial,
                    to,
                ));
            }
        }
    }

    /// Stops answering.
    pub fn stop(self) {
        for t in self.tasks {
            t.abort();
        }
    }
}

/// Sends one NOTIFY until it is answered (any answer with its id from that address), a few
/// times at most; how it ended is recorded in the feeds.
async fn send_notify(shared: Arc<Shared>, (org, zone): (i64, Name), serial: u32, to: SocketAddr) {
    if let Some(feeds) = &shared.feeds {
        feeds.notify_sent(to, org, serial, crate::timefmt::now());
    }
    let outcome = notify(&shared, &zone, serial, to).await;
    if let Some(feeds) = &shared.feeds {
        feeds.notify_ended(to, org, serial, outcome);
    }
}

async fn notify(shared: &Shared, zone: &Name, serial: u32, to: SocketAddr) -> NotifyOutcome {
    let from = match (shared.notify_from.ip(), to.ip()) {
        (a, b) if a.is_ipv4() == b.is_ipv4() && !a.is_unspecified() => shared.notify_from,
        (_, IpAddr::V4(_)) => SocketAddr::from(([0, 0, 0, 0], 0)),
        (_, IpAddr::V6(_)) => SocketAddr::from(([0u16; 8], 0)),
    };
    let failed = |e: String| {
        log::warn!("rpz: NOTIFY for {zone} to {to}: {e}");
        NotifyOutcome::Failed(e)
    };
    let socket = match tokio::net::UdpSocket::bind(from).await {
        Ok(s) => s,
        Err(e) => return failed(e.to_string()),
    };
    // Unsigned: Unbound does not take a signed NOTIFY, and a NOTIFY only makes the secondary
    // ask for the serial, which it does with its own authentication.
    let (id, bytes) = match wire::notify(zone, serial) {
        Ok(m) => m,
        Err(e) => return failed(e.to_string()),
    };
    for _ in 0..NOTIFY_TRIES {
        if let Err(e) = socket.send_to(&bytes, to).await {
            return failed(e.to_string());
        }
        let answered = tokio::time::timeout(NOTIFY_WAIT, async {
            let mut buf = [0u8; 2048];
            loop {
                match socket.recv_from(&mut buf).await {
                    Ok((n, src)) if src == to && n >= 4 && buf[..2] == id.to_be_bytes() => {
                        let rcode = buf[3] & 0x0f;
                        if rcode != 0 {
                            log::info!(
                                "rpz: NOTIFY for {zone} to {to}: answered with RCODE {rcode}"
                            );
                        }
                        return Some(rcode);
                    }
                    Ok(_) => continue,
                    Err(_) => return None,
                }
            }
        })
        .await;
        if let Ok(Some(rcode)) = answered {
            log::debug!("rpz: NOTIFY for {zone} serial {serial} answered by {to}");
            return NotifyOutcome::Answered(rcode);
        }
    }
    log::warn!("rpz: NOTIFY for {zone} serial {serial}: no answer from {to}");
    NotifyOutcome::NoAnswer(NOTIFY_TRIES)
}

/// What a request gets.
enum Reply {
    /// Nothing (a response, or not a DNS message).
    Nothing,
    One(Vec<u8>),
    Transfer(Box<Transfer>),
}

/// How a request came.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Over {
    Udp,
    Tcp,
}

impl Shared {
    fn refused(
        &self,
        request: &Message,
        code: ResponseCode,
        seen: &mut Seen,
        why: &'static str,
    ) -> Reply {
        seen.answer = Some(Answer::Refused(why));
        let m = wire::response_to(request, code);
        Reply::One(m.to_vec().unwrap_or_default())
    }

    fn answer(&self, bytes: &[u8], from: IpAddr, over: Over) -> Reply {
        let Ok(request) = Message::from_vec(bytes) else {
            return Reply::Nothing;
        };
        if request.metadata.message_type == MessageType::Response {
            return Reply::Nothing;
        }
        let Some(feeds) = &self.feeds else {
            return self.reply(&request, bytes, from, over, &mut Seen::default());
        };
        let mut seen = Seen::of(&request, &self.suffix);
        let reply = self.reply(&request, bytes, from, over, &mut seen);
        if let Some(pull) = seen.pull(from) {
            feeds.pulled(pull);
        }
        reply
    }

    fn reply(
        &self,
        request: &Message,
        bytes: &[u8],
        from: IpAddr,
        over: Over,
        seen: &mut Seen,
    ) -> Reply {
        // A signed request must be signed with the key, and the signature must hold.
        let mut signing = None;
        if let Some(sig) = request.signature() {
            seen.signed = Signed::Other;
            let Some(key) = self
                .key
                .as_ref()
                .filter(|k| sig.name == *k.signer_name() && sig.data.algorithm == *k.algorithm())
            else {
                log::info!(
                    "rpz: {from}: a request signed with an unknown key {}",
                    sig.name
                );
                seen.answer = Some(Answer::Refused("signed with an unknown key"));
                return Reply::One(wire::tsig_error(request, TsigError::BadKey, None));
            };
            match key.verify_message_byte(bytes, None, true) {
                Ok((mac, _, window)) => {
                    let now = u64::try_from(crate::timefmt::now()).unwrap_or(0);
                    if !window.contains(&now) {
                        log::info!("rpz: {from}: a signed request out of its time window");
                        seen.answer = Some(Answer::Refused("signed out of its time window"));
                        return Reply::One(wire::tsig_error(
                            request,
                            TsigError::BadTime,
                            Some(key),
                        ));
                    }
                    seen.signed = Signed::Key;
                    signing = Some(Signing::new(key.clone(), request.metadata.id, mac));
                }
                Err(_) => {
                    log::info!(
                        "rpz: {from}: a request with a wrong signature for key {}",
                        sig.name
                    );
                    seen.answer = Some(Answer::Refused("a wrong signature"));
                    return Reply::One(wire::tsig_error(request, TsigError::BadSig, Some(key)));
                }
            }
        }
        let admitted = signing.is_some() || self.allow.iter().any(|c| c.contains(from));
        if !admitted {
            log::info!(
                "rpz: {from}: refused (neither signed with the key nor from an allowed address)"
            );
            return self.refused(
                request,
                ResponseCode::Refused,
                seen,
                "neither signed with the key nor from an allowed address",
            );
        }
        if request.metadata.op_code != OpCode::Query || request.queries.len() != 1 {
            return self.refused(request, ResponseCode::Refused, seen, "not a query");
        }
        let q = &request.queries[0];
        let zone = q.name().to_lowercase();
        let Some(org) = wire::org_of(&zone, &self.suffix) else {
            return self.refused(
                request,
                ResponseCode::Refused,
                seen,
                "not a zone of this server",
            );
        };
        if q.query_class() != DNSClass::IN {
            return self.refused(request, ResponseCode::Refused, seen, "not class IN");
        }
        let no_zone = "no such zone";
        let answer = |parts: Vec<Part>, signing: Option<Signing>| {
            Reply::Transfer(Box::new(Transfer::new(
                request,
                zone.clone(),
                parts,
                signing,
            )))
        };
        match (q.query_type(), over) {
            (RecordType::SOA, _) | (RecordType::IXFR, Over::Udp) => {
                let Some(serial) = self.zones.serial(org) else {
                    return self.refused(request, ResponseCode::Refused, seen, no_zone);
                };
                let mut m = wire::response_to(request, ResponseCode::NoError);
                m.add_answer(wire::soa(&zone, serial));
                match wire::finish(&mut m, signing.as_mut()) {
                    Ok(b) => Reply::One(b),
                    Err(e) => {
                        log::warn!("rpz: cannot answer {zone} SOA: {e}");
                        self.refused(request, ResponseCode::ServFail, seen, "the answer failed")
                    }
                }
            }
            (RecordType::AXFR, Over::Tcp) => {
                let Some((serial, entries)) = self.zones.snapshot(org) else {
                    return self.refused(request, ResponseCode::Refused, seen, no_zone);
                };
                log::info!(
                    "rpz: {from}: AXFR of {zone} serial {serial} ({} names)",
                    entries.len()
                );
                (seen.got, seen.answer) = (Some(serial), Some(Answer::Whole));
                answer(Transfer::full(serial, entries), signing)
            }
            (RecordType::IXFR, Over::Tcp) => {
                let theirs = request.authorities.iter().find_map(|r| match &r.data {
                    RData::SOA(soa) => Some(soa.serial),
                    _ => None,
                });
                let Some(theirs) = theirs else {
                    return self.refused(request, ResponseCode::FormErr, seen, "no SOA of its own");
                };
                seen.had = Some(theirs);
                let Some((serial, transfer)) = self.zones.since(org, theirs) else {
                    return self.refused(request, ResponseCode::Refused, seen, no_zone);
                };
                seen.got = Some(serial);
                match transfer {
                    zone::Transfer::Current => {
                        log::info!("rpz: {from}: IXFR of {zone} from serial {theirs}: current");
                        seen.answer = Some(Answer::Current);
                        answer(vec![Part::Soa(serial)], signing)
                    }
                    zone::Transfer::Deltas(deltas) => {
                        log::info!(
                            "rpz: {from}: IXFR of {zone} from serial {theirs} to {serial} ({} versions)",
                            deltas.len()
                        );
                        seen.answer = Some(Answer::Differences(deltas.len()));
                        answer(Transfer::incremental(serial, deltas), signing)
                    }
                    zone::Transfer::Full => {
                        let Some((serial, entries)) = self.zones.snapshot(org) else {
                            return self.refused(request, ResponseCode::Refused, seen, no_zone);
                        };
                        log::info!(
                            "rpz: {from}: IXFR of {zone} from serial {theirs}: the journal does \
                             not reach back, the whole zone at serial {serial}"
                        );
                        (seen.got, seen.answer) = (Some(serial), Some(Answer::Whole));
                        answer(Transfer::full(serial, entries), signing)
                    }
                }
            }
            (RecordType::AXFR, Over::Udp) => {
                self.refused(request, ResponseCode::Refused, seen, "a transfer over UDP")
            }
            _ => self.refused(request, ResponseCode::Refused, seen, "not a type served"),
        }
    }
}

/// What the feeds record of a request for a zone (`crate::feeds`): filled in as it is answered.
#[derive(Default)]
struct Seen {
    /// `None`: not a request for a zone's SOA or a transfer, not recorded.
    kind: Option<Kind>,
    org: Option<i64>,
    had: Option<u32>,
    got: Option<u32>,
    signed: Signed,
    /// `None`: answered with the SOA (a query, not recorded unless refused).
    answer: Option<Answer>,
}

impl Seen {
    fn of(request: &Message, suffix: &Name) -> Seen {
        let q = request.queries.first();
        Seen {
            kind: q.and_then(|q| match q.query_type() {
                RecordType::AXFR => Some(Kind::Axfr),
                RecordType::IXFR => Some(Kind::Ixfr),
                RecordType::SOA => Some(Kind::Soa),
                _ => None,
            }),
            org: q.and_then(|q| wire::org_of(q.name(), suffix)),
            ..Seen::default()
        }
    }

    fn pull(&self, from: IpAddr) -> Option<Pull> {
        Some(Pull {
            at: crate::timefmt::now(),
            from,
            kind: self.kind?,
            org: self.org,
            had: self.had,
            got: self.got,
            signed: self.signed,
            answer: self.answer?,
        })
    }
}

async fn serve_udp(shared: Arc<Shared>, socket: tokio::net::UdpSocket) {
    let mut buf = vec![0u8; 4096];
    loop {
        let (n, from) = match socket.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(e) => {
                log::debug!("rpz: UDP: {e}");
                continue;
            }
        };
        let reply = match shared.answer(&buf[..n], from.ip(), Over::Udp) {
            Reply::Nothing => continue,
            Reply::One(b) => b,
            Reply::Transfer(mut t) => match t.next_message() {
                Some(Ok(b)) => b,
                _ => continue,
            },
        };
        if reply.len() <= 512 {
            let _ = socket.send_to(&reply, from).await;
        }
    }
}

async fn serve_tcp(shared: Arc<Shared>, listener: tokio::net::TcpListener) {
    let slots = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, from) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                log::debug!("rpz: TCP accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_connection(&shared, stream, from.ip()).await {
                log::debug!("rpz: {from}: {e}");
            }
            drop(permit);
        });
    }
}

async fn serve_connection(
    shared: &Shared,
    mut stream: tokio::net::TcpStream,
    from: IpAddr,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    loop {
        let mut len = [0u8; 2];
        match tokio::time::timeout(IDLE, stream.read_exact(&mut len)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Ok(()),
        }
        let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
        tokio::time::timeout(IDLE, stream.read_exact(&mut body))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "idle"))??;
        match shared.answer(&body, from, Over::Tcp) {
            Reply::Nothing => return Ok(()),
            Reply::One(b) => write_message(&mut stream, &b).await?,
            Reply::Transfer(mut t) => {
                // Encoding a large zone takes a while: on a thread of its own, a few messages
                // ahead of the socket, at the lowest priority (`encoder`).
                let (tx, mut rx) = tokio::sync::mpsc::channel(8);
                encoder(move || {
                    while let Some(m) = t.next_message() {
                        if tx.blocking_send(m).is_err() {
                            break;
                        }
                    }
                })?;
                let mut out = tokio::io::BufWriter::with_capacity(64 * 1024, &mut stream);
                let mut result = Ok(());
                while let Some(m) = rx.recv().await {
                    result = match m {
                        Ok(m) => write_message(&mut out, &m).await,
                        Err(e) => Err(std::io::Error::other(e)),
                    };
                    if result.is_err() {
                        break;
                    }
                }
                // The encoder stops at its next message once the receiver is gone.
                drop(rx);
                result?;
                out.flush().await?;
            }
        }
    }
}

/// Runs a transfer's encoding on a thread of its own under `SCHED_IDLE` (one per transfer, at
/// most `CONNECTIONS`; `crate::bulk::lowest_priority`): a secondary pulling a large zone (two CPU
/// seconds for a million names) gets the CPU the server's requests leave, so it never holds up
/// the enforcement interface; on an idle server it runs at full speed.
fn encoder(work: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("parasol-rpz-xfr".into())
        .spawn(move || {
            crate::bulk::lowest_priority();
            work();
        })
        .map(drop)
}

async fn write_message(
    w: &mut (impl tokio::io::AsyncWrite + Unpin),
    bytes: &[u8],
) -> std::io::Result<()> {
    let len = u16::try_from(bytes.len())
        .map_err(|_| std::io::Error::other("a message over 65,535 octets"))?;
    w.write_all(&len.to_be_bytes()).await?;
    w.write_all(bytes).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transfer's encoding runs under `SCHED_IDLE`, below every thread that answers requests
    /// or commits writes.
    #[test]
    fn transfers_are_encoded_at_the_lowest_priority() {
        let (tx, rx) = std::sync::mpsc::channel();
        encoder(move || {
            // SAFETY: sched_getscheduler on the calling thread.
            let _ = tx.send(unsafe { libc::sched_getscheduler(0) });
        })
        .unwrap();
        assert_eq!(rx.recv().unwrap(), libc::SCHED_IDLE);
    }
}
