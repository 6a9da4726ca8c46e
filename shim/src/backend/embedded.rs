//! The mock device running in this process: one open (client or control) of a
//! [`MockDevice`]. Only with the `embedded` feature.
#![forbid(unsafe_code)]

use std::fmt;

use davinci_mock_device::{local_open_params, MockDevice, NoUserMem};
use davinci_uapi::{ClientUsage, KernelInfo, ListKernelsArgs, Wire, DRIVER_CMD_LIST_KERNELS};

use super::{Backend, MapFd, MapFile, Role};
use crate::error::{Error, Result};

/// One open of an in-process [`MockDevice`].
pub(crate) struct Embedded {
    dev: MockDevice,
    /// The open's handle in the device's client table.
    client: u32,
}

impl Embedded {
    /// Opens `dev` as `role`. The caller owns the in-process device, so it is an admin (it may
    /// change device sharing).
    pub(crate) fn open(dev: MockDevice, role: Role) -> Result<Self> {
        let r = match role {
            Role::Client => davinci_mock_device::Role::Client,
            Role::Control => davinci_mock_device::Role::Control,
        };
        Self::open_with(dev, local_open_params(r, true))
    }

    /// Opens `dev` as a client of another user, `uid`: not an admin, its own tenant (a test
    /// of multi-tenant code in one process).
    pub(crate) fn open_as_user(dev: MockDevice, uid: u32) -> Result<Self> {
        let params = davinci_mock_device::OpenParams {
            uid,
            admin: false,
            tenant: davinci_mock_device::Tenant::User(uid),
            ..local_open_params(davinci_mock_device::Role::Client, false)
        };
        Self::open_with(dev, params)
    }

    fn open_with(dev: MockDevice, params: davinci_mock_device::OpenParams) -> Result<Self> {
        match dev.open(params) {
            Ok(client) => Ok(Self { dev, client }),
            Err(e) => {
                let msg = match e.holder {
                    Some(h) => format!("{} (held by {h})", e.error.message()),
                    None => e.error.message().to_string(),
                };
                Err(Error::new(e.error.errno, "open", msg))
            }
        }
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        self.dev.close(self.client);
    }
}

impl fmt::Display for Embedded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "embedded mock device {}", self.dev.config().device_id)
    }
}

impl Backend for Embedded {
    fn ioctl(&self, op: &'static str, request: u32, arg: &mut [u8]) -> Result<()> {
        // No user pointers on this path: LIST_CLIENTS goes through `list_clients`.
        self.dev
            .ioctl(self.client, request, arg, &mut NoUserMem)
            .map_err(|e| Error::new(e.errno, op, e.message().as_str()))
    }

    fn map(&self, cookie: u64, len: u64) -> Result<MapFd> {
        // The device's own descriptor, lent for the mmap: no dup, no close.
        let src = self
            .dev
            .map_shared(self.client, cookie, len)
            .map_err(|e| Error::new(e.errno, "mmap", e.message().as_str()))?;
        Ok(MapFd {
            fd: MapFile::Lent(src.fd),
            offset: src.offset,
        })
    }

    fn maps_files(&self) -> bool {
        true
    }

    fn ioctl_into(
        &self,
        op: &'static str,
        request: u32,
        arg: &mut [u8],
        out: &mut [u8],
    ) -> Result<()> {
        /// The caller's buffer, at device "user addresses" from `BASE`.
        struct Into<'a>(&'a mut [u8]);
        const BASE: u64 = 1 << 20;
        impl davinci_mock_device::UserMem for Into<'_> {
            fn write(&mut self, addr: u64, data: &[u8]) -> davinci_mock_device::CoreResult<()> {
                let fault = || {
                    davinci_mock_device::CoreError::new(
                        davinci_uapi::Errno::EFAULT,
                        "write outside the caller's buffer",
                    )
                };
                let at = addr.checked_sub(BASE).ok_or_else(fault)? as usize;
                let end = at.checked_add(data.len()).ok_or_else(fault)?;
                self.0
                    .get_mut(at..end)
                    .ok_or_else(fault)?
                    .copy_from_slice(data);
                Ok(())
            }
        }
        super::entries_fit(op, arg, out)?;
        arg[..8].copy_from_slice(&BASE.to_ne_bytes());
        self.dev
            .ioctl(self.client, request, arg, &mut Into(out))
            .map_err(|e| Error::new(e.errno, op, e.message().as_str()))
    }

    fn list_clients(&self) -> Result<Vec<ClientUsage>> {
        Ok(self.dev.clients())
    }

    fn list_kernels(&self) -> Result<Vec<KernelInfo>> {
        // The device writes "user memory" that is a Vec here, at offsets from a base of 0.
        struct Entries(Vec<u8>);
        impl davinci_mock_device::UserMem for Entries {
            fn write(&mut self, addr: u64, data: &[u8]) -> davinci_mock_device::CoreResult<()> {
                let at = addr as usize;
                let end = at.saturating_add(data.len());
                if self.0.len() < end {
                    self.0.resize(end, 0);
                }
                self.0[at..end].copy_from_slice(data);
                Ok(())
            }
        }
        const OP: &str = "LIST_KERNELS";
        let capacity = 64u32;
        let mut arg = super::list_kernels_arg(1 << 20, capacity);
        let mut out = Entries(Vec::new());
        let r = self
            .dev
            .ioctl(self.client, DRIVER_CMD_LIST_KERNELS, &mut arg, &mut out);
        r.map_err(|e| Error::new(e.errno, OP, e.message().as_str()))?;
        let n = ListKernelsArgs::decode(&arg).count.min(capacity) as usize;
        let base = 1usize << 20;
        Ok((0..n)
            .filter_map(|i| {
                out.0
                    .get(base + i * KernelInfo::SIZE..base + (i + 1) * KernelInfo::SIZE)
            })
            .map(KernelInfo::decode)
            .collect())
    }

    fn mock_device(&self) -> Option<&MockDevice> {
        Some(&self.dev)
    }
}
