//! Flow classes: a small integer per flow from a classifier.
//!
//! Built in (DESIGN.md):
//! - `ports`: `web` (TCP 80/443/8080 and UDP 443, either port), `dns` (53,
//!   TCP or UDP, either port), `tcp-other`, `udp-other`, `icmp` (ICMP and
//!   ICMPv6), `other`;
//! - `ipclass`: the classful class `A`..`E` of the source address, as in the
//!   Bloom paradox paper's trace experiment (000 §VIII-C); IPv6 sources are
//!   class `ipv6`.
//!
//! A TOML file defines classes by CIDR, protocol and port ranges; see
//! [`ClassConfig`].
//!
//! ```
//! use flowsieve::class::Classifier;
//! use flowsieve::dissect::FlowKey;
//! let c = Classifier::ports();
//! let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 51000, 443, 6);
//! assert_eq!(c.name(c.classify(&k)), "web");
//! ```

mod config;

pub use config::{ClassConfig, ClassConfigError, ClassRule, MAX_CLASSES, MAX_CONFIG_BYTES};

use crate::dissect::{FlowKey, IpVersion};

/// A class index into [`Classifier::names`].
pub type ClassId = u16;

const PROTO_ICMP: u8 = 1;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_ICMPV6: u8 = 58;

/// Assigns each flow key a class.
#[derive(Clone, Debug)]
pub struct Classifier {
    kind: Kind,
    names: Vec<String>,
}

#[derive(Clone, Debug)]
enum Kind {
    Ports,
    IpClass,
    Config(ClassConfig),
}

mod ports_class {
    pub const WEB: u16 = 0;
    pub const DNS: u16 = 1;
    pub const TCP_OTHER: u16 = 2;
    pub const UDP_OTHER: u16 = 3;
    pub const ICMP: u16 = 4;
    pub const OTHER: u16 = 5;
}

impl Classifier {
    /// Each class's cost ratio `alpha` for the selective-query stage: the
    /// config file's value where it sets one, else `default`.
    ///
    /// ```
    /// use flowsieve::class::Classifier;
    /// assert_eq!(Classifier::ports().alphas(2.0), vec![2.0; 6]);
    /// ```
    pub fn alphas(&self, default: f64) -> Vec<f64> {
        (0..self.names.len())
            .map(|c| match &self.kind {
                Kind::Config(cfg) => cfg.class_alpha(c as ClassId).unwrap_or(default),
                _ => default,
            })
            .collect()
    }

    /// The `ports` classifier.
    pub fn ports() -> Classifier {
        Classifier {
            kind: Kind::Ports,
            names: ["web", "dns", "tcp-other", "udp-other", "icmp", "other"]
                .map(String::from)
                .to_vec(),
        }
    }

    /// The `ipclass` classifier.
    pub fn ipclass() -> Classifier {
        Classifier {
            kind: Kind::IpClass,
            names: ["A", "B", "C", "D", "E", "ipv6"].map(String::from).to_vec(),
        }
    }

    /// A classifier from a parsed config.
    pub fn from_config(config: ClassConfig) -> Classifier {
        let names = config.class_names();
        Classifier {
            kind: Kind::Config(config),
            names,
        }
    }

    /// `ports`, `ipclass`, or the path of a TOML config file.
    pub fn from_spec(spec: &str) -> Result<Classifier, ClassConfigError> {
        match spec {
            "ports" => Ok(Classifier::ports()),
            "ipclass" => Ok(Classifier::ipclass()),
            path => Ok(Classifier::from_config(ClassConfig::from_file(path)?)),
        }
    }

    /// A short description for reports (`ports`, `ipclass`, or `config:PATH`).
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Ports => "ports".into(),
            Kind::IpClass => "ipclass".into(),
            Kind::Config(c) => format!("config:{}", c.source()),
        }
    }

    /// Class names, indexed by [`ClassId`].
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The name of a class.
    pub fn name(&self, id: ClassId) -> &str {
        self.names
            .get(usize::from(id))
            .map(String::as_str)
            .unwrap_or("?")
    }

    /// The class of a flow, where the interface is unknown or irrelevant
    /// (see [`Classifier::classify_on`]).
    #[inline]
    pub fn classify(&self, key: &FlowKey) -> ClassId {
        self.classify_on(key, None)
    }

    /// The class of a packet's flow, captured on the interface named
    /// `iface` where known. Only a config file's `iface` rules look at it.
    ///
    /// ```
    /// use flowsieve::class::{ClassConfig, Classifier};
    /// use flowsieve::dissect::FlowKey;
    /// let cfg = ClassConfig::parse("x", "[[class]]\nname = \"up\"\niface = [\"eth0\"]").unwrap();
    /// let c = Classifier::from_config(cfg);
    /// let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 51000, 443, 6);
    /// assert_eq!(c.name(c.classify_on(&k, Some("eth0"))), "up");
    /// assert_eq!(c.name(c.classify_on(&k, Some("eth1"))), "other");
    /// assert_eq!(c.name(c.classify(&k)), "other");
    /// ```
    #[inline]
    pub fn classify_on(&self, key: &FlowKey, iface: Option<&str>) -> ClassId {
        match &self.kind {
            Kind::Ports => ports_class_of(key),
            Kind::IpClass => ipclass_of(key),
            Kind::Config(c) => c.classify(key, iface),
        }
    }

    /// Whether [`Classifier::classify_on`] looks at the interface.
    pub fn uses_interfaces(&self) -> bool {
        matches!(&self.kind, Kind::Config(c) if c.uses_interfaces())
    }
}

/// The built-in `ports` rule (the module's doc), worked out with no branch
/// on the packet's protocol or ports.
///
/// Why: the source thread classifies every packet, and on real and
/// synthetic mixes the protocol and the ports change from packet to packet
/// with no pattern a branch predictor can learn. Written as a `match` with
/// guards, the rule compiled to a chain of compares and jumps that a
/// branch-predictor simulation (`valgrind --tool=cachegrind
/// --branch-sim=yes`) charged with 0.75 mispredicted branches a packet on
/// the throughput benchmark's trace, the most of any function on that
/// thread. Here every test is a compare into a flag, the flags are
/// combined with `|` and `&` (which, unlike `||` and `&&`, evaluate both
/// sides), and the class is read from a 16-entry table indexed by them
/// (BENCHMARKS.md, fifty-eighth round).
///
/// The index is `web << 3 | dns << 2 | kind`, where `kind` is 1 for TCP,
/// 2 for UDP, 3 for ICMP or ICMPv6 and 0 for anything else (the four are
/// exclusive). `web` wins over `dns`, and `dns` over the protocol's own
/// class, as in the rule's order; both are only ever set for TCP or UDP.
#[inline]
fn ports_class_of(key: &FlowKey) -> ClassId {
    use ports_class::*;
    #[rustfmt::skip]
    const BY_FLAGS: [ClassId; 16] = [
        // web = 0, dns = 0: the protocol's own class.
        OTHER, TCP_OTHER, UDP_OTHER, ICMP,
        // web = 0, dns = 1 (TCP or UDP only).
        DNS, DNS, DNS, DNS,
        // web = 1 (TCP or UDP only), dns either way.
        WEB, WEB, WEB, WEB, WEB, WEB, WEB, WEB,
    ];
    let (s, d, p) = (key.sport(), key.dport(), key.proto());
    let either = |port: u16| (s == port) | (d == port);
    let tcp = p == PROTO_TCP;
    let udp = p == PROTO_UDP;
    let icmp = (p == PROTO_ICMP) | (p == PROTO_ICMPV6);
    let web = (tcp & (either(80) | either(443) | either(8080))) | (udp & either(443));
    let dns = (tcp | udp) & either(53);
    let kind = usize::from(tcp) | (usize::from(udp) << 1) | (usize::from(icmp) * 3);
    let index = (usize::from(web) << 3) | (usize::from(dns) << 2) | kind;
    BY_FLAGS[index & 15]
}

#[inline]
fn ipclass_of(key: &FlowKey) -> ClassId {
    match key.version() {
        IpVersion::V6 => 5,
        IpVersion::V4 => {
            let first = (key.src_bits() >> 24) as u8;
            match first {
                0..=127 => 0,
                128..=191 => 1,
                192..=223 => 2,
                224..=239 => 3,
                240..=255 => 4,
            }
        }
    }
}
