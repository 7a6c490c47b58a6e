//! A hook's delivery through its session's headless host.
//!
//! A hook is a process of its own: delivering by itself costs it the ledger's writable open
//! and close (on redb, six of the ten `fdatasync`s a delivering hook made) on top of the claim
//! and the ack. The session's headless host has the ledger open already, so it offers the hooks
//! of its session a Unix socket, `HOME/run/<hash of the session>.sock`, and does the claim and
//! the ack for them, through the same [`consume::present`] protocol as everywhere else:
//!
//! 1. the hook sends one JSON line, `{"sessions": [...], "boundary", "consumer", "budget"}`;
//! 2. the host claims what is ready and answers `{"nothing": true}`, `{"text": "..."}` (the
//!    fitted block, its claims kept alive from now on), or `{"unavailable": "why"}`;
//! 3. the hook prints the text as its agent's answer and says `{"shown": true}` (or
//!    `false`, or goes away: the host then gives every claim back, no attempt counted);
//! 4. the host acknowledges what was shown in one commit and answers `{"acked": N}` or
//!    `{"error": "why"}`; the hook exits 0 only after `acked`.
//!
//! Whenever the host cannot be reached, or answers anything but `nothing` or `text` before the
//! hook printed, the hook delivers by itself as before: the socket is a shortcut, never the
//! only way. A host that dies with claims out leaves them to expire and be offered again.

use std::io::BufReader;
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use hermes_formatter::Boundary;
use hermes_ledger::{Ledger, SessionId};
use serde::{Deserialize, Serialize};

use crate::services::delivery::consume;

/// How long a hook waits for the host to connect and to claim.
const CLAIM_DEADLINE: Duration = Duration::from_secs(5);
/// How long a hook waits for the acknowledgement of what it printed.
const ACK_DEADLINE: Duration = Duration::from_secs(20);
/// How long the host waits for a hook's request, and for it to print.
const HOOK_DEADLINE: Duration = Duration::from_secs(10);
/// The longest path a Unix socket address holds (`sun_path`, less its terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// What a hook asks its session's host for.
#[derive(Serialize, Deserialize)]
struct Request {
    sessions: Vec<String>,
    boundary: Boundary,
    consumer: String,
    budget: usize,
    /// How the hook's agent names `delegation_result` (absent from an older hermes' hook).
    #[serde(default = "plain_result_tool")]
    result_tool: String,
}

fn plain_result_tool() -> String {
    consume::PLAIN_RESULT_TOOL.to_owned()
}

/// The host's answers, in order: what was claimed, then whether it was acknowledged.
#[derive(Serialize, Deserialize, Default)]
struct Answer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    nothing: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unavailable: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    acked: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The hook's word on the text it was given.
#[derive(Serialize, Deserialize)]
struct Shown {
    shown: bool,
}

/// The socket of `session`'s host under the hermes home `dir`; `None` when the path would not
/// fit in a socket address.
pub fn socket_path(dir: &Path, session: &SessionId) -> Option<PathBuf> {
    let path = dir.join("run").join(format!(
        "{:016x}.sock",
        hermes_stdx::fnv1a(session.as_str().as_bytes())
    ));
    (path.as_os_str().len() <= MAX_SOCKET_PATH).then_some(path)
}

/// A host's socket, removed when dropped.
pub struct Relay {
    path: PathBuf,
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Starts serving the hooks of `session` (whose host this process is) on its socket. The
/// caller logs a failure and goes on: hooks then deliver by themselves.
pub fn serve(
    dir: &Path,
    session: &SessionId,
    ledger: Arc<Ledger>,
    settings: Arc<hermes_settings::Settings>,
) -> anyhow::Result<Relay> {
    let path = socket_path(dir, session).context("the socket path is too long")?;
    let run = path.parent().context("the socket has no folder")?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(run)
        .with_context(|| format!("cannot create {}", run.display()))?;
    // This process holds the session's host claim: a socket left there is a dead host's.
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)
        .with_context(|| format!("cannot listen on {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot make {} private", path.display()))?;
    std::thread::Builder::new()
        .name("relay".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (ledger, settings) = (Arc::clone(&ledger), Arc::clone(&settings));
                let spawned = std::thread::Builder::new()
                    .name("relay-hook".into())
                    .spawn(move || {
                        if let Err(e) = answer(stream, &ledger, &settings) {
                            tracing::debug!(error = %format!("{e:#}"), "a hook's delivery through the host ended early");
                        }
                    });
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "cannot serve a hook");
                }
            }
        })
        .context("cannot start the relay thread")?;
    Ok(Relay { path })
}

/// Serves one hook: claims, hands the text over, acknowledges what it printed.
fn answer(
    stream: UnixStream,
    ledger: &Arc<Ledger>,
    settings: &hermes_settings::Settings,
) -> anyhow::Result<()> {
    stream.set_read_timeout(Some(HOOK_DEADLINE))?;
    stream.set_write_timeout(Some(HOOK_DEADLINE))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    let request: Request = read_line(&mut reader)?;
    let sessions = request
        .sessions
        .iter()
        .map(|s| SessionId::new(s.clone()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("{e}"));
    let taken = sessions.and_then(|sessions| {
        consume::take_conversation(
            ledger,
            &sessions,
            request.boundary,
            &request.consumer,
            settings,
        )
        .map_err(anyhow::Error::from)
    });
    let taken = match taken {
        Ok(Some(t)) if !t.claimed.is_empty() => t,
        Ok(_) => {
            return write_line(
                &mut writer,
                &Answer {
                    nothing: true,
                    ..Answer::default()
                },
            );
        }
        Err(e) => {
            let why = format!("{e:#}");
            return write_line(
                &mut writer,
                &Answer {
                    unavailable: Some(why),
                    ..Answer::default()
                },
            );
        }
    };
    let presented = consume::present(
        &taken.router,
        taken.claimed,
        request.boundary,
        consume::Reader {
            budget: request.budget,
            result_tool: &request.result_tool,
        },
        |text| {
            write_line(
                &mut writer,
                &Answer {
                    text: Some(text.to_owned()),
                    ..Answer::default()
                },
            )?;
            let shown: Shown = read_line(&mut reader)?;
            if !shown.shown {
                bail!("the hook could not print it");
            }
            Ok(())
        },
    );
    let last = match presented {
        Ok(n) => Answer {
            acked: Some(n),
            ..Answer::default()
        },
        Err(e) => Answer {
            error: Some(format!("{e:#}")),
            ..Answer::default()
        },
    };
    write_line(&mut writer, &last)
}

/// What a hook's delivery through its host came to.
pub enum Outcome {
    /// Nothing was printed: deliver without the host.
    Unavailable,
    /// The host had nothing ready.
    Nothing,
    /// This many envelopes were printed and acknowledged.
    Shown(usize),
}

/// Asks the host of `sessions[0]` to deliver for this hook; `show` prints the text. An error
/// means something was printed but not acknowledged: the hook must fail (its agent then drops
/// what it printed, and the result is offered again).
pub fn deliver(
    dir: &Path,
    sessions: &[SessionId],
    boundary: Boundary,
    consumer: &str,
    reader: consume::Reader<'_>,
    show: impl FnOnce(&str) -> anyhow::Result<()>,
) -> anyhow::Result<Outcome> {
    let Some(path) = sessions.first().and_then(|s| socket_path(dir, s)) else {
        return Ok(Outcome::Unavailable);
    };
    let Ok(stream) = UnixStream::connect(&path) else {
        return Ok(Outcome::Unavailable);
    };
    let request = Request {
        sessions: sessions.iter().map(|s| s.as_str().to_owned()).collect(),
        boundary,
        consumer: consumer.to_owned(),
        budget: reader.budget,
        result_tool: reader.result_tool.to_owned(),
    };
    let claimed = (|| {
        stream.set_read_timeout(Some(CLAIM_DEADLINE))?;
        stream.set_write_timeout(Some(CLAIM_DEADLINE))?;
        let mut writer = stream.try_clone()?;
        write_line(&mut writer, &request)?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let answer: Answer = read_line(&mut reader)?;
        anyhow::Ok((writer, reader, answer))
    })();
    let (mut writer, mut reader, answer) = match claimed {
        Ok(claimed) => claimed,
        Err(e) => {
            tracing::debug!(error = %format!("{e:#}"), "the session's host did not answer; delivering without it");
            return Ok(Outcome::Unavailable);
        }
    };
    let text = match answer {
        Answer {
            text: Some(text), ..
        } => text,
        Answer { nothing: true, .. } => return Ok(Outcome::Nothing),
        other => {
            tracing::debug!(
                why = other.unavailable.as_deref().unwrap_or("?"),
                "the session's host cannot deliver; delivering without it"
            );
            return Ok(Outcome::Unavailable);
        }
    };
    let printed = show(&text);
    // Dropping the connection gives everything back as surely as saying so.
    let _ = write_line(
        &mut writer,
        &Shown {
            shown: printed.is_ok(),
        },
    );
    printed?;
    stream.set_read_timeout(Some(ACK_DEADLINE))?;
    let last: Answer = read_line(&mut reader)
        .context("the session's host went away before acknowledging what was printed")?;
    match last {
        Answer { acked: Some(n), .. } => Ok(Outcome::Shown(n)),
        Answer { error, .. } => bail!(
            "the session's host could not acknowledge what was printed: {}",
            error.as_deref().unwrap_or("no reason given")
        ),
    }
}

fn write_line<T: Serialize>(w: &mut impl std::io::Write, value: &T) -> anyhow::Result<()> {
    let mut line = serde_json::to_vec(value)?;
    line.push(b'\n');
    w.write_all(&line)?;
    w.flush()?;
    Ok(())
}

fn read_line<T: serde::de::DeserializeOwned>(r: &mut impl std::io::BufRead) -> anyhow::Result<T> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        bail!("the other side closed the connection");
    }
    serde_json::from_str(&line).context("a malformed line")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_paths_are_stable_distinct_and_fit_an_address() {
        let a = SessionId::new("conv-a".to_owned()).expect("id");
        let b = SessionId::new("conv-b".to_owned()).expect("id");
        let dir = Path::new("/home/someone/.hermes");
        let pa = socket_path(dir, &a).expect("fits");
        assert_eq!(pa, socket_path(dir, &a).expect("fits"));
        assert_ne!(pa, socket_path(dir, &b).expect("fits"));
        assert!(pa.starts_with("/home/someone/.hermes/run"));
        let deep = PathBuf::from(format!("/{}", "d".repeat(100)));
        assert_eq!(socket_path(&deep, &a), None);
    }

    #[test]
    fn a_host_answer_round_trips_and_an_unknown_line_is_an_error() {
        let mut buf = Vec::new();
        write_line(
            &mut buf,
            &Answer {
                acked: Some(2),
                ..Answer::default()
            },
        )
        .expect("written");
        assert_eq!(String::from_utf8_lossy(&buf), "{\"acked\":2}\n");
        let back: Answer = read_line(&mut buf.as_slice()).expect("read");
        assert_eq!(back.acked, Some(2));
        assert!(read_line::<Answer>(&mut &b"not json\n"[..]).is_err());
        assert!(read_line::<Answer>(&mut &b""[..]).is_err());
    }
}
