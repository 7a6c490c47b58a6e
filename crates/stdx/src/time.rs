//! Time as every record and decision of hermes holds it.

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch (UTC).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The timestamp `ms` milliseconds later (saturating).
    pub fn plus_ms(self, ms: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }

    /// The timestamp `ms` milliseconds earlier (saturating at the epoch).
    pub fn minus_ms(self, ms: u64) -> Timestamp {
        Timestamp(self.0.saturating_sub(ms))
    }

    /// Milliseconds from `earlier` to `self`, zero if `earlier` is later.
    pub fn ms_since(self, earlier: Timestamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// Whole milliseconds since the epoch.
    pub fn as_millis(self) -> u64 {
        self.0
    }
}
