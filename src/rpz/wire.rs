//! The primary's DNS messages: zone names, the records of a zone, transfers cut into messages, and their TSIG signatures (each message of a transfer chained to the one before, RFC 8945 5.3.1).

use std::sync::Arc;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::tsig::{make_tsig_record, TsigError, TSIG};
use hickory_proto::rr::rdata::{CNAME, NS, SOA};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType, TSigResponseContext, TSigner};

use super::triggers::{Action, Delta, Triggers};

/// The TTL of every record: how long a resolver may keep a policy answer once the list changed.
pub const TTL: u32 = 60;
/// The SOA's timers: a secondary asks for the serial every minute (NOTIFY makes it sooner), and
/// keeps serving the zone for two weeks without reaching the primary.
const REFRESH: i32 = 60;
const RETRY: i32 = 60;
const EXPIRE: i32 = 14 * 86_400;
/// A transfer's messages are cut at about this many octets of records (TCP allows 65,535).
const MESSAGE_BUDGET: usize = 16_000;

/// `org-<id>.<suffix>.`
pub fn zone_name(org: i64, suffix: &Name) -> Option<Name> {
    Name::from_ascii(format!("org-{org}"))
        .ok()?
        .append_domain(suffix)
        .ok()
}

/// The organization whose zone `name` is the apex of (`org-7.rpz.parasol.` -> 7), whatever the
/// case of its letters.
pub fn org_of(name: &Name, suffix: &Name) -> Option<i64> {
    if name.num_labels() != suffix.num_labels() + 1 || !suffix.zone_of(name) {
        return None;
    }
    let first = name.iter().next()?;
    let first = std::str::from_utf8(first).ok()?.to_ascii_lowercase();
    let id = first.strip_prefix("org-")?;
    if id.is_empty() || id.starts_with('0') || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    id.parse().ok()
}

pub fn soa(zone: &Name, serial: u32) -> Record {
    let localhost = Name::from_ascii("localhost.").unwrap_or_else(|_| Name::root());
    let hostmaster = Name::from_ascii("hostmaster.localhost.").unwrap_or_else(|_| Name::root());
    Record::from_rdata(
        zone.clone(),
        TTL,
        RData::SOA(SOA::new(
            localhost, hostmaster, serial, REFRESH, RETRY, EXPIRE, TTL,
        )),
    )
}

fn ns(zone: &Name) -> Record {
    let localhost = Name::from_ascii("localhost.").unwrap_or_else(|_| Name::root());
    Record::from_rdata(zone.clone(), TTL, RData::NS(NS(localhost)))
}

/// The two records of a trigger (the name, and everything below it), or none when the name does
/// not fit under the zone's name (a name of 255 octets at most): one such record would make
/// the secondary refuse the whole zone.
pub fn triggers(zone: &str, name: &str, action: Action) -> Option<[Record; 2]> {
    let wildcard = Name::from_ascii(format!("*.{name}.{zone}.")).ok()?;
    let exact = Name::from_ascii(format!("{name}.{zone}.")).ok()?;
    let target = match action {
        Action::Block => Name::root(),
        Action::Passthru => Name::from_ascii("rpz-passthru.").ok()?,
    };
    let cname = |n: Name| Record::from_rdata(n, TTL, RData::CNAME(CNAME(target.clone())));
    Some([cname(exact), cname(wildcard)])
}

/// A response to `request`: its id, opcode and question, authoritative.
pub fn response_to(request: &Message, code: ResponseCode) -> Message {
    let mut m = Message::response(request.metadata.id, request.metadata.op_code);
    m.metadata.authoritative = code == ResponseCode::NoError;
    m.metadata.recursion_desired = request.metadata.recursion_desired;
    m.metadata.response_code = code;
    m.add_queries(request.queries.iter().cloned());
    m
}

fn now() -> u64 {
    u64::try_from(crate::timefmt::now()).unwrap_or(0)
}

/// Signs the messages of one response: the first over the request's MAC, each next one over the
/// MAC of the one before it.
pub struct Signing {
    signer: TSigner,
    id: u16,
    /// The request's MAC, then the last message's.
    previous: Vec<u8>,
    first: bool,
}

impl Signing {
    pub fn new(signer: TSigner, id: u16, request_mac: Vec<u8>) -> Signing {
        Signing {
            signer,
            id,
            previous: request_mac,
            first: true,
        }
    }

    /// `message` in wire form, signed.
    pub fn sign(&mut self, message: &mut Message) -> Result<Vec<u8>, String> {
        let unsigned = message.to_vec().map_err(|e| e.to_string())?;
        let time = now();
        let record = if self.first {
            let context = TSigResponseContext::new(
                self.id,
                time,
                self.signer.clone(),
                self.previous.clone(),
                None,
            );
            context.sign(&unsigned).map_err(|e| e.to_string())?
        } else {
            let mut tbs = Vec::with_capacity(unsigned.len() + self.previous.len() + 10);
            tbs.extend_from_slice(
                &u16::try_from(self.previous.len())
                    .unwrap_or(0)
                    .to_be_bytes(),
            );
            tbs.extend_from_slice(&self.previous);
            tbs.extend_from_slice(&unsigned);
            tbs.extend_from_slice(&time.to_be_bytes()[2..]);
            tbs.extend_from_slice(&self.signer.fudge().to_be_bytes());
            let mac = self.signer.sign(&tbs).map_err(|e| e.to_string())?;
            Box::new(make_tsig_record(
                self.signer.signer_name().clone(),
                TSIG::new(
                    self.signer.algorithm().clone(),
                    time,
                    self.signer.fudge(),
                    mac,
                    self.id,
                    None,
                    Vec::new(),
                ),
            ))
        };
        self.previous = record.data.mac.clone();
        self.first = false;
        message.set_signature(record);
        message.to_vec().map_err(|e| e.to_string())
    }
}

/// `message` in wire form, signed when `signing` says so.
pub fn finish(message: &mut Message, signing: Option<&mut Signing>) -> Result<Vec<u8>, String> {
    match signing {
        Some(s) => s.sign(message),
        None => message.to_vec().map_err(|e| e.to_string()),
    }
}

/// An error response to a signed request whose signature cannot be checked or is wrong: NOTAUTH
/// with the TSIG error, unsigned (RFC 8945 5.2).
pub fn tsig_error(request: &Message, error: TsigError, signer: Option<&TSigner>) -> Vec<u8> {
    let mut m = response_to(request, ResponseCode::NotAuth);
    let id = request.metadata.id;
    let context = match (error, signer, request.signature()) {
        (TsigError::BadSig, Some(s), _) => TSigResponseContext::bad_signature(id, now(), s.clone()),
        (_, _, Some(sig)) => TSigResponseContext::unknown_key(id, now(), sig.name.clone()),
        (_, _, None) => return m.to_vec().unwrap_or_default(),
    };
    if let Ok(unsigned) = m.to_vec() {
        if let Ok(record) = context.sign(&unsigned) {
            m.set_signature(record);
        }
    }
    m.to_vec().unwrap_or_default()
}

/// A NOTIFY for the zone at `serial` (RFC 1996), with the message's id.
pub fn notify(zone: &Name, serial: u32) -> Result<(u16, Vec<u8>), String> {
    let mut m = Message::new(rand_id(), MessageType::Query, OpCode::Notify);
    m.metadata.authoritative = true;
    let mut q = Query::query(zone.clone(), RecordType::SOA);
    q.query_class = DNSClass::IN;
    m.add_query(q);
    m.add_answer(soa(zone, serial));
    Ok((m.metadata.id, m.to_vec().map_err(|e| e.to_string())?))
}

fn rand_id() -> u16 {
    let mut b = [0u8; 2];
    // SAFETY: getrandom writes at most the buffer's length into it.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 2 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        return (t ^ (t >> 16)) as u16;
    }
    u16::from_be_bytes(b)
}

/// A part of a transfer, in order.
pub enum Part {
    Soa(u32),
    Ns,
    All(Arc<Triggers>),
    Removed(Arc<Delta>),
    Added(Arc<Delta>),
}

/// A transfer (AXFR, or IXFR in either form), cut into messages as they are sent.
pub struct Transfer {
    request: Message,
    zone: Name,
    zone_text: String,
    parts: Vec<Part>,
    part: usize,
    at: usize,
    signing: Option<Signing>,
    /// Records sent, for the log.
    pub records: u64,
}

impl Transfer {
    pub fn new(
        request: &Message,
        zone: Name,
        parts: Vec<Part>,
        signing: Option<Signing>,
    ) -> Transfer {
        let zone_text = zone.to_ascii().trim_end_matches('.').to_string();
        Transfer {
            request: request.clone(),
            zone,
            zone_text,
            parts,
            part: 0,
            at: 0,
            signing,
            records: 0,
        }
    }

    /// The whole zone at `serial`: SOA, NS, the triggers, SOA.
    pub fn full(serial: u32, entries: Arc<Triggers>) -> Vec<Part> {
        vec![
            Part::Soa(serial),
            Part::Ns,
            Part::All(entries),
            Part::Soa(serial),
        ]
    }

    /// The differences from a secondary's serial to `serial` (RFC 1995 2): the new SOA, then for
    /// each version the old SOA, what went, the new SOA, what came; the new SOA again.
    pub fn incremental(serial: u32, deltas: Vec<Arc<Delta>>) -> Vec<Part> {
        let mut parts = vec![Part::Soa(serial)];
        for d in deltas {
            parts.push(Part::Soa(d.from));
            parts.push(Part::Removed(d.clone()));
            parts.push(Part::Soa(d.to));
            parts.push(Part::Added(d));
        }
        parts.push(Part::Soa(serial));
        parts
    }

    /// The next message in wire form; `None` once all were sent.
    pub fn next_message(&mut self) -> Option<Result<Vec<u8>, String>> {
        if self.part >= self.parts.len() {
            return None;
        }
        let mut m = response_to(&self.request, ResponseCode::NoError);
        let mut size = 0;
        while self.part < self.parts.len() && size < MESSAGE_BUDGET {
            let entry = match &self.parts[self.part] {
                Part::Soa(serial) => {
                    m.add_answer(soa(&self.zone, *serial));
                    size += 64 + self.zone_text.len();
                    self.part += 1;
                    self.records += 1;
                    continue;
                }
                Part::Ns => {
                    m.add_answer(ns(&self.zone));
                    size += 32 + self.zone_text.len();
                    self.part += 1;
                    self.records += 1;
                    continue;
                }
                Part::All(t) => t.get(self.at),
                Part::Removed(d) => d.removed.get(self.at).map(|(n, a)| (&**n, *a)),
                Part::Added(d) => d.added.get(self.at).map(|(n, a)| (&**n, *a)),
            };
            let Some((name, action)) = entry else {
                self.part += 1;
                self.at = 0;
                continue;
            };
            self.at += 1;
            if let Some(records) = triggers(&self.zone_text, name, action) {
                for r in records {
                    // Name compression shares the zone's name: about the trigger's own length.
                    size += name.len() + 20;
                    m.add_answer(r);
                    self.records += 1;
                }
            }
        }
        Some(finish(&mut m, self.signing.as_mut()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_names_and_their_organizations() {
        let suffix = Name::from_ascii("rpz.parasol.").unwrap();
        let z = zone_name(7, &suffix).unwrap();
        assert_eq!(z.to_ascii(), "org-7.rpz.parasol.");
        assert_eq!(org_of(&z, &suffix), Some(7));
        let upper = Name::from_ascii("ORG-12.RPZ.Parasol.").unwrap();
        assert_eq!(org_of(&upper, &suffix), Some(12));
        for other in [
            "rpz.parasol.",
            "x.org-7.rpz.parasol.",
            "org-07.rpz.parasol.",
            "org-.rpz.parasol.",
            "org-7.other.",
            "example.com.",
        ] {
            let n = Name::from_ascii(other).unwrap();
            assert_eq!(org_of(&n, &suffix), None, "{other}");
        }
    }

    #[test]
    fn a_name_too_long_for_the_zone_has_no_triggers() {
        let label = "a".repeat(63);
        let long = format!("{label}.{label}.{label}.{}", "b".repeat(50));
        assert!(triggers("org-1.rpz.parasol", &long, Action::Block).is_none());
        let [exact, wild] = triggers("org-1.rpz.parasol", "bad.test", Action::Block).unwrap();
        assert_eq!(exact.name.to_ascii(), "bad.test.org-1.rpz.parasol.");
        assert_eq!(wild.name.to_ascii(), "*.bad.test.org-1.rpz.parasol.");
    }
}
