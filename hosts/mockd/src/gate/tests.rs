use super::*;

use davinci_driver_core::container::container_field;
use davinci_driver_core::{CONTAINER_LEN, DEFAULT_TENANT_SLOTS};

const SLOTS: u32 = DEFAULT_TENANT_SLOTS;

fn user(uid: u32) -> Tenant {
    Tenant::User(uid)
}

/// A connection admitted for `tenant`, attached to one end of a socket pair: its ticket and
/// the peer's end (which sees the end of the connection when the gate closes it).
fn connect(gate: &Arc<Gate>, tenant: Tenant, slots: u32) -> Result<(Ticket, SeqPacket), String> {
    let t = gate
        .admit(tenant, false, slots, 1)
        .map_err(str::to_string)?;
    let (ours, peer) = SeqPacket::pair().unwrap();
    t.attach(&Arc::new(ours));
    Ok((t, peer))
}

#[test]
fn a_tenants_share_is_the_non_admins_room_over_the_slots() {
    assert_eq!(connection_share(4), 72);
    assert_eq!(connection_share(1), USER_CONNECTIONS);
    assert_eq!(connection_share(64), 4);
    // Out of range: clamped, never a division by zero.
    assert_eq!(connection_share(0), USER_CONNECTIONS);
    assert_eq!(connection_share(1000), 4);
    for slots in [1, 4, 8, 64] {
        let gate = Arc::new(Gate::default());
        let mut held = Vec::new();
        while held.len() < connection_share(slots) {
            let mut t = gate.admit(user(1000), false, slots, 1).unwrap();
            assert!(t.hello_done());
            held.push(t);
        }
        let e = gate.admit(user(1000), false, slots, 1).unwrap_err();
        assert!(e.contains("holds its share"), "{slots} slots: {e}");
        // Another tenant is not held to the first one's count (with one slot, the first
        // holds the whole room).
        if slots > 1 {
            gate.admit(user(1001), false, slots, 1).unwrap();
        }
        // A connection's end gives its place in the share back.
        held.pop();
        gate.admit(user(1000), false, slots, 1).unwrap();
    }
}

#[test]
fn users_cannot_take_the_admins_room_nor_hold_it_silently() {
    let gate = Arc::new(Gate::default());
    let mut tickets = Vec::new();
    // One tenant's silent connections stop at the per-tenant bound.
    for _ in 0..MAX_PRE_HELLO_PER_TENANT {
        tickets.push(gate.admit(user(1000), false, SLOTS, 1).unwrap());
    }
    let e = gate.admit(user(1000), false, SLOTS, 1).unwrap_err();
    assert!(e.contains("not said HELLO"), "{e}");
    // Once they said HELLO they are ordinary connections; the tenant may open more.
    for t in &mut tickets {
        assert!(t.hello_done());
    }
    // Many tenants together stop short of the admins' room.
    let mut uid = 2000;
    while gate.total() < USER_CONNECTIONS {
        match gate.admit(user(uid), false, SLOTS, 1) {
            Ok(mut t) => {
                assert!(t.hello_done());
                tickets.push(t);
            }
            Err(e) => panic!("refused before the users' bound: {e}"),
        }
        uid += 1;
    }
    let e = gate.admit(user(uid), false, SLOTS, 1).unwrap_err();
    assert!(e.contains("kept for the operators"), "{e}");
    // Admins get the rest, and no more.
    for _ in 0..ADMIN_RESERVED {
        tickets.push(gate.admit(user(0), true, SLOTS, 1).unwrap());
    }
    assert_eq!(
        gate.admit(user(0), true, SLOTS, 1).unwrap_err(),
        "too many connections to this device"
    );
    // Every connection's end gives its room back.
    tickets.clear();
    assert_eq!(gate.total(), 0);
    let c = gate.counts();
    assert!(c.silent.is_empty() && c.tenants.is_empty() && c.users == 0);
    drop(c);
    gate.admit(user(1000), false, SLOTS, 1).unwrap();
}

#[test]
fn a_connection_that_never_said_hello_gives_back_its_pre_hello_room() {
    let gate = Arc::new(Gate::default());
    let silent: Vec<Ticket> = (0..MAX_PRE_HELLO_PER_TENANT)
        .map(|_| gate.admit(user(7), false, SLOTS, 1).unwrap())
        .collect();
    assert!(gate.admit(user(7), false, SLOTS, 1).is_err());
    drop(silent);
    assert!(gate.admit(user(7), false, SLOTS, 1).is_ok());
}

#[test]
fn a_pre_hello_flood_from_twenty_tenants_leaves_room_for_a_newcomer() {
    let gate = Arc::new(Gate::default());
    // Twenty tenants try 16 silent connections each (320: more than the non-admins' room).
    let mut flood = Vec::new();
    for uid in 3000..3020 {
        for _ in 0..MAX_PRE_HELLO_PER_TENANT {
            flood.push(connect(&gate, user(uid), SLOTS).expect("a flood connection"));
        }
    }
    // The pool holds at most its bound; the ones displaced were closed.
    let closed = flood.iter().filter(|(_, p)| p.peer_closed()).count();
    assert_eq!(closed, flood.len() - MAX_PRE_HELLO);
    assert_eq!(gate.counts().silent.len(), MAX_PRE_HELLO);
    // A displaced connection that reads a HELLO after all is told it has no room; its
    // thread ends, giving back its place (as `conn::serve` does).
    let ended = |flood: &mut Vec<(Ticket, SeqPacket)>| {
        flood.retain_mut(|(t, p)| !p.peer_closed() || t.hello_done());
    };
    ended(&mut flood);
    assert_eq!(flood.len(), MAX_PRE_HELLO);
    // A newcomer gets in, and a flood that goes on does not displace it while others hold
    // more silent connections than it does.
    let (mut newcomer, peer) = connect(&gate, user(4000), SLOTS).expect("the newcomer");
    ended(&mut flood);
    for uid in 3000..3020 {
        flood.push(connect(&gate, user(uid), SLOTS).expect("more flood"));
        ended(&mut flood);
    }
    assert!(!peer.peer_closed(), "the newcomer's connection was closed");
    assert!(newcomer.hello_done(), "the newcomer lost its room");
    assert_eq!(gate.counts().silent.len(), MAX_PRE_HELLO - 1);
    drop(flood);
    drop(newcomer);
    assert_eq!(gate.total(), 0);
    assert!(gate.counts().tenants.is_empty());
}

#[test]
fn a_full_room_with_silent_connections_in_it_still_takes_a_newcomer() {
    let slots = 8;
    let share = connection_share(slots);
    let gate = Arc::new(Gate::default());
    let mut spoken = Vec::new();
    // Eight tenants fill the non-admins' room but for 16: that many silent connections of
    // a ninth take the rest.
    let mut uid = 5000;
    while spoken.len() < USER_CONNECTIONS - MAX_PRE_HELLO_PER_TENANT {
        uid = 5000 + (spoken.len() / share) as u32;
        let mut t = gate.admit(user(uid), false, slots, 1).unwrap();
        assert!(t.hello_done());
        spoken.push(t);
    }
    let silent: Vec<_> = (0..MAX_PRE_HELLO_PER_TENANT)
        .map(|_| connect(&gate, user(6000), slots).unwrap())
        .collect();
    assert_eq!(gate.counts().users, USER_CONNECTIONS);
    // A newcomer displaces the oldest of them.
    let (_newcomer, peer) = connect(&gate, user(7000), slots).expect("the newcomer");
    assert!(!peer.peer_closed());
    assert!(silent[0].1.peer_closed(), "the oldest silent one is closed");
    assert!(silent[1..].iter().all(|(_, p)| !p.peer_closed()));
    // Displaced connections stay counted until they end: the admins' room holds.
    assert_eq!(gate.total(), USER_CONNECTIONS + 1);
    // Connections that said HELLO are never displaced: with no silent one left besides
    // the newcomer's own, the room is full.
    drop(silent);
    let mut more = Vec::new();
    while gate.counts().users < USER_CONNECTIONS {
        uid += 1;
        let mut t = gate.admit(user(uid), false, slots, 1).unwrap();
        assert!(t.hello_done());
        more.push(t);
    }
    // Only the newcomer's silent connection is left in a full room: the next newcomer
    // displaces it.
    let (mut second, _second_peer) = connect(&gate, user(8000), slots).unwrap();
    assert!(peer.peer_closed());
    // Once every connection in the room has said HELLO, it is full: the next is refused.
    assert!(second.hello_done());
    let e = gate.admit(user(9000), false, slots, 1).unwrap_err();
    assert!(e.contains("kept for the operators"), "{e}");
}

#[test]
fn a_container_is_one_tenant_whatever_its_uids() {
    let gate = Arc::new(Gate::default());
    let c = container_field("3f1c2b8e9a7d");
    // A rootless container's subordinate uids: one tenant, bound once.
    let mut held = Vec::new();
    for uid in 100_000..100_000 + MAX_PRE_HELLO_PER_TENANT as u32 {
        held.push(gate.admit(Tenant::of(uid, &c), false, SLOTS, 1).unwrap());
    }
    let e = gate
        .admit(Tenant::of(165_535, &c), false, SLOTS, 1)
        .unwrap_err();
    assert!(e.contains("not said HELLO"), "{e}");
    for t in &mut held {
        assert!(t.hello_done());
    }
    let mut uid = 200_000;
    while held.len() < connection_share(SLOTS) {
        let mut t = gate.admit(Tenant::of(uid, &c), false, SLOTS, 1).unwrap();
        assert!(t.hello_done());
        held.push(t);
        uid += 1;
    }
    let e = gate
        .admit(Tenant::of(uid, &c), false, SLOTS, 1)
        .unwrap_err();
    assert!(e.contains("holds its share"), "{e}");
    // The same uid outside the container, and another container, are other tenants.
    gate.admit(Tenant::of(uid, &[0; CONTAINER_LEN]), false, SLOTS, 1)
        .unwrap();
    gate.admit(
        Tenant::of(uid, &container_field("aaaabbbbcccc")),
        false,
        SLOTS,
        1,
    )
    .unwrap();
}

#[test]
fn a_tenant_counting_for_two_slots_gets_two_shares_of_connections() {
    let gate = Arc::new(Gate::default());
    let share = connection_share(SLOTS);
    let mut held = Vec::new();
    while held.len() < 2 * share {
        let mut t = gate.admit(user(4242), false, SLOTS, 2).unwrap();
        assert!(t.hello_done());
        held.push(t);
    }
    let e = gate.admit(user(4242), false, SLOTS, 2).unwrap_err();
    assert!(e.contains("holds its share"), "{e}");
    // Another tenant still gets its own share.
    gate.admit(user(4343), false, SLOTS, 1).unwrap();
    drop(held);
}
