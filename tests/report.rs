//! `report`'s atomic writes: the file a report leaves is the one a shell's
//! `>` would have left (mode, owner, links followed), and a write that
//! fails part-way leaves the old file whole, also under `/dev/shm`. And
//! its tables: a number keeps its column narrow in text and exact in CSV,
//! and a long cell widens its column for every line.

use flowsieve::report::{
    Cell, Column, Table, write_atomically, write_atomically_to_path, write_atomically_with,
};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// The process's umask, read from `/proc` (setting it to read it back
/// would change it for the tests running beside this one).
fn umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .expect("a Umask line (Linux 4.7 and later)");
    u32::from_str_radix(line.trim(), 8).expect("an octal umask")
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn a_new_report_gets_the_umask_mode_and_one_written_over_keeps_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.json");
    write_atomically(&path, b"{}\n").unwrap();
    assert_eq!(
        mode(&path),
        0o666 & !umask(),
        "a new report has the mode `>` would give it"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let before = std::fs::metadata(&path).unwrap();
    write_atomically(&path, b"{\"again\":1}\n").unwrap();
    let after = std::fs::metadata(&path).unwrap();
    assert_ne!(
        before.ino(),
        after.ino(),
        "renamed over, not written in place"
    );
    assert_eq!(mode(&path), 0o640, "the old file's mode, umask or not");
    assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
    assert_eq!(std::fs::read(&path).unwrap(), b"{\"again\":1}\n");
}

#[test]
fn a_link_is_followed_and_stays_a_link() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("runs")).unwrap();
    let today = dir.path().join("runs/today.json");
    std::fs::write(&today, b"old").unwrap();
    let latest = dir.path().join("latest.json");
    std::os::unix::fs::symlink("runs/today.json", &latest).unwrap();
    // A chain: a link to the link, by an absolute path.
    let current = dir.path().join("current.json");
    std::os::unix::fs::symlink(&latest, &current).unwrap();
    write_atomically(&current, b"new\n").unwrap();
    for link in [&latest, &current] {
        assert!(
            std::fs::symlink_metadata(link)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{} was replaced",
            link.display()
        );
    }
    assert_eq!(std::fs::read(&today).unwrap(), b"new\n");
    // The plots' path-taking writer follows it the same way.
    write_atomically_to_path(&latest, |tmp| {
        std::fs::write(tmp, b"plot").map_err(|e| e.to_string())
    })
    .unwrap();
    assert!(std::fs::symlink_metadata(&latest).unwrap().is_symlink());
    assert_eq!(std::fs::read(&today).unwrap(), b"plot");
    // A link to nothing yet: the file it names is created, as `>` does.
    let dangling = dir.path().join("next.json");
    std::os::unix::fs::symlink("runs/tomorrow.json", &dangling).unwrap();
    write_atomically(&dangling, b"{}\n").unwrap();
    assert!(std::fs::symlink_metadata(&dangling).unwrap().is_symlink());
    assert_eq!(
        std::fs::read(dir.path().join("runs/tomorrow.json")).unwrap(),
        b"{}\n"
    );
    // No temporary file is left beside any of them.
    for d in [dir.path(), &dir.path().join("runs")] {
        let left: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}

/// A write that fails part-way, here in an ordinary directory and under
/// `/dev/shm` (a plain file in the `/dev` tree), leaves the old file whole.
#[test]
fn a_write_that_fails_part_way_leaves_the_old_file_also_under_dev_shm() {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = vec![dir.path().join("r.json")];
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        paths.push(shm.join(format!(
            "flowsieve-test-{}-{nanos}.json",
            std::process::id()
        )));
    } else {
        crate::common::skip::skipped(
            "a_write_that_fails_part_way",
            "no /dev/shm here: the part on a tmpfs is not checked",
        );
    }
    for path in &paths {
        std::fs::write(path, b"the old report").unwrap();
        let failed = write_atomically_with(path, |w| {
            w.write_all(b"half a")?;
            w.flush()?;
            Err::<(), _>(std::io::Error::other("the disk filled"))
        });
        let kept = std::fs::read(path).unwrap();
        if path.starts_with(shm) {
            let _ = std::fs::remove_file(path);
        }
        assert!(failed.is_err());
        assert_eq!(
            kept,
            b"the old report",
            "{} was written over in place",
            path.display()
        );
    }
}

const NUMBER_COLUMNS: &[Column] = &[
    Column::new("name", 4),
    Column::new("number", 8),
    Column::new("cost", 8),
];

/// The text rows of a one-table rendering, header left out.
fn text_rows(table: &Table) -> Vec<Vec<String>> {
    let mut out = String::new();
    table.render_text(&mut out);
    out.lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

#[test]
fn a_number_past_sixteen_characters_is_shown_in_exponent_form_and_kept_whole_in_csv() {
    let mut t = Table::new("numbers", NUMBER_COLUMNS);
    let rows: [(f64, f64); 6] = [
        (1e300, 2.5e300),
        (1e-12, 0.04),
        (1_733_400_000.5, 123_456_789_012.75),
        (0.5, 1e15),
        (-3e200, -1e16),
        (0.1 + 0.2, 7.0),
    ];
    for (n, c) in rows {
        t.push(vec![
            Cell::Text("r".into()),
            Cell::Number(Some(n)),
            Cell::Cost(c),
        ]);
    }
    t.push(vec![
        Cell::Text("r".into()),
        Cell::Number(None),
        Cell::Cost(0.0),
    ]);
    let text = text_rows(&t);
    let shown: Vec<(&str, &str)> = text
        .iter()
        .map(|r| (r[1].as_str(), r[2].as_str()))
        .collect();
    assert_eq!(
        shown,
        [
            ("1e300", "2.500e300"),
            // 14 characters: under the cap, so positional.
            ("0.000000000001", "0.0"),
            // A Unix time with a fraction stays positional, as does a
            // cost of 14 characters; one of 18 does not.
            ("1733400000.5", "123456789012.8"),
            ("0.5", "1.000e15"),
            ("-3e200", "-1.000e16"),
            // 19 characters, but the exponent form is no shorter.
            ("0.30000000000000004", "7.0"),
            ("-", "0.0"),
        ]
    );
    // The CSV keeps every digit, and parses back to the same value.
    let csv = t.render_csv();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("name,number,cost"));
    for ((n, c), line) in rows.iter().zip(lines.by_ref()) {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f[1].parse::<f64>().unwrap(), *n, "{line}");
        assert_eq!(f[2].parse::<f64>().unwrap(), *c, "{line}");
        assert!(!f[1].contains('e'), "{line}");
    }
    assert_eq!(lines.next(), Some("r,,0"));
}

/// A cell wider than its column widens the column for every line, header
/// included, so the cells after it stay under their titles: a class
/// named in a `--classes` file can be any length, and a fixed width let a
/// long name push its row out of line. A quiet row (left out of the text)
/// does not widen anything.
#[test]
fn a_cell_wider_than_its_column_widens_it_for_every_line() {
    let mut t = Table::new("numbers", NUMBER_COLUMNS);
    t.push(vec![
        Cell::Text("web".into()),
        Cell::Number(Some(1.0)),
        Cell::Cost(2.0),
    ]);
    t.push(vec![
        Cell::Text("class-name-of-thirty-three-chars!".into()),
        Cell::Number(Some(12_345_678_901.0)),
        Cell::Cost(3.0),
    ]);
    t.push_row(
        vec![
            Cell::Text("a quiet row with a name longer still".into()),
            Cell::Number(Some(0.5)),
            Cell::Cost(4.0),
        ],
        true,
    );
    let mut out = String::new();
    t.render_text(&mut out);
    assert_eq!(
        out,
        "  name                                   number     cost\n\
         \x20 web                                         1      2.0\n\
         \x20 class-name-of-thirty-three-chars! 12345678901      3.0\n"
    );
}
