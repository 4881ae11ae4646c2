//! The block list in each resolver's own format, and the files' names.
//!
//! Every format states the same policy, as far as the format can: each listed name is blocked
//! with everything below it, except the allow-listed names under a listed one (the
//! "exceptions"), which resolve normally with everything below them.

use std::io::Write;

/// A way of writing an organization's effective block list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Format {
    /// A response-policy zone (BIND, Knot Resolver, PowerDNS Recursor, Unbound's `rpz:`).
    Rpz,
    /// Unbound `local-zone:` lines in a `server:` clause.
    Unbound,
    /// dnsmasq `server=` lines (usable as `servers-file=`, which dnsmasq re-reads on SIGHUP).
    Dnsmasq,
    /// A hosts file: the listed names alone, answered with 0.0.0.0.
    Hosts,
    /// One name a line (the command line's export only).
    Plain,
}

impl Format {
    /// The formats `parasol serve --export-dir` writes by default (all but `plain`).
    pub const RESOLVERS: [Format; 4] =
        [Format::Rpz, Format::Unbound, Format::Dnsmasq, Format::Hosts];

    /// The format's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Rpz => "rpz",
            Format::Unbound => "unbound",
            Format::Dnsmasq => "dnsmasq",
            Format::Hosts => "hosts",
            Format::Plain => "plain",
        }
    }

    pub fn parse(s: &str) -> Option<Format> {
        [
            Format::Rpz,
            Format::Unbound,
            Format::Dnsmasq,
            Format::Hosts,
            Format::Plain,
        ]
        .into_iter()
        .find(|f| f.name() == s)
    }

    /// What the exported file's name ends with, after `org-<id>.`.
    pub fn suffix(self) -> &'static str {
        match self {
            Format::Rpz => "rpz",
            Format::Unbound => "unbound.conf",
            Format::Dnsmasq => "dnsmasq.conf",
            Format::Hosts => "hosts",
            Format::Plain => "txt",
        }
    }

    /// The exported file of organization `org` in this format: `org-7.unbound.conf`.
    pub fn file_name(self, org: i64) -> String {
        format!("org-{org}.{}", self.suffix())
    }

    /// The organization and format of an exported file's name (`org-7.rpz` -> (7, Rpz)), for the
    /// resolver formats only.
    pub fn of_file_name(name: &str) -> Option<(i64, Format)> {
        let rest = name.strip_prefix("org-")?;
        let (id, suffix) = rest.split_once('.')?;
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) || id.starts_with('0') {
            return None;
        }
        let format = Format::RESOLVERS
            .into_iter()
            .find(|f| f.suffix() == suffix)?;
        Some((id.parse().ok()?, format))
    }
}

/// Parses `--export-formats`: resolver format names, comma-separated, each at most once.
pub fn parse_list(s: &str) -> Result<Vec<Format>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        let format = Format::parse(part)
            .filter(|f| *f != Format::Plain)
            .ok_or_else(|| {
                format!(
                    "--export-formats {s:?}: {part:?} is not one of rpz, unbound, dnsmasq, hosts"
                )
            })?;
        if out.contains(&format) {
            return Err(format!("--export-formats {s:?}: {part} is given twice"));
        }
        out.push(format);
    }
    Ok(out)
}

/// The longest zone name (in characters, without the final dot) under which every RPZ file loads:
/// a trigger's owner name is the listed name, a dot and the zone's name, and the wildcard form
/// (`*.name.zone`) must fit DNS's 255-octet limit. Names too long for that are left out of the
/// RPZ file (and named in a comment), since one owner name too long makes a resolver refuse the
/// whole zone, which would unblock everything.
pub const RPZ_MAX_ZONE_NAME: usize = 32;

/// Whether a name's RPZ triggers fit under a zone name of `RPZ_MAX_ZONE_NAME` characters. In wire
/// form a name of n characters (no final dot) takes n + 2 octets; `*.` adds 2 and the zone name
/// its length and a dot.
fn fits_rpz(name: &str) -> bool {
    2 + name.len() + 1 + RPZ_MAX_ZONE_NAME + 2 <= 255
}

/// Writes the list in `format` to `w` (a file's buffered writer: a list of a million names is
/// never held as one text). `serial` is the RPZ zone's SOA serial.
pub fn render<B>(
    format: Format,
    org: i64,
    blocked: B,
    exceptions: &[String],
    serial: u32,
    w: &mut impl Write,
) -> std::io::Result<()>
where
    // A list's names, gone through once per kind of line (`&Vec<String>`, `&arena::Names`).
    B: IntoIterator + Copy,
    B::Item: AsRef<str>,
{
    render_header(format, org, serial, w)?;
    render_before(format, exceptions, w)?;
    render_blocked(format, blocked, w)?;
    render_after(format, blocked, exceptions, w)
}

/// A file in `render`'s form is these four sections, one after the other: the header (the only
/// part the serial changes), what comes before the listed names (the exceptions, in RPZ), the
/// listed names' lines in list order, and what comes after them (the exceptions, in the other
/// formats; in RPZ, the names left out). So names listed at the end of a list add lines at the
/// end of the third section, and the file's new version is the old one with a new header, the
/// lines of the new names inserted, and the last section written again (`files`' appends).
pub fn render_header(
    format: Format,
    org: i64,
    serial: u32,
    w: &mut impl Write,
) -> std::io::Result<()> {
    match format {
        Format::Rpz => write!(
            w,
            "; Parasol: the effective block list of organization {org}, as a response-policy \
             zone.\n; Replaced whole whenever it changes; the serial increases every time.\n\
             $TTL 60\n\
             @ IN SOA localhost. hostmaster.localhost. {serial} 3600 600 86400 60\n\
             @ IN NS localhost.\n"
        ),
        Format::Unbound => writeln!(
            w,
            "# Parasol: the effective block list of organization {org}, for Unbound.\n\
             # Replaced whole whenever it changes. Include it in unbound.conf.\n\
             server:"
        ),
        Format::Dnsmasq => writeln!(
            w,
            "# Parasol: the effective block list of organization {org}, for dnsmasq.\n\
             # Replaced whole whenever it changes. Use it as servers-file= (re-read on SIGHUP)\n\
             # or conf-file= (read at start)."
        ),
        Format::Hosts => writeln!(
            w,
            "# Parasol: the effective block list of organization {org}, as a hosts file.\n\
             # The listed names only: a hosts file cannot block subdomains."
        ),
        Format::Plain => Ok(()),
    }
}

/// The section between the header and the listed names (see `render_header`).
pub fn render_before(
    format: Format,
    exceptions: &[String],
    w: &mut impl Write,
) -> std::io::Result<()> {
    if format == Format::Rpz {
        // An exact trigger and a wildcard for each name: the most specific trigger applies,
        // so an exception's passthru wins below it over the block of a listed parent.
        for n in exceptions.iter().filter(|n| fits_rpz(n)) {
            lines(
                w,
                n,
                &[b"", b" CNAME rpz-passthru.\n*.", b" CNAME rpz-passthru.\n"],
            )?;
        }
    }
    Ok(())
}

/// The lines of listed names, in list order (see `render_header`).
pub fn render_blocked<B>(format: Format, blocked: B, w: &mut impl Write) -> std::io::Result<()>
where
    B: IntoIterator,
    B::Item: AsRef<str>,
{
    let parts: &[&[u8]] = match format {
        Format::Rpz => &[b"", b" CNAME .\n*.", b" CNAME .\n"],
        // A local zone covers its name and everything below it; the most specific zone
        // applies, so an exception's transparent zone wins below it.
        Format::Unbound => &[b"    local-zone: \"", b".\" always_nxdomain\n"],
        // `server=/name/` with no server answers NXDOMAIN for the name and everything below
        // it; `server=/name/#` sends the name and everything below it to the usual upstream
        // servers. dnsmasq applies the longest matching domain, so an exception wins below
        // it over its listed parent.
        Format::Dnsmasq => &[b"server=/", b"/\n"],
        Format::Hosts => &[b"0.0.0.0 ", b"\n"],
        Format::Plain => &[b"", b"\n"],
    };
    for n in blocked {
        let n = n.as_ref();
        if format != Format::Rpz || fits_rpz(n) {
            lines(w, n, parts)?;
        }
    }
    Ok(())
}

/// The section after the listed names (see `render_header`): it depends on every listed name
/// (in RPZ, those left out), so it is written whole each time.
pub fn render_after<B>(
    format: Format,
    blocked: B,
    exceptions: &[String],
    w: &mut impl Write,
) -> std::io::Result<()>
where
    B: IntoIterator,
    B::Item: AsRef<str>,
{
    match format {
        Format::Rpz => {
            for n in blocked {
                let n = n.as_ref();
                if !fits_rpz(n) {
                    writeln!(w, "; left out, too long for an RPZ trigger: {n}")?;
                }
            }
            for n in exceptions.iter().filter(|n| !fits_rpz(n)) {
                writeln!(w, "; left out, too long for an RPZ trigger: {n}")?;
            }
        }
        Format::Unbound => {
            for n in exceptions {
                lines(w, n, &[b"    local-zone: \"", b".\" always_transparent\n"])?;
            }
        }
        Format::Dnsmasq => {
            for n in exceptions {
                lines(w, n, &[b"server=/", b"/#\n"])?;
            }
        }
        Format::Hosts | Format::Plain => {}
    }
    Ok(())
}

/// Writes `n` between each two of `parts` (`[a, b, c]`: `a n b n c`): a list's line (or two)
/// for one name, written as bytes rather than through `write!`'s formatting, which took most of
/// the time a list of a million names took to write.
fn lines(w: &mut impl Write, n: &str, parts: &[&[u8]]) -> std::io::Result<()> {
    let Some((first, rest)) = parts.split_first() else {
        return Ok(());
    };
    w.write_all(first)?;
    for p in rest {
        w.write_all(n.as_bytes())?;
        w.write_all(p)?;
    }
    Ok(())
}

/// `render` into a string (the command line's export without a file, and tests).
pub fn render_to_string(
    format: Format,
    org: i64,
    blocked: &[String],
    exceptions: &[String],
    serial: u32,
) -> String {
    let mut out = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = render(format, org, blocked, exceptions, serial, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// The SOA serial of an RPZ file written by `render`, if `text` is one.
pub fn rpz_serial(text: &str) -> Option<u32> {
    let line = text.lines().find(|l| l.starts_with("@ IN SOA "))?;
    line.split_ascii_whitespace().nth(5)?.parse().ok()
}

/// Whether serial `a` comes after serial `b` in RFC 1982 serial number arithmetic (what
/// secondaries and resolvers compare with).
pub fn serial_after(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < 1 << 31
}

/// The serial of a zone's next version: one more than `previous`, or the time in seconds when
/// that is later (so that a zone written anew, its old file gone, still starts above any serial
/// it had before, as long as it was rewritten less than once a second on average).
pub fn next_serial(previous: Option<u32>, now: i64) -> u32 {
    let clock = u32::try_from(now.max(1)).unwrap_or(u32::MAX);
    match previous {
        Some(p) if !serial_after(clock, p) => p.wrapping_add(1),
        _ => clock,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn rendered(format: Format) -> String {
        render_to_string(
            format,
            7,
            &s(&["bad.example", "evil.test"]),
            &s(&["good.bad.example"]),
            42,
        )
    }

    #[test]
    fn every_format_blocks_the_listed_names_and_lets_the_exceptions_through() {
        let rpz = rendered(Format::Rpz);
        assert!(rpz.contains("\n$TTL 60\n@ IN SOA localhost. hostmaster.localhost. 42 3600 600 86400 60\n@ IN NS localhost.\n"));
        assert!(rpz.ends_with(
            "good.bad.example CNAME rpz-passthru.\n*.good.bad.example CNAME rpz-passthru.\n\
             bad.example CNAME .\n*.bad.example CNAME .\nevil.test CNAME .\n*.evil.test CNAME .\n"
        ));
        assert_eq!(rpz_serial(&rpz), Some(42));
        let unbound = rendered(Format::Unbound);
        assert!(unbound.ends_with(
            "server:\n    local-zone: \"bad.example.\" always_nxdomain\n    local-zone: \
             \"evil.test.\" always_nxdomain\n    local-zone: \"good.bad.example.\" always_transparent\n"
        ));
        assert!(rendered(Format::Dnsmasq)
            .ends_with("\nserver=/bad.example/\nserver=/evil.test/\nserver=/good.bad.example/#\n"));
        assert!(rendered(Format::Hosts).ends_with("\n0.0.0.0 bad.example\n0.0.0.0 evil.test\n"));
        assert_eq!(rendered(Format::Plain), "bad.example\nevil.test\n");
        // Only comments before the directives: every line of the resolver files is one the
        // resolver reads or a comment of its syntax.
        for (f, comment) in [
            (Format::Rpz, ';'),
            (Format::Unbound, '#'),
            (Format::Dnsmasq, '#'),
            (Format::Hosts, '#'),
        ] {
            let text = rendered(f);
            assert!(text.lines().next().unwrap().starts_with(comment), "{f:?}");
        }
    }

    /// A list held in an arena renders as the same names in a `Vec` do.
    #[test]
    fn a_held_list_renders_as_its_names_do() {
        let blocked = s(&["a.example", "b.example", &"c".repeat(240)]);
        let held = crate::arena::Names::from_names(blocked.iter().map(String::as_str)).unwrap();
        let exceptions = s(&["ok.a.example"]);
        for format in Format::RESOLVERS {
            let (mut from_vec, mut from_held) = (Vec::new(), Vec::new());
            render(format, 3, &blocked, &exceptions, 9, &mut from_vec).unwrap();
            render(format, 3, &held, &exceptions, 9, &mut from_held).unwrap();
            assert!(String::from_utf8_lossy(&from_vec).contains("b.example"));
            assert_eq!(from_vec, from_held, "{format:?}");
        }
    }

    #[test]
    fn an_empty_list_is_still_a_valid_file() {
        let out = render_to_string(Format::Rpz, 3, &[], &[], 1);
        assert!(out.ends_with("@ IN NS localhost.\n"));
        let out = render_to_string(Format::Unbound, 3, &[], &[], 1);
        assert!(out.ends_with("server:\n"));
    }

    /// A name whose wildcard trigger would not fit under a zone name of the documented length is
    /// left out of the RPZ file (so that the zone still loads), and named in a comment; the other
    /// formats have no such limit.
    #[test]
    fn names_too_long_for_an_rpz_trigger_are_left_out_of_the_rpz_file_only() {
        let label = "a".repeat(63);
        let long = format!("{label}.{label}.{label}.{}.test", "b".repeat(40));
        let fits = format!("{}.test", "c".repeat(210));
        assert!(fits_rpz(&fits) && !fits_rpz(&long));
        let out = render_to_string(Format::Rpz, 1, &[long.clone(), fits.clone()], &[], 1);
        assert!(!out.contains(&format!("\n{long} CNAME")));
        assert!(out.contains(&format!("\n*.{fits} CNAME .\n")));
        assert!(out.contains(&format!(
            "; left out, too long for an RPZ trigger: {long}\n"
        )));
        let out = render_to_string(Format::Unbound, 1, std::slice::from_ref(&long), &[], 1);
        assert!(out.contains(&format!("\"{long}.\" always_nxdomain")));
    }

    #[test]
    fn serials_increase_by_one_or_jump_to_the_clock() {
        assert_eq!(next_serial(None, 1_800_000_000), 1_800_000_000);
        assert_eq!(next_serial(Some(5), 1_800_000_000), 1_800_000_000);
        assert_eq!(
            next_serial(Some(1_800_000_000), 1_800_000_000),
            1_800_000_001
        );
        assert_eq!(
            next_serial(Some(1_800_000_100), 1_800_000_000),
            1_800_000_101
        );
        assert_eq!(next_serial(Some(u32::MAX), 1_800_000_000), 1_800_000_000);
        assert!(serial_after(0, u32::MAX));
        assert!(serial_after(next_serial(Some(u32::MAX), 5), u32::MAX));
        assert!(!serial_after(7, 7));
    }

    #[test]
    fn file_names_and_format_lists() {
        assert_eq!(Format::Unbound.file_name(7), "org-7.unbound.conf");
        assert_eq!(
            Format::of_file_name("org-7.dnsmasq.conf"),
            Some((7, Format::Dnsmasq))
        );
        assert_eq!(Format::of_file_name("org-12.rpz"), Some((12, Format::Rpz)));
        for other in [
            "org-7.txt",
            "org-.rpz",
            "org-07.rpz",
            "xorg-7.rpz",
            ".org-7.rpz.tmp-1",
            "org-7",
        ] {
            assert_eq!(Format::of_file_name(other), None, "{other}");
        }
        assert_eq!(
            parse_list("rpz, unbound").unwrap(),
            vec![Format::Rpz, Format::Unbound]
        );
        assert!(parse_list("rpz,plain").is_err());
        assert!(parse_list("rpz,rpz").is_err());
        assert!(parse_list("").is_err());
    }
}
