//! Device-side semantics shared by the kernel module and the mock device: clients, contexts, streams, memory, events, ioctl dispatch and validation, device sharing, the software engine.
