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
