//! The library's rule, checked over its sources: a front-end (`cmd`, `hook`, `interactive`,
//! `mcp`, `top`) never names another front-end, and `services` names none. Only the dispatcher (`app.rs`) and the crate root name them all.

use std::path::{Path, PathBuf};

/// The front-ends: each a folder under `src/`.
const FRONT_ENDS: [&str; 5] = ["cmd", "hook", "interactive", "mcp", "top"];

/// Every `.rs` file under `dir`, with its text.
fn rust_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                found.push((path, text));
            }
        }
    }
    found
}

/// The first segment of every path `text` starts from the crate root (`crate::x::…`,
/// `crate::{x, y::…}`).
fn crate_roots(text: &str) -> Vec<&str> {
    let mut roots = Vec::new();
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                roots.extend(group.split(',').map(|p| ident(p.trim())));
            }
            None => roots.push(ident(rest)),
        }
    }
    roots
}

/// The identifier `s` starts with.
fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Which front-end or layer a file under `src/` belongs to: its first folder.
fn layer(relative: &Path) -> Option<&str> {
    let mut parts = relative.components();
    let first = parts.next()?.as_os_str().to_str()?;
    parts.next().is_some().then_some(first)
}

#[test]
fn no_front_end_names_another_and_the_services_name_none() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut problems = Vec::new();
    for (path, text) in rust_files(&src) {
        let relative = path.strip_prefix(&src).expect("under src/");
        let Some(owner) = layer(relative) else {
            continue; // lib.rs, main.rs, app.rs, args.rs, this file
        };
        for root in crate_roots(&text) {
            if FRONT_ENDS.contains(&root) && root != owner {
                problems.push(format!("{} names crate::{root}", relative.display()));
            }
        }
    }
    problems.sort();
    problems.dedup();
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_check_finds_grouped_and_plain_paths() {
    assert_eq!(
        crate_roots("use crate::{cmd, top::x};\nlet y = crate::hook::run();"),
        ["cmd", "top", "hook"]
    );
    assert_eq!(layer(Path::new("mcp/tools.rs")), Some("mcp"));
    assert_eq!(layer(Path::new("app.rs")), None);
}
