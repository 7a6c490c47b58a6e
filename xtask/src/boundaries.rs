//! The crate boundaries (ARCHITECTURE's code map and invariants), checked from `cargo metadata`
//! and the sources (and run as a plain `#[test]`, so `cargo test` enforces them too).
//!
//! The workspace's packages are found, not listed: a crate added under `crates/` is checked from
//! its first build. Dependencies are read as cargo resolves them, so a renamed dependency
//! (`pg = { package = "postgres" }`), a workspace-inherited one and a target-specific one are all
//! seen under their real names.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// Storage engines and the crates that reach one (clients, their protocol and TLS layers): only
/// [`STORAGE_OWNER`] may depend on them, so both ledger backends stay behind its API.
const STORAGE_CRATES: [&str; 10] = [
    "redb",
    "postgres",
    "tokio-postgres",
    "postgres-types",
    "postgres-protocol",
    "rustls",
    "tokio-postgres-rustls",
    "postgres-native-tls",
    "native-tls",
    "postgres-openssl",
];
/// The one package that talks to storage.
const STORAGE_OWNER: &str = "hermes-ledger";
/// Argument parsing, terminal UI and application errors: only [`UI_OWNER`] among the crates under
/// `crates/` may depend on them.
const UI_CRATES: [&str; 6] = [
    "clap",
    "indicatif",
    "rustyline",
    "anyhow",
    "ratatui",
    "crossterm",
];
/// The one crate with a user interface.
const UI_OWNER: &str = "hermes-cli";
/// Crates that read no clock, no environment and do no I/O: no tokio, and none of
/// [`FORBIDDEN_IO`] in their sources.
const PURE_CRATES: [&str; 4] = [
    "hermes-router",
    "hermes-formatter",
    "hermes-settings",
    "hermes-agents",
];
/// The router's thin driver (`driver.rs` and its parts under `driver/`) is the one place in a
/// pure crate allowed to call the ledger and sleep.
const PURE_EXCEPTION: (&str, &str) = ("hermes-router", "driver");
/// What a pure crate's sources must not name (grouped imports such as `use std::{env, fs}` are
/// expanded first).
const FORBIDDEN_IO: [&str; 11] = [
    "std::env",
    "std::fs",
    "std::net",
    "std::process",
    "SystemTime::now",
    "Instant::now",
    "std::io::stdin",
    "std::io::stdout",
    "std::io::stderr",
    "println!",
    "eprintln!",
];
/// The top-level modules of the ledger's `src/` (files `x.rs` or folders `x/`) that are not
/// operation modules: the crate root, the façade and its group commit, errors, the codec, the
/// pure rules, the layers below the operations (`txn/`, `store/`, `model/`) and test-only
/// modules. Every other top-level module is an operation module (a file of `impl Ledger`
/// methods), so a new one is checked from the day it is added.
const LEDGER_NOT_OPERATIONS: [&str; 13] = [
    "lib",
    "ledger",
    "group",
    "observe",
    "error",
    "codec",
    "rules",
    "txn",
    "store",
    "model",
    "agree",
    "power_loss",
    "testing",
];
/// The ledger's in-transaction layer: below every operation module, above `rules`, `model` and
/// `store`.
const LEDGER_TXN: &str = "txn";
/// What the ledger's pure rules (`rules.rs`) may import from their crate: types only.
const RULES_IMPORT: &str = "crate::model";
/// The package that holds these rules (and so names every forbidden crate in its text).
const RULES_PACKAGE: &str = "hermes-xtask";
/// The crate below all others (time, locking, one-line text): it depends on no workspace crate.
const BOTTOM_CRATE: &str = "hermes-stdx";
/// The most lines a source file under `crates/*/src` may have before its inline test module.
const MAX_LINES: usize = 600;

/// The workspace root (the parent of `xtask/`).
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_owned)
}

/// The build's target directory: `CARGO_TARGET_DIR`, or the workspace's `target/`.
pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from)
}

/// Checks every boundary of the workspace at `root`; the error lists every violation.
pub(crate) fn check(root: &Path) -> Result<()> {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let metadata: Value =
        serde_json::from_slice(&out.stdout).context("parsing cargo metadata's output")?;
    let boundaries = check_metadata(&metadata);
    let shape = crate::shape::problems(root, &metadata)?;
    if !shape.is_empty() {
        let before = boundaries
            .err()
            .map(|e| format!("{e}\n"))
            .unwrap_or_default();
        bail!(
            "{before}workspace shape violated:\n  {}",
            shape.join("\n  ")
        );
    }
    boundaries
}

/// A workspace member, as `cargo metadata` describes it.
#[derive(Debug)]
struct Package {
    name: String,
    /// The directory of its `Cargo.toml`.
    dir: PathBuf,
    /// Every dependency (normal, dev, build; any target) by its package name, with the name the
    /// crate uses for it when renamed.
    deps: Vec<(String, Option<String>)>,
}

impl Package {
    fn depends_on(&self, name: &str) -> Option<String> {
        self.deps
            .iter()
            .find(|(dep, _)| dep == name)
            .map(|(_, rename)| {
                rename
                    .as_ref()
                    .map_or_else(|| name.to_owned(), |r| format!("{name} (as `{r}`)"))
            })
    }
}

/// The workspace root and members in `cargo metadata --format-version 1` output.
fn members(metadata: &Value) -> Result<(PathBuf, Vec<Package>)> {
    let root = metadata["workspace_root"]
        .as_str()
        .context("cargo metadata gave no workspace_root")?;
    let ids: Vec<&str> = metadata["workspace_members"]
        .as_array()
        .context("cargo metadata gave no workspace_members")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let mut packages = Vec::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        if !package["id"].as_str().is_some_and(|id| ids.contains(&id)) {
            continue;
        }
        let name = package["name"]
            .as_str()
            .context("a package without a name in cargo metadata")?;
        let manifest = package["manifest_path"]
            .as_str()
            .with_context(|| format!("package {name} has no manifest_path"))?;
        let deps = package["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|dep| {
                let rename = dep["rename"].as_str().map(str::to_owned);
                Some((dep["name"].as_str()?.to_owned(), rename))
            })
            .collect();
        packages.push(Package {
            name: name.to_owned(),
            dir: Path::new(manifest)
                .parent()
                .map_or_else(|| PathBuf::from("."), Path::to_owned),
            deps,
        });
    }
    Ok((PathBuf::from(root), packages))
}

/// Checks every boundary of the workspace `metadata` describes.
fn check_metadata(metadata: &Value) -> Result<()> {
    let (root, packages) = members(metadata)?;
    let crates_dir = root.join("crates");
    let mut problems = Vec::new();

    // A rule about a crate that is not there checks nothing: say so.
    for name in PURE_CRATES
        .iter()
        .chain(&[STORAGE_OWNER, UI_OWNER, BOTTOM_CRATE])
    {
        if !packages.iter().any(|p| p.name == *name) {
            problems.push(format!(
                "no workspace package is named {name}; the rules that name it check nothing \
                 (update xtask/src/boundaries.rs)"
            ));
        }
    }

    for package in &packages {
        let krate = package.name.as_str();
        if krate != STORAGE_OWNER {
            for storage in STORAGE_CRATES {
                if let Some(dep) = package.depends_on(storage) {
                    problems.push(format!(
                        "{krate} depends on {dep}; only {STORAGE_OWNER} may"
                    ));
                }
            }
        }
        if package.dir.starts_with(&crates_dir) && krate != UI_OWNER {
            for ui in UI_CRATES {
                if let Some(dep) = package.depends_on(ui) {
                    problems.push(format!("{krate} depends on {dep}; only {UI_OWNER} may"));
                }
            }
        }
        if PURE_CRATES.contains(&krate) {
            if let Some(dep) = package.depends_on("tokio") {
                problems.push(format!("{krate} depends on {dep}; it must do no I/O"));
            }
            let exception = package.dir.join("src").join(PURE_EXCEPTION.1);
            for (path, text) in sources(&package.dir.join("src"))? {
                if krate == PURE_EXCEPTION.0
                    && (path.starts_with(&exception) || path == exception.with_extension("rs"))
                {
                    continue;
                }
                let expanded = expand_std_groups(&text);
                for needle in FORBIDDEN_IO {
                    if text.contains(needle) || expanded.iter().any(|p| p.starts_with(needle)) {
                        problems.push(format!(
                            "{} uses {needle}; {krate} does no I/O",
                            path.display()
                        ));
                    }
                }
            }
        }
        if krate == BOTTOM_CRATE {
            for other in &packages {
                if other.name != krate && package.depends_on(&other.name).is_some() {
                    problems.push(format!(
                        "{krate} depends on {}; it sits below every workspace crate",
                        other.name
                    ));
                }
            }
        }
        if package.dir.starts_with(&crates_dir) {
            problems.extend(long_files(&package.dir.join("src"))?);
        }
        // Only the ledger names a storage crate in code (`redb::` anywhere, so a re-export such
        // as `hermes_ledger::redb::…` counts; the others as path roots, since `hermes_ledger::postgres` may
        // well be the ledger's own module).
        if krate != STORAGE_OWNER && krate != RULES_PACKAGE {
            for (path, text) in sources(&package.dir)? {
                for storage in STORAGE_CRATES {
                    let ident = storage.replace('-', "_");
                    let named = if ident == "redb" {
                        text.contains("redb::")
                    } else {
                        names_crate_root(&text, &ident)
                    };
                    if named {
                        problems.push(format!(
                            "{} names {ident}; only {STORAGE_OWNER} may",
                            path.display()
                        ));
                    }
                }
            }
        }
    }
    if let Some(ledger) = packages.iter().find(|p| p.name == STORAGE_OWNER) {
        problems.extend(ledger_layers(&ledger.dir.join("src"))?);
    }
    if !problems.is_empty() {
        bail!("crate boundaries violated:\n  {}", problems.join("\n  "));
    }
    Ok(())
}

/// The layers inside the ledger: an operation module imports no other operation module, the
/// in-transaction layer (`txn/`) and the store (`store/`) import none at all, and `rules.rs`
/// imports nothing of its crate but `model`. Imports go one way: operations → `txn` →
/// (`rules`, `model`, `store`).
fn ledger_layers(src: &Path) -> Result<Vec<String>> {
    let read = |path: &Path| {
        fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    };
    let mut problems = Vec::new();
    // A ledger without these files (the fake workspaces of the tests below) has no layers to
    // check.
    if !src.join("store").is_dir() || !src.join("rules.rs").is_file() {
        return Ok(problems);
    }
    // Every top-level module not listed as something else is an operation module, found.
    let mut operations = Vec::new();
    for entry in fs::read_dir(src).with_context(|| format!("listing {}", src.display()))? {
        let path = entry?.path();
        let name = match path.file_stem().and_then(|n| n.to_str()) {
            Some(name) if path.is_dir() || path.extension().is_some_and(|e| e == "rs") => name,
            _ => continue,
        };
        if !LEDGER_NOT_OPERATIONS.contains(&name) {
            operations.push(name.to_owned());
        }
    }
    operations.sort();
    let imports = |text: &str, op: &str| {
        let module = format!("crate::{op}");
        crate_paths(text)
            .iter()
            .any(|p| p == &module || p.starts_with(&format!("{module}::")))
    };
    for (layer, why) in [
        ("store", "the store never imports an operation module"),
        (
            LEDGER_TXN,
            "txn/ sits below the operations and imports none",
        ),
    ] {
        if !src.join(layer).is_dir() {
            continue;
        }
        for (path, text) in sources(&src.join(layer))? {
            for op in operations.iter().filter(|op| imports(&text, op)) {
                problems.push(format!("{} imports crate::{op}; {why}", path.display()));
            }
        }
    }
    for own in &operations {
        let file = src.join(format!("{own}.rs"));
        let mut files = if file.is_file() {
            vec![(file.clone(), read(&file)?)]
        } else {
            Vec::new()
        };
        if src.join(own).is_dir() {
            files.extend(sources(&src.join(own))?);
        }
        for (path, text) in files {
            for op in operations
                .iter()
                .filter(|op| *op != own && imports(&text, op))
            {
                problems.push(format!(
                    "{} imports crate::{op}; an operation module imports no other operation \
                     module (move what both need into {LEDGER_TXN}/)",
                    path.display()
                ));
            }
        }
    }
    let rules = src.join("rules.rs");
    let text = read(&rules)?;
    for name in crate_paths(&text) {
        if name != RULES_IMPORT && !name.starts_with(&format!("{RULES_IMPORT}::")) {
            problems.push(format!(
                "{} uses {name}; rules.rs imports only {RULES_IMPORT}",
                rules.display()
            ));
        }
    }
    Ok(problems)
}

/// Every path into the crate that `text` names (`crate::x::y`), grouped imports expanded
/// (`use crate::{a, b::c}` gives `crate::a` and `crate::b::c`).
fn crate_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("crate::") {
        // `xcrate::` is another name.
        if text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &text[at + "crate::".len()..];
        if rest.starts_with('{') {
            if let Some(group) = group_at(rest) {
                expand("crate::", group, &mut out);
            }
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        out.push(format!("crate::{}", name.trim_end_matches(':')));
    }
    out
}

/// The files under `src` (a crate's sources) with more than [`MAX_LINES`] lines before their
/// inline test module.
fn long_files(src: &Path) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    for (path, text) in sources(src)? {
        let lines = lines_before_tests(&text);
        if lines > MAX_LINES {
            problems.push(format!(
                "{} has {lines} lines before its tests, more than {MAX_LINES}: split it by \
                 purpose",
                path.display()
            ));
        }
    }
    Ok(problems)
}

/// The lines of `text` before its inline test module (a `#[cfg(test)]` on a `mod`), or all
/// of them.
pub(crate) fn lines_before_tests(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .iter()
        .enumerate()
        .position(|(at, line)| {
            line.trim() == "#[cfg(test)]"
                && lines[at + 1..]
                    .iter()
                    .map(|l| l.trim())
                    .find(|l| !l.is_empty() && !l.starts_with("//"))
                    .is_some_and(|next| next.starts_with("mod ") || next.starts_with("pub mod "))
        })
        .unwrap_or(lines.len())
}

/// Every `.rs` file under `dir` (not under a `target` directory), with its text.
pub(crate) fn sources(dir: &Path) -> Result<Vec<(PathBuf, String)>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "target") {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                out.push((path, text));
            }
        }
    }
    Ok(out)
}

/// Whether `text` uses `ident::` as the root of a path (`ident::x`, `::ident::x`), not as a
/// segment inside one (`hermes_ledger::ident::x`) or the tail of a longer name (`tokio_ident::x`).
fn names_crate_root(text: &str, ident: &str) -> bool {
    let needle = format!("{ident}::");
    text.match_indices(&needle).any(|(at, _)| {
        // Before `x::ident::` (a segment) or `xident::` (a longer name) stands a name.
        !text[..at]
            .trim_end_matches("::")
            .ends_with(|c: char| c.is_alphanumeric() || c == '_')
    })
}

/// The paths of every `std::{…}` group in `text`, nested groups included:
/// `use std::{env, io::{stdin, Write}};` gives `std::env`, `std::io::stdin`, `std::io::Write`.
fn expand_std_groups(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("std::{") {
        if let Some(group) = group_at(&text[at + "std::".len()..]) {
            expand("std::", group, &mut out);
        }
    }
    out
}

/// The inside of the `{…}` group `text` opens with, if it closes.
fn group_at(text: &str) -> Option<&str> {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(&text[1..i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// Adds `prefix` + each item of the group body `body` to `out`, expanding nested groups.
fn expand(prefix: &str, body: &str, out: &mut Vec<String>) {
    let mut depth = 0usize;
    let mut start = 0;
    let mut items = Vec::new();
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&body[start..]);
    for item in items.into_iter().map(str::trim).filter(|i| !i.is_empty()) {
        match item.find("::{") {
            Some(at) => {
                if let Some(group) = group_at(&item[at + 2..]) {
                    expand(&format!("{prefix}{}::", &item[..at]), group, out);
                }
            }
            None => out.push(format!("{prefix}{item}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn crate_boundaries_hold() {
        check(&workspace_root()).unwrap();
    }

    /// A dependency: its package name, the name it is renamed to, its kind (`None` is normal).
    type Dep = (&'static str, Option<&'static str>, Option<&'static str>);

    /// Fake `cargo metadata` output for crates under `root/crates/`, each `(name, deps, lib.rs)`
    /// where a dep is `(package, rename, kind)`; the sources are written too.
    fn workspace(root: &Path, crates: &[(&str, &[Dep], &str)]) -> Value {
        let mut packages = Vec::new();
        let mut ids = Vec::new();
        for (name, deps, code) in crates {
            let dir = root.join("crates").join(name);
            fs::create_dir_all(dir.join("src")).unwrap();
            fs::write(dir.join("src/lib.rs"), code).unwrap();
            let id = format!("path+file://{}#0.1.0", dir.display());
            let deps: Vec<Value> = deps
                .iter()
                .map(|(dep, rename, kind)| json!({"name": dep, "rename": rename, "kind": kind}))
                .collect();
            packages.push(json!({
                "id": id,
                "name": name,
                "manifest_path": dir.join("Cargo.toml"),
                "dependencies": deps,
            }));
            ids.push(id);
        }
        json!({"packages": packages, "workspace_members": ids, "workspace_root": root})
    }

    const CLEAN: &str = "use std::{fmt, io::Write};\nuse hermes_ledger::postgres::Config;\n";

    #[test]
    fn a_clean_fake_workspace_passes() {
        let dir = tempfile::tempdir().unwrap();
        let metadata = workspace(
            dir.path(),
            &[
                (
                    "hermes-ledger",
                    &[("redb", None, None), ("postgres", None, None)],
                    "use redb::Database;",
                ),
                (
                    "hermes-cli",
                    &[("clap", None, None), ("hermes-ledger", None, None)],
                    CLEAN,
                ),
                ("hermes-router", &[("hermes-ledger", None, None)], CLEAN),
                ("hermes-formatter", &[], CLEAN),
                ("hermes-settings", &[], CLEAN),
                ("hermes-agents", &[], CLEAN),
                ("hermes-stdx", &[], CLEAN),
            ],
        );
        check_metadata(&metadata).unwrap();
    }

    #[test]
    fn violations_are_reported_in_crates_found_from_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let metadata = workspace(
            dir.path(),
            &[
                ("hermes-ledger", &[("redb", None, None)], ""),
                ("hermes-cli", &[], "fn f(_: postgres::Client) {}"),
                ("hermes-router", &[("redb", None, Some("dev"))], ""),
                (
                    "hermes-formatter",
                    &[],
                    "use std::{fmt, io::{stdout, Write}};",
                ),
                (
                    "hermes-settings",
                    &[("tokio", None, None)],
                    "use std::{env as e};",
                ),
                ("hermes-stdx", &[("hermes-ledger", None, None)], ""),
                ("hermes-agents", &[], "fn f() { std::process::exit(1) }"),
                // Not named anywhere in the rules: found because it is a member.
                (
                    "newcrate",
                    &[("tokio-postgres", Some("pg"), None), ("clap", None, None)],
                    "",
                ),
            ],
        );
        let err = check_metadata(&metadata).unwrap_err().to_string();
        for expected in [
            "newcrate depends on tokio-postgres (as `pg`); only hermes-ledger may",
            "newcrate depends on clap; only hermes-cli may",
            "hermes-router depends on redb; only hermes-ledger may",
            "hermes-settings depends on tokio; it must do no I/O",
            "uses std::io::stdout; hermes-formatter does no I/O",
            "uses std::env; hermes-settings does no I/O",
            "names postgres; only hermes-ledger may",
            "hermes-stdx depends on hermes-ledger; it sits below every workspace crate",
            "uses std::process; hermes-agents does no I/O",
        ] {
            assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
        }
        assert_eq!(err.lines().count(), 10, "{err}");
    }

    #[test]
    fn a_missing_crate_that_a_rule_names_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let metadata = workspace(
            dir.path(),
            &[("hermes-ledger", &[], ""), ("hermes-cli", &[], "")],
        );
        let err = check_metadata(&metadata).unwrap_err().to_string();
        assert!(
            err.contains("no workspace package is named hermes-router"),
            "{err}"
        );
    }

    #[test]
    fn a_crate_is_named_only_as_a_path_root() {
        assert!(names_crate_root(
            "let c = postgres::Client::new();",
            "postgres"
        ));
        assert!(names_crate_root("use ::postgres::Client;", "postgres"));
        assert!(!names_crate_root(
            "use hermes_ledger::postgres::Config;",
            "postgres"
        ));
        assert!(!names_crate_root("use tokio_postgres::Client;", "postgres"));
        assert!(!names_crate_root("let url = \"postgres://x\";", "postgres"));
    }

    /// A fake ledger `src/` with a store, the rules, the in-transaction layer and two operation
    /// modules, each importing only what it may.
    fn fake_ledger(src: &Path) {
        fs::create_dir_all(src.join("store/pg")).expect("mkdir");
        fs::create_dir_all(src.join("txn")).expect("mkdir");
        fs::create_dir_all(src.join("model")).expect("mkdir");
        for (file, text) in [
            (
                "lib.rs",
                "mod events;\nmod units;\nmod txn;\npub use units::Admission;\n",
            ),
            ("ledger.rs", "use crate::group::GroupCommit;\n"),
            ("rules.rs", "use crate::model::Event;\n"),
            ("store/pg/read.rs", "use crate::model::Event;\n"),
            (
                "txn/publish.rs",
                "use crate::{model::Event, rules, store::Writer};\n",
            ),
            (
                "events.rs",
                "use crate::txn::publish::{Owner, publish_in};\n",
            ),
            (
                "units.rs",
                "use crate::{ledger::Ledger, txn::publish::Owner};\n",
            ),
        ] {
            fs::write(src.join(file), text).expect("write");
        }
    }

    #[test]
    fn the_ledgers_store_and_rules_keep_to_their_layers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = dir.path();
        fake_ledger(src);
        assert!(ledger_layers(src).expect("reads").is_empty());
        fs::write(src.join("store/pg/read.rs"), "use crate::units::Owner;\n").expect("write");
        fs::write(src.join("rules.rs"), "use crate::events::Claim;\n").expect("write");
        let problems = ledger_layers(src).expect("reads");
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("crate::units"), "{problems:?}");
        assert!(problems[1].contains("crate::events"), "{problems:?}");
    }

    #[test]
    fn grouped_crate_imports_are_seen_by_the_layer_checks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = dir.path();
        fake_ledger(src);
        fs::write(src.join("recovery.rs"), "").expect("write");
        fs::write(
            src.join("rules.rs"),
            "use crate::{model::Event, units::Owner};\nuse crate::model;\n",
        )
        .expect("write");
        fs::write(
            src.join("store/mod.rs"),
            "use crate::{model::Event, recovery::{self, Sweep}};\nuse crate::eventsx::Y;\n",
        )
        .expect("write");
        let problems = ledger_layers(src).expect("reads");
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("crate::recovery"), "{problems:?}");
        assert!(problems[1].contains("crate::units::Owner"), "{problems:?}");
    }

    #[test]
    fn an_operation_module_imports_no_other_and_txn_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = dir.path();
        fake_ledger(src);
        // An operation module added since the check was written is found, as a file and as a
        // folder; listed modules (`ledger.rs`, `txn/`) are not operation modules.
        fs::write(src.join("fresh.rs"), "use crate::ledger::Ledger;\n").expect("write");
        fs::create_dir_all(src.join("folded")).expect("mkdir");
        fs::write(src.join("folded/mod.rs"), "").expect("write");
        assert!(ledger_layers(src).expect("reads").is_empty());
        fs::write(
            src.join("units.rs"),
            "use crate::{events::publish_in, txn::publish::Owner};\n",
        )
        .expect("write");
        fs::write(src.join("folded/part.rs"), "fn f() { crate::fresh::g() }\n").expect("write");
        fs::write(src.join("txn/publish.rs"), "use crate::units::Owner;\n").expect("write");
        let mut problems = ledger_layers(src).expect("reads");
        problems.sort();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems[0].contains("folded/part.rs imports crate::fresh; an operation module"),
            "{problems:?}"
        );
        assert!(
            problems[1].contains("txn/publish.rs imports crate::units; txn/"),
            "{problems:?}"
        );
        assert!(
            problems[2].contains("units.rs imports crate::events; an operation module"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_long_file_is_reported_but_not_one_whose_tests_are_long() {
        let dir = tempfile::tempdir().expect("tempdir");
        let src = dir.path().join("ledger/src");
        fs::create_dir_all(&src).expect("mkdir");
        let long = "fn f() {}\n".repeat(MAX_LINES + 1);
        let short_with_long_tests = format!(
            "fn f() {{}}\n#[cfg(test)]\n// tests\nmod tests {{\n{}}}\n",
            "fn g() {}\n".repeat(MAX_LINES)
        );
        fs::write(src.join("long.rs"), &long).expect("write");
        fs::write(src.join("short.rs"), &short_with_long_tests).expect("write");
        let problems = long_files(&src).expect("reads");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("long.rs has 601 lines"),
            "{problems:?}"
        );
        assert_eq!(lines_before_tests(&short_with_long_tests), 1);
    }

    #[test]
    fn grouped_std_imports_are_expanded() {
        assert_eq!(
            expand_std_groups("use std::{env, io::{stdin, Write}, fs as f};"),
            [
                "std::env",
                "std::io::stdin",
                "std::io::Write",
                "std::fs as f"
            ]
        );
    }
}
