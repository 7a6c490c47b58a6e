//! Identifiers and time: the names every record uses.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch (UTC): one type for every crate, from `stdx`.
pub use hermes_stdx::Timestamp;

/// A parent conversation's id: `[A-Za-z0-9._:-]{1,128}`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SessionId(String);

/// Why a string is not a valid id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// A session id outside `[A-Za-z0-9._:-]{1,128}`.
    #[error("invalid session id {0:?}: use 1 to 128 characters from A-Z a-z 0-9 . _ : -")]
    Session(String),
    /// A delegation id that is not `deleg_` and 12 lowercase hex digits.
    #[error("invalid delegation id {0:?}: expected deleg_ followed by 12 lowercase hex digits")]
    Delegation(String),
    /// An event key that is neither `task:N` nor `terminal`.
    #[error("invalid event key {0:?}: expected task:N or terminal")]
    EventKey(String),
    /// A claim token that is not 32 hex digits.
    #[error("invalid claim token {0:?}: expected 32 hex digits")]
    ClaimToken(String),
    /// A worker pool name outside `[A-Za-z0-9._:-]{1,128}`.
    #[error("invalid pool name {0:?}: use 1 to 128 characters from A-Z a-z 0-9 . _ : -")]
    Pool(String),
}

impl SessionId {
    /// Validates and wraps a session id.
    pub fn new(id: impl Into<String>) -> Result<SessionId, IdError> {
        let id = id.into();
        let valid = !id.is_empty()
            && id.len() <= 128
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
        if valid {
            Ok(SessionId(id))
        } else {
            Err(IdError::Session(id))
        }
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for SessionId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SessionId::new(s)
    }
}

/// A delegation's id: `deleg_` followed by 12 lowercase hex digits.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DelegationId(String);

impl DelegationId {
    /// The id for 48 random bits.
    pub fn from_bits(bits: u64) -> DelegationId {
        DelegationId(format!("deleg_{:012x}", bits & 0xffff_ffff_ffff))
    }

    /// Validates and wraps a delegation id.
    pub fn new(id: impl Into<String>) -> Result<DelegationId, IdError> {
        let id = id.into();
        let valid = id.len() == 18
            && id.starts_with("deleg_")
            && id[6..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if valid {
            Ok(DelegationId(id))
        } else {
            Err(IdError::Delegation(id))
        }
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DelegationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for DelegationId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DelegationId::new(s)
    }
}

/// What an event is about: one child finished (`task:N`), or the unit ended without a row for
/// every child (`terminal`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EventKey {
    /// Child `N` finished.
    Task(u32),
    /// The unit ended without an event for every child.
    Terminal,
}

impl fmt::Display for EventKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventKey::Task(n) => write!(f, "task:{n}"),
            EventKey::Terminal => f.write_str("terminal"),
        }
    }
}

impl FromStr for EventKey {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "terminal" {
            return Ok(EventKey::Terminal);
        }
        s.strip_prefix("task:")
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse().ok())
            .filter(|n| *n != u32::MAX)
            .map(EventKey::Task)
            .ok_or_else(|| IdError::EventKey(s.to_owned()))
    }
}

/// The full address of one event.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EventRef {
    /// The delegation the event belongs to.
    pub delegation_id: DelegationId,
    /// Which event of that delegation.
    pub key: EventKey,
}

impl fmt::Display for EventRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.delegation_id, self.key)
    }
}

/// A claim's fencing token: 128 random bits, shown as 32 lowercase hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClaimToken(pub u128);

impl fmt::Display for ClaimToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl FromStr for ClaimToken {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(IdError::ClaimToken(s.to_owned()));
        }
        u128::from_str_radix(s, 16)
            .map(ClaimToken)
            .map_err(|_| IdError::ClaimToken(s.to_owned()))
    }
}

/// A host's fencing epoch: random and fresh every time a process registers as a host. Every
/// write a host makes about a unit carries it; once the host was judged dead (its record gone)
/// or its units adopted, the writes of that epoch are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HostId(pub u128);

impl fmt::Display for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "host_{:032x}", self.0)
    }
}
