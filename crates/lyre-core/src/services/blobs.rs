//! The blob reclaimer: removes, every second, the files of blobs that committed
//! writes freed (each database's queue; see `blobs/` and `db/blobs.rs`).

use std::sync::Weak;
use std::time::Duration;

use tokio::sync::watch;

use crate::engine::Engine;
use crate::services::{pause, unless_stopped};

/// How often each database's queue of freed blobs is looked at.
const TICK: Duration = Duration::from_secs(1);

/// Runs until the services stop or the engine is gone.
pub(crate) async fn reclaim_forever(engine: Weak<Engine>, mut stop: watch::Receiver<bool>) {
    loop {
        if !pause(&mut stop, TICK).await {
            return;
        }
        let Some(names) = engine.upgrade().map(|engine| engine.database_names()) else {
            return;
        };
        for name in names {
            // Looked up one at a time and dropped before the next, so a drop never
            // waits on the reclaimer for long.
            let Some(db) = engine.upgrade().and_then(|engine| engine.database(&name).ok()) else {
                continue;
            };
            // A full queue is worked through a batch at a time, one after another.
            loop {
                match unless_stopped(&mut stop, db.reclaim_blobs()).await {
                    None => return,
                    Some(Ok(0)) => break,
                    Some(Ok(_)) => continue,
                    Some(Err(err)) => {
                        tracing::warn!(database = %name, error = %err, "removing freed blobs failed; retrying later");
                        break;
                    }
                }
            }
        }
    }
}
