//! Batched progress: the children's progress tokens and output tails, persisted at most every
//! two seconds per unit.

use ledger::{ChildStatus, ProgressUpdate};

use super::inner::Inner;

impl Inner {
    pub(super) async fn persist_progress(&self) {
        let updates: Vec<ProgressUpdate> = {
            let mut units = self.lock();
            let mut updates = Vec::new();
            for (id, entry) in units.running.iter_mut() {
                for (child, persisted) in entry.children.iter().zip(entry.persisted.iter_mut()) {
                    let snap = child.snapshot();
                    if snap.status != ChildStatus::Running
                        || persisted.as_ref() == Some(&snap.progress)
                    {
                        continue;
                    }
                    let tail_changed = persisted
                        .as_ref()
                        .is_none_or(|p| p.output_bytes != snap.progress.output_bytes);
                    *persisted = Some(snap.progress.clone());
                    updates.push(ProgressUpdate {
                        delegation_id: id.clone(),
                        index: child.index(),
                        progress: snap.progress,
                        // Filled in below, off the async threads, from the transcript.
                        tail: tail_changed.then(|| child.transcript_path().to_owned()),
                    });
                }
            }
            updates
        };
        if updates.is_empty() {
            return;
        }
        let writer = self.host_id;
        let recorded = self
            .call(move |l| {
                let updates: Vec<ProgressUpdate> = updates
                    .into_iter()
                    .map(|mut u| {
                        u.tail = u.tail.and_then(|path| crate::reaper::read_tail(&path));
                        u
                    })
                    .collect();
                l.record_progress(writer, &updates)
            })
            .await;
        match recorded {
            Ok(fenced) => {
                for id in fenced {
                    tracing::warn!(delegation = %id, "progress refused: this host no longer owns the unit");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot persist progress"),
        }
    }
}
