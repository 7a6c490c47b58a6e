//! The conversation an MCP server serves: which sessions its tools act on, and which
//! delegations are its own.
//!
//! `HERMES_SESSION_ID` wins when set. Otherwise the session is looked up before every tool call
//! in the binding of the agent process that started the server (see `binding.rs`): the one its
//! hooks recorded, or — before any hook ran — a provisional session the server records for the
//! first hook to adopt.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher as _, Hasher as _};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ledger::{Delegation, DelegationId, HostClaim, Ledger, ProcessId, SessionId};
use router::{Router, RouterConfig};

use crate::binding::{Binding, Bindings};
use crate::exit::{Code, fail};
use crate::home::now;

/// The sessions of the conversation.
#[derive(Clone, Debug)]
pub struct Sessions {
    /// Where new work goes.
    pub current: SessionId,
    /// Every session whose results belong to the conversation, `current` first.
    pub all: Vec<SessionId>,
    /// Whether the agent named it (a hook, or `HERMES_SESSION_ID`): the session outlives this
    /// server and can be resumed. A provisional session nobody bound dies with the server.
    pub named: bool,
}

/// The server's view of its conversation.
#[derive(Debug)]
pub struct Conversation {
    ledger: Arc<Ledger>,
    me: ProcessId,
    bindings: Bindings,
    agent: ProcessId,
    fixed: Option<SessionId>,
    settings: settings::Settings,
    hosted: Mutex<HashSet<SessionId>>,
    inline: Mutex<HashSet<DelegationId>>,
    routers: Mutex<HashMap<SessionId, Arc<Router>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the server needs to know to find its conversation.
#[derive(Debug)]
pub struct Setup {
    /// The ledger.
    pub ledger: Arc<Ledger>,
    /// This process (the host of the conversation's children).
    pub me: ProcessId,
    /// The bindings of this home.
    pub bindings: Bindings,
    /// The agent process that started the server.
    pub agent: ProcessId,
    /// `HERMES_SESSION_ID`, when set.
    pub fixed: Option<SessionId>,
    /// The settings in force (claim lease and renewal of `delegation_results`).
    pub settings: settings::Settings,
}

impl Conversation {
    /// The conversation of `setup`.
    pub fn new(setup: Setup) -> Conversation {
        Conversation {
            ledger: setup.ledger,
            me: setup.me,
            bindings: setup.bindings,
            agent: setup.agent,
            fixed: setup.fixed,
            settings: setup.settings,
            hosted: Mutex::new(HashSet::new()),
            inline: Mutex::new(HashSet::new()),
            routers: Mutex::new(HashMap::new()),
        }
    }

    /// The ledger.
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// The sessions as they stand, without making any (`None`: no hook ran and nothing was
    /// dispatched yet).
    pub fn current(&self) -> Option<Sessions> {
        if let Some(id) = &self.fixed {
            return Some(Sessions {
                current: id.clone(),
                all: vec![id.clone()],
                named: true,
            });
        }
        self.bindings.read(self.agent).and_then(|b| sessions_of(&b))
    }

    /// The session new work goes to, made if needed (provisional until a hook adopts it),
    /// active, and hosted by this process unless another live process hosts it.
    pub fn session_for_dispatch(&self) -> anyhow::Result<SessionId> {
        let sessions = match self.current() {
            Some(s) => s,
            None => {
                let binding = self.bindings.resolve(self.agent, provisional_id)?;
                sessions_of(&binding).ok_or_else(|| {
                    fail(
                        Code::Usage,
                        format!(
                            "the binding of this agent names an invalid session {:?}",
                            binding.session
                        ),
                    )
                })?
            }
        };
        let session = sessions.current;
        if !lock(&self.hosted).contains(&session) {
            match self.ledger.claim_session_host(
                &session,
                self.me,
                &registry::OsReaper::new(),
                now(),
            )? {
                HostClaim::Acquired | HostClaim::AlreadyHeld => {}
                // Another live process hosts it (e.g. a headless host started by `hermes
                // delegate`); this server still runs what it dispatches itself.
                HostClaim::HeldBy(other) => {
                    tracing::info!(%session, host = %other, "session hosted elsewhere");
                }
            }
            lock(&self.hosted).insert(session.clone());
        }
        Ok(session)
    }

    /// Forgets the agent's binding (its provisional conversation ended with this server).
    pub fn forget(&self) -> anyhow::Result<()> {
        if self.fixed.is_none() {
            self.bindings.remove(self.agent)?;
        }
        Ok(())
    }

    /// Remembers an inline (`background: false`) unit as this conversation's.
    pub fn add_inline(&self, id: DelegationId) {
        lock(&self.inline).insert(id);
    }

    /// Whether `unit` belongs to this conversation.
    pub fn owns(&self, unit: &Delegation) -> bool {
        if lock(&self.inline).contains(&unit.id) {
            return true;
        }
        match (&unit.session, self.current()) {
            (Some(s), Some(sessions)) => sessions.all.contains(s),
            _ => false,
        }
    }

    /// The unit `raw` names, if it is this conversation's.
    pub fn own_unit(&self, raw: &str) -> anyhow::Result<Delegation> {
        let id = DelegationId::new(raw.to_owned()).map_err(|e| fail(Code::Usage, e.to_string()))?;
        match self.ledger.delegation(&id)? {
            Some(unit) if self.owns(&unit) => Ok(unit),
            _ => Err(fail(
                Code::NotFound,
                format!("delegation {id} not found in this conversation"),
            )),
        }
    }

    /// The router consuming `session` for this server: one per session, so concurrent
    /// `delegation_results` calls share one routing reservation.
    pub fn router(&self, session: &SessionId) -> Arc<Router> {
        let mut routers = lock(&self.routers);
        routers
            .entry(session.clone())
            .or_insert_with(|| {
                Arc::new(Router::new(
                    self.ledger.clone(),
                    RouterConfig::from_settings(
                        session.clone(),
                        format!("mcp:{}:{}", self.me.pid, self.me.start_time),
                        &self.settings,
                    ),
                ))
            })
            .clone()
    }
}

fn sessions_of(binding: &Binding) -> Option<Sessions> {
    let all = binding.sessions();
    Some(Sessions {
        current: all.first()?.clone(),
        named: binding.is_bound(),
        all,
    })
}

/// A fresh provisional session id, `mcp-` and 12 hex digits.
fn provisional_id() -> String {
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!("mcp-{:012x}", bits & 0xffff_ffff_ffff)
}
