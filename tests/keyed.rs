//! The heavy stage's exact window map (`pipeline::FlowMap`): the addresses
//! its prefetch hint computes without a load are where hashbrown keeps a
//! hash's lookup. The hint cannot change a result, so what is tested is
//! the layout it assumes: every bucket lies a whole number of buckets
//! below the control bytes learnt from the last insertion, within the
//! table, and most hashes sit in the bucket the hint fetches. Were
//! hashbrown's layout to change, these fail and the hint has to follow.

use flowsieve::pipeline::FlowMap;
use proptest::prelude::*;

/// A value of the heavy stage's size (16 bytes), so that buckets are 24.
type Value = [u64; 2];
const BUCKET: usize = std::mem::size_of::<(u64, Value)>();

/// Checks every hash of `hashes` (all in `map`) against the hint: returns
/// how many sit in the very bucket the hint fetches.
fn check(map: &FlowMap<Value>, hashes: &[u64]) -> Result<usize, TestCaseError> {
    let buckets = map.num_buckets();
    let mut at_home = 0;
    for &h in hashes {
        let bucket = map.bucket_address(h);
        prop_assert!(bucket.is_some(), "hash {h:#x} is not in the map");
        let bucket = bucket.unwrap_or(0);
        let hint = map.hint_addresses(h);
        prop_assert!(hint.is_some(), "no hint after insertions");
        let [first_control, home] = hint.unwrap_or([0, 0]);
        // The hint's two addresses are the control byte and the bucket of
        // h's first position `at`: `control + at` and `control - (at + 1)
        // buckets`, so they give back `at` and the control bytes' start.
        prop_assert!(home < first_control && first_control - home >= BUCKET);
        let gap = first_control - home - BUCKET;
        prop_assert_eq!(
            gap % (BUCKET + 1),
            0,
            "hint addresses do not fit one position"
        );
        let at = gap / (BUCKET + 1);
        let control = first_control - at;
        // Bucket i ends i buckets below the control bytes.
        prop_assert!(
            bucket < control,
            "bucket {bucket:#x} not below control {control:#x}"
        );
        let above = control - bucket;
        prop_assert_eq!(
            above % BUCKET,
            0,
            "bucket not a whole number of buckets below the control bytes"
        );
        let index = above / BUCKET - 1;
        prop_assert!(
            index < buckets,
            "bucket index {index} past {buckets} buckets"
        );
        prop_assert!(at < buckets);
        at_home += usize::from(index == at);
    }
    Ok(at_home)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Across growth and clears, as the heavy stage uses the map (cleared
    /// at each window's close, its buckets kept).
    #[test]
    fn the_hint_fetches_where_hashbrown_keeps_a_hash(
        windows in prop::collection::vec(
            prop::collection::vec(any::<u64>(), 1..3000), 1..4),
    ) {
        let mut map: FlowMap<Value> = FlowMap::default();
        prop_assert_eq!(map.hint_addresses(1), None);
        for window in &windows {
            let mut distinct = window.clone();
            distinct.sort_unstable();
            distinct.dedup();
            for &h in window {
                map.get_or_insert_with(h, || [h, 0]).0[1] += 1;
            }
            let at_home = check(&map, &distinct)?;
            // At hashbrown's load (at most 7/8), most of many random
            // hashes sit at their first position (over half; a quarter is
            // asked, with room); a wrong position rule puts about one in
            // `buckets` there, and a control address one bucket off about
            // one in six. A few hashes may all collide, so only many are
            // judged.
            if distinct.len() >= 256 {
                prop_assert!(
                    at_home * 4 >= distinct.len(),
                    "{at_home} of {} hashes at the hinted bucket", distinct.len()
                );
            }
            map.clear();
        }
    }
}
