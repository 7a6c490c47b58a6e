//! Text for one-line messages.

/// `text` on one line: every run of whitespace, line breaks included, becomes one space, and
/// the ends are trimmed.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breaks_and_runs_of_space_become_one_space() {
        assert_eq!(
            one_line("  connection\n  refused:\tretry  "),
            "connection refused: retry"
        );
        assert_eq!(one_line(""), "");
    }
}
