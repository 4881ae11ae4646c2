//! Who may transfer the zones: a TSIG key read from a file in the format `tsig-keygen` writes, and address ranges (`--rpz-allow`).

use std::net::IpAddr;
use std::path::Path;

use hickory_proto::rr::rdata::tsig::TsigAlgorithm;
use hickory_proto::rr::{Name, TSigner};

/// How far a request's signing time may be from this server's clock (RFC 8945's usual 300 s).
pub const FUDGE: u16 = 300;

/// Reads a key file as `tsig-keygen` writes it (`key "name" { algorithm hmac-sha256; secret
/// "base64"; };`), the first key in it if there are several.
pub fn read_key_file(path: &Path) -> Result<TSigner, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("--rpz-tsig-key {shown}: {e}"))?;
    parse_key(&text).map_err(|e| format!("--rpz-tsig-key {shown}: {e}"))
}

/// The words of a key file: quoted strings, braces and semicolons stand alone; comments (`#`,
/// `//`) go.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split("//").next().unwrap_or("");
        let line = line.split('#').next().unwrap_or("");
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '"' => {
                    let mut s = String::new();
                    for c in chars.by_ref() {
                        if c == '"' {
                            break;
                        }
                        s.push(c);
                    }
                    out.push(s);
                }
                '{' | '}' | ';' => out.push(c.to_string()),
                c if c.is_whitespace() => {}
                c => {
                    let mut s = c.to_string();
                    while let Some(&n) = chars.peek() {
                        if n.is_whitespace() || "{};\"".contains(n) {
                            break;
                        }
                        s.push(n);
                        chars.next();
                    }
                    out.push(s);
                }
            }
        }
    }
    out
}

pub fn parse_key(text: &str) -> Result<TSigner, String> {
    let w = words(text);
    let start = w
        .iter()
        .position(|x| x == "key")
        .ok_or("no `key \"name\" { ... };` in it")?;
    let name = w.get(start + 1).ok_or("the key has no name")?;
    if w.get(start + 2).map(String::as_str) != Some("{") {
        return Err("expected `{` after the key's name".into());
    }
    let (mut algorithm, mut secret) = (None, None);
    let mut i = start + 3;
    while let Some(word) = w.get(i) {
        match word.as_str() {
            "}" => break,
            "algorithm" => algorithm = w.get(i + 1).cloned(),
            "secret" => secret = w.get(i + 1).cloned(),
            _ => {}
        }
        i += 1;
    }
    let algorithm = algorithm.ok_or("the key has no algorithm")?;
    let algorithm = match algorithm.to_ascii_lowercase().as_str() {
        "hmac-sha256" => TsigAlgorithm::HmacSha256,
        "hmac-sha384" => TsigAlgorithm::HmacSha384,
        "hmac-sha512" => TsigAlgorithm::HmacSha512,
        other => {
            return Err(format!(
                "algorithm {other} is not one of hmac-sha256, hmac-sha384, hmac-sha512"
            ))
        }
    };
    let secret = secret.ok_or("the key has no secret")?;
    let secret = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &secret)
        .ok()
        .filter(|s| !s.is_empty())
        .ok_or("the secret is not base64")?;
    let name = Name::from_ascii(name).map_err(|e| format!("key name {name:?}: {e}"))?;
    TSigner::new(secret, algorithm, name, FUDGE).map_err(|e| e.to_string())
}

/// An address range, `192.0.2.0/24`, `::1/128` or a single address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    bits: u8,
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.bits)
    }
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let bad = || format!("--rpz-allow {s:?}: not an address or ADDRESS/BITS");
        let (addr, bits) = match s.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (s, None),
        };
        let addr: IpAddr = addr.trim().parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            Some(b) => b
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(bad)?,
            None => max,
        };
        Ok(Cidr { addr, bits })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.bits)).unwrap_or(0);
                u32::from(a) & mask == u32::from(b) & mask
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.bits))
                    .unwrap_or(0);
                u128::from(a) & mask == u128::from(b) & mask
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_as_tsig_keygen_writes_it() {
        let text = "key \"parasol-rpz\" {\n\talgorithm hmac-sha256;\n\tsecret \
                    \"q7ANbnyliDMuvWgnKOxMLi313JGcTZB5ydMW5CyUGXQ=\";\n};\n";
        let key = parse_key(text).unwrap();
        assert_eq!(key.signer_name().to_ascii(), "parasol-rpz.");
        assert_eq!(key.algorithm(), &TsigAlgorithm::HmacSha256);
        assert_eq!(key.key().len(), 32);
        for bad in [
            "",
            "key \"k\" { secret \"AAAA\"; };",
            "key \"k\" { algorithm hmac-md5; secret \"AAAA\"; };",
            "key \"k\" { algorithm hmac-sha256; secret \"!!\"; };",
        ] {
            assert!(parse_key(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn address_ranges() {
        let c = Cidr::parse("127.0.0.0/8").unwrap();
        assert!(c.contains("127.1.2.3".parse().unwrap()));
        assert!(c.contains("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!c.contains("10.0.0.1".parse().unwrap()));
        let one = Cidr::parse("127.0.0.1").unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        assert!(Cidr::parse("::1/128")
            .unwrap()
            .contains("::1".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("192.0.2.1".parse().unwrap()));
        for bad in ["x", "127.0.0.1/33", "::1/129", "10.0.0.0/x"] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }
}
