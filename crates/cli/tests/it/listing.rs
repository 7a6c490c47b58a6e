//! `delegation list` over a history: the most recent units by default, `--limit` of them, and
//! `--since` pages of the whole history, oldest first, each naming the next.

use serde_json::Value;

use crate::common::Hermes;

/// The ids of a listing's `recent` units, in its order.
fn ids(list: &Value) -> Vec<String> {
    list["recent"]
        .as_array()
        .expect("recent")
        .iter()
        .map(|u| u["delegation_id"].as_str().expect("id").to_owned())
        .collect()
}

#[test]
fn delegation_list_pages_through_the_history_with_limit_and_since() {
    let h = Hermes::new();
    for _ in 0..5 {
        assert_eq!(h.run(&["-z", "--", "true"]).code, 0);
    }
    let mut oldest_first = ids(&h.json(&["delegation", "list", "--all", "--json"]));
    oldest_first.reverse();
    assert_eq!(oldest_first.len(), 5);

    let newest = h.json(&["delegation", "list", "--json", "--limit", "2"]);
    assert_eq!(
        ids(&newest),
        vec![oldest_first[4].clone(), oldest_first[3].clone()]
    );
    assert_eq!(newest["recent_count"], 5);
    assert!(
        newest.get("next").is_none(),
        "only a --since page has a next"
    );
    let text = h.run(&["delegation", "list", "--limit", "2"]);
    assert!(text.stdout.contains("recent (2 of 5;"), "{}", text.stdout);

    // Page by page from the oldest unit, each page continuing after the last one.
    let page = h.json(&[
        "delegation",
        "list",
        "--json",
        "--limit",
        "2",
        "--since",
        &oldest_first[0],
    ]);
    assert_eq!(ids(&page), oldest_first[1..3]);
    assert_eq!(page["next"], oldest_first[2].as_str());
    let page = h.json(&[
        "delegation",
        "list",
        "--json",
        "--limit",
        "2",
        "--since",
        &oldest_first[2],
    ]);
    assert_eq!(ids(&page), oldest_first[3..5]);
    assert_eq!(page["next"], oldest_first[4].as_str());
    let page = h.json(&[
        "delegation",
        "list",
        "--json",
        "--limit",
        "2",
        "--since",
        &oldest_first[4],
    ]);
    assert!(ids(&page).is_empty());
    assert_eq!(page["next"], Value::Null);

    // A duration: everything dispatched within it, oldest first; a page that is not full
    // is the last.
    let page = h.json(&["delegation", "list", "--all", "--json", "--since", "1h"]);
    assert_eq!(ids(&page), oldest_first);
    assert_eq!(page["next"], Value::Null);
    let text = h.run(&["delegation", "list", "--limit", "2", "--since", "1h"]);
    assert!(
        text.stdout
            .contains(&format!("--since {} for the next page", oldest_first[1])),
        "{}",
        text.stdout
    );
}

#[test]
fn bad_paging_flags_are_one_line_errors() {
    let h = Hermes::new();
    assert_eq!(h.run(&["-z", "--", "true"]).code, 0);
    h.run(&["delegation", "list", "--since", "yesterday"])
        .assert_one_error_line(2);
    h.run(&["delegation", "list", "--since", "5x"])
        .assert_one_error_line(2);
    h.run(&["delegation", "list", "--since", "deleg_nothex"])
        .assert_one_error_line(2);
    h.run(&["delegation", "list", "--since", "deleg_000000000000"])
        .assert_one_error_line(4);
    let zero = h.run(&["delegation", "list", "--limit", "0"]);
    assert_eq!(zero.code, 2, "{}", zero.stderr);
}
