// SPDX-License-Identifier: GPL-2.0

//! GET_LAST_ERROR on a PCI device for the refusals the module makes itself, before the device
//! sees a call (an export fd that is not one, no descriptor free, a 33rd blocked WAIT_EVENT):
//! the device's record never saw them, so the module keeps its own per open ([`Refusal`]) and
//! lays it over the device's answer: the module's refusal when it is the open's latest
//! failure (a failure the device answered since makes the device's the latest again), and
//! `count` as the two sides' failures together.

use super::admin::Locked;
use crate::davinci_driver_core::Error as CoreError;
use crate::davinci_uapi::{Errno, LastError, Wire, LAST_ERROR_MESSAGE_LEN};

/// Most opens a device keeps a refusal for (its client table's size).
const MAX_REFUSALS: usize = 320;

/// The module's own refusals of one open.
#[derive(Clone, Copy)]
pub(crate) struct Refusal {
    client: u32,
    /// The latest: its request and why; `None` once the device answered a failure since.
    latest: Option<(u32, CoreError)>,
    /// How many the module refused so far.
    count: u64,
}

impl Locked<'_> {
    /// The module refused `client`'s `request` with `e`.
    pub(crate) fn note_refusal(&mut self, client: u32, request: u32, e: &CoreError) {
        if matches!(e.errno, Errno::EAGAIN | Errno::ETIMEDOUT) {
            return;
        }
        let refusals = &mut self.refusals;
        if let Some(r) = refusals.iter_mut().find(|r| r.client == client) {
            r.latest = Some((request, *e));
            r.count += 1;
            return;
        }
        if refusals.len() < MAX_REFUSALS {
            let _ = refusals.push(
                Refusal {
                    client,
                    latest: Some((request, *e)),
                    count: 1,
                },
                kernel::alloc::flags::GFP_KERNEL,
            );
        }
    }

    /// The device answered one of `client`'s calls with `errno`: a failure it records (not
    /// `EAGAIN` or `ETIMEDOUT`) is the open's latest now.
    pub(crate) fn device_failed(&mut self, client: u32, errno: u32) {
        if errno == Errno::EAGAIN.code() as u32 || errno == Errno::ETIMEDOUT.code() as u32 {
            return;
        }
        if let Some(r) = self.refusals.iter_mut().find(|r| r.client == client) {
            r.latest = None;
        }
    }

    /// `client` closed.
    pub(crate) fn forget_refusals(&mut self, client: u32) {
        super::admin::remove_where(&mut self.refusals, |r| r.client == client);
    }

    /// GET_LAST_ERROR's reply `reply` from the device, with `client`'s own refusals laid
    /// over it.
    pub(crate) fn overlay_last_error(&self, client: u32, reply: &mut [u8]) {
        let Some(r) = self.refusals.iter().find(|r| r.client == client) else {
            return;
        };
        let Some(mut le) = LastError::from_bytes(reply) else {
            return;
        };
        le.count = le.count.saturating_add(r.count);
        if let Some((request, e)) = r.latest {
            le.request = request;
            le.error = e.errno.code() as u32;
            le.message =
                LastError::message_field(e.message_within(LAST_ERROR_MESSAGE_LEN - 1).as_str());
        }
        le.encode(reply);
    }
}
