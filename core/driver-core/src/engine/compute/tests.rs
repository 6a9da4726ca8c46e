//! The per-thread cache of launch inputs: one entry per launch, found only by its own
//! serial, zeroed when the launch ends, bounded in number and bytes.

use super::*;

fn f32s(v: &[f32]) -> Rc<Buf> {
    Rc::new(Buf::F32(v.to_vec()))
}

fn values(b: &Buf) -> Vec<f32> {
    match b {
        Buf::F32(v) => v.clone(),
        _ => panic!("not f32"),
    }
}

#[test]
fn two_launches_in_turn_each_find_their_own_input() {
    keep(1, 7, 0, CACHE_MIN, f32s(&[1.0, 2.0]));
    keep(2, 7, 4096, CACHE_MIN, f32s(&[3.0]));
    for _ in 0..3 {
        assert_eq!(values(&cached(1, 7, 0, CACHE_MIN).unwrap()), [1.0, 2.0]);
        assert_eq!(values(&cached(2, 7, 4096, CACHE_MIN).unwrap()), [3.0]);
    }
    // Another launch (or another place, owner or length) never sees them.
    assert!(cached(3, 7, 0, CACHE_MIN).is_none());
    assert!(cached(1, 8, 0, CACHE_MIN).is_none());
    assert!(cached(1, 7, 4096, CACHE_MIN).is_none());
    assert!(cached(1, 7, 0, CACHE_MIN + 1).is_none());
}

#[test]
fn an_ended_launchs_input_is_zeroed_and_its_buffer_serves_the_next_of_its_shape() {
    keep(5, 1, 0, CACHE_MIN, f32s(&[9.0, 9.0, 9.0]));
    forget(5);
    assert!(
        cached(5, 1, 0, CACHE_MIN).is_none(),
        "found after its launch ended"
    );
    // Zeros, whatever it held; a different shape gets a new buffer.
    assert!(fresh(Dtype::F16, 3, CACHE_MIN).is_ok_and(|b| matches!(b, Buf::F16(_))));
    let b = fresh(Dtype::F32, 3, CACHE_MIN).unwrap();
    assert_eq!(values(&b), [0.0; 3]);
    // Taken: the next one is new (and zeros too).
    CACHE.with(|c| assert!(c.borrow().entries.is_empty()));
    assert_eq!(values(&fresh(Dtype::F32, 3, CACHE_MIN).unwrap()), [0.0; 3]);
}

#[test]
fn the_cache_is_bounded_in_entries_and_bytes_and_ended_launches_go_first() {
    for s in 1..=CACHE_ENTRIES as u64 {
        keep(s, 0, s, CACHE_MIN, f32s(&[s as f32]));
    }
    forget(2);
    // The oldest entry still in use is 1; the ended one (2) goes instead.
    keep(10, 0, 10, CACHE_MIN, f32s(&[10.0]));
    let count = || CACHE.with(|c| c.borrow().entries.len());
    assert_eq!(count(), CACHE_ENTRIES);
    assert!(cached(1, 0, 1, CACHE_MIN).is_some());
    assert!(cached(10, 0, 10, CACHE_MIN).is_some());
    // One more: the least recently used (3; 1 and 10 were just used) goes.
    keep(11, 0, 11, CACHE_MIN, f32s(&[11.0]));
    assert!(cached(3, 0, 3, CACHE_MIN).is_none());
    assert_eq!(count(), CACHE_ENTRIES);
    // Bytes: two of more than half the bound do not fit together.
    keep(20, 0, 20, CACHE_MAX / 2 + 1, f32s(&[0.0]));
    keep(21, 0, 21, CACHE_MAX / 2 + 1, f32s(&[0.0]));
    let total: u64 = CACHE.with(|c| c.borrow().entries.iter().map(|k| k.bytes).sum());
    assert!(total <= CACHE_MAX, "{total} bytes kept");
    assert!(cached(21, 0, 21, CACHE_MAX / 2 + 1).is_some());
    assert!(cached(20, 0, 20, CACHE_MAX / 2 + 1).is_none());
}
