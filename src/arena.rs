//! Long-lived lists of names (the exporter's lists, the RPZ zones' triggers) held compactly: the
//! names back to back in one string, and where each ends, so that a name costs its length and
//! 4 bytes, where a `String` of its own costs a heap allocation (its length rounded up, and the
//! allocator's header) and 24 bytes beside it. A million names of 18 characters take 22 MB
//! instead of 55-90.

use std::fmt;

/// Names in one string, in the order they were pushed, each with a flag (what the list's owner
/// makes of it: an RPZ trigger's action, say).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Names {
    text: String,
    /// For each name, where it ends in `text` (it starts where the one before ends), with its
    /// flag in the top bit.
    ends: Vec<u32>,
}

const FLAG: u32 = 1 << 31;

/// The most text a list holds: 2 GiB, about a hundred million names.
pub const MOST_TEXT: usize = (FLAG - 1) as usize;

/// A list would hold more than `MOST_TEXT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

impl fmt::Display for Full {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a list of names of more than {MOST_TEXT} bytes")
    }
}

impl std::error::Error for Full {}

impl From<Full> for String {
    fn from(f: Full) -> String {
        f.to_string()
    }
}

impl Names {
    /// Room for `names` names of `text` bytes in all, allocated at once.
    pub fn with_capacity(names: usize, text: usize) -> Names {
        Names {
            text: String::with_capacity(text),
            ends: Vec::with_capacity(names),
        }
    }

    /// The names, unflagged, as a list of them would hold them.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str> + Clone) -> Result<Names, Full> {
        let (count, text) = names
            .clone()
            .into_iter()
            .fold((0, 0), |(c, t), n| (c + 1, t + n.len()));
        let mut out = Names::with_capacity(count, text);
        for n in names {
            out.push(n, false)?;
        }
        Ok(out)
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The bytes of all the names together.
    pub fn text_len(&self) -> usize {
        self.text.len()
    }

    pub fn push(&mut self, name: &str, flag: bool) -> Result<(), Full> {
        self.push_within(name, flag, MOST_TEXT)
    }

    /// `push`, to a list of at most `most` (`MOST_TEXT` or less) bytes of text.
    fn push_within(&mut self, name: &str, flag: bool, most: usize) -> Result<(), Full> {
        let end = self.text.len() + name.len();
        if end > most {
            return Err(Full);
        }
        self.text.push_str(name);
        // Below 2^31: fits, the flag bit left clear.
        self.ends.push(end as u32 | if flag { FLAG } else { 0 });
        Ok(())
    }

    /// Appends `names` unflagged, growing the list by exactly what they take: a large list that
    /// grows by a few names a round does not keep twice its size in reserve (the allocator
    /// moves a large block by remapping its pages, not by copying them).
    pub fn extend<'a>(
        &mut self,
        names: impl IntoIterator<Item = &'a str> + Clone,
    ) -> Result<(), Full> {
        let (count, text) = names
            .clone()
            .into_iter()
            .fold((0, 0), |(c, t), n| (c + 1, t + n.len()));
        self.text.reserve_exact(text);
        self.ends.reserve_exact(count);
        for n in names {
            self.push(n, false)?;
        }
        Ok(())
    }

    /// The name at `i` and its flag.
    pub fn get(&self, i: usize) -> Option<(&str, bool)> {
        let e = *self.ends.get(i)?;
        let start = match i.checked_sub(1) {
            Some(before) => (self.ends[before] & !FLAG) as usize,
            None => 0,
        };
        Some((&self.text[start..(e & !FLAG) as usize], e & FLAG != 0))
    }

    /// The last name and its flag.
    pub fn last(&self) -> Option<(&str, bool)> {
        self.get(self.len().checked_sub(1)?)
    }

    /// The names with their flags, in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            names: self,
            at: 0,
            start: 0,
        }
    }

    /// The names from the one at `i` on, without their flags.
    pub fn iter_from(&self, i: usize) -> impl Iterator<Item = &str> {
        let start = match i.checked_sub(1).and_then(|b| self.ends.get(b)) {
            Some(e) => (e & !FLAG) as usize,
            None => 0,
        };
        Iter {
            names: self,
            at: i,
            start,
        }
        .map(|(n, _)| n)
    }
}

impl fmt::Debug for Names {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// `Names::iter`.
#[derive(Clone)]
pub struct Iter<'a> {
    names: &'a Names,
    at: usize,
    start: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, bool);

    fn next(&mut self) -> Option<(&'a str, bool)> {
        let e = *self.names.ends.get(self.at)?;
        let end = (e & !FLAG) as usize;
        let name = &self.names.text[self.start..end];
        (self.at, self.start) = (self.at + 1, end);
        Some((name, e & FLAG != 0))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.names.len() - self.at;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

/// The names alone (a list's files are rendered from this).
impl<'a> IntoIterator for &'a Names {
    type Item = &'a str;
    type IntoIter = std::iter::Map<Iter<'a>, fn((&'a str, bool)) -> &'a str>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter().map(|(n, _)| n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_back_as_pushed_with_their_flags() {
        let mut n = Names::default();
        assert_eq!((n.len(), n.last(), n.get(0)), (0, None, None));
        n.push("a.test", false).unwrap();
        n.push("", true).unwrap();
        n.push("bé.test", true).unwrap();
        n.extend(["c.test", "d.test"]).unwrap();
        let all: Vec<(&str, bool)> = n.iter().collect();
        assert_eq!(
            all,
            [
                ("a.test", false),
                ("", true),
                ("bé.test", true),
                ("c.test", false),
                ("d.test", false)
            ]
        );
        assert_eq!(n.get(2), Some(("bé.test", true)));
        assert_eq!(n.get(5), None);
        assert_eq!(n.last(), Some(("d.test", false)));
        assert_eq!(n.text_len(), "a.testbé.testc.testd.test".len());
        let plain: Vec<&str> = (&n).into_iter().collect();
        assert_eq!(plain, ["a.test", "", "bé.test", "c.test", "d.test"]);
        assert_eq!(
            n.iter_from(2).collect::<Vec<_>>(),
            ["bé.test", "c.test", "d.test"]
        );
        assert_eq!(n.iter_from(0).count(), 5);
        assert_eq!(n.iter_from(5).count(), 0);
        assert_eq!(n.iter_from(9).count(), 0);
        let again = Names::from_names(plain.iter().copied()).unwrap();
        assert_eq!(again.len(), 5);
        assert_eq!(again.get(2), Some(("bé.test", false)));
        assert_ne!(again, n);
    }

    #[test]
    fn a_list_past_its_most_text_refuses_the_name_and_stays_whole() {
        let mut n = Names::default();
        n.push_within("ab", true, 4).unwrap();
        assert_eq!(n.push_within("cde", false, 4), Err(Full));
        n.push_within("cd", false, 4).unwrap();
        assert_eq!(n.iter().collect::<Vec<_>>(), [("ab", true), ("cd", false)]);
    }
}
