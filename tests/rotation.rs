//! `flowsieve::live::rotation`: the names of a split `-w` file (tcpdump's
//! `-C`, `-G` and `-W`), and the rule for when `-W` ends a capture.
//!
//! The expected names are what tcpdump 4.99.3 wrote for the same flags,
//! captured on a veth pair on this project's CI machine image.

use flowsieve::live::Rotation;
use flowsieve::live::rotation::{numbered, strftime_local};
use proptest::prelude::*;
use std::ffi::OsStr;
use std::num::{NonZeroU32, NonZeroU64};
use std::path::Path;

fn rotation(c: Option<u64>, g: Option<u32>, w: Option<u32>) -> Rotation {
    Rotation::new(
        c.and_then(NonZeroU64::new),
        g.and_then(NonZeroU32::new),
        w.and_then(NonZeroU32::new),
    )
    .unwrap()
}

/// The names of a whole ring, in the order the files are first written.
fn ring(w: u32) -> Vec<String> {
    let r = rotation(Some(1_000_000), None, Some(w));
    (0..u64::from(w))
        .map(|n| {
            r.file_name(Path::new("f"), 0, n)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

#[test]
fn a_ring_is_named_as_tcpdump_names_it() {
    // tcpdump -C 1 -W N -w f, for N = 1, 3, 10, 12 and 101.
    assert_eq!(ring(1), ["f"]);
    assert_eq!(ring(3), ["f0", "f1", "f2"]);
    let ten = ring(10);
    assert_eq!((ten[0].as_str(), ten[9].as_str()), ("f0", "f9"));
    let twelve = ring(12);
    assert_eq!((twelve[0].as_str(), twelve[11].as_str()), ("f00", "f11"));
    let many = ring(101);
    assert_eq!((many[0].as_str(), many[100].as_str()), ("f000", "f100"));
}

#[test]
fn without_w_the_first_file_keeps_the_name() {
    // tcpdump -C 5 -w g: g, g1, g2, g3.
    let r = rotation(Some(5_000_000), None, None);
    let names: Vec<_> = (0..4)
        .map(|n| r.file_name(Path::new("g"), 0, n).unwrap())
        .collect();
    assert_eq!(
        names,
        [
            Path::new("g"),
            Path::new("g1"),
            Path::new("g2"),
            Path::new("g3")
        ]
    );
    assert_eq!(r.suffix_digits(), 0);
}

#[test]
fn each_period_of_g_numbers_its_own_files() {
    // tcpdump -G 1 -C 1 -w 'g%S-' wrote g26-, g26-1 (a period's first file
    // has no number), and with -W 3 g31-0, g31-1, g31-2. A pattern with no
    // conversion is its own name, whatever the time; `%%` is a percent sign.
    let plain = rotation(Some(1_000_000), Some(1), None);
    let ringed = rotation(Some(1_000_000), Some(1), Some(3));
    let at = |r: Rotation, p: &str, n: u64| r.file_name(Path::new(p), 1_700_000_000, n).unwrap();
    assert_eq!(at(plain, "g26-", 0), Path::new("g26-"));
    assert_eq!(at(plain, "g26-", 1), Path::new("g26-1"));
    assert_eq!(at(ringed, "g31-", 0), Path::new("g31-0"));
    assert_eq!(at(ringed, "g31-", 2), Path::new("g31-2"));
    assert_eq!(
        at(rotation(None, Some(60), None), "100%%", 7),
        Path::new("100%")
    );
    // %s is the period's start, in any time zone.
    assert_eq!(
        at(rotation(None, Some(60), None), "t%s", 0),
        Path::new("t1700000000")
    );
}

#[test]
fn w_ends_the_capture_only_with_g_alone() {
    assert_eq!(
        rotation(None, Some(60), Some(2)).ends_after_files(),
        Some(2)
    );
    assert_eq!(
        rotation(Some(1), Some(60), Some(2)).ends_after_files(),
        None
    );
    assert_eq!(rotation(Some(1), None, Some(2)).ends_after_files(), None);
    assert_eq!(rotation(None, Some(60), None).ends_after_files(), None);
    assert!(Rotation::default().is_off());
    assert!(!rotation(None, Some(60), None).is_off());
    assert_eq!(
        Rotation::new(None, None, NonZeroU32::new(2)).unwrap_err(),
        "-W (--file-count) limits the files that -C or -G start, and neither is given"
    );
}

#[test]
fn strftime_refuses_what_names_no_file() {
    assert_eq!(
        strftime_local(OsStr::new("a\0b"), 0).unwrap_err(),
        "a -G file name cannot hold a NUL byte"
    );
    // A name past PATH_MAX could not be opened.
    let long = "x".repeat(5000);
    assert!(
        strftime_local(OsStr::new(&long), 0)
            .unwrap_err()
            .contains("longer than 4,095 bytes")
    );
    // A year past what the C library's `tm` holds (its year is an int).
    assert!(strftime_local(OsStr::new("%Y"), i64::MAX).is_err());
}

proptest! {
    /// Why tcpdump pads: the ring's names, sorted as text, are in the
    /// order of their numbers, and no two are the same.
    #[test]
    fn a_rings_names_sort_in_number_order(w in 1u32..3000) {
        let names = ring(w);
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        prop_assert_eq!(sorted, names);
    }

    /// Numbering only appends: a name begins with its base.
    #[test]
    fn numbered_names_begin_with_their_base(base in "[a-z%./]{0,12}", n in 0u64..1_000_000, digits in 0usize..8) {
        let name = numbered(OsStr::new(&base), n, digits);
        let name = name.to_string_lossy();
        prop_assert!(name.starts_with(&base));
        let tail = &name[base.len()..];
        prop_assert!(tail.is_empty() == (n == 0 && digits == 0));
        if !tail.is_empty() {
            prop_assert_eq!(tail.parse::<u64>().unwrap(), n);
            prop_assert!(tail.len() >= digits);
        }
    }
}
