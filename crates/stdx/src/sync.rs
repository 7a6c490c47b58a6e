//! Locking that survives a panic elsewhere.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, taking the guard even if a thread panicked while holding it: every value
/// hermes keeps behind a mutex is valid between statements, so a poisoned one is still good.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn a_poisoned_mutex_still_locks() {
        let shared = Arc::new(Mutex::new(1));
        let inside = Arc::clone(&shared);
        let _ = std::thread::spawn(move || {
            let _guard = inside.lock().expect("first lock");
            panic!("poisons the mutex");
        })
        .join();
        assert!(shared.is_poisoned());
        *lock(&shared) += 1;
        assert_eq!(*lock(&shared), 2);
    }
}
