use super::*;
use std::vec;

fn ready(size: u64) -> Bar2Header {
    Bar2Header {
        layout: Bar2Layout::for_region(size).unwrap(),
        state: DeviceState::Ready,
        heartbeat: 7,
        failure: 0,
    }
}

#[test]
fn golden_layout_of_the_smallest_and_largest_regions() {
    let l = Bar2Layout::for_region(MIN_REGION).unwrap();
    // 192 + 16 * 1024 = 16576 bytes per ring, five pages; 320 entries of 160 bytes (ABI
    // 1.5's LIST_CLIENTS entry, with stream_errors), thirteen.
    assert_eq!(Bar2Layout::RING_NEED, 16576);
    assert_eq!(LIST_ENTRY_SIZE, 160);
    assert_eq!(
        (
            l.sq_offset,
            l.cq_offset,
            l.ring_bytes,
            l.list_offset,
            l.list_bytes,
            l.heap_offset,
            l.heap_pages
        ),
        (4096, 24576, 20480, 45056, 53248, 98304, 8)
    );
    assert_eq!(l.page_offset(0), Some(98304));
    assert_eq!(l.page_offset(7), Some(126976));
    assert_eq!(l.page_offset(8), None);
    let big = Bar2Layout::for_region(MAX_REGION).unwrap();
    assert_eq!(big.heap_pages, (MAX_REGION - 98304) / 4096);
    for bad in [
        0,
        4096,
        MIN_REGION / 2,
        MIN_REGION + 4096,
        MAX_REGION * 2,
        u64::MAX,
    ] {
        assert_eq!(
            Bar2Layout::for_region(bad),
            Err(LayoutError::RegionSize(bad))
        );
    }
}

#[test]
fn golden_header_bytes() {
    let mut page = vec![0xaau8; 4096];
    ready(1 << 20).encode(&mut page);
    assert_eq!(&page[0..8], b"DVCIBAR2");
    assert_eq!(&page[8..12], &4u32.to_le_bytes());
    assert_eq!(&page[12..16], &1u32.to_le_bytes());
    assert_eq!(&page[16..20], &7u32.to_le_bytes());
    assert_eq!(&page[24..32], &(1u64 << 20).to_le_bytes());
    assert_eq!(&page[32..36], &1024u32.to_le_bytes());
    assert_eq!(&page[36..40], &16u32.to_le_bytes());
    assert_eq!(&page[40..48], &4096u64.to_le_bytes());
    assert_eq!(&page[64..72], &98304u64.to_le_bytes());
    assert_eq!(&page[80..88], &45056u64.to_le_bytes());
    assert_eq!(&page[88..96], &53248u64.to_le_bytes());
    assert!(page[76..80].iter().all(|&b| b == 0));
    assert!(page[96..2048].iter().all(|&b| b == 0));
    // The notification words are the device's counters, not the header's.
    assert!(page[2048..].iter().all(|&b| b == 0xaa));
    assert_eq!(
        (notify_offset(0), notify_offset(1), notify_offset(512)),
        (2048, 2052, 2048)
    );
    assert_eq!(notify_offset(u32::MAX), 2048 + 511 * 4);
}

#[test]
fn header_round_trips_in_every_state() {
    for (state, failure) in [
        (DeviceState::Booting, 0),
        (DeviceState::Ready, 0),
        (DeviceState::Failed, 71),
    ] {
        let h = Bar2Header {
            state,
            failure,
            ..ready(MIN_REGION)
        };
        let mut page = vec![0u8; 4096];
        h.encode(&mut page);
        assert_eq!(Bar2Header::decode(&page, MIN_REGION), Ok(h));
        assert_eq!(DeviceState::from_word(state.word()), Some(state));
    }
}

#[test]
fn every_bad_header_field_is_named() {
    let mut good = vec![0u8; 4096];
    ready(MIN_REGION).encode(&mut good);
    let with = |at: usize, bytes: &[u8]| {
        let mut p = good.clone();
        p[at..at + bytes.len()].copy_from_slice(bytes);
        Bar2Header::decode(&p, MIN_REGION)
    };
    assert_eq!(
        Bar2Header::decode(&good[..95], MIN_REGION),
        Err(HeaderError::Short(95))
    );
    assert!(matches!(with(0, &[0]), Err(HeaderError::Magic(_))));
    assert_eq!(with(8, &1u32.to_le_bytes()), Err(HeaderError::Version(1)));
    assert_eq!(with(12, &3u32.to_le_bytes()), Err(HeaderError::State(3)));
    assert_eq!(with(20, &5u32.to_le_bytes()), Err(HeaderError::Failure(5)));
    assert_eq!(with(12, &2u32.to_le_bytes()), Err(HeaderError::Failure(0)));
    assert_eq!(
        with(24, &(MIN_REGION * 2).to_le_bytes()),
        Err(HeaderError::RegionSize {
            got: MIN_REGION * 2,
            bar: MIN_REGION
        })
    );
    assert_eq!(
        Bar2Header::decode(&good, MIN_REGION * 2),
        Err(HeaderError::RegionSize {
            got: MIN_REGION,
            bar: MIN_REGION * 2
        })
    );
    assert_eq!(
        with(32, &512u32.to_le_bytes()),
        Err(HeaderError::Geometry {
            entry: 512,
            depth: 16
        })
    );
    assert_eq!(
        with(36, &32u32.to_le_bytes()),
        Err(HeaderError::Geometry {
            entry: 1024,
            depth: 32
        })
    );
    for (at, name) in [
        (40, "the submission ring's offset"),
        (48, "the completion ring's offset"),
        (56, "the admin rings' size"),
        (64, "the heap's offset"),
        (80, "the list area's offset"),
        (88, "the list area's size"),
    ] {
        assert_eq!(with(at, &1u64.to_le_bytes()), Err(HeaderError::Field(name)));
    }
    assert_eq!(
        with(72, &10u32.to_le_bytes()),
        Err(HeaderError::Field("the heap's pages"))
    );
    assert_eq!(with(76, &[1]), Err(HeaderError::Reserved(76)));
    assert_eq!(with(96, &[1]), Err(HeaderError::Reserved(96)));
    assert_eq!(with(2047, &[1]), Err(HeaderError::Reserved(2047)));
    // The notification words count, whatever they hold.
    assert!(with(2048, &[1]).is_ok());
    assert!(with(4095, &[0xff]).is_ok());
}
