//! A stage that asks the engine to populate memory it does not have, and
//! records what budget the engine offered it and when. `tests/stage.rs`
//! registers it to check how a worker earns its prefault budget: a fixed
//! start, a share for each record it takes, and a share for each page its
//! packets faulted in on demand, offered before a batch until the stage
//! says it is done, and never after.
//!
//! The probe needs `need` bytes. Offered at least that, it takes them and
//! answers done; offered less, it takes nothing. With `touch_pages`, each
//! batch it processes reads and then writes that many pages of fresh
//! memory of its own: on-demand faults, which should earn budget.

use flowsieve::pipeline::{
    Event, RecordBatch, ReportContext, ShardContext, ShardStage, Stage, Tally,
};
use flowsieve::report::{Section, Table};
use serde::Serialize;

/// The stage: what its shards need and do.
pub struct PrefaultProbe {
    pub need: usize,
    pub touch_pages: usize,
}

/// One offer: the budget offered, and the records the shard had processed
/// before it.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Offer {
    pub budget: usize,
    pub records_before: u64,
}

/// Every offer a shard got, in order, and whether one came after done.
#[derive(Default)]
pub struct ProbeTally {
    offers: Vec<Vec<Offer>>,
    after_done: u64,
    records: u64,
}

impl Tally for ProbeTally {
    fn merge(&mut self, other: ProbeTally) {
        self.offers.extend(other.offers);
        self.after_done += other.after_done;
        self.records += other.records;
    }
}

/// One shard of the probe.
pub struct ProbeShard {
    need: usize,
    touch_pages: usize,
    done: bool,
    offers: Vec<Offer>,
    after_done: u64,
    records: u64,
    /// Fresh memory touched a batch at a time, kept so that its pages stay
    /// mapped (and are not faulted in again).
    touched: Vec<memmap2::MmapMut>,
}

impl ShardStage for ProbeShard {
    type Tally = ProbeTally;

    fn process(&mut self, batch: RecordBatch<'_>, _events: &mut Vec<Event>) {
        self.records += batch.records().len() as u64;
        if self.touch_pages > 0 {
            // A fresh anonymous mapping, untouched until read here (the
            // zero page), then written (a page of its own): faults the
            // worker takes. Not a vector: the allocator may hand back heap
            // memory other tests in this process already faulted in.
            let mut fresh = memmap2::MmapMut::map_anon(self.touch_pages * 4096)
                .expect("an anonymous mapping for the probe's pages");
            for page in 0..self.touch_pages {
                let at = page * 4096;
                let seen = std::hint::black_box(fresh[at]);
                fresh[at] = seen.wrapping_add(1);
            }
            self.touched.push(fresh);
        }
    }

    fn prefault(&mut self, budget: &mut usize) -> bool {
        if self.done {
            self.after_done += 1;
            return true;
        }
        self.offers.push(Offer {
            budget: *budget,
            records_before: self.records,
        });
        if *budget >= self.need {
            *budget -= self.need;
            self.done = true;
        }
        self.done
    }

    fn finish(self) -> ProbeTally {
        ProbeTally {
            offers: vec![self.offers],
            after_done: self.after_done,
            records: self.records,
        }
    }
}

/// The probe's report: each shard's offers.
#[derive(Clone, Debug, Serialize)]
pub struct ProbeSection {
    pub offers: Vec<Vec<Offer>>,
    pub after_done: u64,
    pub records: u64,
}

impl Section for ProbeSection {
    fn heading(&self) -> String {
        format!("prefault probe: {} shards", self.offers.len())
    }

    fn tables(&self) -> Vec<Table> {
        Vec::new()
    }
}

impl Stage for PrefaultProbe {
    const NAME: &'static str = "prefault_probe";
    type Shard = ProbeShard;
    type Section = ProbeSection;

    fn shard(&self, _ctx: &ShardContext) -> ProbeShard {
        ProbeShard {
            need: self.need,
            touch_pages: self.touch_pages,
            done: false,
            offers: Vec::new(),
            after_done: 0,
            records: 0,
            touched: Vec::new(),
        }
    }

    fn report(&self, t: ProbeTally, _ctx: &ReportContext) -> ProbeSection {
        ProbeSection {
            offers: t.offers,
            after_done: t.after_done,
            records: t.records,
        }
    }
}
