//! Arbitrary sequences of (open, ioctl, close, run) against `driver_core::DeviceCore` over the
//! checking heap platform, with several client and control opens.
//!
//! Asserts: no panic (the platform panics if the core touches memory it did not back);
//! unknown requests and wrong sizes are `ENOTTY`; control opens never own resources; after
//! every step `memory_used <= memory_size`, the per-client memory adds up to `memory_used`
//! and to what the platform has backed, no client exceeds its limit, an exclusive device has
//! at most one client, GET_INFO through the ioctl path equals `DeviceCore::info_for` the caller; LIST_CLIENTS
//! writes only inside `[buf, buf + capacity * entry_size)`; closing every open returns
//! `memory_used` to 0 and releases every stream.
//!
//! The parts: `input` (the ops), `state` (the harness's state, its checked ioctl path and the
//! invariants), `user_mem` (the caller's memory and the LIST_CLIENTS window), `actions` (each
//! op applied); [`run`] here.
#![forbid(unsafe_code)]

mod actions;
mod input;
mod state;
mod user_mem;

use arbitrary::Arbitrary;

use input::Op;
use state::State;

/// One input (decoded with `arbitrary` exactly as `fuzz_target!` does).
pub fn run(data: &[u8]) {
    let Ok(ops) = <Vec<Op>>::arbitrary_take_rest(arbitrary::Unstructured::new(data)) else {
        return;
    };
    let mut st = State::new();
    for op in ops.into_iter().take(256) {
        st.step(op);
        st.check();
    }
    for o in std::mem::take(&mut st.opens) {
        st.dev.close(o.client);
    }
    let info = st.dev.info();
    assert_eq!(info.memory_used, 0, "memory left after every open closed");
    assert_eq!(info.clients, 0);
    assert_eq!(st.dev.platform().backed_bytes(), 0);
    assert_eq!(
        st.dev.platform().live_streams,
        0,
        "streams left after every open closed"
    );
    assert_eq!(st.dev.stream_handles().count(), 0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use davinci_uapi::{Errno, ListClientsArgs, Wire, COMMANDS, DRIVER_CMD_LIST_CLIENTS};

    /// The finding of issue 13: a raw LIST_CLIENTS whose `buf` is not mapped. The input
    /// (fuzz/regressions/ioctl_dispatch/list-clients-unmapped-buf) decodes to an open and that
    /// call; the ioctl fails with EFAULT and changes nothing (checked in `State::ioctl`).
    #[test]
    fn list_clients_unmapped_buf() {
        let data = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../regressions/ioctl_dispatch/list-clients-unmapped-buf"
        ))
        .expect("the regression input");
        let ops =
            <Vec<Op>>::arbitrary_take_rest(arbitrary::Unstructured::new(&data)).expect("decodes");
        assert!(matches!(ops[0], Op::Open { control: false, .. }));
        let Op::Raw {
            cmd,
            ref arg,
            exact,
            ..
        } = ops[1]
        else {
            panic!("{ops:?}");
        };
        assert_eq!(COMMANDS[cmd as usize].request, DRIVER_CMD_LIST_CLIENTS);
        assert!(exact);
        let a = ListClientsArgs::from_bytes(arg).expect("a LIST_CLIENTS argument");
        assert_eq!(
            (a.buf, a.capacity, a.entry_size),
            (0xadad_ad93_adad_adad, 1, 16)
        );

        let mut st = State::new();
        st.step(Op::Open {
            control: false,
            admin: false,
        });
        let client = st.opens[0].client;
        let mut bytes = arg.clone();
        let r = st.ioctl(client, DRIVER_CMD_LIST_CLIENTS, &mut bytes);
        assert_eq!(r.map(|_| ()).unwrap_err().errno, Errno::EFAULT);
        assert_eq!(st.user.faults, 1);
        run(&data);
    }
}
