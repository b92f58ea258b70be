//! Capture filters: tcpdump's expression language compiled to classic BPF
//! and attached to the socket (`SO_ATTACH_FILTER`), so rejected frames
//! never reach user space.
//!
//! The compiler is libpcap's own (`pcap_compile`), loaded at run time with
//! `dlopen`: flowsieve builds and runs without libpcap, and only `-f`
//! needs it (Debian: `apt-get install libpcap0.8`). It compiles against a
//! handle opened on the capture interface itself, so the program uses the
//! kernel's VLAN ancillary fields where the kernel strips tags, as
//! tcpdump's does; a program compiled for plain Ethernet would test a tag
//! the kernel already removed.
//!
//! Without an expression the socket still gets a one-instruction program
//! that accepts every frame at the snap length, so the kernel copies no
//! more than `-s` bytes of any frame into the ring.

use super::error::LiveError;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// `BPF_RET | BPF_K`: return a constant.
const BPF_RET_K: u16 = 0x06;

/// A classic BPF program for a packet socket.
#[derive(Clone, Debug)]
pub struct SocketFilter {
    program: Vec<libc::sock_filter>,
}

/// `struct bpf_program` of libpcap.
#[repr(C)]
struct BpfProgram {
    len: c_uint,
    insns: *mut libc::sock_filter,
}

type PcapCreate = unsafe extern "C" fn(*const c_char, *mut c_char) -> *mut c_void;
type PcapOpenDead = unsafe extern "C" fn(c_int, c_int) -> *mut c_void;
type PcapSetInt = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
type PcapActivate = unsafe extern "C" fn(*mut c_void) -> c_int;
type PcapCompile =
    unsafe extern "C" fn(*mut c_void, *mut BpfProgram, *const c_char, c_int, c_uint) -> c_int;
type PcapGetErr = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type PcapFreeCode = unsafe extern "C" fn(*mut BpfProgram);
type PcapClose = unsafe extern "C" fn(*mut c_void);

/// The libpcap functions the compiler needs.
struct Libpcap {
    create: PcapCreate,
    open_dead: PcapOpenDead,
    set_snaplen: PcapSetInt,
    activate: PcapActivate,
    compile: PcapCompile,
    geterr: PcapGetErr,
    freecode: PcapFreeCode,
    close: PcapClose,
}

const LIBPCAP_NAMES: [&str; 3] = ["libpcap.so.1", "libpcap.so.0.8", "libpcap.so"];

impl Libpcap {
    fn load() -> Result<Libpcap, String> {
        let handle = LIBPCAP_NAMES
            .iter()
            .find_map(|name| {
                let c = CString::new(*name).ok()?;
                // SAFETY: dlopen with a valid NUL-terminated name; the
                // handle is never closed, so the symbols stay valid.
                let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
                (!h.is_null()).then_some(h)
            })
            .ok_or_else(|| {
                "-f needs libpcap's filter compiler, and no libpcap.so.1 or libpcap.so.0.8 was found (Debian: apt-get install libpcap0.8)".to_string()
            })?;
        let sym = |name: &str| -> Result<*mut c_void, String> {
            let c = CString::new(name).map_err(|e| e.to_string())?;
            // SAFETY: valid handle and NUL-terminated symbol name.
            let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
            if p.is_null() {
                Err(format!("libpcap has no {name}"))
            } else {
                Ok(p)
            }
        };
        // SAFETY: each symbol is libpcap's public function of that name,
        // whose C signature the function pointer type repeats.
        unsafe {
            Ok(Libpcap {
                create: std::mem::transmute::<*mut c_void, PcapCreate>(sym("pcap_create")?),
                open_dead: std::mem::transmute::<*mut c_void, PcapOpenDead>(sym("pcap_open_dead")?),
                set_snaplen: std::mem::transmute::<*mut c_void, PcapSetInt>(sym(
                    "pcap_set_snaplen",
                )?),
                activate: std::mem::transmute::<*mut c_void, PcapActivate>(sym("pcap_activate")?),
                compile: std::mem::transmute::<*mut c_void, PcapCompile>(sym("pcap_compile")?),
                geterr: std::mem::transmute::<*mut c_void, PcapGetErr>(sym("pcap_geterr")?),
                freecode: std::mem::transmute::<*mut c_void, PcapFreeCode>(sym("pcap_freecode")?),
                close: std::mem::transmute::<*mut c_void, PcapClose>(sym("pcap_close")?),
            })
        }
    }
}

/// `DLT_EN10MB`.
const DLT_EN10MB: c_int = 1;
/// `DLT_RAW`.
const DLT_RAW: c_int = 12;

impl SocketFilter {
    /// Accept every frame, cut at `snaplen` bytes.
    pub fn accept_all(snaplen: u32) -> SocketFilter {
        SocketFilter {
            program: vec![libc::sock_filter {
                code: BPF_RET_K,
                jt: 0,
                jf: 0,
                k: snaplen,
            }],
        }
    }

    /// Compiles `expression` for frames of `iface` (a live handle on it,
    /// or, when that cannot be opened, a dead handle of `link_type`'s DLT).
    /// The error is the compiler's own message.
    pub fn compile(
        expression: &str,
        iface: &str,
        raw_ip: bool,
        snaplen: u32,
    ) -> Result<SocketFilter, LiveError> {
        let lib = Libpcap::load().map_err(LiveError::NoFilterCompiler)?;
        Self::compile_with(&lib, expression, iface, raw_ip, snaplen).map_err(LiveError::Filter)
    }

    fn compile_with(
        lib: &Libpcap,
        expression: &str,
        iface: &str,
        raw_ip: bool,
        snaplen: u32,
    ) -> Result<SocketFilter, String> {
        let expr = CString::new(expression)
            .map_err(|_| "the expression contains a NUL byte".to_string())?;
        let snap = c_int::try_from(snaplen).unwrap_or(c_int::MAX);
        let mut errbuf = [0 as c_char; 512];
        let name = CString::new(iface).map_err(|_| "bad interface name".to_string())?;
        // SAFETY: every libpcap call gets the handle it returned (checked
        // for null), valid C strings and a 512-byte error buffer
        // (PCAP_ERRBUF_SIZE is 256); the program is freed once.
        unsafe {
            let mut handle = (lib.create)(name.as_ptr(), errbuf.as_mut_ptr());
            if !handle.is_null() {
                (lib.set_snaplen)(handle, snap);
                if (lib.activate)(handle) < 0 {
                    (lib.close)(handle);
                    handle = std::ptr::null_mut();
                }
            }
            if handle.is_null() {
                handle = (lib.open_dead)(if raw_ip { DLT_RAW } else { DLT_EN10MB }, snap);
            }
            if handle.is_null() {
                return Err("libpcap could not open a handle to compile with".into());
            }
            let mut prog = BpfProgram {
                len: 0,
                insns: std::ptr::null_mut(),
            };
            // PCAP_NETMASK_UNKNOWN: the expression may not use broadcast tests.
            let rc = (lib.compile)(handle, &mut prog, expr.as_ptr(), 1, 0xffff_ffff);
            if rc != 0 {
                let msg = CStr::from_ptr((lib.geterr)(handle))
                    .to_string_lossy()
                    .into_owned();
                (lib.close)(handle);
                return Err(msg);
            }
            let program = if prog.insns.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(prog.insns, prog.len as usize).to_vec()
            };
            (lib.freecode)(&mut prog);
            (lib.close)(handle);
            if program.is_empty() {
                return Err("the compiler returned an empty program".into());
            }
            Ok(SocketFilter { program })
        }
    }

    /// Attaches the program to a socket.
    pub fn attach(&self, fd: &OwnedFd) -> io::Result<()> {
        let prog = libc::sock_fprog {
            len: self.program.len() as u16,
            filter: self.program.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: `prog` points at the program, which outlives the call;
        // the kernel copies it.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                (&prog as *const libc::sock_fprog).cast(),
                std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}
