//! Where the warnings of an interactive session, a `-z` run and `cron run` go:
//! `$HERMES_HOME/logs/hermes.log`, appended to and capped (past [`CAP`] it is moved to
//! `hermes.log.1`, replacing the one before, and begun again). The first warning a process logs
//! there is announced by one line on stderr naming the file (not with `-q`); the others only go
//! to the file.
//! Headless hosts keep their own log (`cache/host-SESSION.log`) and workers log to their stderr.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Bytes a log file may reach before it is moved aside.
const CAP: u64 = 1 << 20;

/// The log file of one process, opened on its first line.
#[derive(Debug)]
pub struct LogFile {
    path: PathBuf,
    /// Whether the first line is announced on stderr (not with `-q`).
    announce: bool,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    file: Option<File>,
    /// Whether the pointer line was printed (or the file could not be opened: said once too).
    told: bool,
}

impl LogFile {
    /// The log under the home `home`.
    pub fn under(home: &Path) -> LogFile {
        LogFile {
            path: home.join("logs").join("hermes.log"),
            announce: true,
            state: Mutex::new(State::default()),
        }
    }

    /// The same log, its first line not announced on stderr (`-q`).
    pub fn quietly(self) -> LogFile {
        LogFile {
            announce: false,
            ..self
        }
    }

    /// Appends `line`; the first time, tells `tell` where it went (or why it could not).
    fn append(&self, line: &[u8], tell: &mut dyn Write) {
        let mut state = hermes_stdx::lock(&self.state);
        if state.file.is_none() {
            match open_capped(&self.path) {
                Ok(file) => state.file = Some(file),
                Err(e) if !state.told => {
                    state.told = true;
                    let _ = writeln!(
                        tell,
                        "hermes: cannot write the log {}: {e}",
                        self.path.display()
                    );
                    return;
                }
                Err(_) => return,
            }
        }
        if let Some(file) = state.file.as_mut()
            && file.write_all(line).is_ok()
            && !state.told
        {
            state.told = true;
            let _ = writeln!(
                tell,
                "hermes: a warning was logged to {}",
                self.path.display()
            );
        }
    }
}

/// Opens `path` for appending (its directory made first), moving it to `NAME.1` when it has
/// reached [`CAP`].
fn open_capped(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if std::fs::metadata(path).is_ok_and(|m| m.len() >= CAP) {
        let mut aside = path.as_os_str().to_owned();
        aside.push(".1");
        std::fs::rename(path, aside)?;
    }
    OpenOptions::new().create(true).append(true).open(path)
}

/// One event's lines, written to the log when the event is complete.
#[derive(Debug)]
pub struct Writer<'a> {
    log: &'a LogFile,
    buf: Vec<u8>,
}

impl Write for Writer<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Writer<'_> {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        if self.log.announce {
            self.log.append(&self.buf, &mut std::io::stderr().lock());
        } else {
            self.log.append(&self.buf, &mut std::io::sink());
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogFile {
    type Writer = Writer<'a>;

    fn make_writer(&'a self) -> Writer<'a> {
        Writer {
            log: self,
            buf: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_appended_and_the_pointer_is_printed_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = LogFile::under(dir.path());
        let mut told = Vec::new();
        log.append(b"first\n", &mut told);
        log.append(b"second\n", &mut told);
        let path = dir.path().join("logs/hermes.log");
        assert_eq!(
            std::fs::read_to_string(&path).expect("log"),
            "first\nsecond\n"
        );
        let told = String::from_utf8(told).expect("utf-8");
        assert_eq!(
            told,
            format!("hermes: a warning was logged to {}\n", path.display())
        );
    }

    #[test]
    fn a_full_log_is_moved_aside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("logs/hermes.log");
        std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
        std::fs::write(&path, vec![b'x'; CAP as usize]).expect("fill");
        let log = LogFile::under(dir.path());
        log.append(b"fresh\n", &mut Vec::new());
        assert_eq!(std::fs::read_to_string(&path).expect("log"), "fresh\n");
        let aside = dir.path().join("logs/hermes.log.1");
        assert_eq!(std::fs::metadata(aside).expect("aside").len(), CAP);
    }

    #[test]
    fn a_log_that_cannot_be_opened_is_said_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        // `logs` is a file, so the log's directory cannot be made.
        std::fs::write(dir.path().join("logs"), "").expect("block");
        let log = LogFile::under(dir.path());
        let mut told = Vec::new();
        log.append(b"a\n", &mut told);
        log.append(b"b\n", &mut told);
        let told = String::from_utf8(told).expect("utf-8");
        assert_eq!(told.lines().count(), 1, "{told}");
        assert!(told.contains("cannot write the log"), "{told}");
    }
}
