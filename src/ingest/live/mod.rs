//! Live capture on Linux: AF_PACKET sockets with TPACKET_V3 block rings,
//! capture filters, VLAN tag restoration, device counters, and the frame
//! injector used to test it all on a veth pair.
//!
//! This module is the capture layer only; [`crate::live`] turns it into a
//! pipeline source.

mod error;
mod filter;
mod iface;
mod inject;
mod ring;
mod vlan;

pub use error::LiveError;
pub use filter::SocketFilter;
pub use iface::{DeviceCounters, Interface};
pub use inject::{InjectError, InjectSummary, Injector, Pace};
pub use ring::{
    PacketRing, RingFrame, RingGeometry, RingOptions, RingStats, MAX_BLOCK_BYTES, MIN_BLOCK_BYTES,
};
pub use vlan::{restore_vlan_tag, TAG_BYTES};
