//! A database's blob upkeep: removing the files of blobs its writes freed, and the
//! orphan cleanup (`cleanup_orphan_blobs`). How blobs are written and freed is in
//! `blobs/`.

use std::collections::HashSet;
use std::ops::Bound;
use std::sync::Arc;

use crate::access::{Context, require_super_user};
use crate::blobs::{each_blob, freed_prefix, holder_key};
use crate::db::Db;
use crate::error::Result;
use crate::record::entry::decode_entry;
use crate::task::blocking;

/// Freed blobs removed per round: one short read, one writer job.
const RECLAIM_BATCH: usize = 1_000;

impl Db {
    /// Removes the files of blobs that committed writes freed (replaced, deleted,
    /// expired, or in a dropped table), then their queue entries; answers how many.
    /// Run by the services' reclaimer.
    pub(crate) async fn reclaim_blobs(self: &Arc<Self>) -> Result<usize> {
        let queued = {
            let txn = self.snapshot()?;
            let mut queued = txn.meta_prefix(freed_prefix())?;
            queued.truncate(RECLAIM_BATCH);
            queued
        };
        if queued.is_empty() {
            return Ok(0);
        }
        let store = self.blobs().clone();
        let done = blocking(move || Ok(store.reclaimable(&queued))).await?;
        let count = done.len();
        if count > 0 {
            self.write(&Context::system(), "reclaim_blobs", move |txn, _| {
                for key in &done {
                    txn.delete_meta(key)?;
                }
                Ok(())
            })
            .await?;
        }
        Ok(count)
    }

    /// `cleanup_orphan_blobs`: removes every blob file that no record of this
    /// database references (what a crash between writing a blob and committing its
    /// record leaves behind), except files written in the last minute and files a
    /// write is using now. Reads the candidates first and the records after, so a
    /// file kept by a write that commits in between is seen referenced. Answers
    /// how many files were removed. Super users only.
    pub async fn cleanup_orphan_blobs(self: &Arc<Self>, ctx: &Context) -> Result<usize> {
        require_super_user(ctx)?;
        let db = self.clone();
        blocking(move || {
            let candidates = db.blobs().candidates()?;
            if candidates.is_empty() {
                return Ok(0);
            }
            let referenced = db.referenced_blobs()?;
            let mut removed = 0;
            for (blob, path) in candidates {
                if referenced.contains(&(blob.root, blob.id)) {
                    continue;
                }
                match db.blobs().remove_unused(&path, blob.root, blob.id) {
                    Ok(true) => removed += 1,
                    Ok(false) => {}
                    Err(err) => {
                        tracing::warn!(path = %path.display(), error = %err, "an orphaned blob could not be removed")
                    }
                }
            }
            tracing::info!(database = db.name(), removed, "orphaned blob cleanup finished");
            Ok(removed)
        })
        .await
    }

    /// Every blob a record of this database references now, as (root, id), read
    /// from one snapshot.
    fn referenced_blobs(&self) -> Result<HashSet<(u8, u64)>> {
        let txn = self.snapshot()?;
        let mut referenced = HashSet::new();
        for name in self.schema().tables.keys() {
            // A table that never held a blob is not read.
            let Some(store) = txn.table(name)? else { continue };
            if txn.meta(&holder_key(name))?.is_none() {
                continue;
            }
            for item in txn.records(&store, (Bound::Unbounded, Bound::Unbounded), false)? {
                let (_, stored) = item?;
                let entry = decode_entry(stored)?;
                entry.record.values().for_each(|value| {
                    each_blob(value, &mut |blob| {
                        referenced.insert((blob.root, blob.id));
                    })
                });
            }
        }
        Ok(referenced)
    }
}
