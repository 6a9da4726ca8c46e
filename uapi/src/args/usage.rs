//! What the device reports about its use: LIST_CLIENTS (who holds what, per client),
//! GET_LAST_ERROR (why an open's last command failed) and GET_COUNTERS (device-wide totals).

use crate::layout::abi_struct;

abi_struct! {
    /// LIST_CLIENTS: per-client usage. Two-phase like many variable-length queries: call
    /// with `capacity` 0 to learn `count`, then with a buffer of `capacity` entries.
    #[c_name = "davinci_list_clients_args"]
    pub struct ListClientsArgs {
        /// User pointer to an array of `capacity` `davinci_client_usage` (to driver).
        pub buf: u64,
        /// Entries the buffer holds (to driver).
        pub capacity: u32,
        /// Clients attached; entries written = min(count, capacity) (from driver).
        pub count: u32,
        /// Stride of the caller's entries, normally `sizeof(struct davinci_client_usage)`: a
        /// multiple of 8 from 8 to 4096. The driver writes the first `min(entry_size, its own
        /// size)` bytes of each entry and zeroes the rest, so the entry can grow (to driver).
        pub entry_size: u32,
        /// Reserved, must be 0 (to driver).
        pub pad: u32,
    }
}

abi_struct! {
    /// One attached client, as LIST_CLIENTS reports it (all fields from driver).
    #[c_name = "davinci_client_usage"]
    pub struct ClientUsage {
        /// Driver-assigned client id (unique while the device lives) (from driver).
        pub client_id: u32,
        /// Process id of the opener, as the driver sees it (from driver).
        pub pid: u32,
        /// User id of the opener (from driver).
        pub uid: u32,
        /// Reserved: ignore it, a later minor may use it (from driver).
        pub pad: u32,
        /// Contexts held (from driver).
        pub contexts: u32,
        /// Streams held (from driver).
        pub streams: u32,
        /// Events held (from driver).
        pub events: u32,
        /// Allocations held (from driver).
        pub allocations: u32,
        /// Device memory held in bytes (from driver).
        pub memory_bytes: u64,
        /// Descriptors the device has taken from this client's rings (from driver).
        pub tasks_submitted: u64,
        /// Completions the device has written for this client (from driver).
        pub tasks_completed: u64,
        /// Container id (from the opener's cgroup), NUL-padded; empty if none (from driver).
        pub container: [u8; 64],
        /// Descriptors the host has published and the device has not taken yet, over all
        /// the client's streams (ABI 1.2; a snapshot) (from driver).
        pub tasks_queued: u64,
        /// The opener's process name (the kernel's `comm`, at most 15 bytes), NUL-padded
        /// (ABI 1.2) (from driver).
        pub comm: [u8; 16],
    }
}

impl ClientUsage {
    /// The container id: the bytes of `container` up to the first NUL, or `None` for a client
    /// outside any container. Drivers write ASCII ids; should a byte not be UTF-8, the id
    /// ends before it.
    pub fn container_id(&self) -> Option<&str> {
        let end = self
            .container
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.container.len());
        let bytes = self.container.get(..end).unwrap_or(&[]);
        let id = match core::str::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => {
                core::str::from_utf8(bytes.get(..e.valid_up_to()).unwrap_or(&[])).unwrap_or("")
            }
        };
        (!id.is_empty()).then_some(id)
    }

    /// The opener's process name (`comm`); `""` if the driver did not say (before ABI 1.2).
    pub fn comm(&self) -> &str {
        let end = self
            .comm
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.comm.len());
        let bytes = self.comm.get(..end).unwrap_or(&[]);
        match core::str::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => {
                core::str::from_utf8(bytes.get(..e.valid_up_to()).unwrap_or(&[])).unwrap_or("")
            }
        }
    }

    /// `name` as a `comm` field: at most 15 bytes (cut at a character boundary), NUL-padded.
    pub fn comm_field(name: &str) -> [u8; 16] {
        let mut out = [0u8; 16];
        let mut end = name.len().min(15);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        for (d, s) in out.iter_mut().zip(name.as_bytes().iter().take(end)) {
            *d = *s;
        }
        out
    }

    /// `container` for an id (NUL-padded; an id longer than the field is cut).
    pub fn container_field(id: &str) -> [u8; 64] {
        let mut out = [0u8; 64];
        for (d, s) in out.iter_mut().zip(id.bytes()) {
            *d = s;
        }
        out
    }
}

/// How messages name a client: `pid 42 (uid 1000, container abcd)` or
/// `pid 42 (uid 1000, no container)`.
impl core::fmt::Display for ClientUsage {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.container_id() {
            Some(c) => write!(f, "pid {} (uid {}, container {c})", self.pid, self.uid),
            None => write!(f, "pid {} (uid {}, no container)", self.pid, self.uid),
        }
    }
}

/// Bytes of [`LastError::message`], the terminating NUL included.
pub const LAST_ERROR_MESSAGE_LEN: usize = 112;

abi_struct! {
    /// GET_LAST_ERROR (ABI 1.2): why the last failed command of this open file failed, for a
    /// driver whose system calls carry only an errno (the kernel module). Over davinci-mockd
    /// every reply carries its message anyway.
    #[c_name = "davinci_last_error"]
    pub struct LastError {
        /// Request number of the last failed command of this open; 0 if none failed yet.
        /// What polling answers is not a failure here: `EAGAIN` and `ETIMEDOUT` (since 1.4)
        /// leave the record alone (from driver).
        pub request: u32,
        /// Its errno, positive (from driver). Not named `errno`, which is a macro in C.
        pub error: u32,
        /// Commands of this open that failed so far (`EAGAIN` and `ETIMEDOUT` not counted,
        /// since 1.4): two reads with the same count saw the same failure (from driver).
        pub count: u64,
        /// What was wrong: UTF-8, NUL-terminated, cut at a character boundary to fit
        /// (from driver).
        pub message: [u8; 112],
    }
}

impl LastError {
    /// The message as text (up to the NUL; an invalid tail is dropped).
    pub fn message_str(&self) -> &str {
        let end = self
            .message
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.message.len());
        let bytes = self.message.get(..end).unwrap_or(&[]);
        match core::str::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => {
                core::str::from_utf8(bytes.get(..e.valid_up_to()).unwrap_or(&[])).unwrap_or("")
            }
        }
    }

    /// `text` as a message field: cut at a character boundary so the NUL fits.
    pub fn message_field(text: &str) -> [u8; LAST_ERROR_MESSAGE_LEN] {
        let mut out = [0u8; LAST_ERROR_MESSAGE_LEN];
        let mut end = text.len().min(LAST_ERROR_MESSAGE_LEN - 1);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        for (d, s) in out.iter_mut().zip(text.as_bytes().iter().take(end)) {
            *d = *s;
        }
        out
    }
}

abi_struct! {
    /// GET_COUNTERS (ABI 1.3): device-wide counters since the device started, for monitoring
    /// (`davinci-exporter`). Counters only grow; the object counts are a snapshot. Any open
    /// may call it.
    #[c_name = "davinci_device_counters"]
    pub struct DeviceCounters {
        /// Descriptors the device has taken from every command ring, streams and clients
        /// long gone included (from driver).
        pub tasks_submitted: u64,
        /// Completion records the device has written, failed ones included (from driver).
        pub tasks_completed: u64,
        /// Times a stream entered the error state: a failed descriptor, corrupt ring
        /// indices, a device reset (from driver).
        pub stream_errors: u64,
        /// Doorbells that woke the device: a worker asleep with NEED_WAKEUP armed found its
        /// stream's doorbell word changed (once per sleep, however often it was rung), or,
        /// on a driver without `DAVINCI_FEAT_DOORBELL_FUTEX`, a NOTIFY. Near zero per task
        /// under load, when NEED_WAKEUP is clear and hosts do not ring (from driver).
        pub doorbells: u64,
        /// Client opens attached since the device started (control opens excluded)
        /// (from driver).
        pub clients_opened: u64,
        /// Contexts that exist now (from driver).
        pub contexts: u32,
        /// Streams that exist now (from driver).
        pub streams: u32,
        /// Events that exist now (from driver).
        pub events: u32,
        /// Allocations that exist now (from driver).
        pub allocations: u32,
        /// Reserved: ignore it, a later minor may use it (from driver).
        pub reserved: [u64; 4],
    }
}
