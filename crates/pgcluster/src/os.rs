//! What a cluster needs from the machine: the server's binaries, who runs it, a free port, a
//! random password, and running a command with its failure said on one line.

use std::fmt::Write as _;
use std::fs;
use std::io::Read as _;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::process::{Command, Output};

use crate::error::{Context, Result, bail};
use crate::{DEBIAN_BINARIES, ROLE};

/// The newest `/usr/lib/postgresql/<version>/bin` with an `initdb`.
pub(crate) fn server_binaries() -> Result<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = fs::read_dir(DEBIAN_BINARIES)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    match found.pop() {
        Some((_, bin)) => Ok(bin),
        None => bail!(
            "PostgreSQL server binaries not found (no {DEBIAN_BINARIES}/*/bin/initdb); \
             `.ci/run` installs Debian's postgresql package"
        ),
    }
}

pub(crate) fn is_root() -> Result<bool> {
    Ok(fs::metadata("/proc/self")
        .context("reading /proc/self to learn who runs xtask")?
        .uid()
        == 0)
}

/// The uid and gid of `user`.
pub(crate) fn user_ids(user: &str) -> Result<(u32, u32)> {
    let id = |flag: &str| -> Result<u32> {
        let out = Command::new("id").args([flag, user]).output()?;
        if !out.status.success() {
            bail!(
                "xtask runs as root and the server must not, but there is no `{user}` user to \
                 run it as (Debian's postgresql package creates it)"
            );
        }
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .with_context(|| format!("`id {flag} {user}` printed no number"))
    };
    Ok((id("-u")?, id("-g")?))
}

/// The name of the user `uid`.
pub(crate) fn user_name(uid: u32) -> Result<String> {
    let out = Command::new("id")
        .args(["-nu", &uid.to_string()])
        .output()
        .context("running id")?;
    if !out.status.success() {
        bail!("no user has uid {uid}");
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A port on 127.0.0.1 that was free a moment ago.
pub(crate) fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("looking for a free port")?;
    Ok(listener.local_addr()?.port())
}

/// `bytes` random bytes from the kernel, in hex (safe in a URL as is).
pub(crate) fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0; bytes];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .context("reading /dev/urandom for the password")?;
    Ok(buf.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    }))
}

/// The password and port of a URL `url()` made.
pub(crate) fn parse_url(url: &str) -> Option<(String, u16)> {
    let rest = url.strip_prefix(&format!("postgres://{ROLE}:"))?;
    let (password, rest) = rest.split_once("@127.0.0.1:")?;
    let (port, _) = rest.split_once('/')?;
    Some((password.to_owned(), port.parse().ok()?))
}

/// The output of a command that must succeed, or an error with what it printed.
pub(crate) fn checked(what: &str, out: std::io::Result<Output>) -> Result<Output> {
    let out = out.with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out)
}

/// The last `n` lines of `text`.
pub(crate) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
