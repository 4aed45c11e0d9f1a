//! Errors of the report: each names the chart or the template line it came from.

/// Why a chart or the PDF could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// plotters failed while drawing a chart (the SVG backend writes to a string, so this is rare).
    #[error("chart `{chart}`: {why}")]
    Chart { chart: &'static str, why: String },
    /// The typst template did not compile against this record.
    #[error("template {file}:{line}: {why}")]
    Template {
        file: String,
        line: usize,
        why: String,
    },
    /// The record could not be turned into the template's JSON.
    #[error("record field `{field}`: {why}")]
    Data { field: String, why: String },
    /// typst-pdf failed to export the laid-out page.
    #[error("PDF export: {why}")]
    Pdf { why: String },
    /// The layout ran past one page: the template's fitting failed (a bug, reported, not hidden).
    #[error("the record was laid out on {pages} pages; it must be exactly one")]
    NotOnePage { pages: usize },
}
