//! A client that attacks the embedded mock device through the files behind its shared memory
//! (ftruncate, fallocate with any mode, F_ADD_SEALS, writes anywhere, reopening, closing and
//! mapping again) between ring operations (descriptors pushed and published, NOTIFY,
//! SUBMIT_TASK, reaping, WAIT_EVENT, re-created streams), while a well-behaved client runs
//! checked rounds on the same device. The harness is `davinci_mock_device::test_util::fd_attack`
//! (feature `test-util`; shared with the stable property test `mock-device/tests/fd_attack.rs`).
//!
//! Asserts (in the harness): no crash (a SIGBUS from a shared mapping is one); no descriptor
//! grows or loses a seal, none but the allocation's shrinks (its tasks then fail, the device
//! never), other resizing and adding seals fail with EPERM; the good client's
//! tasks complete with status 0, its results and canary read back exactly; closing the
//! attacker releases its memory and workers; closing both returns the device to zero.

use arbitrary::Arbitrary;
use davinci_mock_device::test_util::fd_attack::{run as attack, Op};

/// One input (decoded with `arbitrary` exactly as `fuzz_target!` does).
pub fn run(data: &[u8]) {
    let Ok(ops) = <Vec<Op>>::arbitrary_take_rest(arbitrary::Unstructured::new(data)) else {
        return;
    };
    attack(&ops);
}
