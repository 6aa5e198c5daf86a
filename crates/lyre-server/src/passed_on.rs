//! Whether the task running now handles a request a script's middleware passed on
//! with `next` (`http/rest/middleware.rs`). The JavaScript jobs such a request
//! needs go to the queue a waiting worker runs itself (`script/mod.rs`), so a
//! middleware in front of scripts never waits on its own worker. A task this one
//! spawns to do its work (a caching table's shared origin call, `cache/flight.rs`)
//! carries the mark with [`inherit`].

use std::future::Future;

tokio::task_local! {
    static PASSED_ON: ();
}

/// Runs `handling` marked as a request a middleware passed on.
pub async fn mark<F: Future>(handling: F) -> F::Output {
    PASSED_ON.scope((), handling).await
}

/// Whether the running task is marked.
pub fn is_marked() -> bool {
    PASSED_ON.try_with(|_| ()).is_ok()
}

/// `work`, to be spawned as another task, marked as the calling task is.
pub fn inherit<F: Future>(work: F) -> impl Future<Output = F::Output> {
    let marked = is_marked();
    async move {
        match marked {
            true => PASSED_ON.scope((), work).await,
            false => work.await,
        }
    }
}
