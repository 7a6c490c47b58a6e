//! The soak's accounting: from what the soak recorded (the ids it dispatched, every envelope a
//! drain printed) and what the ledger says at the end (each unit's status and events), which
//! results are missing, which were delivered twice and what is stranded. Pure: no process, no
//! clock, so it is tested with plain `#[test]`s in CI while the soak itself is not.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

/// A dispatch the soak drew an id for (it may never have been recorded: the ledger says).
#[derive(Clone, Debug)]
pub(crate) struct Dispatch {
    pub(crate) id: String,
    pub(crate) session: String,
    /// The line the unit's child prints, unique to the unit.
    pub(crate) marker: String,
    pub(crate) pool: bool,
    /// `delegate` runs it took (exit 6 or a timeout is retried with the same id).
    pub(crate) tries: u32,
}

/// One event of one envelope a drain printed.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    pub(crate) unit: String,
    pub(crate) key: String,
    /// The envelope's text (the unit's result block).
    pub(crate) text: String,
    /// Milliseconds since the soak started, when the drain's output was read.
    pub(crate) at_ms: u64,
}

/// One event of a unit as the ledger has it at the end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LedgerEvent {
    pub(crate) key: String,
    /// `pending`, `claimed`, `delivered` or `dropped`.
    pub(crate) state: String,
    pub(crate) drop_reason: Option<String>,
}

/// A unit as `hermes delegation status ID --json` shows it at the end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LedgerUnit {
    /// `queued`, `running`, `completed`, `failed`, `unknown`, …
    pub(crate) status: String,
    pub(crate) events: Vec<LedgerEvent>,
}

impl LedgerUnit {
    /// Reads `delegation status --json`: `None` for `{"error":"not found"}` (never recorded).
    pub(crate) fn from_status(value: &Value) -> Option<Result<LedgerUnit, String>> {
        if value.get("error").is_some() {
            return None;
        }
        let Some(status) = value["status"].as_str() else {
            return Some(Err(format!("a status without a status: {value}")));
        };
        // The drop reasons are per task, under `delivery`, keyed by the task's event.
        let reasons: BTreeMap<&str, &str> = value["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| {
                let d = &t["delivery"];
                Some((d["event_key"].as_str()?, d["drop_reason"].as_str()?))
            })
            .collect();
        let events = value["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| {
                let key = e["event_key"].as_str()?;
                Some(LedgerEvent {
                    key: key.to_owned(),
                    state: e["state"].as_str()?.to_owned(),
                    drop_reason: reasons.get(key).map(|r| (*r).to_owned()),
                })
            })
            .collect();
        Some(Ok(LedgerUnit {
            status: status.to_owned(),
            events,
        }))
    }
}

/// A drop no fault explains away: the session ended, or the result waited past its replay age.
/// The soak ends no session and lasts minutes, so it expects neither; every other reason
/// (`attempts_exhausted`, `orphaned`) is a result lost to its conversation.
const LEGITIMATE_DROPS: [&str; 2] = ["session_ended", "replay_expired"];

/// One problem, named by its unit (and event).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Finding {
    pub(crate) unit: String,
    pub(crate) key: Option<String>,
    pub(crate) why: String,
}

impl Finding {
    fn new(unit: &str, key: Option<&str>, why: impl Into<String>) -> Finding {
        Finding {
            unit: unit.to_owned(),
            key: key.map(str::to_owned),
            why: why.into(),
        }
    }

    fn json(&self) -> Value {
        json!({ "unit": self.unit, "event": self.key, "why": self.why })
    }
}

/// What the accounting found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Ids the soak drew and sent.
    pub(crate) dispatched: usize,
    /// Of those, units the ledger holds.
    pub(crate) recorded: usize,
    /// Recorded units each of whose events a drain printed.
    pub(crate) delivered: usize,
    /// Printed results that carry their unit's marker (a child that completed; a unit that
    /// ended `unknown` carries its tail, which may lack it).
    pub(crate) results_with_marker: usize,
    /// Recorded units by their final status.
    pub(crate) statuses: BTreeMap<String, usize>,
    /// Events dropped for a reason the soak expects (none, in practice).
    pub(crate) dropped_legitimately: usize,
    /// Recorded units with an event never printed and not legitimately dropped.
    pub(crate) missing: Vec<Finding>,
    /// Events printed more than once.
    pub(crate) duplicated: Vec<Finding>,
    /// Units still queued or running, events still pending or claimed.
    pub(crate) stranded: Vec<Finding>,
    /// Printed events the ledger does not have, or of units the soak never dispatched.
    pub(crate) unexpected: Vec<Finding>,
}

impl Tally {
    /// Whether the run held: nothing missing, duplicated, stranded or unexpected.
    pub(crate) fn held(&self) -> bool {
        self.missing.is_empty()
            && self.duplicated.is_empty()
            && self.stranded.is_empty()
            && self.unexpected.is_empty()
    }

    /// The findings as JSON (the first `limit` of each kind).
    pub(crate) fn findings_json(&self, limit: usize) -> Value {
        let list = |v: &[Finding]| v.iter().take(limit).map(Finding::json).collect::<Vec<_>>();
        json!({
            "missing": list(&self.missing),
            "duplicated": list(&self.duplicated),
            "stranded": list(&self.stranded),
            "unexpected": list(&self.unexpected),
        })
    }
}

/// Classifies every dispatch against what the drains printed and what the ledger holds
/// (`ledger[id]`, absent for an id it does not know).
pub(crate) fn classify(
    dispatches: &[Dispatch],
    seen: &[Seen],
    ledger: &BTreeMap<String, LedgerUnit>,
) -> Tally {
    let mut tally = Tally {
        dispatched: dispatches.len(),
        ..Tally::default()
    };
    let mut printed: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for s in seen {
        *printed.entry((&s.unit, &s.key)).or_default() += 1;
    }
    let markers: BTreeMap<&str, &str> = dispatches
        .iter()
        .map(|d| (d.id.as_str(), d.marker.as_str()))
        .collect();
    tally.results_with_marker = seen
        .iter()
        .filter(|s| {
            markers
                .get(s.unit.as_str())
                .is_some_and(|m| s.text.contains(m))
        })
        .count();
    for ((unit, key), count) in &printed {
        if *count > 1 {
            tally.duplicated.push(Finding::new(
                unit,
                Some(key),
                format!("printed {count} times"),
            ));
        }
        let known = ledger
            .get(*unit)
            .map(|u| u.events.iter().any(|e| e.key == *key));
        match (markers.contains_key(unit), known) {
            (false, _) => tally.unexpected.push(Finding::new(
                unit,
                Some(key),
                "printed, but the soak never dispatched this unit",
            )),
            (true, None) => tally.unexpected.push(Finding::new(
                unit,
                Some(key),
                "printed, but the ledger does not know this unit",
            )),
            (true, Some(false)) => tally.unexpected.push(Finding::new(
                unit,
                Some(key),
                "printed, but the ledger has no such event",
            )),
            (true, Some(true)) => {}
        }
    }
    let ids: BTreeSet<&str> = markers.keys().copied().collect();
    for id in ids {
        let Some(unit) = ledger.get(id) else {
            continue;
        };
        tally.recorded += 1;
        *tally.statuses.entry(unit.status.clone()).or_default() += 1;
        if matches!(unit.status.as_str(), "queued" | "running") {
            tally.stranded.push(Finding::new(
                id,
                None,
                format!("the unit is still {}", unit.status),
            ));
            continue;
        }
        if unit.events.is_empty() {
            tally.missing.push(Finding::new(
                id,
                None,
                format!("the unit ended {} with no event to deliver", unit.status),
            ));
            continue;
        }
        let mut all_printed = true;
        for event in &unit.events {
            let count = printed.get(&(id, event.key.as_str())).copied().unwrap_or(0);
            all_printed &= count > 0;
            let key = Some(event.key.as_str());
            match event.state.as_str() {
                "pending" | "claimed" => tally.stranded.push(Finding::new(
                    id,
                    key,
                    format!("the event is still {}", event.state),
                )),
                "delivered" if count == 0 => tally.missing.push(Finding::new(
                    id,
                    key,
                    "acked as delivered, but no drain printed it",
                )),
                "dropped" if count == 0 => {
                    let reason = event.drop_reason.as_deref().unwrap_or("no reason");
                    if LEGITIMATE_DROPS.contains(&reason) {
                        tally.dropped_legitimately += 1;
                    } else {
                        tally.missing.push(Finding::new(
                            id,
                            key,
                            format!("dropped ({reason}), never printed"),
                        ));
                    }
                }
                _ => {}
            }
        }
        if all_printed {
            tally.delivered += 1;
        }
    }
    tally
}

/// The time from the end of the last fault to the last delivery after it, in seconds; `None`
/// when nothing was delivered after the last fault (or there was no fault).
pub(crate) fn recovery_seconds(last_fault_end_ms: Option<u64>, seen: &[Seen]) -> Option<f64> {
    let fault = last_fault_end_ms?;
    let last = seen.iter().map(|s| s.at_ms).max()?;
    (last >= fault).then(|| (last - fault) as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dispatch(id: &str) -> Dispatch {
        Dispatch {
            id: id.into(),
            session: "s".into(),
            marker: format!("marker-{id}"),
            pool: false,
            tries: 1,
        }
    }

    fn seen(id: &str, key: &str, at_ms: u64) -> Seen {
        Seen {
            unit: id.into(),
            key: key.into(),
            text: format!("│ marker-{id}"),
            at_ms,
        }
    }

    fn unit(status: &str, events: &[(&str, &str, Option<&str>)]) -> LedgerUnit {
        LedgerUnit {
            status: status.into(),
            events: events
                .iter()
                .map(|(key, state, reason)| LedgerEvent {
                    key: (*key).into(),
                    state: (*state).into(),
                    drop_reason: reason.map(str::to_owned),
                })
                .collect(),
        }
    }

    fn ledger(units: &[(&str, LedgerUnit)]) -> BTreeMap<String, LedgerUnit> {
        units
            .iter()
            .map(|(id, u)| ((*id).to_owned(), u.clone()))
            .collect()
    }

    #[test]
    fn a_unit_printed_once_and_acked_is_delivered() {
        let tally = classify(
            &[dispatch("a")],
            &[seen("a", "task:0", 5)],
            &ledger(&[("a", unit("completed", &[("task:0", "delivered", None)]))]),
        );
        assert!(tally.held(), "{tally:?}");
        assert_eq!(
            (tally.dispatched, tally.recorded, tally.delivered),
            (1, 1, 1)
        );
        assert_eq!(tally.results_with_marker, 1);
        assert_eq!(tally.statuses.get("completed"), Some(&1));
    }

    #[test]
    fn an_id_the_ledger_never_recorded_is_neither_missing_nor_delivered() {
        let tally = classify(&[dispatch("a")], &[], &ledger(&[]));
        assert!(tally.held(), "{tally:?}");
        assert_eq!(
            (tally.dispatched, tally.recorded, tally.delivered),
            (1, 0, 0)
        );
    }

    #[test]
    fn an_event_printed_twice_is_a_duplicate() {
        let tally = classify(
            &[dispatch("a")],
            &[seen("a", "task:0", 5), seen("a", "task:0", 9)],
            &ledger(&[("a", unit("completed", &[("task:0", "delivered", None)]))]),
        );
        assert_eq!(
            tally.duplicated,
            vec![Finding::new("a", Some("task:0"), "printed 2 times")]
        );
        assert!(!tally.held());
        assert_eq!(tally.delivered, 1, "still delivered");
    }

    #[test]
    fn an_acked_event_no_drain_printed_is_missing() {
        let tally = classify(
            &[dispatch("a")],
            &[],
            &ledger(&[("a", unit("completed", &[("task:0", "delivered", None)]))]),
        );
        assert_eq!(tally.missing.len(), 1, "{tally:?}");
        assert_eq!(tally.missing[0].key.as_deref(), Some("task:0"));
        assert_eq!(tally.delivered, 0);
    }

    #[test]
    fn a_drop_is_missing_unless_its_reason_is_legitimate() {
        let tally = classify(
            &[dispatch("a"), dispatch("b")],
            &[],
            &ledger(&[
                (
                    "a",
                    unit(
                        "completed",
                        &[("task:0", "dropped", Some("attempts_exhausted"))],
                    ),
                ),
                (
                    "b",
                    unit("completed", &[("task:0", "dropped", Some("session_ended"))]),
                ),
            ]),
        );
        assert_eq!(tally.missing.len(), 1, "{tally:?}");
        assert_eq!(tally.missing[0].unit, "a");
        assert!(tally.missing[0].why.contains("attempts_exhausted"));
        assert_eq!(tally.dropped_legitimately, 1);
    }

    #[test]
    fn queued_and_running_units_and_open_events_are_stranded() {
        let tally = classify(
            &[dispatch("q"), dispatch("r"), dispatch("p"), dispatch("c")],
            &[seen("c", "task:0", 1)],
            &ledger(&[
                ("q", unit("queued", &[])),
                ("r", unit("running", &[])),
                ("p", unit("completed", &[("task:0", "pending", None)])),
                ("c", unit("completed", &[("task:0", "claimed", None)])),
            ]),
        );
        let stranded: Vec<&str> = tally.stranded.iter().map(|f| f.unit.as_str()).collect();
        assert_eq!(stranded, ["c", "p", "q", "r"]);
        assert!(tally.missing.is_empty(), "stranded is not also missing");
        assert_eq!(tally.delivered, 1, "c was printed, though its ack is open");
    }

    #[test]
    fn a_settled_unit_without_any_event_is_missing() {
        let tally = classify(
            &[dispatch("a")],
            &[],
            &ledger(&[("a", unit("unknown", &[]))]),
        );
        assert_eq!(tally.missing.len(), 1, "{tally:?}");
    }

    #[test]
    fn a_terminal_event_counts_like_a_task_event_and_may_lack_the_marker() {
        let mut printed = seen("a", "terminal", 3);
        printed.text = "Status: unknown (its host died)".into();
        let tally = classify(
            &[dispatch("a")],
            &[printed],
            &ledger(&[("a", unit("unknown", &[("terminal", "delivered", None)]))]),
        );
        assert!(tally.held(), "{tally:?}");
        assert_eq!(tally.delivered, 1);
        assert_eq!(tally.results_with_marker, 0);
    }

    #[test]
    fn printed_events_the_ledger_or_the_soak_does_not_know_are_unexpected() {
        let tally = classify(
            &[dispatch("a"), dispatch("b")],
            &[
                seen("a", "task:0", 1),
                seen("a", "task:1", 1),
                seen("b", "task:0", 1),
                seen("z", "task:0", 1),
            ],
            &ledger(&[("a", unit("completed", &[("task:0", "delivered", None)]))]),
        );
        let why: Vec<&str> = tally.unexpected.iter().map(|f| f.why.as_str()).collect();
        assert_eq!(
            why,
            [
                "printed, but the ledger has no such event",
                "printed, but the ledger does not know this unit",
                "printed, but the soak never dispatched this unit",
            ]
        );
        assert!(!tally.held());
    }

    #[test]
    fn a_status_answer_is_read_with_its_drop_reasons() {
        let value = serde_json::json!({
            "delegation_id": "deleg_000000000001",
            "status": "completed",
            "tasks": [{"index": 0, "delivery": {
                "event_key": "task:0", "state": "dropped", "drop_reason": "attempts_exhausted"}}],
            "events": [{"event_key": "task:0", "state": "dropped", "attempts": 8}],
        });
        let unit = LedgerUnit::from_status(&value)
            .expect("recorded")
            .expect("readable");
        assert_eq!(
            unit,
            LedgerUnit {
                status: "completed".into(),
                events: vec![LedgerEvent {
                    key: "task:0".into(),
                    state: "dropped".into(),
                    drop_reason: Some("attempts_exhausted".into()),
                }],
            }
        );
        let missing = serde_json::json!({"error": "not found", "delegation_id": "deleg_x"});
        assert!(LedgerUnit::from_status(&missing).is_none());
        assert!(
            LedgerUnit::from_status(&serde_json::json!({"tasks": []}))
                .expect("an answer")
                .is_err()
        );
    }

    #[test]
    fn recovery_runs_from_the_last_fault_to_the_last_delivery() {
        let seen = [seen("a", "task:0", 1_000), seen("b", "task:0", 4_500)];
        assert_eq!(recovery_seconds(Some(2_000), &seen), Some(2.5));
        assert_eq!(recovery_seconds(Some(5_000), &seen), None);
        assert_eq!(recovery_seconds(None, &seen), None);
    }
}
