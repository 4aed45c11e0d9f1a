//! Shortlist's measurement core (pure: no clock, file, network or environment).
pub mod error;
pub mod record;
pub mod slo;
