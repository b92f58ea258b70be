//! A value computed on a background thread while the run starts.
//!
//! Some report figures are expensive to compute and needed only when the
//! report is written: 004's chain for an explicit sigma over a phase of
//! 2^20 bits takes about 15 ms, which would otherwise all come
//! before the first packet. A [`Deferred`] starts that work on its own
//! thread when the configuration is validated and hands the result over at
//! report time, so start-up stays short and the figure stays exactly what
//! the synchronous computation gives (the same function runs, only
//! elsewhere).

use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

/// A value that is being computed on another thread, or already known.
#[derive(Clone)]
pub struct Deferred<T: Copy + Send + Sync + 'static>(Arc<Inner<T>>);

struct Inner<T> {
    // Only touched once, when the value is first read: not a hot path.
    handle: Mutex<Option<JoinHandle<T>>>,
    value: OnceLock<T>,
    fallback: T,
}

impl<T: Copy + Send + Sync + 'static> Deferred<T> {
    /// A value known now.
    pub fn ready(value: T) -> Deferred<T> {
        let cell = OnceLock::new();
        let _ = cell.set(value);
        Deferred(Arc::new(Inner {
            handle: Mutex::new(None),
            value: cell,
            fallback: value,
        }))
    }

    /// Starts `compute` on a background thread. If no thread can be
    /// started, it runs here and now instead; if the thread panics, the
    /// value is `fallback`.
    pub fn spawn(fallback: T, compute: impl FnOnce() -> T + Send + 'static) -> Deferred<T> {
        // The closure is shared so that a failed spawn can still run it.
        let job = Arc::new(Mutex::new(Some(compute)));
        let for_thread = Arc::clone(&job);
        let spawned = std::thread::Builder::new()
            .name("flowsieve-model".into())
            .spawn(move || {
                let f = for_thread.lock().ok().and_then(|mut g| g.take());
                f.map_or(fallback, |f| f())
            });
        match spawned {
            Ok(handle) => Deferred(Arc::new(Inner {
                handle: Mutex::new(Some(handle)),
                value: OnceLock::new(),
                fallback,
            })),
            Err(_) => {
                let f = job.lock().ok().and_then(|mut g| g.take());
                Deferred::ready(f.map_or(fallback, |f| f()))
            }
        }
    }

    /// The value, waiting for the background thread if it is still running.
    pub fn get(&self) -> T {
        *self.0.value.get_or_init(|| {
            let handle = self.0.handle.lock().ok().and_then(|mut g| g.take());
            handle
                .and_then(|h| h.join().ok())
                .unwrap_or(self.0.fallback)
        })
    }
}

impl<T: Copy + Send + Sync + PartialEq + 'static> PartialEq for Deferred<T> {
    fn eq(&self, other: &Deferred<T>) -> bool {
        self.get() == other.get()
    }
}

impl<T: Copy + Send + Sync + std::fmt::Debug + 'static> std::fmt::Debug for Deferred<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.value.get() {
            Some(v) => write!(f, "{v:?}"),
            None => f.write_str("(computing)"),
        }
    }
}
