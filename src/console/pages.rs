//! The console's pages, as maud templates. Every value from the store or the request goes in
//! through maud's escaping (`PreEscaped` is never used on data): a name or text carrying markup
//! is shown as text.

use hyper::StatusCode;
use maud::{html, Markup, DOCTYPE};

use std::collections::BTreeMap;

use super::journal::{Counts, Minute, Record, Refusal};
use super::session::Session;
use crate::feeds::{Answer, NotifyOutcome, OrgFeed, Pull, ServerFeeds, Signed};
use crate::store::{DomainEntry, OrganizationInfo, Scope, StorageHealth, StorageStats, Verdict};

/// What the overview shows besides the organizations.
pub struct Facts {
    /// Whether the storage takes writes.
    pub ready: bool,
    /// Facts of the whole server, for the operator's credentials only (`None` for the others).
    pub server: Option<ServerFacts>,
    /// The counts of the organizations in the credential's scope, and of nothing else.
    pub counts: Counts,
    /// What the feeds did.
    pub feeds: FeedsView,
}

/// What the overview shows of the feeds: the export files and the RPZ zones.
#[derive(Default)]
pub struct FeedsView {
    /// Whether the RPZ primary serves the zones, and whether the export files are written.
    pub rpz: bool,
    pub files: bool,
    /// The name of the key transfers may be signed with (what a secondary's "signed" means).
    pub key: Option<String>,
    /// The organizations in the credential's scope that have records, and nothing else.
    pub orgs: BTreeMap<i64, OrgFeed>,
    /// The server-wide part, for the operator's credentials only.
    pub server: Option<ServerFeeds>,
}

/// What only the operator sees: why the server is not ready, its disk, its reputation data.
pub struct ServerFacts {
    pub health: StorageHealth,
    pub stats: StorageStats,
    /// When the reputation data in force was loaded, Unix seconds.
    pub reputation_loaded: u64,
}

/// What an organization's page shows.
pub struct OrgView<'a> {
    pub info: &'a OrganizationInfo,
    pub prefix: &'a str,
    pub after: &'a str,
    pub domains: &'a [DomainEntry],
    pub more: bool,
    pub allow: &'a [String],
    /// The decision on the name asked for, or the text that is not a domain name.
    pub verdict: Option<Result<Verdict, String>>,
    /// What the last action did.
    pub notice: Option<String>,
}

fn page(title: &str, session: Option<&Session>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Parasol console" }
                link rel="stylesheet" href="/console/style.css";
            }
            body {
                header {
                    strong { "Parasol console" }
                    @if let Some(s) = session {
                        nav aria-label="Console" { a href="/console/" { "Overview" } }
                        form class="inline" method="post" action="/console/signout" {
                            input type="hidden" name="csrf" value=(s.csrf);
                            span { "Signed in as " code { (s.api_key) } " " }
                            button type="submit" class="secondary" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

fn scope_words(scope: Scope) -> String {
    match scope {
        Scope::ServiceProvider(id) => format!("service provider {id}: its customers"),
        Scope::Msp(id) => format!("MSP {id}: its customers"),
        Scope::Organization(id) => format!("organization {id}"),
    }
}

pub fn sign_in(refused: Option<&str>) -> Markup {
    page(
        "Sign in",
        None,
        html! {
            h1 { "Sign in" }
            p { "Sign in with a management API key and secret. The console shows what that credential may reach, and nothing else." }
            @if let Some(r) = refused { p class="error" role="alert" { (r) } }
            form method="post" action="/console/signin" {
                label for="api_key" { "API key" }
                input id="api_key" type="text" name="api_key" autocomplete="username" required;
                label for="secret" { "Secret" }
                input id="secret" type="password" name="secret" autocomplete="current-password" required;
                p { button type="submit" { "Sign in" } }
            }
        },
    )
}

pub fn failure(status: StatusCode, words: &str) -> Markup {
    page(
        "Error",
        None,
        html! {
            h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) }
            p class="error" role="alert" { (words) }
            p { a href="/console/" { "Back to the console" } }
        },
    )
}

fn bytes(n: Option<u64>) -> String {
    match n {
        Some(n) => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        None => "unknown".into(),
    }
}

/// Height of the chart's bars' area, and the width of one minute, in SVG units.
const CHART_HEIGHT: u64 = 100;
const MINUTE_WIDTH: usize = 10;

/// A bar's height for `n` against the largest `max`.
fn bar(n: u64, max: u64) -> u64 {
    if max == 0 {
        0
    } else {
        (n * CHART_HEIGHT).div_ceil(max)
    }
}

/// The last hour as an SVG bar chart drawn here: per minute, events accepted (left bar) and
/// requests refused (right bar), each against its own largest minute.
fn chart(hour: &[Minute]) -> Markup {
    let max_accepted = hour.iter().map(|m| m.accepted).max().unwrap_or(0);
    let max_refused = hour.iter().map(|m| m.refused).max().unwrap_or(0);
    let accepted: u64 = hour.iter().map(|m| m.accepted).sum();
    let refused: u64 = hour.iter().map(|m| m.refused).sum();
    let width = hour.len() * MINUTE_WIDTH;
    let words = format!(
        "Last hour: {accepted} events accepted (most in a minute: {max_accepted}), \
         {refused} event requests refused (most in a minute: {max_refused})"
    );
    html! {
        p id="chart-words" { (words) }
        svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" aria-labelledby="chart-words"
            viewBox={ "0 0 " (width) " " (CHART_HEIGHT + 2) } width=(width) height=(CHART_HEIGHT + 2) {
            line x1="0" y1=(CHART_HEIGHT + 1) x2=(width) y2=(CHART_HEIGHT + 1) class="axis" {}
            @for (i, m) in hour.iter().enumerate() {
                @let a = bar(m.accepted, max_accepted);
                @let r = bar(m.refused, max_refused);
                rect class="accepted" x=(i * MINUTE_WIDTH) y=(CHART_HEIGHT - a) width="4" height=(a) {}
                rect class="refused" x=(i * MINUTE_WIDTH + 5) y=(CHART_HEIGHT - r) width="4" height=(r) {}
            }
        }
        p class="legend" { span class="key accepted" {} " events accepted  " span class="key refused" {} " requests refused, per minute, oldest on the left" }
    }
}

pub fn overview(
    s: &Session,
    f: &Facts,
    orgs: &[OrganizationInfo],
    counts: &[(i64, i64)],
) -> Markup {
    let count = |id: i64| counts.iter().find(|(o, _)| *o == id).map(|(_, n)| *n);
    page(
        "Overview",
        Some(s),
        html! {
            h1 { "Overview" }
            p { "Credential scope: " (scope_words(s.scope)) "." }
            dl {
                dt { "Readiness" }
                dd {
                    @if f.ready { span class="ok" { "Ready" } }
                    @else { span class="bad" { "Not ready" } }
                    @if let Some(server) = &f.server {
                        @if f.ready { ": the storage takes writes." }
                        @else {
                            ": " (server.health.last_fault.as_ref().map_or("unknown fault", |(kind, _)| kind.as_str()))
                        }
                    }
                }
                dt { "Events accepted since start" } dd { (f.counts.totals.0) }
                dt { "Event requests refused since start" } dd { (f.counts.totals.1) }
                @if let Some(server) = &f.server {
                    dt { "Free disk" } dd { (bytes(server.stats.free_bytes)) " of " (bytes(server.stats.filesystem_bytes)) }
                    dt { "Reputation data loaded" } dd { (crate::timefmt::rfc3339(server.reputation_loaded as i64)) }
                }
            }
            h2 { "Events over the last hour (the organizations below)" }
            (chart(&f.counts.hour))
            h2 { "Organizations" }
            table {
                thead { tr { th scope="col" { "Id" } th scope="col" { "Name" } th scope="col" { "Domains listed" } } }
                tbody {
                    @for o in orgs {
                        tr {
                            td { (o.id) }
                            td { a href={ "/console/organizations/" (o.id) } { (o.name) } }
                            td { @match count(o.id) { Some(n) => (n), None => "not counted" } }
                        }
                    }
                }
            }
            (feeds(&f.feeds, orgs))
        },
    )
}

fn when(at: i64) -> String {
    crate::timefmt::rfc3339(at)
}

/// What a request got, in words.
fn answer_words(a: Answer) -> String {
    match a {
        Answer::Whole => "the whole zone".into(),
        Answer::Differences(1) => "the differences (1 version)".into(),
        Answer::Differences(n) => format!("the differences ({n} versions)"),
        Answer::Current => "already current: the SOA alone".into(),
        Answer::Refused(why) => format!("refused: {why}"),
    }
}

/// The serials of a transfer: the secondary's and the one it was sent.
fn serials(p: &Pull) -> String {
    match (p.had, p.got) {
        (Some(had), Some(got)) => format!("{had} to {got}"),
        (Some(had), None) => format!("{had} to none"),
        (None, Some(got)) => got.to_string(),
        (None, None) => String::new(),
    }
}

fn signed_words(signed: Signed, key: Option<&str>) -> String {
    match (signed, key) {
        (Signed::Key, Some(k)) => format!("signed with {k}"),
        (Signed::Key, None) => "signed".into(),
        (Signed::Other, _) => "another key, or a wrong signature".into(),
        (Signed::No, _) => "unsigned".into(),
    }
}

fn notify_words(n: &crate::feeds::Notify) -> String {
    let outcome = match &n.outcome {
        NotifyOutcome::Waiting => "sent, no answer yet".to_string(),
        NotifyOutcome::Answered(0) => "answered".to_string(),
        NotifyOutcome::Answered(rcode) => format!("answered with RCODE {rcode}"),
        NotifyOutcome::NoAnswer(tries) => format!("no answer after {tries} tries"),
        NotifyOutcome::Failed(e) => format!("not sent: {e}"),
    };
    format!(
        "organization {}'s zone at serial {}, {}: {outcome}",
        n.org,
        n.serial,
        when(n.at)
    )
}

/// The overview's feeds section: per organization in scope, its zone's serial, its files' last
/// write, the secondaries that transferred its zone and the requests for it refused; the
/// server's configuration and its NOTIFYs and rounds to the operator alone.
fn feeds(v: &FeedsView, orgs: &[OrganizationInfo]) -> Markup {
    let key = v.key.as_deref();
    let refused: Vec<Pull> = match &v.server {
        Some(server) => server.refused.clone(),
        None => v
            .orgs
            .values()
            .flat_map(|f| f.refused.iter().copied())
            .collect(),
    };
    // An organization in scope by its name, another (the operator's server-wide list) by its id.
    let zone = |org: Option<i64>| match org {
        Some(id) => orgs
            .iter()
            .find(|o| o.id == id)
            .map_or_else(|| format!("organization {id}"), |o| o.name.clone()),
        None => "no zone of this server".to_string(),
    };
    html! {
        h2 { "Feeds" }
        @if !v.rpz && !v.files {
            p { "Feeds are off: this server neither writes export files for resolvers nor serves the RPZ zones." }
        } @else {
            @if !v.rpz { p { "RPZ zones: off (this server does not serve them)." } }
            @if !v.files { p { "Export files: off (this server does not write them)." } }
            @if let Some(server) = &v.server {
                dl {
                    @if let Some(rpz) = &server.rpz {
                        dt { "RPZ primary" }
                        dd {
                            "zones " code { "org-<id>." (rpz.suffix) "." } " on " code { (rpz.listen) } " (UDP and TCP)"
                            @if let Some(k) = &rpz.key { "; transfers signed with key " code { (k) } }
                            @if !rpz.allow.is_empty() { "; unsigned from " (rpz.allow.join(", ")) }
                        }
                        dt { "NOTIFY targets" }
                        dd {
                            @if server.notifies.is_empty() { "none" }
                            @else {
                                ul {
                                    @for (to, last) in &server.notifies {
                                        li {
                                            code { (to) } ": "
                                            @match last { Some(n) => (notify_words(n)), None => "none sent since the server started" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    @if let Some(export) = &server.export {
                        dt { "Export directory" }
                        dd { code { (export.dir.display()) } " (" (export.formats.join(", ")) ")" }
                    }
                    dt { "Last round that wrote" }
                    dd {
                        @match &server.last_round {
                            Some(r) => {
                                (when(r.at)) ", " (r.took.as_millis()) " ms, " (r.organizations)
                                @if r.organizations == 1 { " organization" } @else { " organizations" }
                            }
                            None => "none since the server started",
                        }
                    }
                    @if let Some((at, why)) = &server.last_failure {
                        dt { "Last round that failed" }
                        dd { span class="bad" { (when(*at)) } ": " (why) }
                    }
                }
            }
            table {
                thead { tr { th scope="col" { "Organization" } th scope="col" { "RPZ serial" } th scope="col" { "Export files written" } } }
                tbody {
                    @for o in orgs {
                        @let f = v.orgs.get(&o.id);
                        tr {
                            td { (o.name) }
                            td {
                                @match f.and_then(|f| f.serial) {
                                    Some((serial, since)) => { (serial) " (since " (when(since)) ")" }
                                    None => { @if v.rpz { "no zone yet" } @else { "off" } }
                                }
                            }
                            td {
                                @match f.and_then(|f| f.files_written) {
                                    Some(at) => (when(at)),
                                    None => { @if v.files { "not since the server started" } @else { "off" } }
                                }
                            }
                        }
                    }
                }
            }
            @if v.rpz {
                h3 { "Zone transfers (the last of each secondary)" }
                @let pulls: Vec<(&str, &crate::feeds::Secondary)> = orgs.iter()
                    .filter_map(|o| Some((o.name.as_str(), v.orgs.get(&o.id)?)))
                    .flat_map(|(name, f)| f.secondaries.iter().map(move |s| (name, s)))
                    .collect();
                @if pulls.is_empty() {
                    p { "No secondary has transferred these zones since the server started." }
                } @else {
                    table {
                        thead { tr {
                            th scope="col" { "Organization" } th scope="col" { "Secondary" } th scope="col" { "Request" }
                            th scope="col" { "Serials" } th scope="col" { "Sent" } th scope="col" { "Key" }
                            th scope="col" { "When" } th scope="col" { "Transfers" }
                        } }
                        tbody {
                            @for (name, s) in &pulls {
                                tr {
                                    td { (name) }
                                    td { (s.last.from) }
                                    td { (s.last.kind.name()) }
                                    td { (serials(&s.last)) }
                                    td { (answer_words(s.last.answer)) }
                                    td { (signed_words(s.last.signed, key)) }
                                    td { (when(s.last.at)) }
                                    td { (s.transfers) }
                                }
                            }
                        }
                    }
                }
                h3 { "Refused zone requests (the latest)" }
                @if refused.is_empty() {
                    p { "None since the server started." }
                } @else {
                    table {
                        thead { tr {
                            th scope="col" { "When" } th scope="col" { "From" } th scope="col" { "Request" }
                            th scope="col" { "Zone" } th scope="col" { "Key" } th scope="col" { "Why" }
                        } }
                        tbody {
                            @for p in &refused {
                                tr {
                                    td { (when(p.at)) }
                                    td { (p.from) }
                                    td { (p.kind.name()) }
                                    td { (zone(p.org)) }
                                    td { (signed_words(p.signed, key)) }
                                    td { (answer_words(p.answer)) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

pub fn organization(s: &Session, v: &OrgView) -> Markup {
    let base = format!("/console/organizations/{}", v.info.id);
    let next = v.domains.last().filter(|_| v.more).map(|d| {
        format!(
            "{base}?q={}&after={}",
            crate::http::query_encode(v.prefix),
            crate::http::query_encode(&d.name)
        )
    });
    page(
        &v.info.name,
        Some(s),
        html! {
            h1 { "Organization " (v.info.id) ": " (v.info.name) }
            p { a href={ (base) "/journal" } { "Request journal" } }
            @if let Some(n) = &v.notice { p class="notice" role="status" { "Done: " (n) "." } }
            h2 { "Is this name blocked?" }
            form method="get" action=(base) {
                label for="name" { "Name" }
                input id="name" type="text" name="name";
                " " button type="submit" { "Check" }
            }
            @match &v.verdict {
                None => {}
                Some(Err(text)) => p class="error" { "Not a domain name: " (text) }
                Some(Ok(d)) => p class="notice" {
                    code { (d.name) } " is "
                    @if d.blocked { span class="bad" { "blocked" } } @else { span class="ok" { "not blocked" } }
                    @if let Some(l) = &d.listed_as { "; listed as " code { (l) } }
                    @if let Some(a) = &d.allowed_by { "; allowed by the allow-list entry " code { (a) } }
                    "."
                }
            }
            h2 { "Domain list" }
            form method="get" action=(base) role="search" {
                label for="q" { "Names starting with" }
                input id="q" type="search" name="q" value=(v.prefix);
                " " button type="submit" { "Search" }
            }
            table {
                thead { tr { th scope="col" { "Id" } th scope="col" { "Name" } th scope="col" { "Last seen" } th scope="col" { "Action" } } }
                tbody {
                    @for d in v.domains {
                        tr {
                            td { (d.id) }
                            td { (d.name) }
                            td { (crate::timefmt::rfc3339(d.last_seen_at)) }
                            td {
                                form class="inline" method="post" action={ (base) "/domains/delete" } {
                                    input type="hidden" name="csrf" value=(s.csrf);
                                    input type="hidden" name="id" value=(d.id);
                                    button type="submit" aria-label={ "Delete " (d.name) } { "Delete" }
                                }
                            }
                        }
                    }
                }
            }
            @if v.domains.is_empty() { p { "No listed name matches." } }
            p {
                @if !v.after.is_empty() { a href={ (base) "?q=" (crate::http::query_encode(v.prefix)) } { "First page" } " " }
                @if let Some(n) = &next { a href=(n) { "Next page" } }
            }
            h2 { "Allow list" }
            form method="post" action={ (base) "/allowlist/add" } {
                input type="hidden" name="csrf" value=(s.csrf);
                label for="allow" { "Allow a name (and every name under it)" }
                input id="allow" type="text" name="name" required;
                " " button type="submit" { "Allow" }
            }
            table {
                thead { tr { th scope="col" { "Name" } th scope="col" { "Action" } } }
                tbody {
                    @for a in v.allow {
                        tr {
                            td { (a) }
                            td {
                                form class="inline" method="post" action={ (base) "/allowlist/remove" } {
                                    input type="hidden" name="csrf" value=(s.csrf);
                                    input type="hidden" name="name" value=(a);
                                    button type="submit" aria-label={ "Remove " (a) } { "Remove" }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// The statuses the journal's filter offers.
const STATUSES: [(u16, &str); 6] = [
    (202, "202 accepted"),
    (400, "400 refused body"),
    (415, "415 not JSON"),
    (429, "429 over a rate limit"),
    (503, "503 storage unavailable"),
    (500, "500 internal error"),
];

pub fn journal(
    s: &Session,
    info: &OrganizationInfo,
    status: Option<u16>,
    records: &[Record],
) -> Markup {
    let base = format!("/console/organizations/{}", info.id);
    page(
        "Request journal",
        Some(s),
        html! {
            h1 { "Request journal: " (info.name) }
            p { a href=(base) { "Domain list and allow list" } }
            p { "The latest event batches sent with the organization's customer keys (POST /1.0/events), newest first, kept in memory: "
                (super::journal::PER_KEY) " per key." }
            form method="get" action={ (base) "/journal" } {
                label for="status" { "Status" }
                select id="status" name="status" {
                    option value="" { "any" }
                    @for (code, words) in STATUSES {
                        option value=(code) selected[status == Some(code)] { (words) }
                    }
                }
                " " button type="submit" { "Filter" }
            }
            table {
                thead { tr {
                    th scope="col" { "Time" } th scope="col" { "Client" } th scope="col" { "Route" }
                    th scope="col" { "Status" } th scope="col" { "Events" } th scope="col" { "Why refused" }
                } }
                tbody {
                    @for r in records {
                        tr {
                            td { (crate::timefmt::rfc3339(r.at)) }
                            td { @if let Some(c) = r.client { (c) } }
                            td { "POST /1.0/events" }
                            td { (r.status) }
                            td { @if r.status == 202 { (r.events) } }
                            td {
                                @if let Some(why) = r.answer.as_deref().map(Refusal::of) {
                                    (why.message)
                                    @if !why.fields.is_empty() {
                                        ul {
                                            @for f in &why.fields {
                                                li {
                                                    @if let Some(i) = f.index { "event " (i) ": " }
                                                    code { (f.field) } " " (f.problem)
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if records.is_empty() { p { "No request recorded." } }
        },
    )
}
