//! The admins' commands as the daemon serves them: SET_DEVICE_SHARE and TENANT_SHARE, each
//! accepted change logged (who, from what to what) and each refusal audited (rate-limited
//! per uid: `crate::audit`).
#![forbid(unsafe_code)]

use davinci_driver_core::Error;
use davinci_uapi::{
    DeviceShareArgs, ShareMode, TenantShareArgs, Wire, DRIVER_CMD_SET_DEVICE_SHARE,
    DRIVER_CMD_TENANT_SHARE,
};
use tracing::{info, warn};

use crate::audit::Record;
use crate::conn::Peer;
use crate::shared::Shared;

/// SET_DEVICE_SHARE, audited: every accepted call (who, from what to what) is logged, and
/// every refusal (rate-limited per uid: `crate::audit`); a refusal for want of admin rights
/// says who the admins are and how to become one. Changes through this daemon are
/// serialized so "from" and "to" are exact.
pub(crate) fn set_share(
    shared: &Shared,
    client: u32,
    peer: &Peer,
    arg: &mut [u8],
) -> Result<(), Error> {
    let requested = DeviceShareArgs::from_bytes(arg).map(|a| a.mode);
    let requested_name = match requested.and_then(ShareMode::from_u32) {
        Some(m) => m.to_string(),
        None => requested.map_or("(malformed argument)".into(), |m| format!("{m} (invalid)")),
    };
    let _serial = shared
        .share_lock
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let from = shared.dev.share_mode();
    let r = shared.dev.ioctl(
        client,
        DRIVER_CMD_SET_DEVICE_SHARE,
        arg,
        &mut davinci_driver_core::NoUserMem,
    );
    let to = shared.dev.share_mode();
    let c = &peer.cred;
    match r {
        Ok(()) => {
            info!(
                device = %shared.name, pid = c.pid, uid = c.uid, gid = c.gid,
                container = %peer.container, from = %from,
                to = %to, changed = from != to,
                "device sharing set"
            );
            Ok(())
        }
        Err(e) => {
            shared.audit.record(Record::ShareRefused, c.uid, || {
                warn!(
                    device = %shared.name, pid = c.pid, uid = c.uid, gid = c.gid,
                    container = %peer.container, admin = peer.admin,
                    mode = %from, requested = %requested_name,
                    errno = %e.errno.name(), error = %e.message(),
                    "device sharing change refused"
                );
            });
            Err(e)
        }
    }
}

/// TENANT_SHARE: a change (`set`) is logged when accepted, and audited when refused (as
/// SET_DEVICE_SHARE's); a read is not logged.
pub(crate) fn tenant_share(
    shared: &Shared,
    client: u32,
    peer: &Peer,
    arg: &mut [u8],
) -> Result<(), Error> {
    let asked = TenantShareArgs::from_bytes(arg).filter(|a| a.set == 1);
    let r = shared.dev.ioctl(
        client,
        DRIVER_CMD_TENANT_SHARE,
        arg,
        &mut davinci_driver_core::NoUserMem,
    );
    let Some(asked) = asked else {
        return r;
    };
    let c = &peer.cred;
    let tenant = match asked.tenant_kind {
        davinci_uapi::TENANT_USER => format!("user:{}", asked.uid),
        _ => {
            let id = asked.container.split(|&b| b == 0).next().unwrap_or(&[]);
            format!("container:{}", String::from_utf8_lossy(id).escape_debug())
        }
    };
    match &r {
        Ok(()) => info!(
            device = %shared.name, pid = c.pid, uid = c.uid, container = %peer.container,
            tenant = %tenant, shares = asked.shares, "tenant share set"
        ),
        Err(e) => shared.audit.record(Record::ShareRefused, c.uid, || {
            warn!(
                device = %shared.name, pid = c.pid, uid = c.uid, container = %peer.container,
                admin = peer.admin, tenant = %tenant, shares = asked.shares,
                errno = %e.errno.name(), error = %e.message(), "tenant share change refused"
            );
        }),
    }
    r
}
