//! The one-page PDF, rendered in-process by typst: the committed template, the record's view as
//! `/view.json`, the three charts as `/ttft.svg`, `/goodput.svg` and `/pass-rate.svg`, and the
//! bundled fonts. No external program, no file system, no network: the [`World`] below serves
//! only those in-memory files.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use shortlist_study::record::SelectionRecord;
use typst::diag::{FileError, FileResult, SourceDiagnostic};
use typst::foundations::{Bytes, Datetime, Smart};
use typst::syntax::{FileId, RootedPath, Source, VirtualPath, VirtualRoot};
use typst::text::{Font, FontBook};
use typst::utils::LazyHash;
use typst::{Library, LibraryExt, World, WorldExt};
use typst_layout::PagedDocument;
use typst_pdf::PdfOptions;

use crate::ReportError;
use crate::charts::{PDF_MAX_CATEGORIES, charts};
use crate::view::view;

/// The template, committed beside the crate and compiled into it.
const TEMPLATE: &str = include_str!("../templates/record.typ");

/// The sans font of the page and the charts: DejaVu Sans Condensed, subset to Latin, Greek,
/// Cyrillic and the symbols the page uses (`fonts/LICENSE-DejaVu.txt`). Other scripts fall back
/// to typst-assets' fonts.
const SANS: &[u8] = include_bytes!("../fonts/DejaVuSansCondensed.ttf");
const SANS_BOLD: &[u8] = include_bytes!("../fonts/DejaVuSansCondensed-Bold.ttf");

/// Paper sizes of the PDF.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PaperSize {
    A4,
    Letter,
}

impl PaperSize {
    /// typst's name of the paper.
    fn typst_name(self) -> &'static str {
        match self {
            PaperSize::A4 => "a4",
            PaperSize::Letter => "us-letter",
        }
    }
}

/// A rendered record: the PDF and what it took.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub pdf: Vec<u8>,
    /// Pages typst laid out (always 1, or the render fails with [`ReportError::NotOnePage`]).
    pub pages: usize,
    /// Time to draw the three charts.
    pub charts_time: Duration,
    /// Time to compile and lay out the template.
    pub layout_time: Duration,
    /// Time to export the PDF.
    pub export_time: Duration,
    /// typst's warnings (e.g. a font family it could not find); empty for the committed template.
    pub warnings: Vec<String>,
}

/// Fonts are parsed once per process: the bundled sans, then typst-assets' (serif, mono, math).
static FONTS: LazyLock<(LazyHash<FontBook>, Vec<Font>)> = LazyLock::new(|| {
    let fonts: Vec<Font> = [SANS, SANS_BOLD]
        .into_iter()
        .chain(typst_assets::fonts())
        .flat_map(|data| Font::iter(Bytes::new(data)))
        .collect();
    (LazyHash::new(FontBook::from_fonts(&fonts)), fonts)
});

static LIBRARY: LazyLock<LazyHash<Library>> = LazyLock::new(|| LazyHash::new(Library::default()));

/// The fixed virtual paths: typst interns file ids globally in a 16-bit space, so a long-running
/// server must reuse the same few paths rather than mint new ones per render.
fn file_id(path: &str) -> Result<FileId, ReportError> {
    let vpath = VirtualPath::new(path).map_err(|e| ReportError::Data {
        field: path.to_owned(),
        why: format!("virtual path: {e:?}"),
    })?;
    Ok(RootedPath::new(VirtualRoot::Project, vpath).intern())
}

/// The in-memory world of one render.
struct RecordWorld {
    main: Source,
    files: HashMap<FileId, Bytes>,
}

impl World for RecordWorld {
    fn library(&self) -> &LazyHash<Library> {
        &LIBRARY
    }

    fn book(&self) -> &LazyHash<FontBook> {
        &FONTS.0
    }

    fn main(&self) -> FileId {
        self.main.id()
    }

    fn source(&self, id: FileId) -> FileResult<Source> {
        if id == self.main.id() {
            Ok(self.main.clone())
        } else {
            Err(FileError::AccessDenied)
        }
    }

    fn file(&self, id: FileId) -> FileResult<Bytes> {
        if id == self.main.id() {
            return Ok(Bytes::from_string(self.main.text().to_owned()));
        }
        self.files.get(&id).cloned().ok_or(FileError::AccessDenied)
    }

    fn font(&self, index: usize) -> Option<Font> {
        FONTS.1.get(index).cloned()
    }

    /// The page shows the record's own times, never today's: the same record gives the same page.
    fn today(&self, _offset: Option<typst::foundations::Duration>) -> Option<Datetime> {
        None
    }
}

/// Turn typst's diagnostics into one error naming the template line.
fn template_error(world: &RecordWorld, diags: &[SourceDiagnostic]) -> ReportError {
    let Some(first) = diags.first() else {
        return ReportError::Template {
            file: "record.typ".into(),
            line: 0,
            why: "typst failed without a diagnostic".into(),
        };
    };
    let line = world
        .range(first.span)
        .and_then(|r| world.main.lines().byte_to_line(r.start))
        .map_or(0, |l| l + 1);
    let mut why = first.message.to_string();
    for hint in &first.hints {
        why.push_str("; hint: ");
        why.push_str(&hint.v);
    }
    if diags.len() > 1 {
        why.push_str(&format!(" (+{} more)", diags.len() - 1));
    }
    ReportError::Template {
        file: "record.typ".into(),
        line,
        why,
    }
}

/// Render the record's page, with page count and timings.
pub fn render(record: &SelectionRecord, paper: PaperSize) -> Result<Rendered, ReportError> {
    let t0 = Instant::now();
    let charts = charts(record, PDF_MAX_CATEGORIES)?;
    let charts_time = t0.elapsed();

    let data =
        serde_json::to_vec(&view(record, paper.typst_name())).map_err(|e| ReportError::Data {
            field: "view".into(),
            why: e.to_string(),
        })?;
    let mut files = HashMap::new();
    files.insert(file_id("/view.json")?, Bytes::new(data));
    files.insert(file_id("/ttft.svg")?, Bytes::from_string(charts.ttft));
    files.insert(file_id("/goodput.svg")?, Bytes::from_string(charts.goodput));
    files.insert(
        file_id("/pass-rate.svg")?,
        Bytes::from_string(charts.pass_rate),
    );
    let world = RecordWorld {
        main: Source::new(file_id("/record.typ")?, TEMPLATE.to_owned()),
        files,
    };

    let t1 = Instant::now();
    let compiled = typst::compile::<PagedDocument>(&world);
    let warnings = compiled
        .warnings
        .iter()
        .map(|w| w.message.to_string())
        .collect();
    let doc = compiled
        .output
        .map_err(|diags| template_error(&world, &diags))?;
    let layout_time = t1.elapsed();
    let pages = doc.pages().len();
    if pages != 1 {
        return Err(ReportError::NotOnePage { pages });
    }

    let t2 = Instant::now();
    let options = PdfOptions {
        // A stable document id from the record's hash, so the same record gives the same bytes.
        ident: Smart::Custom(format!("shortlist-record-{}", record.record_sha256)),
        ..PdfOptions::default()
    };
    let pdf = typst_pdf::pdf(&doc, &options).map_err(|diags| ReportError::Pdf {
        why: diags
            .first()
            .map_or_else(|| "unknown".to_owned(), |d| d.message.to_string()),
    })?;
    let export_time = t2.elapsed();
    // comemo memoises across renders; keep the cache from growing in a long-running server.
    typst::comemo::evict(10);
    tracing::debug!(
        candidate = %record.identity.candidate,
        pages,
        bytes = pdf.len(),
        charts_ms = charts_time.as_secs_f64() * 1e3,
        layout_ms = layout_time.as_secs_f64() * 1e3,
        export_ms = export_time.as_secs_f64() * 1e3,
        "rendered the selection record"
    );
    Ok(Rendered {
        pdf,
        pages,
        charts_time,
        layout_time,
        export_time,
        warnings,
    })
}

/// The record as a one-page PDF (A4 or Letter).
pub fn render_pdf(record: &SelectionRecord, paper: PaperSize) -> Result<Vec<u8>, ReportError> {
    render(record, paper).map(|r| r.pdf)
}
