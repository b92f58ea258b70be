//! Kernel interface file systems, where no report or capture belongs.
//!
//! Why this is checked: under `/proc/sys`, `/sys` or a cgroup tree, a
//! "file" is a kernel setting, and the root that live capture needs may
//! write most of them. A report or event stream aimed there by a slip of
//! the keyboard either changes the setting (events written to
//! `/proc/sys/kernel/hostname` rename the machine) or is refused only by
//! the first write, after the whole run (`--json /proc/version` as root
//! passes an open for writing, then fails at the end). So such a target
//! is refused before any work, by the file system it lies on.

use std::path::Path;

/// The kernel interface file systems, by their `statfs(2)` magic number
/// (`linux/magic.h`), with the name an error gives.
///
/// `hugetlbfs` is here for a different reason: its files take `mmap`
/// only, so every `write(2)` of a report there fails.
#[cfg(target_os = "linux")]
const KERNEL_FILE_SYSTEMS: &[(u64, &str)] = &[
    (0x0000_9fa0, "procfs"),
    (0x6265_6572, "sysfs"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x0027_e0eb, "cgroupfs"),
    (0x6367_7270, "cgroup2"),
    (0x7363_6673, "securityfs"),
    (0x6265_6570, "configfs"),
    (0xcafe_4a11, "bpffs"),
    (0xde5e_81e4, "efivarfs"),
    (0x6165_676c, "pstore"),
    (0xf97c_ff8c, "selinuxfs"),
    (0x4341_5d53, "smackfs"),
    (0x6573_5543, "fusectl"),
    (0x4249_4e4d, "binfmt_misc"),
    (0x9584_58f6, "hugetlbfs"),
];

/// The name of the kernel interface file system `path` lies on, or `None`
/// for any other (and when `path` cannot be looked up: the write then
/// reports its own error).
///
/// ```
/// use flowsieve::report::kernel_file_system;
/// use std::path::Path;
/// # #[cfg(target_os = "linux")] {
/// assert_eq!(kernel_file_system(Path::new("/proc/version")), Some("procfs"));
/// assert_eq!(kernel_file_system(Path::new("/sys/kernel")), Some("sysfs"));
/// # }
/// let dir = tempfile::tempdir().unwrap();
/// assert_eq!(kernel_file_system(dir.path()), None);
/// assert_eq!(kernel_file_system(&dir.path().join("missing")), None);
/// ```
pub fn kernel_file_system(path: &Path) -> Option<&'static str> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::ffi::OsStrExt;
        let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
        let mut buf = std::mem::MaybeUninit::<libc::statfs>::uninit();
        // SAFETY: `c_path` is a NUL-terminated string that outlives the
        // call, and `buf` is valid for writes of one `statfs`, which the
        // call fills whole when it returns 0 (and only then is it read).
        let rc = unsafe { libc::statfs(c_path.as_ptr(), buf.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        // SAFETY: `statfs` returned 0, so it initialised `buf`.
        let magic = unsafe { buf.assume_init() }.f_type as u64 & 0xffff_ffff;
        KERNEL_FILE_SYSTEMS
            .iter()
            .find(|(m, _)| *m == magic)
            .map(|&(_, name)| name)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        None
    }
}
