//! The conversation an MCP server serves: which sessions its tools act on, and which
//! delegations are its own.
//!
//! `HERMES_SESSION_ID` wins when set. Otherwise the session is looked up before every tool call
//! in the binding of the agent process that started the server (see `binding.rs`): the one its
//! hooks recorded, or — before any hook ran — a provisional session the server records for the
//! first hook to adopt.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher as _, Hasher as _};
use std::sync::{Arc, Mutex};

use hermes_ledger::{DelegationId, HostClaim, Ledger, ProcessId, SessionId, UnitRecord};
use hermes_router::{Router, RouterConfig};
use hermes_stdx::lock;

use super::tools::ANSWER_BUDGET;
use crate::services::binding::{Bindings, Resolved};
use crate::services::exit::{Code, fail};
use crate::services::home::now;

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
    settings: hermes_settings::Settings,
    hosted: Mutex<HashSet<SessionId>>,
    inline: Mutex<HashSet<DelegationId>>,
    routers: Mutex<HashMap<SessionId, Arc<Router>>>,
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
    pub settings: hermes_settings::Settings,
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
    /// dispatched yet). `wanted` is the call's `session` argument: it must name one of the
    /// agent's conversations; without it, a server whose agent runs several conversations
    /// refuses to guess.
    pub fn current(&self, wanted: Option<&str>) -> anyhow::Result<Option<Sessions>> {
        if let Some(id) = &self.fixed {
            check_fixed(id, wanted)?;
            return Ok(Some(Sessions {
                current: id.clone(),
                all: vec![id.clone()],
                named: true,
            }));
        }
        let Some(binding) = self.bindings.read(self.agent) else {
            return match wanted {
                Some(w) => Err(not_ours(w)),
                None => Ok(None),
            };
        };
        if let Some(w) = wanted {
            return match binding.conversation(w) {
                Some(c) => Ok(sessions_of(c.sessions(), true)),
                None => Err(not_ours(w)),
            };
        }
        match binding.conversations.as_slice() {
            [one] => Ok(sessions_of(one.sessions(), true)),
            [] => Ok(binding
                .provisional
                .and_then(|p| SessionId::new(p).ok())
                .and_then(|p| sessions_of(vec![p], false))),
            many => Err(several(many.iter().map(|c| c.session.as_str()))),
        }
    }

    /// The agent profile this server's agent runs hooks as, once a hook has run.
    pub fn agent(&self) -> Option<String> {
        if self.fixed.is_some() {
            return None;
        }
        self.bindings.read(self.agent)?.agent
    }

    /// The profile of this server's agent: the one its hooks named, else the agent CLI its
    /// process is.
    pub fn profile(&self) -> Option<&'static hermes_agents::Agent> {
        self.agent()
            .and_then(|name| hermes_agents::find(&name))
            .or_else(|| crate::services::agent_proc::profile_of(self.agent))
    }

    /// Characters of one tool answer: what the agent keeps of an MCP tool's answer, at most
    /// hermes' default.
    pub fn answer_budget(&self) -> usize {
        self.profile()
            .and_then(|a| a.mcp_budget)
            .map_or(ANSWER_BUDGET, |b| b.min(ANSWER_BUDGET))
    }

    /// Every session of every conversation this server serves (for listing and ownership).
    pub fn every_session(&self) -> Vec<SessionId> {
        if let Some(id) = &self.fixed {
            return vec![id.clone()];
        }
        let Some(binding) = self.bindings.read(self.agent) else {
            return Vec::new();
        };
        binding
            .conversations
            .iter()
            .flat_map(|c| c.sessions())
            .chain(binding.provisional.and_then(|p| SessionId::new(p).ok()))
            .collect()
    }

    /// The sessions new work goes to, made if needed (provisional until a hook adopts it) and
    /// active. A provisional session is hosted by this process (it ends with it); a named one
    /// by its headless host, so its children outlive this server.
    pub fn session_for_dispatch(&self, wanted: Option<&str>) -> anyhow::Result<Sessions> {
        let sessions = match self.current(wanted)? {
            Some(s) => s,
            None => {
                let resolved = self.bindings.resolve(self.agent, wanted, provisional_id)?;
                match resolved {
                    Some(Resolved::One { sessions, named }) => sessions_of(sessions, named)
                        .ok_or_else(|| {
                            fail(
                                Code::Usage,
                                "the binding of this agent names no valid session",
                            )
                        })?,
                    Some(Resolved::Several(many)) => {
                        return Err(several(many.iter().map(String::as_str)));
                    }
                    None => return Err(not_ours(wanted.unwrap_or(""))),
                }
            }
        };
        let session = sessions.current.clone();
        if sessions.named {
            self.ledger.ensure_session(&session, now())?;
            return Ok(sessions);
        }
        if !lock(&self.hosted).contains(&session) {
            match self.ledger.claim_session_host(
                &session,
                self.me,
                &hermes_registry::OsReaper::new(),
                now(),
            )? {
                HostClaim::Acquired | HostClaim::AlreadyHeld => {}
                HostClaim::HeldBy(other) => {
                    tracing::info!(%session, host = %other, "session hosted elsewhere");
                }
            }
            lock(&self.hosted).insert(session.clone());
        }
        Ok(sessions)
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

    /// The inline (`background: false`) units this server ran or runs.
    pub fn inline_units(&self) -> Vec<DelegationId> {
        lock(&self.inline).iter().cloned().collect()
    }

    /// Whether `unit` belongs to this conversation.
    pub fn owns(&self, unit: &UnitRecord) -> bool {
        if lock(&self.inline).contains(&unit.id) {
            return true;
        }
        unit.session
            .as_ref()
            .is_some_and(|s| self.every_session().contains(s))
    }

    /// The unit `raw` names, if it is this conversation's.
    pub fn own_unit(&self, raw: &str) -> anyhow::Result<UnitRecord> {
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

fn sessions_of(all: Vec<SessionId>, named: bool) -> Option<Sessions> {
    Some(Sessions {
        current: all.first()?.clone(),
        named,
        all,
    })
}

fn check_fixed(id: &SessionId, wanted: Option<&str>) -> anyhow::Result<()> {
    match wanted {
        Some(w) if w != id.as_str() => Err(fail(
            Code::NotFound,
            format!("session {w}: this server serves HERMES_SESSION_ID={id} only"),
        )),
        _ => Ok(()),
    }
}

fn not_ours(wanted: &str) -> anyhow::Error {
    fail(
        Code::NotFound,
        format!(
            "session {wanted:?} is not a conversation of this agent (its hooks have not named it)"
        ),
    )
}

fn several<'a>(ids: impl Iterator<Item = &'a str>) -> anyhow::Error {
    let ids: Vec<&str> = ids.collect();
    fail(
        Code::Usage,
        format!(
            "this server serves several conversations ({}): pass session to say which",
            ids.join(", ")
        ),
    )
}

/// A fresh provisional session id, `mcp-` and 12 hex digits.
fn provisional_id() -> String {
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!("mcp-{:012x}", bits & 0xffff_ffff_ffff)
}
