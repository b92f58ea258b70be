//! libpcap's filter compiler and interpreter, loaded at run time with
//! `dlopen`.
//!
//! flowsieve builds and runs without libpcap: only a capture filter (`live
//! -f`) and a trace filter (`replay -f`) need it (Debian: `apt-get install
//! libpcap0.8`). Both use libpcap's own compiler, so an expression means
//! exactly what it means to `tcpdump`, and the trace filter runs the
//! compiled program with libpcap's own interpreter (`pcap_offline_filter`),
//! so a record is kept exactly when `tcpdump -r FILE EXPR` keeps it.

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

/// One classic BPF instruction (`struct bpf_insn`, the same layout as the
/// kernel's `struct sock_filter`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BpfInsn {
    /// The opcode.
    pub code: u16,
    /// Jump offset when true.
    pub jt: u8,
    /// Jump offset when false.
    pub jf: u8,
    /// The constant operand.
    pub k: u32,
}

/// `struct bpf_program` of libpcap.
#[repr(C)]
struct BpfProgram {
    len: c_uint,
    insns: *mut BpfInsn,
}

/// `struct pcap_pkthdr` of libpcap (the interpreter reads only the lengths).
#[repr(C)]
struct PcapPktHdr {
    ts: libc::timeval,
    caplen: u32,
    len: u32,
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
type PcapOfflineFilter =
    unsafe extern "C" fn(*const BpfProgram, *const PcapPktHdr, *const u8) -> c_int;

/// The libpcap functions flowsieve uses.
pub(crate) struct Libpcap {
    create: PcapCreate,
    open_dead: PcapOpenDead,
    set_snaplen: PcapSetInt,
    activate: PcapActivate,
    compile: PcapCompile,
    geterr: PcapGetErr,
    freecode: PcapFreeCode,
    close: PcapClose,
    offline_filter: PcapOfflineFilter,
}

const LIBPCAP_NAMES: [&str; 3] = ["libpcap.so.1", "libpcap.so.0.8", "libpcap.so"];

/// libpcap's `DLT_EN10MB` (Ethernet).
pub(crate) const DLT_EN10MB: c_int = 1;
/// libpcap's `DLT_RAW` on Linux (raw IPv4 or IPv6), which files store as
/// `LINKTYPE_RAW` (101).
pub(crate) const DLT_RAW: c_int = 12;

/// `PCAP_NETMASK_UNKNOWN`: the expression may not use broadcast tests.
const NETMASK_UNKNOWN: c_uint = 0xffff_ffff;

impl Libpcap {
    /// The library, loaded once per process; the error says what to
    /// install.
    pub(crate) fn get() -> Result<&'static Libpcap, String> {
        static LIB: OnceLock<Result<Libpcap, String>> = OnceLock::new();
        LIB.get_or_init(Libpcap::load)
            .as_ref()
            .map_err(Clone::clone)
    }

    #[cfg(not(unix))]
    fn load() -> Result<Libpcap, String> {
        Err("-f needs libpcap, which this build loads only on Unix".into())
    }

    #[cfg(unix)]
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
                offline_filter: std::mem::transmute::<*mut c_void, PcapOfflineFilter>(sym(
                    "pcap_offline_filter",
                )?),
            })
        }
    }

    /// Compiles `expression` for frames of the live interface `iface` when
    /// a handle on it can be activated (so the program uses the kernel's
    /// VLAN ancillary fields where the kernel strips tags, as tcpdump's
    /// does), else for a dead handle of `fallback_dlt`. The error is the
    /// compiler's own message.
    pub(crate) fn compile_for_interface(
        &self,
        expression: &str,
        iface: &str,
        fallback_dlt: c_int,
        snaplen: u32,
    ) -> Result<Vec<BpfInsn>, String> {
        let name = CString::new(iface).map_err(|_| "bad interface name".to_string())?;
        let snap = c_int::try_from(snaplen).unwrap_or(c_int::MAX);
        let mut errbuf = [0 as c_char; 512];
        // SAFETY: every call gets the handle libpcap returned (checked for
        // null), a valid C string and a 512-byte error buffer
        // (PCAP_ERRBUF_SIZE is 256); the handle is closed once, by
        // `compile_on`.
        unsafe {
            let mut handle = (self.create)(name.as_ptr(), errbuf.as_mut_ptr());
            if !handle.is_null() {
                (self.set_snaplen)(handle, snap);
                if (self.activate)(handle) < 0 {
                    (self.close)(handle);
                    handle = std::ptr::null_mut();
                }
            }
            if handle.is_null() {
                handle = (self.open_dead)(fallback_dlt, snap);
            }
            self.compile_on(handle, expression)
        }
    }

    /// Compiles `expression` for records of the data link type `dlt` (a
    /// `DLT_*` value) cut at `snaplen`, as `tcpdump -r` compiles it for a
    /// file's link type.
    pub(crate) fn compile_for_dlt(
        &self,
        expression: &str,
        dlt: c_int,
        snaplen: u32,
    ) -> Result<Vec<BpfInsn>, String> {
        let snap = c_int::try_from(snaplen).unwrap_or(c_int::MAX);
        // SAFETY: pcap_open_dead takes plain integers; `compile_on` checks
        // the handle for null and closes it.
        unsafe { self.compile_on((self.open_dead)(dlt, snap), expression) }
    }

    /// Compiles on `handle` and closes it.
    ///
    /// # Safety
    /// `handle` is null or a handle libpcap returned and nothing else
    /// closes.
    unsafe fn compile_on(
        &self,
        handle: *mut c_void,
        expression: &str,
    ) -> Result<Vec<BpfInsn>, String> {
        if handle.is_null() {
            return Err("libpcap could not open a handle to compile with".into());
        }
        let expr = match CString::new(expression) {
            Ok(e) => e,
            Err(_) => {
                // SAFETY: the caller's handle, closed once.
                unsafe { (self.close)(handle) };
                return Err("the expression contains a NUL byte".into());
            }
        };
        let mut prog = BpfProgram {
            len: 0,
            insns: std::ptr::null_mut(),
        };
        // SAFETY: a live handle, a valid C string and a program struct
        // that pcap_compile fills; the error string is read before the
        // handle is closed; the program is copied out, then freed once.
        unsafe {
            let rc = (self.compile)(handle, &mut prog, expr.as_ptr(), 1, NETMASK_UNKNOWN);
            if rc != 0 {
                let msg = CStr::from_ptr((self.geterr)(handle))
                    .to_string_lossy()
                    .into_owned();
                (self.close)(handle);
                return Err(msg);
            }
            let program = if prog.insns.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(prog.insns, prog.len as usize).to_vec()
            };
            (self.freecode)(&mut prog);
            (self.close)(handle);
            if program.is_empty() {
                return Err("the compiler returned an empty program".into());
            }
            Ok(program)
        }
    }

    /// Runs `program` (a non-empty program from this library's compiler)
    /// over one record: whether `tcpdump` would keep it.
    pub(crate) fn matches(&self, program: &[BpfInsn], data: &[u8], wire_len: u32) -> bool {
        if program.is_empty() {
            return false;
        }
        let prog = BpfProgram {
            len: program.len() as c_uint,
            insns: program.as_ptr().cast_mut(),
        };
        let caplen = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let hdr = PcapPktHdr {
            ts: libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            },
            caplen,
            // The interpreter needs only caplen in bounds; a wire length
            // below it (a damaged record the reader let through) is
            // raised to it, as libpcap's own reader would see it.
            len: wire_len.max(caplen),
        };
        // SAFETY: `prog` points at `program`'s instructions (read only,
        // for the call), `hdr` is a valid header whose caplen is `data`'s
        // length, so every load the interpreter makes is bounds-checked
        // against that length.
        unsafe { (self.offline_filter)(&prog, &hdr, data.as_ptr()) != 0 }
    }
}
