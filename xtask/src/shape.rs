//! The shape of the workspace a newcomer relies on, checked like the crate boundaries (run by
//! `cargo xtask ci` and as a plain `#[test]`):
//!
//! - every package is named `hermes-…`;
//! - no product crate has the test cluster or the test-support crate as a normal dependency;
//! - no agent's name is spread over more than [`MAX_FILES_PER_AGENT`] source files;
//! - no function outside tests is longer than [`MAX_FN_LINES`] lines;
//! - `ARCHITECTURE.md` stays short ([`MAX_ARCHITECTURE_WORDS`]) and every path it names exists;
//! - no document or source file cites a document outside the repository.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;

/// What every package's name starts with.
const PREFIX: &str = "hermes";
/// Packages that exist for tests: no product crate may depend on them outside `[dev-dependencies]`.
const TEST_SUPPORT: [&str; 2] = ["hermes-pgcluster", "hermes-testkit"];
/// The directories under `crates/` of [`TEST_SUPPORT`].
const TEST_SUPPORT_DIRS: [&str; 2] = ["pgcluster", "testkit"];
/// Packages that are not part of the product (automation, tests, test support).
const NOT_PRODUCT: [&str; 4] = [
    "hermes-xtask",
    "hermes-tests",
    "hermes-pgcluster",
    "hermes-testkit",
];
/// The most files under `crates/*/src` that may name any one agent: its own file, the table,
/// and one more.
pub(crate) const MAX_FILES_PER_AGENT: usize = 3;
/// The longest a function outside tests may be, in lines from `fn` to its closing brace.
pub(crate) const MAX_FN_LINES: usize = 100;
/// The most words `ARCHITECTURE.md` may have: a bird's-eye view, not a manual.
pub(crate) const MAX_ARCHITECTURE_WORDS: usize = 2_500;
/// What a citation of a document outside the repository looks like in a document (the first
/// two also in a source file: code may well run a script it names by a path outside).
const OUTSIDE_CITATIONS: [&str; 4] = ["SPEC §", "SPEC.md", "../shared", "shared/STYLE"];

/// Every shape problem of the workspace at `root`, described by `metadata`
/// (`cargo metadata --format-version 1 --no-deps`).
pub(crate) fn problems(root: &Path, metadata: &Value) -> Result<Vec<String>> {
    let mut problems = package_problems(metadata);
    let sources = crate_sources(&root.join("crates"))?;
    let agents: Vec<&str> = hermes_agents::AGENTS.iter().map(|a| a.name).collect();
    // Test support drives the real agents by name (their model servers, their installs): only
    // the product's sources are held to one file per agent.
    let product: Vec<(PathBuf, String)> = sources
        .iter()
        .filter(|(path, _)| {
            !TEST_SUPPORT_DIRS
                .iter()
                .any(|dir| path.starts_with(root.join("crates").join(dir)))
        })
        .cloned()
        .collect();
    problems.extend(agent_spread(&product, &agents));
    for (path, text) in &sources {
        problems.extend(long_functions(path, text));
    }
    problems.extend(architecture(root)?);
    problems.extend(outside_citations(root)?);
    Ok(problems)
}

/// Package names, and test support kept out of the product's normal dependencies.
fn package_problems(metadata: &Value) -> Vec<String> {
    let members: Vec<&str> = metadata["workspace_members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut problems = Vec::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        if !package["id"]
            .as_str()
            .is_some_and(|id| members.contains(&id))
        {
            continue;
        }
        let name = package["name"].as_str().unwrap_or_default();
        if !name.starts_with(PREFIX) {
            problems.push(format!(
                "package {name} is not named {PREFIX}-…: every package carries the product's prefix"
            ));
        }
        if NOT_PRODUCT.contains(&name) {
            continue;
        }
        for dep in package["dependencies"].as_array().into_iter().flatten() {
            let dep_name = dep["name"].as_str().unwrap_or_default();
            let normal = dep["kind"].is_null();
            if normal && TEST_SUPPORT.contains(&dep_name) {
                problems.push(format!(
                    "{name} depends on {dep_name}, which exists for tests: make it a \
                     dev-dependency"
                ));
            }
        }
    }
    problems
}

/// Every `.rs` file under `crates/*/src`, with its text.
fn crate_sources(crates: &Path) -> Result<Vec<(PathBuf, String)>> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(crates) else {
        return Ok(out);
    };
    for entry in entries {
        let src = entry?.path().join("src");
        if src.is_dir() {
            out.extend(crate::boundaries::sources(&src)?);
        }
    }
    out.sort();
    Ok(out)
}

/// Agents (named in the table of `hermes-agents`) whose name appears as a word, in any case,
/// in more than [`MAX_FILES_PER_AGENT`] of `sources`.
fn agent_spread(sources: &[(PathBuf, String)], agents: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    for agent in agents {
        let files: Vec<&Path> = sources
            .iter()
            .filter(|(_, text)| names_word(&text.to_lowercase(), agent))
            .map(|(path, _)| path.as_path())
            .collect();
        if files.len() > MAX_FILES_PER_AGENT {
            let list: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
            problems.push(format!(
                "{} files name the agent {agent}, more than {MAX_FILES_PER_AGENT}: what hermes \
                 knows of an agent lives in its file of crates/agents ({})",
                files.len(),
                list.join(", ")
            ));
        }
    }
    problems
}

/// Whether `word` occurs in `text` with no letter or digit on either side (`CLAUDE_CONFIG_DIR`
/// names Claude; `claudette` does not).
fn names_word(text: &str, word: &str) -> bool {
    let is_word = |c: char| c.is_alphanumeric();
    text.match_indices(word).any(|(at, _)| {
        !text[..at].ends_with(is_word) && !text[at + word.len()..].starts_with(is_word)
    })
}

/// The functions of `text` (a source file at `path`) longer than [`MAX_FN_LINES`], outside its
/// inline test module. A file that is itself a test module (`tests.rs`) is skipped.
fn long_functions(path: &Path, text: &str) -> Vec<String> {
    if path.file_name().is_some_and(|n| n == "tests.rs") {
        return Vec::new();
    }
    let lines: Vec<&str> = text.lines().collect();
    let end = crate::boundaries::lines_before_tests(text);
    let mut problems = Vec::new();
    for (at, line) in lines[..end].iter().enumerate() {
        let Some(name) = fn_name(line) else { continue };
        let indent = &line[..line.len() - line.trim_start().len()];
        let closing = format!("{indent}}}");
        // A declaration without a body (a trait's) ends at its `;` before any `{`.
        let body = lines[at..end]
            .iter()
            .position(|l| l.trim_end().ends_with('{') || l.trim_end().ends_with(';'))
            .is_some_and(|p| lines[at + p].trim_end().ends_with('{'));
        if !body {
            continue;
        }
        if let Some(len) = lines[at..end].iter().position(|l| *l == closing)
            && len + 1 > MAX_FN_LINES
        {
            problems.push(format!(
                "{}:{} fn {name} is {} lines, more than {MAX_FN_LINES}: split it into \
                 named steps",
                path.display(),
                at + 1,
                len + 1
            ));
        }
    }
    problems
}

/// The name of the function `line` starts to define, if it does.
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    loop {
        let before = rest;
        for qualifier in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "const ",
            "async ",
            "unsafe ",
        ] {
            rest = rest.strip_prefix(qualifier).unwrap_or(rest);
        }
        if let Some(after) = rest.strip_prefix("extern \"C\" ") {
            rest = after;
        }
        if rest == before {
            break;
        }
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&rest[..end])
}

/// `ARCHITECTURE.md`: at most [`MAX_ARCHITECTURE_WORDS`] words, and every repository path it
/// names (`crates/…`, `xtask/…`, `tests/…`, `docs/…`, `.ci/…`) exists.
fn architecture(root: &Path) -> Result<Vec<String>> {
    let path = root.join("ARCHITECTURE.md");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut problems = Vec::new();
    let words = text.split_whitespace().count();
    if words > MAX_ARCHITECTURE_WORDS {
        problems.push(format!(
            "ARCHITECTURE.md has {words} words, more than {MAX_ARCHITECTURE_WORDS}: keep it a \
             bird's-eye view; file-level detail belongs in each file's //! header"
        ));
    }
    for named in repository_paths(&text) {
        if !path_exists(root, named) {
            problems.push(format!(
                "ARCHITECTURE.md names {named}, which does not exist"
            ));
        }
    }
    Ok(problems)
}

/// The repository paths `text` names in backticks.
fn repository_paths(text: &str) -> Vec<&str> {
    const ROOTS: [&str; 5] = ["crates/", "xtask/", "tests/", "docs/", ".ci/"];
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|code| code.split([' ', ':', '(']).next().unwrap_or_default())
        .filter(|code| ROOTS.iter().any(|r| code.starts_with(r)))
        .collect()
}

/// Whether `named` (a path relative to `root`, perhaps with `*` for one component) exists.
fn path_exists(root: &Path, named: &str) -> bool {
    let mut candidates = vec![root.to_owned()];
    for part in named.trim_end_matches('/').split('/') {
        let mut next = Vec::new();
        for dir in &candidates {
            if part == "*" {
                next.extend(
                    fs::read_dir(dir)
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(|e| e.path()),
                );
            } else if part.contains('*') {
                let (head, tail) = part.split_once('*').unwrap_or((part, ""));
                next.extend(
                    fs::read_dir(dir)
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(|e| e.path())
                        .filter(|p| {
                            p.file_name()
                                .and_then(|n| n.to_str())
                                .is_some_and(|n| n.starts_with(head) && n.ends_with(tail))
                        }),
                );
            } else {
                next.push(dir.join(part));
            }
        }
        candidates = next.into_iter().filter(|p| p.exists()).collect();
    }
    !candidates.is_empty()
}

/// Files (Markdown anywhere in the repository, Rust sources, manifests) that cite a document
/// outside the repository, which a reader of the repository cannot follow.
fn outside_citations(root: &Path) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
            let path = entry?.path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "node_modules" {
                    stack.push(path);
                }
                continue;
            }
            if !(name.ends_with(".md") || name.ends_with(".rs") || name.ends_with(".toml")) {
                continue;
            }
            // This file names the citations it looks for.
            if path.ends_with("xtask/src/shape.rs") {
                continue;
            }
            let text = fs::read_to_string(&path).unwrap_or_default();
            let needles = if name.ends_with(".md") {
                &OUTSIDE_CITATIONS[..]
            } else {
                &OUTSIDE_CITATIONS[..2]
            };
            if let Some(cited) = needles.iter().find(|c| text.contains(*c)) {
                problems.push(format!(
                    "{} cites {cited:?}, a document outside the repository: say it in the \
                     repository's own words",
                    path.display()
                ));
            }
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_long_function_is_found_and_a_test_module_is_not_counted() {
        let body = "    let x = 1;\n".repeat(MAX_FN_LINES);
        let text = format!(
            "pub(crate) fn short() {{\n}}\n\nasync fn long() {{\n{body}}}\n\n\
             trait T {{\n    fn declared(&self);\n}}\n\n\
             #[cfg(test)]\nmod tests {{\n    fn also_long() {{\n{body}    }}\n}}\n"
        );
        let found = long_functions(Path::new("src/x.rs"), &text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("fn long is 102 lines"), "{found:?}");
        assert!(long_functions(Path::new("src/tests.rs"), &text).is_empty());
    }

    #[test]
    fn an_agent_named_in_too_many_files_is_found_by_word() {
        let file = |n: u32, text: &str| (PathBuf::from(format!("f{n}.rs")), text.to_owned());
        let sources = vec![
            file(1, "Claude Code"),
            file(2, "claude"),
            file(3, "`claude -p`"),
            file(4, "CLAUDE_CONFIG_DIR"),
            file(5, "claudette and xclaude"),
        ];
        let found = agent_spread(&sources, &["claude"]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("4 files name the agent claude"),
            "{found:?}"
        );
        assert!(agent_spread(&sources[..3], &["claude"]).is_empty());
    }

    #[test]
    fn packages_need_the_prefix_and_test_support_stays_a_dev_dependency() {
        let metadata = json!({
            "workspace_members": ["a", "b", "c"],
            "packages": [
                {"id": "a", "name": "hermes-ledger", "dependencies": [
                    {"name": "hermes-pgcluster", "kind": null}]},
                {"id": "b", "name": "hermes-cli", "dependencies": [
                    {"name": "hermes-testkit", "kind": "dev"}]},
                {"id": "c", "name": "tools", "dependencies": []},
            ],
        });
        let found = package_problems(&metadata);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("hermes-ledger depends on hermes-pgcluster"));
        assert!(found[1].contains("package tools is not named hermes-"));
    }

    #[test]
    fn paths_named_by_the_architecture_page_are_found_with_globs() {
        let root = workspace_root();
        let text = "`crates/ledger/src/lib.rs`, `crates/*/src`, `xtask/src/shape.rs:12`, \
                    `crates/nothing/here.rs`, `cargo xtask ci`, `docs/`";
        let named = repository_paths(text);
        assert_eq!(named.len(), 5, "{named:?}");
        let missing: Vec<&str> = named
            .into_iter()
            .filter(|p| !path_exists(&root, p))
            .collect();
        assert_eq!(missing, ["crates/nothing/here.rs"]);
    }

    fn workspace_root() -> PathBuf {
        crate::boundaries::workspace_root()
    }
}
