//! How a `davinci-bench` run is configured: its [`Options`] and the measurement
//! [`Windows`] they imply.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::time::Duration;

use davinci_shim::Device;

use crate::measure::Window;

/// How a run is configured.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Short windows.
    pub quick: bool,
    /// A CPU hog on every CPU while the rows run (after the quiet round trip).
    pub contended: bool,
    /// Run only the rows whose name contains this (and the rows they are compared with).
    pub filter: Option<String>,
    /// The `davinci-mockd` binary (else looked for beside this executable).
    pub mockd: Option<PathBuf>,
    /// The executable the client processes run (`<exe> client ...`): `davinci-bench`
    /// itself. `None`: the multi-process rows are skipped.
    pub client_exe: Option<PathBuf>,
    /// Print progress lines on stderr.
    pub progress: bool,
    /// Run the device rows ([`super::device_plan`]) against the device at this path (the
    /// kernel module's `/dev/davinciN`) instead of the embedded device.
    pub device: Option<String>,
    /// Rounds of the whole table (0 and 1: one). With more, every row is measured once per
    /// round, in turn, and reports its median value and the median of its per-round ratios
    /// ([`crate::report::combine_rounds`]).
    pub rounds: usize,
    /// The embedded device the embedded rows use (each on its own context and streams).
    /// `None`: the run creates one ([`Device::embedded`]) and drops it with the [`Suite`](super::Suite).
    pub embedded: Option<Device>,
}

/// The measurement windows of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    /// Throughput rows.
    pub throughput: Window,
    /// Round-trip latency rows.
    pub latency: Window,
    /// Control-path rows (each sample is a driver round trip or two).
    pub control: Window,
}

impl Windows {
    /// The windows of a default run (about a minute of windows in all) or of a `--quick`
    /// one (a few seconds).
    pub fn new(quick: bool) -> Windows {
        let ms = Duration::from_millis;
        if quick {
            Windows {
                throughput: Window::new(ms(250), ms(50)),
                latency: Window::new(ms(250), ms(50)),
                control: Window::new(ms(100), ms(20)),
            }
        } else {
            Windows {
                throughput: Window::new(ms(3000), ms(200)),
                latency: Window::new(ms(2000), ms(200)),
                control: Window::new(ms(1000), ms(100)),
            }
        }
    }
}
