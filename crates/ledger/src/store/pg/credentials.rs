//! The ledger's password, kept out of children's environments: a URL without it
//! ([`url_without_password`], what a child gets), and libpq's password file, where a hermes that
//! got such a URL finds it (`PGPASSFILE`, else `~/.pgpass`; libpq, "The Password File":
//! `hostname:port:database:username:password` lines, `*` matching anything, `\` escaping `:` and
//! `\`, the first match winning, and the file ignored unless only its owner may read it).

use std::path::{Path, PathBuf};

/// `url` with any password taken out: the user info's (`postgres://user:secret@host`) and a
/// `password=` query parameter. Anything that is not a PostgreSQL URL is returned as it is.
pub fn url_without_password(url: &str) -> String {
    if !super::is_postgres_url(url) {
        return url.to_owned();
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            format!("{user}@{hosts}")
        }
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let kept: Vec<&str> = query
                .split('&')
                .filter(|pair| !pair.is_empty() && !pair.starts_with("password="))
                .collect();
            if kept.is_empty() {
                path.to_owned()
            } else {
                format!("{path}?{}", kept.join("&"))
            }
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// What a password-file line is matched against.
#[derive(Debug)]
pub(super) struct Wanted<'a> {
    pub(super) host: &'a str,
    pub(super) port: u16,
    pub(super) database: &'a str,
    pub(super) user: &'a str,
}

/// The password file to read: `passfile` (`PGPASSFILE`) or `home/.pgpass`.
pub(super) fn passfile(passfile: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    match (passfile, home) {
        (Some(file), _) => Some(PathBuf::from(file)),
        (None, Some(home)) => Some(Path::new(home).join(".pgpass")),
        (None, None) => None,
    }
}

/// The password the file at `path` holds for `wanted`, if it exists, only its owner may read it
/// (as libpq requires; otherwise it is ignored, with a warning) and a line matches.
pub(super) fn lookup(path: &Path, wanted: &Wanted<'_>) -> Option<String> {
    use std::os::unix::fs::PermissionsExt as _;
    let metadata = std::fs::metadata(path).ok()?;
    if metadata.permissions().mode() & 0o077 != 0 {
        tracing::warn!(file = %path.display(), "the password file is readable by others: ignored (chmod 0600 it)");
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    find(&text, wanted)
}

/// The first line of `text` that matches `wanted`, its password.
pub(super) fn find(text: &str, wanted: &Wanted<'_>) -> Option<String> {
    let port = wanted.port.to_string();
    text.lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .filter_map(fields)
        .find(|f| {
            let matches = |field: &str, value: &str| field == "*" || field == value;
            // A Unix-socket connection matches `localhost`, as in libpq.
            let host = matches(&f[0], wanted.host)
                || (wanted.host.starts_with('/') && matches(&f[0], "localhost"));
            host && matches(&f[1], &port)
                && matches(&f[2], wanted.database)
                && matches(&f[3], wanted.user)
        })
        .map(|mut f| f.swap_remove(4))
}

/// The five fields of a line, `\` escaping the next character; `None` for a malformed line.
fn fields(line: &str) -> Option<Vec<String>> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut()?.push(chars.next()?),
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut()?.push(c),
        }
    }
    (fields.len() == 5).then_some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_loses_its_password_wherever_it_was_written() {
        assert_eq!(
            url_without_password("postgres://hermes:s3cr%40t@db:5432/h?sslmode=require"),
            "postgres://hermes@db:5432/h?sslmode=require"
        );
        assert_eq!(
            url_without_password("postgresql://u@db/h?password=x&sslmode=require"),
            "postgresql://u@db/h?sslmode=require"
        );
        assert_eq!(
            url_without_password("postgres://u@/h?password=x"),
            "postgres://u@/h"
        );
        assert_eq!(url_without_password("postgres://db/h"), "postgres://db/h");
        assert_eq!(url_without_password("/var/ledger.redb"), "/var/ledger.redb");
    }

    #[test]
    fn the_first_matching_line_wins_with_wildcards_escapes_and_comments() {
        let text = "# a comment\n\
                    other:5432:*:hermes:no\n\
                    db:*:ledger:hermes:p\\:w\\\\d\n\
                    *:*:*:*:fallback\n\
                    broken line\n";
        let want = |host, port, database, user| Wanted {
            host,
            port,
            database,
            user,
        };
        assert_eq!(
            find(text, &want("db", 6543, "ledger", "hermes")).as_deref(),
            Some("p:w\\d")
        );
        assert_eq!(
            find(text, &want("db", 5432, "other", "hermes")).as_deref(),
            Some("fallback")
        );
        assert_eq!(
            find(
                "localhost:5432:*:*:sock\n",
                &want("/run/postgresql", 5432, "d", "u")
            )
            .as_deref(),
            Some("sock"),
            "a socket connection matches localhost"
        );
        assert_eq!(
            find(
                "db:5432:ledger:hermes\n",
                &want("db", 5432, "ledger", "hermes")
            ),
            None
        );
    }

    #[test]
    fn a_file_others_may_read_is_ignored() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("pgpass");
        std::fs::write(&path, "*:*:*:*:secret\n").expect("writes");
        let want = Wanted {
            host: "h",
            port: 5432,
            database: "d",
            user: "u",
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert_eq!(lookup(&path, &want), None);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(lookup(&path, &want).as_deref(), Some("secret"));
        assert_eq!(lookup(&dir.path().join("missing"), &want), None);
    }
}
