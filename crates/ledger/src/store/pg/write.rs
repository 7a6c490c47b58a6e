//! The ledger's writes on PostgreSQL (`WriteTx`): rows, their index columns and `NOTIFY`.

use std::cell::Cell;

use super::retry::Failure;
use super::rows::{EventRow, claim_columns, claim_keys, event_columns, token_bytes};
use super::tx::{Tx, encode, int};
use crate::error::{LedgerError, Result};
use crate::model::{
    Child, ClaimRecord, ClaimToken, DelegationId, Event, HostRecord, ProcessId, Session, Stalling,
    UnitRecord, UnitTally,
};
use crate::store::{ReadTx, WriteTx};

impl WriteTx for Tx<'_, '_> {
    fn dirty(&self) -> &Cell<bool> {
        &self.dirty
    }

    fn aborted(&self) -> bool {
        self.aborted.get()
    }

    fn commit(self: Box<Self>) -> Result<()> {
        self.send_held()?;
        let txn = self
            .txn
            .borrow_mut()
            .take()
            .ok_or_else(|| LedgerError::Invalid("the transaction has ended".into()))?;
        match txn.commit() {
            Ok(()) => {
                self.committed.set(true);
                Ok(())
            }
            Err(err) => {
                let failed = self.fail(&err);
                if self.failure.get() == Some(Failure::Broken) {
                    // Whether COMMIT reached the server is unknown: never run it again.
                    self.committed.set(true);
                    return Err(LedgerError::Unavailable {
                        path: self.pg.path.clone(),
                        reason: format!(
                            "the connection to {} broke while committing; the change may or may not have been recorded",
                            self.pg.target.server
                        ),
                    });
                }
                Err(failed)
            }
        }
    }

    fn put_child_tail(&self, id: &DelegationId, index: u32, tail: &str) -> Result<()> {
        self.write(
            "INSERT INTO hermes_child_tails (unit, idx, tail) VALUES ($1, $2, $3) \
             ON CONFLICT (unit, idx) DO UPDATE SET tail = EXCLUDED.tail",
            &[&id.as_str(), &i64::from(index), &tail],
        )
    }

    fn put_session(&self, session: &Session) -> Result<()> {
        let kept = Some(session.clone());
        self.seen
            .borrow_mut()
            .sessions
            .insert(session.id.as_str().to_owned(), kept);
        self.write(
            "INSERT INTO hermes_sessions (id, ended, record) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO UPDATE SET ended = EXCLUDED.ended, record = EXCLUDED.record",
            &[
                &session.id.as_str(),
                &(session.state == crate::model::SessionState::Ended),
                &encode(session),
            ],
        )
    }

    fn put_host(&self, host: &HostRecord) -> Result<()> {
        let mut seen = self.seen.borrow_mut();
        seen.hosts.insert(host.process, Some(host.clone()));
        seen.all_hosts = None;
        drop(seen);
        self.write(
            "INSERT INTO hermes_hosts (pid, start_time, record) VALUES ($1, $2, $3) \
             ON CONFLICT (pid, start_time) DO UPDATE SET record = EXCLUDED.record",
            &[
                &i64::from(host.process.pid),
                &int(host.process.start_time),
                &encode(host),
            ],
        )
    }

    fn remove_host(&self, process: ProcessId) -> Result<()> {
        let mut seen = self.seen.borrow_mut();
        seen.hosts.insert(process, None);
        seen.all_hosts = None;
        drop(seen);
        self.write(
            "DELETE FROM hermes_hosts WHERE pid = $1 AND start_time = $2",
            &[&i64::from(process.pid), &int(process.start_time)],
        )
    }

    fn put_delegation(&self, unit: &UnitRecord) -> Result<()> {
        // Held until the commit or the next statement that reads units (`held.rs`).
        self.dirty.set(true);
        let mut seen = self.seen.borrow_mut();
        seen.units
            .insert(unit.id.as_str().to_owned(), Some(unit.clone()));
        seen.active = None;
        drop(seen);
        self.held
            .borrow_mut()
            .units
            .insert(unit.id.as_str().to_owned(), unit.clone());
        Ok(())
    }

    fn put_child(&self, child: &Child) -> Result<()> {
        self.put_children(std::slice::from_ref(child))
    }

    fn put_children(&self, children: &[Child]) -> Result<()> {
        // Held until the commit or the next read of the table (`Held`).
        self.dirty.set(true);
        let mut held = self.held.borrow_mut();
        for child in children {
            let key = (child.delegation_id.as_str().to_owned(), child.index);
            held.children.insert(key, child.clone());
        }
        Ok(())
    }

    fn put_stall(&self, id: &DelegationId, stalling: &Stalling) -> Result<()> {
        self.write(
            "INSERT INTO hermes_child_stalls (unit, idx, record) VALUES ($1, $2, $3) \
             ON CONFLICT (unit, idx) DO UPDATE SET record = EXCLUDED.record",
            &[&id.as_str(), &i64::from(stalling.index), &encode(stalling)],
        )
    }

    fn put_tally(&self, id: &DelegationId, tally: &UnitTally) -> Result<()> {
        self.hold_tally(id, Some(tally.clone()));
        Ok(())
    }

    fn remove_tally(&self, id: &DelegationId) -> Result<()> {
        self.hold_tally(id, None);
        Ok(())
    }

    fn put_event(&self, event: &Event) -> Result<()> {
        let row = EventRow::of(event);
        self.write(
            concat!(
                "INSERT INTO hermes_events (",
                event_columns!(),
                ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
                 ON CONFLICT (unit, code) DO UPDATE SET session = EXCLUDED.session, \
                 delivery = EXCLUDED.delivery, state = EXCLUDED.state, \
                 attempts = EXCLUDED.attempts, lease_token = EXCLUDED.lease_token, \
                 lease_consumer = EXCLUDED.lease_consumer, \
                 lease_claimed_at = EXCLUDED.lease_claimed_at, \
                 lease_expires_at = EXCLUDED.lease_expires_at, \
                 published_at = EXCLUDED.published_at, delivered_at = EXCLUDED.delivered_at, \
                 dropped_at = EXCLUDED.dropped_at, drop_reason = EXCLUDED.drop_reason, \
                 payload = EXCLUDED.payload"
            ),
            &row.params(),
        )
        // An event written pending notifies its session through the table's trigger
        // (`hermes_notify_event`).
    }

    fn add_event(&self, event: &Event) -> Result<()> {
        // Held until the commit or the next statement on the events' table (`Held`); the
        // first of two with one key stays, as the insert would keep it.
        self.dirty.set(true);
        let row = EventRow::of(event);
        self.held
            .borrow_mut()
            .events
            .entry((row.unit.clone(), row.code))
            .or_insert(row);
        Ok(())
    }

    fn insert_event(&self, event: &Event) -> Result<bool> {
        let row = EventRow::of(event);
        self.dirty.set(true);
        let inserted = self.query(
            concat!(
                "INSERT INTO hermes_events (",
                event_columns!(),
                ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
                 ON CONFLICT (unit, code) DO NOTHING RETURNING true"
            ),
            &row.params(),
        )?;
        Ok(!inserted.is_empty())
    }

    fn put_claim(&self, claim: &ClaimRecord) -> Result<()> {
        let (units, codes) = claim_keys(claim);
        self.write(
            concat!(
                "INSERT INTO hermes_claims (",
                claim_columns!(),
                ") VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (token) DO UPDATE SET consumer = EXCLUDED.consumer, \
                 claimed_at = EXCLUDED.claimed_at, expires_at = EXCLUDED.expires_at, \
                 units = EXCLUDED.units, codes = EXCLUDED.codes"
            ),
            &[
                &token_bytes(claim.token),
                &claim.consumer,
                &int(claim.claimed_at.0),
                &int(claim.expires_at.0),
                &units,
                &codes,
            ],
        )
    }

    fn remove_claim(&self, token: ClaimToken) -> Result<()> {
        self.write(
            "DELETE FROM hermes_claims WHERE token = $1",
            &[&token_bytes(token)],
        )
    }

    fn bump_activity(&self) -> Result<()> {
        // Held until the commit or the next statement that reads the metadata (`held.rs`);
        // the table's trigger notifies (`hermes_notify_activity`).
        self.dirty.set(true);
        self.held.borrow_mut().activity += 1;
        Ok(())
    }

    fn set_meta(&self, key: &str, value: u64) -> Result<()> {
        let key = key.to_owned();
        self.write(
            "INSERT INTO hermes_meta (key, value) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            &[&key, &int(value)],
        )
    }

    fn put_metrics_base(&self, record: &[u8]) -> Result<()> {
        let record = record.to_vec();
        self.write(
            "INSERT INTO hermes_metrics_base (key, record) VALUES ('base', $1) \
             ON CONFLICT (key) DO UPDATE SET record = EXCLUDED.record",
            &[&record],
        )
    }

    fn purge_delegation(&self, unit: &UnitRecord) -> Result<()> {
        self.send_held()?;
        let id = unit.id.as_str();
        let mut seen = self.seen.borrow_mut();
        seen.units.insert(id.to_owned(), None);
        seen.tallies.insert(id.to_owned(), None);
        seen.active = None;
        drop(seen);
        for event in self.events(&unit.id)? {
            if let Some(lease) = &event.lease {
                self.remove_claim(lease.token)?;
            }
        }
        self.write("DELETE FROM hermes_events WHERE unit = $1", &[&id])?;
        self.write("DELETE FROM hermes_children WHERE unit = $1", &[&id])?;
        self.write("DELETE FROM hermes_child_tails WHERE unit = $1", &[&id])?;
        self.write("DELETE FROM hermes_child_stalls WHERE unit = $1", &[&id])?;
        self.write("DELETE FROM hermes_tallies WHERE unit = $1", &[&id])?;
        self.write("DELETE FROM hermes_units WHERE id = $1", &[&id])
    }

    /// Retention's batch: the claims of their events' leases, then each table's rows of
    /// `units`, one statement per table whatever the batch's size.
    fn purge_delegations(&self, units: &[UnitRecord]) -> Result<()> {
        self.send_held()?;
        let ids: Vec<String> = units.iter().map(|u| u.id.as_str().to_owned()).collect();
        let mut seen = self.seen.borrow_mut();
        for id in &ids {
            seen.units.insert(id.clone(), None);
            seen.tallies.insert(id.clone(), None);
        }
        seen.active = None;
        drop(seen);
        self.write(
            "DELETE FROM hermes_claims WHERE token IN (SELECT lease_token FROM hermes_events \
             WHERE unit = ANY($1) AND lease_token IS NOT NULL)",
            &[&ids],
        )?;
        for sql in [
            "DELETE FROM hermes_events WHERE unit = ANY($1)",
            "DELETE FROM hermes_children WHERE unit = ANY($1)",
            "DELETE FROM hermes_child_tails WHERE unit = ANY($1)",
            "DELETE FROM hermes_child_stalls WHERE unit = ANY($1)",
            "DELETE FROM hermes_tallies WHERE unit = ANY($1)",
        ] {
            self.write(sql, &[&ids])?;
        }
        self.write("DELETE FROM hermes_units WHERE id = ANY($1)", &[&ids])
    }
}

impl Tx<'_, '_> {
    /// A tally written (`Some`) or removed (`None`): kept in [`Seen`], where reads find it, and
    /// held until the commit (`Held`).
    fn hold_tally(&self, id: &DelegationId, tally: Option<UnitTally>) {
        self.dirty.set(true);
        let unit = id.as_str().to_owned();
        self.seen
            .borrow_mut()
            .tallies
            .insert(unit.clone(), tally.clone());
        self.held.borrow_mut().tallies.insert(unit, tally);
    }
}
