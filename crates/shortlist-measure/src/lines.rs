//! A line-length limit for line-oriented readers: [`LineLimit`] wraps any `BufRead` and fails
//! with a clear error once a line grows past its limit, before the line is held in memory.
//!
//! Records, traces and the trace importers read one line at a time, so their memory stays flat
//! however long the file is, but only as long as each line is short: a file of 100 MB with no
//! newline (a trace of a billion requests written on one line, a JSON document pretty-printed
//! without line breaks, a binary file) would otherwise be read whole into one `String`.

use std::fmt;
use std::io::{self, BufRead, Read};

/// The longest line, in bytes, that the line-oriented readers accept unless told otherwise.
///
/// A record line grows with its chunks (about 20 bytes each) and a trace line with its prompt or
/// `hash_ids`; 32 MiB holds a million-chunk record or a prompt of several million tokens, far
/// beyond any real line, while a reader never holds more than this (plus what the line parses
/// into) at once. Readers take another limit where a user could need more.
pub const MAX_LINE_BYTES: usize = 32 << 20;

/// Why a line was refused: the error inside the `io::Error` that [`LineLimit`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineTooLong {
    /// The 1-based line number.
    pub line: u64,
    /// The limit in bytes, without the newline.
    pub limit: usize,
}

impl fmt::Display for LineTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {} is longer than {} bytes, the longest line this reader accepts \
             (is the file line-delimited? one record or request per line)",
            self.line, self.limit
        )
    }
}

impl std::error::Error for LineTooLong {}

/// A `BufRead` that refuses lines longer than a limit (newline excluded). Reading past the limit
/// fails with an `io::Error` of kind `InvalidData` that carries [`LineTooLong`].
#[derive(Debug)]
pub struct LineLimit<R> {
    inner: R,
    limit: usize,
    /// Bytes of the current line handed out so far.
    current: usize,
    /// The current line's number, from 1.
    line: u64,
    /// Length of the slice last returned by `fill_buf` when it ends with a newline.
    ends_line: Option<usize>,
}

impl<R: BufRead> LineLimit<R> {
    /// Wrap `inner`, refusing lines longer than `limit` bytes.
    pub fn new(inner: R, limit: usize) -> Self {
        Self {
            inner,
            limit,
            current: 0,
            line: 1,
            ends_line: None,
        }
    }

    /// The limit this reader enforces.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

impl<R: BufRead> BufRead for LineLimit<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        let (limit, current, line) = (self.limit, self.current, self.line);
        let buf = self.inner.fill_buf()?;
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) if current + i <= limit => {
                self.ends_line = Some(i + 1);
                Ok(&buf[..=i])
            }
            _ if buf.is_empty() => {
                self.ends_line = None;
                Ok(buf)
            }
            _ => {
                self.ends_line = None;
                let room = limit - current;
                if room == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        LineTooLong { line, limit },
                    ));
                }
                Ok(&buf[..buf.len().min(room)])
            }
        }
    }

    fn consume(&mut self, amount: usize) {
        if self.ends_line == Some(amount) {
            self.current = 0;
            self.line += 1;
        } else {
            self.current += amount;
        }
        self.ends_line = None;
        self.inner.consume(amount);
    }
}

impl<R: BufRead> Read for LineLimit<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = {
            let buf = self.fill_buf()?;
            let n = buf.len().min(out.len());
            out[..n].copy_from_slice(&buf[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &[u8], limit: usize, capacity: usize) -> io::Result<Vec<String>> {
        let inner = io::BufReader::with_capacity(capacity, text);
        let mut reader = LineLimit::new(inner, limit);
        let mut out = Vec::new();
        let mut line = String::new();
        while reader.read_line(&mut line)? > 0 {
            out.push(std::mem::take(&mut line));
        }
        Ok(out)
    }

    #[test]
    fn lines_within_the_limit_pass_unchanged_whatever_the_buffer() {
        let text = b"abcd\n\nefgh\nij";
        for capacity in [1, 2, 3, 5, 64] {
            assert_eq!(
                lines(text, 4, capacity).unwrap(),
                ["abcd\n", "\n", "efgh\n", "ij"],
                "capacity {capacity}"
            );
        }
    }

    #[test]
    fn a_line_one_byte_too_long_is_refused_with_its_number() {
        for capacity in [1, 2, 7, 64] {
            let err = lines(b"abcd\nabcde\nx\n", 4, capacity).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidData);
            let why = err
                .get_ref()
                .and_then(|e| e.downcast_ref::<LineTooLong>())
                .expect("a LineTooLong inside");
            assert_eq!(
                why,
                &LineTooLong { line: 2, limit: 4 },
                "capacity {capacity}"
            );
        }
        // The last line, without a newline, is held to the same limit.
        assert!(lines(b"abcd\nabcde", 4, 3).is_err());
    }

    #[test]
    fn a_gigabyte_without_a_newline_is_refused_after_the_limit() {
        // An endless reader: the refusal must come from the limit, not from the end of the input.
        let endless = io::repeat(b'x');
        let mut reader = LineLimit::new(io::BufReader::new(endless), 1 << 20);
        let mut line = Vec::new();
        let err = reader.read_until(b'\n', &mut line).unwrap_err();
        assert!(
            err.to_string()
                .contains("line 1 is longer than 1048576 bytes"),
            "{err}"
        );
        assert_eq!(line.len(), 1 << 20);
    }
}
