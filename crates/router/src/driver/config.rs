//! Who a [`Router`](super::Router) consumes for, and what its waits did.

use hermes_ledger::SessionId;

/// Who consumes, for which session, and how (the `delivery.*` settings).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterConfig {
    /// The session whose events this consumer receives (and no other).
    pub session: SessionId,
    /// The consumer's name, recorded on its claims.
    pub consumer: String,
    /// Lease length of every claim and renewal, in milliseconds (`claim_lease_seconds`).
    pub lease_ms: u64,
    /// How often a presented claim is renewed, in milliseconds (`heartbeat_seconds`).
    pub heartbeat_ms: u64,
    /// How often a waiting consumer polls the ledger for newly published events, in
    /// milliseconds; `None` waits for deferral deadlines, nudges and the caller's deadline only.
    pub poll_interval_ms: Option<u64>,
}

impl RouterConfig {
    /// Default poll interval: idle results appear well within a second.
    pub const DEFAULT_POLL_MS: u64 = 200;

    /// The default settings for a consumer `consumer` of `session`.
    pub fn new(session: SessionId, consumer: impl Into<String>) -> RouterConfig {
        RouterConfig::from_settings(session, consumer, &hermes_settings::Settings::default())
    }

    /// A consumer `consumer` of `session` with the lease and renewal period of `settings`
    /// (renewals at least twice per lease, [`hermes_settings::DeliverySettings::renew_every`]).
    pub fn from_settings(
        session: SessionId,
        consumer: impl Into<String>,
        settings: &hermes_settings::Settings,
    ) -> RouterConfig {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        RouterConfig {
            session,
            consumer: consumer.into(),
            lease_ms: ms(settings.delivery.claim_lease),
            heartbeat_ms: ms(settings.delivery.renew_every()),
            poll_interval_ms: Some(RouterConfig::DEFAULT_POLL_MS),
        }
    }
}

/// Wake-ups of [`Router::wait_ready`] so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitStats {
    /// Every time a wait woke from sleep.
    pub wakeups: u64,
    /// Wake-ups while nothing was due: before any deferral deadline, poll time or the caller's
    /// deadline, and without a nudge or interrupt. Zero unless a clock wakes early.
    pub idle_wakeups: u64,
}
