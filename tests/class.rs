//! Flow classes: the built-in classifiers and TOML configs.

use flowsieve::class::{ClassConfig, ClassConfigError, Classifier};
use flowsieve::dissect::FlowKey;

fn name(c: &Classifier, k: &FlowKey) -> String {
    c.name(c.classify(k)).to_string()
}

#[test]
fn ports_classes() {
    let c = Classifier::ports();
    let v4 = |sport, dport, proto| FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], sport, dport, proto);
    assert_eq!(name(&c, &v4(51000, 443, 6)), "web");
    assert_eq!(name(&c, &v4(8080, 51000, 6)), "web", "either port");
    assert_eq!(name(&c, &v4(51000, 443, 17)), "web", "QUIC");
    assert_eq!(
        name(&c, &v4(51000, 80, 17)),
        "udp-other",
        "UDP 80 is not web"
    );
    assert_eq!(name(&c, &v4(53, 40000, 17)), "dns");
    assert_eq!(name(&c, &v4(40000, 53, 6)), "dns");
    assert_eq!(name(&c, &v4(1, 2, 6)), "tcp-other");
    assert_eq!(name(&c, &v4(1, 2, 17)), "udp-other");
    assert_eq!(name(&c, &v4(0, 0, 1)), "icmp");
    assert_eq!(name(&c, &FlowKey::v6([0; 16], [0; 16], 0, 0, 58)), "icmp");
    assert_eq!(name(&c, &v4(0, 0, 47)), "other");
    assert_eq!(c.names().len(), 6);
}

/// The `ports` rule as the module documents it, in the order it is
/// written: the reference the classifier is checked against.
fn documented_ports_rule(proto: u8, sport: u16, dport: u16) -> &'static str {
    let either = |p: u16| sport == p || dport == p;
    let tcp_web = proto == 6 && (either(80) || either(443) || either(8080));
    let quic = proto == 17 && either(443);
    if tcp_web || quic {
        "web"
    } else if (proto == 6 || proto == 17) && either(53) {
        "dns"
    } else if proto == 6 {
        "tcp-other"
    } else if proto == 17 {
        "udp-other"
    } else if proto == 1 || proto == 58 {
        "icmp"
    } else {
        "other"
    }
}

/// Every protocol number, with every pair of ports the rule names, their
/// neighbours and the ends of the range, on both IP versions: the
/// classifier (a table indexed by flags, with no branches) gives what the
/// documented rule gives, in its order (web before dns before the
/// protocol's class).
#[test]
fn ports_classes_follow_the_documented_rule_for_every_protocol() {
    let c = Classifier::ports();
    let ports = [0u16, 52, 53, 54, 79, 80, 443, 444, 8080, 8081, 65535];
    let mut checked = 0;
    for proto in 0..=u8::MAX {
        for &sport in &ports {
            for &dport in &ports {
                let want = documented_ports_rule(proto, sport, dport);
                let v4 = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], sport, dport, proto);
                let v6 = FlowKey::v6([1; 16], [2; 16], sport, dport, proto);
                assert_eq!(
                    name(&c, &v4),
                    want,
                    "v4 proto {proto} ports {sport} {dport}"
                );
                assert_eq!(
                    name(&c, &v6),
                    want,
                    "v6 proto {proto} ports {sport} {dport}"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 256 * 11 * 11);
}

/// Every port number, on either side, for the protocols the rule names and
/// one it does not: only the named ports change a class. (The classifier
/// finds a port's flags in a 16-slot table by a few of its bits, so most
/// ports share a slot with a named port and must still get nothing.)
#[test]
fn ports_classes_follow_the_documented_rule_for_every_port() {
    let c = Classifier::ports();
    let other_side = 40_000;
    for proto in [1u8, 6, 17, 58, 47] {
        for port in 0..=u16::MAX {
            for (sport, dport) in [(port, other_side), (other_side, port)] {
                let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], sport, dport, proto);
                assert_eq!(
                    name(&c, &k),
                    documented_ports_rule(proto, sport, dport),
                    "proto {proto} ports {sport} {dport}"
                );
            }
        }
    }
}

#[test]
fn ipclass_boundaries() {
    let c = Classifier::ipclass();
    for (first, class) in [
        (0u8, "A"),
        (127, "A"),
        (128, "B"),
        (191, "B"),
        (192, "C"),
        (223, "C"),
        (224, "D"),
        (239, "D"),
        (240, "E"),
        (255, "E"),
    ] {
        assert_eq!(
            name(&c, &FlowKey::v4([first, 1, 2, 3], [1, 1, 1, 1], 0, 0, 6)),
            class,
            "{first}.x"
        );
    }
    assert_eq!(name(&c, &FlowKey::v6([0x20; 16], [0; 16], 0, 0, 6)), "ipv6");
}

const CONFIG: &str = r#"
default = "rest"

[[class]]
name = "campus-web"
src = ["10.0.0.0/8"]
proto = ["tcp"]
ports = ["80", "443", "8000-8099"]
alpha = 10.0

[[class]]
name = "dns"
ports = [53]

[[class]]
name = "v6-server"
dst = ["2001:db8::/32"]
dport = ["1-1023"]

[[class]]
name = "campus-web"
addr = ["192.168.0.0/16"]
proto = [6]
"#;

#[test]
fn config_rules_match_in_order() {
    let cfg = ClassConfig::parse("test.toml", CONFIG).unwrap();
    assert_eq!(cfg.rules()[0].alpha, Some(10.0));
    let c = Classifier::from_config(cfg);
    assert_eq!(c.names(), ["campus-web", "dns", "v6-server", "rest"]);
    let k = |s: [u8; 4], d: [u8; 4], sp, dp, p| FlowKey::v4(s, d, sp, dp, p);
    assert_eq!(
        name(&c, &k([10, 1, 2, 3], [8, 8, 8, 8], 40000, 8050, 6)),
        "campus-web"
    );
    assert_eq!(
        name(&c, &k([10, 1, 2, 3], [8, 8, 8, 8], 40000, 8100, 6)),
        "rest",
        "outside the range"
    );
    assert_eq!(
        name(&c, &k([10, 1, 2, 3], [8, 8, 8, 8], 40000, 443, 17)),
        "rest",
        "UDP"
    );
    assert_eq!(
        name(&c, &k([10, 1, 2, 3], [8, 8, 8, 8], 40000, 53, 6)),
        "dns",
        "rule order: campus-web needs 80/443/8000-8099"
    );
    assert_eq!(
        name(&c, &k([8, 8, 8, 8], [192, 168, 4, 4], 9, 9, 6)),
        "campus-web",
        "second rule of the same class, either address"
    );
    let mut d = [0u8; 16];
    d[..4].copy_from_slice(&[0x20, 1, 0xd, 0xb8]);
    assert_eq!(
        name(&c, &FlowKey::v6([0x30; 16], d, 50000, 22, 6)),
        "v6-server"
    );
    assert_eq!(
        name(&c, &FlowKey::v6([0x30; 16], d, 22, 50000, 6)),
        "rest",
        "dport only"
    );
}

/// A bare address is the one host; a network with bits set past its
/// prefix is refused with the network and the host it could have meant, as
/// `tcpdump` refuses `net 10.0.0.1/8` (it was taken as the whole /8).
#[test]
fn address_entries_are_hosts_or_networks_without_host_bits() {
    let cfg = ClassConfig::parse(
        "h.toml",
        "[[class]]\nname = \"host\"\nsrc = [\"10.0.0.1\", \" 2001:db8::7 \"]\n\n\
         [[class]]\nname = \"net\"\ndst = [\"10.0.0.0/8\"]\n",
    )
    .unwrap();
    let c = Classifier::from_config(cfg);
    let v4 = |s: [u8; 4], d: [u8; 4]| FlowKey::v4(s, d, 1, 2, 6);
    assert_eq!(name(&c, &v4([10, 0, 0, 1], [1, 1, 1, 1])), "host");
    assert_eq!(name(&c, &v4([10, 0, 0, 2], [1, 1, 1, 1])), "other");
    assert_eq!(name(&c, &v4([10, 0, 0, 2], [10, 9, 9, 9])), "net");
    let mut host = [0u8; 16];
    host[..4].copy_from_slice(&[0x20, 1, 0xd, 0xb8]);
    host[15] = 7;
    let mut next = host;
    next[15] = 8;
    assert_eq!(name(&c, &FlowKey::v6(host, [0; 16], 1, 2, 6)), "host");
    assert_eq!(name(&c, &FlowKey::v6(next, [0; 16], 1, 2, 6)), "other");

    let refused = |entry: &str| {
        ClassConfig::parse(
            "h.toml",
            &format!("[[class]]\nname = \"a\"\naddr = [\"10.0.0.0/8\", \"{entry}\"]\n"),
        )
        .unwrap_err()
        .to_string()
    };
    assert_eq!(
        refused("10.0.0.1/8"),
        "h.toml: invalid class config: line 3, column 23: host bits set past the /8 prefix: \
         the network is 10.0.0.0/8, and 10.0.0.1/32 is the one host: \"10.0.0.1/8\""
    );
    assert_eq!(
        refused("fe80::1/10"),
        "h.toml: invalid class config: line 3, column 23: host bits set past the /10 prefix: \
         the network is fe80::/10, and fe80::1/128 is the one host: \"fe80::1/10\""
    );
    assert_eq!(
        refused("10.0.0.256"),
        "h.toml: invalid class config: line 3, column 23: invalid IP address syntax: \"10.0.0.256\""
    );
    // A /0 with any address set and a full-length prefix: the edges.
    assert!(refused("1.2.3.4/0").contains("the network is 0.0.0.0/0"));
    assert!(
        ClassConfig::parse(
            "h.toml",
            "[[class]]\nname = \"a\"\nsrc = [\"1.2.3.4/32\", \"0.0.0.0/0\"]\n"
        )
        .is_ok()
    );
}

#[test]
fn config_errors_name_the_file_and_class() {
    let e =
        ClassConfig::parse("x.toml", "[[class]]\nname = \"a\"\nports = [\"90-80\"]\n").unwrap_err();
    assert!(matches!(e, ClassConfigError::Rule { .. }));
    assert_eq!(
        e.to_string(),
        "x.toml: class \"a\": empty port range \"90-80\""
    );
    // TOML and serde errors say where (line and column, in characters),
    // and what is there unless the message quotes it already: the bare
    // message named neither, and in a file of many rules a bad address
    // had to be hunted for.
    let e = ClassConfig::parse("x.toml", "[[class]]\nname = \"a\"\nprto = [6]\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "x.toml: invalid class config: line 3, column 1: unknown field `prto`, expected one of `name`, `src`, `dst`, `addr`, `proto`, `ports`, `sport`, `dport`, `iface`, `alpha`"
    );
    let e = ClassConfig::parse(
        "x.toml",
        "[[class]]\nname = \"a\"\nsrc = [\"10.0.0.0/8\", \"10.0.0.0/33\"]\n",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "x.toml: invalid class config: line 3, column 22: invalid IP address syntax: \"10.0.0.0/33\""
    );
    let e = ClassConfig::parse("x.toml", "# é\n[[class]]\nname = \"é\" \"\n").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("x.toml: invalid class config: line 3, column 12: "),
        "columns count characters: {e}"
    );
    let e = ClassConfig::parse("x.toml", "[[class]]\nsrc = [\"10.0.0.0/8\"]\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "x.toml: invalid class config: line 1, column 1: missing field `name`: [[class]]"
    );
    let e =
        ClassConfig::parse("x.toml", "[[class]]\nname = \"a\"\nproto = [\"tcpp\"]\n").unwrap_err();
    assert!(e.to_string().contains("unknown protocol"), "{e}");
    let e = ClassConfig::parse("x.toml", "[[class]]\nname = \"a\"\nalpha = -1.0\n").unwrap_err();
    assert!(
        e.to_string()
            .contains("alpha must be a positive finite number, got -1"),
        "{e}"
    );
    // A tiny value is shown as typed, not as 300 zeros.
    let e = ClassConfig::parse("x.toml", "[[class]]\nname = \"a\"\nalpha = -1e-300\n").unwrap_err();
    assert!(e.to_string().ends_with("got -1e-300"), "{e}");
    let e = ClassConfig::parse("x.toml", "[[class]]\nname = \"a\"\nalpha = inf\n").unwrap_err();
    assert!(e.to_string().ends_with("finite number, got inf"), "{e}");
    let e = Classifier::from_spec("/nonexistent/classes.toml").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("/nonexistent/classes.toml: cannot read class config"),
        "{e}"
    );
}

/// A value out of range or of the wrong type is named, with the class, in
/// the one-line error (serde's untagged enums used to say only "data did not
/// match any variant"); a name that would break a report's rows is refused.
/// The values at the ends of the ranges are accepted.
#[test]
fn config_errors_say_what_is_wrong_with_the_value() {
    for (rule, want) in [
        (
            "dport = [70000]",
            "x.toml: class \"a\": port 70000 is not a port number (0 to 65535)",
        ),
        (
            "ports = [-1]",
            "x.toml: class \"a\": port -1 is not a port number (0 to 65535)",
        ),
        (
            "sport = [1.5]",
            "x.toml: class \"a\": a port is a number (0 to 65535) or a range such as \"1000-2000\", got 1.5",
        ),
        (
            "proto = [256]",
            "x.toml: class \"a\": protocol 256 is not an IP protocol number (0 to 255)",
        ),
        (
            "proto = [true]",
            "x.toml: class \"a\": a protocol is a number (0 to 255) or a name such as \"tcp\", got true",
        ),
    ] {
        let e = ClassConfig::parse("x.toml", &format!("[[class]]\nname = \"a\"\n{rule}\n"))
            .unwrap_err();
        assert_eq!(e.to_string(), want, "{rule}");
    }
    for (text, want) in [
        (
            "[[class]]\nname = \"\"\n",
            "x.toml: class \"\": a class name must not be empty",
        ),
        (
            "[[class]]\nname = \"web\\nsite\"\n",
            "x.toml: class \"web\\nsite\": class name \"web\\nsite\" has a control character",
        ),
        (
            "default = \"\"\n",
            "x.toml: invalid class config: default class: a class name must not be empty",
        ),
    ] {
        let e = ClassConfig::parse("x.toml", text).unwrap_err();
        assert_eq!(e.to_string(), want, "{text}");
    }
    let c = ClassConfig::parse(
        "x.toml",
        "[[class]]\nname = \"edge\"\nproto = [0, 255, \"udp\"]\nports = [0, 65535, \"1000-2000\"]\n",
    )
    .unwrap();
    let r = &c.rules()[0];
    assert_eq!(r.proto, [0, 255, 17]);
    assert_eq!(r.ports, [(0, 0), (65535, 65535), (1000, 2000)]);
}

#[test]
fn iface_rules_match_only_a_named_interface() {
    let cfg = ClassConfig::parse(
        "x.toml",
        "[[class]]\nname = \"up-dns\"\niface = [\"eth0\", \"eth1\"]\nports = [53]\n\
         [[class]]\nname = \"dns\"\nports = [53]\n",
    )
    .unwrap();
    assert!(cfg.uses_interfaces());
    let c = Classifier::from_config(cfg);
    assert!(c.uses_interfaces());
    assert!(!Classifier::ports().uses_interfaces());
    let dns = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 5353, 53, 17);
    let on = |i: Option<&str>| c.name(c.classify_on(&dns, i)).to_string();
    assert_eq!(on(Some("eth0")), "up-dns");
    assert_eq!(on(Some("eth1")), "up-dns");
    assert_eq!(on(Some("eth2")), "dns", "another interface falls through");
    assert_eq!(
        on(Some("ETH0")),
        "dns",
        "names are case-sensitive, as in Linux"
    );
    assert_eq!(
        on(None),
        "dns",
        "no interface name: the iface rule cannot match"
    );
    // Both fields must hold: the interface alone is not enough.
    let web = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 5353, 80, 6);
    assert_eq!(c.name(c.classify_on(&web, Some("eth0"))), "other");
    let e = ClassConfig::parse("x.toml", "[[class]]\nname = \"a\"\niface = [\"\"]\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "x.toml: class \"a\": interface name \"\" must be 1 to 255 bytes"
    );
}
