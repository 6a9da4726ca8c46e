//! `Device` and `Context`: the shim's opens and contexts as Python classes, closable
//! (`close()`, `with`), making buffers, streams and events.
#![forbid(unsafe_code)]

use std::sync::Arc;

use davinci_shim::{self as shim, DevicePath, DeviceSource, ExportToken, ShareMode};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::base::{invalid, size, timeout, type_error, type_name, OrRaise, Slot};
use crate::memory::{Buffer, Mem};
use crate::stream::{Event, Stream, StreamOpts};

/// An open of a davinci device (`davinci_shim::Device`).
#[pyclass(frozen, module = "davinci._davinci")]
pub struct Device {
    inner: Slot<shim::Device>,
    spec: String,
    /// Where `spec` came from: None when the caller named it.
    source: Option<DeviceSource>,
}

impl Device {
    pub(crate) fn get(&self, op: &'static str) -> PyResult<shim::Device> {
        self.inner.get(op, "device")
    }
}

#[pymethods]
impl Device {
    /// Opens `spec` (`"embedded"`, `"mock:SOCKET"`, `"/dev/davinciN"`, or an int: device
    /// `spec` of this process's numbering, `DAVINCI_VISIBLE_DEVICES` / `ASCEND_VISIBLE_DEVICES`
    /// as `davinci_shim::visible` reads them); None: the device a
    /// program that names none gets, by the rule Rust and C share
    /// (`davinci_shim::DevicePath::default_device`): `$DAVINCI_DEVICE` if set, else this
    /// node's device (`/dev/davinci0`, else `davinci0.sock` in davinci-mockd's default
    /// socket directory), else the embedded mock device. `path` and `source` say which.
    #[new]
    #[pyo3(signature = (spec = None))]
    fn new(py: Python<'_>, spec: Option<&Bound<'_, PyAny>>) -> PyResult<Device> {
        let (dev, path, source) = match spec.filter(|s| !s.is_none()) {
            // An index of this process's numbering (the visible-device list's).
            Some(s) if s.is_instance_of::<pyo3::types::PyInt>() => {
                let Ok(index) = s.extract::<usize>() else {
                    return Err(type_error(
                        "Device",
                        "spec",
                        format!("a device index is 0 or more, not {s}"),
                    ));
                };
                let path = shim::visible::visible_device(index).or_raise()?;
                let dev = py.detach(|| shim::Device::open_path(&path)).or_raise()?;
                (dev, path, Some(DeviceSource::Visible))
            }
            Some(s) => {
                let Ok(s) = s.extract::<String>() else {
                    return Err(type_error(
                        "Device",
                        "spec",
                        format!(
                            "must be a str (\"embedded\", \"mock:SOCKET\", \"/dev/davinciN\"), \
                             a device index (int) or None, not {}",
                            type_name(s)
                        ),
                    ));
                };
                let path = DevicePath::parse(&s).or_raise()?;
                let dev = py.detach(|| shim::Device::open_path(&path)).or_raise()?;
                (dev, path, None)
            }
            None => {
                let (dev, path, from) = py.detach(shim::Device::open_default).or_raise()?;
                (dev, path, Some(from))
            }
        };
        crate::trace::opened(&dev);
        Ok(Device {
            inner: Slot::new(dev),
            spec: path.to_string(),
            source,
        })
    }

    /// The device it opened: `embedded`, `mock:SOCKET` or `/dev/davinciN` (also when none
    /// was named).
    #[getter]
    fn path(&self) -> &str {
        &self.spec
    }

    /// The same as `path`.
    #[getter]
    fn spec(&self) -> &str {
        &self.spec
    }

    /// Where `path` came from: `"argument"` (named by the caller), `"DAVINCI_DEVICE"`,
    /// `"node"` (this node's device), `"embedded"` (none named, none on the node) or
    /// `"visible"` (an index of the visible-device list, or its first device).
    #[getter]
    fn source(&self) -> &'static str {
        match self.source {
            None => "argument",
            Some(DeviceSource::Env) => "DAVINCI_DEVICE",
            Some(DeviceSource::Node) => "node",
            Some(DeviceSource::Embedded) => "embedded",
            Some(DeviceSource::Visible) => "visible",
        }
    }

    /// Which device and which client: `davinci-mockd device 0 at mock:... (client 3)`.
    fn __str__(&self) -> String {
        match self.inner.lock().as_ref() {
            Some(d) => d.to_string(),
            None => format!("{} (closed)", self.spec),
        }
    }

    /// `__str__` and where the path came from when the caller named none.
    fn __repr__(&self) -> String {
        let from = match self.source {
            None => String::new(),
            Some(s) => format!(" (from {s})"),
        };
        match self.inner.lock().as_ref() {
            Some(d) => format!("<davinci.Device {d}{from}>"),
            None => format!("<davinci.Device {} (closed){from}>", self.spec),
        }
    }

    /// The GET_INFO reply read at open, as a dict.
    #[getter]
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        info_dict(py, self.get("Device.info")?.info())
    }

    /// A fresh GET_INFO (memory in use, clients now), as a dict.
    fn query_info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dev = self.get("Device.query_info")?;
        let info = py.detach(|| dev.query_info()).or_raise()?;
        info_dict(py, &info)
    }

    /// This open's client id (what `davinci-smi info -t usage` shows), if the driver says.
    #[getter]
    fn client_id(&self) -> PyResult<Option<u32>> {
        Ok(self.get("Device.client_id")?.client_id())
    }

    /// The kernels the device runs (LIST_KERNELS, ABI 1.5), as dicts: `id`, `name`
    /// (`"gemm"`...), `version`, `params_version`, `params_size` and `dtypes` (their names);
    /// empty on a device without kernels (the kernel module's software device).
    fn kernels<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let dev = self.get("Device.kernels")?;
        let list = py.detach(|| dev.kernels()).or_raise()?;
        let names = [
            (shim::Dtype::F32, "f32"),
            (shim::Dtype::F16, "f16"),
            (shim::Dtype::Bf16, "bf16"),
            (shim::Dtype::I8, "i8"),
            (shim::Dtype::I32, "i32"),
            (shim::Dtype::U8, "u8"),
            (shim::Dtype::U16, "u16"),
            (shim::Dtype::U32, "u32"),
        ];
        list.iter()
            .map(|k| {
                let d = PyDict::new(py);
                d.set_item("id", k.id)?;
                d.set_item("name", k.name_str().unwrap_or(""))?;
                d.set_item("version", k.version)?;
                d.set_item("params_version", k.params_version)?;
                d.set_item("params_size", k.params_size)?;
                let dtypes: Vec<&str> = names
                    .iter()
                    .filter(|(t, _)| k.dtypes & t.bit() != 0)
                    .map(|(_, n)| *n)
                    .collect();
                d.set_item("dtypes", dtypes)?;
                Ok(d)
            })
            .collect()
    }

    /// This open's tenant's usage against each of its limits (GET_USAGE, ABI 1.5; the quotas
    /// of a shared device bind a tenant: the container, else the user), as a dict:
    /// `memory` (bytes), `allocations`, `contexts`, `streams`, `events` and `exports`, each
    /// a `(held, limit)` pair (what the tenant holds; the limit: the tenant's share while the
    /// device is shared, the whole table or the operator's memory limit while it is
    /// exclusive), with `share_mode`, `client_id`, `tenant` (`"user"` or `"container"`) and
    /// `slotted` (whether the tenant holds a tenant slot). `memory_used()` is device-wide; this is the caller's.
    fn usage<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dev = self.get("Device.usage")?;
        let u = py.detach(|| dev.usage()).or_raise()?;
        let d = PyDict::new(py);
        d.set_item("memory", (u.memory.held, u.memory.limit))?;
        for (name, h) in [
            ("allocations", u.allocations),
            ("contexts", u.contexts),
            ("streams", u.streams),
            ("events", u.events),
            ("exports", u.exports),
        ] {
            d.set_item(name, (h.held, h.limit))?;
        }
        d.set_item("share_mode", u.share_mode.map(|m| m.name()))?;
        d.set_item("client_id", u.client_id)?;
        d.set_item("tenant", u.tenant.map(|t| t.name()))?;
        d.set_item("slotted", u.slotted)?;
        Ok(d)
    }

    /// Waits until every task submitted so far on every stream of this device has completed
    /// (`cudaDeviceSynchronize`), at most `timeout` seconds (None: no limit). Any thread may
    /// call it while others use their streams; the GIL is released and Ctrl-C interrupts it.
    /// A stream the device stopped raises `IOError`-class `DavinciError` (EIO) naming it.
    #[pyo3(signature = (timeout = None))]
    fn synchronize(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        const OP: &str = "Device.synchronize";
        let dev = self.get(OP)?;
        let t = crate::base::timeout(OP, timeout)?;
        crate::base::wait_sliced(py, OP, t, |slice| dev.synchronize(slice))
    }

    /// Device memory allocated by all clients now, in bytes (device-wide, every tenant's).
    fn memory_used(&self, py: Python<'_>) -> PyResult<u64> {
        let dev = self.get("Device.memory_used")?;
        py.detach(|| dev.memory_used()).or_raise()
    }

    /// The device's UUID (GET_IDENTITY, 8-4-4-4-12 hex digits): the same for every open of
    /// the device, across daemon restarts and reboots; how two processes tell they opened
    /// the same device.
    fn uuid(&self, py: Python<'_>) -> PyResult<String> {
        let dev = self.get("Device.uuid")?;
        let id = py.detach(|| dev.identity()).or_raise()?;
        Ok(id.uuid_string().to_string())
    }

    /// The device's sensors now (GET_SENSORS, ABI 1.5; a software device's are a model
    /// driven by its busy time, docs/abi.md "Sensors"): a dict of `temperature_c`,
    /// `memory_temperature_c`, `power_w`, `power_limit_w`, `voltage_v`, `energy_j`,
    /// `slowdown_c`, `shutdown_c` (floats) and `throttle` (a list of `"thermal"`,
    /// `"power"`). A driver without sensors raises `DavinciError` with errno `ENOTTY`.
    fn sensors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dev = self.get("Device.sensors")?;
        let s = py.detach(|| dev.sensors()).or_raise()?;
        let d = PyDict::new(py);
        let milli = |v: i64| v as f64 / 1000.0;
        d.set_item("temperature_c", milli(s.temperature_mc.into()))?;
        d.set_item(
            "memory_temperature_c",
            milli(s.memory_temperature_mc.into()),
        )?;
        d.set_item("power_w", milli(s.power_mw.into()))?;
        d.set_item("power_limit_w", milli(s.power_limit_mw.into()))?;
        d.set_item("voltage_v", milli(s.voltage_mv.into()))?;
        d.set_item("energy_j", s.energy_mj as f64 / 1000.0)?;
        d.set_item("slowdown_c", milli(s.slowdown_temperature_mc.into()))?;
        d.set_item("shutdown_c", milli(s.shutdown_temperature_mc.into()))?;
        let mut throttle = Vec::new();
        if s.throttle & davinci_shim::THROTTLE_THERMAL != 0 {
            throttle.push("thermal");
        }
        if s.throttle & davinci_shim::THROTTLE_POWER != 0 {
            throttle.push("power");
        }
        d.set_item("throttle", throttle)?;
        Ok(d)
    }

    /// Allocates `nbytes` of device memory, zeroed, with a host view.
    fn alloc(&self, py: Python<'_>, nbytes: &Bound<'_, PyAny>) -> PyResult<Buffer> {
        let nbytes = size("Device.alloc", "nbytes", nbytes)?;
        let dev = self.get("Device.alloc")?;
        let b = py.detach(|| dev.alloc(nbytes)).or_raise()?;
        Ok(Buffer::new(Mem::Dev(b)))
    }

    /// A new context (streams and events live in one).
    fn create_context(&self, py: Python<'_>) -> PyResult<Context> {
        let dev = self.get("Device.create_context")?;
        let ctx = py.detach(|| dev.create_context()).or_raise()?;
        Ok(Context {
            inner: Slot::new(ctx),
        })
    }

    /// Imports a buffer another client exported (`Buffer.export()`'s token: 16 hex digits,
    /// or the integer).
    fn import_buffer(&self, py: Python<'_>, token: &Bound<'_, PyAny>) -> PyResult<Buffer> {
        let dev = self.get("Device.import_buffer")?;
        let token = if let Ok(s) = token.extract::<String>() {
            s.parse::<ExportToken>().or_raise()?
        } else if let Ok(v) = token.extract::<u64>() {
            ExportToken(v)
        } else {
            return Err(type_error(
                "Device.import_buffer",
                "token",
                format!(
                    "must be Buffer.export()'s string (16 hex digits) or an int, not {}",
                    type_name(token)
                ),
            ));
        };
        let b = py.detach(|| dev.import(token)).or_raise()?;
        Ok(Buffer::new(Mem::Dev(b)))
    }

    /// Imports a buffer another client exported as a file descriptor (`Buffer.export_fd()`,
    /// received with `socket.recv_fds`): `fd` stays the caller's (the buffer keeps its own
    /// duplicate).
    fn import_fd(&self, py: Python<'_>, fd: i32) -> PyResult<Buffer> {
        let dev = self.get("Device.import_fd")?;
        let b = py.detach(|| dev.import_fd_number(fd)).or_raise()?;
        Ok(Buffer::new(Mem::Dev(b)))
    }

    /// Sets the sharing mode: "shared" (many isolated clients) or "exclusive".
    fn set_share_mode(&self, py: Python<'_>, mode: &str) -> PyResult<()> {
        let m = match mode {
            "shared" => ShareMode::Shared,
            "exclusive" => ShareMode::Exclusive,
            _ => {
                return Err(invalid(
                    "Device.set_share_mode",
                    format!("mode {mode:?}: use \"shared\" or \"exclusive\""),
                ))
            }
        };
        let dev = self.get("Device.set_share_mode")?;
        py.detach(|| dev.set_share_mode(m)).or_raise()
    }

    /// The sharing mode ("shared" or "exclusive") and the clients attached.
    fn share_mode(&self, py: Python<'_>) -> PyResult<(&'static str, u32)> {
        let dev = self.get("Device.share_mode")?;
        let (m, n) = py.detach(|| dev.share_mode()).or_raise()?;
        Ok((
            match m {
                ShareMode::Shared => "shared",
                ShareMode::Exclusive => "exclusive",
            },
            n,
        ))
    }

    /// Closes this handle of the open; the open itself closes when nothing made from it
    /// (contexts, streams, buffers) is left.
    fn close(&self) {
        self.inner.close();
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        _t: Option<&Bound<'_, PyAny>>,
        _v: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) {
        self.close();
    }
}

fn info_dict<'py>(py: Python<'py>, i: &shim::DeviceInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("abi_version", (i.abi_major, i.abi_minor))?;
    d.set_item("features", i.features.bits())?;
    d.set_item("device_id", i.device_id)?;
    d.set_item("page_size", i.page_size)?;
    d.set_item("memory_size", i.memory_size)?;
    d.set_item("memory_used", i.memory_used)?;
    d.set_item("client_memory_limit", i.client_memory_limit)?;
    d.set_item("max_clients", i.max_clients)?;
    d.set_item("max_contexts", i.max_contexts)?;
    d.set_item("max_streams", i.max_streams)?;
    d.set_item("max_events", i.max_events)?;
    d.set_item("max_allocations", i.max_allocations)?;
    d.set_item("max_cmd_entries", i.max_cmd_entries)?;
    d.set_item("max_event_entries", i.max_event_entries)?;
    d.set_item("mem_align", i.mem_align)?;
    d.set_item("share_mode", i.share_mode)?;
    d.set_item("clients", i.clients)?;
    Ok(d)
}

/// A context: the streams and events made from it may order each other.
#[pyclass(frozen, module = "davinci._davinci")]
pub struct Context {
    inner: Slot<shim::Context>,
}

impl Context {
    pub(crate) fn get(&self, op: &'static str) -> PyResult<shim::Context> {
        self.inner.get(op, "context")
    }
}

#[pymethods]
impl Context {
    /// The driver's handle.
    #[getter]
    fn handle(&self) -> PyResult<u32> {
        Ok(self.inner.get("Context.handle", "context")?.handle())
    }

    /// A new stream; the options are `davinci_shim::StreamOptions`'s (seconds for the
    /// timeout).
    #[pyo3(signature = (*, cmd_entries = 256, event_entries = 512, keep_completions = true,
                        backlog_limit = None, submit_timeout = None))]
    fn create_stream(
        &self,
        py: Python<'_>,
        cmd_entries: u32,
        event_entries: u32,
        keep_completions: bool,
        backlog_limit: Option<usize>,
        submit_timeout: Option<f64>,
    ) -> PyResult<Stream> {
        const OP: &str = "Context.create_stream";
        let ctx = self.inner.get(OP, "context")?;
        let opts = StreamOpts {
            cmd_entries,
            event_entries,
            keep_completions,
            backlog_limit,
            submit_timeout: timeout(OP, submit_timeout)?,
        }
        .build();
        let s = py.detach(|| ctx.create_stream_with(opts)).or_raise()?;
        Ok(Stream::new(s))
    }

    /// A new event.
    fn create_event(&self, py: Python<'_>) -> PyResult<Event> {
        let ctx = self.inner.get("Context.create_event", "context")?;
        let e = py.detach(|| ctx.create_event()).or_raise()?;
        Ok(Event::new(Arc::new(e)))
    }

    /// Imports another process's event (`Event.export()`'s token) into this context.
    fn import_event(
        &self,
        py: Python<'_>,
        token: &Bound<'_, PyAny>,
    ) -> PyResult<crate::shared_event::ImportedEvent> {
        const OP: &str = "Context.import_event";
        let token = crate::shared_event::token_arg(OP, token)?;
        let ctx = self.inner.get(OP, "context")?;
        let e = py.detach(|| ctx.import_event(token)).or_raise()?;
        Ok(crate::shared_event::ImportedEvent::new(e))
    }

    /// Allocates device memory (as `Device.alloc`).
    fn alloc(&self, py: Python<'_>, nbytes: &Bound<'_, PyAny>) -> PyResult<Buffer> {
        let nbytes = size("Context.alloc", "nbytes", nbytes)?;
        let ctx = self.inner.get("Context.alloc", "context")?;
        let b = py.detach(|| ctx.alloc(nbytes)).or_raise()?;
        Ok(Buffer::new(Mem::Dev(b)))
    }

    fn close(&self) {
        self.inner.close();
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        _t: Option<&Bound<'_, PyAny>>,
        _v: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) {
        self.close();
    }
}

/// How many devices this process sees (`torch.cuda.device_count()`): the visible-device
/// list's entries, or the node's devices. Opens none.
#[pyfunction]
pub fn device_count() -> PyResult<usize> {
    shim::Device::count().or_raise()
}

/// The devices this process sees, in its numbering: their paths (`Device(i)` opens the
/// `i`th).
#[pyfunction]
pub fn visible_devices() -> PyResult<Vec<String>> {
    Ok(shim::visible_devices()
        .or_raise()?
        .iter()
        .map(ToString::to_string)
        .collect())
}

/// The symbolic name of an errno this ABI knows (`"ETIMEDOUT"`), or None.
#[pyfunction]
pub fn errno_name(code: i32) -> Option<&'static str> {
    shim::Errno::from_code(code).map(shim::Errno::name)
}
