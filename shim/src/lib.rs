//! The runtime author's library: open a device, contexts, streams, submit, doorbell, poll/wait, events, device memory.
