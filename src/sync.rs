//! Locking that survives a panic: a thread that panicked while holding a mutex
//! leaves data that every user here can still read safely (tables of stages,
//! caches, counters), so the poison is cleared rather than spread.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, taking the guard even if a thread panicked while holding it.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
