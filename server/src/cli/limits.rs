//! The request limits `engine serve` and `mock serve` share: `--max-body-bytes`,
//! `--body-timeout` and `--header-timeout`, parsed into `shortlist_http::Limits`.

use std::time::Duration;

use shortlist_http::{DEFAULT_MAX_BODY_BYTES, Limits};

#[derive(Debug, clap::Args)]
pub(crate) struct LimitArgs {
    /// The longest request body read, in bytes (a longer one is answered 413).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_BODY_BYTES, value_parser = bytes)]
    max_body_bytes: usize,
    /// Seconds a client has, once its headers are in, to send its whole body (then 408).
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = seconds)]
    body_timeout: Duration,
    /// Seconds a client has to send a request's headers, and a kept-alive connection may stay
    /// idle; the connection is closed after that.
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = seconds)]
    header_timeout: Duration,
}

impl LimitArgs {
    pub(crate) fn limits(&self) -> anyhow::Result<Limits> {
        Ok(Limits::new(
            self.max_body_bytes,
            self.body_timeout,
            self.header_timeout,
        )?)
    }
}

/// A positive number of bytes.
fn bytes(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("needs a number of bytes above 0: a limit of 0 refuses every body".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("needs a whole number of bytes above 0".into()),
    }
}

/// A positive number of seconds, fractions allowed, at most a day.
fn seconds(text: &str) -> Result<Duration, String> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 86_400.0 => Ok(Duration::from_secs_f64(s)),
        Ok(s) if s > 0.0 => Err(format!("{s} s is over a day; use at most 86400")),
        _ => Err("needs a number of seconds above 0 (such as 10 or 0.5)".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Probe {
        #[command(flatten)]
        limits: LimitArgs,
    }

    #[test]
    fn the_defaults_are_the_servers_defaults() {
        use clap::Parser as _;
        let probe = Probe::try_parse_from(["probe"]).expect("no options");
        assert_eq!(probe.limits.limits().expect("valid"), Limits::default());
        let probe = Probe::try_parse_from(["probe", "--header-timeout", "0"]);
        assert!(probe.is_err(), "a zero header timeout is refused");
    }

    #[test]
    fn nonsense_limits_are_refused_with_a_reason() {
        assert_eq!(bytes("4194304"), Ok(4 << 20));
        assert!(bytes("0").unwrap_err().contains("above 0"));
        assert!(bytes("-1").is_err());
        assert_eq!(seconds("0.5"), Ok(Duration::from_millis(500)));
        for nonsense in ["0", "-3", "NaN", "inf", "ten"] {
            assert!(seconds(nonsense).is_err(), "{nonsense}");
        }
        assert!(seconds("1e9").unwrap_err().contains("over a day"));
    }
}
