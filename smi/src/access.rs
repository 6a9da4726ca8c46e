//! How the commands reach a device: a control open behind a trait, so tests use fakes.
#![forbid(unsafe_code)]

use davinci_uapi::{ClientUsage, DeviceInfo, ShareMode};

use crate::error::*;

/// One control open, as `davinci-smi` needs it.
pub trait DeviceAccess {
    /// GET_INFO.
    fn info(&self) -> Result<DeviceInfo, SmiError>;
    /// QUERY_DEVICE_SHARE: mode and attached clients.
    fn share(&self) -> Result<(ShareMode, u32), SmiError>;
    /// SET_DEVICE_SHARE.
    fn set_share(&self, mode: ShareMode) -> Result<(), SmiError>;
    /// LIST_CLIENTS.
    fn clients(&self) -> Result<Vec<ClientUsage>, SmiError>;
}

/// Opens devices by path.
pub trait Opener {
    /// A control open of `path`.
    fn open(&self, path: &str) -> Result<Box<dyn DeviceAccess>, SmiError>;
}

impl DeviceAccess for davinci_shim::Control {
    fn info(&self) -> Result<DeviceInfo, SmiError> {
        Ok(davinci_shim::Control::info(self)?)
    }
    fn share(&self) -> Result<(ShareMode, u32), SmiError> {
        let s = davinci_shim::Control::share(self)?;
        Ok((s.mode, s.clients))
    }
    fn set_share(&self, mode: ShareMode) -> Result<(), SmiError> {
        Ok(self.set_share_mode(mode)?)
    }
    fn clients(&self) -> Result<Vec<ClientUsage>, SmiError> {
        Ok(davinci_shim::Control::clients(self)?)
    }
}

/// Opens devices through the shim ([`davinci_shim::Control`]).
pub struct ShimOpener;

impl Opener for ShimOpener {
    fn open(&self, path: &str) -> Result<Box<dyn DeviceAccess>, SmiError> {
        Ok(Box::new(davinci_shim::Control::open(path)?))
    }
}
