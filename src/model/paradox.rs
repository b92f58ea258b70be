//! The Bloom paradox (Rottenstreich and Keslassy, "The Bloom Paradox: When
//! not to Use a Bloom Filter", paper 000): when a filter's positive answer
//! should be ignored because the element's a priori membership probability
//! is too low for the answer to be worth its false-positive cost.
//!
//! Costs follow 000 Table I: a false positive costs 1, a false negative
//! costs `alpha` (`W_FN / W_FP`), correct answers cost 0.
//!
//! ```
//! use flowsieve::model::paradox;
//! // 000 §IV-B: alpha = 1 and a prior of 10^-6 need at least 28.7 bits per
//! // element before a Bloom filter's positive answer is worth trusting.
//! assert!((paradox::min_bits_per_element(1.0, 1e-6) - 28.7).abs() < 0.1);
//! ```

use super::special::ln_binomial;
use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::BuildHasherDefault;

/// A hash map whose iteration order is the same in every run (SipHash with
/// fixed keys), so that sums over it are reproducible to the last bit.
type FixedOrderMap = HashMap<u64, f64, BuildHasherDefault<DefaultHasher>>;
use std::f64::consts::LN_2;

/// Theorem 1 (000): the paradox occurs for an element iff its prior is
/// below `1 / (1 + alpha * 2^{ln2 * m/n})`, for a filter with the optimal
/// number of hashes (false-positive rate `2^{-ln2 * m/n}`).
pub fn prior_threshold(alpha: f64, m_over_n: f64) -> f64 {
    1.0 / (1.0 + alpha * (LN_2 * m_over_n).exp2())
}

/// The logarithm of [`prior_threshold`], `-ln(1 + alpha 2^{ln2 m/n})`,
/// also where the threshold is below the smallest `f64` (`m/n = 2000`
/// puts it near `e^-961`).
///
/// ```
/// use flowsieve::model::paradox::{ln_prior_threshold, prior_threshold};
/// assert!((ln_prior_threshold(2.0, 10.0) - prior_threshold(2.0, 10.0).ln()).abs() < 1e-14);
/// assert_eq!(prior_threshold(1.0, 2000.0), 0.0);
/// let ln2 = std::f64::consts::LN_2;
/// assert!((ln_prior_threshold(1.0, 2000.0) + ln2 * ln2 * 2000.0).abs() < 1e-9);
/// ```
pub fn ln_prior_threshold(alpha: f64, m_over_n: f64) -> f64 {
    let x = alpha.ln() + LN_2 * LN_2 * m_over_n;
    -super::special::ln_add(0.0, x)
}

/// Theorem 1 for any false-positive rate (its proof before the optimal-`k`
/// substitution): the paradox occurs iff `fpr (1 - P) > alpha P`, i.e.
/// `P < fpr / (fpr + alpha)`.
pub fn prior_threshold_for_fpr(alpha: f64, fpr: f64) -> f64 {
    fpr / (fpr + alpha)
}

/// The inverse of Theorem 1 (000 Fig. 2(b)): the fewest bits per element at
/// which an element of prior `P` escapes the paradox,
/// `ln((1 - P) / (alpha P)) / (ln 2)^2`, or 0 if it never falls in it.
pub fn min_bits_per_element(alpha: f64, prior: f64) -> f64 {
    ((1.0 - prior) / (alpha * prior)).ln().max(0.0) / (LN_2 * LN_2)
}

/// The Bloom-filter posterior `Pr(x in S | BF = 1) = P / (P + (1 - P) fpr)`
/// (000 §IV-A, the proof of Theorem 1).
pub fn bloom_posterior(prior: f64, fpr: f64) -> f64 {
    prior / (prior + (1.0 - prior) * fpr)
}

/// Theorem 2 (000): the membership probability given the `k` counters of a
/// counting filter of `m` counters in `k` subarrays holding `n` elements,
///
/// ```text
/// m^k (prod c_j) P / (m^k (prod c_j) P + (n k)^k (1 - P)),
/// ```
///
/// computed in logarithms (products of counters overflow). 0 if a counter
/// is 0.
pub fn cbf_posterior(counters: &[u64], prior: f64, m: u64, n: u64) -> f64 {
    if counters.contains(&0) {
        return 0.0;
    }
    let ln_product: f64 = counters.iter().map(|&c| (c as f64).ln()).sum();
    posterior_from_ln_product(ln_product, counters.len() as u32, prior, m, n)
}

/// Theorem 2 (and Theorem 5 with `ln delta`) as a function of the log of
/// the counter product.
pub fn posterior_from_ln_product(ln_product: f64, k: u32, prior: f64, m: u64, n: u64) -> f64 {
    posterior_with_prior_logs(ln_product, k, PriorLogs::new(prior), m, n)
}

/// A class prior `P` with the two logarithms of it that Theorem 2 (000)
/// takes, `ln P` and `ln(1 - P)`.
///
/// Why: the selective stage asks for a posterior at every query, and a
/// class's prior changes only when the coordinator sends new ones. Taken
/// once per prior, the logarithms are the same numbers as taken at each
/// query, so the posterior is the same, bit for bit.
///
/// ```
/// use flowsieve::model::paradox::{PriorLogs, posterior_from_ln_product, posterior_with_prior_logs};
/// let p = PriorLogs::new(0.2);
/// assert_eq!(p.prior(), 0.2);
/// let a = posterior_with_prior_logs(3.5, 4, p, 1 << 16, 5000);
/// let b = posterior_from_ln_product(3.5, 4, 0.2, 1 << 16, 5000);
/// assert_eq!(a.to_bits(), b.to_bits());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PriorLogs {
    prior: f64,
    ln_prior: f64,
    ln_complement: f64,
}

impl PriorLogs {
    /// The prior and its logarithms (`-inf` or NaN outside `(0, 1)`,
    /// where [`posterior_with_prior_logs`] does not use them).
    ///
    /// Never inlined: the logarithms are pure, so once inlined into a
    /// loop over evaluators the compiler may hoist them out of the branch
    /// that needs them and take them at every query, which is the cost
    /// this type exists to avoid.
    #[inline(never)]
    pub fn new(prior: f64) -> PriorLogs {
        PriorLogs {
            prior,
            ln_prior: prior.ln(),
            ln_complement: (-prior).ln_1p(),
        }
    }

    /// The prior itself.
    pub fn prior(&self) -> f64 {
        self.prior
    }
}

/// [`posterior_from_ln_product`] with the prior's logarithms taken before.
pub fn posterior_with_prior_logs(ln_product: f64, k: u32, prior: PriorLogs, m: u64, n: u64) -> f64 {
    if prior.prior <= 0.0 {
        return 0.0;
    }
    if prior.prior >= 1.0 {
        return 1.0;
    }
    let k_f = f64::from(k);
    // ln odds = k ln m + ln prod + ln P - k ln(nk) - ln(1 - P)
    let ln_odds = k_f * (m as f64).ln() + ln_product + prior.ln_prior
        - k_f * (n as f64 * k_f).ln()
        - prior.ln_complement;
    1.0 / (1.0 + (-ln_odds).exp())
}

/// Theorem 4 (000): answer positive iff the posterior exceeds
/// `1 / (alpha + 1)`. At equality both answers cost the same; flowsieve
/// answers positive, consistent with [`min_counter_product`].
pub fn decide(posterior: f64, alpha: f64) -> bool {
    posterior >= 1.0 / (alpha + 1.0)
}

/// 2^52: from here on an `f64` has no fraction.
const TWO_POW_52: f64 = 4_503_599_627_370_496.0;

/// `Pi(x, k)` (000 §V-C): the smallest counter product whose Theorem 2
/// posterior reaches `1 / (alpha + 1)`, `ceil((nk/m)^k (1 - P) / (alpha P))`
/// (at least 1: a zero counter is always a negative answer).
pub fn min_counter_product(k: u32, prior: f64, alpha: f64, m: u64, n: u64) -> f64 {
    let k_f = f64::from(k);
    let mut x = (n as f64 * k_f / m as f64).powf(k_f) * (1.0 - prior) / (alpha * prior);
    if !x.is_finite() && prior > 0.0 && prior < 1.0 && alpha > 0.0 && m > 0 && n > 0 {
        // alpha P (or the power) left the f64 range while the bound itself
        // may not have: alpha = P = 1e-200 with (nk/m)^k = 1e-200 is
        // 1e200, but alpha P is +0 and the quotient +inf. Taken from
        // logarithms it is +inf only where the bound is.
        x = (ln_min_counter_product(k, prior, alpha, m, n)).exp();
    }
    // Past 2^52 every f64 is an integer and x is the answer; shrinking it
    // by the guard below would answer a product below the bound.
    if x >= TWO_POW_52 {
        return x;
    }
    // Guard the ceiling against rounding just above an integer.
    let c = (x * (1.0 - 1e-12)).ceil();
    c.max(1.0)
}

/// The natural logarithm of the bound [`min_counter_product`] rounds up,
/// `k ln(nk/m) + ln(1 - P) - ln alpha - ln P`, also where the bound is
/// past the largest `f64`.
///
/// ```
/// use flowsieve::model::paradox::{ln_min_counter_product, min_counter_product};
/// let ln = ln_min_counter_product(2, 1e-300, 1e-300, 1_000_000_000, 10);
/// assert_eq!(min_counter_product(2, 1e-300, 1e-300, 1_000_000_000, 10), f64::INFINITY);
/// // (2e-8)^2 / 1e-600 = 4e584.
/// assert!((ln / std::f64::consts::LN_10 - 584.0 - 4f64.log10()).abs() < 1e-9);
/// ```
pub fn ln_min_counter_product(k: u32, prior: f64, alpha: f64, m: u64, n: u64) -> f64 {
    let k_f = f64::from(k);
    k_f * (n as f64 * k_f / m as f64).ln() + (-prior).ln_1p() - alpha.ln() - prior.ln()
}

/// Theorem 5 (000): `delta`, the B_h counting filter's replacement for the
/// counter product. For each of the `k` entries, `c_j` is the fixed-increment
/// counter and `y_j` the multiplicity of the element's own variable
/// increment in the variable counter's sum, known when `c_j <= h`
/// (`Some`). `ell` is the size of the B_h sequence. Known entries contribute
/// `ell * y_j`, the others `c_j`.
pub fn bh_delta(counters: &[u64], multiplicities: &[Option<u64>], ell: u64) -> f64 {
    counters
        .iter()
        .zip(multiplicities.iter().chain(std::iter::repeat(&None)))
        .map(|(&c, y)| match y {
            Some(y) => (ell * y) as f64,
            None => c as f64,
        })
        .product()
}

/// Theorem 5 (000): `m^k delta P / (m^k delta P + (nk)^k (1 - P))`.
pub fn bh_posterior(delta: f64, k: u32, prior: f64, m: u64, n: u64) -> f64 {
    if delta <= 0.0 {
        return 0.0;
    }
    posterior_from_ln_product(delta.ln(), k, prior, m, n)
}

/// The distribution of one counter of an element's `k` entries: a
/// non-member's counter is `Binomial(n, k/m)` (each subarray of `m/k`
/// counters takes one increment per element); a member's is one more than
/// `Binomial(n - 1, k/m)`. Truncated where the remaining mass is below 1e-15.
fn counter_pmf(n: u64, p: f64, member: bool) -> Vec<(u64, f64)> {
    let trials = if member { n.saturating_sub(1) } else { n };
    let mut out = Vec::new();
    let mut mass = 0.0;
    for c in 0..=trials {
        let lp = ln_binomial(trials, c) + c as f64 * p.ln() + (trials - c) as f64 * (-p).ln_1p();
        let pr = lp.exp();
        out.push((c + u64::from(member), pr));
        mass += pr;
        if c as f64 > trials as f64 * p && 1.0 - mass < 1e-15 {
            break;
        }
    }
    out
}

/// `Pr(product of the k counters >= threshold)`, products capped at the
/// threshold so the state space stays small. The map's hasher has fixed
/// keys so that the sums run in the same order every time: with a randomly
/// seeded hash map the last bits of the answer changed from call to call.
fn product_tail(k: u32, pmf: &[(u64, f64)], threshold: u64) -> f64 {
    let mut dist = FixedOrderMap::default();
    dist.insert(1, 1.0);
    for _ in 0..k {
        let mut next = FixedOrderMap::default();
        for (&prod, &pp) in &dist {
            for &(c, pc) in pmf {
                let v = prod.saturating_mul(c).min(threshold);
                *next.entry(v).or_insert(0.0) += pp * pc;
            }
        }
        dist = next;
    }
    dist.iter()
        .filter(|(v, _)| **v >= threshold)
        .map(|(_, p)| p)
        .sum()
}

/// The expected cost of one query (000 §V-C) for a counting filter with `k`
/// hashes, `m` counters and `n` elements, an element of prior `P`, and the
/// Theorem 4 policy (positive iff the product reaches
/// [`min_counter_product`]): `alpha P Pr(prod < Pi | x in S) + (1 - P)
/// Pr(prod >= Pi | x not in S)`, in units of a false positive's cost.
///
/// The paper writes the sum over products with `P(k, pi)`, "the product of
/// counters picked at random"; weighting each product by the posterior as
/// it does makes that the marginal distribution of the element's own
/// counters, which is the mixture used here.
pub fn expected_cost_cbf(k: u32, m: u64, n: u64, prior: f64, alpha: f64) -> f64 {
    if k == 0 || m < u64::from(k) {
        return f64::INFINITY;
    }
    let (fn_rate, fp_rate) = cbf_error_rates(k, m, n, min_counter_product(k, prior, alpha, m, n));
    alpha * prior * fn_rate + (1.0 - prior) * fp_rate
}

/// The error rates of the counter-product rule "positive iff the product
/// of the `k` counters is at least `min_product`" on a counting filter of
/// `m` counters in `k` subarrays holding `n` elements (000 §V-C and
/// §VIII-B/C): `(false-negative rate over members, false-positive rate over
/// non-members)`. With `min_product = 1` it is the plain counting filter
/// (no false negatives).
///
/// ```
/// use flowsieve::model::paradox::cbf_error_rates;
/// let (fnr, fpr) = cbf_error_rates(5, 7680, 1024, 1.0);
/// assert!(fnr < 1e-9); // 0 up to the tail truncation (1e-15 per counter)
/// let bloom = (1.0 - (-5.0f64 / 7.5).exp()).powi(5);
/// assert!((fpr - bloom).abs() / bloom < 0.01);
/// ```
pub fn cbf_error_rates(k: u32, m: u64, n: u64, min_product: f64) -> (f64, f64) {
    if k == 0 || m < u64::from(k) {
        return (0.0, 1.0);
    }
    let p = f64::from(k) / m as f64;
    let threshold = if min_product >= u64::MAX as f64 {
        u64::MAX
    } else {
        min_product.max(1.0) as u64
    };
    let fn_rate = (1.0 - product_tail(k, &counter_pmf(n, p, true), threshold)).max(0.0);
    let fp_rate = product_tail(k, &counter_pmf(n, p, false), threshold);
    (fn_rate, fp_rate)
}

/// The cost-optimal number of hashes (000 §V-C): the `k` in `1..=k_max`
/// with the lowest [`expected_cost_cbf`].
pub fn cost_optimal_k(m: u64, n: u64, prior: f64, alpha: f64, k_max: u32) -> u32 {
    (1..=k_max.max(1))
        .map(|k| (k, expected_cost_cbf(k, m, n, prior, alpha)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(1, |(k, _)| k)
}

/// One step of a query plan across proxies (000 §VII).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryTarget {
    /// A regular proxy, by index into the probabilities given.
    Proxy(usize),
    /// The special proxy that holds every element.
    Special,
}

/// Theorem 6 (000): query the regular proxies with a positive probability
/// and the special proxy (success probability 1, cost `special_cost`) in
/// non-increasing order of success probability over cost, stopping at the
/// special proxy. Ties keep the proxy order and put the special proxy
/// after regular proxies of the same ratio. Theorem 7 is the case of equal
/// regular costs: probabilities in decreasing order until one falls below
/// `cost / special_cost`.
pub fn query_order(probs: &[f64], costs: &[f64], special_cost: f64) -> Vec<QueryTarget> {
    let mut regular: Vec<(usize, f64)> = probs
        .iter()
        .zip(costs)
        .enumerate()
        .filter(|(_, (p, _))| **p > 0.0)
        .map(|(i, (p, c))| (i, p / c))
        .collect();
    regular.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let special_ratio = 1.0 / special_cost;
    let mut order = Vec::new();
    for (i, ratio) in regular {
        if ratio < special_ratio {
            break;
        }
        order.push(QueryTarget::Proxy(i));
        if probs[i] >= 1.0 {
            return order;
        }
    }
    order.push(QueryTarget::Special);
    order
}

/// The expected cost of a query plan: each step is paid if every earlier
/// step failed (000, the proof of Theorem 6).
pub fn expected_query_cost(
    order: &[QueryTarget],
    probs: &[f64],
    costs: &[f64],
    special_cost: f64,
) -> f64 {
    let mut reach = 1.0;
    let mut total = 0.0;
    for step in order {
        let (p, c) = match *step {
            QueryTarget::Proxy(i) => (probs[i], costs[i]),
            QueryTarget::Special => (1.0, special_cost),
        };
        total += reach * c;
        reach *= 1.0 - p;
    }
    total
}

/// One class of queried elements for [`selective_bloom_cost`]: how many of
/// its elements are in the set and how many exist in all.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ElementClass {
    /// Expected members.
    pub members: f64,
    /// Expected elements in all.
    pub universe: f64,
}

impl ElementClass {
    /// The class prior, members over universe.
    pub fn prior(&self) -> f64 {
        self.members / self.universe
    }
}

/// Which Selective Bloom filter variant (000 §IV-C).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectiveVariant {
    /// A plain Bloom filter: everything inserted and queried.
    Plain,
    /// Selective query: classes below the Theorem 1 threshold are answered
    /// negative without asking the filter.
    Query,
    /// Selective insertion: classes below the threshold are not inserted
    /// (fewer elements, fewer false positives), but still queried; their
    /// members are false negatives unless the filter answers positive by
    /// chance.
    Insertion,
    /// Both: classes below the threshold are neither inserted nor queried.
    Both,
}

/// What [`selective_bloom_plan`] predicts for one variant.
#[derive(Clone, Debug, PartialEq)]
pub struct SelectivePlan {
    /// Per class (in the order given), whether it is left out (of the
    /// insertions, the queries or both, by variant).
    pub skipped: Vec<bool>,
    /// Elements inserted, `n*` (000 §IV-C).
    pub inserted: f64,
    /// The filter's false-positive rate at `n*`.
    pub fpr: f64,
    /// The Theorem 1 prior threshold at that rate.
    pub threshold: f64,
    /// Expected false positives over every class's non-members.
    pub false_positives: f64,
    /// Expected false negatives over every class's members.
    pub false_negatives: f64,
    /// `false_positives + alpha * false_negatives`.
    pub cost: f64,
}

/// Expected errors and cost when every element of every class is queried
/// once (000 §VIII-A, Table II): `(false positives, false negatives, cost)`
/// with a false positive costing 1 and a false negative `alpha`, for a
/// filter of `m` bits with `k` hashes. See [`selective_bloom_plan`].
pub fn selective_bloom_cost(
    classes: &[ElementClass],
    m: f64,
    k: u32,
    alpha: f64,
    variant: SelectiveVariant,
) -> (f64, f64, f64) {
    let p = selective_bloom_plan(classes, m, k, alpha, variant);
    (p.false_positives, p.false_negatives, p.cost)
}

/// The expected outcome of one Selective Bloom filter variant (000 §IV-C)
/// over classes of known priors, each element queried once, with the
/// false-positive rate `(1 - e^{-k n*/m})^k` (001) at the number of
/// elements actually inserted.
///
/// Under selective insertion the threshold depends on `n*`, which depends
/// on the classes left out (000 §IV-C: "`P_T` ... where `n*` is the final
/// number of inserted elements"). The plan iterates from the plain
/// filter's threshold: the classes below it give `n*`, `n*` gives a rate
/// and a new threshold, and so on until the set of classes left out
/// repeats. Often it settles; when it alternates between two sets (leaving
/// out more lowers the rate, which lowers the threshold, which leaves out
/// fewer), the set that leaves out fewer is taken. That is the choice
/// 000 Table II's false-negative rates show (for example 3 of 13 classes
/// at bpe 6, alpha 100, and 7 at bpe 4, alpha 5).
///
/// ```
/// use flowsieve::model::paradox::{selective_bloom_plan, ElementClass, SelectiveVariant};
/// // 000 Table II, bpe 4, alpha 100: insertion leaves out the 5 classes of
/// // prior 2^-11 .. 2^-15 (fpr ~0.0505 at n* = 2048).
/// let classes: Vec<_> = (1..=13)
///     .map(|i| ElementClass { members: 256.0, universe: f64::from(1u32 << (10 + i)) })
///     .collect();
/// let p = selective_bloom_plan(&classes, 13312.0, 3, 100.0, SelectiveVariant::Insertion);
/// assert_eq!(p.skipped.iter().filter(|s| **s).count(), 5);
/// assert_eq!(p.inserted, 2048.0);
/// assert!((p.fpr - 0.0505).abs() < 5e-4);
/// ```
pub fn selective_bloom_plan(
    classes: &[ElementClass],
    m: f64,
    k: u32,
    alpha: f64,
    variant: SelectiveVariant,
) -> SelectivePlan {
    let n: f64 = classes.iter().map(|c| c.members).sum();
    let fpr_at = |inserted: f64| {
        if inserted <= 0.0 {
            0.0
        } else {
            super::bloom::fpr_approx(m / inserted, k)
        }
    };
    let outcome = |skipped: Vec<bool>, inserted: f64, fpr: f64, threshold: f64| {
        let (mut fp, mut fneg) = (0.0, 0.0);
        for (c, &skip) in classes.iter().zip(&skipped) {
            let non_members = c.universe - c.members;
            match (variant, skip) {
                (SelectiveVariant::Insertion, true) => {
                    fp += non_members * fpr;
                    fneg += c.members * (1.0 - fpr);
                }
                (SelectiveVariant::Query | SelectiveVariant::Both, true) => fneg += c.members,
                _ => fp += non_members * fpr,
            }
        }
        SelectivePlan {
            skipped,
            inserted,
            fpr,
            threshold,
            false_positives: fp,
            false_negatives: fneg,
            cost: fp + alpha * fneg,
        }
    };
    let plain_fpr = fpr_at(n);
    let plain_threshold = prior_threshold_for_fpr(alpha, plain_fpr);
    match variant {
        SelectiveVariant::Plain => {
            outcome(vec![false; classes.len()], n, plain_fpr, plain_threshold)
        }
        SelectiveVariant::Query => outcome(
            classes
                .iter()
                .map(|c| c.prior() < plain_threshold)
                .collect(),
            n,
            plain_fpr,
            plain_threshold,
        ),
        SelectiveVariant::Insertion | SelectiveVariant::Both => {
            // Iterate from the plain threshold: skip set -> n* -> rate ->
            // threshold -> skip set, until it repeats.
            let skip_below =
                |t: f64| -> Vec<bool> { classes.iter().map(|c| c.prior() < t).collect() };
            let inserted_of = |skipped: &[bool]| -> f64 {
                classes
                    .iter()
                    .zip(skipped)
                    .filter(|(_, s)| !**s)
                    .map(|(c, _)| c.members)
                    .sum()
            };
            let mut seen: Vec<Vec<bool>> = Vec::new();
            let mut skipped = skip_below(plain_threshold);
            loop {
                if let Some(pos) = seen.iter().position(|s| *s == skipped) {
                    // A fixed point (cycle of one) or a cycle: take the
                    // member of the cycle that leaves out the fewest.
                    let chosen = seen[pos..]
                        .iter()
                        .min_by_key(|s| s.iter().filter(|x| **x).count())
                        .cloned()
                        .unwrap_or(skipped);
                    let inserted = inserted_of(&chosen);
                    let fpr = fpr_at(inserted);
                    return outcome(chosen, inserted, fpr, prior_threshold_for_fpr(alpha, fpr));
                }
                seen.push(skipped.clone());
                let fpr = fpr_at(inserted_of(&skipped));
                skipped = skip_below(prior_threshold_for_fpr(alpha, fpr));
            }
        }
    }
}
