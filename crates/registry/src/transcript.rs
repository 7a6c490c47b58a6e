//! Live transcripts: `<root>/<delegation_id>/task-<n>.log` and `manifest.json` beside them.
//!
//! A task's log is created with a header at dispatch, so `tail -f` can attach at once. Each line
//! the child writes becomes `HH:MM:SS out|err|prg | text` (UTC), written as soon as it has been
//! read: the lines of one read are written with one `write`. A line longer than
//! [`LINE_MAX`] bytes is split into several transcript lines, so every byte is kept while memory
//! stays bounded. Files are 0600, directories 0700.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use hermes_ledger::{ChildStatus, DelegationId, Timestamp, UnitRecord};
use serde::Serialize;

mod counted;

use counted::{ChildCount, ChildCounter};

/// Transcript lines are split at this many bytes of text.
pub const LINE_MAX: usize = 16 * 1024;

/// The directory of a unit's transcripts.
pub fn unit_dir(root: &Path, id: &DelegationId) -> PathBuf {
    root.join(id.as_str())
}

/// The transcript of child `index` in `dir`.
pub fn task_log_path(dir: &Path, index: u32) -> PathBuf {
    dir.join(format!("task-{index}.log"))
}

/// The transcripts of every child of `unit` under `root`, in task order.
pub fn task_logs(root: &Path, unit: &UnitRecord) -> Vec<PathBuf> {
    let dir = unit_dir(root, &unit.id);
    (0..unit.task_count())
        .map(|index| task_log_path(&dir, index))
        .collect()
}

/// The raw stream of an agent child `index` in `dir`, beside its transcript.
pub fn task_raw_path(dir: &Path, index: u32) -> PathBuf {
    dir.join(format!("task-{index}.jsonl"))
}

/// `HH:MM:SS` of a timestamp, UTC.
pub fn hms(at: Timestamp) -> String {
    let secs = at.0 / 1000 % 86_400;
    format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// RFC 3339 UTC of a timestamp, to the second.
pub fn rfc3339(at: Timestamp) -> String {
    i64::try_from(at.0 / 1000)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .map(|t| t.to_string())
        .unwrap_or_else(|| at.0.to_string())
}

fn create_dir(path: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(path)
}

fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

/// Creates a unit's transcript directory, one log per child with its header, and the manifest.
/// Logs that already exist are left as they are. Returns the directory.
pub fn create_unit(root: &Path, unit: &UnitRecord) -> io::Result<PathBuf> {
    let dir = unit_dir(root, &unit.id);
    create_dir(&dir)?;
    let count = unit.task_count();
    for (index, task) in unit.spec.tasks.iter().enumerate() {
        let index = index as u32;
        let path = task_log_path(&dir, index);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path);
        let mut file = match file {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        };
        let command = serde_json::to_string(&task.command).unwrap_or_default();
        let header = format!(
            "# hermes {} task {} of {count}\n# goal: {}\n# command: {command}\n# dispatched: {} (times below are UTC)\n",
            unit.id,
            index + 1,
            one_line(&task.goal),
            rfc3339(unit.dispatched_at),
        );
        file.write_all(header.as_bytes())?;
    }
    Manifest::for_unit(&dir, unit).write(&dir)?;
    Ok(dir)
}

/// Removes unit directories under `root` in which nothing changed for longer than `retention`.
/// Returns how many were removed. Errors are skipped: pruning is housekeeping.
pub fn prune(root: &Path, retention: std::time::Duration) -> usize {
    let Ok(entries) = fs::read_dir(root) else {
        return 0;
    };
    let Some(cutoff) = SystemTime::now().checked_sub(retention) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let is_unit = name.to_str().is_some_and(|n| DelegationId::new(n).is_ok());
        let path = entry.path();
        if !is_unit || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if newest_change(&path).is_some_and(|t| t < cutoff) && fs::remove_dir_all(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

fn newest_change(dir: &Path) -> Option<SystemTime> {
    let mut newest = fs::metadata(dir).ok()?.modified().ok()?;
    for entry in fs::read_dir(dir).ok()?.flatten() {
        if let Ok(modified) = entry.metadata().and_then(|m| m.modified()) {
            newest = newest.max(modified);
        }
    }
    Some(newest)
}

/// One task in `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ManifestTask {
    /// Its index.
    pub index: u32,
    /// Its goal.
    pub goal: String,
    /// Its transcript.
    pub log: String,
    /// Its status.
    pub status: &'static str,
    /// How it ended, in words (`exit 0`, `stalled after 450 s quiet`, …).
    pub exit_reason: Option<String>,
}

/// `manifest.json`: what a unit's transcript directory holds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Manifest {
    /// The unit.
    pub delegation_id: String,
    /// When it was dispatched (RFC 3339).
    pub dispatched: String,
    /// When it started running (RFC 3339), if it did.
    pub started: Option<String>,
    /// How many children.
    pub task_count: u32,
    /// Each child.
    pub tasks: Vec<ManifestTask>,
    /// When the unit ended (RFC 3339), if it did.
    pub completed: Option<String>,
    /// The unit's final status, once it ended.
    pub status: Option<&'static str>,
}

impl Manifest {
    /// The manifest of a unit nothing has happened to yet.
    pub fn for_unit(dir: &Path, unit: &UnitRecord) -> Manifest {
        Manifest {
            delegation_id: unit.id.to_string(),
            dispatched: rfc3339(unit.dispatched_at),
            started: unit.started_at.map(rfc3339),
            task_count: unit.task_count(),
            tasks: unit
                .spec
                .tasks
                .iter()
                .enumerate()
                .map(|(i, t)| ManifestTask {
                    index: i as u32,
                    goal: t.goal.clone(),
                    log: task_log_path(dir, i as u32).display().to_string(),
                    status: ChildStatus::Pending.as_str(),
                    exit_reason: None,
                })
                .collect(),
            completed: None,
            status: None,
        }
    }

    /// Writes `manifest.json` in `dir` atomically (a temporary file renamed over it), 0600.
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        write_json(
            self,
            &dir.join(".manifest.json.tmp"),
            &dir.join("manifest.json"),
        )
    }
}

/// Writes `value` as pretty JSON to `path` atomically and privately: to `tmp` (0600), then
/// renamed over `path`, so a reader sees the old file or the new one, never half of one.
pub(crate) fn write_json(value: &impl Serialize, tmp: &Path, path: &Path) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(tmp)?;
    let json = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    file.write_all(&json)?;
    file.write_all(b"\n")?;
    drop(file);
    fs::rename(tmp, path)
}

/// Which stream a transcript line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// stdout.
    Out,
    /// stderr.
    Err,
    /// The progress pipe.
    Progress,
}

impl Stream {
    fn tag(self) -> &'static str {
        match self {
            Stream::Out => "out",
            Stream::Err => "err",
            Stream::Progress => "prg",
        }
    }
}

/// A child's transcript file, shared by its three stream readers.
///
/// It holds at most about `max_bytes` (`delegation.transcript_max_bytes`): past that the head
/// (the first half) stays, then one line saying how much of the child's output was skipped (its
/// own bytes, newlines included, and lines: not the transcript's time and stream prefixes, nor
/// hermes' own notes), then a rolling tail of the latest lines. Memory and disk stay bounded
/// whatever the child prints.
#[derive(Debug)]
pub struct TaskLog {
    path: PathBuf,
    file: Mutex<Option<CappedFile>>,
}

/// The smallest cap a transcript honours: room for its header, a few lines and the marker.
pub const TRANSCRIPT_MIN_BYTES: u64 = 4096;

/// Bytes copied at a time when the tail rolls.
const COPY_CHUNK: usize = 64 * 1024;

/// Width of each count in the marker line, so it can be rewritten in place as the tail rolls.
const COUNT_WIDTH: usize = 20;

#[derive(Debug)]
struct CappedFile {
    file: File,
    /// The file's length: every write goes here.
    len: u64,
    max: u64,
    tail: Option<Tail>,
}

/// Where the rolling tail is, once the cap was reached.
#[derive(Debug)]
struct Tail {
    /// Offset of the marker line.
    marker_at: u64,
    /// The marker line's first part (time and cap), fixed once written.
    marker_head: String,
    /// Offset of the first tail byte (just after the marker line).
    start: u64,
    /// The child's output in the tail now, counted as it is written.
    held: ChildCounter,
    /// The child's output skipped so far.
    skipped: ChildCount,
}

impl Tail {
    fn marker(&self) -> Vec<u8> {
        let words = |bytes: &str, lines: &str| {
            format!(
                "{} {bytes} bytes of the child's output in {lines} lines skipped here; the latest \
                 lines follow",
                self.marker_head
            )
        };
        let text = words(
            &self.skipped.bytes.to_string(),
            &self.skipped.lines.to_string(),
        );
        // Padded to the longest it can be, so rewriting it never moves the tail.
        let width = words("", "").len() + 2 * COUNT_WIDTH;
        let mut line = format!("{text:<width$}").into_bytes();
        line.push(b'\n');
        line
    }
}

impl CappedFile {
    fn head_max(&self) -> u64 {
        self.max / 2
    }

    /// Room for the tail; when it overflows, the latest quarter of the cap is kept.
    fn tail_max(&self) -> u64 {
        self.max - self.head_max()
    }

    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(bytes, self.len)?;
        self.len += bytes.len() as u64;
        Ok(())
    }

    fn write(&mut self, mut bytes: &[u8], at: Timestamp) -> io::Result<()> {
        if self.tail.is_none() {
            let room = self.head_max().saturating_sub(self.len);
            if bytes.len() as u64 <= room {
                return self.append(bytes);
            }
            // Keep whole lines in the head, then start the tail behind the marker.
            let fit = bytes[..room as usize]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            self.append(&bytes[..fit])?;
            bytes = &bytes[fit..];
            let tail = Tail {
                marker_at: self.len,
                marker_head: format!(
                    "{} --- | hermes: transcript cap of {} bytes reached;",
                    hms(at),
                    self.max
                ),
                start: 0,
                held: ChildCounter::default(),
                skipped: ChildCount::default(),
            };
            let marker = tail.marker();
            self.append(&marker)?;
            self.tail = Some(Tail {
                start: self.len,
                ..tail
            });
        }
        self.append(bytes)?;
        let tail_max = self.tail_max();
        let Some(tail) = self.tail.as_mut() else {
            return Ok(());
        };
        tail.held.feed(bytes);
        if self.len - tail.start > tail_max {
            self.roll()?;
        }
        Ok(())
    }

    /// Drops the older part of the tail, keeping about a quarter of the cap from a line start,
    /// and rewrites the marker with the new counts.
    fn roll(&mut self) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let keep_target = self.max / 4;
        let Some(tail) = self.tail.as_mut() else {
            return Ok(());
        };
        let mut cut = self.len.saturating_sub(keep_target).max(tail.start);
        // Move the cut to the start of a line (or keep nothing if the last line is longer).
        let mut buf = vec![0u8; COPY_CHUNK];
        if cut > tail.start {
            let mut at = cut - 1;
            loop {
                let n = self.file.read_at(&mut buf, at)?;
                if n == 0 {
                    cut = self.len;
                    break;
                }
                if let Some(i) = buf[..n].iter().position(|&b| b == b'\n') {
                    cut = at + i as u64 + 1;
                    break;
                }
                at += n as u64;
            }
        }
        // Copy the kept part down to the tail's start, counting the child's output in it.
        let (mut from, mut to, mut kept) = (cut, tail.start, ChildCounter::default());
        while from < self.len {
            let want = usize::try_from(self.len - from)
                .unwrap_or(COPY_CHUNK)
                .min(COPY_CHUNK);
            let n = self.file.read_at(&mut buf[..want], from)?;
            if n == 0 {
                break;
            }
            kept.feed(&buf[..n]);
            self.file.write_all_at(&buf[..n], to)?;
            from += n as u64;
            to += n as u64;
        }
        tail.skipped.bytes += tail.held.count.bytes.saturating_sub(kept.count.bytes);
        tail.skipped.lines += tail.held.count.lines.saturating_sub(kept.count.lines);
        tail.held = kept;
        self.file.set_len(to)?;
        self.len = to;
        self.file.write_all_at(&tail.marker(), tail.marker_at)?;
        Ok(())
    }
}

impl TaskLog {
    /// Opens (creating if needed) a transcript for appending, capped at `max_bytes` (at least
    /// [`TRANSCRIPT_MIN_BYTES`]).
    pub fn open(path: PathBuf, max_bytes: u64) -> io::Result<TaskLog> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)?;
        let len = file.metadata()?.len();
        Ok(TaskLog {
            path,
            file: Mutex::new(Some(CappedFile {
                file,
                len,
                max: max_bytes.max(TRANSCRIPT_MIN_BYTES),
                tail: None,
            })),
        })
    }

    /// A transcript that writes nothing (when the file could not be opened).
    pub fn disabled(path: PathBuf) -> TaskLog {
        TaskLog {
            path,
            file: Mutex::new(None),
        }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The cap, once it was reached (the transcript then holds its head and latest lines, not
    /// all of the output).
    pub fn cap_reached(&self) -> Option<u64> {
        let guard = self.file.lock().ok()?;
        guard.as_ref().and_then(|f| f.tail.as_ref().map(|_| f.max))
    }

    /// Appends already formatted lines, read at `at`. After a write error the transcript stops
    /// (the child goes on; its output is still captured for the result).
    pub fn write_raw(&self, bytes: &[u8], at: Timestamp) {
        if bytes.is_empty() {
            return;
        }
        let Ok(mut guard) = self.file.lock() else {
            return;
        };
        if let Some(file) = guard.as_mut()
            && let Err(e) = file.write(bytes, at)
        {
            tracing::warn!(path = %self.path.display(), error = %e, "transcript write failed; transcript stopped");
            *guard = None;
        }
    }

    /// Writes a note of hermes' own (`HH:MM:SS --- | text`).
    pub fn note(&self, at: Timestamp, text: &str) {
        self.write_raw(
            format!("{} --- | {}\n", hms(at), one_line(text)).as_bytes(),
            at,
        );
    }
}

/// Turns one stream's bytes into transcript lines, keeping the unfinished last line (at most
/// [`LINE_MAX`] bytes) until its newline arrives.
#[derive(Debug)]
pub struct LineSplitter {
    stream: Stream,
    partial: Vec<u8>,
    max: usize,
}

impl LineSplitter {
    /// A splitter for `stream` with the standard line limit.
    pub fn new(stream: Stream) -> LineSplitter {
        LineSplitter::with_max(stream, LINE_MAX)
    }

    /// A splitter that cuts lines at `max` bytes.
    pub fn with_max(stream: Stream, max: usize) -> LineSplitter {
        LineSplitter {
            stream,
            partial: Vec::new(),
            max: max.max(1),
        }
    }

    fn emit(&mut self, stamp: &str, piece: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(stamp.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.stream.tag().as_bytes());
        out.extend_from_slice(b" | ");
        out.append(&mut self.partial);
        out.extend_from_slice(piece);
        out.push(b'\n');
    }

    /// Appends to `out` the transcript lines that `bytes` completes, stamped `stamp`.
    pub fn feed(&mut self, bytes: &[u8], stamp: &str, out: &mut Vec<u8>) {
        let mut rest = bytes;
        while !rest.is_empty() {
            let room = self.max - self.partial.len();
            let window = &rest[..rest.len().min(room + 1)];
            if let Some(i) = window.iter().position(|&b| b == b'\n') {
                self.emit(stamp, &rest[..i], out);
                rest = &rest[i + 1..];
            } else if rest.len() > room {
                self.emit(stamp, &rest[..room], out);
                rest = &rest[room..];
            } else {
                self.partial.extend_from_slice(rest);
                rest = &[];
            }
        }
    }

    /// Appends the unfinished last line, if any.
    pub fn finish(&mut self, stamp: &str, out: &mut Vec<u8>) {
        if !self.partial.is_empty() {
            self.emit(stamp, &[], out);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use hermes_ledger::{DispatchSpec, TaskSpec};

    use super::*;

    /// A unit of `tasks` echo children, for tests.
    pub(crate) fn unit(tasks: usize) -> UnitRecord {
        let tasks = (0..tasks)
            .map(|i| {
                let argv = vec!["echo".into(), format!("{i}")];
                TaskSpec::new(format!("goal {i}\nsecond line"), argv)
            })
            .collect();
        let spec = DispatchSpec::new("g", tasks);
        let at = Timestamp(1_764_441_835_000);
        UnitRecord {
            channel: hermes_ledger::Channel::Inline,
            ..hermes_testkit::running_unit(DelegationId::from_bits(0xabc), spec, at)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::tests_support::unit;
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).expect("exists").permissions().mode() & 0o777
    }

    #[test]
    fn formats_times_in_utc() {
        assert_eq!(hms(Timestamp(1_764_441_835_123)), "18:43:55");
        assert_eq!(
            rfc3339(Timestamp(1_764_441_835_123)),
            "2025-11-29T18:43:55Z"
        );
    }

    #[test]
    fn creates_logs_with_headers_and_a_manifest_privately() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("live");
        let dir = create_unit(&root, &unit(2)).expect("created");
        assert_eq!(mode(&dir), 0o700);
        let log = task_log_path(&dir, 1);
        assert_eq!(mode(&log), 0o600);
        let text = fs::read_to_string(&log).expect("log");
        assert!(
            text.starts_with(
                "# hermes deleg_000000000abc task 2 of 2\n# goal: goal 1 second line\n"
            ),
            "{text}"
        );
        assert!(text.contains(r#"# command: ["echo","1"]"#));
        let manifest: serde_json::Value =
            serde_json::from_slice(&fs::read(dir.join("manifest.json")).expect("manifest"))
                .expect("json");
        assert_eq!(mode(&dir.join("manifest.json")), 0o600);
        assert_eq!(manifest["delegation_id"], "deleg_000000000abc");
        assert_eq!(manifest["task_count"], 2);
        assert_eq!(manifest["tasks"][1]["status"], "pending");
        assert_eq!(manifest["tasks"][1]["log"], log.display().to_string());
        assert!(manifest["completed"].is_null());
        // A second creation keeps what the logs hold.
        fs::write(&log, "kept").expect("write");
        create_unit(&root, &unit(2)).expect("again");
        assert_eq!(fs::read_to_string(&log).expect("log"), "kept");
    }

    #[test]
    fn splits_lines_per_stream_and_caps_their_length() {
        let mut s = LineSplitter::with_max(Stream::Out, 4);
        let mut out = Vec::new();
        s.feed(b"ab", "00:00:01", &mut out);
        assert!(out.is_empty());
        s.feed(b"c\n\nabcdefghij\n1234\nxy", "00:00:02", &mut out);
        s.finish("00:00:03", &mut out);
        let text = String::from_utf8(out).expect("utf8");
        assert_eq!(
            text,
            "00:00:02 out | abc\n00:00:02 out | \n00:00:02 out | abcd\n00:00:02 out | efgh\n\
             00:00:02 out | ij\n00:00:02 out | 1234\n00:00:03 out | xy\n"
        );
    }

    #[test]
    fn task_log_appends_and_notes() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let log = TaskLog::open(tmp.path().join("t.log"), u64::MAX).expect("open");
        let mut out = Vec::new();
        LineSplitter::new(Stream::Err).feed(b"oops\n", "01:02:03", &mut out);
        log.write_raw(&out, Timestamp(0));
        log.note(Timestamp(0), "stalled\nnow");
        let text = fs::read_to_string(log.path()).expect("read");
        assert_eq!(text, "01:02:03 err | oops\n00:00:00 --- | stalled now\n");
    }

    /// The two counts of a marker line: bytes and lines skipped.
    pub(crate) fn skipped(text: &str) -> (u64, u64) {
        let line = text
            .lines()
            .find(|l| l.contains("hermes: transcript cap of"))
            .expect("a marker line");
        let (_, counts) = line.split_once("reached;").expect("the counts follow");
        let words: Vec<&str> = counts.split_whitespace().collect();
        let at = |word: &str| {
            words
                .iter()
                .position(|w| *w == word)
                .and_then(|i| words[i - 1].parse().ok())
                .expect("a count")
        };
        (at("bytes"), at("lines"))
    }

    #[test]
    fn a_capped_log_keeps_its_head_and_a_rolling_tail_and_counts_what_it_skipped() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("t.log");
        fs::write(&path, "# header\n").expect("header");
        let log = TaskLog::open(path.clone(), 8192).expect("open");
        // What the child wrote: every line's text and newline, not the transcript's prefixes.
        let mut total = 0;
        for i in 0..10_000 {
            let text = format!("line {i}\n");
            total += text.len() as u64;
            log.write_raw(
                format!("00:00:01 out | {text}").as_bytes(),
                Timestamp(1_000),
            );
            if i % 1000 == 0 {
                log.note(Timestamp(1_000), "a note of hermes' own");
            }
        }
        assert_eq!(log.cap_reached(), Some(8192));
        let text = fs::read_to_string(&path).expect("read");
        assert!(text.len() <= 8192 + 200, "{} bytes", text.len());
        assert!(text.starts_with("# header\n00:00:01 out | line 0\n"));
        assert!(
            text.ends_with("out | line 9999\n"),
            "{}",
            &text[text.len() - 100..]
        );
        let (bytes, lines) = skipped(&text);
        let kept = text.lines().filter(|l| l.contains(" out | line ")).count() as u64;
        assert_eq!(kept + lines, 10_000, "every line is kept or counted");
        let kept_bytes: u64 = text
            .lines()
            .filter_map(|l| l.strip_prefix("00:00:01 out | "))
            .map(|t| t.len() as u64 + 1)
            .sum();
        assert_eq!(
            kept_bytes + bytes,
            total,
            "every byte the child wrote is kept or counted"
        );
        // The kept lines are whole and in order around the marker.
        let numbers: Vec<u64> = text
            .lines()
            .filter_map(|l| l.strip_prefix("00:00:01 out | line "))
            .map(|n| n.parse().expect("a whole line"))
            .collect();
        assert!(numbers.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn a_log_that_never_reached_its_cap_says_so() {
        assert_eq!(TaskLog::disabled("/t".into()).cap_reached(), None);
        let tmp = tempfile::tempdir().expect("tempdir");
        let log = TaskLog::open(tmp.path().join("t.log"), 8192).expect("open");
        log.write_raw(b"00:00:01 out | short\n", Timestamp(1_000));
        assert_eq!(log.cap_reached(), None);
    }

    #[test]
    fn prunes_only_old_unit_directories() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path();
        let dir = create_unit(root, &unit(1)).expect("created");
        fs::create_dir(root.join("not-a-unit")).expect("mkdir");
        assert_eq!(prune(root, std::time::Duration::from_secs(3600)), 0);
        assert!(dir.exists());
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(prune(root, std::time::Duration::from_millis(1)), 1);
        assert!(!dir.exists());
        assert!(root.join("not-a-unit").exists());
    }
}
