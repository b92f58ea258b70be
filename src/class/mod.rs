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

    /// Whether it is a config file with no `[[class]]` rule: every flow
    /// then falls in the default class, which is seldom what was meant
    /// (an empty file, or every rule commented out).
    ///
    /// ```
    /// use flowsieve::class::{ClassConfig, Classifier};
    /// let none = ClassConfig::parse("empty.toml", "").unwrap();
    /// assert!(Classifier::from_config(none).has_no_rules());
    /// let one = ClassConfig::parse("web.toml", "[[class]]\nname = \"web\"\nports = [80]\n").unwrap();
    /// assert!(!Classifier::from_config(one).has_no_rules());
    /// assert!(!Classifier::ports().has_no_rules());
    /// ```
    pub fn has_no_rules(&self) -> bool {
        matches!(&self.kind, Kind::Config(c) if c.rules().is_empty())
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
/// --branch-sim=yes`) charged with 0.70 mispredicted branches a packet on
/// the throughput benchmark's trace, the most of any function on that
/// thread (BENCHMARKS.md, fifty-eighth round).
///
/// How, in 25 instructions a packet (callgrind), as many as the `match`
/// took on average:
/// - Each port's flags (`TCP_WEB` for 80, 443 and 8080, `UDP_WEB` for
///   443, `DNS_PORT` for 53) come from a 16-slot table indexed by
///   `(port ^ port >> 8) & 15`, where the four named ports land in four
///   different slots (0, 5, 10 and 15). The slot also holds its port, and
///   the flags count only when the port is that one, so any other port
///   gets none: an exact test, by a mask and not a branch.
/// - The protocol's kind (1 TCP, 2 UDP, 3 ICMP or ICMPv6, 0 anything
///   else) comes from a 256-entry table.
/// - The class is read from a 32-entry table indexed by the kind and the
///   two ports' flags together, filled by the rule in its order: web
///   before dns before the protocol's own class.
///
/// `tests/class.rs` checks it against the rule as documented for every
/// protocol number with every pair of ports the rule names, their
/// neighbours and the range's ends, and for every port number on either
/// side under TCP, UDP, ICMP, ICMPv6 and GRE.
#[inline]
fn ports_class_of(key: &FlowKey) -> ClassId {
    use ports_class::*;
    const TCP_WEB: u8 = 1;
    const UDP_WEB: u8 = 2;
    const DNS_PORT: u8 = 4;
    const fn slot(port: u16) -> usize {
        ((port ^ (port >> 8)) & 15) as usize
    }
    const PORTS: ([u16; 16], [u8; 16]) = {
        // The named ports must land in slots of their own: a build with
        // two in one slot fails here.
        assert!(slot(53) != slot(80) && slot(53) != slot(443) && slot(53) != slot(8080));
        assert!(slot(80) != slot(443) && slot(80) != slot(8080) && slot(443) != slot(8080));
        let mut ports = [0u16; 16];
        let mut flags = [0u8; 16];
        ports[slot(53)] = 53;
        flags[slot(53)] = DNS_PORT;
        ports[slot(80)] = 80;
        flags[slot(80)] = TCP_WEB;
        ports[slot(443)] = 443;
        flags[slot(443)] = TCP_WEB | UDP_WEB;
        ports[slot(8080)] = 8080;
        flags[slot(8080)] = TCP_WEB;
        (ports, flags)
    };
    const KIND: [u8; 256] = {
        let mut k = [0u8; 256];
        k[PROTO_TCP as usize] = 1;
        k[PROTO_UDP as usize] = 2;
        k[PROTO_ICMP as usize] = 3;
        k[PROTO_ICMPV6 as usize] = 3;
        k
    };
    /// The rule for TCP or UDP, whose web flag is `web`: web before dns
    /// before the protocol's `own` class.
    const fn by_rule(flags: u8, web: u8, own: ClassId) -> ClassId {
        if flags & web != 0 {
            WEB
        } else if flags & DNS_PORT != 0 {
            DNS
        } else {
            own
        }
    }
    const CLASS: [ClassId; 32] = {
        let mut c = [OTHER; 32];
        let mut f = 0;
        while f < 8 {
            c[8 + f] = by_rule(f as u8, TCP_WEB, TCP_OTHER);
            c[16 + f] = by_rule(f as u8, UDP_WEB, UDP_OTHER);
            c[24 + f] = ICMP;
            f += 1;
        }
        c
    };
    let flags_of = |port: u16| {
        let i = slot(port);
        // All ones when the slot holds this very port, else zero.
        let this_port = 0u8.wrapping_sub(u8::from(PORTS.0[i] == port));
        PORTS.1[i] & this_port
    };
    let flags = flags_of(key.sport()) | flags_of(key.dport());
    let kind = usize::from(KIND[usize::from(key.proto())]);
    CLASS[((kind << 3) | usize::from(flags)) & 31]
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
