//! JSON request bodies read into a `serde_json::Value` tree, with one rule `serde_json` does not
//! have: an object may not hold the same member twice. `serde_json` keeps the last of two equal
//! keys without a word, so `{"dstDomain":"a.example","dstDomain":"b.example"}` would mean
//! whichever value a reader happens to keep; Parasol refuses it instead (a 400 naming the member).
//!
//! Two readers share one visitor: [`from_slice`] stops at the first repeated member (the
//! management interface names it in its message), [`from_slice_noting_duplicates`] reads on and
//! lists every repeated member (the enforcement interface names each in its `errors` map, next
//! to the other problems of a batch). Members are compared as decoded, so `"a"` and `"\u0061"`
//! are the same member.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

/// What parsing a body into a `Value` tree may take at most, as a multiple of its length, the body
/// included: the share of the memory budget a management request is charged before its body is
/// read (`crate::budget`). A tree costs far more than its text: `[{},{},...]` spends 3 bytes of
/// text on each 80-byte `Value`, in arrays that grow by doubling. Management bodies are small
/// objects, so the factor costs real requests little. A test holds the reader to it.
pub const MEMORY_FACTOR: usize = 64;

/// One step from a body's top level to a repeated member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A member of an object, by its decoded name.
    Member(String),
    /// An element of an array, by position.
    Element(usize),
}

/// A member that an object holds more than once, by its path from the top of the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    /// Never empty; the last step is the repeated member.
    pub path: Vec<Step>,
}

/// Displays the path as the error messages name fields: members joined with `.`, array
/// positions in brackets (`vendorExtra.hits[2].name`, `[3].dstDomain`).
impl fmt::Display for Duplicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_path(f, &self.path)
    }
}

/// Writes `steps` as [`Duplicate`] displays them.
pub fn write_path(out: &mut impl fmt::Write, steps: &[Step]) -> fmt::Result {
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Member(name) if i == 0 => out.write_str(name)?,
            Step::Member(name) => write!(out, ".{name}")?,
            Step::Element(n) => write!(out, "[{n}]")?,
        }
    }
    Ok(())
}

/// Why [`from_slice`] refused a body.
#[derive(Debug)]
pub enum Error {
    /// Not JSON (the reader's own message).
    Syntax(serde_json::Error),
    /// JSON, but an object holds this member twice.
    Duplicate(Duplicate),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Syntax(e) => e.fmt(f),
            Error::Duplicate(d) => write!(f, "{d} is duplicated"),
        }
    }
}

impl std::error::Error for Error {}

/// Parses a whole body, refusing the first object that holds a member twice.
pub fn from_slice(body: &[u8]) -> Result<Value, Error> {
    let found = RefCell::new(Vec::new());
    let cx = Context {
        found: &found,
        keep_going: false,
        limit: 1,
    };
    match parse(body, &cx) {
        Ok(v) => Ok(v),
        // The visitor's own error (raised only for a duplicate) says nothing more than `found`.
        Err(e) => match found.into_inner().pop() {
            Some(d) => Err(Error::Duplicate(d)),
            None => Err(Error::Syntax(e)),
        },
    }
}

/// Parses a whole body and lists the repeated members (each once, in the order they end; at
/// most `limit` of them) instead of stopping at the first. Of a repeated member the first value
/// is kept in the tree.
pub fn from_slice_noting_duplicates(
    body: &[u8],
    limit: usize,
) -> Result<(Value, Vec<Duplicate>), serde_json::Error> {
    let found = RefCell::new(Vec::new());
    let cx = Context {
        found: &found,
        keep_going: true,
        limit,
    };
    let v = parse(body, &cx)?;
    Ok((v, found.into_inner()))
}

/// What [`for_each_element`] hands over for each element of a body.
#[derive(Debug)]
pub enum Element {
    /// An object: its members whose names `keep` accepts, each the first of its name. A member
    /// whose value is an array or an object has a stand-in for it: `[n]`, `n` a fingerprint of
    /// the value (equal values, members in any order, have equal fingerprints), so that it is not
    /// a string nor a boolean and compares as the value would.
    Object(Map<String, Value>),
    /// Anything but an object.
    Other,
}

/// What [`for_each_element`] calls with each element: its position (`None` for a body that is
/// one object), the element, its repeated members.
pub type EachElement<'e> = dyn FnMut(Option<usize>, Element, Vec<Duplicate>) + 'e;

/// What the top of a body read by [`for_each_element`] was.
#[derive(Debug, PartialEq, Eq)]
pub enum Top {
    /// One object, handed over as the element at `None`.
    Object,
    /// An array of this many elements, handed over one by one.
    Array(usize),
    /// Neither: nothing was handed over.
    Other,
}

/// Reads a body that is an object or an array of objects element by element, handing each to
/// `each` with the repeated members found inside it (as [`from_slice_noting_duplicates`], with
/// their paths from the top; at most `limit` in all), without ever holding more than one element:
/// members that `keep` refuses are read and checked but not kept, and neither are the insides of
/// arrays and objects. What this takes is the element's kept members and the repeated members'
/// paths, not a tree of the body: a tree of `[{},{},...]` costs forty times its text.
pub fn for_each_element(
    body: &[u8],
    limit: usize,
    keep: &dyn Fn(&str) -> bool,
    each: &mut EachElement<'_>,
) -> Result<Top, serde_json::Error> {
    let found = RefCell::new(Vec::new());
    let cx = Context {
        found: &found,
        keep_going: true,
        limit,
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let top = TopSeed {
        cx: &cx,
        keep,
        each: RefCell::new(each),
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(top)
}

struct TopSeed<'c, 'f, 'k, 'e> {
    cx: &'c Context<'f>,
    keep: &'k dyn Fn(&str) -> bool,
    each: RefCell<&'e mut EachElement<'e>>,
}

impl TopSeed<'_, '_, '_, '_> {
    /// Hands an element over with the repeated members found since `mark`.
    fn hand(&self, index: Option<usize>, element: Element, mark: usize) {
        let dups = self.cx.found.borrow_mut().split_off(mark);
        (self.each.borrow_mut())(index, element, dups);
    }
}

/// The visitor methods of every scalar (booleans, numbers, strings, null), each answering
/// `$ty::Other`: the streaming walk keeps nothing of them.
macro_rules! scalars_are_other {
    ($ty:ident) => {
        fn visit_bool<E>(self, _: bool) -> Result<$ty, E> {
            Ok($ty::Other)
        }
        fn visit_i64<E>(self, _: i64) -> Result<$ty, E> {
            Ok($ty::Other)
        }
        fn visit_u64<E>(self, _: u64) -> Result<$ty, E> {
            Ok($ty::Other)
        }
        fn visit_f64<E>(self, _: f64) -> Result<$ty, E> {
            Ok($ty::Other)
        }
        fn visit_str<E>(self, _: &str) -> Result<$ty, E> {
            Ok($ty::Other)
        }
        fn visit_unit<E>(self) -> Result<$ty, E> {
            Ok($ty::Other)
        }
        fn visit_none<E>(self) -> Result<$ty, E> {
            Ok($ty::Other)
        }
    };
}

impl<'de> DeserializeSeed<'de> for TopSeed<'_, '_, '_, '_> {
    type Value = Top;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Top, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TopSeed<'_, '_, '_, '_> {
    type Value = Top;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    scalars_are_other!(Top);

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Top, A::Error> {
        let element = ElementSeed {
            cx: self.cx,
            at: Path::Top,
            keep: self.keep,
        }
        .visit_map(map)?;
        self.hand(None, element, 0);
        Ok(Top::Object)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Top, A::Error> {
        let mut n = 0;
        loop {
            let mark = self.cx.found.borrow().len();
            let seed = ElementSeed {
                cx: self.cx,
                at: Path::Element(n, &Path::Top),
                keep: self.keep,
            };
            match seq.next_element_seed(seed)? {
                Some(Element::Other) => {
                    // Repeated members inside an element that is not an object are not its
                    // problem: it is named as not an object only.
                    self.cx.found.borrow_mut().truncate(mark);
                    self.hand(Some(n), Element::Other, mark);
                }
                Some(element) => self.hand(Some(n), element, mark),
                None => return Ok(Top::Array(n)),
            }
            n += 1;
        }
    }
}

/// One element: an object's kept members, or `Other` (walked through all the same).
struct ElementSeed<'c, 'f, 'p, 'k> {
    cx: &'c Context<'f>,
    at: Path<'p>,
    keep: &'k dyn Fn(&str) -> bool,
}

impl<'de> DeserializeSeed<'de> for ElementSeed<'_, '_, '_, '_> {
    type Value = Element;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Element, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ElementSeed<'_, '_, '_, '_> {
    type Value = Element;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    scalars_are_other!(Element);

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Element, A::Error> {
        Walk {
            cx: self.cx,
            at: self.at,
        }
        .visit_seq(seq)?;
        Ok(Element::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Element, A::Error> {
        let mut out = Map::new();
        // Every member's name (the kept ones are also in `out`), to find repeats.
        let mut seen = Seen::new();
        let mut repeated: Vec<String> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let walk = Walk {
                cx: self.cx,
                at: Path::Member(&key, &self.at),
            };
            let value = if (self.keep)(&key) {
                Some(map.next_value_seed(Kept(walk))?)
            } else {
                map.next_value_seed(walk)?;
                None
            };
            if !seen.insert(&key) {
                if !repeated.contains(&key) {
                    repeated.push(key);
                }
                continue;
            }
            if let Some(v) = value {
                out.insert(key, v);
            }
        }
        note_repeated(self.cx, &self.at, repeated);
        Ok(Element::Object(out))
    }
}

/// Lists an object's repeated members (as `Node::visit_map` does), up to the limit.
fn note_repeated(cx: &Context<'_>, at: &Path<'_>, repeated: Vec<String>) {
    if repeated.is_empty() {
        return;
    }
    let mut found = cx.found.borrow_mut();
    let up = at.steps();
    for name in repeated {
        if found.len() >= cx.limit {
            break;
        }
        let mut path = up.clone();
        path.push(Step::Member(name));
        found.push(Duplicate { path });
    }
}

/// A kept member's value: a scalar as a `Value`, an array or object by its fingerprint (`[n]`).
struct Kept<'c, 'f, 'p>(Walk<'c, 'f, 'p>);

impl<'de> DeserializeSeed<'de> for Kept<'_, '_, '_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Kept<'_, '_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        let h = self.0.visit_seq(seq)?;
        Ok(Value::Array(vec![Value::from(h)]))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        let h = self.0.visit_map(map)?;
        Ok(Value::Array(vec![Value::from(h)]))
    }
}

/// Walks through a value without building it, noting repeated members; gives its fingerprint:
/// a hash of the value as `Value` compares it (an object's members in any order, the first of a
/// repeated member).
struct Walk<'c, 'f, 'p> {
    cx: &'c Context<'f>,
    at: Path<'p>,
}

fn fingerprint(kind: u8, text: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    kind.hash(&mut h);
    text.hash(&mut h);
    h.finish()
}

impl<'de> DeserializeSeed<'de> for Walk<'_, '_, '_> {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_, '_, '_> {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<u64, E> {
        Ok(fingerprint(1, &[u8::from(v)]))
    }
    fn visit_i64<E>(self, v: i64) -> Result<u64, E> {
        Ok(fingerprint(2, Number::from(v).to_string().as_bytes()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<u64, E> {
        Ok(fingerprint(2, Number::from(v).to_string().as_bytes()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<u64, E> {
        Ok(match Number::from_f64(v) {
            Some(n) => fingerprint(2, n.to_string().as_bytes()),
            None => fingerprint(0, b""),
        })
    }
    fn visit_str<E>(self, v: &str) -> Result<u64, E> {
        Ok(fingerprint(3, v.as_bytes()))
    }
    fn visit_unit<E>(self) -> Result<u64, E> {
        Ok(fingerprint(0, b""))
    }
    fn visit_none<E>(self) -> Result<u64, E> {
        Ok(fingerprint(0, b""))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u64, A::Error> {
        use std::hash::Hasher;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        h.write_u8(4);
        let mut n = 0;
        while let Some(item) = seq.next_element_seed(Walk {
            cx: self.cx,
            at: Path::Element(n, &self.at),
        })? {
            h.write_u64(item);
            n += 1;
        }
        Ok(h.finish())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        let mut seen = Seen::new();
        let mut repeated: Vec<String> = Vec::new();
        // Members in any order: a sum of each member's hash.
        let mut sum = fingerprint(5, b"");
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Walk {
                cx: self.cx,
                at: Path::Member(&key, &self.at),
            })?;
            if !seen.insert(&key) {
                if !repeated.contains(&key) {
                    repeated.push(key);
                }
                continue;
            }
            let mut member = key.into_bytes();
            member.extend_from_slice(&value.to_le_bytes());
            sum = sum.wrapping_add(fingerprint(6, &member));
        }
        note_repeated(self.cx, &self.at, repeated);
        Ok(sum)
    }
}

fn parse(body: &[u8], cx: &Context<'_>) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let v = Node { cx, at: Path::Top }.deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// What the visitors share: where repeated members are listed and whether to go on after one.
struct Context<'f> {
    found: &'f RefCell<Vec<Duplicate>>,
    keep_going: bool,
    limit: usize,
}

/// The names of an object's members seen so far, as hashes keyed at random for each process:
/// about 10 bytes a member however long its name (the names themselves cost up to eight times
/// their text in small strings). Two names are taken for one only if their 64-bit hashes
/// collide, which a client cannot aim at without the key.
struct Seen {
    hashes: std::collections::HashSet<u64, NoHash>,
}

/// The hashes are already hashes: the set uses them as they are.
#[derive(Default, Clone, Copy)]
struct NoHash;

impl std::hash::BuildHasher for NoHash {
    type Hasher = PassThrough;
    fn build_hasher(&self) -> PassThrough {
        PassThrough(0)
    }
}

struct PassThrough(u64);

impl std::hash::Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

thread_local! {
    /// The key of member-name hashes, drawn once per thread.
    static NAMES: std::collections::hash_map::RandomState = Default::default();
}

impl Seen {
    fn new() -> Seen {
        Seen {
            hashes: std::collections::HashSet::with_hasher(NoHash),
        }
    }

    /// Records `name`; false if it was seen before.
    fn insert(&mut self, name: &str) -> bool {
        let h = NAMES.with(|k| std::hash::BuildHasher::hash_one(k, name));
        self.hashes.insert(h)
    }
}

/// Where a value sits, as a chain of borrowed steps up to the top: nothing is allocated for it
/// unless a repeated member is found.
#[derive(Clone, Copy)]
enum Path<'p> {
    Top,
    Member(&'p str, &'p Path<'p>),
    Element(usize, &'p Path<'p>),
}

impl Path<'_> {
    fn steps(&self) -> Vec<Step> {
        let mut steps = Vec::new();
        let mut at = self;
        loop {
            match at {
                Path::Top => break,
                Path::Member(name, up) => {
                    steps.push(Step::Member((*name).to_string()));
                    at = up;
                }
                Path::Element(n, up) => {
                    steps.push(Step::Element(*n));
                    at = up;
                }
            }
        }
        steps.reverse();
        steps
    }
}

/// The visitor (and seed) for one value at `at`.
struct Node<'c, 'f, 'p> {
    cx: &'c Context<'f>,
    at: Path<'p>,
}

impl<'de> DeserializeSeed<'de> for Node<'_, '_, '_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_, '_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // As serde_json's own Value: JSON text cannot hold a non-finite number.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        loop {
            let node = Node {
                cx: self.cx,
                at: Path::Element(items.len(), &self.at),
            };
            match seq.next_element_seed(node)? {
                Some(v) => items.push(v),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        // Members seen more than once in this object, each listed once when the object ends.
        let mut repeated: Vec<String> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Node {
                cx: self.cx,
                at: Path::Member(&key, &self.at),
            })?;
            match out.entry(key) {
                Entry::Vacant(e) => {
                    e.insert(value);
                }
                Entry::Occupied(e) => {
                    if !self.cx.keep_going {
                        let mut path = self.at.steps();
                        path.push(Step::Member(e.key().clone()));
                        self.cx.found.borrow_mut().push(Duplicate { path });
                        return Err(de::Error::custom("an object holds a member twice"));
                    }
                    if !repeated.contains(e.key()) {
                        repeated.push(e.key().clone());
                    }
                }
            }
        }
        if !repeated.is_empty() {
            let mut found = self.cx.found.borrow_mut();
            let up = self.at.steps();
            for name in repeated {
                if found.len() >= self.cx.limit {
                    break;
                }
                let mut path = up.clone();
                path.push(Step::Member(name));
                found.push(Duplicate { path });
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn dup(body: &str) -> String {
        match from_slice(body.as_bytes()) {
            Err(Error::Duplicate(d)) => d.to_string(),
            other => panic!("expected a duplicate in {body}, got {other:?}"),
        }
    }

    #[test]
    fn a_repeated_member_is_named_by_its_path() {
        assert_eq!(dup(r#"{"a":1,"a":2}"#), "a");
        assert_eq!(dup(r#"{"a":1,"b":{"c":[],"c":[]}}"#), "b.c");
        assert_eq!(dup(r#"[{}, {"x":[0, {"y":1,"y":1}]}]"#), "[1].x[1].y");
        // Compared as decoded.
        assert_eq!(dup(r#"{"a":1,"\u0061":2}"#), "a");
        // Equal values are still two members.
        assert_eq!(dup(r#"{"k":null,"k":null}"#), "k");
        assert_eq!(
            from_slice(br#"{"a":1,"a":2}"#).unwrap_err().to_string(),
            "a is duplicated"
        );
    }

    #[test]
    fn syntax_errors_stay_syntax_errors() {
        for body in ["", "{", "[1,]", "{\"a\":1} x", "01", "1e400", "{\"a\" 1}"] {
            assert!(
                matches!(from_slice(body.as_bytes()), Err(Error::Syntax(_))),
                "{body}"
            );
            assert!(from_slice_noting_duplicates(body.as_bytes(), 10).is_err());
        }
        // A syntax error after a duplicate is still reported as the duplicate by the first
        // reader (it stops there) and as a syntax error by the second.
        assert!(matches!(
            from_slice(br#"{"a":1,"a":2,"#),
            Err(Error::Duplicate(_))
        ));
        assert!(from_slice_noting_duplicates(br#"{"a":1,"a":2,"#, 10).is_err());
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(from_slice(deep.as_bytes()), Err(Error::Syntax(_))));
    }

    #[test]
    fn noting_lists_every_repeated_member_once_and_keeps_the_first_value() {
        let (v, d) = from_slice_noting_duplicates(
            br#"[{"a":1,"a":2,"a":3,"b":{"c":1,"c":2}},{"z":0},{"z":1,"y":[{"q":1,"q":1}]}]"#,
            100,
        )
        .unwrap();
        let names: Vec<String> = d.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["[0].b.c", "[0].a", "[2].y[0].q"]);
        assert_eq!(v[0]["a"], 1);
        assert_eq!(v[0]["b"]["c"], 1);
        let (_, d) = from_slice_noting_duplicates(br#"{"a":1,"a":1,"b":1,"b":1}"#, 1).unwrap();
        assert_eq!(d.len(), 1, "the limit holds");
    }

    #[test]
    fn elements_are_handed_over_one_by_one_with_their_repeated_members() {
        let body = br#"[{"a":1,"x":[{"q":1,"q":2}],"a":2}, [{"z":0,"z":0}],
            {"a":{"m":1,"n":[2.5,"s",null]}}, {"a":{"n":[2.5,"s",null],"m":1}}, {"a":{"m":2}}]"#;
        let mut got = Vec::new();
        let top = for_each_element(body, 10, &|k| k == "a", &mut |i, e, d| {
            let names: Vec<String> = d.iter().map(ToString::to_string).collect();
            got.push((i, e, names));
        })
        .unwrap();
        assert_eq!(top, Top::Array(5));
        let obj = |e: &Element| match e {
            Element::Object(m) => m.clone(),
            Element::Other => panic!("not an object"),
        };
        assert_eq!(got[0].0, Some(0));
        // The first of a repeated member; members not kept are left out.
        assert_eq!(Value::Object(obj(&got[0].1)), json!({"a": 1}));
        assert_eq!(got[0].2, ["[0].x[0].q", "[0].a"]);
        // Not an object: named as such only.
        assert!(matches!(got[1].1, Element::Other) && got[1].2.is_empty());
        // Objects and arrays by fingerprint: equal values (members in any order) alike.
        let (a, b, c) = (obj(&got[2].1), obj(&got[3].1), obj(&got[4].1));
        assert!(a["a"].is_array() && !a["a"].is_string());
        assert_eq!(a, b);
        assert_ne!(a, c);
        // One object at the top.
        let mut n = 0;
        let top = for_each_element(br#"{"a":"x","a":"y"}"#, 10, &|_| true, &mut |i, e, d| {
            assert_eq!(i, None);
            assert_eq!(Value::Object(obj(&e)), json!({"a": "x"}));
            assert_eq!(d.len(), 1);
            n += 1;
        })
        .unwrap();
        assert_eq!((top, n), (Top::Object, 1));
        let top = for_each_element(b"\"s\"", 10, &|_| true, &mut |_, _, _| n += 1).unwrap();
        assert_eq!((top, n), (Top::Other, 1));
        assert!(for_each_element(b"[{}", 10, &|_| true, &mut |_, _, _| {}).is_err());
    }

    proptest! {
        /// Without repeated members, the tree is exactly serde_json's.
        #[test]
        fn agrees_with_serde_json_without_duplicates(v in arb_json()) {
            for text in [v.to_string(), serde_json::to_string_pretty(&v).unwrap()] {
                let ours = from_slice(text.as_bytes()).unwrap();
                prop_assert_eq!(&ours, &serde_json::from_str::<Value>(&text).unwrap());
                let (noted, d) = from_slice_noting_duplicates(text.as_bytes(), 10).unwrap();
                prop_assert!(d.is_empty());
                prop_assert_eq!(noted, ours);
            }
        }

        /// A member written twice into any object of a tree is found, by its path.
        #[test]
        fn a_member_written_twice_is_found(v in arb_json(), pick in any::<prop::sample::Index>()) {
            let text = v.to_string();
            // Objects in the text that have at least one member: repeat the first member of one.
            let mut objects = Vec::new();
            collect_objects(&v, &mut Vec::new(), &mut objects);
            prop_assume!(!objects.is_empty());
            let (path, key) = objects[pick.index(objects.len())].clone();
            let mut doubled = v.clone();
            let text_doubled = {
                let target = pointer_mut(&mut doubled, &path);
                let first = target.as_object().unwrap()[&key].clone();
                let mut members = format!("{}:{}", json!(key), first);
                for (k, val) in target.as_object().unwrap() {
                    members.push_str(&format!(",{}:{}", json!(k), val));
                }
                let inner = format!("{{{members}}}");
                *target = Value::String("\u{0}PLACEHOLDER\u{0}".into());
                doubled.to_string().replace(&json!("\u{0}PLACEHOLDER\u{0}").to_string(), &inner)
            };
            prop_assert!(text != text_doubled);
            let mut want = path.clone();
            want.push(Step::Member(key));
            match from_slice(text_doubled.as_bytes()) {
                Err(Error::Duplicate(d)) => prop_assert_eq!(d.path, want),
                other => prop_assert!(false, "{:?}", other),
            }
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = from_slice(&bytes);
            let _ = from_slice_noting_duplicates(&bytes, 4);
        }
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            (-1e6f64..1e6).prop_map(|f| json!(f)),
            "[a-z\u{e9}\"\\\\]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z\"]{1,4}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Every non-empty object of `v`: its path and its first member.
    fn collect_objects(v: &Value, at: &mut Vec<Step>, out: &mut Vec<(Vec<Step>, String)>) {
        match v {
            Value::Object(m) => {
                if let Some(k) = m.keys().next() {
                    out.push((at.clone(), k.clone()));
                }
                for (k, x) in m {
                    at.push(Step::Member(k.clone()));
                    collect_objects(x, at, out);
                    at.pop();
                }
            }
            Value::Array(items) => {
                for (i, x) in items.iter().enumerate() {
                    at.push(Step::Element(i));
                    collect_objects(x, at, out);
                    at.pop();
                }
            }
            _ => {}
        }
    }

    fn pointer_mut<'v>(v: &'v mut Value, path: &[Step]) -> &'v mut Value {
        path.iter().fold(v, |v, step| match step {
            Step::Member(k) => &mut v[k.as_str()],
            Step::Element(i) => &mut v[*i],
        })
    }
}
