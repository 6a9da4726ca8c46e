//! One million tasks over four streams chained by events: every completion arrives exactly
//! once, in stream order, with the right opcode, status and result; the device memory at the
//! end matches a CPU model of the whole run.
//!
//! Each stream runs rounds of 64 tasks. In round `r`, stream `s` (neighbours `s-1`, `s+1`):
//! ```text
//!  0  EVENT_WAIT  f[s+1] >= r        s+1 has copied M[s] of round r-1 (NOP in round 0)
//!  1  FILL        M[s] = pat(s, r)
//!  2  EVENT_RECORD e[s] = r+1        M[s] is ready
//!  3  EVENT_WAIT  e[s-1] >= r+1      M[s-1] of this round is ready
//!  4  COPY        P[s][r % 8] <- M[s-1]
//!  5  EVENT_RECORD f[s] = r+1        done reading M[s-1]
//!  6  ADD         D[s][r % 8] = P[s][r % 8] + A[s]   (u32, i32, f32 by round)
//!  8, 16, .., 56  FILL Z[s][k] = zpat(s, r, k)
//!  others         NOP
//! ```
//! The events make every cross-stream read race-free, so the final memory is a function of
//! the program alone. The host drives all four streams from one thread with non-blocking
//! submits and polls, the way a runtime's dispatcher would.
#![forbid(unsafe_code)]

use davinci_tests::descs::SubmitDescs;
use std::time::{Duration, Instant};

use davinci_shim::{
    Completion, Device, DeviceBuffer, DeviceMem, Dtype, Event, MockConfig, Opcode, Stream,
    StreamOptions, TaskDesc,
};
use davinci_tests::model::{self, DTYPES};
use davinci_tests::{backend_name, open_backend};

const STREAMS: usize = 4;
const TASKS_PER_STREAM: u64 = 250_000;
const ROUND: u64 = 64;
const ROUNDS: u64 = TASKS_PER_STREAM.div_ceil(ROUND);
const PER_STREAM: u64 = ROUNDS * ROUND;
const SLOTS: u64 = 8;
const WORDS: usize = 64;
const BYTES: u64 = (WORDS * 4) as u64;
const ZSLOTS: u64 = 7;

fn pat(s: usize, r: u64) -> u32 {
    model::float_bits(model::mix(s as u64, r) as u32)
}

fn zpat(s: usize, r: u64, k: u64) -> u32 {
    model::mix((s as u64) << 40 | k, r) as u32
}

fn dtype(r: u64) -> Dtype {
    DTYPES[(r % 3) as usize]
}

fn ud(s: usize, n: u64) -> u64 {
    ((s as u64) << 56) | n
}

struct Lane {
    m: DeviceBuffer,
    p: DeviceBuffer,
    d: DeviceBuffer,
    a: DeviceBuffer,
    z: DeviceBuffer,
}

struct Program {
    lanes: Vec<Lane>,
    e: Vec<u32>,
    f: Vec<u32>,
}

impl Program {
    /// The descriptor of task `n` of stream `s`.
    fn desc(&self, s: usize, n: u64) -> TaskDesc {
        let (r, step) = (n / ROUND, n % ROUND);
        let next = (s + 1) % STREAMS;
        let prev = (s + STREAMS - 1) % STREAMS;
        let l = &self.lanes[s];
        let slot = (r % SLOTS) * BYTES;
        let u = ud(s, n);
        match step {
            0 if r > 0 => TaskDesc::event_wait(u, self.f[next], r),
            0 => TaskDesc::nop(u),
            1 => TaskDesc::fill(u, l.m.dev_addr(), BYTES, pat(s, r)),
            2 => TaskDesc::event_record(u, self.e[s], r + 1),
            3 => TaskDesc::event_wait(u, self.e[prev], r + 1),
            4 => TaskDesc::copy(
                u,
                l.p.dev_addr() + slot,
                self.lanes[prev].m.dev_addr(),
                BYTES,
            ),
            5 => TaskDesc::event_record(u, self.f[s], r + 1),
            6 => TaskDesc::add(
                u,
                dtype(r),
                l.d.dev_addr() + slot,
                l.p.dev_addr() + slot,
                l.a.dev_addr(),
                WORDS as u64,
            ),
            k if k % 8 == 0 => TaskDesc::fill(
                u,
                l.z.dev_addr() + (k / 8 - 1) * BYTES,
                BYTES,
                zpat(s, r, k / 8 - 1),
            ),
            _ => TaskDesc::nop(u),
        }
    }

    /// What the completion of task `n` of stream `s` must say; `None` if it is right.
    fn check(&self, s: usize, n: u64, c: &Completion) -> Option<String> {
        let d = self.desc(s, n);
        let r = n / ROUND;
        let result_ok = match Opcode::from_u8(d.opcode) {
            Some(Opcode::Nop) => c.result == 0,
            Some(Opcode::Fill) | Some(Opcode::Copy) => c.result == BYTES,
            Some(Opcode::Add) => c.result == WORDS as u64,
            // Only this stream records its events, with increasing values.
            Some(Opcode::EventRecord) => c.result == r + 1,
            Some(Opcode::EventWait) => c.result >= d.imm,
            _ => false,
        };
        if c.user_data != d.user_data || c.status != 0 || c.opcode != d.opcode || !result_ok {
            Some(format!(
                "stream {s} task {n}: got user_data {:#x} status {} opcode {} result {}, \
                 expected user_data {:#x} status 0 opcode {} ({:?})",
                c.user_data, c.status, c.opcode, c.result, d.user_data, d.opcode, d
            ))
        } else {
            None
        }
    }
}

#[test]
fn million_tasks_four_streams_with_events() {
    let dev: Device = open_backend(&backend_name(), MockConfig::default()).expect("open device");
    let ctx = dev.create_context().expect("context");
    let e: Vec<Event> = (0..STREAMS).map(|_| ctx.create_event().unwrap()).collect();
    let f: Vec<Event> = (0..STREAMS).map(|_| ctx.create_event().unwrap()).collect();
    let mut streams: Vec<Stream> = (0..STREAMS)
        .map(|_| {
            ctx.create_stream_with(StreamOptions::depths(1024, 2048))
                .unwrap()
        })
        .collect();
    let mut rng = model::Rng::new(42);
    let mut host_a = Vec::new();
    let lanes: Vec<Lane> = (0..STREAMS)
        .map(|_| {
            let a: Vec<u32> = (0..WORDS).map(|_| rng.float_bits()).collect();
            let lane = Lane {
                m: dev.alloc(BYTES as usize).unwrap(),
                p: dev.alloc((SLOTS * BYTES) as usize).unwrap(),
                d: dev.alloc((SLOTS * BYTES) as usize).unwrap(),
                a: dev.alloc(BYTES as usize).unwrap(),
                z: dev.alloc((ZSLOTS * BYTES) as usize).unwrap(),
            };
            lane.a.write_slice(0, &a).unwrap();
            host_a.push(a);
            lane
        })
        .collect();
    let prog = Program {
        lanes,
        e: e.iter().map(Event::handle).collect(),
        f: f.iter().map(Event::handle).collect(),
    };

    let start = Instant::now();
    let deadline = start + Duration::from_secs(600);
    let mut next = [0u64; STREAMS];
    let mut expect = [0u64; STREAMS];
    let mut failures: Vec<String> = Vec::new();
    let mut bad = 0u64;
    let mut descs = Vec::with_capacity(512);
    while expect.iter().any(|&x| x < PER_STREAM) {
        let mut progress = false;
        for s in 0..STREAMS {
            let exp = &mut expect[s];
            let got = streams[s].poll_each(|c| {
                if let Some(m) = prog.check(s, *exp, &c) {
                    bad += 1;
                    if failures.len() < 10 {
                        failures.push(m);
                    }
                }
                *exp += 1;
            });
            progress |= got > 0;
            let room = (streams[s].free_slots() as u64)
                .min(512)
                .min(PER_STREAM - next[s]);
            if room > 0 {
                descs.clear();
                descs.extend((next[s]..next[s] + room).map(|n| prog.desc(s, n)));
                let k = streams[s].try_submit_descs(&descs).expect("submit");
                next[s] += k as u64;
                progress |= k > 0;
            }
        }
        assert!(
            expect.iter().all(|&x| x <= PER_STREAM),
            "more completions than tasks: {expect:?}"
        );
        if !progress {
            assert!(
                Instant::now() < deadline,
                "no progress: submitted {next:?}, completed {expect:?}; first failures {failures:?}"
            );
            std::thread::yield_now();
        }
    }
    let elapsed = start.elapsed();
    assert_eq!(bad, 0, "{bad} wrong completions, first: {failures:#?}");
    let total: u64 = expect.iter().sum();
    assert!(total >= 1_000_000, "only {total} tasks");
    // Nothing more arrives.
    for s in &mut streams {
        s.synchronize(Duration::from_secs(10)).expect("synchronize");
        assert_eq!(s.poll(&mut Vec::new()), 0, "a completion arrived twice");
    }

    // The device memory against the CPU model of the whole run.
    let last = ROUNDS - 1;
    for (s, (l, a)) in prog.lanes.iter().zip(&host_a).enumerate() {
        let prev = (s + STREAMS - 1) % STREAMS;
        assert_eq!(
            l.m.read_vec::<u32>(0, WORDS).unwrap(),
            vec![pat(s, last); WORDS],
            "M[{s}]"
        );
        for slot in 0..SLOTS {
            let r = (0..ROUNDS).rev().find(|r| r % SLOTS == slot).unwrap();
            let p = vec![pat(prev, r); WORDS];
            let off = (slot * BYTES) as usize;
            assert_eq!(
                l.p.read_vec::<u32>(off, WORDS).unwrap(),
                p,
                "P[{s}][{slot}] (round {r})"
            );
            assert_eq!(
                l.d.read_vec::<u32>(off, WORDS).unwrap(),
                model::add(dtype(r), &p, a),
                "D[{s}][{slot}] (round {r}, {:?})",
                dtype(r)
            );
        }
        for k in 0..ZSLOTS {
            assert_eq!(
                l.z.read_vec::<u32>((k * BYTES) as usize, WORDS).unwrap(),
                vec![zpat(s, last, k); WORDS],
                "Z[{s}][{k}]"
            );
        }
    }
    let st = dev.stats();
    eprintln!(
        "{total} tasks in {elapsed:?} ({:.0} tasks/s), {:.2} doorbells per 1000 tasks",
        total as f64 / elapsed.as_secs_f64(),
        st.doorbells_per_1000_tasks()
    );
}
