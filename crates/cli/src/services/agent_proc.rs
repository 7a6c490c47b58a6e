//! Which process is "the agent" of a hermes process: its hooks and its MCP server
//! must find the same one, however the agent started them.
//!
//! Walking up from the parent, each ancestor is
//! - an agent CLI, recognized by its executable name (of every agent of `hermes_agents`) in its
//!   command name, `argv[0]` or, for a script run by an interpreter, `argv[1]`, or by a script
//!   marker of its own in those: that is the agent, even when it runs on an interpreter (`node`);
//! - a wrapper — a shell, a command wrapper (`env`, `nohup`, `timeout`), a launcher or
//!   interpreter (`npx`, `npm`, `uvx`, `node`, `python3`, `cargo`, `mise`, …), judged by its
//!   command name and by the program it executes (`/proc/PID/exe`, so a wrapper *script* with
//!   a name of its own counts as the shell that runs it): walked past;
//! - anything else: taken as the agent (an agent hermes has no profile for).
//!
//! With no such ancestor, the parent is the agent.
//!
//! The agent's own environment is the person's: agents start MCP servers with less of it (a
//! fixed whitelist, or without any variable named like a secret), while its hooks get all of it. [`environment_missing_here`] is what a child would lack.

use std::ffi::OsString;
use std::fs;

use hermes_ledger::ProcessId;

/// Command names and executables that only stand between an agent and what it starts.
const WRAPPERS: &[&str] = &[
    // shells
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "fish",
    "busybox",
    "ash",
    // command wrappers
    "env",
    "nohup",
    "timeout",
    "stdbuf",
    "nice",
    "ionice",
    "setsid",
    "time",
    "xargs",
    "sudo",
    "doas",
    "script",
    "tini",
    "dumb-init",
    "chrt",
    "taskset",
    "flock",
    "unbuffer",
    // launchers and interpreters
    "npx",
    "npm",
    "pnpm",
    "pnpx",
    "yarn",
    "bun",
    "bunx",
    "deno",
    "node",
    "nodejs",
    "tsx",
    "ts-node",
    "uv",
    "uvx",
    "pipx",
    "python",
    "python3",
    "pypy3",
    "ruby",
    "perl",
    "cargo",
    "rustup",
    "mise",
    "asdf",
    "rtx",
    "direnv",
    "nix",
    "nix-shell",
    "devbox",
    "pkgx",
    "volta",
    "fnm",
    "docker-init",
];

/// What the walk needs to know of one process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Proc {
    /// Its pid.
    pub pid: u32,
    /// Its parent's pid.
    pub ppid: u32,
    /// Its start time (clock ticks since boot).
    pub start_time: u64,
    /// Its command name (`/proc/PID/comm`, at most 15 bytes).
    pub comm: String,
    /// The base name of the program it executes (`/proc/PID/exe`), when readable.
    pub exe: Option<String>,
    /// Its arguments.
    pub argv: Vec<String>,
}

impl Proc {
    fn is_agent(&self, agents: &[&str]) -> bool {
        self.is_named(agents) || self.has_marker(hermes_agents::script_markers())
    }

    /// Whether it runs as one of `names` (itself, or a script its interpreter runs).
    fn is_named(&self, names: &[&str]) -> bool {
        let named = |s: &str| names.contains(&base(s));
        named(&self.comm)
            || self.argv.first().is_some_and(|a| named(a))
            || (self.runs_a_script() && self.argv.get(1).is_some_and(|a| named(a)))
    }

    /// Whether one of `markers` is in its first two words.
    fn has_marker<'a>(&self, mut markers: impl Iterator<Item = &'a str>) -> bool {
        markers.any(|m| self.argv.iter().take(2).any(|a| a.contains(m)))
    }

    fn runs_a_script(&self) -> bool {
        self.exe.as_deref().is_some_and(is_wrapper_name) || is_wrapper_name(&self.comm)
    }

    fn is_wrapper(&self) -> bool {
        is_wrapper_name(&self.comm) || self.exe.as_deref().is_some_and(is_wrapper_name)
    }
}

fn base(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn is_wrapper_name(name: &str) -> bool {
    let name = base(name);
    WRAPPERS.contains(&name)
        || name
            .strip_prefix("python3.")
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit()))
}

/// The agent process of this process.
pub fn agent_process() -> ProcessId {
    let parent = std::os::unix::process::parent_id();
    let agents: Vec<&str> = hermes_agents::executables().collect();
    let chain = ancestors(parent, read_proc);
    match find_agent(&chain, &agents) {
        Some(p) => ProcessId {
            pid: p.pid,
            start_time: p.start_time,
        },
        None => ProcessId {
            pid: parent,
            start_time: hermes_registry::procs::process_start_time(parent).unwrap_or(0),
        },
    }
}

/// The variables of `agent`'s environment (the one it was started with) that this process does
/// not have: what an agent withheld from the MCP server it started, for the children the
/// server dispatches. hermes' own (`HERMES_*`: this process's home and session say which are
/// in force) and libpq's (`PG*`: the ledger's connection is the dispatching process's) are left out. The values
/// go to a child's environment only: nothing logs or stores them.
pub fn environment_missing_here(agent: ProcessId) -> Vec<(OsString, OsString)> {
    let Some(theirs) = hermes_registry::procs::environment(agent) else {
        return Vec::new();
    };
    theirs
        .into_iter()
        .filter(|(name, _)| {
            let text = name.to_string_lossy();
            // hermes' own settings and libpq's (`PGHOST`, `PGPASSFILE`, `PGSSLMODE`, …, which the
            // ledger reads) are the dispatching process's, never the agent's.
            !text.starts_with("HERMES_")
                && !text.starts_with("PG")
                && std::env::var_os(name).is_none()
        })
        .collect()
}

/// The profile of the agent CLI that `agent` runs, when it is one hermes knows by an
/// executable name (and the process is still the one recorded).
pub fn profile_of(agent: ProcessId) -> Option<&'static hermes_agents::Agent> {
    let proc = read_proc(agent.pid).filter(|p| p.start_time == agent.start_time)?;
    hermes_agents::AGENTS
        .iter()
        .copied()
        .find(|a| proc.is_named(a.executables) || proc.has_marker(a.script_markers.iter().copied()))
}

/// The agent among `chain` (nearest ancestor first); see the module's documentation.
pub fn find_agent<'a>(chain: &'a [Proc], agents: &[&str]) -> Option<&'a Proc> {
    chain.iter().find(|p| p.is_agent(agents) || !p.is_wrapper())
}

/// `pid` and its ancestors, nearest first (at most 64, stopping below init).
pub fn ancestors(pid: u32, read: impl Fn(u32) -> Option<Proc>) -> Vec<Proc> {
    let mut chain = Vec::new();
    let mut pid = pid;
    for _ in 0..64 {
        let Some(p) = read(pid) else { break };
        let next = p.ppid;
        chain.push(p);
        if next <= 1 {
            break;
        }
        pid = next;
    }
    chain
}

/// One process from `/proc`.
pub fn read_proc(pid: u32) -> Option<Proc> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_owned();
    let fields: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // A binary replaced since the process started (an upgrade) reads `NAME (deleted)`: it is
    // still the program it was.
    let exe = fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .and_then(|p| {
            let name = p.file_name()?.to_string_lossy().into_owned();
            Some(match name.strip_suffix(" (deleted)") {
                Some(kept) => kept.to_owned(),
                None => name,
            })
        });
    let argv = fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .take(4)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default();
    Some(Proc {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
        comm,
        exe,
        argv,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: u32, comm: &str, exe: &str, argv: &[&str]) -> Proc {
        Proc {
            pid,
            ppid: pid + 1,
            start_time: 7,
            comm: comm.into(),
            exe: Some(exe.into()),
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    const AGENTS: &[&str] = &["agent-a", "agent-b"];

    #[test]
    fn launchers_and_interpreters_are_walked_past() {
        // agent-a → sh -c → npx (node) → sh → hermes mcp
        let chain = [
            p(1, "sh", "dash", &["sh", "-c", "hermes mcp"]),
            p(2, "npm exec herme", "node", &["npm exec hermes"]),
            p(3, "sh", "bash", &["sh", "-c", "npx hermes"]),
            p(4, "agent-a", "agent-a", &["agent-a"]),
            p(5, "zsh", "zsh", &["-zsh"]),
        ];
        assert_eq!(find_agent(&chain, AGENTS).map(|p| p.pid), Some(4));
    }

    #[test]
    fn a_wrapper_script_counts_as_its_shell() {
        let chain = [
            p(1, "run-hermes.sh", "dash", &["/bin/sh", "./run-hermes.sh"]),
            p(2, "uvx", "uv", &["uvx", "x"]),
            p(3, "cargo", "cargo", &["cargo", "run"]),
            p(4, "my-agent", "my-agent", &["my-agent"]),
        ];
        assert_eq!(find_agent(&chain, AGENTS).map(|p| p.pid), Some(4));
    }

    #[test]
    fn an_agent_on_an_interpreter_is_recognized_by_name() {
        let chain = [
            p(1, "sh", "dash", &["sh"]),
            p(
                2,
                "node",
                "node",
                &["node", "/usr/local/bin/agent-a", "--resume"],
            ),
            p(3, "bash", "bash", &["bash"]),
        ];
        assert_eq!(find_agent(&chain, AGENTS).map(|p| p.pid), Some(2));
        // An agent run by `node` from its package, found by its script marker.
        for marker in hermes_agents::script_markers() {
            let script = format!("/usr/lib/node_modules/@vendor{marker}cli.js");
            let npm = [p(9, "node", "node", &["node", &script])];
            assert_eq!(find_agent(&npm, AGENTS).map(|p| p.pid), Some(9), "{script}");
        }
    }

    #[test]
    fn every_profiles_agent_is_found_by_its_executable_name() {
        let agents: Vec<&str> = hermes_agents::executables().collect();
        // Node CLIs installed by npm run as `node /usr/local/bin/NAME`; others are binaries,
        // or name their process.
        for name in &agents {
            let bin = format!("/usr/local/bin/{name}");
            for (comm, exe, argv) in [
                ("node", "node", vec!["node", bin.as_str(), "--resume"]),
                (*name, "node", vec![*name]),
                (*name, *name, vec![*name, "resume"]),
            ] {
                let chain = [
                    p(1, "sh", "dash", &["sh", "-c", "hermes hook stop"]),
                    p(2, "npx", "node", &["npx", "hermes"]),
                    p(3, comm, exe, &argv),
                    p(4, "zsh", "zsh", &["-zsh"]),
                ];
                assert_eq!(
                    find_agent(&chain, &agents).map(|p| p.pid),
                    Some(3),
                    "{argv:?}"
                );
            }
        }
    }

    #[test]
    fn a_python_agent_is_recognized_past_its_mcp_watchdog() {
        // Hermes Agent: `python …/bin/hermes chat` runs `hermes mcp` under
        // `python …/tools/mcp_stdio_watchdog.py` (its console script is named like hermes' own
        // binary, so it is found by its script marker).
        let chain = [
            p(
                1,
                "python3",
                "python3.11",
                &[
                    "/venv/bin/python3",
                    "/venv/lib/python3.11/site-packages/tools/mcp_stdio_watchdog.py",
                    "--ppid",
                    "2",
                ],
            ),
            p(
                2,
                "hermes",
                "python3.11",
                &["/venv/bin/python3", "/venv/bin/hermes", "chat"],
            ),
            p(3, "bash", "bash", &["bash"]),
            p(4, "tmux: server", "tmux", &["tmux"]),
        ];
        let agents: Vec<&str> = hermes_agents::executables().collect();
        assert_eq!(find_agent(&chain, &agents).map(|p| p.pid), Some(2));
        // Its plugin's `hermes hook` is its direct child.
        assert_eq!(find_agent(&chain[1..], &agents).map(|p| p.pid), Some(2));
    }

    #[test]
    fn the_walk_reads_this_process_tree() {
        let me = std::process::id();
        let chain = ancestors(me, read_proc);
        assert_eq!(chain.first().map(|p| p.pid), Some(me));
        assert!(chain.windows(2).all(|w| w[0].ppid == w[1].pid));
    }
}
