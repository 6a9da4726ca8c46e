//! ioctl request numbers, encoded exactly like Linux's generic `_IOC(dir, type, nr, size)`
//! (`include/uapi/asm-generic/ioctl.h`: 8 bits nr, 8 bits type, 14 bits size, 2 bits dir).
//!
//! Architectures with another layout (mips, powerpc, sparc, alpha) are not supported; the
//! crate refuses to build there rather than produce wrong numbers.

#[cfg(any(
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
compile_error!("davinci-uapi encodes the generic ioctl layout; this architecture uses another");

/// Bits of the command number field.
pub const IOC_NRBITS: u32 = 8;
/// Bits of the type (magic) field.
pub const IOC_TYPEBITS: u32 = 8;
/// Bits of the argument size field.
pub const IOC_SIZEBITS: u32 = 14;
/// Bits of the direction field.
pub const IOC_DIRBITS: u32 = 2;

/// Shift of the command number.
pub const IOC_NRSHIFT: u32 = 0;
/// Shift of the type.
pub const IOC_TYPESHIFT: u32 = IOC_NRSHIFT + IOC_NRBITS;
/// Shift of the size.
pub const IOC_SIZESHIFT: u32 = IOC_TYPESHIFT + IOC_TYPEBITS;
/// Shift of the direction.
pub const IOC_DIRSHIFT: u32 = IOC_SIZESHIFT + IOC_SIZEBITS;

/// No data transfer.
pub const IOC_NONE: u32 = 0;
/// User space writes, the driver reads (`_IOW`).
pub const IOC_WRITE: u32 = 1;
/// The driver writes, user space reads (`_IOR`).
pub const IOC_READ: u32 = 2;

/// Largest argument size the size field can encode.
pub const IOC_SIZE_MAX: usize = (1 << IOC_SIZEBITS) - 1;

/// `_IOC(dir, ty, nr, size)`. Fails to compile (in const context) if `size` does not fit.
pub const fn ioc(dir: u32, ty: u8, nr: u8, size: usize) -> u32 {
    assert!(
        size <= IOC_SIZE_MAX,
        "ioctl argument too large for the size field"
    );
    (dir << IOC_DIRSHIFT)
        | ((ty as u32) << IOC_TYPESHIFT)
        | ((nr as u32) << IOC_NRSHIFT)
        | ((size as u32) << IOC_SIZESHIFT)
}

/// `_IO(ty, nr)`.
pub const fn io(ty: u8, nr: u8) -> u32 {
    ioc(IOC_NONE, ty, nr, 0)
}

/// `_IOR(ty, nr, T)`.
pub const fn ior<T>(ty: u8, nr: u8) -> u32 {
    ioc(IOC_READ, ty, nr, core::mem::size_of::<T>())
}

/// `_IOW(ty, nr, T)`.
pub const fn iow<T>(ty: u8, nr: u8) -> u32 {
    ioc(IOC_WRITE, ty, nr, core::mem::size_of::<T>())
}

/// `_IOWR(ty, nr, T)`.
pub const fn iowr<T>(ty: u8, nr: u8) -> u32 {
    ioc(IOC_READ | IOC_WRITE, ty, nr, core::mem::size_of::<T>())
}

/// `_IOC_DIR(request)`.
pub const fn ioc_dir(request: u32) -> u32 {
    (request >> IOC_DIRSHIFT) & ((1 << IOC_DIRBITS) - 1)
}

/// `_IOC_TYPE(request)`.
pub const fn ioc_type(request: u32) -> u8 {
    ((request >> IOC_TYPESHIFT) & ((1 << IOC_TYPEBITS) - 1)) as u8
}

/// `_IOC_NR(request)`.
pub const fn ioc_nr(request: u32) -> u8 {
    ((request >> IOC_NRSHIFT) & ((1 << IOC_NRBITS) - 1)) as u8
}

/// `_IOC_SIZE(request)`.
pub const fn ioc_size(request: u32) -> usize {
    ((request >> IOC_SIZESHIFT) & ((1 << IOC_SIZEBITS) - 1)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_linux_examples() {
        // Values from Linux headers: _IOR('T', 0x30, unsigned int) = TIOCGPTN = 0x80045430,
        // _IOW('T', 0x31, int) = TIOCSPTLCK = 0x40045431, _IO('T', 0x32) would be 0x5432.
        assert_eq!(ior::<u32>(b'T', 0x30), 0x8004_5430);
        assert_eq!(iow::<i32>(b'T', 0x31), 0x4004_5431);
        assert_eq!(io(b'T', 0x32), 0x5432);
        // KVM_GET_MSR_INDEX_LIST = _IOWR(KVMIO, 0x02, struct kvm_msr_list) = 0xC004AE02.
        assert_eq!(iowr::<u32>(0xAE, 0x02), 0xC004_AE02);
    }

    #[test]
    fn decode_round_trips() {
        let r = iowr::<[u8; 88]>(b'd', 0x07);
        assert_eq!(ioc_dir(r), IOC_READ | IOC_WRITE);
        assert_eq!(ioc_type(r), b'd');
        assert_eq!(ioc_nr(r), 0x07);
        assert_eq!(ioc_size(r), 88);
    }
}
