//! Who may connect to a device: at most [`MAX_CONNECTIONS`] connections; non-admin users
//! together at most `MAX_CONNECTIONS - ADMIN_RESERVED` of them (the rest are the operators'
//! whatever tenants hold); and one non-admin user at most [`MAX_PRE_HELLO_PER_USER`]
//! connections that have not said HELLO yet (a user cannot hold the slots with silent
//! connections; the HELLO timeout still closes each). Admission is decided at accept, from the
//! peer's credentials; a [`Ticket`] gives the room back when its connection ends.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Connections per device, HELLO said or not.
pub const MAX_CONNECTIONS: usize = 320;
/// Connections per device only admins may have (non-admins together have at most
/// `MAX_CONNECTIONS - ADMIN_RESERVED`).
pub const ADMIN_RESERVED: usize = 32;
/// Connections one non-admin user may have open before their HELLO.
pub const MAX_PRE_HELLO_PER_USER: usize = 16;

/// The counts admission decides on.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    total: usize,
    users: usize,
    pre_hello: HashMap<u32, usize>,
}

impl Counts {
    /// Admits a connection of `uid` (an admin or not), or says why not.
    pub(crate) fn admit(&mut self, uid: u32, admin: bool) -> Result<(), &'static str> {
        if self.total >= MAX_CONNECTIONS {
            return Err("too many connections to this device");
        }
        if !admin {
            if self.users >= MAX_CONNECTIONS - ADMIN_RESERVED {
                return Err(
                    "too many connections of non-admin users to this device (the rest \
                            are kept for the operators)",
                );
            }
            if self.pre_hello.get(&uid).copied().unwrap_or(0) >= MAX_PRE_HELLO_PER_USER {
                return Err("this user has too many connections that have not said HELLO");
            }
            *self.pre_hello.entry(uid).or_insert(0) += 1;
            self.users += 1;
        }
        self.total += 1;
        Ok(())
    }

    /// A connection of a non-admin `uid` said HELLO (or gave up before it).
    pub(crate) fn hello_done(&mut self, uid: u32) {
        if let Some(n) = self.pre_hello.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.pre_hello.remove(&uid);
            }
        }
    }

    /// A connection ended.
    pub(crate) fn leave(&mut self, admin: bool) {
        self.total = self.total.saturating_sub(1);
        if !admin {
            self.users = self.users.saturating_sub(1);
        }
    }
}

/// A device's admission counts, shared by its acceptor and connections.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    counts: Mutex<Counts>,
}

impl Gate {
    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a connection: its ticket, or why it is refused.
    pub(crate) fn admit(self: &Arc<Self>, uid: u32, admin: bool) -> Result<Ticket, &'static str> {
        self.counts().admit(uid, admin)?;
        Ok(Ticket {
            gate: self.clone(),
            uid,
            admin,
            before_hello: !admin,
        })
    }

    /// Connections now.
    #[cfg(test)]
    fn total(&self) -> usize {
        self.counts().total
    }
}

/// One admitted connection's room, given back when it is dropped.
#[derive(Debug)]
pub(crate) struct Ticket {
    gate: Arc<Gate>,
    uid: u32,
    admin: bool,
    before_hello: bool,
}

impl Ticket {
    /// The connection's first frame came (or its wait for it ended).
    pub(crate) fn hello_done(&mut self) {
        if std::mem::take(&mut self.before_hello) {
            self.gate.counts().hello_done(self.uid);
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.hello_done();
        self.gate.counts().leave(self.admin);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_cannot_take_the_admins_room_nor_hold_it_silently() {
        let gate = Arc::new(Gate::default());
        let mut tickets = Vec::new();
        // One user's silent connections stop at the per-user bound.
        for _ in 0..MAX_PRE_HELLO_PER_USER {
            tickets.push(gate.admit(1000, false).unwrap());
        }
        let e = gate.admit(1000, false).unwrap_err();
        assert!(e.contains("not said HELLO"), "{e}");
        // Once they said HELLO they are ordinary connections; the user may open more.
        for t in &mut tickets {
            t.hello_done();
        }
        // Many users together stop short of the admins' room.
        let mut uid = 2000;
        while gate.total() < MAX_CONNECTIONS - ADMIN_RESERVED {
            match gate.admit(uid, false) {
                Ok(mut t) => {
                    t.hello_done();
                    tickets.push(t);
                }
                Err(e) => panic!("refused before the users' bound: {e}"),
            }
            uid += 1;
        }
        let e = gate.admit(uid, false).unwrap_err();
        assert!(e.contains("kept for the operators"), "{e}");
        // Admins get the rest, and no more.
        for _ in 0..ADMIN_RESERVED {
            tickets.push(gate.admit(0, true).unwrap());
        }
        assert_eq!(
            gate.admit(0, true).unwrap_err(),
            "too many connections to this device"
        );
        // Every connection's end gives its room back.
        tickets.clear();
        assert_eq!(gate.total(), 0);
        assert!(gate.counts().pre_hello.is_empty());
        gate.admit(1000, false).unwrap();
    }

    #[test]
    fn a_connection_that_never_said_hello_gives_back_its_pre_hello_room() {
        let gate = Arc::new(Gate::default());
        let silent: Vec<Ticket> = (0..MAX_PRE_HELLO_PER_USER)
            .map(|_| gate.admit(7, false).unwrap())
            .collect();
        assert!(gate.admit(7, false).is_err());
        drop(silent);
        assert!(gate.admit(7, false).is_ok());
    }
}
