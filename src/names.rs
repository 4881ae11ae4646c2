//! Domain names as the block and allow lists hold them (normalised, see
//! `enforcement::domain::normalize`): a name and the names it is under. Both the store and the
//! interfaces use it, so it sits below both.

/// The name and its parents down to (not including) the bare top-level label:
/// `a.b.example.com` yields itself, `b.example.com`, `example.com`.
pub fn self_and_parents(name: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(name);
    std::iter::from_fn(move || {
        let current = rest?;
        // Stop once only a single label would remain.
        match crate::http::cut(current, b'.') {
            (_, Some(parent)) => {
                rest = parent.bytes().any(|c| c == b'.').then_some(parent);
                Some(current)
            }
            (_, None) => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_stop_before_the_tld() {
        let v: Vec<&str> = self_and_parents("a.b.example.com").collect();
        assert_eq!(v, ["a.b.example.com", "b.example.com", "example.com"]);
        let v: Vec<&str> = self_and_parents("example.com").collect();
        assert_eq!(v, ["example.com"]);
        assert_eq!(self_and_parents("com").count(), 0);
    }
}
