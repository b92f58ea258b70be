//! Classes defined in a TOML file.
//!
//! ```toml
//! # Flows that match no rule get this class (default "other").
//! default = "other"
//!
//! [[class]]
//! name = "campus-web"
//! src = ["10.0.0.0/8", "192.0.2.7"]   # source address in a network, or the one host
//! proto = ["tcp"]               # names (tcp, udp, icmp, icmpv6, sctp, udplite) or numbers
//! ports = ["80", "443", "8000-8099"]   # either port in any range
//! alpha = 10.0                  # cost ratio for the selective-query stage (optional)
//!
//! [[class]]
//! name = "dns"
//! ports = [53]
//!
//! [[class]]
//! name = "uplink"
//! iface = ["eth0", "eth1"]      # captured on one of these interfaces
//! ```
//!
//! Within a rule every field given must match (AND); within a field any entry
//! may match (OR). Fields: `src`, `dst`, `addr` (either address), `proto`,
//! `ports` (either port), `sport`, `dport`, `iface`. Rules are tried in file
//! order and the first match wins; rules may share a name.
//!
//! An address entry is a network in CIDR form or one host's bare address.
//! A network with bits set past its prefix (`10.0.0.1/8`) is refused, as
//! `tcpdump` refuses `net 10.0.0.1/8`: it matches the whole `10.0.0.0/8`,
//! which is seldom what was meant when a host's address was typed.
//!
//! `iface` names the interface a packet was captured on: the `-i` name in
//! `flowsieve live`, the Interface Description Block's `if_name` in a pcapng
//! file. Where no name is known (classic pcap, a pcapng interface without
//! `if_name`) a rule with `iface` does not match. The class belongs to the
//! packet, so a flow seen on two interfaces can be counted in two classes,
//! as it would be by two separate monitors.

use super::ClassId;
use crate::dissect::FlowKey;
use ipnet::IpNet;
use serde::Deserialize;
use std::io::Read;
use std::net::IpAddr;
use std::path::Path;

/// The largest class config read, in bytes (a few hundred thousand rules).
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// The most classes a config may name, the default class included: class
/// ids are [`ClassId`] (16-bit).
pub const MAX_CLASSES: usize = 1 << 16;

/// Why a class config could not be used. Messages name the file.
#[derive(Debug, thiserror::Error)]
pub enum ClassConfigError {
    #[error("{path}: cannot read class config: {source}")]
    /// The file could not be read.
    Read {
        /// The config file.
        path: String,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    #[error("{path}: invalid class config: {message}")]
    /// The TOML is malformed.
    Parse {
        /// The config file.
        path: String,
        /// What was wrong.
        message: String,
    },
    #[error("{path}: class {class:?}: {message}")]
    /// A rule is invalid.
    Rule {
        /// The config file.
        path: String,
        /// The class id.
        class: String,
        /// What was wrong.
        message: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default = "default_class")]
    default: String,
    #[serde(default, rename = "class")]
    classes: Vec<RawRule>,
}

fn default_class() -> String {
    "other".into()
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ProtoSpec {
    // Wider than a protocol number, and a catch-all last, so that a value
    // out of range or of the wrong type is named in the message instead of
    // "did not match any variant of untagged enum".
    Number(i64),
    Name(String),
    Other(toml::Value),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum PortSpec {
    // As ProtoSpec: wide, with a catch-all, for messages that say why.
    Number(i64),
    Range(String),
    Other(toml::Value),
}

/// One address entry of a rule: a network whose host bits are clear, or
/// one host's bare address (a /32 or /128 network). Parsed here, not by
/// `ipnet`'s own `Deserialize`, which needs a prefix length and keeps host
/// bits. The check runs inside the entry's own visitor, so toml's error
/// names the entry's line and column, not its array's.
#[derive(Clone, Copy, Debug)]
struct NetSpec(IpNet);

impl<'de> Deserialize<'de> for NetSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<NetSpec, D::Error> {
        struct Entry;
        impl serde::de::Visitor<'_> for Entry {
            type Value = NetSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an address or a network, as a string")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<NetSpec, E> {
                net_spec(text).map(NetSpec).map_err(E::custom)
            }
        }
        d.deserialize_str(Entry)
    }
}

/// Parses one address entry (see [`NetSpec`]).
fn net_spec(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    if !text.contains('/') {
        return text
            .parse::<IpAddr>()
            .map(IpNet::from)
            .map_err(|e| e.to_string());
    }
    let net: IpNet = text
        .parse()
        .map_err(|e: ipnet::AddrParseError| e.to_string())?;
    if net.addr() != net.network() {
        return Err(format!(
            "host bits set past the /{} prefix: the network is {}, and {} is the one host",
            net.prefix_len(),
            net.trunc(),
            IpNet::from(net.addr()),
        ));
    }
    Ok(net)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: String,
    #[serde(default)]
    src: Vec<NetSpec>,
    #[serde(default)]
    dst: Vec<NetSpec>,
    #[serde(default)]
    addr: Vec<NetSpec>,
    #[serde(default)]
    proto: Vec<ProtoSpec>,
    #[serde(default)]
    ports: Vec<PortSpec>,
    #[serde(default)]
    sport: Vec<PortSpec>,
    #[serde(default)]
    dport: Vec<PortSpec>,
    #[serde(default)]
    iface: Vec<String>,
    alpha: Option<f64>,
}

/// One validated rule.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassRule {
    /// The class name.
    pub name: String,
    /// The class id.
    pub class: ClassId,
    /// Source address.
    pub src: Vec<IpNet>,
    /// Destination address.
    pub dst: Vec<IpNet>,
    /// Either address.
    pub addr: Vec<IpNet>,
    /// IP protocol.
    pub proto: Vec<u8>,
    /// Either port, as inclusive ranges.
    pub ports: Vec<(u16, u16)>,
    /// Source port.
    pub sport: Vec<(u16, u16)>,
    /// Destination port.
    pub dport: Vec<(u16, u16)>,
    /// Interface names the packet was captured on.
    pub iface: Vec<String>,
    /// Cost ratio of a false negative to a false positive for this class
    /// (the selective-query stage's alpha), if the file sets one.
    pub alpha: Option<f64>,
}

/// A parsed class config.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassConfig {
    source: String,
    names: Vec<String>,
    default: ClassId,
    rules: Vec<ClassRule>,
    /// Per class id, the alpha of its first rule that gives one.
    alphas: Vec<Option<f64>>,
}

/// The longest interface name Linux allows (`IFNAMSIZ` less the NUL) and
/// far past any pcapng `if_name` in practice.
const IFACE_NAME_MAX: usize = 255;

/// A TOML error's message on one line, after where it is: "line L, column
/// C: " and, when the span is a short part of one line, the text there
/// (`invalid IP address syntax: "10.0.0.0/33"`). toml's own rendering of
/// the place takes several lines, and its bare message named no place
/// and no value, so a file of many rules left the user to hunt for it.
fn located(text: &str, span: Option<std::ops::Range<usize>>, message: &str) -> String {
    let message = message.trim().replace('\n', " ");
    let Some(span) = span else {
        return message;
    };
    let Some(before) = text.get(..span.start) else {
        return message;
    };
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    let quoted = text
        .get(span)
        .map(str::trim)
        .filter(|t| !t.is_empty() && !t.contains('\n') && t.chars().count() <= 80)
        // Not twice: serde's messages quote some values themselves.
        .filter(|t| !message.contains(&format!("`{t}`")));
    match quoted {
        Some(t) => format!("line {line}, column {column}: {message}: {t}"),
        None => format!("line {line}, column {column}: {message}"),
    }
}

fn proto_number(p: &ProtoSpec) -> Result<u8, String> {
    match p {
        ProtoSpec::Number(n) => u8::try_from(*n)
            .map_err(|_| format!("protocol {n} is not an IP protocol number (0 to 255)")),
        ProtoSpec::Other(v) => Err(format!(
            "a protocol is a number (0 to 255) or a name such as \"tcp\", got {v}"
        )),
        ProtoSpec::Name(s) => match s.to_ascii_lowercase().as_str() {
            "icmp" => Ok(1),
            "tcp" => Ok(6),
            "udp" => Ok(17),
            "gre" => Ok(47),
            "esp" => Ok(50),
            "ah" => Ok(51),
            "icmpv6" => Ok(58),
            "sctp" => Ok(132),
            "udplite" => Ok(136),
            other => other
                .parse()
                .map_err(|_| format!("unknown protocol {other:?}")),
        },
    }
}

fn port_range(p: &PortSpec) -> Result<(u16, u16), String> {
    match p {
        PortSpec::Number(n) => u16::try_from(*n)
            .map(|p| (p, p))
            .map_err(|_| format!("port {n} is not a port number (0 to 65535)")),
        PortSpec::Other(v) => Err(format!(
            "a port is a number (0 to 65535) or a range such as \"1000-2000\", got {v}"
        )),
        PortSpec::Range(s) => {
            let parse = |t: &str| {
                t.trim()
                    .parse::<u16>()
                    .map_err(|_| format!("bad port {t:?} in {s:?}"))
            };
            let (lo, hi) = match s.split_once('-') {
                Some((a, b)) => (parse(a)?, parse(b)?),
                None => {
                    let p = parse(s)?;
                    (p, p)
                }
            };
            if lo > hi {
                return Err(format!("empty port range {s:?}"));
            }
            Ok((lo, hi))
        }
    }
}

/// Why a class name cannot head a report's row, if it cannot: an empty
/// name leaves a blank cell, and a control character (a newline, say)
/// breaks the text report's and the CSV's lines.
fn bad_name(name: &str) -> Option<String> {
    if name.is_empty() {
        Some("a class name must not be empty".into())
    } else if name.chars().any(char::is_control) {
        Some(format!("class name {name:?} has a control character"))
    } else {
        None
    }
}

fn in_any(nets: &[IpNet], addr: IpAddr) -> bool {
    nets.iter().any(|n| n.contains(&addr))
}

fn port_in(ranges: &[(u16, u16)], port: u16) -> bool {
    ranges.iter().any(|&(lo, hi)| lo <= port && port <= hi)
}

impl ClassConfig {
    /// Reads and validates a TOML class config.
    pub fn from_file(path: impl AsRef<Path>) -> Result<ClassConfig, ClassConfigError> {
        let p = path.as_ref().display().to_string();
        let read_err = |source| ClassConfigError::Read {
            path: p.clone(),
            source,
        };
        // Bounded: `--classes /dev/zero` (or any endless stream) must end in
        // an error, not read forever. One byte past the limit tells "too big"
        // from "exactly the limit".
        let file = std::fs::File::open(path.as_ref()).map_err(read_err)?;
        let mut bytes = Vec::new();
        file.take(MAX_CONFIG_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            return Err(ClassConfigError::Parse {
                path: p,
                message: format!("longer than the limit of {MAX_CONFIG_BYTES} bytes"),
            });
        }
        let text = String::from_utf8(bytes).map_err(|e| ClassConfigError::Parse {
            path: p.clone(),
            message: format!(
                "not UTF-8 text (byte offset {})",
                e.utf8_error().valid_up_to()
            ),
        })?;
        ClassConfig::parse(&p, &text)
    }

    /// Parses a TOML class config; `source` names it in messages.
    pub fn parse(source: &str, text: &str) -> Result<ClassConfig, ClassConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ClassConfigError::Parse {
            path: source.into(),
            message: located(text, e.span(), e.message()),
        })?;
        let mut names: Vec<String> = Vec::new();
        let mut ids: std::collections::HashMap<String, ClassId> = Default::default();
        // Class ids are 16-bit: past MAX_CLASSES names the file is refused,
        // never wrapped (class 65,536 must not be reported as class 0).
        let mut id_of = |name: &str| -> Result<ClassId, ClassConfigError> {
            if let Some(&id) = ids.get(name) {
                return Ok(id);
            }
            let id = ClassId::try_from(names.len())
                .ok()
                .filter(|_| names.len() < MAX_CLASSES)
                .ok_or_else(|| ClassConfigError::Parse {
                    path: source.into(),
                    message: format!(
                        "more than {MAX_CLASSES} classes (with the default class); class ids are 16-bit"
                    ),
                })?;
            names.push(name.to_string());
            ids.insert(name.to_string(), id);
            Ok(id)
        };
        let mut rules = Vec::new();
        for r in &raw.classes {
            let bad = |message: String| ClassConfigError::Rule {
                path: source.into(),
                class: r.name.clone(),
                message,
            };
            let ranges = |v: &[PortSpec]| v.iter().map(port_range).collect::<Result<Vec<_>, _>>();
            if let Some(why) = bad_name(&r.name) {
                return Err(bad(why));
            }
            rules.push(ClassRule {
                name: r.name.clone(),
                class: id_of(&r.name)?,
                src: r.src.iter().map(|n| n.0).collect(),
                dst: r.dst.iter().map(|n| n.0).collect(),
                addr: r.addr.iter().map(|n| n.0).collect(),
                proto: r
                    .proto
                    .iter()
                    .map(proto_number)
                    .collect::<Result<_, _>>()
                    .map_err(bad)?,
                ports: ranges(&r.ports).map_err(bad)?,
                sport: ranges(&r.sport).map_err(bad)?,
                dport: ranges(&r.dport).map_err(bad)?,
                iface: match r
                    .iface
                    .iter()
                    .find(|n| n.is_empty() || n.len() > IFACE_NAME_MAX)
                {
                    Some(n) => {
                        return Err(bad(format!(
                            "interface name {n:?} must be 1 to {IFACE_NAME_MAX} bytes"
                        )));
                    }
                    None => r.iface.clone(),
                },
                alpha: match r.alpha {
                    Some(a) if !(a.is_finite() && a > 0.0) => {
                        return Err(bad(format!(
                            "alpha must be a positive finite number, got {}",
                            crate::model::query::shown(a)
                        )));
                    }
                    a => a,
                },
            });
        }
        if let Some(why) = bad_name(&raw.default) {
            return Err(ClassConfigError::Parse {
                path: source.into(),
                message: format!("default class: {why}"),
            });
        }
        let default = id_of(&raw.default)?;
        // Each class's alpha: its first rule that gives one. Kept per class
        // so that a lookup is O(1), not a scan of the rules (65,536 classes
        // times as many rules took seconds).
        let mut alphas = vec![None; names.len()];
        for r in &rules {
            if let Some(slot) = alphas.get_mut(usize::from(r.class))
                && slot.is_none()
            {
                *slot = r.alpha;
            }
        }
        Ok(ClassConfig {
            source: source.into(),
            names,
            default,
            rules,
            alphas,
        })
    }

    /// Where the config came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The rules in match order.
    pub fn rules(&self) -> &[ClassRule] {
        &self.rules
    }

    /// The class of flows no rule matches.
    pub fn default_class(&self) -> ClassId {
        self.default
    }

    /// The `alpha` the file sets for a class (the first rule of that class
    /// that sets one).
    pub fn class_alpha(&self, class: ClassId) -> Option<f64> {
        self.alphas.get(usize::from(class)).copied().flatten()
    }

    pub(super) fn class_names(&self) -> Vec<String> {
        self.names.clone()
    }

    /// Whether any rule matches on the interface.
    pub fn uses_interfaces(&self) -> bool {
        self.rules.iter().any(|r| !r.iface.is_empty())
    }

    /// First matching rule's class, else the default. `iface` is the name
    /// of the interface the packet was captured on, where known.
    pub fn classify(&self, key: &FlowKey, iface: Option<&str>) -> ClassId {
        let (src, dst) = (key.src(), key.dst());
        self.rules
            .iter()
            .find(|r| {
                (r.src.is_empty() || in_any(&r.src, src))
                    && (r.dst.is_empty() || in_any(&r.dst, dst))
                    && (r.addr.is_empty() || in_any(&r.addr, src) || in_any(&r.addr, dst))
                    && (r.proto.is_empty() || r.proto.contains(&key.proto()))
                    && (r.ports.is_empty()
                        || port_in(&r.ports, key.sport())
                        || port_in(&r.ports, key.dport()))
                    && (r.sport.is_empty() || port_in(&r.sport, key.sport()))
                    && (r.dport.is_empty() || port_in(&r.dport, key.dport()))
                    && (r.iface.is_empty() || iface.is_some_and(|i| r.iface.iter().any(|n| n == i)))
            })
            .map_or(self.default, |r| r.class)
    }
}
