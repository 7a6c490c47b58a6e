//! The ledger's reads on PostgreSQL (`ReadTx`).

use super::rows::{claim_columns, claim_of, event_columns, token_bytes};
use super::tx::{Columns, Tx, int, kept, uint};
use crate::codec::decode_record as decode;
use crate::error::Result;
use crate::model::legacy::{decode_child, decode_delegation, decode_host};
use crate::model::{
    Child, ClaimRecord, ClaimToken, DelegationId, Event, EventRef, HostRecord, ProcessId, Session,
    SessionId, Stalling, Timestamp, UnitRecord, UnitTally,
};
use crate::store::key_code;
use crate::store::{ReadTx, SweepCutoffs, SweepLook, session_part};

impl ReadTx for Tx<'_, '_> {
    fn session(&self, id: &SessionId) -> Result<Option<Session>> {
        kept(
            |s| &mut s.sessions,
            &self.seen,
            id.as_str().to_owned(),
            || {
                self.record(
                    "session",
                    "SELECT record FROM hermes_sessions WHERE id = $1",
                    &[&id.as_str()],
                )
            },
        )
    }

    fn sessions(&self) -> Result<Vec<Session>> {
        self.records(
            "session",
            "SELECT record FROM hermes_sessions ORDER BY id",
            &[],
        )
    }

    fn host(&self, process: ProcessId) -> Result<Option<HostRecord>> {
        kept(
            |s| &mut s.hosts,
            &self.seen,
            process,
            || {
                let rows = self.query(
                    "SELECT record FROM hermes_hosts WHERE pid = $1 AND start_time = $2",
                    &[&i64::from(process.pid), &int(process.start_time)],
                )?;
                rows.first()
                    .map(|row| decode_host(&self.pg.path, row.col(&self.pg.path, 0)?))
                    .transpose()
            },
        )
    }

    fn hosts(&self) -> Result<Vec<HostRecord>> {
        if let Some(hosts) = &self.seen.borrow().all_hosts {
            return Ok(hosts.clone());
        }
        let hosts: Vec<HostRecord> = self
            .query(
                "SELECT record FROM hermes_hosts ORDER BY pid, start_time",
                &[],
            )?
            .iter()
            .map(|row| decode_host(&self.pg.path, row.col(&self.pg.path, 0)?))
            .collect::<Result<_>>()?;
        self.keep_hosts(&hosts);
        Ok(hosts)
    }

    fn child_tail(&self, id: &DelegationId, index: u32) -> Result<Option<String>> {
        let rows = self.query(
            "SELECT tail FROM hermes_child_tails WHERE unit = $1 AND idx = $2",
            &[&id.as_str(), &i64::from(index)],
        )?;
        rows.first()
            .map(|row| row.col::<String>(&self.pg.path, 0))
            .transpose()
    }

    /// The unit, and its host's record kept along ([`Tx::keep_unit`]).
    fn delegation(&self, id: &str) -> Result<Option<UnitRecord>> {
        kept(
            |s| &mut s.units,
            &self.seen,
            id.to_owned(),
            || {
                self.counters.count(1);
                let rows = self.query("SELECT * FROM hermes_read_unit($1)", &[&id])?;
                rows.first().map_or(Ok(None), |row| self.keep_unit(row, 0))
            },
        )
    }

    fn delegation_exists(&self, id: &str) -> Result<bool> {
        let rows = self.query("SELECT 1 FROM hermes_units WHERE id = $1", &[&id])?;
        Ok(!rows.is_empty())
    }

    fn child(&self, id: &DelegationId, index: u32) -> Result<Option<Child>> {
        let key = (id.as_str().to_owned(), index);
        if let Some(child) = self.held.borrow().children.get(&key) {
            return Ok(Some(child.clone()));
        }
        if let Some(child) = self.seen.borrow_mut().children.remove(&key) {
            return Ok(child);
        }
        self.counters.count(1);
        if self.seen.borrow().units.contains_key(id.as_str()) {
            let rows = self.query(
                "SELECT record FROM hermes_children WHERE unit = $1 AND idx = $2",
                &[&id.as_str(), &i64::from(index)],
            )?;
            return rows
                .first()
                .map(|row| decode_child(&self.pg.path, row.col(&self.pg.path, 0)?))
                .transpose();
        }
        // Whoever asks for a child checks its unit and the unit's host next (a child's start
        // or finish): the same statement brings both along.
        let rows = self.query(
            "SELECT * FROM hermes_read_child($1, $2)",
            &[&id.as_str(), &i64::from(index)],
        )?;
        let Some(row) = rows.first() else {
            self.seen
                .borrow_mut()
                .units
                .insert(id.as_str().to_owned(), None);
            return Ok(None);
        };
        self.counters.count(1);
        let unit = self.keep_unit(row, 1)?;
        self.seen
            .borrow_mut()
            .units
            .insert(id.as_str().to_owned(), unit);
        row.col::<Option<&[u8]>>(&self.pg.path, 0)?
            .map(|record| decode_child(&self.pg.path, record))
            .transpose()
    }

    fn children(&self, id: &DelegationId) -> Result<Vec<Child>> {
        if let Some(children) = self.held_children_of(id) {
            return Ok(children);
        }
        self.send_held()?;
        let out: Vec<Child> = self
            .query(
                "SELECT record FROM hermes_children WHERE unit = $1 ORDER BY idx",
                &[&id.as_str()],
            )?
            .iter()
            .map(|row| decode_child(&self.pg.path, row.col(&self.pg.path, 0)?))
            .collect::<Result<_>>()?;
        self.counters.count(out.len() as u64);
        Ok(out)
    }

    fn children_at(&self, id: &DelegationId, indexes: &[u32]) -> Result<Vec<Child>> {
        self.send_held()?;
        let indexes: Vec<i64> = indexes.iter().map(|&i| i64::from(i)).collect();
        let rows = self.query(
            "SELECT record FROM hermes_children WHERE unit = $1 AND idx = ANY($2) ORDER BY idx",
            &[&id.as_str(), &indexes],
        )?;
        self.counters.count(rows.len() as u64);
        rows.iter()
            .map(|row| decode_child(&self.pg.path, row.col(&self.pg.path, 0)?))
            .collect()
    }

    fn stalls(&self, id: &DelegationId) -> Result<Vec<Stalling>> {
        self.records(
            "stall",
            "SELECT record FROM hermes_child_stalls WHERE unit = $1 ORDER BY idx",
            &[&id.as_str()],
        )
    }

    /// A unit without a tally (of one task, or terminal) is read whole next, its host for the
    /// fencing check and its session by what publishes its events
    /// (`children::finish_child_as`): the statement that finds no tally brings all three
    /// along, kept as if read ([`Seen`]) unless this transaction has them already. One
    /// statement where there were four.
    fn tally(&self, id: &DelegationId) -> Result<Option<UnitTally>> {
        kept(
            |s| &mut s.tallies,
            &self.seen,
            id.as_str().to_owned(),
            || {
                let rows = self.query("SELECT * FROM hermes_read_tally($1)", &[&id.as_str()])?;
                rows.first()
                    .map_or(Ok(None), |row| self.keep_tally_row(id, row))
            },
        )
    }

    fn finish_look(&self, id: &DelegationId, index: u32) -> Result<()> {
        let key = (id.as_str().to_owned(), index);
        if self.held.borrow().children.contains_key(&key)
            || self.seen.borrow().tallies.contains_key(id.as_str())
        {
            return Ok(());
        }
        // The tally (or the unit, its host and session) and the child, in one statement.
        let rows = self.query(
            "SELECT t.*, (SELECT record FROM hermes_children WHERE unit = $1 AND idx = $2) \
             FROM hermes_read_tally($1) AS t",
            &[&id.as_str(), &i64::from(index)],
        )?;
        let Some(row) = rows.first() else {
            return Ok(());
        };
        let tally = self.keep_tally_row(id, row)?;
        let child = row
            .col::<Option<&[u8]>>(&self.pg.path, 4)?
            .map(|record| decode_child(&self.pg.path, record))
            .transpose()?;
        self.counters.count(1);
        let mut seen = self.seen.borrow_mut();
        seen.tallies.insert(id.as_str().to_owned(), tally);
        seen.children.insert(key, child);
        Ok(())
    }

    fn event(&self, event: &EventRef) -> Result<Option<Event>> {
        self.event_rows(
            concat!(
                "SELECT ",
                event_columns!(),
                " FROM hermes_events WHERE unit = $1 AND code = $2"
            ),
            &[
                &event.delegation_id.as_str(),
                &i64::from(key_code(event.key)),
            ],
        )
        .map(|events| events.into_iter().next())
    }

    fn events(&self, id: &DelegationId) -> Result<Vec<Event>> {
        self.event_rows(
            concat!(
                "SELECT ",
                event_columns!(),
                " FROM hermes_events WHERE unit = $1 ORDER BY code"
            ),
            &[&id.as_str()],
        )
    }

    fn open_events(&self, session: Option<&SessionId>) -> Result<Vec<EventRef>> {
        let rows = self.query(
            "SELECT unit, code FROM hermes_events WHERE open AND session = $1 \
             ORDER BY unit, code",
            &[&session_part(session)],
        )?;
        self.event_refs(rows)
    }

    fn open_event_records(&self, session: Option<&SessionId>) -> Result<Vec<Event>> {
        self.event_rows(
            concat!(
                "SELECT ",
                event_columns!(),
                " FROM hermes_events WHERE open AND session = $1 ORDER BY unit, code"
            ),
            &[&session_part(session)],
        )
    }

    fn all_open_events(&self) -> Result<Vec<EventRef>> {
        let rows = self.query(
            "SELECT unit, code FROM hermes_events WHERE open ORDER BY session, unit, code",
            &[],
        )?;
        self.event_refs(rows)
    }

    fn claim_record(&self, token: ClaimToken) -> Result<Option<ClaimRecord>> {
        let rows = self.query(
            concat!(
                "SELECT ",
                claim_columns!(),
                " FROM hermes_claims WHERE token = $1"
            ),
            &[&token_bytes(token)],
        )?;
        rows.first()
            .map(|row| claim_of(&self.pg.path, row))
            .transpose()
    }

    fn active_units(&self) -> Result<Vec<UnitRecord>> {
        if let Some(active) = &self.seen.borrow().active {
            return Ok(active.clone());
        }
        let active = self.units(
            "SELECT record FROM hermes_units WHERE active ORDER BY id",
            &[],
        )?;
        self.seen.borrow_mut().active = Some(active.clone());
        Ok(active)
    }

    fn hosts_and_active_units(&self) -> Result<(Vec<HostRecord>, Vec<UnitRecord>)> {
        self.admission_look(None, None)?;
        Ok((self.hosts()?, self.active_units()?))
    }

    fn admission_look(
        &self,
        session: Option<&SessionId>,
        unit: Option<&DelegationId>,
    ) -> Result<()> {
        let seen = self.seen.borrow();
        let session = session.filter(|s| !seen.sessions.contains_key(s.as_str()));
        let unit = unit.filter(|u| !seen.units.contains_key(u.as_str()));
        if seen.all_hosts.is_some() && seen.active.is_some() && session.is_none() && unit.is_none()
        {
            return Ok(());
        }
        drop(seen);
        // One statement: a row's first column says whose record it is.
        let rows = self.query(
            "(SELECT 0, record FROM hermes_hosts ORDER BY pid, start_time) UNION ALL \
             (SELECT 1, record FROM hermes_units WHERE active ORDER BY id) UNION ALL \
             SELECT 2, record FROM hermes_sessions WHERE id = $1 UNION ALL \
             SELECT 3, record FROM hermes_units WHERE id = $2",
            &[
                &session.map_or("", SessionId::as_str),
                &unit.map_or("", DelegationId::as_str),
            ],
        )?;
        let (mut hosts, mut units) = (Vec::new(), Vec::new());
        let (mut found_session, mut found_unit) = (None, None);
        for row in &rows {
            let record: &[u8] = row.col(&self.pg.path, 1)?;
            match row.col::<i32>(&self.pg.path, 0)? {
                0 => hosts.push(decode_host(&self.pg.path, record)?),
                1 => units.push(decode_delegation(&self.pg.path, record)?),
                2 => found_session = Some(decode(&self.pg.path, "session", record)?),
                _ => found_unit = Some(decode_delegation(&self.pg.path, record)?),
            }
        }
        sort_records(&mut hosts, &mut units);
        // What this transaction has read or written already stays as it has it.
        let mut seen = self.seen.borrow_mut();
        if let Some(session) = session {
            seen.sessions
                .insert(session.as_str().to_owned(), found_session);
        }
        if let Some(unit) = unit {
            self.counters.count(u64::from(found_unit.is_some()));
            seen.units.insert(unit.as_str().to_owned(), found_unit);
        }
        seen.active.get_or_insert(units);
        drop(seen);
        if self.seen.borrow().all_hosts.is_none() {
            self.keep_hosts(&hosts);
        }
        Ok(())
    }

    fn sweep_look(&self, cutoffs: SweepCutoffs) -> Result<SweepLook> {
        // One statement, so one snapshot without a transaction around it: a row's first
        // column says what it is (a host's record, an active unit's, a step with work, or the
        // oldest open event's and unit's times).
        let rows = self.query(
            "(SELECT 0, record, NULL::bigint FROM hermes_hosts WHERE $1 ORDER BY pid, start_time) \
             UNION ALL (SELECT 1, record, NULL FROM hermes_units WHERE $1 AND active ORDER BY id) \
             UNION ALL SELECT 2, NULL, NULL WHERE EXISTS (SELECT 1 FROM hermes_events \
                 WHERE open AND published_at < $2 \
                 AND (state = 'pending' OR lease_expires_at IS NULL OR lease_expires_at <= $3)) \
             UNION ALL SELECT 3, NULL, min(published_at) FROM hermes_events WHERE open \
             UNION ALL SELECT 4, NULL, min(dispatched_at) FROM hermes_units",
            &[&cutoffs.hosts, &int(cutoffs.replay.0), &int(cutoffs.now.0)],
        )?;
        let mut look = SweepLook::default();
        let (mut hosts, mut units) = (Vec::new(), Vec::new());
        let path = &self.pg.path;
        for row in &rows {
            let at = || -> Result<Option<Timestamp>> {
                Ok(row
                    .col::<Option<i64>>(path, 2)?
                    .map(|at| Timestamp(uint(at))))
            };
            match row.col::<i32>(path, 0)? {
                0 => hosts.push(decode_host(path, row.col(path, 1)?)?),
                1 => units.push(decode_delegation(path, row.col(path, 1)?)?),
                2 => look.replay_expired = true,
                3 => look.oldest_open_event = at()?,
                _ => look.oldest_unit = at()?,
            }
        }
        if cutoffs.hosts {
            sort_records(&mut hosts, &mut units);
            look.hosts = Some((hosts, units));
        }
        Ok(look)
    }

    /// Counted in a subquery that stops at `at_most` rows: `count(*)` of the table reads
    /// every row.
    fn unit_count(&self, session: Option<&SessionId>, at_most: usize) -> Result<usize> {
        let at_most = i64::try_from(at_most).unwrap_or(i64::MAX);
        let rows = match session {
            None => self.query(
                "SELECT count(*) FROM (SELECT 1 FROM hermes_units LIMIT $1) AS u",
                &[&at_most],
            )?,
            Some(session) => self.query(
                "SELECT count(*) FROM (SELECT 1 FROM hermes_units WHERE session = $1 LIMIT $2) \
                 AS u",
                &[&session.as_str(), &at_most],
            )?,
        };
        let count = match rows.first() {
            Some(row) => row.col::<i64>(&self.pg.path, 0)?,
            None => 0,
        };
        Ok(usize::try_from(count).unwrap_or(usize::MAX))
    }

    fn recent_units(&self, session: Option<&SessionId>, limit: usize) -> Result<Vec<UnitRecord>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        match session {
            None => self.units(
                "SELECT record FROM hermes_units ORDER BY dispatched_at DESC, id DESC LIMIT $1",
                &[&limit],
            ),
            Some(session) => self.units(
                "SELECT record FROM hermes_units WHERE session = $1 \
                 ORDER BY dispatched_at DESC, id DESC LIMIT $2",
                &[&session.as_str(), &limit],
            ),
        }
    }

    fn units_before(
        &self,
        cutoff: Timestamp,
        after: Option<&(u64, String)>,
        limit: usize,
    ) -> Result<Vec<(u64, String)>> {
        // (-1, ''): before every key.
        let (at, id) = after.map_or((-1, ""), |(at, id)| (int(*at), id.as_str()));
        let rows = self.query(
            "SELECT dispatched_at, id FROM hermes_units WHERE dispatched_at < $1 \
             AND (dispatched_at, id) > ($2, $3) ORDER BY dispatched_at, id LIMIT $4",
            &[
                &int(cutoff.0),
                &at,
                &id,
                &i64::try_from(limit).unwrap_or(i64::MAX),
            ],
        )?;
        rows.iter()
            .map(|row| Ok((uint(row.col(&self.pg.path, 0)?), row.col(&self.pg.path, 1)?)))
            .collect()
    }

    fn meta(&self, key: &str) -> Result<Option<u64>> {
        let rows = self.query("SELECT value FROM hermes_meta WHERE key = $1", &[&key])?;
        rows.first()
            .map(|row| row.col(&self.pg.path, 0).map(uint))
            .transpose()
    }

    fn metrics_base(&self) -> Result<Option<Vec<u8>>> {
        let rows = self.query(
            "SELECT record FROM hermes_metrics_base WHERE key = 'base'",
            &[],
        )?;
        rows.first()
            .map(|row| row.col::<Vec<u8>>(&self.pg.path, 0))
            .transpose()
    }

    fn delegations_of(&self, ids: &[DelegationId]) -> Result<Vec<UnitRecord>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        self.units(
            "SELECT record FROM hermes_units WHERE id = ANY($1)",
            &[&ids],
        )
    }

    fn children_of(&self, ids: &[DelegationId]) -> Result<Vec<Child>> {
        self.send_held()?;
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        let out: Vec<Child> = self
            .query(
                "SELECT record FROM hermes_children WHERE unit = ANY($1) ORDER BY unit, idx",
                &[&ids],
            )?
            .iter()
            .map(|row| decode_child(&self.pg.path, row.col(&self.pg.path, 0)?))
            .collect::<Result<_>>()?;
        self.counters.count(out.len() as u64);
        Ok(out)
    }

    fn events_of(&self, ids: &[DelegationId]) -> Result<Vec<Event>> {
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        self.event_rows(
            concat!(
                "SELECT ",
                event_columns!(),
                " FROM hermes_events WHERE unit = ANY($1) ORDER BY unit, code"
            ),
            &[&ids],
        )
    }

    fn stalls_of(&self, ids: &[DelegationId]) -> Result<Vec<(DelegationId, Stalling)>> {
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        self.query(
            "SELECT unit, record FROM hermes_child_stalls WHERE unit = ANY($1) ORDER BY unit, idx",
            &[&ids],
        )?
        .iter()
        .map(|row| {
            let unit = row.col::<String>(&self.pg.path, 0)?;
            let id =
                DelegationId::new(&unit).map_err(|err| crate::error::LedgerError::Damaged {
                    path: self.pg.path.clone(),
                    reason: format!("stall of {unit}: {err}"),
                })?;
            Ok((
                id,
                crate::codec::decode_record(
                    &self.pg.path,
                    "stall",
                    row.col::<&[u8]>(&self.pg.path, 1)?,
                )?,
            ))
        })
        .collect()
    }
}

impl Tx<'_, '_> {
    /// A row of `hermes_read_tally(id)`: the unit's tally, or when it has none, the unit, its
    /// host and its session, which are kept ([`super::tx::Seen`]).
    fn keep_tally_row(&self, id: &DelegationId, row: &super::tx::Row) -> Result<Option<UnitTally>> {
        let path = &self.pg.path;
        if let Some(tally) = row.col::<Option<&[u8]>>(path, 0)? {
            return decode(path, "tally", tally).map(Some);
        }
        let unit = self.keep_unit(row, 1)?;
        let mut seen = self.seen.borrow_mut();
        if let Some(session) = unit.as_ref().and_then(|u| u.session.as_ref()) {
            let record = row
                .col::<Option<&[u8]>>(path, 3)?
                .map(|record| decode(path, "session", record))
                .transpose()?;
            seen.sessions
                .entry(session.as_str().to_owned())
                .or_insert(record);
        }
        if !seen.units.contains_key(id.as_str()) {
            self.counters.count(u64::from(unit.is_some()));
            seen.units.insert(id.as_str().to_owned(), unit);
        }
        Ok(None)
    }

    /// Keeps every host record this transaction read ([`super::tx::Seen`]).
    fn keep_hosts(&self, hosts: &[HostRecord]) {
        let mut seen = self.seen.borrow_mut();
        for host in hosts {
            seen.hosts
                .entry(host.process)
                .or_insert_with(|| Some(host.clone()));
        }
        seen.all_hosts = Some(hosts.to_vec());
    }
}

/// Hosts by process and units by id, as [`ReadTx::hosts`] and [`ReadTx::active_units`] give
/// them: a union's rows come in each part's order as the server appends them, and sorted
/// here they do not depend on that.
fn sort_records(hosts: &mut [HostRecord], units: &mut [UnitRecord]) {
    hosts.sort_by_key(|h| h.process);
    units.sort_by(|a, b| a.id.cmp(&b.id));
}
