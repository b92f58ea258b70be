//! Live capture on Linux: AF_PACKET sockets with TPACKET_V3 block rings,
//! capture filters, VLAN tag restoration, device counters, and the frame
//! injector used to test it all on a veth pair.
//!
//! This module is the capture layer only; [`crate::live`] turns it into a
//! pipeline source.

/// A struct of `u64` counters with `since` (growth, saturating at zero
/// when a counter went back) and `+=` (summing over interfaces or sockets),
/// so each counter set names its fields once.
macro_rules! counter_set {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$fmeta:meta])* pub $field:ident,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: u64,)*
        }

        impl $name {
            /// The growth from `earlier` (zero for a counter that went
            /// back, as a reset one does).
            pub fn since(&self, earlier: &$name) -> $name {
                $name { $($field: self.$field.saturating_sub(earlier.$field),)* }
            }
        }

        impl std::ops::AddAssign for $name {
            fn add_assign(&mut self, other: $name) {
                $(self.$field += other.$field;)*
            }
        }
    };
}
pub(crate) use counter_set;

mod error;
mod filter;
mod iface;
mod inject;
mod link_info;
mod listing;
mod ring;
mod vlan;

pub use error::LiveError;
pub use filter::SocketFilter;
pub use iface::{DeviceCounters, Interface, check_interface_name};
pub use inject::{InjectError, InjectProgress, InjectSummary, Injector, Pace};
pub use link_info::{LinkInfo, LinkStats};
pub use listing::InterfaceListing;
pub use ring::{
    MAX_BLOCK_BYTES, MIN_BLOCK_BYTES, PacketRing, RingFrame, RingGeometry, RingOptions, RingStats,
    walk_block,
};
pub use vlan::{TAG_BYTES, restore_vlan_tag};
