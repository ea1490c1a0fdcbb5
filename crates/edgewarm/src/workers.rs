//! Worker threads: one single-threaded tokio runtime per core, each serving the client
//! connections handed to it and the origin connections opened on it, as HAProxy's threads and
//! nginx's workers do.
//!
//! Why not one work-stealing runtime for everything: on the `http` path a request's client
//! connection and its origin connection talk through h2's shared stream state and wake each
//! other's tasks. Where those tasks ran on different threads, every request paid for moving
//! that state between cores, and the origin task flushed one client's burst of requests in
//! pieces. With a connection's task bound to one thread and that thread's own origin
//! connections preferred ([`crate::origin::h2`]), a request stays on one core from the client's
//! read to the client's write, which costs less CPU (docs/benchmarks-history.md).
//!
//! What stays on the main runtime: the accept loops (each accepted socket is moved to a worker,
//! round robin), the admin listener, reloads, pool and upstream upkeep. A connection keeps the
//! worker it was given to its end; a worker's runtime ends when the [`Workers`] is dropped.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

/// The worker runtimes. Dropping it ends their threads, and with them every task still on them.
pub struct Workers {
    place: Placement,
    stop: CancellationToken,
}

/// Where to run new work: cheap to clone, and holding it does not keep the workers alive (a
/// task on a worker may hold one without keeping its own thread from ending).
#[derive(Clone, Default)]
pub struct Placement {
    handles: Arc<[Handle]>,
    next: Arc<AtomicUsize>,
}

thread_local! {
    /// The index of the worker this thread is, if it is one.
    static INDEX: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

impl Workers {
    /// Start `n` worker threads (`n` = 0: none; everything runs on the caller's runtime).
    pub fn start(n: usize) -> io::Result<Self> {
        let stop = CancellationToken::new();
        let mut handles = Vec::with_capacity(n);
        for i in 0..n {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            handles.push(runtime.handle().clone());
            let stop = stop.clone();
            std::thread::Builder::new().name(format!("edgewarm-w{i}")).spawn(move || {
                INDEX.with(|x| x.set(Some(i)));
                runtime.block_on(stop.cancelled());
                // Dropping the runtime here drops the tasks left on it: their sockets close.
            })?;
        }
        Ok(Self { place: Placement { handles: handles.into(), next: Arc::default() }, stop })
    }

    /// One worker per core the process may use.
    pub fn per_core() -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }

    pub fn placement(&self) -> Placement {
        self.place.clone()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Placement {
    /// How many workers there are (0: work runs where it is spawned).
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// The next worker in turn, or `None` without workers.
    pub fn next(&self) -> Option<(usize, &Handle)> {
        if self.handles.is_empty() {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        Some((i, &self.handles[i]))
    }

    /// Worker `i`'s runtime (`i` taken modulo their number), or `None` without workers.
    pub fn get(&self, i: usize) -> Option<&Handle> {
        (!self.handles.is_empty()).then(|| &self.handles[i % self.handles.len()])
    }
}

/// The index of the worker the calling thread is, if it is one.
pub fn current() -> Option<usize> {
    INDEX.with(std::cell::Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_runs_on_the_worker_it_was_given_and_workers_end_when_dropped() {
        let workers = Workers::start(2).unwrap();
        let place = workers.placement();
        let main = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        main.block_on(async {
            for want in [0, 1, 0] {
                let (i, handle) = place.next().unwrap();
                assert_eq!(i, want, "round robin");
                let ran_on = handle.spawn(async { current() }).await.unwrap();
                assert_eq!(ran_on, Some(i));
            }
            assert_eq!(current(), None, "the caller is no worker");
            // A task left running on a worker is dropped when the workers are.
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let _never = place.get(1).unwrap().spawn(async move {
                let _tx = tx;
                std::future::pending::<()>().await;
            });
            drop(workers);
            assert!(rx.await.is_err(), "the task (and what it held) was dropped");
        });
    }

    #[test]
    fn without_workers_nothing_is_placed() {
        let workers = Workers::start(0).unwrap();
        assert!(workers.placement().next().is_none());
        assert!(workers.placement().get(3).is_none());
    }
}
