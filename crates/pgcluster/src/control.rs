//! Stopping and starting a running cluster's server in place (same directory, port and
//! password), for runs that inject outages: `cargo xtask soak` restarts the server, or stops it,
//! waits and starts it again, under live hermes processes.

use crate::os::checked;
use crate::{Cluster, DEADLINE};

/// How `pg_ctl` stops the server (its `-m`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopMode {
    /// Ends every session at once (`SIGINT`), with a shutdown checkpoint: an operator's restart.
    Fast,
    /// Kills the server without a checkpoint (`SIGQUIT`): a crash; the next start recovers
    /// from the write-ahead log.
    Immediate,
}

impl StopMode {
    fn as_str(self) -> &'static str {
        match self {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        }
    }
}

impl Cluster {
    /// Restarts the server (`pg_ctl restart -m MODE`) on the same port, returning once it
    /// accepts connections again.
    pub fn restart(&self, mode: StopMode) -> crate::Result<()> {
        let out = self
            .pg_ctl_up("restart")
            .args(["-m", mode.as_str()])
            .output();
        checked("pg_ctl restart", out)?;
        self.wait_ready()
    }

    /// Stops the server (`pg_ctl stop -m MODE`), leaving its directory for
    /// [`Cluster::start_again`].
    pub fn stop_server(&self, mode: StopMode) -> crate::Result<()> {
        let out = self
            .pg_ctl("stop")
            .args(["-m", mode.as_str()])
            .args(["-w", "-t", &DEADLINE.as_secs().to_string()])
            .output();
        checked("pg_ctl stop", out).map(|_| ())
    }

    /// Starts a server [`Cluster::stop_server`] stopped, on its port, returning once it
    /// accepts connections.
    pub fn start_again(&self) -> crate::Result<()> {
        let out = self.pg_ctl_up("start").output();
        checked("pg_ctl start", out)?;
        self.wait_ready()
    }

    /// `pg_ctl ACTION -D DATA`, as the server's user.
    fn pg_ctl(&self, action: &str) -> std::process::Command {
        let mut command = self.as_server(&self.bin.join("pg_ctl"));
        command.arg(action).arg("-D").arg(self.data());
        command
    }

    /// `pg_ctl start|restart` of this cluster: logging to its log, on its port, waiting (up
    /// to the deadline) for the server's "ready" mark in `postmaster.pid`.
    pub(crate) fn pg_ctl_up(&self, action: &str) -> std::process::Command {
        let mut command = self.pg_ctl(action);
        command
            .arg("-l")
            .arg(self.log())
            .arg("-o")
            .arg(format!("-p {}", self.port))
            .args(["-w", "-t", &DEADLINE.as_secs().to_string()]);
        command
    }
}
