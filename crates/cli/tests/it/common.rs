//! Helpers for driving the real `hermes` binary: a temp home per test, short timings, and
//! waiting on conditions with deadlines.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct Hermes {
    pub home: tempfile::TempDir,
    /// The ledger on the backend under test (`HERMES_TEST_BACKEND`): the home's redb file, or
    /// a fresh PostgreSQL database handed to every process as `HERMES_LEDGER_URL`.
    pub location: hermes_ledger::Location,
    pub ledger_url: Option<String>,
    /// Drops this home's test database (PostgreSQL) when the test is done.
    _database: Option<hermes_testkit::TestDatabase>,
}

impl Hermes {
    /// A private temp home (0700, as hermes creates its own; a shared one is warned about).
    pub fn new() -> Hermes {
        let home = tempfile::tempdir().expect("temp home");
        std::fs::set_permissions(
            home.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .expect("chmod the temp home");
        let (location, ledger_url, database) =
            hermes_testkit::TestBackend::from_env().fresh_owned(home.path());
        Hermes {
            home,
            location,
            ledger_url,
            _database: database,
        }
    }

    /// A home of its own on another "machine" sharing the PostgreSQL ledger at `url`.
    pub fn sharing(url: &str) -> Hermes {
        let mut h = Hermes::new();
        let target = hermes_ledger::PgTarget::parse(url, None).expect("the test URL parses");
        h.location = hermes_ledger::Location::Postgres(Box::new(target));
        h.ledger_url = Some(url.to_owned());
        // The shared database belongs to the test, not to this home.
        h._database = None;
        h
    }

    /// Whether the suite runs on PostgreSQL.
    pub fn on_postgres(&self) -> bool {
        self.ledger_url.is_some()
    }

    /// Opens this home's ledger directly.
    pub fn ledger(&self) -> hermes_ledger::Ledger {
        hermes_ledger::Ledger::open_at(&self.location, hermes_ledger::LedgerConfig::default())
            .expect("ledger opens")
    }

    /// Sets or clears `HERMES_LEDGER_URL` on `c` for this home's ledger.
    pub fn ledger_env(&self, c: &mut Command) {
        match &self.ledger_url {
            Some(url) => c.env("HERMES_LEDGER_URL", url),
            None => c.env_remove("HERMES_LEDGER_URL"),
        };
    }

    pub fn path(&self) -> &Path {
        self.home.path()
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hermes"));
        c.args(args);
        self.environment(&mut c);
        c
    }

    /// `sh -c SCRIPT` with this home's environment; `$HERMES` is the binary.
    pub fn shell(&self, script: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(script)
            .env("HERMES", env!("CARGO_BIN_EXE_hermes"));
        self.environment(&mut c);
        c
    }

    /// Sets this home's environment (and no session) on `c`.
    pub fn environment(&self, c: &mut Command) {
        c.env("HERMES_HOME", self.home.path())
            .env("HERMES_HOST_IDLE_EXIT_SECONDS", "3")
            .env("HERMES_HOST_SWEEP_INTERVAL_MS", "100")
            .env("HERMES_DELEGATION_KILL_GRACE_SECONDS", "1")
            .env_remove("HERMES_SESSION_ID")
            .env_remove("HERMES_SESSION_KEY")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        self.ledger_env(c);
    }

    pub fn run(&self, args: &[&str]) -> Run {
        Run::from(self.command(args).output().expect("hermes runs"))
    }

    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut c = self.command(args);
        for (k, v) in env {
            c.env(k, v);
        }
        Run::from(c.output().expect("hermes runs"))
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let run = self.run(args);
        assert_eq!(run.code, 0, "{args:?} failed: {}", run.stderr);
        run.json()
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.home.path().join(name);
        std::fs::write(&path, text).expect("write file");
        path
    }

    /// Host pids recorded for sessions.
    pub fn host_pids(&self) -> Vec<u64> {
        let run = self.run(&["session", "list", "--json"]);
        if run.code != 0 {
            return Vec::new();
        }
        run.json()["sessions"]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s["host_pid"].as_u64()).collect())
            .unwrap_or_default()
    }
}

impl Drop for Hermes {
    fn drop(&mut self) {
        for pid in self.host_pids() {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    }
}

#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }

    /// A failure prints exactly one line on stderr, `hermes: …`.
    pub fn assert_one_error_line(&self, code: i32) {
        assert_eq!(
            self.code, code,
            "stdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "one stderr line expected: {:?}",
            self.stderr
        );
        assert!(lines[0].starts_with("hermes: "), "{:?}", lines[0]);
    }
}

/// Polls `f` until it gives a value or `limit` passes.
pub fn wait_for<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether a process runs (not a zombie).
pub fn process_alive(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z"),
        Err(_) => false,
    }
}

/// A "machine": a shell as pid 1 of a pid namespace of its own (`unshare --pid --fork
/// --mount-proc`), running `script` with `h`'s home (and `$HERMES`, the binary).
pub struct Machine {
    unshare: Child,
}

impl Machine {
    pub fn start(h: &Hermes, script: &str, env: &[(&str, &str)]) -> Machine {
        let mut command = Command::new("unshare");
        h.environment(&mut command);
        command
            .args([
                "--pid",
                "--fork",
                "--mount-proc",
                "--kill-child",
                "sh",
                "-c",
                script,
            ])
            .env("HERMES", env!("CARGO_BIN_EXE_hermes"))
            .envs(env.iter().copied())
            .stdout(Stdio::null());
        Machine {
            unshare: command.spawn().expect("unshare starts"),
        }
    }

    /// The namespace's pid 1, as this machine sees it.
    pub fn init_pid(&self) -> u32 {
        let pid = self.unshare.id();
        wait_for(Duration::from_secs(10), "the namespace's pid 1", || {
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .ok()?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
    }

    /// Loses the whole machine at once: its pid 1 is killed, and with it every process of
    /// the namespace (the kernel's rule for a pid namespace whose init dies).
    pub fn lose(&mut self) {
        let init = self.init_pid();
        // SAFETY: a plain kill(2) of a process this test started.
        unsafe { libc::kill(init as i32, libc::SIGKILL) };
        let _ = self.unshare.wait();
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

/// A machine whose shell dispatches each of `commands` (`sh -c` text) into `session` in turn,
/// then idles; returns it with the dispatched ids, in order.
pub fn machine_dispatching(
    h: &Hermes,
    session: &str,
    commands: &[&str],
    env: &[(&str, &str)],
) -> (Machine, Vec<String>) {
    let outputs: Vec<PathBuf> = (0..commands.len())
        .map(|i| h.path().join(format!("dispatch-{i}.json")))
        .collect();
    let mut script = String::new();
    for (command, out) in commands.iter().zip(&outputs) {
        script.push_str(&format!(
            "\"$HERMES\" delegate --session {session} --json -- sh -c '{command}' > '{}' && ",
            out.display()
        ));
    }
    script.push_str("exec sleep 300");
    let machine = Machine::start(h, &script, env);
    let ids = outputs
        .iter()
        .map(|path| {
            let handle: Value =
                wait_for(Duration::from_secs(20), "a dispatch on the machine", || {
                    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
                });
            handle["delegation_id"].as_str().expect("id").to_owned()
        })
        .collect();
    (machine, ids)
}

/// A shell script that waits until the file `go` exists, then prints `then`: a child that
/// finishes when the test says so.
pub fn until_told(go: &Path, then: &str) -> String {
    format!(
        "while [ ! -e '{}' ]; do sleep 0.05; done; echo {then}",
        go.display()
    )
}
