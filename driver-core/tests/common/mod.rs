//! A heap-backed fake platform for driver-core tests: device memory per client in `Vec`s,
//! rings in 64-byte-aligned heap buffers the test also drives as the host.
#![allow(dead_code)]

use std::collections::HashMap;

use davinci_driver_core::{
    Config, Device, Error, OpenParams, Platform, Result, Role, StreamRegions, CONTAINER_LEN,
};
use davinci_ring::RingRegion;
use davinci_uapi::{Errno, Features};

#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct Line([u8; 64]);

/// A 64-byte-aligned zeroed heap buffer.
pub struct Buf {
    lines: Vec<Line>,
}

impl Buf {
    pub fn new(len: usize) -> Self {
        Self {
            lines: vec![Line([0; 64]); len.div_ceil(64)],
        }
    }
    pub fn ptr(&mut self) -> *mut u8 {
        self.lines.as_mut_ptr().cast()
    }
    pub fn len(&self) -> usize {
        self.lines.len() * 64
    }
}

pub struct StreamMem {
    pub cmd: Buf,
    pub event: Buf,
    /// Raw pointers taken from the buffers at creation (for the test's host side).
    pub cmd_ptr: *mut u8,
    pub event_ptr: *mut u8,
    pub cmd_entries: u32,
    pub event_entries: u32,
}

#[derive(Default)]
pub struct FakePlatform {
    pub arenas: HashMap<u32, Vec<u8>>,
    pub memory_size: u64,
    pub kicks: Vec<u32>,
    pub notifies: u64,
    pub released_streams: u32,
    pub now: u64,
}

impl FakePlatform {
    fn arena(&mut self, client: u32) -> &mut Vec<u8> {
        let size = self.memory_size as usize;
        self.arenas.entry(client).or_insert_with(|| vec![0; size])
    }
    fn range(&mut self, client: u32, offset: u64, len: usize) -> Result<&mut [u8]> {
        let a = self.arena(client);
        let start = offset as usize;
        a.get_mut(start..start + len)
            .ok_or(Error::new(Errno::EFAULT, "outside arena"))
    }
}

impl Platform for FakePlatform {
    type StreamMem = StreamMem;

    fn create_stream(
        &mut self,
        _client: u32,
        cmd_entries: u32,
        cmd_bytes: usize,
        event_entries: u32,
        event_bytes: usize,
    ) -> Result<StreamRegions<StreamMem>> {
        let mut cmd = Buf::new(cmd_bytes);
        let mut event = Buf::new(event_bytes);
        // SAFETY: the buffers are 64-byte aligned, `len` bytes long, and live in `StreamMem`,
        // which the device keeps for as long as it keeps these regions.
        let (c, e) = unsafe {
            (
                RingRegion::new(cmd.ptr(), cmd.len(), cmd_entries, 64),
                RingRegion::new(event.ptr(), event.len(), event_entries, 32),
            )
        };
        let (Ok(c), Ok(e)) = (c, e) else {
            return Err(Error::new(Errno::EINVAL, "bad region"));
        };
        Ok(StreamRegions {
            mem: StreamMem {
                cmd_ptr: cmd.ptr(),
                event_ptr: event.ptr(),
                cmd,
                event,
                cmd_entries,
                event_entries,
            },
            cmd: c,
            event: e,
        })
    }

    fn release_stream(&mut self, _client: u32, _stream: u32, _mem: StreamMem) {
        self.released_streams += 1;
    }

    fn alloc_backing(&mut self, client: u32, offset: u64, len: u64) -> Result<()> {
        self.range(client, offset, len as usize)?.fill(0);
        Ok(())
    }

    fn free_backing(&mut self, client: u32, offset: u64, len: u64) {
        if let Ok(r) = self.range(client, offset, len as usize) {
            r.fill(0xEE);
        }
    }

    fn mem_read(&mut self, client: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = buf.len();
        buf.copy_from_slice(self.range(client, offset, n)?);
        Ok(())
    }

    fn mem_write(&mut self, client: u32, offset: u64, data: &[u8]) -> Result<()> {
        self.range(client, offset, data.len())?
            .copy_from_slice(data);
        Ok(())
    }

    fn mem_copy(&mut self, client: u32, dst: u64, src: u64, len: u64) -> Result<()> {
        let a = self.arena(client);
        let (d, s, n) = (dst as usize, src as usize, len as usize);
        if s + n > a.len() || d + n > a.len() {
            return Err(Error::new(Errno::EFAULT, "outside arena"));
        }
        a.copy_within(s..s + n, d);
        Ok(())
    }

    fn mem_fill(&mut self, client: u32, dst: u64, len: u64, pattern: u32) -> Result<()> {
        let r = self.range(client, dst, len as usize)?;
        for c in r.chunks_exact_mut(4) {
            c.copy_from_slice(&pattern.to_ne_bytes());
        }
        Ok(())
    }

    fn now_ns(&self) -> u64 {
        self.now
    }

    fn kick_stream(&mut self, stream: u32) {
        self.kicks.push(stream);
    }

    fn notify_waiters(&mut self) {
        self.notifies += 1;
    }
}

pub const MEM: u64 = 16 << 20;

pub fn device() -> Device<FakePlatform> {
    Device::new(
        Config {
            device_id: 0,
            memory_size: MEM,
            client_memory_limit: 8 << 20,
            page_size: 4096,
            platform_features: Features::DOORBELL_FUTEX,
        },
        FakePlatform {
            memory_size: MEM,
            ..Default::default()
        },
    )
}

pub fn params(pid: u32, uid: u32, role: Role) -> OpenParams {
    let mut container = [0u8; CONTAINER_LEN];
    let name = format!("ctr-{pid}");
    container[..name.len()].copy_from_slice(name.as_bytes());
    OpenParams {
        role,
        pid,
        uid,
        admin: uid == 0,
        container,
    }
}
