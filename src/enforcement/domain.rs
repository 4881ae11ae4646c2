//! The domain normaliser: turns a `dstDomain` (or a name given to DELETE or a reputation file)
//! into the stored form: ASCII (punycode for IDNs), lower-case, no trailing dot, a valid DNS name
//! of at least two labels whose last label is not all digits.

/// Longest accepted `dstDomain`, in characters as sent.
pub const MAX_INPUT_CHARS: usize = 255;
/// Longest DNS name in presentation form without the trailing dot.
const MAX_NAME: usize = 253;

/// Why a name was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DomainError {
    /// More than 255 characters as sent.
    TooLong,
    /// Not a host name.
    Invalid,
}

/// Normalises a domain name; see the module comment for the rules.
pub fn normalize(input: &str) -> Result<String, DomainError> {
    if input.chars().count() > MAX_INPUT_CHARS {
        return Err(DomainError::TooLong);
    }
    // RFC 3986 allows a percent-encoded host; decode it before anything else.
    let decoded;
    let mut name = input;
    if name.bytes().any(|c| c == b'%') {
        decoded = crate::http::percent_decode(name).ok_or(DomainError::Invalid)?;
        name = &decoded;
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() {
        return Err(DomainError::Invalid);
    }
    let ascii = if name.is_ascii() {
        // Fast path: a plain ASCII name needs only lower-casing (UTS 46 maps ASCII upper case to
        // lower case and leaves LDH names unchanged), unless it holds an IDN's ACE label
        // (`xn--...`), which UTS 46 decodes and checks: `xn--zz.test` is no valid IDN.
        let lower = name.to_ascii_lowercase();
        if lower.as_bytes().windows(4).any(|w| w == b"xn--") {
            idna::domain_to_ascii(&lower).map_err(|_| DomainError::Invalid)?
        } else {
            lower
        }
    } else {
        idna::domain_to_ascii(name).map_err(|_| DomainError::Invalid)?
    };
    if is_host_name(&ascii) {
        Ok(ascii)
    } else {
        Err(DomainError::Invalid)
    }
}

/// Checks a lower-case ASCII name: LDH labels of 1..63, at least two labels, at most 253 octets,
/// last label not all digits (which also refuses IPv4 addresses).
fn is_host_name(name: &str) -> bool {
    if name.len() > MAX_NAME {
        return false;
    }
    let mut labels = 0;
    let mut last: &[u8] = b"";
    for b in name.as_bytes().split(|&c| c == b'.') {
        if b.is_empty() || b.len() > 63 || b[0] == b'-' || b[b.len() - 1] == b'-' {
            return false;
        }
        if !b
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        {
            return false;
        }
        labels += 1;
        last = b;
    }
    labels >= 2 && !last.iter().all(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn normalises_case_dot_and_idn() {
        assert_eq!(normalize("WWW.Example.COM.").unwrap(), "www.example.com");
        assert_eq!(normalize("bücher.test").unwrap(), "xn--bcher-kva.test");
        assert_eq!(normalize("BÜCHER.test").unwrap(), "xn--bcher-kva.test");
        assert_eq!(normalize("b%C3%BCcher.test").unwrap(), "xn--bcher-kva.test");
        assert_eq!(
            normalize("xn--bcher-kva.test").unwrap(),
            "xn--bcher-kva.test"
        );
        assert_eq!(
            normalize("XN--BCHER-KVA.test").unwrap(),
            "xn--bcher-kva.test"
        );
        // ACE labels that are not valid punycode, or that decode to what UTS 46 refuses.
        for bad in ["xn--zz.test", "xn--.test", "xn--a.test", "a.xn--zz"] {
            assert_eq!(normalize(bad), Err(DomainError::Invalid), "{bad}");
        }
        assert_eq!(normalize("a-1.b2.example").unwrap(), "a-1.b2.example");
        assert_eq!(normalize("123.example").unwrap(), "123.example");
    }

    #[test]
    fn refuses_what_is_not_a_host_name() {
        for bad in [
            "",
            ".",
            "localhost",
            "com.",
            "1.2.3.4",
            "example.123",
            "http://example.com",
            "example.com/path",
            "exa mple.com",
            "-a.example",
            "a-.example",
            "a..example",
            "[::1]",
            "user@example.com",
            "example.com:443",
            "a_b.example",
            "%zz.example",
            "%FF.example",
            "example.com..",
        ] {
            assert_eq!(normalize(bad), Err(DomainError::Invalid), "{bad:?}");
        }
        let label63 = "a".repeat(63);
        assert!(normalize(&format!("{label63}.example")).is_ok());
        assert_eq!(
            normalize(&format!("a{label63}.example")),
            Err(DomainError::Invalid)
        );
    }

    #[test]
    fn length_limits() {
        // 256 characters as sent: too long, whatever it is.
        let long = format!("{}.example", "a.".repeat(123)) + "xx";
        assert!(long.chars().count() > 255);
        assert_eq!(normalize(&long), Err(DomainError::TooLong));
        // 255 characters but longer than 253 after dropping nothing: invalid DNS name.
        let n255 = format!("{}aaaa.ex", "a.".repeat(124));
        assert_eq!(n255.len(), 255);
        assert_eq!(normalize(&n255), Err(DomainError::Invalid));
        let n253 = format!("{}aa.ex", "a.".repeat(124));
        assert_eq!(n253.len(), 253);
        assert!(normalize(&n253).is_ok());
        // A trailing dot does not count against the 253.
        assert!(normalize(&format!("{n253}.")).is_ok());
    }

    proptest! {
        #[test]
        fn never_panics_and_output_is_stable(s in "\\PC{0,300}") {
            if let Ok(n) = normalize(&s) {
                prop_assert!(is_host_name(&n));
                prop_assert_eq!(normalize(&n), Ok(n.clone()));
            }
        }

        #[test]
        fn ascii_names_round_trip(labels in proptest::collection::vec("[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", 1..5), tld in "[a-z]{2,6}") {
            // Hyphens in the third and fourth places mark an encoded label ("xn--"), which must
            // decode: such labels are not plain ASCII names (and "xn--0" rightly fails).
            prop_assume!(labels.iter().all(|l| l.get(2..4) != Some("--")));
            let name = format!("{}.{}", labels.join("."), tld);
            prop_assert_eq!(normalize(&name.to_uppercase()), Ok(name));
        }
    }
}
