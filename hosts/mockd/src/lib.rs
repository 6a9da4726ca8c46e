//! `davinci-mockd`: mock davinci devices ([`davinci_mock_device::MockDevice`]) served on Unix
//! sockets, N devices each on its own socket, one connection per open file.
//!
//! * [`daemon`]: the devices and their acceptors; `shared` is what the threads serving one
//!   device share; `conn` serves one connection (one open): HELLO, then IOCTL, MMAP and
//!   CLOSE frames; `gate` decides who may connect; `reply` encodes and sends replies;
//!   `waits` answers its blocking WAIT_EVENTs (one thread per device); `refuse` answers
//!   the connections `gate` refused (one thread per device); `audit` rate-limits
//!   the audit log's lines; `socket_dir` creates and checks the socket directory and every
//!   directory above it.
//! * [`peer`]: who is on the other end of a connection (container, groups) and who is an
//!   admin ([`peer::AdminPolicy`]).
//! * [`cli`]: the command line, logging and signals (`signals`: taken from a signalfd, with
//!   their sender); the binary is one call to [`cli::main`].
//!
//! The wire protocol and socket I/O are `davinci-mockd-proto`, shared with the clients; the
//! device itself is `davinci-mock-device`, which the shim also embeds. This crate is the only
//! one that links the daemon's logging (`tracing-subscriber`) and its command line.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod admin;
mod audit;
pub mod cli;
mod conn;
pub mod daemon;
mod gate;
pub mod peer;
mod premap;
pub mod present;
mod refuse;
mod reply;
mod shared;
mod signals;
mod socket_dir;
mod waits;
