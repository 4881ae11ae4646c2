//! What the zones are made of: triggers (a name and what it does) and the differences between two versions of a zone, shared by the zones in memory (`super::zone`), their journals on disk (`super::journal`) and the wire format (`super::wire`).

/// What a trigger does to the name and everything below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    /// Listed: NXDOMAIN (`CNAME .`).
    Block,
    /// Allow-listed under a listed name: answered normally (`CNAME rpz-passthru.`).
    Passthru,
}

/// One trigger: a name and its action (two records in the zone, the name and `*.name`).
pub type Entry = (Box<str>, Action);

/// The difference from one version of a zone to the next.
#[derive(Debug)]
pub struct Delta {
    pub from: u32,
    pub to: u32,
    pub removed: Vec<Entry>,
    pub added: Vec<Entry>,
}
