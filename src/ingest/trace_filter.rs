//! Trace filters: `replay -f EXPR` keeps the records that `tcpdump -r FILE
//! EXPR` keeps, and the run is then the run over those records alone.
//!
//! The expression is tcpdump's language, compiled by libpcap's own
//! compiler for each link type as its first record comes (a pcapng file
//! may hold several), and run by libpcap's own interpreter
//! (`pcap_offline_filter`), so the two tools never disagree on a record.
//! See [`crate::ingest::libpcap`] for how libpcap is loaded.

use super::LinkType;
use super::libpcap::{BpfInsn, DLT_RAW, Libpcap};
use std::ffi::c_int;
use std::fmt;

/// The snap length the programs are compiled for. It only sets the number
/// the program returns for a kept record (the bytes tcpdump would keep),
/// never whether a record is kept.
const COMPILE_SNAPLEN: u32 = 262_144;

/// The link types flowsieve dissects, tried in this order when the
/// expression is checked before a run: an expression that compiles for
/// none of them could keep no packet flowsieve can key.
const DISSECTED: [LinkType; 11] = [
    LinkType::ETHERNET,
    LinkType::RAW,
    LinkType::LINUX_SLL,
    LinkType::LINUX_SLL2,
    LinkType::NULL,
    LinkType::LOOP,
    LinkType::PPP,
    LinkType::PPP_HDLC,
    LinkType::C_HDLC,
    LinkType::IPV4,
    LinkType::IPV6,
];

/// Why a trace filter cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceFilterError {
    /// libpcap could not be loaded.
    #[error("{0}")]
    NoCompiler(String),
    /// The expression compiles for no link type flowsieve reads (the
    /// message is libpcap's, for Ethernet).
    #[error("filter {expression:?}: {message}")]
    Invalid {
        /// The expression.
        expression: String,
        /// libpcap's message.
        message: String,
    },
}

/// A compiled `tcpdump` filter expression, with one program per link type.
///
/// ```no_run
/// use flowsieve::ingest::{LinkType, TraceFilter};
/// // Needs libpcap (Debian: apt-get install libpcap0.8).
/// let mut f = TraceFilter::new("udp port 53").unwrap();
/// let frame = [0u8; 14]; // an Ethernet header and nothing else
/// assert_eq!(f.keeps(LinkType::ETHERNET, &frame, 14), Ok(false));
/// assert!(TraceFilter::new("udp prot 53").is_err());
/// ```
#[derive(Clone)]
pub struct TraceFilter {
    expression: String,
    lib: &'static Libpcap,
    /// The programs made so far: per link type, its program or why it
    /// has none (the compiler's message).
    programs: Vec<(LinkType, Result<Vec<BpfInsn>, String>)>,
    /// Where the last record's link type is in `programs`: a file's
    /// records almost always share one.
    last: usize,
}

impl fmt::Debug for TraceFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceFilter")
            .field("expression", &self.expression)
            .field(
                "link_types",
                &self.programs.iter().map(|(lt, _)| lt.0).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// libpcap's `DLT_*` value for a file's `LINKTYPE_*` value (its
/// `linktype_to_dlt`, for the values where the two differ on Linux; the
/// BSD raw-IP values 12 and 14 are the raw IP that flowsieve reads them
/// as).
fn dlt_of(link_type: LinkType) -> c_int {
    match link_type.0 {
        12 | 14 | 101 => DLT_RAW,
        100 => 11,
        102 => 15,
        103 => 16,
        other => c_int::from(other),
    }
}

impl TraceFilter {
    /// Loads libpcap and checks `expression`: it must compile for at least
    /// one link type flowsieve dissects (Ethernet, raw IP, Linux cooked,
    /// loopback, PPP, HDLC). Other link types get their programs as their
    /// records come.
    pub fn new(expression: &str) -> Result<TraceFilter, TraceFilterError> {
        let lib = Libpcap::get().map_err(TraceFilterError::NoCompiler)?;
        let mut filter = TraceFilter {
            expression: expression.to_string(),
            lib,
            programs: Vec::new(),
            last: 0,
        };
        for lt in DISSECTED {
            let at = filter.program(lt);
            if filter.programs[at].1.is_ok() {
                return Ok(filter);
            }
        }
        let message = match filter.programs.first() {
            Some((_, Err(m))) => m.clone(),
            _ => "it compiles for no link type".into(),
        };
        Err(TraceFilterError::Invalid {
            expression: expression.to_string(),
            message,
        })
    }

    /// The expression as given.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// Where `link_type`'s program (or why it has none) is in `programs`,
    /// compiled on first use.
    fn program(&mut self, link_type: LinkType) -> usize {
        let at = match self.programs.get(self.last) {
            Some((lt, _)) if *lt == link_type => self.last,
            _ => match self.programs.iter().position(|(lt, _)| *lt == link_type) {
                Some(i) => i,
                None => {
                    let compiled = self.lib.compile_for_dlt(
                        &self.expression,
                        dlt_of(link_type),
                        COMPILE_SNAPLEN,
                    );
                    self.programs.push((link_type, compiled));
                    self.programs.len() - 1
                }
            },
        };
        self.last = at;
        at
    }

    /// Whether `tcpdump` would keep the record: `data` as captured,
    /// `wire_len` its length on the wire. The error, when the expression
    /// cannot be compiled for `link_type` (as `tcpdump -r` refuses such a
    /// file), names the expression and the link type, and ends with the
    /// compiler's message.
    pub fn keeps(
        &mut self,
        link_type: LinkType,
        data: &[u8],
        wire_len: u32,
    ) -> Result<bool, String> {
        let at = self.program(link_type);
        match &self.programs[at].1 {
            Ok(p) => Ok(self.lib.matches(p, data, wire_len)),
            Err(m) => Err(format!(
                "filter {:?} cannot be compiled for link type {link_type}: {m}",
                self.expression
            )),
        }
    }
}
