//! One column specification per table, rendered both as text and as CSV.
//!
//! A stage's report section describes its tables as data: a [`Table`] of
//! typed [`Cell`]s under a static list of [`Column`]s. The text renderer
//! pads and rounds (`0.0123`, `-` where nothing was measured); the CSV
//! renderer writes full precision and empty cells. Neither knows which
//! stage a table came from, so a new stage's tables render in both forms
//! with no renderer change.

use std::fmt::Write as _;

/// One column: its CSV header, its text header and its text width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    /// The CSV header (a stable field name).
    pub key: &'static str,
    /// The text header.
    pub title: &'static str,
    /// The text width (the first column is left-aligned, the rest right).
    pub width: usize,
}

impl Column {
    /// A column whose text header is its key.
    pub const fn new(key: &'static str, width: usize) -> Column {
        Column {
            key,
            title: key,
            width,
        }
    }

    /// A column with its own text header.
    pub const fn titled(key: &'static str, title: &'static str, width: usize) -> Column {
        Column { key, title, width }
    }
}

/// One typed value.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// Text (quoted in CSV when it needs it).
    Text(String),
    /// A count; `None`: not measured.
    Count(Option<u64>),
    /// A rate or probability; text shows 4 decimals, `-` when `None`.
    Rate(Option<f64>),
    /// A cost; text shows 1 decimal (or 4 significant digits in exponent
    /// form past 16 characters).
    Cost(f64),
    /// A fraction shown as a percentage in text (CSV keeps the fraction).
    Percent(f64),
    /// Any other number, as Rust prints it (its shortest round-trip form),
    /// or in exponent form when that is shorter and the plain form is past
    /// 16 characters: an `--alpha` of 1e300 is `1e300`, not 301 digits.
    /// `-` (empty in CSV) when `None`.
    Number(Option<f64>),
    /// An estimated count; text shows `~` and the nearest integer, `-`
    /// when `None`.
    Estimate(Option<f64>),
}

impl Cell {
    fn text(&self) -> String {
        match self {
            Cell::Text(s) => s.clone(),
            Cell::Count(c) => c.map_or("-".into(), |v| v.to_string()),
            Cell::Rate(r) => r.map_or("-".into(), |v| format!("{v:.4}")),
            Cell::Cost(c) => cap_width(format!("{c:.1}"), || format!("{c:.3e}")),
            Cell::Percent(p) => format!("{:.1}%", 100.0 * p),
            Cell::Number(x) => x.map_or("-".into(), |v| {
                cap_width(v.to_string(), || format!("{v:e}"))
            }),
            Cell::Estimate(e) => e.map_or("-".into(), |v| format!("~{v:.0}")),
        }
    }

    fn csv(&self) -> String {
        match self {
            Cell::Text(s) => quote(s),
            Cell::Count(c) => c.map_or(String::new(), |v| v.to_string()),
            Cell::Rate(r) => r.map_or(String::new(), |v| v.to_string()),
            Cell::Cost(x) | Cell::Percent(x) => x.to_string(),
            Cell::Number(x) => x.map_or(String::new(), |v| v.to_string()),
            Cell::Estimate(e) => e.map_or(String::new(), |v| v.to_string()),
        }
    }
}

/// The widest plain number the text keeps before [`cap_width`] tries
/// exponent form.
const PLAIN_NUMBER_WIDTH: usize = 16;

/// `plain`, unless it is past [`PLAIN_NUMBER_WIDTH`] characters and the
/// exponent form is shorter. Rust prints an `f64` in full positional form
/// (1e300 as 301 digits), which in a padded text column pushes every cell
/// after it out of line; the CSV keeps the positional form, which any
/// reader parses back exactly.
fn cap_width(plain: String, exponent: impl FnOnce() -> String) -> String {
    if plain.len() <= PLAIN_NUMBER_WIDTH {
        return plain;
    }
    let e = exponent();
    if e.len() < plain.len() { e } else { plain }
}

/// Quotes a CSV text cell when it needs it.
fn quote(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// One row; a quiet row (a class with no traffic) is left out of the text
/// but kept in the CSV.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// One cell per column.
    pub cells: Vec<Cell>,
    /// Leave out of the text rendering.
    pub quiet: bool,
}

/// A table of a report section.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// The CSV file's stem (`heavy` for `heavy.csv`).
    pub name: &'static str,
    /// The columns.
    pub columns: &'static [Column],
    /// The rows.
    pub rows: Vec<Row>,
}

impl Table {
    /// An empty table.
    pub fn new(name: &'static str, columns: &'static [Column]) -> Table {
        Table {
            name,
            columns,
            rows: Vec::new(),
        }
    }

    /// Adds a row shown in text and CSV.
    pub fn push(&mut self, cells: Vec<Cell>) {
        self.rows.push(Row {
            cells,
            quiet: false,
        });
    }

    /// Adds a row; a quiet one is left out of the text.
    pub fn push_row(&mut self, cells: Vec<Cell>, quiet: bool) {
        self.rows.push(Row { cells, quiet });
    }

    /// The text rendering: a header line and the rows that are not quiet,
    /// each indented by two spaces.
    ///
    /// A column is as wide as its widest cell when that is past the
    /// column's own width: a class named in a `--classes` file can be any
    /// length, and a fixed width let a long name push every cell after it
    /// out of line with the header.
    pub fn render_text(&self, out: &mut String) {
        let title: Vec<String> = self.columns.iter().map(|c| c.title.to_string()).collect();
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .filter(|r| !r.quiet)
            .map(|r| r.cells.iter().map(Cell::text).collect())
            .collect();
        let widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, col)| {
                std::iter::once(&title)
                    .chain(&rows)
                    .filter_map(|cells| cells.get(i))
                    .map(|c| c.chars().count())
                    .fold(col.width, usize::max)
            })
            .collect();
        let line = |out: &mut String, cells: &[String]| {
            out.push_str("  ");
            for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                if i == 0 {
                    let _ = write!(out, "{c:<w$}");
                } else {
                    let _ = write!(out, "{c:>w$}");
                }
            }
            let trimmed = out.trim_end_matches(' ').len();
            out.truncate(trimmed);
            out.push('\n');
        };
        line(out, &title);
        for cells in &rows {
            line(out, cells);
        }
    }

    /// The table as a CSV file: `(NAME.csv, contents)`, what `--csv DIR`
    /// writes for it.
    pub fn csv_file(&self) -> (String, String) {
        (format!("{}.csv", self.name), self.render_csv())
    }

    /// The CSV rendering: the keys, then every row.
    pub fn render_csv(&self) -> String {
        let mut s = self
            .columns
            .iter()
            .map(|c| c.key)
            .collect::<Vec<_>>()
            .join(",");
        s.push('\n');
        for r in &self.rows {
            let cells: Vec<String> = r.cells.iter().map(Cell::csv).collect();
            s.push_str(&cells.join(","));
            s.push('\n');
        }
        s
    }
}
