#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The RPZ primary (`parasol serve --rpz-listen`) against the real server, with hickory-proto as
//! the secondary: SOA queries, AXFR, IXFR of a change (and the whole zone when the journal does
//! not reach back), NOTIFY on change, TSIG on every message of a transfer, what is refused
//! (unsigned from elsewhere, a wrong key, names outside the zones, transfers over UDP), and
//! IXFR and serials that keep growing across a restart. Real resolvers pull the zones in `.ci/rpz-e2e`.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use common::dns::*;
use common::*;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use serde_json::json;

const OTHER_SECRET: &str = "Zm9vYmFyZm9vYmFyZm9vYmFyZm9vYmFyZm9vYmFyZm8=";

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
    let config = rpz_config(dir.path(), allow, vec![notified.local_addr().unwrap()]);
    let addr = config.listen;
    let server = TestServer::start_in(dir, move |c| c.rpz = Some(config)).await;
    Primary {
        server,
        addr,
        notified,
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
        let (name, serial) = answer_notify(&p.notified)?;
        assert_eq!(name, zone(org));
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
