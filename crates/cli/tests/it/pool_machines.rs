//! Worker pools over several machines sharing one PostgreSQL ledger: three
//! "machines" (homes whose worker runs as the only hermes process of a pid namespace of its
//! own, all started in the same instant, so each is pid 2 of its namespace with the others'
//! start time) serve one pool; a session on a fourth home dispatches a burst into it and drains
//! the results. These run against the throwaway test server whatever the backend under test.
//!
//! Every child records, in a directory of the test, when it started and ended and on which
//! machine (`POOL_MACHINE`, inherited from its worker): what ran where, and at once, is read
//! from those records, since a worker's pid says nothing across pid namespaces.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{Hermes, Machine, wait_for};
use serde_json::Value;

/// Short leases (a lost machine's units are recovered within seconds), renewed every second
/// (at most half the lease, so a loaded test machine does not fence a live worker).
const TIMINGS: [(&str, &str); 3] = [
    ("HERMES_HOST_RECOVERY_INTERVAL_SECONDS", "0.5"),
    ("HERMES_HOST_LEASE_SECONDS", "5"),
    ("HERMES_HOST_HEARTBEAT_SECONDS", "1"),
];

const POOL: &str = "far";
/// Slots of each worker.
const CAPACITY: usize = 2;
const MACHINES: [&str; 3] = ["m1", "m2", "m3"];
const LIMIT: Duration = Duration::from_secs(90);

/// Three machines, each running one worker of `POOL` with `CAPACITY` slots, and the home a
/// session dispatches from; all on one fresh database.
struct Cluster {
    dispatcher: Hermes,
    homes: Vec<Hermes>,
    machines: Vec<Machine>,
    /// Where the children record what they did.
    records: tempfile::TempDir,
}

impl Cluster {
    /// Starts the three workers at once: each machine's shell (its namespace's pid 1) waits at
    /// one gate, and all are let through together, so each worker is pid 2 of its namespace,
    /// started within a clock tick of the others — as containers started together on one node
    /// are. Each must register and serve, none taken for another.
    fn start() -> Cluster {
        let url = hermes_testkit::fresh_database(&hermes_testkit::pg_admin_url());
        let dispatcher = Hermes::sharing(&url);
        let records = tempfile::tempdir().expect("records dir");
        let mut cluster = Cluster {
            dispatcher,
            homes: Vec::new(),
            machines: Vec::new(),
            records,
        };
        let gate = Gate::new(cluster.records.path());
        for name in MACHINES {
            let home = Hermes::sharing(&url);
            let log = home.path().join("worker.log");
            // The shell stays pid 1 (the worker is not exec'd): it reaps what it must, and
            // killing it loses the whole machine. `read` is a builtin: nothing is forked before
            // the worker, which is pid 2.
            let script = format!(
                "read go < '{gate}'; \
                 \"$HERMES\" worker --pool {POOL} --capacity {CAPACITY} 2>'{log}'; \
                 echo \"worker exited $?\" >>'{log}'",
                gate = gate.path.display(),
                log = log.display()
            );
            let mut env: Vec<(&str, &str)> = TIMINGS.to_vec();
            env.push(("POOL_MACHINE", name));
            cluster.machines.push(Machine::start(&home, &script, &env));
            cluster.homes.push(home);
        }
        for machine in &cluster.machines {
            gate.wait_for_reader(machine.init_pid());
        }
        gate.open();
        cluster.wait_for_workers(MACHINES.len());
        cluster
    }

    /// Waits until the dispatching home sees `n` live workers of the pool, each in a pid
    /// namespace of its own; a worker that exited fails the test at once.
    fn wait_for_workers(&self, n: usize) {
        wait_for(LIMIT, &format!("{n} live workers"), || {
            let logs = self.logs();
            assert!(!logs.contains("worker exited"), "a worker exited:\n{logs}");
            let listed = self.dispatcher.json(&["worker", "list", "--json"]);
            let workers = listed["workers"].as_array()?.clone();
            let namespaces: BTreeSet<String> = workers
                .iter()
                .filter(|w| w["pool"] == POOL && w["capacity"] == CAPACITY as u64)
                .map(|w| w["locality"]["pid_namespace"].to_string())
                .collect();
            (workers.len() == n && namespaces.len() == n).then_some(())
        });
    }

    /// The live workers the dispatching home sees, by pid namespace: how many units each runs.
    fn running_by_namespace(&self) -> BTreeMap<String, u64> {
        let listed = self.dispatcher.json(&["worker", "list", "--json"]);
        listed["workers"]
            .as_array()
            .expect("workers")
            .iter()
            .map(|w| {
                (
                    w["locality"]["pid_namespace"].to_string(),
                    w["running"].as_u64().expect("running"),
                )
            })
            .collect()
    }

    /// Dispatches a pool unit into session `S` that records its start, runs `pause` (shell),
    /// records its end and says where it ran.
    fn dispatch(&self, pause: &str) -> String {
        let dir = self.records.path().display();
        let script = format!(
            "echo $(date +%s%N) > '{dir}/'$HERMES_DELEGATION_ID.$POOL_MACHINE.start; \
             {pause}; \
             echo $(date +%s%N) > '{dir}/'$HERMES_DELEGATION_ID.$POOL_MACHINE.end; \
             echo ran-on-$POOL_MACHINE"
        );
        let run = self.dispatcher.run_env(
            &[
                "delegate",
                "--session",
                "S",
                "--pool",
                POOL,
                "--json",
                "--",
                "sh",
                "-c",
                &script,
            ],
            &TIMINGS,
        );
        assert_eq!(run.code, 0, "{}", run.stderr);
        let handle = run.json();
        assert_eq!(handle["status"], "queued", "{handle}");
        assert_eq!(handle["pool"], POOL, "{handle}");
        handle["delegation_id"].as_str().expect("id").to_owned()
    }

    /// What the children recorded so far.
    fn records(&self) -> Records {
        Records::read(self.records.path())
    }

    /// Every worker's log, for a failure's message.
    fn logs(&self) -> String {
        self.homes
            .iter()
            .zip(MACHINES)
            .map(|(h, name)| {
                let log = std::fs::read_to_string(h.path().join("worker.log")).unwrap_or_default();
                format!("--- worker log of {name}:\n{log}")
            })
            .collect()
    }

    /// Drains session `S` until every unit of `ids` was delivered; returns, by unit, how many
    /// times it was delivered and its delivered text.
    fn drain_all(&self, ids: &BTreeSet<String>) -> BTreeMap<String, (u32, String)> {
        let mut seen: BTreeMap<String, (u32, String)> = BTreeMap::new();
        let deadline = Instant::now() + LIMIT;
        while ids.iter().any(|id| !seen.contains_key(id)) {
            assert!(
                Instant::now() < deadline,
                "not all delivered: {:?} of {ids:?}\n{}",
                seen.keys(),
                self.logs()
            );
            let run = self.dispatcher.run_env(
                &["drain", "--session", "S", "--json", "--wait", "2"],
                &TIMINGS,
            );
            assert_eq!(run.code, 0, "{}", run.stderr);
            for envelope in run.json()["envelopes"].as_array().expect("envelopes") {
                let id = envelope["delegation_id"].as_str().expect("id").to_owned();
                assert!(ids.contains(&id), "unexpected delivery {id}");
                let text = envelope["text"].as_str().expect("text").to_owned();
                let entry = seen.entry(id).or_default();
                entry.0 += 1;
                entry.1 = text;
            }
        }
        let again = self
            .dispatcher
            .run_env(&["drain", "--session", "S", "--json"], &TIMINGS);
        assert_eq!(again.json()["envelopes"], Value::Array(Vec::new()));
        seen
    }

    fn status(&self, id: &str) -> Value {
        self.dispatcher
            .json(&["delegation", "status", id, "--json"])
    }
}

/// A gate the machines' shells wait at: a FIFO this test holds open for writing. Each shell's
/// `read` blocks on it until the test closes its end, when every reader sees end-of-file at
/// the same moment.
struct Gate {
    path: PathBuf,
    writer: Option<std::fs::File>,
}

impl Gate {
    fn new(dir: &Path) -> Gate {
        let path = dir.join("gate");
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: mkfifo(3) on a NUL-terminated path this test owns.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
        // Read and write: opening does not wait for a reader, and the readers' opens find a
        // writer, so they block in `read` rather than in `open`.
        let writer = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("the gate opens");
        Gate {
            path,
            writer: Some(writer),
        }
    }

    /// Waits until `pid` has the gate open (its shell waits at it).
    fn wait_for_reader(&self, pid: u32) {
        wait_for(LIMIT, "a machine's shell at the gate", || {
            let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
            fds.filter_map(Result::ok)
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|to| to == self.path))
                .then_some(())
        });
    }

    /// Lets every waiting shell through at once.
    fn open(mut self) {
        self.writer.take();
    }
}

/// The statuses a delivered text reports, one per task (`Status: <status>   Progress: …`).
fn statuses(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("Status: "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// One child's run as it recorded it: where, and from when to when (ns since the epoch).
#[derive(Clone, Debug)]
struct Run {
    unit: String,
    machine: String,
    start: u128,
    end: Option<u128>,
}

struct Records(Vec<Run>);

impl Records {
    fn read(dir: &Path) -> Records {
        let mut runs: BTreeMap<(String, String), Run> = BTreeMap::new();
        let stamp = |path: &PathBuf| -> Option<u128> {
            std::fs::read_to_string(path).ok()?.trim().parse().ok()
        };
        let entries = std::fs::read_dir(dir).expect("records dir");
        for path in entries.map(|e| e.expect("entry").path()) {
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            // `<unit>.<machine>.start|end`; a file being written may not parse yet.
            let mut parts = name.rsplitn(3, '.');
            let (Some(what), Some(machine), Some(unit)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let Some(at) = stamp(&path) else { continue };
            let run = runs
                .entry((unit.to_owned(), machine.to_owned()))
                .or_insert_with(|| Run {
                    unit: unit.to_owned(),
                    machine: machine.to_owned(),
                    start: 0,
                    end: None,
                });
            match what {
                "start" => run.start = at,
                "end" => run.end = Some(at),
                _ => {}
            }
        }
        Records(runs.into_values().filter(|r| r.start > 0).collect())
    }

    fn on(&self, machine: &str) -> Vec<&Run> {
        self.0.iter().filter(|r| r.machine == machine).collect()
    }

    /// The most children that ran at one moment, and the most machines that did.
    fn peak(&self) -> (usize, usize) {
        let mut peak = (0, 0);
        for at in self.0.iter().map(|r| r.start) {
            let running: Vec<&Run> = self
                .0
                .iter()
                .filter(|r| r.start <= at && r.end.is_none_or(|end| end > at))
                .collect();
            let machines: BTreeSet<&str> = running.iter().map(|r| r.machine.as_str()).collect();
            peak = (peak.0.max(running.len()), peak.1.max(machines.len()));
        }
        peak
    }

    /// From the first child's start to the last one's end.
    fn span(&self) -> Duration {
        let first = self.0.iter().map(|r| r.start).min().unwrap_or(0);
        let last = self.0.iter().filter_map(|r| r.end).max().unwrap_or(first);
        Duration::from_nanos(u64::try_from(last - first).unwrap_or(u64::MAX))
    }
}

#[test]
fn three_workers_started_at_once_all_serve_a_burst_that_runs_on_every_machine_and_arrives_once() {
    let cluster = Cluster::start();
    const UNITS: u32 = 12;
    const SECONDS: u32 = 2;
    let pause = format!("sleep {SECONDS}");
    // One worker with its slots would need this long for the children alone.
    let one_worker = Duration::from_secs(u64::from(UNITS * SECONDS) / CAPACITY as u64);

    let started = Instant::now();
    let ids: BTreeSet<String> = (0..UNITS).map(|_| cluster.dispatch(&pause)).collect();
    let delivered = cluster.drain_all(&ids);
    let wall = started.elapsed();

    for (id, (times, text)) in &delivered {
        assert_eq!(*times, 1, "{id} delivered {times} times");
        assert_eq!(statuses(text), ["completed"], "{id}: {text}");
        assert!(text.contains("ran-on-m"), "{id}: {text}");
    }
    let records = cluster.records();
    assert_eq!(
        records.0.len(),
        UNITS as usize,
        "each unit ran once: {:?}",
        records.0
    );
    for id in &ids {
        let s = cluster.status(id);
        assert_eq!(s["status"], "completed", "{s}");
        assert_eq!(s["pool"], POOL, "{s}");
        assert!(s["worker"]["pid"].is_u64(), "a worker ran it: {s}");
    }
    let (children, machines) = records.peak();
    eprintln!(
        "{UNITS} units of `sleep {SECONDS}` on 3 workers x {CAPACITY}: first dispatch to last \
         delivery {:.2}s, children from first start to last end {:.2}s (one worker needs at \
         least {}s); at most {children} children on {machines} machines at once",
        wall.as_secs_f64(),
        records.span().as_secs_f64(),
        one_worker.as_secs()
    );
    for name in MACHINES {
        assert!(
            !records.on(name).is_empty(),
            "{name} ran nothing: {:?}",
            records.0
        );
    }
    assert_eq!(
        machines, 3,
        "the three machines ran units at once: {:?}",
        records.0
    );
    assert!(
        children <= 3 * CAPACITY,
        "more children at once than the slots: {:?}",
        records.0
    );
    // How long it took is printed above, not asserted: the three machines running at once
    // is what shows the burst spread (the times depend on how loaded this machine is).
}

#[test]
fn a_machine_lost_mid_run_leaves_its_running_units_unknown_and_the_others_finish_the_burst() {
    let mut cluster = Cluster::start();
    const UNITS: u32 = 12;
    // The victim's children never end on their own (however slowly this test gets to the
    // loss): it runs exactly the first two units it takes, both when it is lost.
    let victim = 1;
    let pause = format!(
        "if [ \"$POOL_MACHINE\" = {} ]; then sleep 300; fi; sleep 2",
        MACHINES[victim]
    );
    let ids: BTreeSet<String> = (0..UNITS).map(|_| cluster.dispatch(&pause)).collect();

    // The victim fills its slots, and the ledger knows its children started (a child that
    // never started would go back to the pool instead).
    let doomed: BTreeSet<String> = wait_for(LIMIT, "the victim's children to start", || {
        let doomed: BTreeSet<String> = cluster
            .records()
            .on(MACHINES[victim])
            .iter()
            .map(|r| r.unit.clone())
            .collect();
        (doomed.len() == CAPACITY).then_some(doomed)
    });
    for id in &doomed {
        wait_for(LIMIT, "the ledger to record the child's start", || {
            cluster.status(id)["tasks"][0]["pid"].as_u64()
        });
    }
    // The other machines take units too (within a round of `sleep 2` each, however loaded
    // this machine is).
    wait_for(LIMIT, "units to run on several machines", || {
        let busy = cluster.running_by_namespace();
        (busy.values().filter(|running| **running > 0).count() >= 2).then_some(())
    });
    cluster.machines[victim].lose();
    let lost_at = Instant::now();

    let delivered = cluster.drain_all(&ids);
    let records = cluster.records();
    for (id, (times, text)) in &delivered {
        assert_eq!(*times, 1, "{id} delivered {times} times");
        let s = cluster.status(id);
        let runs: Vec<&Run> = records.0.iter().filter(|r| &r.unit == id).collect();
        if doomed.contains(id) {
            assert_eq!(statuses(text), ["unknown"], "{id}: {text}");
            assert_eq!(s["status"], "unknown", "{s}");
            assert_eq!(runs.len(), 1, "run once, on the lost machine: {runs:?}");
        } else {
            assert_eq!(
                statuses(text),
                ["completed"],
                "{id}: {text}\n{}",
                cluster.logs()
            );
            assert_eq!(s["status"], "completed", "{s}");
            assert_eq!(runs.len(), 1, "{id} ran once: {runs:?}");
            assert_ne!(runs[0].machine, MACHINES[victim], "{id} ran on a survivor");
        }
    }
    eprintln!(
        "lost machine: every result delivered {:.2}s after the loss",
        lost_at.elapsed().as_secs_f64()
    );
    // The lost worker leaves the list once its lease ran out; the survivors remain.
    wait_for(LIMIT, "the lost worker to leave the list", || {
        (cluster.running_by_namespace().len() == 2).then_some(())
    });
}
