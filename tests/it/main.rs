//! The workspace's one integration-test binary: drives the real `shortlist` binary and the crates
//! together. One module per capability.

mod architecture;
mod browser;
mod catalog;
mod changes;
mod device;
mod engine;
mod engines;
mod eval;
mod guided;
mod hostile;
mod judge;
mod loadgen;
mod measure;
mod quality;
mod report;
mod reproduce;
mod schedule;
mod stopping;
mod store;
mod study;
mod support;
mod trace;
mod verdicts;
mod web;
mod workers;
mod workloads;
