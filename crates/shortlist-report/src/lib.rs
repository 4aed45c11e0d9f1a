//! The one-page selection record as SVG charts and an in-process PDF.
//!
//! - [`charts`] draws the three charts with plotters' SVG backend: the TTFT distribution, goodput
//!   and throughput against offered load with the knee, and pass rate per category with 95 %
//!   intervals. The same SVG strings serve the web page and the PDF.
//! - [`view`] formats and bounds the record for the page (clipped names, "+N more" lists, break
//!   opportunities in hashes), so that the page never grows past one.
//! - [`pdf`] renders the committed typst template (`templates/record.typ`) in-process, with the
//!   view as JSON, the charts as SVG images and a bundled sans font: [`render_pdf`] returns the
//!   bytes of exactly one A4 or Letter page, or an error.
//!
//! Principal types: a [`SelectionRecord`](shortlist_study::record::SelectionRecord) (from the pure
//! crate) goes in; [`Charts`] (three SVG strings), [`view::View`] (what the template prints) and
//! [`Rendered`] (the PDF bytes, its page count and timings) come out. [`sample`] holds an ordinary
//! and an extreme record for tests and demos.
//!
//! ```
//! use shortlist_report::{PaperSize, charts, render, sample::sample_record};
//!
//! let record = sample_record();
//! let svg = charts(&record, usize::MAX).unwrap();
//! assert!(svg.ttft.starts_with("<svg") && svg.goodput.contains("offered load (req/s)"));
//! let page = render(&record, PaperSize::A4).unwrap();
//! assert!(page.pdf.starts_with(b"%PDF"));
//! assert_eq!(page.pages, 1);
//! ```
//!
//! Only this crate knows the PDF library (ARCHITECTURE.md); it is heavy to compile, so nothing
//! else in the workspace should depend on it except the binary.

pub mod charts;
mod error;
pub mod overlay;
pub mod pdf;
pub mod sample;
pub mod text;
pub mod view;
pub mod workload;

pub use charts::{Charts, charts};
pub use error::ReportError;
pub use pdf::{PaperSize, Rendered, render, render_pdf};
