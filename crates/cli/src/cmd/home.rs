//! `hermes home [migrate]`: where the home is and why, and moving a home an older hermes made in
//! `~/.hermes` — upstream Hermes Agent's home too — to the default, `~/.local/share/hermes`.
//!
//! Only hermes' own entries move (`MOVED`, and hermes' files inside the `cache/` and `logs/`
//! directories both projects keep); upstream's files stay where they are. Nothing moves while
//! the old home has work in flight (a host, a running or queued unit, a result not yet
//! delivered): their transcripts and worktrees are named by path in the ledger.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::args::{HomeArgs, HomeCommand};
use crate::services::config::{self, HomeSource, LEGACY_DIR_NAME};
use crate::services::exit::{Code, fail};
use crate::services::home::{Home, env_var};
use crate::services::hook_files::plugin;
use crate::services::output::{print, print_json};

/// hermes' own top-level entries of a home, moved whole. The ledger and the settings go last:
/// they are what marks a home (`config::holds_a_home`), so a move that stopped half-way leaves
/// the old home in use, and running the command again finishes it.
const MOVED: [&str; 6] = [
    "history",
    "agents",
    "run",
    "workspaces",
    "config.toml",
    "ledger.redb",
];

/// hermes' entries inside the directories both projects keep (`cache/`, `logs/`): a name, or a
/// prefix ending in `*`.
const MOVED_INSIDE: [(&str, &[&str]); 2] = [
    ("cache", &["delegation", "last-sweep", "host-*"]),
    ("logs", &["hermes.log*"]),
];

pub fn run(args: HomeArgs) -> anyhow::Result<Code> {
    let (dir, source) = config::home_source(&env_var)?;
    match args.command {
        None => {
            if args.json {
                print_json(&json!({"home": dir, "source": source.as_str()}))?;
            } else {
                let why = match source {
                    HomeSource::Variable => "from HERMES_HOME",
                    HomeSource::Default => "the default",
                    HomeSource::Legacy => "made by an older hermes; `hermes home migrate` moves it",
                };
                print(&format!("{} ({why})\n", dir.display()))?;
            }
            Ok(Code::Ok)
        }
        Some(HomeCommand::Migrate { json }) => migrate(&dir, source, json),
    }
}

fn migrate(old: &Path, source: HomeSource, json: bool) -> anyhow::Result<Code> {
    match source {
        HomeSource::Variable => {
            return Err(fail(
                Code::Usage,
                format!(
                    "HERMES_HOME is set ({}): that home stays where it is; unset it to migrate ~/{LEGACY_DIR_NAME}",
                    old.display()
                ),
            ));
        }
        HomeSource::Default => {
            let text = format!("nothing to migrate: the home is {}\n", old.display());
            return report(json, old, old, &[], &[], &text);
        }
        HomeSource::Legacy => {}
    }
    let user = env_var("HOME").unwrap_or_default();
    let new = config::default_home(Path::new(&user), env_var("XDG_DATA_HOME"));
    refuse_while_busy(old)?;
    refuse_kept_worktrees(old)?;
    std::fs::create_dir_all(&new).map_err(|e| {
        fail(
            Code::WorkFailed,
            format!("cannot create {}: {e}", new.display()),
        )
    })?;
    let mut moved = Vec::new();
    for (from, to) in entries(old, &new) {
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::rename(&from, &to).map_err(|e| {
            fail(
                Code::WorkFailed,
                format!(
                    "cannot move {} to {}: {e}{}; moved so far: {}",
                    from.display(),
                    to.display(),
                    if e.raw_os_error() == Some(libc::EXDEV) {
                        " (another filesystem: move the home by hand, or set HERMES_HOME)"
                    } else {
                        ""
                    },
                    if moved.is_empty() {
                        "nothing".to_owned()
                    } else {
                        moved.join(", ")
                    }
                ),
            )
        })?;
        moved.push(
            from.strip_prefix(old)
                .unwrap_or(&from)
                .display()
                .to_string(),
        );
    }
    for shared in MOVED_INSIDE.map(|(dir, _)| old.join(dir)) {
        // Empty now that hermes' files are gone: it was hermes' alone.
        let _ = std::fs::remove_dir(shared);
    }
    let _ = std::fs::remove_dir(old);
    // An agent whose home is this directory and whose integration names the old home for
    // hermes' MCP server: installing it again names the new one.
    let stale: Vec<&str> = hermes_agents::AGENTS
        .iter()
        .filter(|agent| plugin::is_plugin(agent))
        .filter(|agent| {
            let (file, _) = plugin::paths(&agent.install, old);
            std::fs::read_to_string(file)
                .is_ok_and(|text| text.contains(&old.display().to_string()))
        })
        .map(|agent| agent.name)
        .collect();
    let mut text = format!(
        "moved {} entries of the hermes home from {} to {}\n",
        moved.len(),
        old.display(),
        new.display()
    );
    for agent in &stale {
        text.push_str(&format!(
            "note: {agent}'s settings still name the old home: run `hermes hook install {agent}` again\n"
        ));
    }
    report(json, old, &new, &moved, &stale, &text)
}

/// Refuses while the old home has work in flight, naming it.
fn refuse_while_busy(old: &Path) -> anyhow::Result<()> {
    let home = Home::load()?;
    debug_assert_eq!(home.dir, old);
    let ledger = home.open_ledger_and_sweep()?;
    let sessions = ledger.sessions()?;
    let hosts = sessions.iter().filter(|s| s.host_pid.is_some()).count();
    let (running, queued, pending) = sessions.iter().fold((0, 0, 0), |(r, q, p), s| {
        (r + s.running, q + s.queued, p + s.pending)
    });
    let busy: Vec<String> = [
        (hosts, "session host", "session hosts"),
        (running, "unit running", "units running"),
        (queued, "unit queued", "units queued"),
        (
            pending,
            "result not yet delivered",
            "results not yet delivered",
        ),
    ]
    .into_iter()
    .filter(|(n, _, _)| *n > 0)
    .map(|(n, one, many)| format!("{n} {}", if n == 1 { one } else { many }))
    .collect();
    if !busy.is_empty() {
        return Err(fail(
            Code::WorkFailed,
            format!(
                "not moved: the home {} has work in flight ({}; see `hermes session list`); migrate once it is done",
                old.display(),
                busy.join(", ")
            ),
        ));
    }
    Ok(())
}

/// Git knows each worktree by its absolute path, so none may move: the spares kept for reuse
/// are removed (the next child makes a fresh one), and a child's worktree still kept refuses
/// the move.
fn refuse_kept_worktrees(old: &Path) -> anyhow::Result<()> {
    let root = old.join("workspaces");
    hermes_registry::workspace::clear_spares(&root);
    let kept: Vec<String> = std::fs::read_dir(&root)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != "branches" && name != "spare")
        .collect();
    if kept.is_empty() {
        return Ok(());
    }
    Err(fail(
        Code::WorkFailed,
        format!(
            "not moved: {} worktree(s) of children are still kept under {} ({}); migrate once their results are delivered or dropped",
            kept.len(),
            root.display(),
            kept.join(", ")
        ),
    ))
}

/// The `(from, to)` pairs that move: hermes' entries of `old` that exist, the ledger and the
/// settings last.
fn entries(old: &Path, new: &Path) -> Vec<(PathBuf, PathBuf)> {
    let whole = |names: &[&str]| -> Vec<(PathBuf, PathBuf)> {
        names
            .iter()
            .map(|name| (old.join(name), new.join(name)))
            .filter(|(from, _)| from.symlink_metadata().is_ok())
            .collect()
    };
    let (first, marks) = MOVED.split_at(MOVED.len() - 2);
    let mut pairs = whole(first);
    for (dir, patterns) in MOVED_INSIDE {
        let Ok(listing) = std::fs::read_dir(old.join(dir)) else {
            continue;
        };
        let mut inside: Vec<(PathBuf, PathBuf)> = listing
            .filter_map(Result::ok)
            .filter(|entry| {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                patterns.iter().any(|p| match p.strip_suffix('*') {
                    Some(prefix) => name.starts_with(prefix),
                    None => name == *p,
                })
            })
            .map(|entry| (entry.path(), new.join(dir).join(entry.file_name())))
            .collect();
        inside.sort();
        pairs.extend(inside);
    }
    pairs.extend(whole(marks));
    pairs
}

fn report(
    json: bool,
    from: &Path,
    to: &Path,
    moved: &[String],
    stale: &[&str],
    text: &str,
) -> anyhow::Result<Code> {
    if json {
        print_json(&json!({
            "from": from,
            "home": to,
            "moved": moved,
            "reinstall": stale,
        }))?;
    } else {
        print(text)?;
    }
    Ok(Code::Ok)
}
