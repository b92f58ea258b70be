//! Turns the shards' tallies into the report's plain data.

use super::heavy::{HeavyClassTally, HeavyTally};
use super::new_flows::{NewFlowClassTally, NewFlowTally, ResolvedNewFlow};
use super::selective::{DirectoryKind, ErrorTally, QueryUnit, SelectiveTally};
use super::{Latency, PipelineConfig, Shard};
use crate::filter::RecyclePolicy;
use crate::model::recycling::Hashing;
use crate::report::{
    ClassAlpha, HeavyConfigInfo, HeavyRates, HeavyReport, NewFlowConfigInfo, NewFlowRates,
    NewFlowReport, PipelineInfo, PipelineReport, ReplaySummary, SelectiveConfigInfo,
    SelectiveRates, SelectiveReport, SelectiveVariant, SweepPoint, Throughput,
};

/// Timing of the run (kept apart: it is the only part that varies).
pub(super) struct Timing {
    pub threads: usize,
    pub wall_seconds: f64,
    pub cpu_seconds: f64,
}

/// CPU time (user + system) of the process so far, in seconds.
pub fn cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid, writable `rusage`; getrusage only writes
    // into it and reports failure through its return value.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return 0.0;
    }
    // SAFETY: getrusage returned 0, so it initialised the struct (and it was
    // zeroed before, so every field is initialised either way).
    let u = unsafe { usage.assume_init() };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn ratio(num: u64, den: u64) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

fn opt_ratio(num: u64, den: u64) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

/// The binomial standard error of a rate measured over `n` trials.
fn se(p: f64, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        (p * (1.0 - p) / n as f64).sqrt()
    }
}

pub(super) fn build(
    cfg: &PipelineConfig,
    resolved: &ResolvedNewFlow,
    replay: ReplaySummary,
    shards: Vec<Shard>,
    packets: u64,
    latency: Latency,
    timing: Timing,
) -> PipelineReport {
    let names = cfg.replay.classifier.names().to_vec();
    let truth = cfg.replay.truth;
    let mut heavy: Option<HeavyTally> = None;
    let mut new: Option<NewFlowTally> = None;
    let mut selective: Option<SelectiveTally> = None;
    let mut plan = None;
    let mut heavy_counters = 0;
    for s in shards {
        if let Some(h) = s.heavy {
            heavy_counters = h.counters();
            heavy
                .get_or_insert_with(HeavyTally::default)
                .add(&h.finish());
        }
        if let Some(n) = s.new_flows {
            new.get_or_insert_with(NewFlowTally::default)
                .add(&n.finish());
        }
        if let Some(q) = s.selective {
            plan.get_or_insert_with(|| q.plan().clone());
            selective
                .get_or_insert_with(SelectiveTally::default)
                .add(&q.finish());
        }
    }
    let heavy = heavy.map(|t| heavy_report(cfg, heavy_counters, &names, truth, &t));
    let new_flows = new.map(|t| new_flow_report(cfg, resolved, &names, truth, &t));
    let selective = selective
        .zip(plan)
        .map(|(t, plan)| selective_report(cfg, &names, &plan, &t));
    let read = replay.trace.packets;
    PipelineReport {
        replay,
        pipeline: PipelineInfo {
            shards: cfg.shards,
            batch: cfg.batch.max(1),
            packets,
        },
        heavy,
        new_flows,
        selective,
        stages: latency.summary(),
        throughput: Throughput {
            packets_per_sec: if timing.wall_seconds > 0.0 {
                read as f64 / timing.wall_seconds
            } else {
                0.0
            },
            threads: timing.threads,
            shards: cfg.shards,
            wall_seconds: timing.wall_seconds,
            cpu_seconds: timing.cpu_seconds,
            packets_per_cpu_sec: if timing.cpu_seconds > 0.0 {
                read as f64 / timing.cpu_seconds
            } else {
                0.0
            },
        },
    }
}

fn heavy_rates(class: Option<String>, t: &HeavyClassTally, truth: bool) -> HeavyRates {
    let fp_rate = opt_ratio(t.false_positives, t.flows_below);
    HeavyRates {
        class,
        packets: t.packets,
        flows_below: truth.then_some(t.flows_below),
        flows_above: truth.then_some(t.flows_above),
        reported: t.reported,
        false_positives: truth.then_some(t.false_positives),
        false_negatives: truth.then_some(t.false_negatives),
        fp_rate: fp_rate.filter(|_| truth),
        fp_rate_se: fp_rate.filter(|_| truth).map(|p| se(p, t.flows_below)),
        fn_rate: opt_ratio(t.false_negatives, t.flows_above).filter(|_| truth),
        model_fp_rate: (t.model_weight > 0.0).then(|| t.model_sum / t.model_weight),
        model_fp_rate_compound: (t.compound_weight > 0.0)
            .then(|| t.compound_sum / t.compound_weight),
    }
}

fn heavy_report(
    cfg: &PipelineConfig,
    per_shard: usize,
    names: &[String],
    truth: bool,
    t: &HeavyTally,
) -> HeavyReport {
    let mut all = HeavyClassTally::default();
    for c in &t.classes {
        all.add(c);
    }
    let h = &cfg.heavy;
    let default_k = super::heavy::default_k(h.theta, h.counters, super::DEFAULT_HEAVY_LOAD);
    let repeated_share = truth.then(|| ratio(t.repeated_insertions, all.packets));
    let mut notes = Vec::new();
    if let Some(share) = repeated_share {
        if share > 0.01 {
            notes.push(format!(
                "{:.1}% of insertions repeat a flow already counted in its window: 003's model assumes every insertion is a distinct element, so model_fp_rate is not expected to match; model_fp_rate_compound accounts for the window's flow sizes",
                share * 100.0
            ));
        }
    } else {
        notes.push("without --truth, model_fp_rate is weighted by packets and assumes every packet is a distinct element".into());
    }
    if t.saturated_windows > 0 {
        notes.push(format!(
            "{} shard-windows ended with saturated counters ({} counters in all): estimates there are capped at {}",
            t.saturated_windows,
            t.saturated_counters,
            h.width.max()
        ));
    }
    if t.compound_skipped > 0 {
        notes.push("theta is too large for the compound model (above 4096)".into());
    }
    HeavyReport {
        config: HeavyConfigInfo {
            window: h.window.to_string(),
            theta: h.theta,
            counters: h.counters,
            counters_per_shard: per_shard,
            counter_bits: h.width.bits(),
            k: h.k,
            k_from_model: h.k == default_k,
            k_model_load: super::DEFAULT_HEAVY_LOAD,
            conservative: h.conservative,
        },
        overall: heavy_rates(None, &all, truth),
        classes: names
            .iter()
            .zip(&t.classes)
            .map(|(n, c)| heavy_rates(Some(n.clone()), c, truth))
            .collect(),
        shard_windows: t.shard_windows,
        saturation_events: t.saturated_counters,
        saturated_windows: t.saturated_windows,
        repeated_insertions: truth.then_some(t.repeated_insertions),
        repeated_share,
        false_negatives_unsaturated: truth.then_some(t.false_negatives_unsaturated),
        notes,
    }
}

fn new_flow_rates(
    class: Option<String>,
    t: &NewFlowClassTally,
    truth: bool,
    recycles: u64,
    model: Option<f64>,
) -> NewFlowRates {
    let inst = opt_ratio(t.false_positives, t.true_new).filter(|_| truth);
    NewFlowRates {
        class,
        packets: t.packets,
        true_new: truth.then_some(t.true_new),
        reported_new: t.reported_new,
        false_positives: truth.then_some(t.false_positives),
        false_negatives: truth.then_some(t.false_negatives),
        fp_rate_instance: inst,
        fp_rate_instance_se: inst.map(|p| se(p, t.true_new)),
        fp_rate_first: opt_ratio(t.false_positives, t.packets).filter(|_| truth),
        fp_rate_each: opt_ratio(t.fp_each, t.packets).filter(|_| truth),
        fn_rate: opt_ratio(t.false_negatives, t.packets - t.true_new).filter(|_| truth),
        recycles,
        model_fp_rate: model,
    }
}

fn new_flow_report(
    cfg: &PipelineConfig,
    resolved: &ResolvedNewFlow,
    names: &[String],
    truth: bool,
    t: &NewFlowTally,
) -> NewFlowReport {
    let mut all = NewFlowClassTally::default();
    for c in &t.classes {
        all.add(c);
    }
    let n = &cfg.new_flows;
    let model = resolved.model_fp_rate;
    let mut notes = Vec::new();
    if model.is_none() {
        notes.push(match resolved.policy {
            RecyclePolicy::Time(_) => "004 models sigma- and N-bounded filters; a time-bounded filter has no model rate".to_string(),
            _ => "004's N-bounded average (eq. 3) is for one phase; a two-phase N-bounded filter has no model rate".to_string(),
        });
    }
    if n.horizon_ns.is_some() {
        notes.push("with --horizon, a flow idle longer than the horizon starts a new instance; the model knows no horizon".into());
    }
    NewFlowReport {
        config: NewFlowConfigInfo {
            bits: n.bits,
            bits_per_shard_phase: resolved.phase_bits,
            k: resolved.k,
            policy: match resolved.policy {
                RecyclePolicy::Sigma(s) => format!("sigma:{s}"),
                RecyclePolicy::Insertions(i) => format!("n:{i}"),
                RecyclePolicy::Time(ns) => format!("time:{}", super::WindowSpec::Time(ns)),
            },
            two_phase: n.two_phase,
            retaining: n.retaining,
            colliding: n.hashing == Hashing::Colliding,
            horizon_s: n.horizon_ns.map(|h| h as f64 * 1e-9),
        },
        overall: new_flow_rates(None, &all, truth, t.recycles, model),
        classes: names
            .iter()
            .zip(&t.classes)
            .map(|(name, c)| new_flow_rates(Some(name.clone()), c, truth, t.recycles, model))
            .collect(),
        dropped_triggers: t.dropped_triggers,
        false_negatives_before_first_recycle: truth
            .then_some(t.false_negatives_before_first_recycle),
        notes,
    }
}

/// Rates of one evaluator over a set of classes (`None`: all).
fn selective_rates(
    class: Option<(usize, String)>,
    t: &SelectiveTally,
    errors: &[ErrorTally],
    alpha: &dyn Fn(usize) -> f64,
) -> SelectiveRates {
    let idx: Vec<usize> = match &class {
        Some((c, _)) => vec![*c],
        None => (0..t.classes.len()).collect(),
    };
    let (mut q, mut m, mut ps, mut fp, mut fnn, mut skipped, mut cost) = (0, 0, 0.0, 0, 0, 0, 0.0);
    for &c in &idx {
        let ct = &t.classes[c];
        let e = errors.get(c).copied().unwrap_or_default();
        q += ct.queries;
        m += ct.members;
        ps += ct.prior_sum;
        fp += e.false_positives;
        fnn += e.false_negatives;
        skipped += e.skipped;
        cost += e.false_positives as f64 + alpha(c) * e.false_negatives as f64;
    }
    SelectiveRates {
        class: class.map(|c| c.1),
        queries: q,
        members: m,
        prior_est: if q > 0 { ps / q as f64 } else { 0.0 },
        prior_true: ratio(m, q),
        false_positives: fp,
        false_negatives: fnn,
        fp_rate: ratio(fp, q - m),
        fn_rate: ratio(fnn, m),
        cost,
        cost_reduction: 0.0,
        skipped,
    }
}

fn selective_report(
    cfg: &PipelineConfig,
    names: &[String],
    plan: &super::selective::Plan,
    t: &SelectiveTally,
) -> SelectiveReport {
    let s = &cfg.selective;
    let class_alpha = |c: usize| s.alpha.get(c).copied().unwrap_or(1.0);
    let mut variants: Vec<SelectiveVariant> = Vec::new();
    let mut sweeps = Vec::new();
    for (e, spec) in plan.evaluators.iter().enumerate() {
        let fixed = spec.alpha;
        let alpha = move |c: usize| fixed.unwrap_or_else(|| class_alpha(c));
        let errors = &t.errors[e];
        match spec.sweep {
            None => variants.push(SelectiveVariant {
                name: spec.variant.to_string(),
                overall: selective_rates(None, t, errors, &alpha),
                classes: names
                    .iter()
                    .enumerate()
                    .map(|(c, n)| selective_rates(Some((c, n.clone())), t, errors, &alpha))
                    .collect(),
            }),
            Some(param) => {
                let r = selective_rates(None, t, errors, &alpha);
                sweeps.push(SweepPoint {
                    parameter: param.to_string(),
                    value: spec.value,
                    variant: spec.variant.to_string(),
                    bpe: spec.bpe,
                    k: spec.k,
                    alpha: spec.alpha,
                    queries: r.queries,
                    members: r.members,
                    fp_rate: r.fp_rate,
                    fn_rate: r.fn_rate,
                    cost: r.cost,
                })
            }
        }
    }
    // Cost reductions against the plain filter, class by class.
    if let Some(plain) = variants.iter().find(|v| v.name == "plain").cloned() {
        let reduce = |r: &mut SelectiveRates, base: &SelectiveRates| {
            r.cost_reduction = if base.cost > 0.0 {
                1.0 - r.cost / base.cost
            } else {
                0.0
            };
        };
        for v in variants.iter_mut() {
            reduce(&mut v.overall, &plain.overall);
            for (r, b) in v.classes.iter_mut().zip(&plain.classes) {
                reduce(r, b);
            }
        }
    }
    let mut notes = Vec::new();
    let sampled: u64 = t.classes.iter().map(|c| c.sampled).sum();
    let starved = t
        .classes
        .iter()
        .filter(|c| c.queries > 0 && c.sampled < s.prior_min_samples * cfg.shards as u64)
        .count();
    if starved > 0 {
        notes.push(format!(
            "{starved} classes had fewer than {} prior samples per shard on average ({sampled} sampled queries in all); they use the default prior {} and are answered as by the plain filter until they have more (raise --prior-sample on short traces)",
            s.prior_min_samples, s.prior_default
        ));
    }
    SelectiveReport {
        config: SelectiveConfigInfo {
            cache_window: s.cache_window.to_string(),
            query_window: s.query_window.to_string(),
            directory: match s.directory {
                DirectoryKind::Bloom => "bf",
                DirectoryKind::Counting => "cbf",
            }
            .into(),
            bpe: s.bpe,
            k: s.main_k(),
            query_unit: match s.query_unit {
                QueryUnit::Flow => "flow",
                QueryUnit::Packet => "packet",
            }
            .into(),
            prior_sample: s.prior_sample,
            prior_default: s.prior_default,
            prior_min_samples: s.prior_min_samples,
            alpha: names
                .iter()
                .enumerate()
                .map(|(c, n)| ClassAlpha {
                    class: n.clone(),
                    alpha: class_alpha(c),
                })
                .collect(),
        },
        variants,
        sweeps,
        directories_built: t.directories_built,
        set_elements: t.set_elements,
        insertion_skipped: t.insertion_skipped,
        notes,
    }
}
