//! The metrics base the ledger keeps (`census.rs`): the totals of the units that no longer
//! change up to a watermark in the by-time index, and what retention removing some of them
//! changes in it.

use serde::{Deserialize, Serialize};

use crate::codec;
use crate::error::Result;
use crate::model::{Totals, UnitRecord};
use crate::store::Writer;

/// The totals of the units that no longer change, up to a watermark.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct MetricsBase {
    /// Every unit whose by-time key is at or before this one is in `totals` or in `open`.
    pub(crate) through: Option<(u64, String)>,
    /// Units at or before `through` that could still change when it passed them.
    pub(crate) open: Vec<String>,
    pub(crate) totals: Totals,
}

/// Notes in the stored base that retention removed `units`, in the purge's transaction: the
/// ones it counts leave the gauge of units kept, the ones it lists open are forgotten.
pub(crate) fn note_purged(w: &Writer<'_>, units: &[UnitRecord]) -> Result<()> {
    let Some(stored) = w.metrics_base()? else {
        return Ok(());
    };
    let Ok(mut base) = codec::decode::<MetricsBase>(&stored) else {
        return Ok(());
    };
    let Some(through) = base.through.clone() else {
        return Ok(());
    };
    let mut changed = false;
    for unit in units {
        let key = (unit.dispatched_at.0, unit.id.as_str().to_owned());
        if key > through {
            continue;
        }
        changed = true;
        if let Some(at) = base.open.iter().position(|id| id == unit.id.as_str()) {
            base.open.swap_remove(at);
        } else {
            base.totals.purged(unit.status);
        }
    }
    if changed {
        w.put_metrics_base(&codec::encode(&base))?;
    }
    Ok(())
}
