//! A DNS secondary of the tests' own (hickory-proto's messages over real sockets), for the
//! suites that talk to the RPZ primary (`--rpz-listen`): its configuration with a key and a free
//! port, SOA queries over UDP, transfers over TCP (from a loopback address of the test's
//! choosing if need be), every answer's TSIG signature checked, and NOTIFYs received and
//! answered.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::tsig::TsigAlgorithm;
use hickory_proto::rr::rdata::SOA;
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType, TSigner};
use parasol::rpz::access::Cidr;
use parasol::rpz::RpzConfig;

/// The secret of the key `parasol-rpz` that `key_file` writes.
pub const SECRET: &str = "q7ANbnyliDMuvWgnKOxMLi313JGcTZB5ydMW5CyUGXQ=";

/// Writes the key `parasol-rpz` (`SECRET`) into `dir` as `tsig-keygen` does.
pub fn key_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("rpz.key");
    std::fs::write(
        &path,
        format!("key \"parasol-rpz\" {{\n\talgorithm hmac-sha256;\n\tsecret \"{SECRET}\";\n}};\n"),
    )
    .unwrap();
    path
}

pub fn signer(name: &str, secret: &str) -> TSigner {
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
pub fn free_port() -> u16 {
    loop {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// The primary on a free port of 127.0.0.1, zones under `rpz.parasol`, the key of `key_file`
/// (written into `dir`), `allow` as the only address range, NOTIFYs to `notify`.
pub fn rpz_config(dir: &Path, allow: &[&str], notify: Vec<SocketAddr>) -> RpzConfig {
    RpzConfig {
        listen: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        suffix: "rpz.parasol".into(),
        notify,
        tsig_key: Some(key_file(dir)),
        allow: allow.iter().map(|c| Cidr::parse(c).unwrap()).collect(),
    }
}

pub fn zone(org: i64) -> Name {
    Name::from_ascii(format!("org-{org}.rpz.parasol.")).unwrap()
}

pub fn request(name: &Name, qtype: RecordType) -> Message {
    let mut m = Message::query();
    let mut q = Query::query(name.clone(), qtype);
    q.query_class = DNSClass::IN;
    m.add_query(q);
    m
}

/// An IXFR request from `serial`.
pub fn ixfr(zone: &Name, serial: u32) -> Message {
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
pub fn ask_udp(addr: SocketAddr, m: Message, key: Option<&TSigner>) -> Message {
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

/// Asks over TCP from 127.0.0.1: see `exchange`.
pub fn ask_tcp(addr: SocketAddr, m: Message, key: Option<&TSigner>) -> Vec<Message> {
    exchange(TcpStream::connect(addr).unwrap(), m, key)
}

/// A TCP connection to `addr` from the loopback address `local` (a secondary of its own
/// address), for `exchange`.
pub async fn connect_from(local: IpAddr, addr: SocketAddr) -> TcpStream {
    let socket = match local {
        IpAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        IpAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }
    .unwrap();
    socket.bind(SocketAddr::new(local, 0)).unwrap();
    let stream = socket.connect(addr).await.unwrap().into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    stream
}

/// Sends the request on `s`, then closes its side: every message of the answer, until the server
/// closes the connection, each one's signature checked in turn if the request was signed.
pub fn exchange(mut s: TcpStream, m: Message, key: Option<&TSigner>) -> Vec<Message> {
    let (bytes, mut verifier) = encode(m, key);
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

/// The answers' records as text (`SOA 7`, `NS localhost.`, `a.example.org-1.rpz.parasol. CNAME .`).
pub fn records(messages: &[Message]) -> Vec<String> {
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

/// The zone's serial by a signed SOA query over UDP; `None` if refused.
pub fn soa_serial(addr: SocketAddr, org: i64, key: &TSigner) -> Option<u32> {
    let a = ask_udp(addr, request(&zone(org), RecordType::SOA), Some(key));
    if a.metadata.response_code != ResponseCode::NoError {
        return None;
    }
    match &a.answers.first()?.data {
        RData::SOA(soa) => Some(soa.serial),
        _ => None,
    }
}

/// A NOTIFY received on `socket` within its read timeout, answered: its zone and serial.
pub fn answer_notify(socket: &UdpSocket) -> Option<(Name, u32)> {
    let mut buf = [0u8; 4096];
    let (n, from) = socket.recv_from(&mut buf).ok()?;
    let m = Message::from_vec(&buf[..n]).unwrap();
    assert_eq!(m.metadata.op_code, OpCode::Notify);
    assert!(m.metadata.authoritative);
    let mut answer = Message::response(m.metadata.id, OpCode::Notify);
    answer.metadata.message_type = MessageType::Response;
    socket.send_to(&answer.to_vec().unwrap(), from).unwrap();
    let serial = m.answers.iter().find_map(|r| match &r.data {
        RData::SOA(soa) => Some(soa.serial),
        _ => None,
    })?;
    Some((m.queries[0].name().clone(), serial))
}
