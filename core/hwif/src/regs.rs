//! BAR0's registers (QEMU `docs/specs/ivshmem-spec.rst`) and the device's vector plan.

/// Interrupt Mask (unused with MSI-X).
pub const INTR_MASK: u64 = 0;
/// Interrupt Status (unused with MSI-X).
pub const INTR_STATUS: u64 = 4;
/// IVPosition, read-only: the guest's own peer id.
pub const IV_POSITION: u64 = 8;
/// Doorbell, write-only: `peer << 16 | vector` signals that peer's eventfd for the vector.
pub const DOORBELL: u64 = 12;
/// BAR0's size.
pub const BAR0_SIZE: u64 = 256;

/// The device's peer id (the ivshmem server is peer 0).
pub const DEVICE_PEER: u16 = 0;

/// Vector 0, both directions: guest → device "the admin submission ring has entries";
/// device → guest "the admin completion ring has entries".
pub const VECTOR_ADMIN: u16 = 0;
/// Vector 1, both directions: guest → device "a stream has work" (a client's user-space
/// doorbell write, or the kernel's for SUBMIT_TASK/NOTIFY); device → guest "completions
/// were published or events changed" (at most one per pass of the device: moderation).
pub const VECTOR_DATA: u16 = 1;
/// The vectors the device uses (`vectors=` of `ivshmem-doorbell` must be at least this).
pub const VECTORS: u16 = 2;

/// The value written to the Doorbell register to signal `peer`'s `vector`.
pub const fn doorbell_value(peer: u16, vector: u16) -> u32 {
    ((peer as u32) << 16) | vector as u32
}

const _: () = assert!(VECTOR_ADMIN < VECTORS && VECTOR_DATA < VECTORS);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_and_doorbell_values_are_the_spec() {
        assert_eq!(
            (INTR_MASK, INTR_STATUS, IV_POSITION, DOORBELL),
            (0, 4, 8, 12)
        );
        assert_eq!(doorbell_value(DEVICE_PEER, VECTOR_DATA), 1);
        assert_eq!(doorbell_value(3, 1), 0x0003_0001);
        assert_eq!(doorbell_value(0xffff, 0xffff), 0xffff_ffff);
    }
}
