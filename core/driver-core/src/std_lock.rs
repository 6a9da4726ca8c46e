//! [`StdLock`]: driver-core's [`Lock`] over `std::sync::Mutex`, for hosts in user space (the
//! mock device) and this crate's tests (feature `std`; the kernel build has no features and
//! leaves this module out).

extern crate std;

use std::sync::{Mutex, PoisonError};

use crate::platform::Lock;

/// [`Lock`] over `std::sync::Mutex`: each stream's and each event's data-path state, so a host
/// can run the streams of one device on several threads. A poisoned lock is taken anyway: a
/// thread panicked inside, but driver-core has no panicking paths and keeps the state
/// consistent between calls. A stream served by one thread contends its lock only with a
/// control-path reader (a usage report); an event's, only while two threads record or wait on
/// it at once.
pub struct StdLock<T>(Mutex<T>);

impl<T> Lock<T> for StdLock<T> {
    fn new(value: T) -> Self {
        Self(Mutex::new(value))
    }

    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let mut g = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Some(f(&mut g))
    }

    fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}
