//! What the zones are made of: triggers (a name and what it does) and the differences between two versions of a zone, shared by the zones in memory (`super::zone`), their journals on disk (`super::journal`) and the wire format (`super::wire`).

use std::cmp::Ordering;

use crate::arena::{Full, Names};

/// What a trigger does to the name and everything below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    /// Listed: NXDOMAIN (`CNAME .`).
    Block,
    /// Allow-listed under a listed name: answered normally (`CNAME rpz-passthru.`).
    Passthru,
}

impl Action {
    fn flag(self) -> bool {
        self == Action::Passthru
    }

    fn of_flag(passthru: bool) -> Action {
        if passthru {
            Action::Passthru
        } else {
            Action::Block
        }
    }
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

/// A zone's triggers, sorted by name, each name once, in one arena (`crate::arena`: a name costs
/// its length and 4 bytes, its action a bit of those).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Triggers(Names);

impl Triggers {
    /// The triggers of an effective block list: its listed names block, its exceptions let
    /// through (an exception that is also listed lets the name through).
    pub fn of_lists<'a>(
        blocked: impl IntoIterator<Item = &'a str>,
        exceptions: &'a [String],
    ) -> Result<Triggers, Full> {
        let mut all: Vec<(&str, Action)> =
            blocked.into_iter().map(|n| (n, Action::Block)).collect();
        all.extend(exceptions.iter().map(|n| (n.as_str(), Action::Passthru)));
        // By name, then Block before Passthru: the last of each name is the one kept.
        all.sort_unstable();
        let kept = all
            .iter()
            .enumerate()
            .filter(|(i, e)| all.get(i + 1).is_none_or(|next| next.0 != e.0))
            .map(|(_, e)| *e);
        Triggers::from_sorted(kept)
    }

    /// Triggers already sorted by name, each name once.
    fn from_sorted<'a>(
        entries: impl IntoIterator<Item = (&'a str, Action)> + Clone,
    ) -> Result<Triggers, Full> {
        let (count, text) = entries
            .clone()
            .into_iter()
            .fold((0, 0), |(c, t), e| (c + 1, t + e.0.len()));
        let mut out = Names::with_capacity(count, text);
        for (name, action) in entries {
            debug_assert!(out.last().is_none_or(|l| l.0 < name));
            out.push(name, action.flag())?;
        }
        Ok(Triggers(out))
    }

    /// Triggers given as entries (sorted by name, each name once).
    #[cfg(test)]
    pub fn of_entries(entries: &[Entry]) -> Triggers {
        Triggers::from_sorted(entries.iter().map(|(n, a)| (&**n, *a))).unwrap()
    }

    /// The triggers as entries.
    #[cfg(test)]
    pub fn entries(&self) -> Vec<Entry> {
        self.iter().map(|(n, a)| (Box::from(n), a)).collect()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The trigger at `i` (in name order).
    pub fn get(&self, i: usize) -> Option<(&str, Action)> {
        self.0.get(i).map(|(n, f)| (n, Action::of_flag(f)))
    }

    /// The triggers in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Action)> + Clone + '_ {
        self.0.iter().map(|(n, f)| (n, Action::of_flag(f)))
    }

    /// These triggers without `removed` and with `added` (both sorted by name; each of `removed`
    /// among these, each of `added` not, or among `removed` with the other action, which it
    /// then takes): built in one pass, the names copied once.
    pub fn merged(&self, removed: &[Entry], added: &[Entry]) -> Result<Triggers, Full> {
        let text = self.0.text_len() + added.iter().map(|a| a.0.len()).sum::<usize>();
        let mut out = Names::with_capacity(self.len() + added.len(), text);
        let mut gone = removed.iter().peekable();
        let mut new = added.iter().peekable();
        for (name, action) in self.iter() {
            while gone.next_if(|r| &*r.0 < name).is_some() {}
            let drop = gone.next_if(|r| &*r.0 == name && r.1 == action).is_some();
            while let Some(a) = new.next_if(|a| &*a.0 <= name) {
                out.push(&a.0, a.1.flag())?;
            }
            if !drop && out.last().is_none_or(|l| l.0 != name) {
                out.push(name, action.flag())?;
            }
        }
        for a in new {
            out.push(&a.0, a.1.flag())?;
        }
        Ok(Triggers(out))
    }

    /// The triggers here and not in `new`, and those in `new` and not here (both sorted; a name
    /// whose action changed is in both).
    pub fn diff(&self, new: &Triggers) -> (Vec<Entry>, Vec<Entry>) {
        let (mut removed, mut added) = (Vec::new(), Vec::new());
        let owned = |(n, a): (&str, Action)| (Box::from(n), a);
        let (mut old, mut new) = (self.iter().peekable(), new.iter().peekable());
        loop {
            match (old.peek().copied(), new.peek().copied()) {
                (Some(a), Some(b)) => match a.0.cmp(b.0) {
                    Ordering::Equal => {
                        if a.1 != b.1 {
                            removed.push(owned(a));
                            added.push(owned(b));
                        }
                        old.next();
                        new.next();
                    }
                    Ordering::Less => {
                        removed.push(owned(a));
                        old.next();
                    }
                    Ordering::Greater => {
                        added.push(owned(b));
                        new.next();
                    }
                },
                (Some(a), None) => {
                    removed.push(owned(a));
                    old.next();
                }
                (None, Some(b)) => {
                    added.push(owned(b));
                    new.next();
                }
                (None, None) => break,
            }
        }
        (removed, added)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn e(v: &[(&str, Action)]) -> Vec<Entry> {
        v.iter().map(|(n, a)| (Box::from(*n), *a)).collect()
    }

    fn all(t: &Triggers) -> Vec<Entry> {
        t.entries()
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_list_and_its_exceptions_make_sorted_triggers_each_name_once() {
        let blocked = s(&["z.test", "a.test", "m.test", "a.test", "x.m.test"]);
        let exceptions = s(&["ok.a.test", "x.m.test"]);
        let t = Triggers::of_lists(blocked.iter().map(String::as_str), &exceptions).unwrap();
        assert_eq!(
            all(&t),
            e(&[
                ("a.test", Action::Block),
                ("m.test", Action::Block),
                ("ok.a.test", Action::Passthru),
                // Listed and an exception: let through.
                ("x.m.test", Action::Passthru),
                ("z.test", Action::Block),
            ])
        );
        assert_eq!(t.get(2), Some(("ok.a.test", Action::Passthru)));
        assert_eq!(t.get(5), None);
        let none = Triggers::of_lists([], &[]).unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn a_merge_adds_removes_and_changes_actions() {
        let before = e(&[
            ("a.test", Action::Block),
            ("b.test", Action::Passthru),
            ("d.test", Action::Block),
            ("f.test", Action::Block),
        ]);
        let t = Triggers::of_entries(&before);
        let removed = e(&[("b.test", Action::Passthru), ("d.test", Action::Block)]);
        let added = e(&[
            ("0.test", Action::Block),
            ("c.test", Action::Block),
            ("d.test", Action::Passthru),
            ("z.test", Action::Block),
        ]);
        let after = e(&[
            ("0.test", Action::Block),
            ("a.test", Action::Block),
            ("c.test", Action::Block),
            ("d.test", Action::Passthru),
            ("f.test", Action::Block),
            ("z.test", Action::Block),
        ]);
        let merged = t.merged(&removed, &added).unwrap();
        assert_eq!(all(&merged), after);
        assert_eq!(t.diff(&merged), (removed, added));
        // Everything removed.
        assert!(t.merged(&before, &[]).unwrap().is_empty());
        assert_eq!(t.merged(&[], &[]).unwrap(), t);
    }

    /// The model: a map from name to action.
    fn model(m: &BTreeMap<String, Action>) -> Vec<Entry> {
        m.iter().map(|(n, a)| (Box::from(n.as_str()), *a)).collect()
    }

    fn action() -> impl Strategy<Value = Action> {
        prop_oneof![Just(Action::Block), Just(Action::Passthru)]
    }

    proptest! {
        /// Built from lists, merged with changes, compared: the same as a map of names.
        #[test]
        fn triggers_behave_as_a_map_of_names(
            blocked in proptest::collection::vec("[a-d]{1,3}", 0..40),
            exceptions in proptest::collection::btree_set("[a-d]{1,3}", 0..10),
            changes in proptest::collection::vec(("[a-d]{1,3}", proptest::option::of(action())), 0..30),
        ) {
            let exceptions: Vec<String> = exceptions.into_iter().collect();
            let t = Triggers::of_lists(blocked.iter().map(String::as_str), &exceptions).unwrap();
            let mut m = BTreeMap::new();
            for n in &blocked {
                m.insert(n.clone(), Action::Block);
            }
            for n in &exceptions {
                m.insert(n.clone(), Action::Passthru);
            }
            prop_assert_eq!(all(&t), model(&m));
            // The changes as a round hands them over: a name taken out with the action it had,
            // put in with its new one.
            let mut next = m.clone();
            for (n, a) in &changes {
                match a {
                    Some(a) => next.insert(n.clone(), *a),
                    None => next.remove(n),
                };
            }
            let (removed, added) = t.diff(&Triggers::of_entries(&model(&next)));
            prop_assert!(removed.iter().all(|r| m.get(&*r.0) == Some(&r.1)));
            prop_assert!(added.iter().all(|a| next.get(&*a.0) == Some(&a.1)));
            let merged = t.merged(&removed, &added).unwrap();
            prop_assert_eq!(all(&merged), model(&next));
        }
    }
}
