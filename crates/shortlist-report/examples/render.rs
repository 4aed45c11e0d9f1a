//! Render the sample and extreme records to PDFs and SVGs in a folder, for looking at them
//! (`pdftoppm -png -r 110 out/sample-a4.pdf out/sample-a4`):
//! `cargo run -p shortlist-report --example render -- OUT_DIR`.

use std::path::PathBuf;

use shortlist_report::charts::PDF_MAX_CATEGORIES;
use shortlist_report::sample::{extreme_record, sample_record};
use shortlist_report::{PaperSize, charts, render};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "out".into()));
    std::fs::create_dir_all(&out)?;
    for (name, record) in [("sample", sample_record()), ("extreme", extreme_record())] {
        let c = charts(&record, PDF_MAX_CATEGORIES)?;
        std::fs::write(out.join(format!("{name}-ttft.svg")), &c.ttft)?;
        std::fs::write(out.join(format!("{name}-goodput.svg")), &c.goodput)?;
        std::fs::write(out.join(format!("{name}-pass-rate.svg")), &c.pass_rate)?;
        for (paper, tag) in [(PaperSize::A4, "a4"), (PaperSize::Letter, "letter")] {
            let r = render(&record, paper)?;
            let path = out.join(format!("{name}-{tag}.pdf"));
            std::fs::write(&path, &r.pdf)?;
            println!(
                "{}: {} page(s), {} bytes; charts {:?}, layout {:?}, export {:?}",
                path.display(),
                r.pages,
                r.pdf.len(),
                r.charts_time,
                r.layout_time,
                r.export_time
            );
        }
    }
    Ok(())
}
