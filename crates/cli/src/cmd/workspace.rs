//! `hermes workspace list|clean`: the branches hermes made for `--workspace worktree` children
//! and kept (recorded under `$HERMES_HOME/workspaces/branches/`). Only those are listed or
//! deleted; any other branch, `hermes/…` or not, is never touched.

use std::time::Duration;

use hermes_registry::workspace::{self, BranchRecord, BranchState};
use serde_json::{Value, json};

use crate::args::WorkspaceCommand;
use crate::services::exit::{Code, fail};
use crate::services::home::{Home, now};
use crate::services::output::{print, print_json};

pub fn run(command: WorkspaceCommand) -> anyhow::Result<Code> {
    let home = Home::load()?;
    let root = home.registry().workspace_root;
    let now = (now().0 / 1000) as i64;
    match command {
        WorkspaceCommand::List { json } => {
            let found: Vec<Value> = workspace::records(&root)
                .iter()
                .map(|(_, entry)| entry_json(entry, &workspace::state(entry), now))
                .collect();
            if json {
                print_json(&json!({ "branches": found }))?;
            } else {
                print(&list_text(&found))?;
            }
        }
        WorkspaceCommand::Clean {
            merged,
            older_than,
            json,
        } => {
            let older = older_than.as_deref().map(parse_age).transpose()?;
            let mut removed = Vec::new();
            let mut failed = Vec::new();
            for (file, entry) in workspace::records(&root) {
                let state = workspace::state(&entry);
                if !cleanable(&state, merged, older, now) {
                    continue;
                }
                match workspace::delete(&file, &entry) {
                    Ok(()) => removed.push(entry.branch),
                    Err(e) => {
                        failed.push(json!({ "branch": entry.branch, "error": e.to_string() }))
                    }
                }
            }
            // The spare worktrees kept for reuse go too: they hold nothing of anyone's.
            let spares = workspace::clear_spares(&root);
            if json {
                print_json(
                    &json!({ "removed": removed, "failed": failed, "spares_removed": spares }),
                )?;
            } else {
                let mut text = format!(
                    "Removed {} {}.",
                    removed.len(),
                    if removed.len() == 1 {
                        "branch"
                    } else {
                        "branches"
                    }
                );
                for branch in &removed {
                    text.push_str(&format!("\n  {branch}"));
                }
                if spares > 0 {
                    text.push_str(&format!(
                        "\nRemoved {spares} spare {} kept for reuse.",
                        if spares == 1 { "worktree" } else { "worktrees" }
                    ));
                }
                for f in &failed {
                    text.push_str(&format!("\nKept {}: {}", f["branch"], f["error"]));
                }
                print(&text)?;
            }
            if !failed.is_empty() {
                return Ok(Code::WorkFailed);
            }
        }
    }
    Ok(Code::Ok)
}

/// Whether a recorded branch goes, given `--merged` and `--older-than`. A branch gone already
/// is forgotten whatever the filters.
fn cleanable(state: &BranchState, merged: bool, older: Option<Duration>, now: i64) -> bool {
    if !state.exists {
        return true;
    }
    let old_enough = match (older, state.committed_at) {
        (None, _) => true,
        (Some(age), Some(at)) => now.saturating_sub(at) >= age.as_secs() as i64,
        (Some(_), None) => false,
    };
    (!merged || state.merged) && old_enough
}

fn entry_json(entry: &BranchRecord, state: &BranchState, now: i64) -> Value {
    json!({
        "branch": entry.branch,
        "repository": entry.repository,
        "base": entry.base,
        "head": entry.head,
        "commits": entry.commits,
        "exists": state.exists,
        "merged": state.merged,
        "age_seconds": state.committed_at.map(|at| now.saturating_sub(at).max(0)),
    })
}

fn list_text(found: &[Value]) -> String {
    if found.is_empty() {
        return "No branches made by hermes.".to_owned();
    }
    let rows: Vec<[String; 4]> = found
        .iter()
        .map(|b| {
            let merged = match (b["exists"].as_bool(), b["merged"].as_bool()) {
                (Some(false), _) => "gone",
                (_, Some(true)) => "yes",
                _ => "no",
            };
            [
                b["branch"].as_str().unwrap_or_default().to_owned(),
                b["commits"].to_string(),
                merged.to_owned(),
                b["repository"].as_str().unwrap_or_default().to_owned(),
            ]
        })
        .collect();
    let header = ["BRANCH", "COMMITS", "MERGED", "REPOSITORY"].map(str::to_owned);
    let widths: Vec<usize> = (0..3)
        .map(|c| {
            std::iter::once(&header)
                .chain(&rows)
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |r: &[String; 4]| {
        format!(
            "{:w0$}  {:w1$}  {:w2$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        )
    };
    let mut text = line(&header);
    for row in &rows {
        text.push('\n');
        text.push_str(&line(row));
    }
    text
}

/// `90s`, `30m`, `12h`, `7d`, `2w` (a bare number is seconds).
fn parse_age(raw: &str) -> anyhow::Result<Duration> {
    let raw = raw.trim();
    let (digits, unit) = raw.split_at(raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len()));
    let n: u64 = digits.parse().map_err(|_| bad_age(raw))?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(bad_age(raw)),
    };
    Ok(Duration::from_secs(n.saturating_mul(scale)))
}

fn bad_age(raw: &str) -> anyhow::Error {
    fail(
        Code::Usage,
        format!("--older-than {raw}: expected an age such as 90s, 30m, 12h, 7d or 2w"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_a_table_whose_columns_line_up() {
        let found = [
            json!({"branch": "hermes/deleg_000000000001-0", "commits": 1, "exists": true,
                   "merged": false, "repository": "/r"}),
            json!({"branch": "hermes/deleg_000000000002-12", "commits": 10, "exists": false,
                   "merged": null, "repository": "/r"}),
        ];
        assert_eq!(
            list_text(&found),
            "BRANCH                        COMMITS  MERGED  REPOSITORY\n\
             hermes/deleg_000000000001-0   1        no      /r\n\
             hermes/deleg_000000000002-12  10       gone    /r"
        );
    }

    #[test]
    fn ages_are_read() {
        assert_eq!(parse_age("7d").expect("age"), Duration::from_secs(604_800));
        assert_eq!(parse_age("90").expect("age"), Duration::from_secs(90));
        assert!(parse_age("7 days").is_err() && parse_age("d").is_err());
    }

    #[test]
    fn filters_apply_together_and_gone_branches_are_forgotten() {
        let state = |exists, merged, at| BranchState {
            exists,
            merged,
            committed_at: Some(at),
        };
        let day = Some(Duration::from_secs(86_400));
        assert!(cleanable(&state(true, true, 0), true, None, 10));
        assert!(!cleanable(&state(true, false, 0), true, None, 10));
        assert!(!cleanable(&state(true, true, 0), true, day, 10));
        assert!(cleanable(&state(true, true, 0), true, day, 100_000));
        assert!(cleanable(&state(false, false, 0), true, day, 10));
    }
}
