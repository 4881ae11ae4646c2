//! The enforcement interface's operations (the `Backend` trait, engine-specific for speed):
//! ingest, the list's pages, deletes, the purge, the effective block list, list changes and the
//! counts for `/metrics`.

use super::*;

/// A request of `events` (name, listed by the acceptance checks) under `key`, received at `now`.
pub(super) fn request(key: &str, events: &[(&str, bool)], now: i64) -> Ingest {
    let batch = PreparedBatch::new(
        events
            .iter()
            .map(|&(domain, listed)| PreparedEvent {
                domain: domain.into(),
                listed,
            })
            .collect(),
        format!("[{}]", vec!["{}"; events.len()].join(",")),
    );
    Ingest {
        key: CustomerKey::parse(key).unwrap(),
        batch_id: uuid::Uuid::new_v4(),
        now,
        batch,
        new_domain_budget: None,
    }
}

/// Stores `names`, each listed, under `key`; returns how many were new.
pub(super) async fn listed(s: &Store, key: &str, names: &[&str], now: i64) -> u64 {
    let events: Vec<_> = names.iter().map(|n| (*n, true)).collect();
    match s.ingest(request(key, &events, now)).await.unwrap() {
        Ingested::Stored { added } => added,
        other => panic!("not stored: {other:?}"),
    }
}

fn key(k: &str) -> CustomerKey {
    CustomerKey::parse(k).unwrap()
}

/// The names of a page, and whether a further page exists.
async fn page(s: &Store, k: &str, page: u64, limit: u64) -> Option<(Vec<String>, bool)> {
    let p = s.list_domains(key(k), page, limit).await.unwrap();
    p.map(|(entries, more)| (entries.into_iter().map(|e| e.name).collect(), more))
}

#[test]
fn ingest_lists_new_names_refreshes_repeated_ones_and_stores_refused_ones_unlisted() {
    on_each_engine("ingest", |s| async move {
        let a = organization(&s, "a").await;
        let b = organization(&s, "b").await;
        assert_eq!(
            s.resolve_customer_key(key(&a.customer_key)).await.unwrap(),
            Some(a.id)
        );
        let unknown = uuid::Uuid::new_v4().to_string();
        assert_eq!(s.resolve_customer_key(key(&unknown)).await.unwrap(), None);
        // A refused name is stored as an event, never listed; a name twice is listed once.
        let first = [
            ("x.example", true),
            ("refused.example", false),
            ("x.example", true),
        ];
        let r = s.ingest(request(&a.customer_key, &first, 10)).await;
        assert_eq!(r, Ok(Ingested::Stored { added: 1 }));
        assert_eq!(s.event_count(a.id).await.unwrap(), 3);
        assert_eq!(s.listed_names(a.id).await.unwrap(), ["x.example"]);
        // The same request again (a client's retry: the store keeps no batch id of its own, so
        // it is a second request): stored again, the repeated name refreshed, not added.
        let batch_id = uuid::Uuid::new_v4();
        let again = |now| Ingest {
            batch_id,
            ..request(
                &a.customer_key,
                &[("x.example", true), ("y.example", true)],
                now,
            )
        };
        assert_eq!(s.ingest(again(20)).await, Ok(Ingested::Stored { added: 1 }));
        assert_eq!(s.ingest(again(30)).await, Ok(Ingested::Stored { added: 0 }));
        assert_eq!(s.event_count(a.id).await.unwrap(), 7);
        assert_eq!(
            s.listed_names(a.id).await.unwrap(),
            ["x.example", "y.example"]
        );
        let (entries, more) = s
            .list_domains(key(&a.customer_key), 1, 10)
            .await
            .unwrap()
            .unwrap();
        assert!(!more);
        let seen: Vec<_> = entries
            .iter()
            .map(|e| (e.name.as_str(), e.last_seen_at))
            .collect();
        assert_eq!(seen, [("x.example", 30), ("y.example", 30)]);
        assert!(entries[0].id < entries[1].id);
        // Another organization's list is its own.
        assert_eq!(s.event_count(b.id).await.unwrap(), 0);
        assert!(s.listed_names(b.id).await.unwrap().is_empty());
        assert_eq!(listed(&s, &b.customer_key, &["x.example"], 40).await, 1);

        // A budget (--cloud-limits) refuses a request that would add more, whole.
        let two_new = |budget| Ingest {
            new_domain_budget: Some(budget),
            ..request(
                &a.customer_key,
                &[("p.example", true), ("q.example", true)],
                50,
            )
        };
        let r = s.ingest(two_new(1)).await;
        assert_eq!(r, Ok(Ingested::OverBudget { would_add: 2 }));
        assert_eq!(s.event_count(a.id).await.unwrap(), 7);
        let known = Ingest {
            new_domain_budget: Some(0),
            ..request(&a.customer_key, &[("x.example", true)], 50)
        };
        assert_eq!(s.ingest(known).await, Ok(Ingested::Stored { added: 0 }));
        assert_eq!(
            s.ingest(two_new(2)).await,
            Ok(Ingested::Stored { added: 2 })
        );

        // A revoked key stores nothing and reads nothing.
        assert!(s
            .revoke_customer_key(a.customer_key.clone(), 60)
            .await
            .unwrap());
        let r = s
            .ingest(request(&a.customer_key, &[("z.example", true)], 70))
            .await;
        assert_eq!(r, Ok(Ingested::UnknownKey));
        assert_eq!(s.event_count(a.id).await.unwrap(), 10);
        assert_eq!(
            s.resolve_customer_key(key(&a.customer_key)).await.unwrap(),
            None
        );
        assert_eq!(
            s.list_domains(key(&a.customer_key), 1, 10).await.unwrap(),
            None
        );
        let r = s
            .ingest(request(&unknown, &[("z.example", true)], 70))
            .await;
        assert_eq!(r, Ok(Ingested::UnknownKey));
        let names = ["x.example", "y.example", "p.example", "q.example"];
        assert_eq!(s.listed_names(a.id).await.unwrap(), names);
    });
}

#[test]
fn pages_follow_the_ids_and_a_page_past_the_end_or_past_2_63_is_empty_and_last() {
    on_each_engine("pages", |s| async move {
        let a = organization(&s, "a").await;
        let names = [
            "a.example",
            "b.example",
            "c.example",
            "d.example",
            "e.example",
        ];
        assert_eq!(listed(&s, &a.customer_key, &names, 1).await, 5);
        let k = a.customer_key.as_str();
        let p = |n: &[&str], more| Some((n.iter().map(|s| s.to_string()).collect(), more));
        assert_eq!(page(&s, k, 1, 2).await, p(&names[..2], true));
        assert_eq!(page(&s, k, 2, 2).await, p(&names[2..4], true));
        assert_eq!(page(&s, k, 3, 2).await, p(&names[4..], false));
        assert_eq!(page(&s, k, 1, 5).await, p(&names, false));
        assert_eq!(page(&s, k, 1, 1000).await, p(&names, false));
        assert_eq!(page(&s, k, 4, 2).await, p(&[], false));
        // Offsets an i64 cannot hold: past every entry, never page 1 again.
        assert_eq!(
            page(&s, k, 46_116_860_184_273_881, 200).await,
            p(&[], false)
        );
        assert_eq!(page(&s, k, i64::MAX as u64, 2).await, p(&[], false));
        assert_eq!(page(&s, k, u64::MAX, 2).await, p(&[], false));
        assert_eq!(page(&s, k, u64::MAX, 1).await, p(&[], false));
        // After a delete, the pages close up.
        let (entries, _) = s.list_domains(key(k), 1, 5).await.unwrap().unwrap();
        assert!(s.delete_domain_by_id(a.id, entries[1].id).await.unwrap());
        let rest = ["a.example", "c.example", "d.example", "e.example"];
        assert_eq!(page(&s, k, 2, 2).await, p(&rest[2..], false));
        let unknown = uuid::Uuid::new_v4().to_string();
        assert_eq!(page(&s, &unknown, 1, 2).await, None);
    });
}

#[test]
fn deletes_find_an_entry_by_id_or_name_only_in_its_own_organization() {
    on_each_engine("deletes", |s| async move {
        let a = organization(&s, "a").await;
        let b = organization(&s, "b").await;
        listed(&s, &a.customer_key, &["one.example", "two.example"], 1).await;
        listed(&s, &b.customer_key, &["one.example"], 1).await;
        let (entries, _) = s
            .list_domains(key(&b.customer_key), 1, 10)
            .await
            .unwrap()
            .unwrap();
        let of_b = entries[0].id;
        s.track_list_changes(false);
        s.take_list_changes().await.unwrap();
        // Another organization's entry is not found, by id or by name.
        assert!(!s.delete_domain_by_id(a.id, of_b).await.unwrap());
        assert!(!s
            .delete_domain_by_name(a.id, "absent.example".into())
            .await
            .unwrap());
        assert_eq!(s.take_list_changes().await.unwrap(), Vec::<i64>::new());
        assert!(s.delete_domain_by_id(b.id, of_b).await.unwrap());
        assert!(!s.delete_domain_by_id(b.id, of_b).await.unwrap());
        assert_eq!(
            s.listed_names(a.id).await.unwrap(),
            ["one.example", "two.example"]
        );
        assert!(s
            .delete_domain_by_name(a.id, "two.example".into())
            .await
            .unwrap());
        assert!(!s
            .delete_domain_by_name(a.id, "two.example".into())
            .await
            .unwrap());
        let mut changed = s.take_list_changes().await.unwrap();
        changed.sort();
        assert_eq!(changed, [a.id, b.id]);
        assert_eq!(s.listed_names(a.id).await.unwrap(), ["one.example"]);
        assert!(s.listed_names(b.id).await.unwrap().is_empty());
        // A deleted name comes back as a new entry, at the end.
        assert_eq!(listed(&s, &a.customer_key, &["two.example"], 2).await, 1);
        // An organization that does not exist has no entries.
        assert!(!s.delete_domain_by_id(a.id + 1000, of_b).await.unwrap());
        assert!(!s
            .delete_domain_by_name(a.id + 1000, "one.example".into())
            .await
            .unwrap());
    });
}

#[test]
fn the_effective_block_list_leaves_out_allowed_names_and_changes_are_taken_once() {
    on_each_engine("effective", |s| async move {
        let a = organization(&s, "a").await;
        let b = organization(&s, "b").await;
        s.track_list_changes(true);
        s.take_list_changes().await.unwrap();
        let names = ["bad.example", "x.bad.example", "other.example"];
        listed(&s, &a.customer_key, &names, 1).await;
        assert_eq!(s.take_list_changes().await.unwrap(), [a.id]);
        assert_eq!(s.take_list_changes().await.unwrap(), Vec::<i64>::new());
        // Events that add no name change no list.
        listed(&s, &a.customer_key, &["bad.example"], 2).await;
        assert_eq!(s.take_list_changes().await.unwrap(), Vec::<i64>::new());
        let (blocked, _) = s.effective_block_list(a.id).await.unwrap();
        assert_eq!(blocked, names);
        s.allow_add(a.id, "x.bad.example".into(), 3).await.unwrap();
        s.allow_add(a.id, "www.other.example".into(), 3)
            .await
            .unwrap();
        s.allow_add(a.id, "unlisted.example".into(), 3)
            .await
            .unwrap();
        let (blocked, allowed) = s.effective_block_list(a.id).await.unwrap();
        assert_eq!(blocked, ["bad.example", "other.example"]);
        assert_eq!(allowed, ["www.other.example", "x.bad.example"]);
        assert_eq!(
            s.effective_block_list(b.id).await.unwrap(),
            (vec![], vec![])
        );
        // Without tracking, events record no change; deletes and deleted organizations do.
        s.track_list_changes(false);
        s.take_list_changes().await.unwrap();
        listed(&s, &b.customer_key, &["new.example"], 4).await;
        assert_eq!(s.take_list_changes().await.unwrap(), Vec::<i64>::new());
        assert!(s.delete_organization(b.id).await.unwrap());
        assert_eq!(s.take_list_changes().await.unwrap(), [b.id]);
        let e = s.effective_block_list(b.id).await;
        assert_eq!(e, Err(StoreError::NotFound));
    });
}

#[test]
fn a_deleted_organizations_events_are_purged_and_the_counts_follow_the_lists() {
    on_each_engine("purge", |s| async move {
        let a = organization(&s, "a").await;
        let b = organization(&s, "b").await;
        listed(
            &s,
            &a.customer_key,
            &["1.example", "2.example", "3.example"],
            1,
        )
        .await;
        listed(&s, &a.customer_key, &["1.example"], 2).await;
        listed(&s, &b.customer_key, &["1.example"], 1).await;
        assert_eq!(
            s.domain_counts(10).await.unwrap(),
            (2, vec![(a.id, 3), (b.id, 1)])
        );
        assert_eq!(s.domain_counts(1).await.unwrap(), (2, vec![(a.id, 3)]));
        assert_eq!(s.purge_step().await.unwrap(), None);
        assert!(s.delete_organization(a.id).await.unwrap());
        assert_eq!(s.domain_counts(10).await.unwrap(), (1, vec![(b.id, 1)]));
        let step = s.purge_step().await.unwrap();
        assert_eq!(
            step,
            Some(PurgeStep {
                organization_id: a.id,
                deleted: 2,
                finished: true
            })
        );
        assert_eq!(s.purge_step().await.unwrap(), None);
        assert_eq!(s.event_count(a.id).await.unwrap(), 0);
        assert!(s.listed_names(a.id).await.unwrap().is_empty());
        assert_eq!(s.event_count(b.id).await.unwrap(), 1);
    });
}

/// A search by name: the names with the prefix, in byte order, from after the last one shown;
/// nothing of another organization, nothing outside the prefix (a name just past the range, a
/// longer name sorting between), and an empty prefix for the whole list.
#[test]
fn search_domains_pages_through_a_prefix_in_name_order() {
    on_each_engine("search_domains", |s| async move {
        let a = organization(&s, "a").await;
        let b = organization(&s, "b").await;
        let names = [
            "shop.example",
            "ads.example",
            "ads-cdn.example",
            "ads.example.net",
            "adt.example",
            "ad.example",
            "zz.example",
        ];
        listed(&s, &a.customer_key, &names, 10).await;
        listed(&s, &b.customer_key, &["ads.other"], 10).await;
        let search = |prefix: &str, after: &str, limit| {
            let (s, prefix, after) = (s.clone(), prefix.to_string(), after.to_string());
            async move {
                s.search_domains(a.id, prefix, after, limit)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|e| e.name)
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(
            search("ads", "", 10).await,
            ["ads-cdn.example", "ads.example", "ads.example.net"]
        );
        assert_eq!(
            search("ads", "", 2).await,
            ["ads-cdn.example", "ads.example"]
        );
        assert_eq!(search("ads", "ads.example", 2).await, ["ads.example.net"]);
        assert!(search("ads", "ads.example.net", 2).await.is_empty());
        assert_eq!(search("ad.", "", 10).await, ["ad.example"]);
        assert!(search("nothing", "", 10).await.is_empty());
        let all = search("", "", 100).await;
        let mut sorted = names.map(String::from).to_vec();
        sorted.sort();
        assert_eq!(all, sorted);
        assert_eq!(search("", "shop.example", 100).await, ["zz.example"]);
        // A cursor below the prefix's names starts at the first of them; one past them all, or
        // past the whole list, finds nothing.
        assert_eq!(
            search("ads", "ab", 10).await,
            ["ads-cdn.example", "ads.example", "ads.example.net"]
        );
        assert_eq!(search("ads", "ads-cdn.example", 1).await, ["ads.example"]);
        assert!(search("ads", "adt", 10).await.is_empty());
        assert!(search("", "zz.example", 10).await.is_empty());
        // Entries carry their ids: the one a delete takes.
        let hit = s
            .search_domains(a.id, "zz".into(), String::new(), 1)
            .await
            .unwrap();
        assert!(s.delete_domain_by_id(a.id, hit[0].id).await.unwrap());
        assert!(search("zz", "", 10).await.is_empty());
    });
}

/// `block_list_since`: the names after a cursor with the whole list's length and check (what
/// tells a reader that its held entries are still all the others), the whole list when the
/// cursor's entry is gone, the allow list and exceptions, and not found for a deleted
/// organization.
#[test]
fn the_list_is_read_after_a_cursor_with_what_shows_the_rest_unchanged() {
    on_each_engine("list_since", |s| async move {
        let a = organization(&s, "a").await;
        let whole = s.block_list_since(a.id, None).await.unwrap();
        assert!(whole.whole && whole.names.is_empty() && whole.last.is_none());
        assert_eq!((whole.count, whole.check), (0, 0));
        listed(&s, &a.customer_key, &["one.example", "two.example"], 1).await;
        let first = s.block_list_since(a.id, None).await.unwrap();
        assert!(first.whole);
        assert_eq!(first.names, ["one.example", "two.example"]);
        assert_eq!((first.count, first.check), (2, first.names_check));
        let cursor = first.last.unwrap();
        // Nothing listed since.
        let none = s.block_list_since(a.id, Some(cursor)).await.unwrap();
        assert!(!none.whole && none.names.is_empty());
        assert_eq!(
            (none.count, none.check, none.last),
            (2, first.check, Some(cursor))
        );
        // Names listed since, with an allow-listed one under a listed name: the names come
        // unfiltered, the exception is named.
        listed(&s, &a.customer_key, &["x.one.example", "three.example"], 2).await;
        s.allow_add(a.id, "x.one.example".into(), 2).await.unwrap();
        let since = s.block_list_since(a.id, Some(cursor)).await.unwrap();
        assert!(!since.whole);
        assert_eq!(since.names, ["x.one.example", "three.example"]);
        assert_eq!(since.count, 4);
        assert_eq!(since.check, first.check.wrapping_add(since.names_check));
        assert_eq!(since.allowed, ["x.one.example"]);
        assert_eq!(since.exceptions, ["x.one.example"]);
        // A name before the cursor removed: the count and check no longer add up.
        let cursor = since.last.unwrap();
        assert!(s
            .delete_domain_by_name(a.id, "two.example".into())
            .await
            .unwrap());
        let after = s.block_list_since(a.id, Some(cursor)).await.unwrap();
        assert!(!after.whole && after.names.is_empty());
        assert_eq!(after.count, 3);
        assert_ne!(after.check, since.check);
        // The cursor's own entry removed, then a name listed (which may take its position): the
        // whole list.
        assert!(s
            .delete_domain_by_name(a.id, "three.example".into())
            .await
            .unwrap());
        listed(&s, &a.customer_key, &["four.example"], 3).await;
        let again = s.block_list_since(a.id, Some(cursor)).await.unwrap();
        assert!(again.whole);
        assert_eq!(
            again.names,
            ["one.example", "x.one.example", "four.example"]
        );
        assert_eq!((again.count, again.check), (3, again.names_check));
        assert!(s.delete_organization(a.id).await.unwrap());
        assert_eq!(
            s.block_list_since(a.id, Some(cursor)).await,
            Err(StoreError::NotFound)
        );
    });
}

/// A list's length and check are summed from the paging counts' blocks: over several blocks of
/// 1024 (closed ones and the open one), with entries removed from closed blocks and from the open
/// one, by id and by name, new names closing blocks that hold removed entries, and (on
/// PostgreSQL) the counts' delta rows folded, they are those of the list's own entries.
#[test]
fn the_list_check_summed_from_the_blocks_is_the_lists_own() {
    on_each_engine("list_check_blocks", |s| async move {
        let a = organization(&s, "a").await;
        let agree = |read: ListRead, what: &str| {
            assert!(read.whole, "{what}");
            assert_eq!(
                (read.count, read.check),
                (read.names.len() as i64, read.names_check),
                "{what}"
            );
        };
        let names: Vec<String> = (0..2600).map(|i| format!("n{i}.example")).collect();
        for (i, chunk) in names.chunks(400).enumerate() {
            let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
            listed(&s, &a.customer_key, &chunk, i as i64 + 1).await;
        }
        agree(s.block_list_since(a.id, None).await.unwrap(), "listed");
        let first = s
            .list_domains(key(&a.customer_key), 1, 10)
            .await
            .unwrap()
            .unwrap()
            .0;
        assert!(s.delete_domain_by_id(a.id, first[3].id).await.unwrap());
        for name in ["n1500.example", "n2590.example"] {
            assert!(s.delete_domain_by_name(a.id, name.into()).await.unwrap());
        }
        let read = s.block_list_since(a.id, None).await.unwrap();
        assert_eq!(read.count, 2597);
        agree(read, "removed");
        s.purge_step().await.unwrap();
        agree(s.block_list_since(a.id, None).await.unwrap(), "folded");
        let more: Vec<String> = (0..1500).map(|i| format!("m{i}.example")).collect();
        let more: Vec<&str> = more.iter().map(String::as_str).collect();
        listed(&s, &a.customer_key, &more, 20).await;
        assert!(s
            .delete_domain_by_name(a.id, "n2000.example".into())
            .await
            .unwrap());
        agree(s.block_list_since(a.id, None).await.unwrap(), "more");
        s.purge_step().await.unwrap();
        let read = s.block_list_since(a.id, None).await.unwrap();
        assert_eq!(read.count, 4096);
        agree(read, "more, folded");
    });
}

/// The list's check tells apart lists a sum of ids does not: of four entries with ids in a row
/// (`a + d = b + c`), the list without the middle two and the list without the outer two (what
/// a node sees when, on another, two names commit late behind its cursor while two others whose
/// ids add up to theirs are removed). Each entry's check is the one the store sums.
#[test]
fn the_list_check_is_not_a_sum_of_ids() {
    on_each_engine("list_check", |s| async move {
        let a = organization(&s, "a").await;
        let (mut cursor, mut ids, mut checks) = (None, Vec::new(), Vec::new());
        for (i, name) in ["a.example", "b.example", "c.example", "d.example"]
            .into_iter()
            .enumerate()
        {
            listed(&s, &a.customer_key, &[name], i as i64 + 1).await;
            let read = s.block_list_since(a.id, cursor).await.unwrap();
            assert_eq!(read.names, [name]);
            assert_eq!(
                read.names_check,
                crate::store::entry_check(read.last.unwrap().id)
            );
            let before = checks.iter().fold(0i64, |t, c| t.wrapping_add(*c));
            assert_eq!(read.check, before.wrapping_add(read.names_check));
            cursor = read.last;
            ids.push(read.last.unwrap().id);
            checks.push(read.names_check);
        }
        assert_eq!(ids[0] + ids[3], ids[1] + ids[2], "ids in a row: {ids:?}");
        assert_ne!(
            checks[0].wrapping_add(checks[3]),
            checks[1].wrapping_add(checks[2])
        );
        // The outer two removed: the store's check is the middle two's.
        for name in ["a.example", "d.example"] {
            assert!(s.delete_domain_by_name(a.id, name.into()).await.unwrap());
        }
        let whole = s.block_list_since(a.id, None).await.unwrap();
        assert_eq!(whole.count, 2);
        assert_eq!(whole.check, checks[1].wrapping_add(checks[2]));
    });
}
