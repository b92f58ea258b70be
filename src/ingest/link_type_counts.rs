//! Packets per link type, counted a packet at a time.

use super::LinkType;
use std::collections::BTreeMap;

/// How many packets of each link type a source read.
///
/// Counted by runs: a capture rarely switches link type (a pcap file has
/// one; a pcapng file or a live capture on several interfaces switches only
/// where their packets interleave), so [`LinkTypeCounts::add`] is one
/// compare and one increment while the type stays the same, and the map
/// behind it is touched once a run. The file replay and the live merger
/// both count through it (the replay had its own copy of the run logic, and
/// the merger updated a map entry for every frame; that measured no slower,
/// since the merger's time goes to reading each frame the reader thread
/// wrote on the other core: BENCHMARKS.md, forty-third round).
///
/// The counts are exact whatever the order: [`LinkTypeCounts::iter`] folds
/// the open run in.
///
/// ```
/// use flowsieve::ingest::{LinkType, LinkTypeCounts};
/// let mut c = LinkTypeCounts::default();
/// for lt in [LinkType::ETHERNET, LinkType::ETHERNET, LinkType::RAW, LinkType::ETHERNET] {
///     c.add(lt);
/// }
/// c.add_n(LinkType::NULL, 0);
/// let counts: Vec<(LinkType, u64)> = c.iter().collect();
/// assert_eq!(counts, [(LinkType::NULL, 0), (LinkType::ETHERNET, 3), (LinkType::RAW, 1)]);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkTypeCounts {
    /// The runs that ended, summed by link type.
    settled: BTreeMap<u16, u64>,
    /// The link type of the packets counted last, and how many of them
    /// since it last changed.
    run: Option<(LinkType, u64)>,
}

impl LinkTypeCounts {
    /// Counts one packet of link type `lt`.
    #[inline(always)]
    pub fn add(&mut self, lt: LinkType) {
        self.add_n(lt, 1);
    }

    /// Counts `n` packets of link type `lt` (with `n` 0, the type is listed
    /// with no packets, as a map entry made with `or_insert(0)` would be).
    #[inline(always)]
    pub fn add_n(&mut self, lt: LinkType, n: u64) {
        match &mut self.run {
            Some((run_lt, count)) if *run_lt == lt => *count += n,
            _ => self.start_run(lt, n),
        }
    }

    /// Ends the open run and starts one of `lt`: apart from
    /// [`LinkTypeCounts::add_n`], so that the common path stays small.
    #[inline(never)]
    fn start_run(&mut self, lt: LinkType, n: u64) {
        self.settle();
        self.run = Some((lt, n));
    }

    /// Moves the open run's count into the map.
    fn settle(&mut self) {
        if let Some((lt, n)) = self.run.take() {
            *self.settled.entry(lt.0).or_insert(0) += n;
        }
    }

    /// Adds every count of `other` to these.
    pub fn merge(&mut self, other: &LinkTypeCounts) {
        self.settle();
        for (lt, n) in other.iter() {
            *self.settled.entry(lt.0).or_insert(0) += n;
        }
    }

    /// The link types counted and their packets, in link-type order.
    pub fn iter(&self) -> impl Iterator<Item = (LinkType, u64)> + '_ {
        let mut all = self.settled.clone();
        if let Some((lt, n)) = self.run {
            *all.entry(lt.0).or_insert(0) += n;
        }
        all.into_iter().map(|(lt, n)| (LinkType(lt), n))
    }
}
