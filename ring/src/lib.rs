//! Single-producer/single-consumer ring protocol over shared memory, both ends, and the doorbell wake-up handshake: the one place memory ordering lives.
