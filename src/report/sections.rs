//! The built-in stages' sections as heading, tables and lines: the wording
//! of the text report and the columns of the CSV files, both from one
//! column list per table.

use super::table::{Cell, Column, Table};
use super::{HeavyRates, HeavyReport, NewFlowRates, NewFlowReport, Section, SelectiveReport};

const HEAVY_COLUMNS: &[Column] = &[
    Column::new("class", 14),
    Column::new("packets", 10),
    Column::titled("flows_below", "below", 9),
    Column::titled("flows_above", "above", 8),
    Column::new("reported", 8),
    Column::titled("false_positives", "FP", 6),
    Column::titled("false_negatives", "FN", 6),
    Column::new("fp_rate", 8),
    Column::titled("fp_rate_se", "fp_se", 8),
    Column::new("fn_rate", 8),
    Column::titled("model_fp_rate", "model", 9),
    Column::titled("model_fp_rate_compound", "compound", 9),
];

fn heavy_row(t: &mut Table, name: &str, r: &HeavyRates) {
    t.push_row(
        vec![
            Cell::Text(name.to_string()),
            Cell::Count(Some(r.packets)),
            Cell::Count(r.flows_below),
            Cell::Count(r.flows_above),
            Cell::Count(Some(r.reported)),
            Cell::Count(r.false_positives),
            Cell::Count(r.false_negatives),
            Cell::Rate(r.fp_rate),
            Cell::Rate(r.fp_rate_se),
            Cell::Rate(r.fn_rate),
            Cell::Rate(r.model_fp_rate),
            Cell::Rate(r.model_fp_rate_compound),
        ],
        r.packets == 0,
    );
}

impl Section for HeavyReport {
    fn heading(&self) -> String {
        let c = &self.config;
        format!(
            "heavy flows (count >= {} per {} window; {} x {}-bit counters{}, k = {}{}{})",
            c.theta,
            c.window,
            c.counters,
            c.counter_bits,
            if c.layout == crate::filter::CounterLayout::Blocked {
                ", blocked"
            } else {
                ""
            },
            c.k,
            if c.k_from_model {
                format!(" = k_opt for {} per window", c.k_model_load)
            } else {
                String::new()
            },
            if c.conservative { ", conservative" } else { "" }
        )
    }

    fn tables(&self) -> Vec<Table> {
        let mut t = Table::new("heavy", HEAVY_COLUMNS);
        for r in &self.classes {
            heavy_row(&mut t, r.class.as_deref().unwrap_or("?"), r);
        }
        heavy_row(&mut t, "all", &self.overall);
        vec![t]
    }

    fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "{} shard-windows; saturation: {} counters in {} windows",
            self.shard_windows, self.saturation_events, self.saturated_windows
        )];
        out.extend(self.notes.iter().map(|n| format!("note: {n}")));
        out
    }
}

const NEW_FLOW_COLUMNS: &[Column] = &[
    Column::new("class", 14),
    Column::new("packets", 10),
    Column::new("true_new", 9),
    Column::titled("reported_new", "reported", 9),
    Column::titled("false_positives", "FP", 7),
    Column::titled("false_negatives", "FN", 7),
    Column::titled("fp_rate_instance", "instance", 9),
    Column::titled("fp_rate_instance_se", "inst_se", 8),
    Column::titled("fp_rate_first", "first", 9),
    Column::titled("fp_rate_each", "each", 9),
    Column::new("fn_rate", 8),
    Column::new("recycles", 8),
    Column::titled("model_fp_rate", "model", 8),
];

fn new_flow_row(t: &mut Table, name: &str, r: &NewFlowRates) {
    t.push_row(
        vec![
            Cell::Text(name.to_string()),
            Cell::Count(Some(r.packets)),
            Cell::Count(r.true_new),
            Cell::Count(Some(r.reported_new)),
            Cell::Count(r.false_positives),
            Cell::Count(r.false_negatives),
            Cell::Rate(r.fp_rate_instance),
            Cell::Rate(r.fp_rate_instance_se),
            Cell::Rate(r.fp_rate_first),
            Cell::Rate(r.fp_rate_each),
            Cell::Rate(r.fn_rate),
            Cell::Count(Some(r.recycles)),
            Cell::Rate(r.model_fp_rate),
        ],
        r.packets == 0,
    );
}

impl Section for NewFlowReport {
    fn heading(&self) -> String {
        let c = &self.config;
        format!(
            "new flows (recycling filter: {} bits, {} per shard{}, k = {}, {}{}{}{})",
            c.bits,
            c.bits_per_shard_phase,
            if c.two_phase { " per phase" } else { "" },
            c.k,
            c.policy,
            if c.retaining { ", retaining" } else { "" },
            if c.colliding { "" } else { ", non-colliding" },
            match c.layout {
                crate::filter::BitLayout::Scattered => "",
                crate::filter::BitLayout::Blocked => ", blocked",
            }
        )
    }

    fn tables(&self) -> Vec<Table> {
        let mut t = Table::new("new_flows", NEW_FLOW_COLUMNS);
        for r in &self.classes {
            new_flow_row(&mut t, r.class.as_deref().unwrap_or("?"), r);
        }
        new_flow_row(&mut t, "all", &self.overall);
        vec![t]
    }

    fn lines(&self) -> Vec<String> {
        let model = self
            .overall
            .model_fp_rate
            .map_or("-".into(), |v| format!("{v:.4}"));
        use crate::model::recycling::SizingMethod;
        let source = match (self.config.layout, self.config.model_method) {
            (crate::filter::BitLayout::Blocked, _) => "blocked layout, (R3)/(R4)",
            (_, Some(SizingMethod::Chain)) => "004's chain",
            (_, Some(SizingMethod::Continuum)) => "004's chain, continuum limit",
            _ => "004",
        };
        let mut out = vec![format!(
            "recycles {}; model average rate ({source}, count-instance) {model}",
            self.overall.recycles
        )];
        out.extend(self.notes.iter().map(|n| format!("note: {n}")));
        out
    }
}

const SELECTIVE_COLUMNS: &[Column] = &[
    Column::new("variant", 20),
    Column::new("class", 10),
    Column::new("queries", 9),
    Column::new("members", 8),
    Column::titled("prior_est", "P_used", 7),
    Column::titled("prior_true", "P_true", 7),
    Column::titled("false_positives", "FP", 7),
    Column::titled("false_negatives", "FN", 7),
    Column::new("fp_rate", 8),
    Column::new("fn_rate", 8),
    Column::new("cost", 10),
    Column::titled("cost_reduction", "saving", 8),
    Column::new("skipped", 8),
];

const PRIOR_COLUMNS: &[Column] = &[
    Column::new("class", 12),
    Column::new("alpha", 7),
    Column::titled("threshold", "P*", 9),
    Column::titled("prior", "P_est", 9),
    Column::titled("prior_se", "+-SE", 8),
    Column::new("samples", 8),
    Column::titled("prior_true", "P_true", 8),
    Column::titled("paradox", "regime", 8),
    Column::titled("paradox_below_bpe", "below_bpe", 10),
    Column::titled("paradox_below_alpha", "below_alpha", 12),
];

const SWEEP_COLUMNS: &[Column] = &[
    Column::titled("parameter", "param", 8),
    Column::new("value", 8),
    Column::new("variant", 16),
    Column::new("bpe", 5),
    Column::new("k", 3),
    Column::new("alpha", 6),
    Column::new("queries", 9),
    Column::new("members", 8),
    Column::new("fp_rate", 8),
    Column::new("fn_rate", 8),
    Column::new("cost", 10),
];

impl Section for SelectiveReport {
    fn heading(&self) -> String {
        let c = &self.config;
        format!(
            "selective query (directory {}{} at {} bits/element, k = {}; cache {} then query {}; queries per {})",
            c.directory,
            match c.layout {
                crate::filter::CounterLayout::Partitioned => "",
                crate::filter::CounterLayout::Blocked => ", blocked",
            },
            c.bpe,
            c.k,
            c.cache_window,
            c.query_window,
            c.query_unit
        )
    }

    fn tables(&self) -> Vec<Table> {
        let mut pr = Table::new("priors", PRIOR_COLUMNS);
        for p in &self.priors {
            pr.push_row(
                vec![
                    Cell::Text(p.class.clone()),
                    Cell::Number(Some(p.alpha)),
                    Cell::Rate(Some(p.threshold)),
                    Cell::Rate(p.prior),
                    Cell::Rate(p.prior_se),
                    Cell::Count(Some(p.samples)),
                    Cell::Rate(p.prior_true),
                    Cell::Text(match p.paradox {
                        Some(true) => "paradox".into(),
                        Some(false) => "plain".into(),
                        None => "-".into(),
                    }),
                    Cell::Rate(p.paradox_below_bpe),
                    Cell::Rate(p.paradox_below_alpha),
                ],
                p.queries == 0,
            );
        }
        let mut t = Table::new("selective", SELECTIVE_COLUMNS);
        for v in &self.variants {
            let overall = std::iter::once(&v.overall);
            for r in v.classes.iter().chain(overall) {
                t.push_row(
                    vec![
                        Cell::Text(v.name.to_string()),
                        Cell::Text(r.class.clone().unwrap_or_else(|| "all".into())),
                        Cell::Count(Some(r.queries)),
                        Cell::Count(Some(r.members)),
                        Cell::Rate(Some(r.prior_est)),
                        Cell::Rate(Some(r.prior_true)),
                        Cell::Count(Some(r.false_positives)),
                        Cell::Count(Some(r.false_negatives)),
                        Cell::Rate(Some(r.fp_rate)),
                        Cell::Rate(Some(r.fn_rate)),
                        Cell::Cost(r.cost),
                        Cell::Percent(r.cost_reduction),
                        Cell::Count(Some(r.skipped)),
                    ],
                    r.queries == 0,
                );
            }
        }
        let mut sweeps = Table::new("sweeps", SWEEP_COLUMNS);
        for p in &self.sweeps {
            sweeps.push(vec![
                Cell::Text(p.parameter.to_string()),
                Cell::Number(Some(p.value)),
                Cell::Text(p.variant.to_string()),
                Cell::Number(Some(p.bpe)),
                Cell::Count(Some(p.k as u64)),
                Cell::Number(p.alpha),
                Cell::Count(Some(p.queries)),
                Cell::Count(Some(p.members)),
                Cell::Rate(Some(p.fp_rate)),
                Cell::Rate(Some(p.fn_rate)),
                Cell::Cost(p.cost),
            ]);
        }
        vec![pr, t, sweeps]
    }

    fn lines(&self) -> Vec<String> {
        self.notes.iter().map(|n| format!("note: {n}")).collect()
    }
}
