//! Importers of public traces — Azure LLM inference CSV, Mooncake JSONL, BurstGPT CSV — as
//! streaming iterators of validated requests: memory does not grow with the file (except one
//! counter per BurstGPT session, for turn numbers).

use std::collections::HashMap;
use std::io::BufRead;
use std::str::FromStr;

use serde::Deserialize;
use shortlist_measure::lines::{LineLimit, MAX_LINE_BYTES};

use crate::error::WorkloadError;
use crate::trace::{FieldError, Mode, Request, RequestFields, TraceHeader};

/// Tokens per Mooncake `hash_ids` block.
pub const MOONCAKE_BLOCK_SIZE: u32 = 512;

/// The public trace formats we import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Azure LLM inference traces: `TIMESTAMP,ContextTokens,GeneratedTokens`.
    Azure,
    /// Mooncake JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids`.
    Mooncake,
    /// BurstGPT CSV: `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`
    /// (and `Session ID`, `Elapsed time` in its third release).
    BurstGpt,
}

impl FromStr for Source {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "azure" => Ok(Source::Azure),
            "mooncake" => Ok(Source::Mooncake),
            "burstgpt" => Ok(Source::BurstGpt),
            other => Err(format!(
                "unknown trace format `{other}`: expected azure, mooncake or burstgpt"
            )),
        }
    }
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Azure => "azure",
            Source::Mooncake => "mooncake",
            Source::BurstGpt => "burstgpt",
        }
    }

    /// The header of a trace imported from this format (the caller adds the duration).
    pub fn header(self, name: &str) -> TraceHeader {
        let header =
            TraceHeader::new(name, Mode::Online).with_source(format!("{}:{name}", self.name()));
        match self {
            // MOONCAKE_BLOCK_SIZE is not 0, so this keeps the header as it is only in theory.
            Source::Mooncake => header
                .clone()
                .with_block_size(MOONCAKE_BLOCK_SIZE)
                .unwrap_or(header),
            _ => header,
        }
    }
}

/// Column positions in a CSV source, found by header name.
#[derive(Debug, Clone)]
struct Columns {
    time: usize,
    input: usize,
    output: usize,
    model: Option<usize>,
    total: Option<usize>,
    log_type: Option<usize>,
    session: Option<usize>,
    elapsed: Option<usize>,
}

#[derive(Debug)]
enum Reader<R> {
    // Boxed: the CSV reader carries its own buffers and is far larger than the JSONL state.
    Csv {
        reader: Box<csv::Reader<LineLimit<R>>>,
        cols: Columns,
        record: csv::StringRecord,
    },
    Jsonl {
        input: LineLimit<R>,
        buf: String,
        line: u64,
    },
}

/// One Mooncake line; other keys are ignored.
#[derive(Debug, Deserialize)]
struct MooncakeLine {
    timestamp: f64,
    input_length: u64,
    output_length: u64,
    #[serde(default)]
    hash_ids: Option<Vec<u64>>,
}

/// A streaming importer: an iterator of requests in file order, stopping at the first error.
#[derive(Debug)]
pub struct Importer<R> {
    from: Source,
    source_name: String,
    reader: Reader<R>,
    index: u64,
    /// Azure: the first row's instant in nanoseconds, which becomes t = 0.
    origin_ns: Option<i128>,
    last: Option<(f64, u64)>,
    turns: HashMap<String, u32>,
    done: bool,
}

impl<R: BufRead> Importer<R> {
    /// Start reading; for CSV formats this reads and checks the header row. A line longer than
    /// [`MAX_LINE_BYTES`] is refused with its number before it is held in memory.
    pub fn new(
        from: Source,
        input: R,
        source_name: impl Into<String>,
    ) -> Result<Self, WorkloadError> {
        Self::with_max_line_bytes(from, input, source_name, MAX_LINE_BYTES)
    }

    /// [`Importer::new`] with another limit on the length of a line, in bytes.
    pub fn with_max_line_bytes(
        from: Source,
        input: R,
        source_name: impl Into<String>,
        max_line_bytes: usize,
    ) -> Result<Self, WorkloadError> {
        let source_name = source_name.into();
        let input = LineLimit::new(input, max_line_bytes);
        let reader = match from {
            Source::Mooncake => Reader::Jsonl {
                input,
                buf: String::new(),
                line: 0,
            },
            Source::Azure | Source::BurstGpt => {
                let mut reader = csv::ReaderBuilder::new()
                    .has_headers(true)
                    .flexible(false)
                    .from_reader(input);
                let headers = reader
                    .headers()
                    .map_err(|e| csv_error(&source_name, 1, e))?
                    .clone();
                let find = |name: &str| headers.iter().position(|h| h.trim() == name);
                let need = |name: &str| {
                    find(name).ok_or_else(|| {
                        WorkloadError::at(
                            &source_name,
                            1,
                            name,
                            format!("missing column `{name}` in the header row"),
                        )
                    })
                };
                let cols = match from {
                    Source::Azure => Columns {
                        time: need("TIMESTAMP")?,
                        input: need("ContextTokens")?,
                        output: need("GeneratedTokens")?,
                        model: None,
                        total: None,
                        log_type: None,
                        session: None,
                        elapsed: None,
                    },
                    _ => Columns {
                        time: need("Timestamp")?,
                        input: need("Request tokens")?,
                        output: need("Response tokens")?,
                        model: find("Model"),
                        total: find("Total tokens"),
                        log_type: find("Log Type"),
                        session: find("Session ID"),
                        elapsed: find("Elapsed time"),
                    },
                };
                Reader::Csv {
                    reader: Box::new(reader),
                    cols,
                    record: csv::StringRecord::new(),
                }
            }
        };
        Ok(Importer {
            from,
            source_name,
            reader,
            index: 0,
            origin_ns: None,
            last: None,
            turns: HashMap::new(),
            done: false,
        })
    }

    fn next_request(&mut self) -> Result<Option<Request>, WorkloadError> {
        let src = self.source_name.clone();
        let (line, mut fields) = match &mut self.reader {
            Reader::Jsonl { input, buf, line } => {
                let row = loop {
                    buf.clear();
                    if input
                        .read_line(buf)
                        .map_err(|e| WorkloadError::io(&src, e))?
                        == 0
                    {
                        return Ok(None);
                    }
                    *line += 1;
                    if !buf.trim().is_empty() {
                        break parse_mooncake(buf, &src, *line)?;
                    }
                };
                let fields = RequestFields {
                    t: row.timestamp / 1000.0,
                    input_tokens: row.input_length,
                    output_tokens: row.output_length,
                    hash_ids: row.hash_ids,
                    ..Default::default()
                };
                (*line, fields)
            }
            Reader::Csv {
                reader,
                cols,
                record,
            } => {
                if !reader
                    .read_record(record)
                    .map_err(|e| csv_error(&src, 0, e))?
                {
                    return Ok(None);
                }
                let line = record.position().map_or(0, |p| p.line());
                let cell = |i: usize| record.get(i).unwrap_or("").trim();
                let at = |field: &str, why: String| WorkloadError::at(&src, line, field, why);
                let tokens = |i: usize, field: &str| {
                    cell(i).parse::<u64>().map_err(|_| {
                        at(
                            field,
                            format!("must be a non-negative integer, found \"{}\"", cell(i)),
                        )
                    })
                };
                let mut fields = RequestFields::default();
                match self.from {
                    Source::Azure => {
                        fields.input_tokens = tokens(cols.input, "ContextTokens")?;
                        fields.output_tokens = tokens(cols.output, "GeneratedTokens")?;
                        let ns =
                            parse_timestamp(cell(cols.time)).map_err(|why| at("TIMESTAMP", why))?;
                        let origin = *self.origin_ns.get_or_insert(ns);
                        fields.t = (ns - origin) as f64 / 1e9;
                    }
                    _ => {
                        fields.input_tokens = tokens(cols.input, "Request tokens")?;
                        fields.output_tokens = tokens(cols.output, "Response tokens")?;
                        fields.t = cell(cols.time).parse::<f64>().map_err(|_| {
                            at(
                                "Timestamp",
                                format!("not a number of seconds: \"{}\"", cell(cols.time)),
                            )
                        })?;
                        // A failed request in BurstGPT has 0 response tokens: kept, and marked.
                        fields.failed = fields.output_tokens == 0;
                        if let Some(i) = cols.model {
                            fields.attrs.insert("model".into(), cell(i).into());
                        }
                        if let Some(i) = cols.log_type {
                            fields.attrs.insert("log_type".into(), cell(i).into());
                        }
                        if let Some(i) = cols.total {
                            let total = tokens(i, "Total tokens")?;
                            if total != fields.input_tokens + fields.output_tokens {
                                return Err(at(
                                    "Total tokens",
                                    format!(
                                        "{total} is not Request tokens + Response tokens ({} + {})",
                                        fields.input_tokens, fields.output_tokens
                                    ),
                                ));
                            }
                        }
                        if let Some(i) = cols.elapsed.filter(|&i| !cell(i).is_empty()) {
                            let elapsed: f64 = cell(i).parse().map_err(|_| {
                                at("Elapsed time", format!("not a number: \"{}\"", cell(i)))
                            })?;
                            fields.attrs.insert("elapsed_s".into(), elapsed.into());
                        }
                        if let Some(i) = cols.session.filter(|&i| !cell(i).is_empty()) {
                            let session = cell(i).to_owned();
                            let turn = self.turns.entry(session.clone()).or_default();
                            *turn += 1;
                            fields.turn = Some(*turn);
                            fields.session = Some(session);
                        }
                    }
                }
                (line, fields)
            }
        };
        fields.id = format!("r{}", self.index);
        if self.from == Source::Azure || self.from == Source::BurstGpt {
            fields.modality = Some("text".into());
        }
        let time_field = match self.from {
            Source::Azure => "TIMESTAMP",
            Source::Mooncake => "timestamp",
            Source::BurstGpt => "Timestamp",
        };
        if let Some((prev, prev_line)) = self.last
            && fields.t < prev
        {
            return Err(WorkloadError::at(
                &src,
                line,
                time_field,
                format!(
                    "arrives {:.6} s before the row on line {prev_line}; a trace must be sorted by time \
                     (sort the source first)",
                    prev - fields.t
                ),
            ));
        }
        let t = fields.t;
        let req = Request::new(fields).map_err(|e: FieldError| {
            let field = if e.field == "t" {
                time_field.to_owned()
            } else {
                e.field
            };
            WorkloadError::at(&src, line, field, e.why)
        })?;
        self.last = Some((t, line));
        self.index += 1;
        Ok(Some(req))
    }
}

impl<R: BufRead> Iterator for Importer<R> {
    type Item = Result<Request, WorkloadError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.next_request().transpose();
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
    }
}

fn parse_mooncake(text: &str, source_name: &str, line: u64) -> Result<MooncakeLine, WorkloadError> {
    let mut de = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let msg = err.into_inner().to_string();
        let why = msg.split(" at line ").next().unwrap_or(&msg).to_owned();
        let missing = why
            .strip_prefix("missing field `")
            .and_then(|r| r.split('`').next())
            .map(str::to_owned);
        let field = missing.unwrap_or(if path == "." {
            "(line)".to_owned()
        } else {
            path
        });
        WorkloadError::at(source_name, line, field, why)
    })
}

fn csv_error(source_name: &str, fallback_line: u64, e: csv::Error) -> WorkloadError {
    let line = e.position().map_or(fallback_line, |p| p.line());
    match e.into_kind() {
        csv::ErrorKind::Io(io) => WorkloadError::io(source_name, io),
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => WorkloadError::at(
            source_name,
            line,
            "(row)",
            format!("has {len} fields, the header has {expected_len}"),
        ),
        csv::ErrorKind::Utf8 { err, .. } => {
            WorkloadError::at(source_name, line, "(row)", format!("not UTF-8: {err}"))
        }
        other => WorkloadError::at(source_name, line, "(row)", format!("{other:?}")),
    }
}

/// Parse `YYYY-MM-DD HH:MM:SS[.fraction][Z|±HH:MM]` (Azure writes 7 fractional digits, e.g.
/// `2023-11-16 18:15:46.6805900`) into nanoseconds since 1970-01-01 UTC, exactly. A time without
/// an offset is taken as UTC. Written by hand because this one fixed layout is all we need and
/// floating-point parsing of the fraction would lose the 100 ns ticks.
pub fn parse_timestamp(s: &str) -> Result<i128, String> {
    let bad = || format!("expected a time like \"2023-11-16 18:15:46.6805900\", found \"{s}\"");
    let b = s.as_bytes();
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b' ' || b[10] == b'T')
        || b[13] != b':'
        || b[16] != b':'
    {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        let part = s.get(r).ok_or_else(bad)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse::<i64>().map_err(|_| bad())
        } else {
            Err(bad())
        }
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(format!("\"{s}\" is not a valid calendar time"));
    }
    let mut rest = &s[19..];
    let mut nanos: i128 = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return Err(bad());
        }
        let value: i128 = frac[..digits].parse().map_err(|_| bad())?;
        nanos = value * 10i128.pow(9 - digits as u32);
        rest = &frac[digits..];
    }
    let offset_s: i64 = match rest {
        "" | "Z" => 0,
        _ => {
            let rb = rest.as_bytes();
            if rb.len() != 6 || !(rb[0] == b'+' || rb[0] == b'-') || rb[3] != b':' {
                return Err(bad());
            }
            let h = rest[1..3].parse::<i64>().map_err(|_| bad())?;
            let m = rest[4..6].parse::<i64>().map_err(|_| bad())?;
            let sign = if rb[0] == b'-' { -1 } else { 1 };
            sign * (h * 3600 + m * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    Ok(i128::from(secs) * 1_000_000_000 + nanos)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn import(from: Source, text: &str) -> Result<Vec<Request>, WorkloadError> {
        Importer::new(from, text.as_bytes(), "in")?.collect()
    }

    #[test]
    fn a_line_over_the_limit_is_refused_in_every_format() {
        let long = "9".repeat(200);
        // Mooncake has no header row: its first line is a request.
        for (from, text, line) in [
            (Source::Mooncake, format!("{{\"timestamp\": {long}}}\n"), 1),
            (
                Source::Azure,
                format!("TIMESTAMP,ContextTokens,GeneratedTokens\n{long},1,1\n"),
                2,
            ),
            (
                Source::BurstGpt,
                format!("Timestamp,Request tokens,Response tokens\n{long},1,1\n"),
                2,
            ),
        ] {
            let err = Importer::with_max_line_bytes(from, text.as_bytes(), "in", 100)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .unwrap_err();
            assert!(
                err.to_string()
                    .starts_with(&format!("in: line {line} is longer than 100 bytes")),
                "{from:?}: {err}"
            );
        }
    }

    #[test]
    fn timestamps_parse_exactly() {
        assert_eq!(parse_timestamp("1970-01-01 00:00:00").unwrap(), 0);
        assert_eq!(
            parse_timestamp("1970-01-02 00:00:01.5").unwrap(),
            86_401_500_000_000
        );
        let a = parse_timestamp("2023-11-16 18:15:46.6805900").unwrap();
        let b = parse_timestamp("2023-11-16 18:15:47.0000001").unwrap();
        assert_eq!(b - a, 319_410_100);
        assert_eq!(
            parse_timestamp("2024-05-10 00:00:00.009930+00:00").unwrap() % 1_000_000_000,
            9_930_000
        );
        assert_eq!(
            parse_timestamp("2023-11-16T18:15:46Z").unwrap(),
            1_700_158_546_000_000_000
        );
        for bad in [
            "",
            "2023-13-01 00:00:00",
            "2023-02-30 00:00:00",
            "2023-11-16 18:15:4x",
            "2023-11-16 18:15:46.",
            "x",
        ] {
            assert!(parse_timestamp(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn azure_rows_become_offsets_from_the_first() {
        let csv = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                   2023-11-16 18:15:46.6805900,374,44\n\
                   2023-11-16 18:15:50.9951690,396,109\n";
        let reqs = import(Source::Azure, csv).unwrap();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].t(), 0.0);
        assert!((reqs[1].t() - 4.314579).abs() < 1e-9);
        assert_eq!(reqs[1].input_tokens(), 396);
        let err = import(
            Source::Azure,
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-3,4\n",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "in:2: field `ContextTokens`: must be a non-negative integer, found \"-3\""
        );
        let err = import(Source::Azure, "TIME,ContextTokens,GeneratedTokens\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing column `TIMESTAMP`"), "{err}");
    }

    #[test]
    fn unsorted_sources_are_refused_with_the_line() {
        let csv = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                   2023-11-16 18:15:46.0,1,1\n\
                   2023-11-16 18:15:45.0,1,1\n";
        let err = import(Source::Azure, csv).unwrap_err().to_string();
        assert!(err.starts_with("in:3: field `TIMESTAMP`:"), "{err}");
    }

    #[test]
    fn mooncake_keeps_hash_ids() {
        let text = "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 5, \"hash_ids\": [0, 1, 2]}\n\
                    {\"timestamp\": 3000, \"input_length\": 600, \"output_length\": 7, \"hash_ids\": [0, 3]}\n";
        let reqs = import(Source::Mooncake, text).unwrap();
        assert_eq!(reqs[1].t(), 3.0);
        assert_eq!(reqs[1].hash_ids(), Some(&[0, 3][..]));
        assert_eq!(Source::Mooncake.header("x").block_size(), Some(512));
        let err = import(
            Source::Mooncake,
            "{\"timestamp\": 0, \"output_length\": 5}\n",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "in:1: field `input_length`: missing field `input_length`"
        );
    }

    #[test]
    fn burstgpt_keeps_and_marks_failures() {
        let csv = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                   5,ChatGPT,472,18,490,Conversation log\n\
                   45,GPT-4,1087,0,1087,API log\n";
        let reqs = import(Source::BurstGpt, csv).unwrap();
        assert_eq!(reqs.len(), 2);
        assert!(!reqs[0].failed());
        assert!(reqs[1].failed());
        assert_eq!(reqs[1].fields().attrs["model"], "GPT-4");
        let v3 = "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                  1.0,s1,2.5,ChatGPT,10,20,30,Conversation log\n\
                  2.0,s1,1.0,ChatGPT,40,0,40,Conversation log\n";
        let reqs = import(Source::BurstGpt, v3).unwrap();
        assert_eq!(reqs[1].session(), Some("s1"));
        assert_eq!(reqs[1].fields().turn, Some(2));
        let bad = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,1,2,4,API log\n";
        assert!(
            import(Source::BurstGpt, bad)
                .unwrap_err()
                .to_string()
                .contains("field `Total tokens`")
        );
        let ragged =
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT\n";
        assert!(
            import(Source::BurstGpt, ragged)
                .unwrap_err()
                .to_string()
                .starts_with("in:2:")
        );
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn arbitrary_rows_never_panic(rows in proptest::collection::vec("\\PC{0,60}", 0..6)) {
                let body = rows.join("\n");
                let heads = [
                    (Source::Azure, "TIMESTAMP,ContextTokens,GeneratedTokens\n"),
                    (Source::BurstGpt, "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"),
                    (Source::Mooncake, ""),
                ];
                for (from, head) in heads {
                    let text = format!("{head}{body}");
                    if let Ok(it) = Importer::new(from, text.as_bytes(), "x") {
                        for r in it {
                            let _ = r;
                        }
                    }
                }
            }

            #[test]
            fn any_azure_times_parse_or_fail_cleanly(s in "[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,10})?") {
                let _ = parse_timestamp(&s);
            }
        }
    }
}
