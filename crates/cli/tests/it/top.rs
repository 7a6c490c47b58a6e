//! End-to-end tests of `hermes top` in a real pseudo-terminal, and of the metrics read by real
//! consumers — Python's `prometheus_client` parsers (the classic text format's and
//! OpenMetrics') and a real Prometheus server scraping `--metrics-listen` — each reading every
//! metric with its type, against the values `delegation list --json` gives for the same
//! ledger. Backend-parameterized (`HERMES_TEST_BACKEND`).

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::common::{Hermes, wait_for};
use expectrl::Session;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(30);

/// `hermes top` on an 80x24 pseudo-terminal, its screen read through vt100.
struct Top {
    session: expectrl::session::OsSession,
    screen: vt100::Parser,
}

impl Top {
    fn spawn(h: &Hermes) -> Top {
        // Not `Hermes::command`: its null stdin would replace the terminal.
        let mut c = Command::new(env!("CARGO_BIN_EXE_hermes"));
        c.arg("top")
            .env("HERMES_HOME", h.path())
            .env("HERMES_HOST_SWEEP_INTERVAL_MS", "100")
            .env("HERMES_HOST_IDLE_EXIT_SECONDS", "3")
            .env("HERMES_DELEGATION_KILL_GRACE_SECONDS", "1")
            .env("TERM", "xterm")
            .env_remove("RUST_LOG");
        h.ledger_env(&mut c);
        let session = Session::spawn(c).expect("hermes top starts on a pseudo-terminal");
        Top {
            session,
            screen: vt100::Parser::default(),
        }
    }

    fn pump(&mut self) {
        let mut buf = [0u8; 8192];
        while let Ok(n) = self.session.try_read(&mut buf) {
            if n == 0 {
                return;
            }
            self.screen.process(&buf[..n]);
        }
    }

    fn contents(&self) -> String {
        self.screen.screen().contents()
    }

    /// Waits until the screen satisfies `ok`.
    fn wait(&mut self, what: &str, ok: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + LIMIT;
        loop {
            self.pump();
            if ok(&self.contents()) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; the screen shows:\n{}",
                self.contents()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The screen row that names `id`.
    fn row_of(&self, id: &str) -> Option<String> {
        self.contents()
            .lines()
            .find(|l| l.contains(id))
            .map(str::to_owned)
    }

    fn send(&mut self, keys: &str) {
        self.session
            .write_all(keys.as_bytes())
            .and_then(|()| self.session.flush())
            .expect("write to the terminal");
    }

    fn wait_exit(&mut self) -> i32 {
        let deadline = Instant::now() + LIMIT;
        loop {
            self.pump();
            match self.session.get_process().status() {
                Ok(expectrl::process::unix::WaitStatus::Exited(_, code)) => {
                    self.pump();
                    return code;
                }
                Ok(expectrl::process::unix::WaitStatus::StillAlive) => {}
                other => panic!("hermes top ended oddly: {other:?}\n{}", self.contents()),
            }
            assert!(Instant::now() < deadline, "hermes top did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn dispatch(h: &Hermes, session: &str, goal: &str, script: &str) -> String {
    let out = h.json(&[
        "delegate",
        "--json",
        "--session",
        session,
        "--goal",
        goal,
        "--",
        "sh",
        "-c",
        script,
    ]);
    out["delegation_id"]
        .as_str()
        .expect("the dispatch names its unit")
        .to_owned()
}

#[test]
fn top_shows_a_unit_appear_and_finish_stops_one_with_s_and_quits_with_q_restoring_the_terminal() {
    let h = Hermes::new();
    let mut top = Top::spawn(&h);
    top.wait("the empty view", |s| {
        s.contains("hermes top") && s.contains("nothing running")
    });
    assert!(
        top.screen.screen().alternate_screen(),
        "top draws on the alternate screen"
    );

    let quick = dispatch(&h, "s1", "quick", "sleep 3; echo hi");
    top.wait("the quick unit running", |s| {
        s.lines()
            .any(|l| l.contains(&quick) && l.contains("running"))
    });
    top.wait("the quick unit finished", |s| {
        s.lines()
            .any(|l| l.contains(&quick) && l.contains("completed"))
    });

    let slow = dispatch(&h, "s1", "slow", "sleep 60");
    top.wait("the slow unit running", |s| {
        s.lines()
            .any(|l| l.contains(&slow) && l.contains("running"))
    });
    // The running unit comes first, and the first row is selected.
    top.send("s");
    top.wait("the stop question", |s| {
        s.contains(&format!("stop {slow}?"))
    });
    top.send("y");
    top.wait("the stop confirmed", |s| {
        s.contains(&format!("{slow}: stopping (stopped_by_user)"))
    });
    top.wait("the slow unit interrupted", |s| {
        s.lines()
            .any(|l| l.contains(&slow) && l.contains("interrupted"))
    });
    let status = h.json(&["delegation", "status", &slow, "--json"]);
    assert_eq!(status["status"], "interrupted", "{status}");
    assert_eq!(status["interrupt"], "stopped_by_user", "{status}");
    assert!(top.row_of(&quick).is_some(), "finished units stay listed");

    top.send("q");
    assert_eq!(top.wait_exit(), 0, "{}", top.contents());
    let screen = top.screen.screen();
    assert!(!screen.alternate_screen(), "the main screen is back");
    assert!(!screen.hide_cursor(), "the cursor is shown again");
    assert_eq!(
        screen.mouse_protocol_mode(),
        vt100::MouseProtocolMode::None,
        "mouse reports are off"
    );
}

#[test]
fn top_ends_on_sigterm_and_restores_the_terminal() {
    let h = Hermes::new();
    let mut top = Top::spawn(&h);
    top.wait("the view", |s| s.contains("hermes top"));
    let pid = nix::unistd::Pid::from_raw(top.session.get_process().pid().as_raw());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    assert_eq!(top.wait_exit(), 0);
    let screen = top.screen.screen();
    assert!(!screen.alternate_screen() && !screen.hide_cursor());
}

#[test]
fn top_without_a_terminal_exits_2_pointing_at_the_json_list() {
    let h = Hermes::new();
    let run = h.run(&["top"]);
    run.assert_one_error_line(2);
    assert!(
        run.stderr.contains("delegation list --json"),
        "{}",
        run.stderr
    );
}

// ---- metrics ----

/// A Python with `prometheus_client`, in a venv under the target directory (made once).
fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("prometheus-venv");
        let python = venv.join("bin/python");
        let has_client = |p: &Path| {
            Command::new(p)
                .args(["-c", "import prometheus_client"])
                .status()
                .is_ok_and(|s| s.success())
        };
        if !has_client(&python) {
            let made = Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv)
                .status();
            assert!(
                made.is_ok_and(|s| s.success()),
                "these tests need python3 with venv (Debian: apt-get install python3-venv)"
            );
            let installed = Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "prometheus_client"])
                .status();
            assert!(
                installed.is_ok_and(|s| s.success()) && has_client(&python),
                "cannot install prometheus_client from PyPI into {}",
                venv.display()
            );
        }
        python
    })
}

/// One of prometheus_client's two parsers.
#[derive(Clone, Copy, Debug)]
enum Parser {
    /// `prometheus_client.parser`: the Prometheus text format 0.0.4.
    Classic,
    /// `prometheus_client.openmetrics.parser`.
    OpenMetrics,
}

/// What a parser read.
struct Parsed {
    /// Every sample as `name{label="value",…}` (labels sorted) → value.
    samples: BTreeMap<String, f64>,
    /// Every family's type (`empty` for a family without samples).
    types: BTreeMap<String, String>,
}

/// `text` read by `parser`.
fn parse_with_python(text: &str, parser: Parser) -> Parsed {
    let script = r#"
import json, sys
if sys.argv[1] == "Classic":
    from prometheus_client.parser import text_string_to_metric_families
else:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
samples, types = {}, {}
for family in text_string_to_metric_families(sys.stdin.read()):
    if family.name in types:
        sys.exit(f"the family {family.name} comes twice")
    types[family.name] = family.type if family.samples else "empty"
    for s in family.samples:
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        samples[f"{s.name}{{{labels}}}"] = s.value
print(json.dumps({"samples": samples, "types": types}))
"#;
    let mut child = Command::new(python())
        .args(["-c", script, &format!("{parser:?}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write the exposition");
    let out = child.wait_with_output().expect("python ends");
    assert!(
        out.status.success(),
        "prometheus_client's {parser:?} parser refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("the parser's JSON");
    Parsed {
        samples: serde_json::from_value(json["samples"].clone()).expect("samples"),
        types: serde_json::from_value(json["types"].clone()).expect("types"),
    }
}

/// Every metric family and its type (a counter's family is named without `_total`).
const TYPES: [(&str, &str); 20] = [
    ("hermes_claim_losses", "counter"),
    ("hermes_completions", "counter"),
    ("hermes_deliveries", "counter"),
    ("hermes_delivery_lag_seconds", "histogram"),
    ("hermes_dispatches", "counter"),
    ("hermes_lease_renewal_failures", "counter"),
    ("hermes_ledger_commit_seconds", "histogram"),
    ("hermes_live_hosts", "gauge"),
    ("hermes_live_workers", "gauge"),
    ("hermes_machine_slots", "gauge"),
    ("hermes_oldest_pending_event_age_seconds", "gauge"),
    ("hermes_open_events", "gauge"),
    ("hermes_pool_capacity", "gauge"),
    ("hermes_queue_depth", "gauge"),
    ("hermes_recoveries", "counter"),
    ("hermes_running_children", "gauge"),
    ("hermes_stalls", "counter"),
    ("hermes_start_wait_seconds", "histogram"),
    ("hermes_timeouts", "counter"),
    ("hermes_units", "gauge"),
];

/// The parser read every family with its type, and nothing untyped or empty.
fn assert_typed(parsed: &Parsed) {
    let want: BTreeMap<String, String> = TYPES
        .iter()
        .map(|(name, kind)| ((*name).to_owned(), (*kind).to_owned()))
        .collect();
    assert_eq!(parsed.types, want);
}

fn sample(samples: &BTreeMap<String, f64>, key: &str) -> f64 {
    *samples
        .get(key)
        .unwrap_or_else(|| panic!("no sample {key} in {samples:#?}"))
}

/// A finished and delivered unit, a running one, and one waiting in a pool no worker serves.
fn populated() -> (Hermes, String) {
    let h = Hermes::new();
    let done = dispatch(&h, "s1", "done", "echo done");
    wait_for(LIMIT, "the first unit to finish", || {
        let s = h.json(&["delegation", "status", &done, "--json"]);
        (s["status"] == "completed").then_some(())
    });
    let drained = h.run(&["drain", "--session", "s1", "--wait", "10"]);
    assert_eq!(drained.code, 0, "{}", drained.stderr);
    let running = dispatch(&h, "s1", "long", "sleep 60");
    // The unit runs once claimed; its child runs once spawned. Metrics count children.
    wait_for(LIMIT, "the second unit's child to run", || {
        let s = h.json(&["delegation", "status", &running, "--json"]);
        (s["status"] == "running" && s["tasks"][0]["status"] == "running").then_some(())
    });
    let queued = h.run(&[
        "delegate",
        "--json",
        "--session",
        "s1",
        "--pool",
        "nobody",
        "--",
        "true",
    ]);
    assert_eq!(queued.code, 0, "{}", queued.stderr);
    (h, running)
}

#[test]
fn hermes_metrics_reads_with_the_classic_parser_every_metric_typed_and_matches_the_json_list() {
    let (h, running) = populated();
    let run = h.run(&["metrics"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let parsed = parse_with_python(&run.stdout, Parser::Classic);
    assert_typed(&parsed);
    let samples = &parsed.samples;
    let list = h.json(&["delegation", "list", "--json", "--all"]);
    let count = |k: &str| list[k].as_u64().expect("a count") as f64;
    assert_eq!(
        sample(samples, r#"hermes_units{status="running"}"#),
        count("running_count")
    );
    assert_eq!(
        sample(samples, r#"hermes_units{status="queued"}"#),
        count("queued_count")
    );
    assert_eq!(
        sample(samples, r#"hermes_units{status="completed"}"#),
        count("recent_count")
    );
    assert_eq!(sample(samples, "hermes_dispatches_total{}"), 3.0);
    assert_eq!(
        sample(samples, r#"hermes_completions_total{status="completed"}"#),
        1.0
    );
    assert_eq!(sample(samples, "hermes_deliveries_total{}"), 1.0);
    assert_eq!(sample(samples, "hermes_delivery_lag_seconds_count{}"), 1.0);
    assert_eq!(sample(samples, "hermes_start_wait_seconds_count{}"), 2.0);
    assert_eq!(sample(samples, r#"hermes_queue_depth{pool="nobody"}"#), 1.0);
    assert_eq!(
        sample(samples, r#"hermes_open_events{state="pending"}"#),
        0.0
    );
    let machine = h.json(&["delegation", "status", &running, "--json"])["tasks"][0]["machine"]
        .as_str()
        .expect("the running child's machine")
        .to_owned();
    assert_eq!(
        sample(
            samples,
            &format!(r#"hermes_running_children{{machine="{machine}"}}"#)
        ),
        1.0
    );
    assert_eq!(
        sample(
            samples,
            &format!(r#"hermes_live_hosts{{kind="headless",machine="{machine}"}}"#)
        ),
        1.0
    );
    // Series with nothing counted toward them are there, reading 0; no label is empty.
    for zero in [
        format!(r#"hermes_live_hosts{{kind="worker",machine="{machine}"}}"#),
        format!(r#"hermes_queue_depth{{machine="{machine}"}}"#),
        r#"hermes_units{status="stalled"}"#.to_owned(),
        r#"hermes_completions_total{status="timeout"}"#.to_owned(),
        r#"hermes_open_events{state="claimed"}"#.to_owned(),
        r#"hermes_live_workers{pool="nobody"}"#.to_owned(),
        "hermes_stalls_total{}".to_owned(),
    ] {
        assert_eq!(sample(samples, &zero), 0.0, "{zero}");
    }
    assert!(
        samples.keys().all(|k| !k.contains(r#"="""#)),
        "{samples:#?}"
    );
    h.run(&["session", "end", "s1"]);
}

#[test]
fn hermes_metrics_format_openmetrics_reads_with_the_openmetrics_parser_and_both_are_stable() {
    let (h, _running) = populated();
    let classic = h.run(&["metrics"]);
    let open = h.run(&["metrics", "--format", "openmetrics"]);
    assert_eq!(open.code, 0, "{}", open.stderr);
    assert!(open.stdout.ends_with("\n# EOF\n"), "{}", open.stdout);
    let parsed = parse_with_python(&open.stdout, Parser::OpenMetrics);
    assert_typed(&parsed);
    let classic = parse_with_python(&classic.stdout, Parser::Classic);
    assert_eq!(
        parsed.samples.keys().collect::<Vec<_>>(),
        classic.samples.keys().collect::<Vec<_>>(),
        "both formats carry the same series"
    );
    assert_eq!(sample(&parsed.samples, "hermes_dispatches_total{}"), 3.0);
    // The same ledger, the same bytes; families sorted by name.
    for format in ["prometheus", "openmetrics"] {
        let runs: Vec<String> = (0..3)
            .map(|_| h.run(&["metrics", "--format", format]).stdout)
            .collect();
        assert!(runs.iter().all(|r| *r == runs[0]), "{format}: {runs:#?}");
        let families: Vec<&str> = runs[0]
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .collect();
        let mut sorted = families.clone();
        sorted.sort_unstable();
        assert_eq!(families, sorted, "{format}");
    }
    let bad = h.run(&["metrics", "--format", "json"]);
    bad.assert_one_error_line(2);
    h.run(&["session", "end", "s1"]);
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A child process killed when dropped, so a failing test leaves none running.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `hermes ARGS… --metrics-listen 127.0.0.1:PORT` (a host or a worker), once its endpoint
/// answers; killed when dropped.
fn serving_metrics(h: &Hermes, args: &[&str], port: u16) -> Reaped {
    let listen = format!("127.0.0.1:{port}");
    let mut all = args.to_vec();
    all.extend(["--metrics-listen", listen.as_str()]);
    let process = h
        .command(&all)
        .stderr(Stdio::null())
        .spawn()
        .map(Reaped)
        .expect("the process serving metrics starts");
    wait_for(LIMIT, "the metrics endpoint", || {
        get(port, "/metrics").filter(|(code, _)| *code == 200)
    });
    process
}

/// An HTTP answer: its status code, `Content-Type` and body.
struct Answer {
    code: u16,
    content_type: String,
    body: String,
}

/// One HTTP GET on 127.0.0.1, with an `Accept` header if given.
fn fetch(port: u16, path: &str, accept: Option<&str>) -> Option<Answer> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{accept}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split(' ').nth(1)?.parse().ok()?;
    let content_type = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
        .map(|(_, value)| value.trim().to_owned())?;
    Some(Answer {
        code,
        content_type,
        body: body.to_owned(),
    })
}

/// One HTTP GET on 127.0.0.1; the status code and the body.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    fetch(port, path, None).map(|a| (a.code, a.body))
}

/// A Prometheus server on 127.0.0.1 scraping `target` every second; killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: u16) -> Prometheus {
        let binary = ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("these tests need a Prometheus server (Debian: apt-get install prometheus; .ci/run installs it)");
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: hermes\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
            ),
        )
        .expect("write the config");
        let port = free_port();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts");
        Prometheus {
            child,
            port,
            _dir: dir,
        }
    }

    /// The value of an instant query with one result, once Prometheus has it.
    fn value(&self, query: &str) -> Option<f64> {
        let encoded: String = query
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        let (code, body) = get(self.port, &format!("/api/v1/query?query={encoded}"))?;
        if code != 200 {
            return None;
        }
        let json: Value = serde_json::from_str(&body).ok()?;
        let result = json["data"]["result"].as_array()?;
        result.first()?["value"][1].as_str()?.parse().ok()
    }
}

impl Prometheus {
    /// Waits until Prometheus read every family with its type, asking for each alone (a short
    /// answer comes whole, where a long one would come in chunks).
    fn assert_typed(&self) {
        for (name, kind) in TYPES {
            let metadata = wait_for(LIMIT, &format!("Prometheus to know {name}'s type"), || {
                let (code, body) = get(self.port, &format!("/api/v1/metadata?metric={name}"))?;
                let json: Value = serde_json::from_str(&body).ok().filter(|_| code == 200)?;
                json["data"][name]
                    .as_array()
                    .map(|a| Value::Array(a.clone()))
            });
            assert_eq!(metadata[0]["type"], kind, "{name}: {metadata}");
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_real_prometheus_scrapes_a_worker_and_sees_what_the_json_list_says() {
    let h = Hermes::new();
    let port = free_port();
    let mut worker = serving_metrics(
        &h,
        &["worker", "--pool", "scraped", "--capacity", "1"],
        port,
    );
    let (code, _) = get(port, "/nothing").expect("an answer");
    assert_eq!(code, 404);
    // Nothing a client sends stops the endpoint: garbage, a head too long, a client that
    // leaves at once.
    for request in [
        b"\xff\xfe\x00garbage\r\n\r\n".to_vec(),
        vec![b'a'; 20_000],
        b"POST /metrics HTTP/1.1\r\n\r\n".to_vec(),
    ] {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let _ = stream.write_all(&request);
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(
            answer.starts_with("HTTP/1.1 400") || answer.starts_with("HTTP/1.1 405"),
            "{answer:?}"
        );
    }
    drop(TcpStream::connect(("127.0.0.1", port)).expect("connect"));
    assert_eq!(get(port, "/metrics").expect("still serving").0, 200);
    // The worker runs one unit; the second waits in the pool.
    for _ in 0..2 {
        let run = h.run(&[
            "delegate",
            "--json",
            "--session",
            "s2",
            "--pool",
            "scraped",
            "--",
            "sleep",
            "60",
        ]);
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    let list = wait_for(LIMIT, "one unit running and one queued", || {
        let list = h.json(&["delegation", "list", "--json"]);
        (list["running_count"] == 1 && list["queued_count"] == 1).then_some(list)
    });
    let prometheus = Prometheus::start(port);
    let expect = |query: &str, want: f64| {
        wait_for(
            LIMIT,
            &format!("Prometheus to see {query} = {want}"),
            || prometheus.value(query).filter(|v| *v == want),
        )
    };
    expect(
        r#"hermes_units{status="running"}"#,
        list["running_count"].as_f64().expect("n"),
    );
    expect(
        r#"hermes_units{status="queued"}"#,
        list["queued_count"].as_f64().expect("n"),
    );
    expect(r#"hermes_queue_depth{pool="scraped"}"#, 1.0);
    expect(r#"hermes_live_workers{pool="scraped"}"#, 1.0);
    expect(r#"hermes_pool_capacity{pool="scraped"}"#, 1.0);
    expect(r#"hermes_dispatches_total"#, 2.0);
    expect(r#"up{job="hermes"}"#, 1.0);
    // Series with nothing counted toward them are scraped too, reading 0.
    expect(r#"hermes_live_hosts{kind="headless"}"#, 0.0);
    expect(r#"hermes_completions_total{status="stalled"}"#, 0.0);
    prometheus.assert_typed();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(worker.0.id()).expect("pid")),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM the worker");
    let status = worker.0.wait().expect("the worker ends");
    assert!(status.success(), "{status}");
}

#[test]
fn a_headless_host_serves_metrics_that_match_the_json_list() {
    let h = Hermes::new();
    let port = free_port();
    let mut host = serving_metrics(&h, &["host", "--session", "s3"], port);
    let id = dispatch(&h, "s3", "long", "sleep 60");
    let status = h.json(&["delegation", "status", &id, "--json"]);
    assert_eq!(
        status["host_pid"].as_u64(),
        Some(u64::from(host.0.id())),
        "the unit runs in the host that serves the metrics"
    );
    let samples = wait_for(LIMIT, "the unit running in the metrics", || {
        let (_, body) = get(port, "/metrics")?;
        let samples = parse_with_python(&body, Parser::Classic).samples;
        (samples.get(r#"hermes_units{status="running"}"#) == Some(&1.0)).then_some(samples)
    });
    let list = h.json(&["delegation", "list", "--json"]);
    assert_eq!(list["running_count"], 1);
    assert_eq!(sample(&samples, "hermes_dispatches_total{}"), 1.0);
    assert!(
        sample(&samples, "hermes_ledger_commit_seconds_count{}") >= 1.0,
        "the host's own commits are timed"
    );
    assert_eq!(
        sample(&samples, "hermes_lease_renewal_failures_total{}"),
        0.0
    );
    h.run(&["session", "end", "s3"]);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(host.0.id()).expect("pid")),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM the host");
    assert!(host.0.wait().expect("the host ends").success());
}

/// What Prometheus 2.x sends when it scrapes.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

#[test]
fn the_endpoint_answers_in_the_format_the_accept_header_asks_for_and_keeps_a_gone_pool_at_0() {
    let h = Hermes::new();
    let port = free_port();
    let mut host = serving_metrics(&h, &["host", "--session", "s4"], port);
    // A unit waiting in a pool no worker serves, so every family has a series.
    let waiting = h.json(&[
        "delegate",
        "--json",
        "--session",
        "s4",
        "--pool",
        "gone",
        "--",
        "true",
    ])["delegation_id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let classic = "text/plain; version=0.0.4; charset=utf-8";
    let open = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    for (accept, content_type, parser) in [
        (None, classic, Parser::Classic),
        (Some("text/plain;version=0.0.4"), classic, Parser::Classic),
        (Some("*/*"), classic, Parser::Classic),
        (
            Some("application/openmetrics-text"),
            open,
            Parser::OpenMetrics,
        ),
        (Some(PROMETHEUS_ACCEPT), open, Parser::OpenMetrics),
        (
            Some("application/openmetrics-text;q=0.2, text/plain;q=0.9"),
            classic,
            Parser::Classic,
        ),
    ] {
        let answer = fetch(port, "/metrics", accept).expect("an answer");
        assert_eq!(answer.code, 200, "{accept:?}");
        assert_eq!(answer.content_type, content_type, "{accept:?}");
        assert_eq!(
            answer.body.ends_with("# EOF\n"),
            matches!(parser, Parser::OpenMetrics),
            "{accept:?}: {}",
            answer.body
        );
        let parsed = parse_with_python(&answer.body, parser);
        assert_typed(&parsed);
        assert_eq!(
            sample(&parsed.samples, r#"hermes_queue_depth{pool="gone"}"#),
            1.0
        );
    }
    // Once the pool has nothing queued and no worker, its series stay, reading 0.
    let stopped = h.run(&["delegation", "stop", &waiting]);
    assert_eq!(stopped.code, 0, "{}", stopped.stderr);
    let samples = wait_for(LIMIT, "the stopped unit in the metrics", || {
        let (_, body) = get(port, "/metrics")?;
        let samples = parse_with_python(&body, Parser::Classic).samples;
        (samples.get(r#"hermes_units{status="cancelled"}"#) == Some(&1.0)).then_some(samples)
    });
    assert_eq!(sample(&samples, r#"hermes_queue_depth{pool="gone"}"#), 0.0);
    assert_eq!(sample(&samples, r#"hermes_live_workers{pool="gone"}"#), 0.0);
    assert_eq!(
        sample(&samples, r#"hermes_pool_capacity{pool="gone"}"#),
        0.0
    );
    h.run(&["session", "end", "s4"]);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(host.0.id()).expect("pid")),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM the host");
    assert!(host.0.wait().expect("the host ends").success());
}
