//! JSON with comments, as some agents read their settings (stripping `//` and `/* */`
//! comments before parsing). A file with comments is read with its comments blanked out (so
//! every offset stays the same) and written back by splicing: only the values `hook install`
//! changed are replaced in the original text and new keys are added at the end of their
//! object, so the person's comments and the layout of their lines stay as they were.

use super::doc::Doc;

/// `text` with every comment replaced by spaces (line breaks kept), or `None` when it has
/// none. Offsets are unchanged.
pub fn blank_comments(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let (mut i, mut found, mut in_string) = (0, false, false);
    while i < bytes.len() {
        match (in_string, bytes[i], bytes.get(i + 1)) {
            (true, b'\\', _) => i += 1,
            (true, b'"', _) | (false, b'"', _) => in_string = !in_string,
            (false, b'/', Some(b'/')) => {
                found = true;
                while i < bytes.len() && bytes[i] != b'\n' {
                    out[i] = b' ';
                    i += 1;
                }
                continue;
            }
            (false, b'/', Some(b'*')) => {
                found = true;
                let end = text[i + 2..]
                    .find("*/")
                    .map_or(bytes.len(), |at| i + 2 + at + 2);
                for byte in &mut out[i..end] {
                    if *byte != b'\n' {
                        *byte = b' ';
                    }
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    // Only ASCII bytes outside strings were replaced, by ASCII: still UTF-8.
    found.then(|| String::from_utf8(out).expect("blanking keeps UTF-8"))
}

/// Where the members of an object are in a text (with comments blanked).
struct Object {
    /// Each member: its key, and its value's span.
    members: Vec<(String, Span)>,
    /// The offset of its closing brace.
    close: usize,
}

#[derive(Clone, Copy)]
struct Span {
    /// Where its key starts.
    key: usize,
    start: usize,
    end: usize,
}

/// `original` (the file's text) with `new` spliced in where it differs from `old` (what was
/// read): changed values replaced, new keys added, removed members cut out with their comma;
/// `None` when the change cannot be spliced, for the caller to write the whole document
/// instead.
pub fn splice(original: &str, blanked: &str, old: &Doc, new: &Doc) -> Option<String> {
    let start = skip_ws(blanked.as_bytes(), 0);
    let mut edits = Vec::new();
    edit_object(original, blanked, start, old, new, &mut edits)?;
    let mut text = original.to_owned();
    edits.sort_by_key(|(at, _, _)| std::cmp::Reverse(*at));
    for (start, end, with) in edits {
        text.replace_range(start..end, &with);
    }
    Some(text)
}

fn edit_object(
    original: &str,
    blanked: &str,
    at: usize,
    old: &Doc,
    new: &Doc,
    edits: &mut Vec<(usize, usize, String)>,
) -> Option<()> {
    let (Doc::Object(old_members), Doc::Object(new_members)) = (old, new) else {
        return None;
    };
    let object = parse_object(blanked.as_bytes(), at)?;
    if old_members.len() != object.members.len() {
        return None;
    }
    remove_members(
        original,
        blanked,
        &object,
        |key| !new_members.iter().any(|(n, _)| n == key),
        edits,
    );
    let member_indent = object.members.last().map_or_else(
        || indent_at(original, at) + "  ",
        |(_, s)| indent_at(original, s.start),
    );
    let mut added = String::new();
    for (key, value) in new_members {
        let before = old.get(key);
        match object.members.iter().find(|(k, _)| k == key) {
            Some((_, span)) if before != Some(value) => {
                let nested = matches!((before, value), (Some(Doc::Object(_)), Doc::Object(_)))
                    && blanked.as_bytes()[span.start] == b'{';
                let spliced = nested
                    .then(|| {
                        let before = before.expect("an object");
                        edit_object(original, blanked, span.start, before, value, edits)
                    })
                    .flatten();
                if spliced.is_none() {
                    let indent = indent_at(original, span.start);
                    edits.push((span.start, span.end, render(value, &indent)?));
                }
            }
            Some(_) => {}
            None => {
                let key = serde_json::to_string(key).ok()?;
                let value = render(value, &member_indent)?;
                added.push_str(&format!(",\n{member_indent}{key}: {value}"));
            }
        }
    }
    if !added.is_empty() {
        match object.members.last() {
            Some((_, last)) => edits.push((last.end, last.end, added)),
            None => {
                let outer = indent_at(original, at);
                let inner = format!("\n{}\n{outer}", &added[2..]);
                edits.push((object.close, object.close, inner));
            }
        }
    }
    Some(())
}

/// Cuts the members of `object` that `gone` names out of the text. One after a kept member goes
/// with the comma before it and its own line, leaving a comment after that comma where it was;
/// those before the first kept member go from the first's key to the kept key; all of them,
/// when none is kept.
fn remove_members(
    original: &str,
    blanked: &str,
    object: &Object,
    gone: impl Fn(&str) -> bool,
    edits: &mut Vec<(usize, usize, String)>,
) {
    let members = &object.members;
    let Some(first_kept) = members.iter().position(|(k, _)| !gone(k)) else {
        if let (Some((_, first)), Some((_, last))) = (members.first(), members.last()) {
            edits.push((first.key, last.end, String::new()));
        }
        return;
    };
    if first_kept > 0 {
        edits.push((members[0].1.key, members[first_kept].1.key, String::new()));
    }
    for i in first_kept + 1..members.len() {
        let (previous, span) = (members[i - 1].1, members[i].1);
        if !gone(&members[i].0) {
            continue;
        }
        if let Some(comma) = blanked[previous.end..span.key].find(',') {
            let comma = previous.end + comma;
            edits.push((comma, comma + 1, String::new()));
        }
        // From the line break before its key when nothing but indentation stands between.
        let start = match original[..span.key].rfind('\n') {
            Some(nl) if nl >= previous.end && original[nl + 1..span.key].trim().is_empty() => nl,
            _ => span.key,
        };
        edits.push((start, span.end, String::new()));
    }
}

/// `value` as pretty JSON whose lines after the first are indented by `indent`.
fn render(value: &Doc, indent: &str) -> Option<String> {
    let text = serde_json::to_string_pretty(value).ok()?;
    Some(text.replace('\n', &format!("\n{indent}")))
}

/// The whitespace that starts the line holding `at`.
fn indent_at(text: &str, at: usize) -> String {
    let line = text[..at].rfind('\n').map_or(0, |n| n + 1);
    text[line..]
        .chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .collect()
}

fn skip_ws(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The object starting at `at` (its `{`).
fn parse_object(bytes: &[u8], at: usize) -> Option<Object> {
    if bytes.get(at) != Some(&b'{') {
        return None;
    }
    let mut members = Vec::new();
    let mut i = skip_ws(bytes, at + 1);
    loop {
        match bytes.get(i)? {
            b'}' => return Some(Object { members, close: i }),
            b',' => i = skip_ws(bytes, i + 1),
            b'"' => {
                let key_start = i;
                let key_end = value_end(bytes, i)?;
                let key: String = serde_json::from_slice(&bytes[i..key_end]).ok()?;
                i = skip_ws(bytes, key_end);
                if bytes.get(i) != Some(&b':') {
                    return None;
                }
                let start = skip_ws(bytes, i + 1);
                let end = value_end(bytes, start)?;
                members.push((
                    key,
                    Span {
                        key: key_start,
                        start,
                        end,
                    },
                ));
                i = skip_ws(bytes, end);
            }
            _ => return None,
        }
    }
}

/// The end of the value starting at `at`.
fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' => {
            let mut i = at + 1;
            loop {
                match bytes.get(i)? {
                    b'\\' => i += 2,
                    b'"' => return Some(i + 1),
                    _ => i += 1,
                }
            }
        }
        b'{' | b'[' => {
            let (mut depth, mut i) = (0usize, at);
            loop {
                match bytes.get(i)? {
                    b'"' => {
                        i = value_end(bytes, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let mut i = at;
            while i < bytes.len() && !matches!(bytes[i], b',' | b'}' | b']') {
                i += 1;
            }
            // A literal ends at its last non-blank byte.
            while i > at && bytes[i - 1].is_ascii_whitespace() {
                i -= 1;
            }
            Some(i)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Doc {
        serde_json::from_str(text).expect("JSON")
    }

    #[test]
    fn comments_are_blanked_where_they_are_and_strings_are_left_alone() {
        let text =
            "{\n  // a note\n  \"a\": \"x // not a comment /* nor this */\", /* b */ \"b\": 1\n}";
        let blanked = blank_comments(text).expect("it has comments");
        assert_eq!(blanked.len(), text.len());
        assert!(!blanked.contains("a note") && !blanked.contains("/* b */"));
        assert!(blanked.contains("x // not a comment /* nor this */"));
        let parsed: Doc = serde_json::from_str(&blanked).expect("JSON once blanked");
        assert_eq!(
            parsed,
            doc(r#"{"a": "x // not a comment /* nor this */", "b": 1}"#)
        );
        assert_eq!(blank_comments("{\"a\": \"//\"}"), None);
    }

    #[test]
    fn a_splice_changes_only_what_changed_and_keeps_every_comment() {
        let text = "{\n  // who I am\n  \"ui\": {\"theme\": \"GitHub\"}, /* keep */\n  \"hooks\": {\n    \"AfterTool\": [] // mine\n  }\n}\n";
        let blanked = blank_comments(text).expect("comments");
        let old: Doc = serde_json::from_str(&blanked).expect("JSON");
        let new = doc(
            r#"{"ui": {"theme": "GitHub"}, "hooks": {"AfterTool": [1], "BeforeTool": {"x": 2}}, "mcpServers": {}}"#,
        );
        let spliced = splice(text, &blanked, &old, &new).expect("spliced");
        for kept in [
            "  // who I am\n",
            "\"ui\": {\"theme\": \"GitHub\"}, /* keep */\n",
            " // mine\n",
        ] {
            assert!(spliced.contains(kept), "{kept:?} lost:\n{spliced}");
        }
        let reread: Doc =
            serde_json::from_str(&blank_comments(&spliced).expect("comments")).expect("JSON");
        assert_eq!(reread, new, "{spliced}");
    }

    #[test]
    fn removed_members_are_cut_out_with_their_comma_and_the_comments_stay() {
        let text = "{\n  // who I am\n  \"ui\": {\"theme\": \"GitHub\"}, /* keep */\n  \"hooks\": {\n    \"AfterTool\": [], // mine\n    \"BeforeTool\": [1]\n  },\n  \"mcpServers\": {\"hermes\": {}}\n}\n";
        let blanked = blank_comments(text).expect("comments");
        let old: Doc = serde_json::from_str(&blanked).expect("JSON");
        for (new, kept) in [
            // The last member, and a nested one.
            (
                r#"{"ui": {"theme": "GitHub"}, "hooks": {"AfterTool": []}}"#,
                &[
                    "  // who I am\n",
                    "/* keep */",
                    "\"AfterTool\": [] // mine\n  }\n}\n",
                ][..],
            ),
            // The first member: the next one's key is where the object now starts.
            (
                r#"{"hooks": {"AfterTool": [], "BeforeTool": [1]}, "mcpServers": {"hermes": {}}}"#,
                &["  // who I am\n", " // mine\n"][..],
            ),
            // Every member of a nested object.
            (
                r#"{"ui": {"theme": "GitHub"}, "hooks": {}, "mcpServers": {"hermes": {}}}"#,
                &["  // who I am\n", "/* keep */"][..],
            ),
        ] {
            let new = doc(new);
            let spliced = splice(text, &blanked, &old, &new).expect("spliced");
            for kept in kept {
                assert!(spliced.contains(kept), "{kept:?} lost:\n{spliced}");
            }
            let reread: Doc =
                serde_json::from_str(&blank_comments(&spliced).expect("comments")).expect("JSON");
            assert_eq!(reread, new, "{spliced}");
        }
    }

    #[test]
    fn an_empty_object_gets_its_first_members() {
        let text = "{ /* nothing yet */ }";
        let blanked = blank_comments(text).expect("comments");
        let old = doc("{}");
        let new = doc(r#"{"a": {"b": true}}"#);
        let spliced = splice(text, &blanked, &old, &new).expect("spliced");
        assert!(
            spliced.starts_with("{ /* nothing yet */ \n  \"a\": {\n"),
            "{spliced}"
        );
        let reread: Doc =
            serde_json::from_str(&blank_comments(&spliced).expect("comments")).expect("JSON");
        assert_eq!(reread, new);
    }
}
