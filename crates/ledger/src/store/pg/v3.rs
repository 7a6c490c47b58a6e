//! Schema version 3: each unit's host as columns of its row (`host_pid`, `host_start`), so
//! that the read of a unit brings its host's record along in the same statement (`read.rs`:
//! a child's start and finish check the host's fencing epoch against it), and the transition
//! functions created anew by every migration (`transitions.sql`, `CREATE OR REPLACE`: version
//! 3's have the one-key fast paths).
//!
//! From version 2 (or 1, after `v2.rs`), in the migration's one transaction under its lock:
//! the columns are added and filled from every unit's record.

use postgres::types::Type;

use super::client::Transaction;
use super::tx::Columns;
use super::url::PgTarget;
use crate::error::{LedgerError, Result};
use crate::model::legacy::decode_delegation;

/// Rows updated per statement.
const CHUNK: usize = 2_000;

/// Creates (or replaces) the transition functions of `transitions.sql` inside `txn`: what
/// every migration does, first (the triggers `v2.rs` creates call two of them).
pub(super) fn install_transitions(
    target: &PgTarget,
    path: &std::path::Path,
    txn: &mut Transaction<'_>,
) -> Result<()> {
    txn.batch_execute(&target.qualify(include_str!("transitions.sql")))
        .map_err(|err| failed(path, "creating the transition functions", &err))
}

/// Brings version 2's tables to version 3's inside `txn`: the units' host columns, filled.
pub(super) fn migrate(path: &std::path::Path, txn: &mut Transaction<'_>) -> Result<()> {
    let fail = |err: postgres::Error| failed(path, "migrating the schema to version 3", &err);
    txn.batch_execute(
        "ALTER TABLE hermes_units ADD COLUMN host_pid bigint, ADD COLUMN host_start bigint",
    )
    .map_err(fail)?;
    let mut hosted = Vec::new();
    for row in txn
        .query_typed("SELECT record FROM hermes_units", &[])
        .map_err(fail)?
    {
        let unit = decode_delegation(path, row.col(path, 0)?)?;
        if let Some(host) = unit.host {
            hosted.push((
                unit.id.as_str().to_owned(),
                i64::from(host.pid),
                super::tx::int(host.start_time),
            ));
        }
    }
    for chunk in hosted.chunks(CHUNK) {
        let ids: Vec<&str> = chunk.iter().map(|(id, _, _)| id.as_str()).collect();
        let pids: Vec<i64> = chunk.iter().map(|&(_, pid, _)| pid).collect();
        let starts: Vec<i64> = chunk.iter().map(|&(_, _, start)| start).collect();
        txn.query_typed(
            "UPDATE hermes_units u SET host_pid = t.pid, host_start = t.start \
             FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS t(id, pid, start) \
             WHERE u.id = t.id",
            &[
                (&ids, Type::TEXT_ARRAY),
                (&pids, Type::INT8_ARRAY),
                (&starts, Type::INT8_ARRAY),
            ],
        )
        .map_err(fail)?;
    }
    Ok(())
}

fn failed(path: &std::path::Path, what: &str, err: &postgres::Error) -> LedgerError {
    LedgerError::Unavailable {
        path: path.to_owned(),
        reason: format!("{what}: {}", super::retry::one_line(err)),
    }
}
