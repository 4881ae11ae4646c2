#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The RPZ primary (`parasol serve --rpz-listen`) against the real server, with hickory-proto as
//! the secondary: SOA queries, AXFR, IXFR of a change (and the whole zone when the journal does
//! not reach back), NOTIFY on change, TSIG on every message of a transfer, what is refused
//! (unsigned from elsewhere, a wrong key, names outside the zones, transfers over UDP), and
//! IXFR and serials that keep growing across a restart. Real resolvers pull the zones in `.ci/rpz-e2e`.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::time::Duration;

use common::*;
use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::tsig::TsigAlgorithm;
use hickory_proto::rr::rdata::SOA;
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType, TSigner};
use parasol::rpz::access::Cidr;
use parasol::rpz::RpzConfig;
use serde_json::json;

const SECRET: &str = "q7ANbnyliDMuvWgnKOxMLi313JGcTZB5ydMW5CyUGXQ=";
const OTHER_SECRET: &str = "Zm9vYmFyZm9vYmFyZm9vYmFyZm9vYmFyZm9vYmFyZm8=";

fn key_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("rpz.key");
    std::fs::write(
        &path,
        format!("key \"parasol-rpz\" {{\n\talgorithm hmac-sha256;\n\tsecret \"{SECRET}\";\n}};\n"),
    )
    .unwrap();
    path
}

fn signer(name: &str, secret: &str) -> TSigner {
    let key = parasol::management::auth::base64_decode(secret).unwrap();
    TSigner::new(
        key,
        TsigAlgorithm::HmacSha256,
        Name::from_ascii(name).unwrap(),
        300,
    )
    .unwrap()
}

/// A port free for both UDP and TCP on 127.0.0.1.
fn free_port() -> u16 {
    loop {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

struct Primary {
    server: TestServer,
    addr: SocketAddr,
    notified: UdpSocket,
}

/// A server with the primary on a free port, the key, `allow` as the only address range, and a
/// NOTIFY target of the test's own.
async fn start_in(dir: TempDir, allow: &[&str]) -> Primary {
    let notified = UdpSocket::bind("127.0.0.1:0").unwrap();
    notified
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let notify = notified.local_addr().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let key = key_file(dir.path());
    let allow: Vec<Cidr> = allow.iter().map(|c| Cidr::parse(c).unwrap()).collect();
    let server = TestServer::start_in(dir, move |c| {
        c.rpz = Some(RpzConfig {
            listen: addr,
            suffix: "rpz.parasol".into(),
            notify: vec![notify],
            tsig_key: Some(key),
            allow,
        });
    })
    .await;
    Primary {
        server,
        addr,
        notified,
    }
}

fn zone(org: i64) -> Name {
    Name::from_ascii(format!("org-{org}.rpz.parasol.")).unwrap()
}

fn request(name: &Name, qtype: RecordType) -> Message {
    let mut m = Message::query();
    let mut q = Query::query(name.clone(), qtype);
    q.query_class = DNSClass::IN;
    m.add_query(q);
    m
}

/// An IXFR request from `serial`.
fn ixfr(zone: &Name, serial: u32) -> Message {
    let mut m = request(zone, RecordType::IXFR);
    let localhost = Name::from_ascii("localhost.").unwrap();
    m.add_authority(Record::from_rdata(
        zone.clone(),
        0,
        RData::SOA(SOA::new(localhost.clone(), localhost, serial, 0, 0, 0, 0)),
    ));
    m
}

/// The request in wire form, signed with `key` if given, with the verifier of its answers.
fn encode(
    mut m: Message,
    key: Option<&TSigner>,
) -> (Vec<u8>, Option<hickory_proto::rr::TSigVerifier>) {
    match key {
        Some(k) => {
            let now = parasol::timefmt::now() as u64;
            let (sig, verifier) = k.sign_message(&m, now).unwrap();
            m.set_signature(sig);
            (m.to_vec().unwrap(), verifier)
        }
        None => (m.to_vec().unwrap(), None),
    }
}

/// Asks over UDP; the answer, its signature checked if the request was signed.
fn ask_udp(addr: SocketAddr, m: Message, key: Option<&TSigner>) -> Message {
    let (bytes, verifier) = encode(m, key);
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.send_to(&bytes, addr).unwrap();
    let mut buf = [0u8; 4096];
    let n = s.recv(&mut buf).unwrap();
    let answer = Message::from_vec(&buf[..n]).unwrap();
    if let (Some(mut v), ResponseCode::NoError) = (verifier, answer.metadata.response_code) {
        v.verify(&buf[..n]).expect("a correctly signed answer");
    }
    answer
}

/// Asks over TCP, then closes its side: every message of the answer, until the server closes
/// the connection, each one's signature checked in turn if the request was signed.
fn ask_tcp(addr: SocketAddr, m: Message, key: Option<&TSigner>) -> Vec<Message> {
    let (bytes, mut verifier) = encode(m, key);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&(bytes.len() as u16).to_be_bytes()).unwrap();
    s.write_all(&bytes).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut out = Vec::new();
    loop {
        let mut len = [0u8; 2];
        match s.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return out,
            Err(e) => panic!("{e}"),
        }
        let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut buf).unwrap();
        let m = Message::from_vec(&buf).unwrap();
        if let (Some(v), ResponseCode::NoError) = (verifier.as_mut(), m.metadata.response_code) {
            v.verify(&buf)
                .expect("every message correctly signed, in sequence");
        }
        out.push(m);
    }
}

fn records(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .flat_map(|m| m.answers.iter())
        .map(|r| match &r.data {
            RData::SOA(soa) => format!("SOA {}", soa.serial),
            RData::NS(ns) => format!("NS {}", ns.0),
            RData::CNAME(c) => format!("{} CNAME {}", r.name, c.0),
            other => format!("{} {other}", r.name),
        })
        .collect()
}

fn soa_serial(addr: SocketAddr, org: i64, key: &TSigner) -> Option<u32> {
    let a = ask_udp(addr, request(&zone(org), RecordType::SOA), Some(key));
    if a.metadata.response_code != ResponseCode::NoError {
        return None;
    }
    match &a.answers.first()?.data {
        RData::SOA(soa) => Some(soa.serial),
        _ => None,
    }
}

async fn post(s: &TestServer, key: &str, names: &[&str]) {
    let events: Vec<_> = names.iter().map(|n| event(n)).collect();
    let r = s
        .post_json(&format!("/1.0/events?customerKey={key}"), &json!(events))
        .await;
    assert_eq!(r.status, 202, "{}", r.text());
}

fn trigger(name: &str, org: i64, target: &str) -> [String; 2] {
    [
        format!("{name}.org-{org}.rpz.parasol. CNAME {target}"),
        format!("*.{name}.org-{org}.rpz.parasol. CNAME {target}"),
    ]
}

/// Waits for a NOTIFY of the zone at a serial after `after`, answers it, and returns the serial.
async fn notified(p: &Primary, org: i64, after: u32) -> u32 {
    wait_for("a NOTIFY of the new serial", || {
        let mut buf = [0u8; 4096];
        let (n, from) = p.notified.recv_from(&mut buf).ok()?;
        let m = Message::from_vec(&buf[..n]).unwrap();
        assert_eq!(m.metadata.op_code, OpCode::Notify);
        assert_eq!(m.queries[0].name(), &zone(org));
        assert!(m.metadata.authoritative);
        let mut answer = Message::response(m.metadata.id, OpCode::Notify);
        answer.metadata.message_type = MessageType::Response;
        p.notified.send_to(&answer.to_vec().unwrap(), from).unwrap();
        let serial = m.answers.iter().find_map(|r| match &r.data {
            RData::SOA(soa) => Some(soa.serial),
            _ => None,
        })?;
        parasol::export::formats::serial_after(serial, after).then_some(serial)
    })
    .await
}

/// The zone follows the list: the SOA over UDP, the whole zone by AXFR, a change by IXFR (its
/// difference only, announced by NOTIFY), a deletion and an allow-list entry too; an IXFR
/// from a serial the journal does not hold gets the whole zone; an IXFR from the current serial
/// the SOA alone. Every message is signed with the key, in sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zones_follow_the_lists_by_axfr_ixfr_and_notify() {
    let p = start_in(TempDir::new(), &[]).await;
    let key = signer("parasol-rpz", SECRET);
    let (org, customer) = p.server.create_org("Zoned");
    post(&p.server, &customer, &["bad.example"]).await;
    let addr = p.addr;
    let k = key.clone();
    wait_for("the zone with bad.example", move || {
        let all = records(&ask_tcp(
            addr,
            request(&zone(org), RecordType::AXFR),
            Some(&k),
        ));
        all.contains(&trigger("bad.example", org, ".")[0])
            .then_some(())
    })
    .await;
    let s1 = soa_serial(addr, org, &key).unwrap();
    let axfr = records(&ask_tcp(
        addr,
        request(&zone(org), RecordType::AXFR),
        Some(&key),
    ));
    let mut expected = vec![format!("SOA {s1}"), "NS localhost.".to_string()];
    expected.extend(trigger("bad.example", org, "."));
    expected.push(format!("SOA {s1}"));
    assert_eq!(axfr, expected);

    post(&p.server, &customer, &["evil.example"]).await;
    let s2 = notified(&p, org, s1).await;
    assert!(parasol::export::formats::serial_after(s2, s1));
    assert_eq!(soa_serial(addr, org, &key), Some(s2));
    let ixfr_records = records(&ask_tcp(addr, ixfr(&zone(org), s1), Some(&key)));
    let mut expected = vec![
        format!("SOA {s2}"),
        format!("SOA {s1}"),
        format!("SOA {s2}"),
    ];
    expected.extend(trigger("evil.example", org, "."));
    expected.push(format!("SOA {s2}"));
    assert_eq!(ixfr_records, expected);

    // Up to date: the SOA alone.
    let current = records(&ask_tcp(addr, ixfr(&zone(org), s2), Some(&key)));
    assert_eq!(current, vec![format!("SOA {s2}")]);
    // A serial the journal does not hold: the whole zone.
    let full = records(&ask_tcp(
        addr,
        ixfr(&zone(org), s1.wrapping_sub(1000)),
        Some(&key),
    ));
    assert_eq!(full.len(), 2 + 4 + 1, "{full:?}");

    // A deletion and an allow-list entry under a listed name: a difference each.
    let r = p
        .server
        .delete(&format!(
            "/1.0/domains?customerKey={customer}&where%5Bname%5D=evil.example"
        ))
        .await;
    assert_eq!(r.status, 204);
    let s3 = notified(&p, org, s2).await;
    let d = records(&ask_tcp(addr, ixfr(&zone(org), s2), Some(&key)));
    let mut expected = vec![format!("SOA {s3}"), format!("SOA {s2}")];
    expected.extend(trigger("evil.example", org, "."));
    expected.extend([format!("SOA {s3}"), format!("SOA {s3}")]);
    assert_eq!(d, expected);
    let store = p.server.store();
    let now = parasol::timefmt::now();
    assert!(run(store.allow_add(org, "good.bad.example".into(), now)).unwrap());
    let s4 = notified(&p, org, s3).await;
    let d = records(&ask_tcp(addr, ixfr(&zone(org), s3), Some(&key)));
    let mut expected = vec![
        format!("SOA {s4}"),
        format!("SOA {s3}"),
        format!("SOA {s4}"),
    ];
    expected.extend(trigger("good.bad.example", org, "rpz-passthru."));
    expected.push(format!("SOA {s4}"));
    assert_eq!(d, expected);
    // From s1: both versions in turn.
    let both = records(&ask_tcp(addr, ixfr(&zone(org), s1), Some(&key)));
    assert_eq!(both.first(), Some(&format!("SOA {s4}")));
    assert_eq!(
        both.iter().filter(|r| r.starts_with("SOA")).count(),
        2 + 3 * 2
    );
    p.server.stop().await;
}

/// Unsigned requests from an address outside `--rpz-allow` are REFUSED, signed ones with another
/// key or a wrong secret get NOTAUTH; names outside the zones, other types and transfers over UDP
/// are REFUSED to everyone; an address inside `--rpz-allow` transfers without a key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_key_and_the_allowed_addresses_transfer() {
    let p = start_in(TempDir::new(), &["127.0.0.2/32"]).await;
    let key = signer("parasol-rpz", SECRET);
    let (org, _) = p.server.create_org("Guarded");
    let addr = p.addr;
    let k = key.clone();
    wait_for("the zone", move || soa_serial(addr, org, &k)).await;
    let code = |ms: Vec<Message>| ms[0].metadata.response_code;
    let axfr = || request(&zone(org), RecordType::AXFR);
    // Unsigned from 127.0.0.1, outside the range.
    assert_eq!(code(ask_tcp(addr, axfr(), None)), ResponseCode::Refused);
    assert_eq!(
        ask_udp(addr, request(&zone(org), RecordType::SOA), None)
            .metadata
            .response_code,
        ResponseCode::Refused
    );
    // The right name with a wrong secret, and another key.
    let wrong = signer("parasol-rpz", OTHER_SECRET);
    assert_eq!(
        code(ask_tcp(addr, axfr(), Some(&wrong))),
        ResponseCode::NotAuth
    );
    let other = signer("other-key", SECRET);
    assert_eq!(
        code(ask_tcp(addr, axfr(), Some(&other))),
        ResponseCode::NotAuth
    );
    // Signed, but not a zone of the primary, or not a type it serves.
    for (name, qtype) in [
        ("example.com.", RecordType::A),
        ("example.com.", RecordType::AXFR),
        ("rpz.parasol.", RecordType::SOA),
        ("x.org-1.rpz.parasol.", RecordType::AXFR),
        ("org-999999.rpz.parasol.", RecordType::AXFR),
    ] {
        let m = request(&Name::from_ascii(name).unwrap(), qtype);
        assert_eq!(
            code(ask_tcp(addr, m, Some(&key))),
            ResponseCode::Refused,
            "{name}"
        );
    }
    let a = request(&zone(org), RecordType::A);
    assert_eq!(code(ask_tcp(addr, a, Some(&key))), ResponseCode::Refused);
    assert_eq!(
        ask_udp(addr, axfr(), Some(&key)).metadata.response_code,
        ResponseCode::Refused
    );
    // From inside the range, unsigned.
    let s = UdpSocket::bind("127.0.0.2:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.send_to(
        &request(&zone(org), RecordType::SOA).to_vec().unwrap(),
        addr,
    )
    .unwrap();
    let mut buf = [0u8; 1024];
    let n = s.recv(&mut buf).unwrap();
    let answer = Message::from_vec(&buf[..n]).unwrap();
    assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
    assert!(answer.metadata.authoritative);
    p.server.stop().await;
}

/// The journal outlives a restart: a zone whose list did not change while the server was down
/// keeps its serial, and a secondary at an older serial gets the differences by IXFR, not the
/// whole zone. A list changed while the server was down (here by the server run without the
/// primary) gives the zone a serial above every one before, and a secondary the whole zone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ixfr_and_serials_across_a_restart() {
    let p = start_in(TempDir::new(), &[]).await;
    let key = signer("parasol-rpz", SECRET);
    let (org, customer) = p.server.create_org("Restarted");
    post(&p.server, &customer, &["first.example"]).await;
    let addr = p.addr;
    let k = key.clone();
    let s1 = wait_for("the zone with first.example", move || {
        let all = records(&ask_tcp(
            addr,
            request(&zone(org), RecordType::AXFR),
            Some(&k),
        ));
        all.contains(&trigger("first.example", org, ".")[0])
            .then(|| soa_serial(addr, org, &k))
            .flatten()
    })
    .await;
    post(&p.server, &customer, &["second.example"]).await;
    let s2 = notified(&p, org, s1).await;
    let dir = p.server.stop().await;

    let p = start_in(dir, &[]).await;
    let addr = p.addr;
    let k = key.clone();
    let again = wait_for("the zone again", move || soa_serial(addr, org, &k)).await;
    assert_eq!(again, s2, "the same version keeps its serial");
    let d = records(&ask_tcp(addr, ixfr(&zone(org), s1), Some(&key)));
    let mut expected = vec![
        format!("SOA {s2}"),
        format!("SOA {s1}"),
        format!("SOA {s2}"),
    ];
    expected.extend(trigger("second.example", org, "."));
    expected.push(format!("SOA {s2}"));
    assert_eq!(d, expected, "an IXFR from before the restart");
    // A change after the restart extends the same journal.
    post(&p.server, &customer, &["third.example"]).await;
    let s3 = notified(&p, org, s2).await;
    let both = records(&ask_tcp(addr, ixfr(&zone(org), s1), Some(&key)));
    assert_eq!(both.first(), Some(&format!("SOA {s3}")));
    assert_eq!(
        both.iter().filter(|r| r.starts_with("SOA")).count(),
        2 + 2 * 2
    );
    let dir = p.server.stop().await;

    // Changed while the primary was down.
    let plain = TestServer::start_in(dir, |_| {}).await;
    post(&plain, &customer, &["fourth.example"]).await;
    let dir = plain.stop().await;
    let p = start_in(dir, &[]).await;
    let addr = p.addr;
    let k = key.clone();
    let s4 = wait_for("the zone again", move || soa_serial(addr, org, &k)).await;
    assert!(
        parasol::export::formats::serial_after(s4, s3),
        "{s4} after {s3}"
    );
    let full = records(&ask_tcp(addr, ixfr(&zone(org), s3), Some(&key)));
    assert_eq!(full.len(), 2 + 4 * 2 + 1, "the whole zone: {full:?}");
    assert!(full.contains(&trigger("fourth.example", org, ".")[0]));
    p.server.stop().await;
}
