//! `hermes hook install NAME` and `hermes hook uninstall NAME`, for every agent whose files
//! hermes merges into (the plugin agent has its own): the committed files are created as the
//! user's other files are (0644, directories 0755 under the usual mask), a second install says
//! nothing changed and writes nothing, and an uninstall takes out only hermes' entries: the
//! user's files come back byte for byte, and what hermes created goes.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use hermes_agents::{AGENTS, Agent, Hooks};

use crate::common::Hermes;

/// The agents `hook install` merges files for.
fn merged_agents() -> impl Iterator<Item = &'static Agent> {
    AGENTS
        .iter()
        .copied()
        .filter(|a| !matches!(a.install.hooks, Hooks::Plugin { .. }))
}

/// `hermes hook VERB AGENT [--user]` in `project`, with `home` as `$HOME`, under the usual
/// file mask (`022`).
fn hook(h: &Hermes, verb: &str, agent: &str, project: &Path, home: &Path, user: bool) -> String {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!(
            "umask 022; exec \"$HERMES\" hook {verb} {agent} {}",
            if user { "--user" } else { "" }
        ))
        .env("HERMES", env!("CARGO_BIN_EXE_hermes"));
    h.environment(&mut c);
    let out = c
        .current_dir(project)
        .env("HOME", home)
        .output()
        .expect("hermes runs");
    assert!(
        out.status.success(),
        "hook {verb} {agent}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every file and directory under `root`, with its mode and (for a file) its bytes.
fn tree(root: &Path) -> BTreeMap<PathBuf, (u32, Option<Vec<u8>>)> {
    let mut found = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the directory") {
            let path = entry.expect("an entry").path();
            let meta = std::fs::metadata(&path).expect("metadata");
            let mode = meta.permissions().mode() & 0o777;
            let rel = path.strip_prefix(root).expect("under the root").to_owned();
            if meta.is_dir() {
                found.insert(rel, (mode, None));
                stack.push(path);
            } else {
                found.insert(rel, (mode, Some(std::fs::read(&path).expect("read"))));
            }
        }
    }
    found
}

/// A file of the user's where hermes writes `path`: the same format, something of theirs in it.
fn users_own(path: &Path) -> Option<String> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("json") => {
            Some("{\n  \"mine\": {\n    \"keep\": [\n      1,\n      2\n    ]\n  }\n}\n".to_owned())
        }
        Some("toml") => Some(
            "# my settings\nmodel = \"mine\"\n\n[mcp_servers.docs]\ncommand = \"docs\"\n"
                .to_owned(),
        ),
        _ => None,
    }
}

/// Installs and uninstalls `agent` at one level (the project, or the home with `user`) of a
/// fresh machine, first into nothing, then over files of the user's.
fn round_trip(agent: &Agent, user: bool) {
    let h = Hermes::new();
    let project = tempfile::tempdir().expect("project");
    let home = tempfile::tempdir().expect("home");
    let root = if user { home.path() } else { project.path() };
    let name = agent.name;

    // Into nothing: everything hermes wrote goes again.
    let said = hook(&h, "install", name, project.path(), home.path(), user);
    assert!(said.starts_with("registered"), "{name}: {said}");
    let written = tree(root);
    assert!(!written.is_empty(), "{name} wrote nothing");
    for (path, (mode, bytes)) in &written {
        let executable = matches!(agent.install.hooks, Hooks::Scripts { .. })
            && bytes.is_some()
            && path.extension().is_none();
        let want = match (bytes, user, executable) {
            (None, false, _) | (Some(_), _, true) => 0o755,
            (Some(_), false, false) => 0o644,
            (None, true, _) => 0o700,
            (Some(_), true, false) => 0o600,
        };
        assert_eq!(*mode, want, "{name}: {} is {mode:o}", path.display());
    }
    let again = hook(&h, "install", name, project.path(), home.path(), user);
    assert!(again.starts_with("unchanged"), "{name}: {again}");
    assert_eq!(
        tree(root),
        written,
        "{name}: a second install changed files"
    );
    let said = hook(&h, "uninstall", name, project.path(), home.path(), user);
    assert!(said.starts_with("removed"), "{name}: {said}");
    assert!(tree(root).is_empty(), "{name} left {:?}", tree(root));
    let said = hook(&h, "uninstall", name, project.path(), home.path(), user);
    assert!(said.starts_with("unchanged"), "{name}: {said}");

    // Over the user's own files (and a script of theirs beside hermes' scripts): back byte for
    // byte, modes included.
    for path in written.keys() {
        let full = root.join(path);
        if let Some(text) = users_own(path) {
            std::fs::create_dir_all(full.parent().expect("a parent")).expect("mkdir");
            std::fs::write(&full, text).expect("write the user's file");
            std::fs::set_permissions(&full, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        }
    }
    if let Hooks::Scripts { dir, .. } = &agent.install.hooks {
        let parts = if user {
            dir.user.unwrap_or(dir.project)
        } else {
            dir.project
        };
        let dir = parts.iter().fold(root.to_owned(), |p, part| p.join(part));
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("mine.sh"), "#!/bin/sh\necho mine\n").expect("a script");
    }
    let before = tree(root);
    hook(&h, "install", name, project.path(), home.path(), user);
    let with = tree(root);
    assert_ne!(with, before, "{name}: install wrote nothing");
    for (path, (mode, _)) in &before {
        assert_eq!(
            with[path].0,
            *mode,
            "{name}: {} changed its mode",
            path.display()
        );
    }
    hook(&h, "uninstall", name, project.path(), home.path(), user);
    assert_eq!(
        tree(root),
        before,
        "{name}: the user's files did not come back"
    );
}

#[test]
fn every_agents_project_files_come_and_go_leaving_the_users_as_they_were() {
    for agent in merged_agents() {
        round_trip(agent, false);
    }
}

#[test]
fn every_agents_user_files_come_and_go_leaving_the_users_as_they_were() {
    for agent in merged_agents().filter(|a| {
        // An agent with no user-level file writes the project's even with `--user`.
        let (server, hooks) = (&a.install.server, &a.install.hooks);
        let server_user = match server {
            hermes_agents::Server::Json { file, .. }
            | hermes_agents::Server::Toml { file, .. }
            | hermes_agents::Server::Yaml { file } => file.user.is_some(),
        };
        let hooks_user = match hooks {
            Hooks::Json { file, .. } => file.user.is_some(),
            Hooks::Scripts { dir, .. } | Hooks::Plugin { dir, .. } => dir.user.is_some(),
        };
        server_user && hooks_user
    }) {
        round_trip(agent, true);
    }
}
