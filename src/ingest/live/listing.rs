//! The interfaces a capture could name, as `tcpdump -D` lists them.

use super::error::LiveError;
use super::iface::{Interface, device_flags};
use crate::ingest::LinkType;
use std::fmt;

/// One interface of the process's network namespace: its index and name
/// (`if_nameindex(3)`), its state, and whether flowsieve can capture on it.
///
/// ```
/// use flowsieve::ingest::live::InterfaceListing;
/// use flowsieve::ingest::LinkType;
/// let l = InterfaceListing {
///     index: 2,
///     name: "eth0".into(),
///     up: true,
///     running: true,
///     loopback: false,
///     capture: Ok(LinkType::ETHERNET),
/// };
/// assert_eq!(l.to_string(), "2.eth0 [Up, Running] ethernet");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceListing {
    /// The interface index.
    pub index: u32,
    /// The name.
    pub name: String,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Up with a carrier (`IFF_RUNNING`).
    pub running: bool,
    /// A loopback device (`IFF_LOOPBACK`).
    pub loopback: bool,
    /// The link type its frames have in a capture, or why flowsieve cannot
    /// capture on it.
    pub capture: Result<LinkType, String>,
}

impl InterfaceListing {
    /// Every interface of the process's network namespace, by index.
    pub fn all() -> Vec<InterfaceListing> {
        let mut out = Vec::new();
        // SAFETY: if_nameindex returns an array ended by an entry with
        // index 0 and a null name (or null on failure), each name a valid
        // C string, all freed together by if_freenameindex once read.
        unsafe {
            let list = libc::if_nameindex();
            if list.is_null() {
                return out;
            }
            let mut at = list;
            while (*at).if_index != 0 && !(*at).if_name.is_null() {
                let name = std::ffi::CStr::from_ptr((*at).if_name)
                    .to_string_lossy()
                    .into_owned();
                out.push(InterfaceListing::of((*at).if_index, name));
                at = at.add(1);
            }
            libc::if_freenameindex(list);
        }
        out.sort_by_key(|l| l.index);
        out
    }

    fn of(index: u32, name: String) -> InterfaceListing {
        let flags = device_flags(&name).unwrap_or(0);
        let capture = match Interface::by_name(&name) {
            Ok(i) => Ok(i.link_type),
            Err(LiveError::UnsupportedLink { arphrd, .. }) => {
                Err(format!("link type ARPHRD {arphrd}: not captured"))
            }
            Err(e) => Err(e.to_string()),
        };
        InterfaceListing {
            index,
            name,
            up: flags & libc::IFF_UP != 0,
            running: flags & libc::IFF_RUNNING != 0,
            loopback: flags & libc::IFF_LOOPBACK != 0,
            capture,
        }
    }
}

impl fmt::Display for InterfaceListing {
    /// `INDEX.NAME [STATE] LINK`, as `tcpdump -D` writes its lines: the
    /// state `Up`, `Running` and `Loopback` as they hold, and the link
    /// type a capture's frames have (`ethernet`, `raw`), or why there is
    /// none.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state: Vec<&str> = [
            (self.up, "Up"),
            (self.running, "Running"),
            (self.loopback, "Loopback"),
        ]
        .into_iter()
        .filter_map(|(on, word)| on.then_some(word))
        .collect();
        write!(f, "{}.{}", self.index, self.name)?;
        if !state.is_empty() {
            write!(f, " [{}]", state.join(", "))?;
        }
        match &self.capture {
            Ok(lt) => write!(f, " {}", lt.name()),
            Err(why) => write!(f, " ({why})"),
        }
    }
}
