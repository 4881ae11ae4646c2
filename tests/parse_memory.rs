//! The parsers' working memory stays within the share of the memory budget their requests are
//! charged (`enforcement::event::MEMORY_FACTOR`, `json::MEMORY_FACTOR`), on the bodies that cost
//! the most for their size. Measured by counting what is allocated: this test binary's global
//! allocator keeps the high-water mark of bytes in use.
// Tests fail by panicking: they unwrap freely.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: defers to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as the caller promised for `layout`.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = IN_USE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as the caller promised.
        unsafe { System.dealloc(ptr, layout) };
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as the caller promised.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let now = IN_USE.fetch_add(new_size - layout.size(), Ordering::Relaxed)
                    + (new_size - layout.size());
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                IN_USE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Most bytes in use at once while `f` ran, beyond what was in use before.
fn peak_of<T>(f: impl FnOnce() -> T) -> usize {
    let base = IN_USE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    let peak = PEAK.load(Ordering::Relaxed) - base;
    drop(out);
    peak
}

/// `open` + `item` repeated to about `len` bytes in all + `close`.
fn repeated(open: &str, item: &str, close: &str, len: usize) -> Vec<u8> {
    let mut b = open.as_bytes().to_vec();
    let mut first = true;
    while b.len() + item.len() + 1 + close.len() <= len {
        if !first {
            b.push(b',');
        }
        b.extend_from_slice(item.as_bytes());
        first = false;
    }
    b.extend_from_slice(close.as_bytes());
    b
}

const MIB: usize = 1 << 20;

/// An object of distinct members `"<n>":0` to about `len` bytes, inside `open` and `close`.
fn distinct_members(open: &str, close: &str, len: usize) -> Vec<u8> {
    let mut b = format!("{open}{{").into_bytes();
    let mut n = 0u64;
    while b.len() + 24 + close.len() <= len {
        if n > 0 {
            b.push(b',');
        }
        b.extend_from_slice(format!("\"{n:x}\":0").as_bytes());
        n += 1;
    }
    b.push(b'}');
    b.extend_from_slice(close.as_bytes());
    b
}

/// One test (the allocator's count is the whole process's: nothing else may run beside it).
/// Each peak is printed as a multiple of its body's size (`cargo test --test parse_memory --
/// --nocapture`).
#[test]
fn parsers_stay_within_their_memory_factors() {
    let event = r#"{"deviceId":"d","deviceVersion":"1","eventTime":"2026-11-22T10:00:00Z","alertTime":"2026-11-22T10:00:00Z","dstDomain":"a.example","dstUrl":"http://a.example/","protocolVersion":"1.0a","providerName":"Security Platform"}"#;
    // The body itself is held beside the validator: it is one of the factor's parts.
    let events_budget = (parasol::enforcement::event::MEMORY_FACTOR - 1) * MIB;
    for (what, body) in [
        ("empty objects", repeated("[", "{}", "]", MIB)),
        (
            "empty arrays in one field",
            repeated(r#"[{"x":["#, "[]", "]}]", MIB),
        ),
        (
            "empty objects in a known field",
            repeated(r#"[{"deviceId":["#, "{}", "]}]", MIB),
        ),
        ("numbers", repeated("[", "0", "]", MIB)),
        ("one-member objects", repeated("[", r#"{"a":0}"#, "]", MIB)),
        ("a repeated member", repeated("[{", r#""k":0"#, "}]", MIB)),
        ("distinct members", distinct_members("[", "]", MIB)),
        (
            "distinct members in a field",
            distinct_members(r#"[{"x":"#, "}]", MIB),
        ),
        ("valid events", repeated("[", event, "]", MIB)),
        (
            "events with an escape",
            repeated("[", &event.replace("\"d\"", "\"\\u0064\""), "]", MIB),
        ),
    ] {
        let peak = peak_of(|| parasol::enforcement::event::validate_events(&body));
        println!(
            "validating {what}: {:.2}x the body",
            peak as f64 / body.len() as f64
        );
        assert!(
            peak <= events_budget,
            "validating {what}: {peak} bytes at peak for a {}-byte body, over {events_budget}",
            body.len()
        );
    }
    let tree_budget = (parasol::json::MEMORY_FACTOR - 1) * MIB;
    for (what, body) in [
        ("empty objects", repeated(r#"{"a":["#, "{}", "]}", MIB)),
        ("empty arrays", repeated(r#"{"a":["#, "[]", "]}", MIB)),
        ("numbers", repeated(r#"{"a":["#, "0", "]}", MIB)),
        ("distinct members", distinct_members("", "", MIB)),
    ] {
        let peak = peak_of(|| parasol::json::from_slice(&body));
        println!(
            "parsing {what}: {:.2}x the body",
            peak as f64 / body.len() as f64
        );
        assert!(
            peak <= tree_budget,
            "parsing {what}: {peak} bytes at peak for a {}-byte body, over {tree_budget}",
            body.len()
        );
    }
}
