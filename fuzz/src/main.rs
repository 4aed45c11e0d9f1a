//! The AFL++ entry point: `shortlist-fuzz-afl <target>` runs one target of `shortlist-fuzz` on
//! the inputs AFL feeds it (persistent mode). Built and started by `scripts/fuzz`.

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(target) = shortlist_fuzz::target(&name) else {
        let names: Vec<&str> = shortlist_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
        eprintln!("usage: shortlist-fuzz-afl <target>, one of: {}", names.join(", "));
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| {
        target(data);
    });
}
