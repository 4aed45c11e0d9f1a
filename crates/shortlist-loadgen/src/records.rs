//! Writing `shortlist.records.v1` as the run goes: one line per attempt, flushed whenever the
//! writer catches up, so that a stopped run leaves a valid file with everything measured so far.
//!
//! The header comes first but its window end is only known when the run ends, so the header line
//! is written padded with spaces and rewritten in place at the end (JSON ignores the padding).

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use shortlist_measure::record::{Attempt, RecordsHeader};

use crate::error::LoadgenError;

/// One record line: the measurement core's [`Attempt`] plus what only the load generator knows.
#[derive(Debug, Clone, Serialize)]
pub struct RecordLine {
    /// The attempt as `shortlist analyze` reads it.
    #[serde(flatten)]
    pub attempt: Attempt<'static>,
    /// Time to first *output* token (not reasoning): arrival of the first answer chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_output_s: Option<f64>,
    /// Open loop with a cap: how long the attempt waited for a free slot before it was sent.
    /// Its schedule lag (sent − scheduled) includes this wait, which is the cap's, not the
    /// client's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cap_queue_s: Option<f64>,
}

/// The header line: the core header plus run details (calibration, stop reason, options).
#[derive(Debug, Clone, Serialize)]
pub struct HeaderLine {
    /// The header `shortlist analyze` reads.
    #[serde(flatten)]
    pub header: RecordsHeader,
    /// Everything else the run wants to say about itself.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// Room kept after the first header for the final one (a longer window end, added fields).
const HEADER_SLACK: usize = 512;

/// A records file being written.
#[derive(Debug)]
pub struct RecordsFile {
    path: PathBuf,
    out: BufWriter<File>,
    header_room: usize,
    lines: u64,
}

impl RecordsFile {
    /// Create `path` and write `header`.
    pub fn create(path: &Path, header: &HeaderLine) -> Result<Self, LoadgenError> {
        let file = File::create(path).map_err(|e| LoadgenError::io(path, e))?;
        let text = serde_json::to_string(header).expect("a header serializes");
        let header_room = text.len() + HEADER_SLACK;
        let mut this = RecordsFile {
            path: path.to_owned(),
            out: BufWriter::new(file),
            header_room,
            lines: 0,
        };
        this.write_padded(&text)?;
        Ok(this)
    }

    fn write_padded(&mut self, text: &str) -> Result<(), LoadgenError> {
        let padding = self.header_room.saturating_sub(text.len());
        let io = |e| LoadgenError::io(&self.path, e);
        self.out.write_all(text.as_bytes()).map_err(io)?;
        self.out
            .write_all(" ".repeat(padding).as_bytes())
            .map_err(io)?;
        self.out.write_all(b"\n").map_err(io)
    }

    /// Append one attempt.
    pub fn append(&mut self, line: &RecordLine) -> Result<(), LoadgenError> {
        serde_json::to_writer(&mut self.out, line)
            .map_err(|e| LoadgenError::io(&self.path, e.into()))?;
        self.out
            .write_all(b"\n")
            .map_err(|e| LoadgenError::io(&self.path, e))?;
        self.lines += 1;
        Ok(())
    }

    /// Push buffered lines to the file.
    pub fn flush(&mut self) -> Result<(), LoadgenError> {
        self.out
            .flush()
            .map_err(|e| LoadgenError::io(&self.path, e))
    }

    /// Attempts written so far.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Rewrite the header in place with its final values and close the file.
    pub fn finish(mut self, header: &HeaderLine) -> Result<(), LoadgenError> {
        self.flush()?;
        let text = serde_json::to_string(header).expect("a header serializes");
        if text.len() > self.header_room {
            return Err(LoadgenError::option(
                "records header",
                format!(
                    "the final header ({} bytes) outgrew the room kept for it ({} bytes)",
                    text.len(),
                    self.header_room
                ),
            ));
        }
        self.out
            .seek(SeekFrom::Start(0))
            .map_err(|e| LoadgenError::io(&self.path, e))?;
        self.write_padded(&text)?;
        self.flush()?;
        self.out
            .get_ref()
            .sync_data()
            .map_err(|e| LoadgenError::io(&self.path, e))
    }
}
